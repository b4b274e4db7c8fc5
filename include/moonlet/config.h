/* moonlet/config.h - configuration tables (UCX ucs_config style). Each library
 * declares its options once, as a table of rows (name, type, default, one-line
 * doc, range or choices), each writing one field of the library's config
 * struct. The same table reads the environment (MOON_<NAME>), parses command
 * line flags (--name value, --name=value, --flag / --no-flag), prints --help,
 * prints the values with where each came from (`moonlet config`), and prints
 * the README's option list (markdown). Single-threaded: use a moon_config_t
 * from one thread; tables are const and shared.
 *
 * Declaring a table (the library's header exports the table and the struct):
 *
 *   static const moon_config_field_t dist_fields[] = {
 *       {"slice-bytes", MOON_CONFIG_SIZE, MOON_CONFIG_AT(moon_dist_config_t, slice_bytes),
 *        .dflt = "0", .doc = "bulk slice size (0: the engine's choice)", .max = 1ull << 30},
 *       {"dist-images", MOON_CONFIG_BOOL, MOON_CONFIG_AT(moon_dist_config_t, images),
 *        .dflt = "1", .doc = "send message images to ranks of this host"},
 *       MOON_CONFIG_END,
 *   };
 *   const moon_config_table_t moon_dist_config_table = {
 *       "dist", "distributed runtime", "MOON_", dist_fields};
 *
 * Parsing a command line over several tables (moonlet serve = serve + dist):
 *
 *   serve_opts_t so; moon_dist_config_t dc; moon_config_t *cfg;
 *   moon_config_defaults(&serve_table, &so);              // every field at its default
 *   moon_config_defaults(&moon_dist_config_table, &dc);   // (not _default(): see below)
 *   dc.credits = 64;                                      // an explicit caller setting
 *   moon_config_create(&cfg);
 *   moon_config_add(cfg, &serve_table, &so);
 *   moon_config_add(cfg, &moon_dist_config_table, &dc);
 *   if (moon_config_parse(cfg, argc, argv) != MOON_OK) {
 *       fprintf(stderr, "moonlet serve: %s\n", moon_config_error(cfg)); exit 2;
 *   }
 *   if (moon_config_help_requested(cfg)) { moon_config_print_help(cfg, stdout); exit 0; }
 *   n = moon_config_n_args(cfg); first = moon_config_arg(cfg, 0);   // positionals
 *   ...
 *   moon_config_destroy(cfg);   // after the last use of string fields from argv
 *
 * (A `moonlet` subcommand does all of this, --log-level included, with one
 * call: moon_cli_parse() in launch/cli/cli.h.)
 *
 * Precedence: flag > caller > environment > default. A caller's explicit
 * setting is a field whose value differs from the row's default when the
 * table is added (the caller fills defaults first, then sets fields): the
 * environment overwrites only fields still at their default, flags overwrite
 * everything. To pin a field to a value equal to its default against the
 * environment, use moon_config_set() (it records the caller as the source).
 *
 * Libraries: a library's moon_<lib>_config_default() fills the table's
 * defaults and then the environment (moon_config_load_env), so a program
 * without a command line gets MOON_* variables and its own settings win over
 * them; the library never reads the environment again (a config passed to
 * it is authoritative). A command line instead fills moon_config_defaults(),
 * adds the library's table and parses (environment and flags, with sources
 * recorded), then passes the struct on. */
#ifndef MOONLET_CONFIG_H
#define MOONLET_CONFIG_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

#include <stdio.h>

MOON_EXTERN_C_BEGIN

typedef enum {
    MOON_CONFIG_BOOL,   /* int, 0 or 1: 1/0 true/false yes/no on/off; --name alone is 1,
                         * --no-name is 0 (a bool flag never takes the next argument) */
    MOON_CONFIG_U32,    /* uint32_t, decimal digits only, in [min, max] */
    MOON_CONFIG_U64,    /* uint64_t, decimal digits only, in [min, max] */
    MOON_CONFIG_DOUBLE, /* double, finite, in [dmin, dmax] */
    MOON_CONFIG_SIZE,   /* uint64_t bytes: digits and an optional binary unit k m g t
                         * (256k = 262144, 1m, 2g; a trailing b or ib allowed), in [min, max] */
    MOON_CONFIG_STRING, /* const char *, borrowed from argv, the environment or the row's
                         * default text (never copied, never freed); NULL default: NULL */
    MOON_CONFIG_ENUM,   /* int: the index in choices of the value (case-insensitive) */
} moon_config_type_t;

/* Where a value came from, in increasing precedence. */
typedef enum {
    MOON_CONFIG_SRC_DEFAULT,
    MOON_CONFIG_SRC_ENV,
    MOON_CONFIG_SRC_CALLER,
    MOON_CONFIG_SRC_FLAG,
} moon_config_source_t;

/* One option: name, type and MOON_CONFIG_AT(struct, field) by position, the
 * rest designated (.dflt .doc, and .min .max for integers and sizes, .dmin
 * .dmax for doubles, .choices for enums; designators keep -Wextra quiet about
 * the fields a row leaves out). Ranges: the lower bound always applies (0 unless set, so
 * negative doubles need .dmin); an upper bound of 0 means none (the type's). */
