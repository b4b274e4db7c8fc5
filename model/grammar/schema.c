/* model/grammar/schema.c - JSON schema to GBNF (compact JSON: no
 * whitespace, properties in the schema's order), and grammar specs (what
 * serving messages carry) to grammars. A small JSON reader of its own keeps
 * the model library free of a JSON dependency. Pure functions. */
#include "grammar_internal.h"

#include "moonlet/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON values ---------------------------------------------------------- */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int         type;
    int         b;
    double      num;
    const char *raw; /* numbers: their text */
    size_t      raw_len;
    char       *str; /* strings: decoded (NUL terminated; may hold NULs: str_len) */
    size_t      str_len;
    struct jv  *items; /* arrays: n values; objects: n values, keys[i] their names */
    char      **keys;
    uint32_t    n;
} jv_t;

typedef struct {
    const char *s, *end;
    int         depth;
    int         oom;
} jreader_t;

static void jv_free(jv_t *v)
{
    if (v == NULL) {
        return;
    }
    moon_free(v->str);
    for (uint32_t i = 0; i < v->n; i++) {
        jv_free(&v->items[i]);
        if (v->keys != NULL) {
            moon_free(v->keys[i]);
        }
    }
    moon_free(v->items);
    moon_free(v->keys);
}

static void jskip(jreader_t *r)
{
    while (r->s < r->end && (*r->s == ' ' || *r->s == '\t' || *r->s == '\n' || *r->s == '\r')) {
        r->s++;
    }
}

