/* launch/cli/cli_plugin.c - --plugin and --place (cli_plugin.h). */
#include "cli_plugin.h"

#include "plugin_host.h"

#include <stdio.h>
#include <string.h>

#define PL(_f) MOON_CONFIG_AT(moon_cli_plugins_t, _f)
static const moon_config_field_t plugin_fields[] = {
    {"plugin", MOON_CONFIG_STRING, PL(plugin_help), NULL,
     "load a plugin on every rank: path.so[:args] (repeatable; moonlet/plugin.h)", 0, 0, 0, 0,
     NULL},
    {"place", MOON_CONFIG_STRING, PL(place_help), NULL,
     "run plugin actor name on ranks: name=0,2-3 | all | conductor | prefill | decode | store "
     "(repeatable)",
     0, 0, 0, 0, NULL},
    MOON_CONFIG_END,
};
#undef PL
const moon_config_table_t moon_cli_plugin_table = {"plugins", "plugins and where their actors run",
                                                   NULL, plugin_fields};

/* argv[*i] is --NAME or --NAME=VALUE: its value (advancing *i past a
 * separate one), or NULL when it is not that flag. *missing: no value. */
static const char *flag_value(const char *name, int argc, char **argv, int *i, int *missing)
{
    size_t n = strlen(name);

    *missing = 0;
    if (strncmp(argv[*i], "--", 2) != 0 || strncmp(argv[*i] + 2, name, n) != 0) {
        return NULL;
    }
    if (argv[*i][2 + n] == '=') {
        return argv[*i] + 3 + n;
    }
    if (argv[*i][2 + n] != '\0') {
        return NULL;
    }
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int moon_cli_plugin_take(const char *cmd, int *argc, char **argv, moon_cli_plugins_t *pl)
{
    int out = 1;

    memset(pl, 0, sizeof(*pl));
    for (int i = 1; i < *argc; i++) {
        int         missing_plugin, missing_place;
        const char *plugin = flag_value("plugin", *argc, argv, &i, &missing_plugin);
        const char *place  = plugin == NULL && !missing_plugin
                                 ? flag_value("place", *argc, argv, &i, &missing_place)
                                 : NULL;

        if (missing_plugin || (plugin == NULL && missing_place)) {
            return moon_cli_usage_error(cmd, "--%s needs a value",
                                        missing_plugin ? "plugin" : "place");
        }
        if (plugin == NULL && place == NULL) {
            argv[out++] = argv[i];
            continue;
        }
        if ((plugin != NULL && pl->n_plugins == MOON_CLI_PLUGIN_MAX) ||
            (place != NULL && pl->n_places == MOON_CLI_PLUGIN_MAX)) {
            return moon_cli_usage_error(cmd, "more than %d --plugin or --place flags",
                                        MOON_CLI_PLUGIN_MAX);
        }
        if (plugin != NULL) {
            pl->plugins[pl->n_plugins++] = plugin;
        } else {
            pl->places[pl->n_places++] = place;
        }
    }
    *argc     = out;
    argv[out] = NULL;
    return -1;
}

moon_status_t moon_cli_plugin_load(const moon_cli_plugins_t *pl)
{
    moon_status_t status = MOON_OK;

    for (uint32_t i = 0; i < pl->n_plugins && status == MOON_OK; i++) {
        status = moon_plugin_load(pl->plugins[i]);
    }
    for (uint32_t i = 0; i < pl->n_places && status == MOON_OK; i++) {
        status = moon_plugin_place(pl->places[i]);
    }
    return status;
}
