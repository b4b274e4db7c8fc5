/* model/jinja/value.c - the engine's arena, values, JSON in and out. */
#include "jinja_internal.h"

#include "moonlet/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jj_chunk {
    jj_chunk_t *next;
    size_t      cap;
    max_align_t data[];
};

static void jj_fail(jj_arena_t *a)
{
    longjmp(*a->fail, 1);
}

void *jj_alloc(jj_arena_t *a, size_t n)
{
    void *p;

    n = (n + 15) & ~(size_t)15;
    if (a->head == NULL || a->used + n > a->cap) {
        size_t      cap = n > 16384 ? n : 16384;
        jj_chunk_t *c;

        if (a->limit != 0 && a->total + cap > a->limit) {
            a->status_on_fail = MOON_ERR_NO_RESOURCE;
            jj_fail(a);
        }
        c = moon_malloc(sizeof(*c) + cap);
        if (c == NULL) {
            a->status_on_fail = MOON_ERR_NO_MEMORY;
            jj_fail(a);
        }
        c->next = a->head;
        c->cap  = cap;
        a->head = c;
        a->used = 0;
        a->cap  = cap;
        a->total += cap;
    }
    p = (char *)a->head->data + a->used;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *jj_strndup(jj_arena_t *a, const char *s, size_t n)
{
    char *d = jj_alloc(a, n + 1);

    memcpy(d, s, n);
    return d;
}

void jj_arena_free(jj_arena_t *a)
{
    while (a->head != NULL) {
        jj_chunk_t *next = a->head->next;
        moon_free(a->head);
        a->head = next;
    }
    a->used = a->cap = a->total = 0;
}

jj_value_t jj_str(jj_arena_t *a, const char *s, size_t n)
{
    jj_value_t v = {.kind = JV_STR};

    v.u.str.s = jj_strndup(a, s, n);
    v.u.str.n = n;
    return v;
}

jj_value_t jj_str_lit(const char *s)
{
    jj_value_t v = {.kind = JV_STR};

    v.u.str.s = s;
    v.u.str.n = strlen(s);
    return v;
}

jj_value_t jj_int(int64_t i)
{
    jj_value_t v = {.kind = JV_INT};

    v.u.i = i;
    return v;
}

jj_value_t jj_bool(int b)
{
    jj_value_t v = {.kind = JV_BOOL};

    v.u.b = b != 0;
    return v;
}

jj_value_t jj_new_list(jj_arena_t *a)
{
    jj_value_t v = {.kind = JV_LIST};

    v.u.list = jj_alloc(a, sizeof(jj_list_t));
    return v;
}

jj_value_t jj_new_dict(jj_arena_t *a, jj_vkind_t kind)
{
    jj_value_t v = {.kind = kind};

    v.u.dict = jj_alloc(a, sizeof(jj_dict_t));
    return v;
}

void jj_list_push(jj_arena_t *a, jj_list_t *l, jj_value_t v)
{
    if (l->n == l->cap) {
        size_t      cap = l->cap ? l->cap * 2 : 4;
        jj_value_t *nv  = jj_alloc(a, cap * sizeof(*nv));
        if (l->n > 0) {
            memcpy(nv, l->v, l->n * sizeof(*nv));
        }
        l->v   = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jj_value_t *jj_dict_get(const jj_dict_t *d, const char *k, size_t kn)
{
    for (size_t i = 0; i < d->n; i++) {
        if (d->klen[i] == kn && memcmp(d->keys[i], k, kn) == 0) {
            return &d->v[i];
        }
    }
    return NULL;
}

void jj_dict_set(jj_arena_t *a, jj_dict_t *d, const char *k, size_t kn, jj_value_t v)
{
    jj_value_t *old = jj_dict_get(d, k, kn);

    if (old != NULL) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t       cap  = d->cap ? d->cap * 2 : 4;
        const char **keys = jj_alloc(a, cap * sizeof(*keys));
        size_t      *klen = jj_alloc(a, cap * sizeof(*klen));
        jj_value_t  *nv   = jj_alloc(a, cap * sizeof(*nv));
        if (d->n > 0) {
            memcpy(keys, d->keys, d->n * sizeof(*keys));
            memcpy(klen, d->klen, d->n * sizeof(*klen));
            memcpy(nv, d->v, d->n * sizeof(*nv));
        }
        d->keys = keys;
        d->klen = klen;
        d->v    = nv;
        d->cap  = cap;
    }
    d->keys[d->n] = k;
    d->klen[d->n] = kn;
    d->v[d->n]    = v;
    d->n++;
}

int jj_truthy(const jj_value_t *v)
{
    switch (v->kind) {
    case JV_BOOL:
        return v->u.b;
    case JV_INT:
        return v->u.i != 0;
    case JV_FLOAT:
        return v->u.f != 0.0;
    case JV_STR:
        return v->u.str.n > 0;
    case JV_LIST:
        return v->u.list->n > 0;
    case JV_DICT:
        return v->u.dict->n > 0;
    case JV_UNDEF:
    case JV_NONE:
        return 0;
    default:
        return 1;
    }
}

static int is_num(const jj_value_t *v)
{
    return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL;
}

static double num(const jj_value_t *v)
{
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}

int jj_equal(const jj_value_t *x, const jj_value_t *y)
{
    if (is_num(x) && is_num(y)) {
        return num(x) == num(y);
    }
    if (x->kind != y->kind) {
        return 0;
    }
    switch (x->kind) {
    case JV_UNDEF:
    case JV_NONE:
        return 1;
    case JV_STR:
        return x->u.str.n == y->u.str.n && memcmp(x->u.str.s, y->u.str.s, x->u.str.n) == 0;
    case JV_LIST:
        if (x->u.list->n != y->u.list->n) {
            return 0;
        }
        for (size_t i = 0; i < x->u.list->n; i++) {
            if (!jj_equal(&x->u.list->v[i], &y->u.list->v[i])) {
                return 0;
            }
        }
        return 1;
    case JV_DICT:
    case JV_NS:
        if (x->u.dict->n != y->u.dict->n) {
            return 0;
        }
        for (size_t i = 0; i < x->u.dict->n; i++) {
            jj_value_t *o = jj_dict_get(y->u.dict, x->u.dict->keys[i], x->u.dict->klen[i]);
            if (o == NULL || !jj_equal(&x->u.dict->v[i], o)) {
                return 0;
            }
        }
        return 1;
    default:
        return x->u.macro == y->u.macro;
    }
}

/* ---- JSON in ---- */
typedef struct {
    jj_arena_t *a;
    const char *s, *end;
    int         depth;
} json_in_t;

static void skip_ws(json_in_t *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\n' || *j->s == '\r' || *j->s == '\t')) {
        j->s++;
    }
}

static void put_utf8(char *d, size_t *n, uint32_t c)
{
    if (c < 0x80) {
        d[(*n)++] = (char)c;
    } else if (c < 0x800) {
        d[(*n)++] = (char)(0xC0 | (c >> 6));
        d[(*n)++] = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        d[(*n)++] = (char)(0xE0 | (c >> 12));
        d[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        d[(*n)++] = (char)(0x80 | (c & 0x3F));
    } else {
        d[(*n)++] = (char)(0xF0 | (c >> 18));
        d[(*n)++] = (char)(0x80 | ((c >> 12) & 0x3F));
        d[(*n)++] = (char)(0x80 | ((c >> 6) & 0x3F));
        d[(*n)++] = (char)(0x80 | (c & 0x3F));
    }
}

static int hex4(const char *s, uint32_t *c)
{
    *c = 0;
    for (int i = 0; i < 4; i++) {
        char h = s[i];
        *c <<= 4;
        if (h >= '0' && h <= '9') {
            *c |= (uint32_t)(h - '0');
        } else if (h >= 'a' && h <= 'f') {
            *c |= (uint32_t)(h - 'a' + 10);
        } else if (h >= 'A' && h <= 'F') {
            *c |= (uint32_t)(h - 'A' + 10);
        } else {
            return -1;
        }
    }
    return 0;
}

static int json_string(json_in_t *j, const char **s_p, size_t *n_p)
{
    const char *p = ++j->s;
    char       *d;
    size_t      n = 0;

    while (p < j->end && *p != '"') {
        p += *p == '\\' ? 2 : 1;
    }
    if (p >= j->end) {
        return -1;
    }
    d = jj_alloc(j->a, (size_t)(p - j->s) + 1);
    while (*j->s != '"') {
        char ch = *j->s++;
        if (ch != '\\') {
            d[n++] = ch;
            continue;
        }
        ch = *j->s++;
        switch (ch) {
        case 'n':
            d[n++] = '\n';
            break;
        case 't':
            d[n++] = '\t';
            break;
        case 'r':
            d[n++] = '\r';
            break;
        case 'b':
            d[n++] = '\b';
            break;
        case 'f':
            d[n++] = '\f';
            break;
        case 'u': {
            uint32_t c, lo;
            if (j->end - j->s < 4 || hex4(j->s, &c) != 0) {
                return -1;
            }
            j->s += 4;
            if (c >= 0xD800 && c < 0xDC00 && j->end - j->s >= 6 && j->s[0] == '\\' &&
                j->s[1] == 'u' && hex4(j->s + 2, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                j->s += 6;
            }
            put_utf8(d, &n, c); /* never longer than the escape it replaces */
            break;
        }
        default:
            d[n++] = ch;
            break;
        }
    }
    j->s++;
    *s_p = d;
    *n_p = n;
    return 0;
}

static int json_value(json_in_t *j, jj_value_t *out)
{
    skip_ws(j);
    if (j->s >= j->end || ++j->depth > 64) {
        return -1;
    }
    if (*j->s == '{' || *j->s == '[') {
        int obj = *j->s++ == '{';
        *out    = obj ? jj_new_dict(j->a, JV_DICT) : jj_new_list(j->a);
        skip_ws(j);
        if (j->s < j->end && *j->s == (obj ? '}' : ']')) {
            j->s++;
            j->depth--;
            return 0;
        }
        for (;;) {
            jj_value_t  v;
            const char *k  = NULL;
            size_t      kn = 0;

            skip_ws(j);
            if (obj) {
                if (j->s >= j->end || *j->s != '"' || json_string(j, &k, &kn) != 0) {
                    return -1;
                }
                skip_ws(j);
                if (j->s >= j->end || *j->s++ != ':') {
                    return -1;
                }
            }
            if (json_value(j, &v) != 0) {
                return -1;
            }
            if (obj) {
                jj_dict_set(j->a, out->u.dict, k, kn, v);
            } else {
                jj_list_push(j->a, out->u.list, v);
            }
            skip_ws(j);
            if (j->s < j->end && *j->s == ',') {
                j->s++;
                continue;
            }
            if (j->s < j->end && *j->s == (obj ? '}' : ']')) {
                j->s++;
                j->depth--;
                return 0;
            }
            return -1;
        }
    }
    j->depth--;
    if (*j->s == '"') {
        out->kind = JV_STR;
        return json_string(j, &out->u.str.s, &out->u.str.n);
    }
    if (j->end - j->s >= 4 && memcmp(j->s, "true", 4) == 0) {
        j->s += 4;
        *out = jj_bool(1);
        return 0;
    }
    if (j->end - j->s >= 5 && memcmp(j->s, "false", 5) == 0) {
        j->s += 5;
        *out = jj_bool(0);
        return 0;
    }
    if (j->end - j->s >= 4 && memcmp(j->s, "null", 4) == 0) {
        j->s += 4;
        out->kind = JV_NONE;
        return 0;
    }
    {
        char   tmp[64];
        size_t n = 0;
        char  *e;
        int    is_float = 0;

        while (j->s + n < j->end && n < sizeof(tmp) - 1 && strchr("+-0123456789.eE", j->s[n])) {
            is_float |= j->s[n] == '.' || j->s[n] == 'e' || j->s[n] == 'E';
            tmp[n] = j->s[n];
            n++;
        }
        tmp[n] = 0;
        if (n == 0) {
            return -1;
        }
        if (is_float) {
            double f = strtod(tmp, &e);
            /* JavaScript (Hugging Face's renderer) keeps 2.0 as an integer */
            if (f == floor(f) && fabs(f) < 9e15) {
                *out = jj_int((int64_t)f);
            } else {
                out->kind = JV_FLOAT;
                out->u.f  = f;
            }
        } else {
            *out = jj_int(strtoll(tmp, &e, 10));
        }
        if (*e != 0) {
            return -1;
        }
        j->s += n;
        return 0;
    }
}

int jj_from_json(jj_arena_t *a, const char *s, size_t n, jj_value_t *out)
{
    json_in_t j = {.a = a, .s = s, .end = s + n};

    if (json_value(&j, out) != 0) {
        return -1;
    }
    skip_ws(&j);
    return j.s == j.end ? 0 : -1;
}

/* ---- output ---- */
void jj_buf_put(jj_buf_t *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char  *ns;

        while (cap < b->n + n + 1) {
            cap *= 2;
        }
        if (b->limit != 0 && b->n + n > b->limit) {
            b->a->status_on_fail = MOON_ERR_NO_RESOURCE;
            jj_fail(b->a);
        }
        if (b->in_arena) {
            ns = jj_alloc(b->a, cap);
            if (b->n > 0) {
                memcpy(ns, b->s, b->n);
            }
        } else {
            ns = moon_realloc(b->s, cap);
        }
        if (ns == NULL) {
            b->a->status_on_fail = MOON_ERR_NO_MEMORY;
            jj_fail(b->a);
        }
        b->s   = ns;
        b->cap = cap;
    }
    if (n > 0) {
        memcpy(b->s + b->n, s, n);
    }
    b->n += n;
    b->s[b->n] = 0;
}

void jj_buf_puts(jj_buf_t *b, const char *s)
{
    jj_buf_put(b, s, strlen(s));
}

static void buf_float(jj_buf_t *b, double f, int python)
{
    char tmp[40];

    if (f == floor(f) && fabs(f) < 1e16) {
        snprintf(tmp, sizeof(tmp), python ? "%.1f" : "%.0f", f);
    } else {
        snprintf(tmp, sizeof(tmp), "%.17g", f);
        /* the shortest form that reads back the same, as both languages print */
        for (int p = 1; p <= 17; p++) {
            char t2[40];
            snprintf(t2, sizeof(t2), "%.*g", p, f);
            if (strtod(t2, NULL) == f) {
                memcpy(tmp, t2, sizeof(tmp));
                break;
            }
        }
    }
    jj_buf_puts(b, tmp);
}

void jj_buf_value(jj_buf_t *b, const jj_value_t *v)
{
    char tmp[32];

    switch (v->kind) {
    case JV_UNDEF:
        return;
    case JV_NONE:
        jj_buf_puts(b, "None");
        return;
    case JV_BOOL:
        jj_buf_puts(b, v->u.b ? "True" : "False");
        return;
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v->u.i);
        jj_buf_puts(b, tmp);
        return;
    case JV_FLOAT:
        buf_float(b, v->u.f, 1);
        return;
    case JV_STR:
        jj_buf_put(b, v->u.str.s, v->u.str.n);
        return;
    case JV_LIST:
    case JV_DICT:
    case JV_NS:
        jj_buf_json(b, v, -1, 0);
        return;
    default:
        jj_buf_puts(b, "<function>");
        return;
    }
}

static void json_str(jj_buf_t *b, const char *s, size_t n)
{
    jj_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char          esc[8];

        switch (c) {
        case '"':
            jj_buf_put(b, "\\\"", 2);
            break;
        case '\\':
            jj_buf_put(b, "\\\\", 2);
            break;
        case '\n':
            jj_buf_put(b, "\\n", 2);
            break;
        case '\r':
            jj_buf_put(b, "\\r", 2);
            break;
        case '\t':
            jj_buf_put(b, "\\t", 2);
            break;
        case '\b':
            jj_buf_put(b, "\\b", 2);
            break;
        case '\f':
            jj_buf_put(b, "\\f", 2);
            break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
                jj_buf_puts(b, esc);
            } else {
                jj_buf_put(b, (const char *)&s[i], 1);
            }
        }
    }
    jj_buf_put(b, "\"", 1);
}