static int jhex4(const char *s, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        *v <<= 4;
        if (c >= '0' && c <= '9') {
            *v |= (uint32_t)(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            *v |= (uint32_t)(c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            *v |= (uint32_t)(c - 'A' + 10);
        } else {
            return 0;
        }
    }
    return 1;
}

static int jstring(jreader_t *r, char **out, size_t *len_p)
{
    size_t cap = 16, n = 0;
    char  *b = moon_malloc(cap);

    if (b == NULL) {
        r->oom = 1;
        return 0;
    }
    r->s++;
    while (r->s < r->end && *r->s != '"') {
        uint32_t cp;
        if (n + 5 > cap) {
            char *nb = moon_realloc(b, cap * 2);
            if (nb == NULL) {
                moon_free(b);
                r->oom = 1;
                return 0;
            }
            b = nb;
            cap *= 2;
        }
        if ((unsigned char)*r->s < 0x20) {
            goto bad;
        }
        if (*r->s != '\\') {
            b[n++] = *r->s++;
            continue;
        }
        r->s++;
        if (r->s >= r->end) {
            goto bad;
        }
        switch (*r->s++) {
        case '"':
            b[n++] = '"';
            break;
        case '\\':
            b[n++] = '\\';
            break;
        case '/':
            b[n++] = '/';
            break;
        case 'b':
            b[n++] = '\b';
            break;
        case 'f':
            b[n++] = '\f';
            break;
        case 'n':
            b[n++] = '\n';
            break;
        case 'r':
            b[n++] = '\r';
            break;
        case 't':
            b[n++] = '\t';
            break;
        case 'u':
            if (r->end - r->s < 4 || !jhex4(r->s, &cp)) {
                goto bad;
            }
            r->s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && r->end - r->s >= 6 && r->s[0] == '\\' &&
                r->s[1] == 'u') {
                uint32_t lo;
                if (jhex4(r->s + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    r->s += 6;
                }
            }
            if (cp < 0x80) {
                b[n++] = (char)cp;
            } else if (cp < 0x800) {
                b[n++] = (char)(0xC0 | (cp >> 6));
                b[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                b[n++] = (char)(0xE0 | (cp >> 12));
                b[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                b[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                b[n++] = (char)(0xF0 | (cp >> 18));
                b[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                b[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                b[n++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        default:
            goto bad;
        }
    }
    if (r->s >= r->end) {
        goto bad;
    }
    r->s++;
    b[n]   = '\0';
    *out   = b;
    *len_p = n;
    return 1;
bad:
    moon_free(b);
    return 0;
}

static int jvalue(jreader_t *r, jv_t *v)
{
    memset(v, 0, sizeof(*v));
    jskip(r);
    if (r->s >= r->end || ++r->depth > 128) {
        return 0;
    }
    switch (*r->s) {
    case '{':
    case '[': {
        int      obj = *r->s == '{';
        uint32_t cap = 0;
        v->type      = obj ? J_OBJ : J_ARR;
        r->s++;
        jskip(r);
        if (r->s < r->end && *r->s == (obj ? '}' : ']')) {
            r->s++;
            r->depth--;
            return 1;
        }
        for (;;) {
            char  *key = NULL;
            size_t klen;
            if (v->n == cap) {
                uint32_t nc = cap ? cap * 2 : 4;
                void    *ni = moon_realloc(v->items, nc * sizeof(jv_t));
                void *nk = ni == NULL || !obj ? NULL : moon_realloc(v->keys, nc * sizeof(char *));
                if (ni != NULL) {
                    v->items = ni;
                }
                if (nk != NULL) {
                    v->keys = nk;
                }
                if (ni == NULL || (obj && nk == NULL)) {
                    r->oom = 1;
                    return 0;
                }
                cap = nc;
            }
            jskip(r);
            if (obj) {
                if (r->s >= r->end || *r->s != '"' || !jstring(r, &key, &klen)) {
                    return 0;
                }
                v->keys[v->n] = key;
                jskip(r);
                if (r->s >= r->end || *r->s != ':') {
                    v->items[v->n++].n       = 0; /* freed as an empty value */
                    v->items[v->n - 1].str   = NULL;
                    v->items[v->n - 1].items = NULL;
                    v->items[v->n - 1].keys  = NULL;
                    return 0;
                }
                r->s++;
            }
            if (!jvalue(r, &v->items[v->n])) {
                if (obj) {
                    jv_free(&v->items[v->n]);
                    moon_free(key);
                }
                return 0;
            }
            v->n++;
            jskip(r);
            if (r->s < r->end && *r->s == ',') {
                r->s++;
                continue;
            }
            if (r->s < r->end && *r->s == (obj ? '}' : ']')) {
                r->s++;
                r->depth--;
                return 1;
            }
            return 0;
        }
    }
    case '"':
        v->type = J_STR;
        if (!jstring(r, &v->str, &v->str_len)) {
            return 0;
        }
        r->depth--;
        return 1;
    default:
        break;
    }
    if (r->end - r->s >= 4 && memcmp(r->s, "null", 4) == 0) {
        r->s += 4;
        v->type = J_NULL;
    } else if (r->end - r->s >= 4 && memcmp(r->s, "true", 4) == 0) {
        r->s += 4;
        v->type = J_BOOL;
        v->b    = 1;
    } else if (r->end - r->s >= 5 && memcmp(r->s, "false", 5) == 0) {
        r->s += 5;
        v->type = J_BOOL;
    } else {
        char        buf[64];
        const char *st = r->s;
        size_t      n;
        char       *e;
        while (r->s < r->end && strchr("+-0123456789.eE", *r->s) != NULL && *r->s != '\0') {
            r->s++;
        }
        n = (size_t)(r->s - st);
        if (n == 0 || n >= sizeof(buf)) {
            return 0;
        }
        memcpy(buf, st, n);
        buf[n] = '\0';
        v->num = strtod(buf, &e);
        if (*e != '\0') {
            return 0;
        }
        v->type    = J_NUM;
        v->raw     = st;
        v->raw_len = n;
    }
    r->depth--;
    return 1;
}

static const jv_t *jget(const jv_t *o, const char *key)
{
    if (o == NULL || o->type != J_OBJ) {
        return NULL;
    }
    for (uint32_t i = 0; i < o->n; i++) {
        if (strcmp(o->keys[i], key) == 0) {
            return &o->items[i];
        }
    }
    return NULL;
}

/* ---- output --------------------------------------------------------------- */

typedef struct {
    char  *b;
    size_t n, cap;
    int    full;
} sbuf_t;

static void sb_printf(sbuf_t *s, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (s->full) {
        return;
    }
    va_start(ap, fmt);
    n = vsnprintf(s->b + s->n, s->cap - s->n, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= s->cap - s->n) {
        s->full    = 1;
        s->b[s->n] = '\0';
        return;
    }
    s->n += (size_t)n;
}

/* bytes as the inside of a GBNF "literal" */
static void sb_lit(sbuf_t *s, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') {
            sb_printf(s, "\\%c", c);
        } else if (c < 0x20 || c == 0x7F) {
            sb_printf(s, "\\x%02X", c);
        } else {
            sb_printf(s, "%c", c);
        }
    }
}

/* A JSON string's compact serialization (what the document holds) */
static void sb_json_str(sbuf_t *s, const char *p, size_t n)
{
    sb_printf(s, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (c) {
        case '"':
            sb_printf(s, "\\\"");
            break;
        case '\\':
            sb_printf(s, "\\\\");
            break;
        case '\n':
            sb_printf(s, "\\n");
            break;
        case '\r':
            sb_printf(s, "\\r");
            break;
        case '\t':
            sb_printf(s, "\\t");
            break;
        case '\b':
            sb_printf(s, "\\b");
            break;
        case '\f':
            sb_printf(s, "\\f");
            break;
        default:
            if (c < 0x20) {
                sb_printf(s, "\\u%04x", c);
            } else {
                sb_printf(s, "%c", c);
            }
        }
    }
    sb_printf(s, "\"");
}

static void sb_json(sbuf_t *s, const jv_t *v)
{
    switch (v->type) {
    case J_NULL:
        sb_printf(s, "null");
        break;
    case J_BOOL:
        sb_printf(s, v->b ? "true" : "false");
        break;
    case J_NUM:
        sb_printf(s, "%.*s", (int)v->raw_len, v->raw);
        break;
    case J_STR:
        sb_json_str(s, v->str, v->str_len);
        break;
    default:
        sb_printf(s, v->type == J_ARR ? "[" : "{");
        for (uint32_t i = 0; i < v->n; i++) {
            if (i > 0) {
                sb_printf(s, ",");
            }
            if (v->type == J_OBJ) {
                sb_json_str(s, v->keys[i], strlen(v->keys[i]));
                sb_printf(s, ":");
            }
            sb_json(s, &v->items[i]);
        }
        sb_printf(s, v->type == J_ARR ? "]" : "}");
    }
}

/* ---- schema to GBNF ------------------------------------------------------- */

#define MAX_SCHEMA_DEPTH 64
#define MAX_LEN_BOUND 4096 /* maxLength / maxItems past this: unbounded */

typedef struct {
    sbuf_t      out;
    const jv_t *root;
    uint32_t    next_id;
    struct {
        const jv_t *node;
        uint32_t    id;
    } refs[256];
    uint32_t n_refs;
    char    *err;
    size_t   err_cap;
    int      failed;     /* MOON_ERR_* */
    int      need_value; /* base rules used */
    int      depth;
} gen_t;

static void gfail(gen_t *g, moon_status_t status, const char *fmt, ...)
{
    va_list ap;

    if (g->failed) {
        return;
    }
    g->failed = status;
    if (g->err != NULL && g->err_cap > 0) {
        va_start(ap, fmt);
        vsnprintf(g->err, g->err_cap, fmt, ap);
        va_end(ap);
    }
}

static const char *const base_rules =
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "uinteger ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?\n"
    "unumber ::= (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" (string \":\" value (\",\" string \":\" value)*)? \"}\"\n"
    "array ::= \"[\" (value (\",\" value)*)? \"]\"\n"
    "hex ::= [0-9a-fA-F]\n"
    "date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" "
    "[01])\n"
    "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
    "octet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9]\n"
    "ipv4 ::= octet \".\" octet \".\" octet \".\" octet\n"
    "label ::= [a-z0-9] [a-z0-9-]{0,20}\n"
    "email ::= [a-zA-Z0-9._+-]{1,32} \"@\" label (\".\" label){0,3} \".\" [a-z]{2,6}\n";

static void gen(gen_t *g, const jv_t *s, uint32_t id);

/* A fresh rule id for sub-schema s, generated now. */
static uint32_t sub(gen_t *g, const jv_t *s)
{
    uint32_t id = g->next_id++;
    gen(g, s, id);
    return id;
}

static const jv_t *resolve_ref(gen_t *g, const char *ref)
{
    const char *name;
    const jv_t *defs;

    if (strcmp(ref, "#") == 0) {
        return g->root;
    }
    if (strncmp(ref, "#/$defs/", 8) == 0) {
        defs = jget(g->root, "$defs");
        name = ref + 8;
    } else if (strncmp(ref, "#/definitions/", 14) == 0) {
        defs = jget(g->root, "definitions");
        name = ref + 14;
    } else {
        return NULL;
    }
    return jget(defs, name);
}

static int json_uint(const jv_t *v, uint32_t *out)
{
    if (v == NULL || v->type != J_NUM || v->num < 0 || v->num != (double)(uint64_t)v->num) {
        return 0;
    }
    *out = v->num > MAX_LEN_BOUND ? UINT32_MAX : (uint32_t)v->num;
    return 1;
}

/* "{min,max}" for a GBNF repetition (max UINT32_MAX: none) */
static void sb_rep(sbuf_t *o, uint32_t min, uint32_t max)
{
    if (max == UINT32_MAX) {
        sb_printf(o, "{%u,}", min);
    } else {
        sb_printf(o, "{%u,%u}", min, max);
    }
}

static void gen_string(gen_t *g, const jv_t *s, uint32_t id)
{
    const jv_t *fmt = jget(s, "format");
    uint32_t    min = 0, max = UINT32_MAX;

    if (jget(s, "pattern") != NULL) {
        gfail(g, MOON_ERR_UNSUPPORTED, "schema keyword 'pattern' is not supported");
        return;
    }
    if (fmt != NULL) {
        static const char *const known[] = {"date", "time", "date-time", "uuid", "ipv4", "email"};
        const char              *f       = fmt->type == J_STR ? fmt->str : "";
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
            if (strcmp(f, known[i]) == 0) {
                if (strcmp(f, "date-time") == 0) {
                    sb_printf(&g->out, "r%u ::= \"\\\"\" date \"T\" time \"\\\"\"\n", id);
                } else {
                    sb_printf(&g->out, "r%u ::= \"\\\"\" %s \"\\\"\"\n", id, f);
                }
                return;
            }
        }
        gfail(g, MOON_ERR_UNSUPPORTED, "string format '%s' is not supported", f);
        return;
    }
    if (jget(s, "minLength") != NULL && !json_uint(jget(s, "minLength"), &min)) {
        gfail(g, MOON_ERR_INVALID_PARAM, "minLength must be a non-negative integer");
        return;
    }
    if (jget(s, "maxLength") != NULL && !json_uint(jget(s, "maxLength"), &max)) {
        gfail(g, MOON_ERR_INVALID_PARAM, "maxLength must be a non-negative integer");
        return;
    }
    if (min == UINT32_MAX || (max != UINT32_MAX && max < min)) {
        gfail(g, MOON_ERR_UNSUPPORTED, "string length bounds minLength %u maxLength %u", min, max);
        return;
    }
    if (min == 0 && max == UINT32_MAX) {
        sb_printf(&g->out, "r%u ::= string\n", id);
        return;
    }
    sb_printf(&g->out, "r%u ::= \"\\\"\" char", id);
    sb_rep(&g->out, min, max);
    sb_printf(&g->out, " \"\\\"\"\n");
}

static void gen_number(gen_t *g, const jv_t *s, uint32_t id, int integer)
{
    const jv_t *min = jget(s, "minimum"), *xmin = jget(s, "exclusiveMinimum");
    int         unsig = 0;

    /* the one bound a grammar keeps cheaply: no sign */
    if ((min != NULL && min->type == J_NUM && min->num >= 0) ||
        (xmin != NULL && xmin->type == J_NUM && xmin->num >= 0)) {
        unsig = 1;
    }
    if ((xmin != NULL && xmin->type == J_NUM && !(integer && xmin->num < 0)) ||
        (min != NULL && min->type == J_NUM && min->num > 0 && !integer) ||
        (min != NULL && min->type == J_NUM && min->num > 1)) {
        gfail(g, MOON_ERR_UNSUPPORTED, "numeric lower bounds other than 0 or 1 are not supported");
        return;
    }
    if (jget(s, "maximum") != NULL || jget(s, "exclusiveMaximum") != NULL ||
        jget(s, "multipleOf") != NULL) {
        gfail(g, MOON_ERR_UNSUPPORTED,
              "schema keywords maximum, exclusiveMaximum and multipleOf are not supported");
        return;
    }
    if (integer && min != NULL && min->type == J_NUM && min->num == 1) {
        sb_printf(&g->out, "r%u ::= [1-9] [0-9]{0,15}\n", id);
        return;
    }
    sb_printf(&g->out, "r%u ::= %s%s\n", id, unsig ? "u" : "", integer ? "integer" : "number");
}

static void gen_object(gen_t *g, const jv_t *s, uint32_t id)
{
    const jv_t *props = jget(s, "properties"), *req = jget(s, "required");
    const jv_t *addl = jget(s, "additionalProperties");
    uint32_t    n, *vid, base;
    uint8_t    *required;

    if (props == NULL || props->type != J_OBJ || props->n == 0) {
        if (req != NULL && req->type == J_ARR && req->n > 0) {
            gfail(g, MOON_ERR_UNSUPPORTED, "required properties without their schemas");
            return;
        }
        if (addl != NULL && addl->type == J_BOOL && !addl->b) {
            sb_printf(&g->out, "r%u ::= \"{}\"\n", id);
        } else if (addl != NULL && addl->type == J_OBJ) {
            uint32_t v = sub(g, addl);
            sb_printf(&g->out,
                      "r%u ::= \"{\" (string \":\" r%u (\",\" string \":\" r%u)*)? \"}\"\n", id, v,
                      v);
        } else {
            sb_printf(&g->out, "r%u ::= object\n", id);
        }
        return;
    }
    n        = props->n;
    vid      = moon_calloc(n, sizeof(uint32_t));
    required = moon_calloc(n, 1);
    if (vid == NULL || required == NULL) {
        moon_free(vid);
        moon_free(required);
        gfail(g, MOON_ERR_NO_MEMORY, "out of memory");
        return;
    }
    if (req != NULL && req->type == J_ARR) {
        for (uint32_t k = 0; k < req->n; k++) {
            int found = 0;
            for (uint32_t i = 0; i < n && req->items[k].type == J_STR; i++) {
                if (strcmp(props->keys[i], req->items[k].str) == 0) {
                    required[i] = 1;
                    found       = 1;
                }
            }
            if (!found) {
                gfail(g, MOON_ERR_UNSUPPORTED, "required property without its schema");
            }
        }
    }
    for (uint32_t i = 0; i < n && !g->failed; i++) {
        vid[i] = sub(g, &props->items[i]);
    }
    /* A_i (r base+2i): properties i.. with none written yet; B_i (base+2i+1):
     * with one written before (so each starts with a comma). */
    base = g->next_id;
    g->next_id += 2 * (n + 1);
    for (uint32_t i = 0; i < n && !g->failed; i++) {
        for (int after = 0; after < 2; after++) {
            char   kb[1024];
            sbuf_t key = {kb, 0, sizeof(kb), 0};
            sb_json_str(&key, props->keys[i], strlen(props->keys[i]));
            if (key.full) {
                gfail(g, MOON_ERR_UNSUPPORTED, "a property name over %zu bytes", sizeof(kb) / 2);
                break;
            }
            sb_printf(&g->out, "r%u ::= %s\"", base + 2 * i + (uint32_t)after,
                      after ? "\",\" " : "");
            sb_lit(&g->out, key.b, key.n);
            sb_printf(&g->out, ":\" r%u r%u", vid[i], base + 2 * (i + 1) + 1);
            if (!required[i]) {
                sb_printf(&g->out, " | r%u", base + 2 * (i + 1) + (uint32_t)after);
            }
            sb_printf(&g->out, "\n");
        }
    }
    sb_printf(&g->out, "r%u ::= \"\"\nr%u ::= \"\"\n", base + 2 * n, base + 2 * n + 1);
    sb_printf(&g->out, "r%u ::= \"{\" r%u \"}\"\n", id, base);
    moon_free(vid);
    moon_free(required);
}

static void gen_array(gen_t *g, const jv_t *s, uint32_t id)
{
    const jv_t *items = jget(s, "items");
    uint32_t    min = 0, max = UINT32_MAX, it;

    if (jget(s, "prefixItems") != NULL || jget(s, "uniqueItems") != NULL ||
        jget(s, "contains") != NULL) {
        gfail(g, MOON_ERR_UNSUPPORTED,
              "schema keywords prefixItems, uniqueItems and contains are not supported");
        return;
    }
    if ((jget(s, "minItems") != NULL && !json_uint(jget(s, "minItems"), &min)) ||
        (jget(s, "maxItems") != NULL && !json_uint(jget(s, "maxItems"), &max))) {
        gfail(g, MOON_ERR_INVALID_PARAM, "minItems and maxItems must be non-negative integers");
        return;
    }
    if (min == UINT32_MAX || (max != UINT32_MAX && max < min)) {
        gfail(g, MOON_ERR_UNSUPPORTED, "array bounds minItems %u maxItems %u", min, max);
        return;
    }
    it = items != NULL ? sub(g, items) : UINT32_MAX;
    if (it == UINT32_MAX) {
        if (min == 0 && max == UINT32_MAX) {
            sb_printf(&g->out, "r%u ::= array\n", id);
            return;
        }
        it = g->next_id++;
        sb_printf(&g->out, "r%u ::= value\n", it);
    }
    if (max == 0) {
        sb_printf(&g->out, "r%u ::= \"[]\"\n", id);
        return;
    }
    sb_printf(&g->out, "r%u ::= \"[\" (r%u (\",\" r%u)", id, it, it);
    sb_rep(&g->out, min ? min - 1 : 0, max == UINT32_MAX ? max : max - 1);
    sb_printf(&g->out, ")%s \"]\"\n", min ? "" : "?");
}

/* One type of s (a schema object) into rule id. */
static void gen_type(gen_t *g, const jv_t *s, const char *type, uint32_t id)
{
    if (strcmp(type, "string") == 0) {
        gen_string(g, s, id);
    } else if (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0) {
        gen_number(g, s, id, type[0] == 'i');
    } else if (strcmp(type, "boolean") == 0) {
        sb_printf(&g->out, "r%u ::= boolean\n", id);
    } else if (strcmp(type, "null") == 0) {
        sb_printf(&g->out, "r%u ::= null\n", id);
    } else if (strcmp(type, "object") == 0) {
        gen_object(g, s, id);
    } else if (strcmp(type, "array") == 0) {
        gen_array(g, s, id);
    } else {
        gfail(g, MOON_ERR_INVALID_PARAM, "unknown type '%s'", type);
    }
}

static void gen(gen_t *g, const jv_t *s, uint32_t id)
{
    const jv_t *t, *e;

    if (g->failed) {
        return;
    }
    if (++g->depth > MAX_SCHEMA_DEPTH) {
        gfail(g, MOON_ERR_UNSUPPORTED, "schema nested deeper than %d", MAX_SCHEMA_DEPTH);
        return;
    }
    if (s->type == J_BOOL) {
        if (!s->b) {
            gfail(g, MOON_ERR_UNSUPPORTED, "schema false matches nothing");
        } else {
            sb_printf(&g->out, "r%u ::= value\n", id);
        }
        g->depth--;
        return;
    }
    if (s->type != J_OBJ) {
        gfail(g, MOON_ERR_INVALID_PARAM, "a schema must be an object or a boolean");
        return;
    }
    if ((e = jget(s, "$ref")) != NULL) {
        const jv_t *target = e->type == J_STR ? resolve_ref(g, e->str) : NULL;
        uint32_t    tid    = UINT32_MAX;
        if (target == NULL) {
            gfail(g, MOON_ERR_UNSUPPORTED, "$ref '%s' is not a local definition",
                  e->type == J_STR ? e->str : "?");
            return;
        }
        for (uint32_t i = 0; i < g->n_refs; i++) {
            if (g->refs[i].node == target) {
                tid = g->refs[i].id;
            }
        }
        if (tid == UINT32_MAX) {
            if (g->n_refs == 256) {
                gfail(g, MOON_ERR_UNSUPPORTED, "more than 256 definitions");
                return;
            }
            tid                     = g->next_id++;
            g->refs[g->n_refs].node = target;
            g->refs[g->n_refs++].id = tid;
            gen(g, target, tid);
        }
        sb_printf(&g->out, "r%u ::= r%u\n", id, tid);
        g->depth--;
        return;
    }
    if ((e = jget(s, "const")) != NULL) {
        sb_printf(&g->out, "r%u ::= \"", id);
        {
            sbuf_t tmp = {moon_malloc(65536), 0, 65536, 0};
            if (tmp.b == NULL) {
                gfail(g, MOON_ERR_NO_MEMORY, "out of memory");
                return;
            }
            sb_json(&tmp, e);
            sb_lit(&g->out, tmp.b, tmp.n);
            g->out.full |= tmp.full;
            moon_free(tmp.b);
        }
        sb_printf(&g->out, "\"\n");
        g->depth--;
        return;
    }
    if ((e = jget(s, "enum")) != NULL) {
        sbuf_t tmp = {moon_malloc(65536), 0, 65536, 0};
        if (e->type != J_ARR || e->n == 0) {
            moon_free(tmp.b);
            gfail(g, MOON_ERR_INVALID_PARAM, "enum must be a non-empty array");
            return;
        }
        if (tmp.b == NULL) {
            gfail(g, MOON_ERR_NO_MEMORY, "out of memory");
            return;
        }
        sb_printf(&g->out, "r%u ::= ", id);
        for (uint32_t i = 0; i < e->n; i++) {
            tmp.n = 0;
            sb_json(&tmp, &e->items[i]);
            sb_printf(&g->out, "%s\"", i ? " | " : "");
            sb_lit(&g->out, tmp.b, tmp.n);
            sb_printf(&g->out, "\"");
        }
        g->out.full |= tmp.full;
        moon_free(tmp.b);
        sb_printf(&g->out, "\n");
        g->depth--;
        return;
    }
    if ((e = jget(s, "anyOf")) != NULL || (e = jget(s, "oneOf")) != NULL) {
        uint32_t *ids;
        if (e->type != J_ARR || e->n == 0) {
            gfail(g, MOON_ERR_INVALID_PARAM, "anyOf/oneOf must be a non-empty array");
            return;
        }
        ids = moon_malloc(e->n * sizeof(uint32_t));
        if (ids == NULL) {
            gfail(g, MOON_ERR_NO_MEMORY, "out of memory");
            return;
        }
        for (uint32_t i = 0; i < e->n; i++) {
            ids[i] = sub(g, &e->items[i]);
        }
        sb_printf(&g->out, "r%u ::= ", id);
        for (uint32_t i = 0; i < e->n; i++) {
            sb_printf(&g->out, "%sr%u", i ? " | " : "", ids[i]);
        }
        sb_printf(&g->out, "\n");
        moon_free(ids);
        g->depth--;
        return;
    }
    if ((e = jget(s, "allOf")) != NULL) {
        if (e->type != J_ARR || e->n != 1) {
            gfail(g, MOON_ERR_UNSUPPORTED, "allOf is supported with one schema only");
            return;
        }
        sb_printf(&g->out, "r%u ::= r%u\n", id, sub(g, &e->items[0]));
        g->depth--;
        return;
    }
    if (jget(s, "not") != NULL || jget(s, "if") != NULL || jget(s, "patternProperties") != NULL ||
        jget(s, "dependentRequired") != NULL || jget(s, "propertyNames") != NULL) {
        gfail(g, MOON_ERR_UNSUPPORTED,
              "schema keywords not, if, patternProperties, dependentRequired and propertyNames "
              "are not supported");
        return;
    }
    t = jget(s, "type");
    if (t == NULL) {
        if (jget(s, "properties") != NULL) {
            gen_type(g, s, "object", id);
        } else if (jget(s, "items") != NULL) {
            gen_type(g, s, "array", id);
        } else {
            sb_printf(&g->out, "r%u ::= value\n", id);
        }
    } else if (t->type == J_STR) {
        const jv_t *nullable = jget(s, "nullable");
        if (nullable != NULL && nullable->type == J_BOOL && nullable->b) {
            uint32_t inner = g->next_id++;
            gen_type(g, s, t->str, inner);
            sb_printf(&g->out, "r%u ::= r%u | null\n", id, inner);
        } else {
            gen_type(g, s, t->str, id);
        }
    } else if (t->type == J_ARR && t->n > 0) {
        uint32_t first = g->next_id;
        g->next_id += t->n;
        for (uint32_t i = 0; i < t->n; i++) {
            if (t->items[i].type != J_STR) {
                gfail(g, MOON_ERR_INVALID_PARAM, "type must be a string or an array of strings");
                return;
            }
            gen_type(g, s, t->items[i].str, first + i);
        }
        sb_printf(&g->out, "r%u ::= ", id);
        for (uint32_t i = 0; i < t->n; i++) {
            sb_printf(&g->out, "%sr%u", i ? " | " : "", first + i);
        }
        sb_printf(&g->out, "\n");
    } else {
        gfail(g, MOON_ERR_INVALID_PARAM, "type must be a string or an array of strings");
    }
    g->depth--;
}

/* root ::= prefix r0 suffix (the wrappers of tool calls) */
static moon_status_t schema_gbnf(const char *schema, size_t len, const char *root_rule, char *out,
                                 size_t cap, size_t *len_p, char *err, size_t err_cap)
{
    gen_t     g;
    jreader_t r = {schema, schema + (schema ? len : 0), 0, 0};
    jv_t      root;

    if (err != NULL && err_cap > 0) {
        err[0] = '\0';
    }
    if (out == NULL || cap == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    memset(&g, 0, sizeof(g));
    g.out     = (sbuf_t){out, 0, cap, 0};
    g.err     = err;
    g.err_cap = err_cap;
    out[0]    = '\0';
    sb_printf(&g.out, "%s", root_rule);
    sb_printf(&g.out, "%s", base_rules);
    if (schema == NULL) {
        sb_printf(&g.out, "r0 ::= object\n");
    } else {
        if (!jvalue(&r, &root) || (jskip(&r), r.s != r.end)) {
            jv_free(&root);
            if (r.oom) {
                return MOON_ERR_NO_MEMORY;
            }
            gfail(&g, MOON_ERR_INVALID_PARAM, "the schema is not valid JSON (offset %ld)",
                  (long)(r.s - schema));
            return MOON_ERR_INVALID_PARAM;
        }
        g.root    = &root;
        g.next_id = 1;
        gen(&g, &root, 0);
        jv_free(&root);
    }
    if (g.failed) {
        return (moon_status_t)g.failed;
    }
    if (g.out.full) {
        gfail(&g, MOON_ERR_NO_RESOURCE, "the schema's grammar is over %zu bytes", cap);
        return MOON_ERR_NO_RESOURCE;
    }
    if (len_p != NULL) {
        *len_p = g.out.n;
    }
    return MOON_OK;
}

moon_status_t moon_grammar_schema_to_gbnf(const char *schema, size_t len, char *out, size_t cap,
                                          size_t *len_p, char *err, size_t err_cap)
{
    return schema_gbnf(schema, len, "root ::= r0\n", out, cap, len_p, err, err_cap);
}

#define GBNF_CAP (1u << 20)

moon_status_t moon_grammar_from_spec(const char *spec, size_t len, moon_grammar_t **g_p, char *err,
                                     size_t err_cap)
{
    static const struct {
        const char *kind;
        const char *root;
    } kinds[] = {
        {"json_object", "root ::= r0\n"},
        {"json_schema", "root ::= r0\n"},
        {"tool_call", "root ::= \"<tool_call>\" r0 \"</tool_call>\"\n"},
        {"tool_calls", "root ::= \"<tool_call>\" r0 \"</tool_call>\" (\"\\n<tool_call>\" r0 "
                       "\"</tool_call>\")*\n"},
        {"mistral_calls", "root ::= \"[TOOL_CALLS]\" r0\n"},
    };
    const char   *nl   = spec != NULL ? memchr(spec, '\n', len) : NULL;
    size_t        klen = nl != NULL ? (size_t)(nl - spec) : len;
    const char   *body = nl != NULL ? nl + 1 : spec + len;
    size_t        blen = len - (size_t)(body - spec);
    char         *gbnf;
    size_t        glen;
    moon_status_t status;

    if (err != NULL && err_cap > 0) {
        err[0] = '\0';
    }
    if (spec == NULL || g_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (klen == 4 && memcmp(spec, "gbnf", 4) == 0) {
        return moon_grammar_from_gbnf(body, blen, g_p, err, err_cap);
    }
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strlen(kinds[i].kind) != klen || memcmp(spec, kinds[i].kind, klen) != 0) {
            continue;
        }
        gbnf = moon_malloc(GBNF_CAP);
        if (gbnf == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        status = schema_gbnf(i == 0 ? NULL : body, blen, kinds[i].root, gbnf, GBNF_CAP, &glen, err,
                             err_cap);
        if (status == MOON_OK) {
            status = moon_grammar_from_gbnf(gbnf, glen, g_p, err, err_cap);
        }
        moon_free(gbnf);
        return status;
    }
    if (err != NULL && err_cap > 0) {
        snprintf(err, err_cap, "unknown grammar kind '%.*s'", (int)(klen < 32 ? klen : 32), spec);
    }
    return MOON_ERR_INVALID_PARAM;
}
