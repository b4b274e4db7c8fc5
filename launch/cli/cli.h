/* launch/cli/cli.h - what every `moonlet` subcommand does with its arguments:
 * parse them through configuration tables (moonlet/config.h), print --help
 * on stdout, report a bad flag on stderr naming it. Single-threaded. */
#ifndef MOON_LAUNCH_CLI_H
#define MOON_LAUNCH_CLI_H

#include "moonlet/config.h"

#include <stddef.h>

/* One table and the struct its rows write. */
typedef struct {
    const moon_config_table_t *table;
    void                      *base;
} moon_cli_table_t;

/* Fills each struct with its table's defaults (fields outside the table are
 * left as they are: zero the struct first, or call its _default()), then parses the environment
 * (tables with a prefix) and argv (argv[0] is the subcommand's name) over all
 * tables, in order (flags of any table anywhere on the line), and the log's
 * table last (--log-level, applied here). usage is the
 * first line(s) of --help ("usage: moonlet generate --model M.gguf ...\n").
 * max_args: how many positional arguments the command takes.
 * Returns -1 to go on, with *cfg_p the parser (destroy it after the last use
 * of string options, which borrow argv); else the exit status, everything
 * printed and nothing to destroy: 0 after --help (stdout), 2 after a bad
 * argument (stderr: "moonlet CMD: <what is wrong, naming the flag>"), 1 when
 * out of memory. */
int moon_cli_parse(const char *cmd, const char *usage, const moon_cli_table_t *tables,
                   size_t n_tables, int max_args, int argc, char **argv, moon_config_t **cfg_p);

/* Prints "moonlet CMD: <message>" and "(see moonlet CMD --help)" on stderr;
 * returns 2, the exit status of a usage error. */
int moon_cli_usage_error(const char *cmd, const char *fmt, ...) MOON_PRINTF(2, 3);

/* Reads all of path ("-": stdin) into a NUL-terminated moon_malloc'd string
 * (*text_p, the caller frees it with moon_free). MOON_ERR_NOT_FOUND /
 * MOON_ERR_IO: cannot open or read (printed on stderr, naming path);
 * MOON_ERR_NO_MEMORY. */
moon_status_t moon_cli_read_text(const char *cmd, const char *path, char **text_p);

/* The GGUF that --model path names: path itself, or for a Hugging Face
 * checkpoint folder (a build with the converter) its converted copy
 * DIR/moonlet.gguf, converted once and reused while newer than the
 * checkpoint (moon_hf_cached), its path written to buf (cap bytes). NULL
 * after "moonlet CMD: DIR did not convert" on stderr (the cause logged). */
const char *moon_cli_model_path(const char *cmd, const char *path, char *buf, size_t cap);

/* Installs handler for SIGINT and SIGTERM, kept for every later signal.
 * signal() is not enough: under -std=c11 glibc gives it System V semantics
 * (SA_RESETHAND), so a second SIGTERM (Slurm signals every process of a job,
 * then its script passes the signal on) found the default action and killed
 * a server midway through its drain with status 143. */
void moon_cli_on_stop_signals(void (*handler)(int));

#endif /* MOON_LAUNCH_CLI_H */
