/* launch/cli/cli_plugin.h - the plugin flags of `moonlet serve` and `moonlet
 * replay --sim`: --plugin PATH.so[:ARGS] and --place NAME=WHERE, each
 * repeatable, taken out of argv before the option tables parse the rest
 * (a table row holds one value). Single-threaded, at start-up. */
#ifndef MOON_LAUNCH_CLI_PLUGIN_H
#define MOON_LAUNCH_CLI_PLUGIN_H

#include "cli.h"

#define MOON_CLI_PLUGIN_MAX 32

typedef struct {
    const char *plugins[MOON_CLI_PLUGIN_MAX]; /* borrowed from argv */
    uint32_t    n_plugins;
    const char *places[MOON_CLI_PLUGIN_MAX];
    uint32_t    n_places;
    /* the flags' help: its table's rows, shown by --help (never parsed) */
    const char *plugin_help, *place_help;
} moon_cli_plugins_t;

/* The table that documents both flags in --help (its struct: a
 * moon_cli_plugins_t, whose help fields it writes). */
extern const moon_config_table_t moon_cli_plugin_table;

/* Removes every --plugin/--place (and its value) from argv, keeping the
 * order of the rest; *argc shrinks. Returns -1 to go on, or 2 after a usage
 * error (printed: a flag without its value, too many). */
int moon_cli_plugin_take(const char *cmd, int *argc, char **argv, moon_cli_plugins_t *pl);

/* Loads each plugin and records each placement (plugin_host.h), in order.
 * The first failure is returned (logged with its cause). */
moon_status_t moon_cli_plugin_load(const moon_cli_plugins_t *pl);

#endif /* MOON_LAUNCH_CLI_PLUGIN_H */
