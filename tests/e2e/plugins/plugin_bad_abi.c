/* tests/e2e/plugins/plugin_bad_abi.c - a plugin built for another plugin ABI:
 * the host must refuse it before calling anything. */
#include "moonlet/plugin.h"

static moon_status_t bad_abi_init(moon_plugin_host_t *host, const char *args)
{
    (void)host;
    (void)args;
    return MOON_OK;
}

MOON_API const moon_plugin_entry_t moon_plugin_entry = {MOON_PLUGIN_ABI_VERSION + 41, "bad-abi",
                                                        bad_abi_init, NULL};
