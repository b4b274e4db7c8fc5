/* launch/cli/cmd_config.c - `moonlet config`: every option of every library's
 * configuration table with its value here (environment, flags) and where the
 * value came from; --markdown prints the README's option list instead. */
#include "cli.h"
#include "commands.h"

#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/model.h"
#include "gateway.h"
#include "gw_batches.h"
#ifdef MOON_WITH_BATCH
#include "batch.h"
#endif
#include "moonlet/serve_cluster.h"

#include <stdio.h>

typedef struct {
    int markdown;
} config_opts_t;

static const moon_config_field_t config_fields[] = {
    {"markdown", MOON_CONFIG_BOOL, MOON_CONFIG_AT(config_opts_t, markdown), .dflt = "0",
     .doc = "print the libraries' options as the README's markdown tables (defaults)"},
    MOON_CONFIG_END,
};
static const moon_config_table_t config_table = {"config", "moonlet config", NULL, config_fields};

int moon_cmd_config(int argc, char **argv)
{
    config_opts_t            o;
    moon_dist_config_t       dist;
    moon_engine_tuning_t     tuning;
    moon_serve_config_t      serve;
    moon_gateway_config_t    gateway;
    moon_gw_batches_config_t batches;
#ifdef MOON_WITH_BATCH
    moon_batch_config_t batch;
#endif
    moon_log_config_t log;
    /* config's own table, then every library's; moon_cli_parse adds the
     * log's itself (the last row here is for --markdown) */
    const moon_cli_table_t tables[] = {{&config_table, &o},
                                       {&moon_dist_config_table, &dist},
                                       {&moon_engine_tuning_table, &tuning},
                                       {&moon_serve_config_table, &serve},
                                       {&moon_gateway_config_table, &gateway},
                                       {&moon_gw_batches_config_table, &batches},
#ifdef MOON_WITH_BATCH
                                       {&moon_batch_config_table, &batch},
#endif
                                       {&moon_log_config_table, &log}};
    moon_config_t *cfg = NULL, *libs = NULL;
    int            rc;

    rc = moon_cli_parse("config",
                        "usage: moonlet config [--markdown] [--OPTION VALUE...]\n"
                        "  prints every option of every library: name, value, source "
                        "(default, env, caller, flag)\n",
                        tables, MOON_ARRAY_SIZE(tables) - 1, 0, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    if (!o.markdown) {
        printf("%-8s %-24s %-20s %s\n", "table", "option", "value", "source");
        moon_config_print_values(cfg, stdout);
        moon_config_destroy(cfg);
        return 0;
    }
    /* the libraries' tables at their defaults (config's own is not one) */
    rc = moon_config_create(&libs) == MOON_OK ? 0 : 1;
    for (size_t i = 1; i < MOON_ARRAY_SIZE(tables) && rc == 0; i++) {
        if (moon_config_defaults(tables[i].table, tables[i].base) != MOON_OK ||
            moon_config_add(libs, tables[i].table, tables[i].base) != MOON_OK) {
            rc = 1;
        }
    }
    if (rc == 0) {
        moon_config_print_markdown(libs, stdout);
    }
    moon_config_destroy(libs);
    moon_config_destroy(cfg);
    return rc;
}
