/* runtime/base/config.c - configuration tables: strict value parsing, the
 * environment and command-line layers, help, values and markdown printing.
 * Nothing here is on a hot path; a moon_config_t is used by one thread. */
#include "moonlet/config.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CONFIG_MAX_TABLES 16
#define CONFIG_ERR_MAX 320
#define CONFIG_NAME_MAX 64

typedef struct {
    const moon_config_table_t *table;
    void                      *base;
    uint8_t                   *sources; /* one moon_config_source_t per row */
    size_t                     n_rows;
} config_section_t;

struct moon_config {
    config_section_t sections[CONFIG_MAX_TABLES];
    size_t           n_sections;
    const char     **args; /* positionals of the last parse (argv's strings) */
    int              n_args;
    int              help;
    char             error[CONFIG_ERR_MAX];
};

/* A parsed value, before it is stored into its field. */
typedef union {
    int         i;
    uint32_t    u32;
    uint64_t    u64;
    double      d;
    const char *s;
} config_value_t;

static const char *const source_names[] = {"default", "env", "caller", "flag"};

MOON_PRINTF(2, 3) static void set_error(moon_config_t *cfg, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cfg->error, sizeof(cfg->error), fmt, ap);
    va_end(ap);
}

/* ---- rows: type sizes, ranges, strict parsing ----------------------------- */
static size_t type_size(moon_config_type_t type)
{
    switch (type) {
    case MOON_CONFIG_BOOL:
    case MOON_CONFIG_ENUM:
        return sizeof(int);
    case MOON_CONFIG_U32:
        return sizeof(uint32_t);
    case MOON_CONFIG_U64:
    case MOON_CONFIG_SIZE:
        return sizeof(uint64_t);
    case MOON_CONFIG_DOUBLE:
        return sizeof(double);
    case MOON_CONFIG_STRING:
        return sizeof(const char *);
    }
    return 0;
}

static uint64_t row_max(const moon_config_field_t *row)
{
    if (row->max != 0) {
        return row->max;
    }
    return row->type == MOON_CONFIG_U32 ? UINT32_MAX : UINT64_MAX;
}

/* "256k" for a multiple of a binary unit, else the plain number. */
static void format_size(uint64_t v, char *buf, size_t len)
{
    static const char units[] = "kmgt";
    int               u       = -1;

    while (v != 0 && u < 3 && (v & 1023) == 0) {
        v >>= 10;
        u++;
    }
    if (u < 0) {
        snprintf(buf, len, "%llu", (unsigned long long)v);
    } else {
        snprintf(buf, len, "%llu%c", (unsigned long long)v, units[u]);
    }
}

static void format_bound(const moon_config_field_t *row, uint64_t v, char *buf, size_t len)
{
    if (row->type == MOON_CONFIG_SIZE) {
        format_size(v, buf, len);
    } else {
        snprintf(buf, len, "%llu", (unsigned long long)v);
    }
}

/* What the row accepts, for errors and help: "an integer in [0, 100]". */
static void describe_accepted(const moon_config_field_t *row, char *buf, size_t len)
{
    char lo[32], hi[32];
    int  n = 0;

    switch (row->type) {
    case MOON_CONFIG_BOOL:
        snprintf(buf, len, "a boolean (1/0, true/false, yes/no, on/off)");
        return;
    case MOON_CONFIG_STRING:
        snprintf(buf, len, "a string");
        return;
    case MOON_CONFIG_ENUM:
        n = snprintf(buf, len, "one of");
        for (size_t i = 0; row->choices[i] != NULL && n < (int)len; i++) {
            n += snprintf(buf + n, len - (size_t)n, "%s%s", i == 0 ? " " : "|", row->choices[i]);
        }
        return;
    case MOON_CONFIG_U32:
    case MOON_CONFIG_U64:
    case MOON_CONFIG_SIZE:
        format_bound(row, row->min, lo, sizeof(lo));
        format_bound(row, row_max(row), hi, sizeof(hi));
        n = snprintf(buf, len, "%s",
                     row->type == MOON_CONFIG_SIZE ? "a size (digits, optional unit k m g t)"
                                                   : "an integer");
        if (row->max != 0 && row->max != (row->type == MOON_CONFIG_U32 ? UINT32_MAX : UINT64_MAX)) {
            snprintf(buf + n, len - (size_t)n, " in [%s, %s]", lo, hi);
        } else {
            snprintf(buf + n, len - (size_t)n, " >= %s", lo);
        }
        return;
    case MOON_CONFIG_DOUBLE:
        if (row->dmax != 0) {
            snprintf(buf, len, "a finite number in [%g, %g]", row->dmin, row->dmax);
        } else {
            snprintf(buf, len, "a finite number >= %g", row->dmin);
        }
        return;
    }
    snprintf(buf, len, "?");
}