typedef struct {
    const char *name; /* flag --name; env <prefix>NAME ('-' as '_');
                       * lowercase letters, digits, '-' */
    moon_config_type_t type;
    size_t             offset; /* of the field in the config struct */
    size_t             size;   /* of the field: checked against type when added */
    const char        *dflt;   /* default, as text parsed like any value */
    const char        *doc;    /* one line, lowercase */
    uint64_t           min, max;
    double             dmin, dmax;
    const char *const *choices; /* MOON_CONFIG_ENUM: NULL-terminated names */
} moon_config_field_t;

#define MOON_CONFIG_AT(_type, _field) offsetof(_type, _field), sizeof(((_type *)0)->_field)
#define MOON_CONFIG_END                                                                            \
    {                                                                                              \
        NULL, MOON_CONFIG_BOOL, 0, 0, NULL, NULL, 0, 0, 0, 0, NULL                                 \
    }

typedef struct {
    const char                *name;       /* section, e.g. "dist"; heads help and markdown */
    const char                *doc;        /* one line */
    const char                *env_prefix; /* "MOON_": rows read MOON_<NAME>; NULL: flags only */
    const moon_config_field_t *fields;     /* ends with MOON_CONFIG_END */
} moon_config_table_t;

typedef struct moon_config moon_config_t; /* opaque: tables + structs + sources */

/* Writes every row's default into base. MOON_ERR_INVALID_PARAM: a row of the
 * table is malformed (its default does not parse, its size does not match its
 * type); logged, naming the row. */
MOON_API moon_status_t moon_config_defaults(const moon_config_table_t *table, void *base);

/* A parser with no tables. MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_config_create(moon_config_t **cfg_p);
MOON_API void          moon_config_destroy(moon_config_t *cfg); /* NULL: no-op */

/* Adds a table and the struct its rows write (borrowed until destroy). Each
 * field whose value differs from its default is recorded as set by the caller.
 * MOON_ERR_INVALID_PARAM: malformed table, or a name already added (the error
 * says which); MOON_ERR_NO_RESOURCE: more than 16 tables; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_config_add(moon_config_t *cfg, const moon_config_table_t *table,
                                       void *base);

/* Applies the environment (fields still at their default) and then argv[1..argc)
 * (argv[0], the program or subcommand name, is skipped; argc 0 reads the
 * environment only). "--" ends the options; any other argument not starting
 * with '-' (or "-" itself) is positional and kept in order. --help and -h set
 * moon_config_help_requested(). Flags are looked up in every table added.
 * MOON_ERR_INVALID_PARAM: an unknown flag, a missing or malformed value, a
 * value out of range; moon_config_error() names the flag (or variable) and the
 * accepted range or choices. On error the structs may be partly written.
 * argv's strings are borrowed by string fields: keep argv alive. */
MOON_API moon_status_t moon_config_parse(moon_config_t *cfg, int argc, char **argv);

/* Sets name (any table's) from text, recording the caller as its source.
 * MOON_ERR_NOT_FOUND: no such option; MOON_ERR_INVALID_PARAM: a bad value.
 * value is borrowed by a string field. */
MOON_API moon_status_t moon_config_set(moon_config_t *cfg, const char *name, const char *value);

/* The last error's message ("" if none); valid until the next call on cfg. */
MOON_API const char *moon_config_error(const moon_config_t *cfg);
MOON_API int         moon_config_help_requested(const moon_config_t *cfg);
/* Positional arguments of the last parse, in order; arg(i) is NULL past the end. */
MOON_API int         moon_config_n_args(const moon_config_t *cfg);
MOON_API const char *moon_config_arg(const moon_config_t *cfg, int i);
/* Where name's value came from; -1 if no table has it. */
MOON_API int         moon_config_source(const moon_config_t *cfg, const char *name);
MOON_API const char *moon_config_source_str(moon_config_source_t source); /* never NULL */

/* Every option of every table, grouped by table: flag, type or choices, doc,
 * default, range, environment variable. */
MOON_API void moon_config_print_help(const moon_config_t *cfg, FILE *f);
/* Every option with its current value and its source: "name value source". */
MOON_API void moon_config_print_values(const moon_config_t *cfg, FILE *f);
/* The README's option list: a markdown table per table (defaults, not values). */
MOON_API void moon_config_print_markdown(const moon_config_t *cfg, FILE *f);

/* One-shot for a library reading its own options: base's fields still at their
 * default take the environment's value. MOON_ERR_INVALID_PARAM: a malformed
 * variable (logged, naming it and the accepted values); MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_config_load_env(const moon_config_table_t *table, void *base);
/* What a library's moon_<lib>_config_default() does: every field at its
 * default, then the environment over them. On a malformed variable base
 * holds the defaults alone (a half-read environment never escapes) and the
 * status is moon_config_load_env's; MOON_ERR_INVALID_PARAM for a bad table. */
MOON_API moon_status_t moon_config_from_env(const moon_config_table_t *table, void *base);

/* A variable owned by another program (the MPI launcher's OMPI_COMM_WORLD_SIZE,
 * UCX_TLS...): read here so Moonlet's own options can only come from tables.
 * NULL if unset. */
MOON_API const char *moon_config_foreign_env(const char *name);

MOON_EXTERN_C_END

#endif /* MOONLET_CONFIG_H */