static void newline_indent(jj_buf_t *b, int indent, int depth)
{
    jj_buf_put(b, "\n", 1);
    for (int i = 0; i < indent * depth; i++) {
        jj_buf_put(b, " ", 1);
    }
}

void jj_buf_json(jj_buf_t *b, const jj_value_t *v, int indent, int depth)
{
    const char *sep = indent > 0 ? "," : ", ";

    if (depth > 64) {
        b->a->status_on_fail = MOON_ERR_NO_RESOURCE;
        jj_fail(b->a);
    }
    switch (v->kind) {
    case JV_UNDEF:
    case JV_NONE:
        jj_buf_puts(b, "null");
        return;
    case JV_BOOL:
        jj_buf_puts(b, v->u.b ? "true" : "false");
        return;
    case JV_FLOAT:
        buf_float(b, v->u.f, 0);
        return;
    case JV_STR:
        json_str(b, v->u.str.s, v->u.str.n);
        return;
    case JV_LIST:
        jj_buf_put(b, "[", 1);
        for (size_t i = 0; i < v->u.list->n; i++) {
            if (i > 0) {
                jj_buf_puts(b, sep);
            }
            if (indent > 0) {
                newline_indent(b, indent, depth + 1);
            }
            jj_buf_json(b, &v->u.list->v[i], indent, depth + 1);
        }
        if (indent > 0 && v->u.list->n > 0) {
            newline_indent(b, indent, depth);
        }
        jj_buf_put(b, "]", 1);
        return;
    case JV_DICT:
    case JV_NS:
        jj_buf_put(b, "{", 1);
        for (size_t i = 0; i < v->u.dict->n; i++) {
            if (i > 0) {
                jj_buf_puts(b, sep);
            }
            if (indent > 0) {
                newline_indent(b, indent, depth + 1);
            }
            json_str(b, v->u.dict->keys[i], v->u.dict->klen[i]);
            jj_buf_puts(b, ": ");
            jj_buf_json(b, &v->u.dict->v[i], indent, depth + 1);
        }
        if (indent > 0 && v->u.dict->n > 0) {
            newline_indent(b, indent, depth);
        }
        jj_buf_put(b, "}", 1);
        return;
    default:
        jj_buf_value(b, v);
        return;
    }
}

jj_value_t jj_buf_take(jj_buf_t *b)
{
    jj_value_t v = jj_str(b->a, b->s != NULL ? b->s : "", b->n);

    b->n = 0;
    return v;
}