/* Digits only (no sign, space or base prefix), no overflow; *end_p: after them. */
static int parse_digits(const char *text, uint64_t *v_p, const char **end_p)
{
    char              *end;
    unsigned long long v;

    if (!isdigit((unsigned char)text[0])) {
        return 0;
    }
    errno = 0;
    v     = strtoull(text, &end, 10);
    if (errno == ERANGE) {
        return 0;
    }
    *v_p   = v;
    *end_p = end;
    return 1;
}

static int parse_size(const char *text, uint64_t *v_p)
{
    const char *end;
    uint64_t    v;
    int         shift = 0;

    if (!parse_digits(text, &v, &end)) {
        return 0;
    }
    switch (tolower((unsigned char)*end)) {
    case 'k':
        shift = 10;
        break;
    case 'm':
        shift = 20;
        break;
    case 'g':
        shift = 30;
        break;
    case 't':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift != 0) {
        end++;
        if (tolower((unsigned char)*end) == 'i' && tolower((unsigned char)end[1]) == 'b') {
            end += 2;
        } else if (tolower((unsigned char)*end) == 'b') {
            end++;
        }
    } else if (tolower((unsigned char)*end) == 'b') {
        end++;
    }
    if (*end != '\0' || (shift != 0 && v > (UINT64_MAX >> shift))) {
        return 0;
    }
    *v_p = v << shift;
    return 1;
}

static int parse_bool(const char *text, int *v_p)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[]  = {"0", "false", "no", "off"};

    for (size_t i = 0; i < MOON_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *v_p = 1;
            return 1;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *v_p = 0;
            return 1;
        }
    }
    return 0;
}

/* Parses text for row; 0 if it is malformed or out of range. */
static int parse_value(const moon_config_field_t *row, const char *text, config_value_t *v)
{
    const char *end;
    char       *dend;
    uint64_t    u;

    if (text == NULL) {
        if (row->type != MOON_CONFIG_STRING) {
            return 0;
        }
        v->s = NULL;
        return 1;
    }
    switch (row->type) {
    case MOON_CONFIG_BOOL:
        return parse_bool(text, &v->i);
    case MOON_CONFIG_STRING:
        v->s = text;
        return 1;
    case MOON_CONFIG_ENUM:
        for (int i = 0; row->choices[i] != NULL; i++) {
            if (strcasecmp(text, row->choices[i]) == 0) {
                v->i = i;
                return 1;
            }
        }
        return 0;
    case MOON_CONFIG_U32:
    case MOON_CONFIG_U64:
    case MOON_CONFIG_SIZE:
        if (row->type == MOON_CONFIG_SIZE) {
            if (!parse_size(text, &u)) {
                return 0;
            }
        } else if (!parse_digits(text, &u, &end) || *end != '\0') {
            return 0;
        }
        if (u < row->min || u > row_max(row)) {
            return 0;
        }
        if (row->type == MOON_CONFIG_U32) {
            v->u32 = (uint32_t)u;
        } else {
            v->u64 = u;
        }
        return 1;
    case MOON_CONFIG_DOUBLE:
        if (text[0] == '\0' || isspace((unsigned char)text[0])) {
            return 0;
        }
        errno = 0;
        v->d  = strtod(text, &dend);
        if (*dend != '\0' || errno == ERANGE || !isfinite(v->d) || v->d < row->dmin ||
            (row->dmax != 0 && v->d > row->dmax)) {
            return 0;
        }
        return 1;
    }
    return 0;
}

static void *field_at(void *base, const moon_config_field_t *row)
{
    return (char *)base + row->offset;
}

static void store_value(void *base, const moon_config_field_t *row, const config_value_t *v)
{
    memcpy(field_at(base, row), v, type_size(row->type));
}

/* Whether the field holds the value v (strings compare by content). */
static int field_equals(void *base, const moon_config_field_t *row, const config_value_t *v)
{
    config_value_t cur;

    memcpy(&cur, field_at(base, row), type_size(row->type));
    switch (row->type) {
    case MOON_CONFIG_STRING:
        return cur.s == v->s || (cur.s != NULL && v->s != NULL && strcmp(cur.s, v->s) == 0);
    case MOON_CONFIG_DOUBLE:
        return cur.d == v->d;
    case MOON_CONFIG_U32:
        return cur.u32 == v->u32;
    case MOON_CONFIG_U64:
    case MOON_CONFIG_SIZE:
        return cur.u64 == v->u64;
    default:
        return cur.i == v->i;
    }
}

