/* launch/cli/cli.c - argument parsing shared by the `moonlet` subcommands. */
#include "cli.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#ifdef MOON_WITH_HF
#include "moonlet/hf.h"
#endif

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int moon_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "moonlet %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see moonlet %s --help)\n", cmd);
    return 2;
}

const char *moon_cli_model_path(const char *cmd, const char *path, char *buf, size_t cap)
{
#ifdef MOON_WITH_HF
    if (moon_hf_is_checkpoint(path)) {
        if (moon_hf_cached(path, buf, cap) != MOON_OK) {
            fprintf(stderr, "moonlet %s: %s did not convert (see the log above)\n", cmd, path);
            return NULL;
        }
        return buf;
    }
#else
    (void)cmd, (void)buf, (void)cap;
#endif
    return path;
}

void moon_cli_on_stop_signals(void (*handler)(int))
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a read or write the signal interrupts goes on */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int moon_cli_parse(const char *cmd, const char *usage, const moon_cli_table_t *tables,
                   size_t n_tables, int max_args, int argc, char **argv, moon_config_t **cfg_p)
{
    static moon_log_config_t log; /* the parser borrows it until destroyed */
    moon_config_t           *cfg = NULL;
    moon_status_t            status;
    int                      rc;

    status = moon_config_create(&cfg);
    for (size_t i = 0; i <= n_tables && status == MOON_OK; i++) {
        /* every command takes the log's options too, after its own */
        const moon_config_table_t *table = i < n_tables ? tables[i].table : &moon_log_config_table;
        void                      *base  = i < n_tables ? tables[i].base : &log;
        status                           = moon_config_defaults(table, base);
        if (status == MOON_OK) {
            status = moon_config_add(cfg, table, base);
        }
    }
    if (status == MOON_OK) {
        status = moon_config_parse(cfg, argc, argv);
    }
    if (status == MOON_OK) {
        moon_log_set_level(log.level + 1); /* error..trace are 1..5 */
    }
    if (status == MOON_ERR_INVALID_PARAM) {
        rc = moon_cli_usage_error(cmd, "%s", moon_config_error(cfg));
    } else if (status != MOON_OK) {
        fprintf(stderr, "moonlet %s: %s\n", cmd, moon_status_str(status));
        rc = 1;
    } else if (moon_config_help_requested(cfg)) {
        fputs(usage, stdout);
        fputc('\n', stdout);
        moon_config_print_help(cfg, stdout);
        rc = 0;
    } else if (moon_config_n_args(cfg) > max_args) {
        rc = moon_cli_usage_error(cmd, "unexpected argument '%s'", moon_config_arg(cfg, max_args));
    } else {
        *cfg_p = cfg;
        return -1;
    }
    moon_config_destroy(cfg);
    return rc;
}

moon_status_t moon_cli_read_text(const char *cmd, const char *path, char **text_p)
{
    FILE  *f    = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    char  *text = NULL, *grown;
    size_t len = 0, cap = 0, n;

    if (f == NULL) {
        fprintf(stderr, "moonlet %s: %s: %s\n", cmd, path, strerror(errno));
        return errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO;
    }
    do {
        if (cap - len < 4096) {
            cap   = cap == 0 ? 65536 : cap * 2;
            grown = moon_realloc(text, cap + 1);
            if (grown == NULL) {
                moon_free(text);
                if (f != stdin) {
                    fclose(f);
                }
                return MOON_ERR_NO_MEMORY;
            }
            text = grown;
        }
        n = fread(text + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    if (ferror(f)) {
        fprintf(stderr, "moonlet %s: reading %s: %s\n", cmd, path, strerror(errno));
        moon_free(text);
        if (f != stdin) {
            fclose(f);
        }
        return MOON_ERR_IO;
    }
    if (f != stdin) {
        fclose(f);
    }
    text[len] = '\0';
    *text_p   = text;
    return MOON_OK;
}
