/* tests/e2e/plugins/plugin_no_entry.c - a shared library without the entry
 * symbol: not a moonlet plugin. */
#include "moonlet/plugin.h"

MOON_API int not_a_plugin(void);
int          not_a_plugin(void)
{
    return 1;
}