static void format_value(void *base, const moon_config_field_t *row, char *buf, size_t len)
{
    config_value_t cur;

    memcpy(&cur, field_at(base, row), type_size(row->type));
    switch (row->type) {
    case MOON_CONFIG_BOOL:
        snprintf(buf, len, "%s", cur.i ? "true" : "false");
        break;
    case MOON_CONFIG_U32:
        snprintf(buf, len, "%u", cur.u32);
        break;
    case MOON_CONFIG_U64:
        snprintf(buf, len, "%llu", (unsigned long long)cur.u64);
        break;
    case MOON_CONFIG_SIZE:
        format_size(cur.u64, buf, len);
        break;
    case MOON_CONFIG_DOUBLE:
        snprintf(buf, len, "%g", cur.d);
        break;
    case MOON_CONFIG_STRING:
        snprintf(buf, len, "%s", cur.s != NULL ? cur.s : "(unset)");
        break;
    case MOON_CONFIG_ENUM: {
        size_t n = 0;
        while (row->choices[n] != NULL) {
            n++;
        }
        snprintf(buf, len, "%s", cur.i >= 0 && (size_t)cur.i < n ? row->choices[cur.i] : "?");
        break;
    }
    }
}

/* MOON_<NAME>: the prefix, then the name upper-cased with '-' as '_'. */
static void env_name(const moon_config_table_t *table, const moon_config_field_t *row, char *buf,
                     size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s", table->env_prefix);

    for (const char *c = row->name; *c != '\0' && n + 1 < len; c++) {
        buf[n++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
    }
    buf[n < len ? n : len - 1] = '\0';
}

static int valid_name(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n >= CONFIG_NAME_MAX || !islower((unsigned char)name[0])) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (!islower((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) &&
            name[i] != '-') {
            return 0;
        }
    }
    return strcmp(name, "help") != 0;
}

/* A row is well formed: name, size matching its type, choices, default parses. */
static int check_row(const moon_config_table_t *table, const moon_config_field_t *row)
{
    config_value_t v;

    if (!valid_name(row->name) || type_size(row->type) == 0 || row->size != type_size(row->type) ||
        (row->type == MOON_CONFIG_ENUM && (row->choices == NULL || row->choices[0] == NULL)) ||
        !parse_value(row, row->dflt, &v)) {
        MOON_ERROR("config table %s: malformed row '%s' (name, field size, choices or default)",
                   table->name, row->name != NULL ? row->name : "?");
        return 0;
    }
    return 1;
}

