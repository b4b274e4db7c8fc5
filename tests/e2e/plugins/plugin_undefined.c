/* tests/e2e/plugins/plugin_undefined.c - a plugin that needs a function the
 * host does not have (built against other headers): it must not load. */
#include "moonlet/plugin.h"

moon_status_t moon_plugin_no_such_function(moon_plugin_host_t *host);

static moon_status_t undefined_init(moon_plugin_host_t *host, const char *args)
{
    (void)args;
    return moon_plugin_no_such_function(host);
}

MOON_PLUGIN_DEFINE("undefined", undefined_init, NULL);