/* ---- defaults, tables ----------------------------------------------------- */
moon_status_t moon_config_defaults(const moon_config_table_t *table, void *base)
{
    config_value_t v;

    if (table == NULL || base == NULL || table->fields == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (const moon_config_field_t *row = table->fields; row->name != NULL; row++) {
        if (!check_row(table, row)) {
            return MOON_ERR_INVALID_PARAM;
        }
    }
    for (const moon_config_field_t *row = table->fields; row->name != NULL; row++) {
        parse_value(row, row->dflt, &v);
        store_value(base, row, &v);
    }
    return MOON_OK;
}

moon_status_t moon_config_create(moon_config_t **cfg_p)
{
    moon_config_t *cfg;

    if (cfg_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    cfg = moon_calloc(1, sizeof(*cfg));
    if (cfg == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    *cfg_p = cfg;
    return MOON_OK;
}

void moon_config_destroy(moon_config_t *cfg)
{
    if (cfg == NULL) {
        return;
    }
    for (size_t i = 0; i < cfg->n_sections; i++) {
        moon_free(cfg->sections[i].sources);
    }
    moon_free(cfg->args);
    moon_free(cfg);
}

/* The row called name in any table added, and its section. */
static const moon_config_field_t *find_row(const moon_config_t *cfg, const char *name,
                                           size_t name_len, const config_section_t **sec_p,
                                           size_t *idx_p)
{
    for (size_t s = 0; s < cfg->n_sections; s++) {
        const config_section_t *sec = &cfg->sections[s];
        for (size_t i = 0; i < sec->n_rows; i++) {
            const moon_config_field_t *row = &sec->table->fields[i];
            if (strlen(row->name) == name_len && strncmp(row->name, name, name_len) == 0) {
                *sec_p = sec;
                *idx_p = i;
                return row;
            }
        }
    }
    return NULL;
}

moon_status_t moon_config_add(moon_config_t *cfg, const moon_config_table_t *table, void *base)
{
    config_section_t *sec;
    config_value_t    v;
    size_t            n = 0;

    if (cfg == NULL || table == NULL || base == NULL || table->fields == NULL ||
        table->name == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (cfg->n_sections == CONFIG_MAX_TABLES) {
        set_error(cfg, "more than %d configuration tables", CONFIG_MAX_TABLES);
        return MOON_ERR_NO_RESOURCE;
    }
    for (const moon_config_field_t *row = table->fields; row->name != NULL; row++, n++) {
        const config_section_t *other;
        size_t                  idx;
        if (!check_row(table, row)) {
            set_error(cfg, "config table %s: malformed row '%s'", table->name, row->name);
            return MOON_ERR_INVALID_PARAM;
        }
        if (find_row(cfg, row->name, strlen(row->name), &other, &idx) != NULL) {
            set_error(cfg, "option --%s declared by tables %s and %s", row->name,
                      other->table->name, table->name);
            return MOON_ERR_INVALID_PARAM;
        }
        for (const moon_config_field_t *prev = table->fields; prev != row; prev++) {
            if (strcmp(prev->name, row->name) == 0) {
                set_error(cfg, "option --%s declared twice by table %s", row->name, table->name);
                return MOON_ERR_INVALID_PARAM;
            }
        }
    }
    sec          = &cfg->sections[cfg->n_sections];
    sec->sources = moon_calloc(n + 1, 1);
    if (sec->sources == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    sec->table  = table;
    sec->base   = base;
    sec->n_rows = n;
    for (size_t i = 0; i < n; i++) {
        const moon_config_field_t *row = &table->fields[i];
        parse_value(row, row->dflt, &v);
        sec->sources[i] =
            field_equals(base, row, &v) ? MOON_CONFIG_SRC_DEFAULT : MOON_CONFIG_SRC_CALLER;
    }
    cfg->n_sections++;
    return MOON_OK;
}

/* ---- layers --------------------------------------------------------------- */
/* Parses text into row's field and records source; errors name what (a flag
 * "--x" or a variable "MOON_X") and what the row accepts. */
static moon_status_t apply(moon_config_t *cfg, const config_section_t *sec, size_t idx,
                           const char *what, const char *text, moon_config_source_t source)
{
    const moon_config_field_t *row = &sec->table->fields[idx];
    config_value_t             v;
    char                       accepted[192];

    if (!parse_value(row, text, &v)) {
        describe_accepted(row, accepted, sizeof(accepted));
        set_error(cfg, "%s: '%s' is not %s", what, text, accepted);
        return MOON_ERR_INVALID_PARAM;
    }
    store_value(sec->base, row, &v);
    sec->sources[idx] = (uint8_t)source;
    return MOON_OK;
}

static moon_status_t apply_env(moon_config_t *cfg)
{
    char name[CONFIG_NAME_MAX + 32];

    for (size_t s = 0; s < cfg->n_sections; s++) {
        const config_section_t *sec = &cfg->sections[s];
        if (sec->table->env_prefix == NULL) {
            continue;
        }
        for (size_t i = 0; i < sec->n_rows; i++) {
            const char *text;
            if (sec->sources[i] != MOON_CONFIG_SRC_DEFAULT) {
                continue; /* the caller's setting wins over the environment */
            }
            env_name(sec->table, &sec->table->fields[i], name, sizeof(name));
            text = getenv(name);
            if (text != NULL && apply(cfg, sec, i, name, text, MOON_CONFIG_SRC_ENV) != MOON_OK) {
                return MOON_ERR_INVALID_PARAM;
            }
        }
    }
    return MOON_OK;
}

/* One "--name[=value]" argument; may take argv[*i + 1] as its value. */
static moon_status_t apply_flag(moon_config_t *cfg, int argc, char **argv, int *i)
{
    const char                *arg  = argv[*i] + 2;
    const char                *eq   = strchr(arg, '=');
    size_t                     len  = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    const config_section_t    *sec  = NULL;
    size_t                     idx  = 0;
    const moon_config_field_t *row  = find_row(cfg, arg, len, &sec, &idx);
    int                        neg  = 0;
    const char                *text = eq != NULL ? eq + 1 : NULL;
    char                       what[CONFIG_NAME_MAX + 8], accepted[192];

    if (row == NULL && len > 3 && strncmp(arg, "no-", 3) == 0) {
        row = find_row(cfg, arg + 3, len - 3, &sec, &idx);
        neg = row != NULL && row->type == MOON_CONFIG_BOOL && eq == NULL;
        row = neg ? row : NULL;
    }
    if (row == NULL) {
        set_error(cfg, "unknown option '%.*s' (see --help)", (int)(len + 2), argv[*i]);
        return MOON_ERR_INVALID_PARAM;
    }
    snprintf(what, sizeof(what), "--%s", row->name);
    if (row->type == MOON_CONFIG_BOOL && text == NULL) {
        text = neg ? "0" : "1";
    } else if (text == NULL) {
        if (*i + 1 >= argc) {
            describe_accepted(row, accepted, sizeof(accepted));
            set_error(cfg, "%s needs a value: %s", what, accepted);
            return MOON_ERR_INVALID_PARAM;
        }
        text = argv[++*i];
    }
    return apply(cfg, sec, idx, what, text, MOON_CONFIG_SRC_FLAG);
}

moon_status_t moon_config_parse(moon_config_t *cfg, int argc, char **argv)
{
    moon_status_t status;
    int           only_args = 0;

    if (cfg == NULL || argc < 0 || (argc > 0 && argv == NULL)) {
        return MOON_ERR_INVALID_PARAM;
    }
    cfg->error[0] = '\0';
    cfg->n_args   = 0;
    cfg->help     = 0;
    moon_free(cfg->args);
    cfg->args = moon_calloc((size_t)argc + 1, sizeof(*cfg->args));
    if (cfg->args == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = apply_env(cfg);
    if (status != MOON_OK) {
        return status;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_args || a[0] != '-' || a[1] == '\0') {
            cfg->args[cfg->n_args++] = a;
        } else if (strcmp(a, "--") == 0) {
            only_args = 1;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cfg->help = 1;
        } else if (a[1] != '-') {
            set_error(cfg, "unknown option '%s' (options are --name; see --help)", a);
            return MOON_ERR_INVALID_PARAM;
        } else {
            status = apply_flag(cfg, argc, argv, &i);
            if (status != MOON_OK) {
                return status;
            }
        }
    }
    return MOON_OK;
}

moon_status_t moon_config_set(moon_config_t *cfg, const char *name, const char *value)
{
    const config_section_t *sec = NULL;
    size_t                  idx = 0;
    char                    what[CONFIG_NAME_MAX + 8];

    if (cfg == NULL || name == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (find_row(cfg, name, strlen(name), &sec, &idx) == NULL) {
        set_error(cfg, "unknown option '%s'", name);
        return MOON_ERR_NOT_FOUND;
    }
    snprintf(what, sizeof(what), "%s", name);
    return apply(cfg, sec, idx, what, value, MOON_CONFIG_SRC_CALLER);
}

const char *moon_config_error(const moon_config_t *cfg)
{
    return cfg != NULL ? cfg->error : "";
}

int moon_config_help_requested(const moon_config_t *cfg)
{
    return cfg != NULL && cfg->help;
}

int moon_config_n_args(const moon_config_t *cfg)
{
    return cfg != NULL ? cfg->n_args : 0;
}

const char *moon_config_arg(const moon_config_t *cfg, int i)
{
    return cfg != NULL && i >= 0 && i < cfg->n_args ? cfg->args[i] : NULL;
}

int moon_config_source(const moon_config_t *cfg, const char *name)
{
    const config_section_t *sec = NULL;
    size_t                  idx = 0;

    if (cfg == NULL || name == NULL || find_row(cfg, name, strlen(name), &sec, &idx) == NULL) {
        return -1;
    }
    return sec->sources[idx];
}

const char *moon_config_source_str(moon_config_source_t source)
{
    return (unsigned)source < MOON_ARRAY_SIZE(source_names) ? source_names[source] : "?";
}

/* ---- printing ------------------------------------------------------------- */
static const char *metavar(const moon_config_field_t *row)
{
    switch (row->type) {
    case MOON_CONFIG_BOOL:
        return "";
    case MOON_CONFIG_U32:
    case MOON_CONFIG_U64:
        return " N";
    case MOON_CONFIG_DOUBLE:
        return " X";
    case MOON_CONFIG_SIZE:
        return " SIZE";
    case MOON_CONFIG_STRING:
        return " TEXT";
    case MOON_CONFIG_ENUM:
        return " CHOICE";
    }
    return "";
}

/* The default as help shows it: the row's text, "unset" for a NULL string. */
static const char *default_text(const moon_config_field_t *row)
{
    if (row->dflt == NULL) {
        return "unset";
    }
    return row->dflt[0] == '\0' ? "\"\"" : row->dflt;
}

void moon_config_print_help(const moon_config_t *cfg, FILE *f)
{
    char flag[CONFIG_NAME_MAX + 16], accepted[192], env[CONFIG_NAME_MAX + 32];

    if (cfg == NULL || f == NULL) {
        return;
    }
    for (size_t s = 0; s < cfg->n_sections; s++) {
        const moon_config_table_t *t = cfg->sections[s].table;
        fprintf(f, "%s%s options (%s):\n", s == 0 ? "" : "\n", t->name, t->doc);
        for (const moon_config_field_t *row = t->fields; row->name != NULL; row++) {
            snprintf(flag, sizeof(flag), "--%s%s%s", row->type == MOON_CONFIG_BOOL ? "[no-]" : "",
                     row->name, metavar(row));
            describe_accepted(row, accepted, sizeof(accepted));
            fprintf(f, "  %-26s %s\n  %-26s   default %s; %s", flag, row->doc, "",
                    default_text(row), accepted);
            if (t->env_prefix != NULL) {
                env_name(t, row, env, sizeof(env));
                fprintf(f, "; env %s", env);
            }
            fputc('\n', f);
        }
    }
}

void moon_config_print_values(const moon_config_t *cfg, FILE *f)
{
    char value[256];

    if (cfg == NULL || f == NULL) {
        return;
    }
    for (size_t s = 0; s < cfg->n_sections; s++) {
        const config_section_t *sec = &cfg->sections[s];
        for (size_t i = 0; i < sec->n_rows; i++) {
            format_value(sec->base, &sec->table->fields[i], value, sizeof(value));
            fprintf(f, "%-8s %-24s %-20s %s\n", sec->table->name, sec->table->fields[i].name, value,
                    moon_config_source_str((moon_config_source_t)sec->sources[i]));
        }
    }
}

void moon_config_print_markdown(const moon_config_t *cfg, FILE *f)
{
    char accepted[192], env[CONFIG_NAME_MAX + 32];

    if (cfg == NULL || f == NULL) {
        return;
    }
    for (size_t s = 0; s < cfg->n_sections; s++) {
        const moon_config_table_t *t = cfg->sections[s].table;
        fprintf(f, "%s**%s** (%s)\n\n", s == 0 ? "" : "\n", t->name, t->doc);
        fprintf(f, "| flag | environment | default | accepted | description |\n");
        fprintf(f, "|---|---|---|---|---|\n");
        for (const moon_config_field_t *row = t->fields; row->name != NULL; row++) {
            describe_accepted(row, accepted, sizeof(accepted));
            if (t->env_prefix != NULL) {
                env_name(t, row, env, sizeof(env));
            } else {
                snprintf(env, sizeof(env), "-");
            }
            fprintf(f, "| `--%s` | %s%s%s | `%s` | ", row->name, t->env_prefix != NULL ? "`" : "",
                    env, t->env_prefix != NULL ? "`" : "", default_text(row));
            for (const char *c = accepted; *c != '\0'; c++) {
                fputs(*c == '|' ? "\\|" : (char[2]){*c, '\0'}, f); /* '|' splits a cell */
            }
            fprintf(f, " | %s |\n", row->doc);
        }
    }
}

/* ---- one-shot and foreign variables --------------------------------------- */
moon_status_t moon_config_load_env(const moon_config_table_t *table, void *base)
{
    moon_config_t *cfg;
    moon_status_t  status;

    status = moon_config_create(&cfg);
    if (status != MOON_OK) {
        return status;
    }
    status = moon_config_add(cfg, table, base);
    if (status == MOON_OK) {
        status = moon_config_parse(cfg, 0, NULL);
    }
    if (status != MOON_OK && cfg->error[0] != '\0') {
        MOON_ERROR("%s", cfg->error);
    }
    moon_config_destroy(cfg);
    return status;
}

moon_status_t moon_config_from_env(const moon_config_table_t *table, void *base)
{
    moon_status_t status = moon_config_defaults(table, base);

    if (status == MOON_OK && (status = moon_config_load_env(table, base)) != MOON_OK) {
        moon_config_defaults(table, base); /* parsed before: cannot fail now */
    }
    return status;
}

const char *moon_config_foreign_env(const char *name)
{
    return name != NULL ? getenv(name) : NULL;
}
