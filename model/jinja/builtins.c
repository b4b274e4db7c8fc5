/* model/jinja/builtins.c - filters, tests, methods of strings, dicts and
 * lists, and the global functions (raise_exception, namespace, range,
 * strftime_now) that chat templates use. */
#include "jinja_builtins.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const g_filters[] = {
    "trim",   "tojson",     "length",     "count",  "upper",     "lower", "default",
    "d",      "items",      "join",       "string", "replace",   "first", "last",
    "list",   "reverse",    "capitalize", "title",  "int",       "float", "abs",
    "map",    "selectattr", "rejectattr", "select", "reject",    "safe",  "indent",
    "unique", "dictsort",   "sum",        "round",  "wordcount", "batch", NULL};

static const char *const g_tests[] = {"defined", "undefined",   "none",    "string",   "number",
                                      "integer", "float",       "mapping", "iterable", "sequence",
                                      "boolean", "true",        "false",   "callable", "odd",
                                      "even",    "divisibleby", "equalto", "eq",       "ne",
                                      "sameas",  "lower",       "upper",   "in",       NULL};

static const char *const g_funcs[] = {"raise_exception", "namespace", "range",
                                      "strftime_now",    "dict",      NULL};

static int in_list(const char *const *list, const char *name)
{
    for (size_t i = 0; list[i] != NULL; i++) {
        if (strcmp(list[i], name) == 0) {
            return 1;
        }
    }
    return 0;
}

int jj_filter_known(const char *name)
{
    return in_list(g_filters, name);
}

int jj_test_known(const char *name)
{
    return in_list(g_tests, name);
}

int jj_is_func(const char *name)
{
    return in_list(g_funcs, name);
}

const jj_value_t *jj_arg(const jj_args_t *args, size_t i, const char *kw)
{
    if (i < args->n_pos) {
        return &args->pos[i];
    }
    for (size_t k = 0; kw != NULL && k < args->n_kw; k++) {
        if (strcmp(args->kw[k], kw) == 0) {
            return &args->kwv[k];
        }
    }
    return NULL;
}

jj_value_t jj_to_str(jj_eval_t *e, const jj_value_t *v)
{
    jj_buf_t b = {.a = jj_eval_arena(e), .in_arena = 1};

    if (v->kind == JV_STR) {
        return *v;
    }
    jj_buf_value(&b, v);
    return jj_buf_take(&b);
}

static jj_value_t str_n(jj_eval_t *e, const char *s, size_t n)
{
    return jj_str(jj_eval_arena(e), s, n);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* strip: which 1 left, 2 right, 3 both; chars NULL: white space */
static jj_value_t strip(jj_eval_t *e, const jj_value_t *v, int which, const jj_value_t *chars)
{
    const char *s = v->u.str.s;
    size_t      n = v->u.str.n;

#define STRIPPED(c)                                                                                \
    (chars != NULL && chars->kind == JV_STR ? memchr(chars->u.str.s, (c), chars->u.str.n) != NULL  \
                                            : is_space(c))
    while ((which & 1) && n > 0 && STRIPPED(*s)) {
        s++;
        n--;
    }
    while ((which & 2) && n > 0 && STRIPPED(s[n - 1])) {
        n--;
    }
#undef STRIPPED
    return str_n(e, s, n);
}

static jj_value_t change_case(jj_eval_t *e, const jj_value_t *v, int mode)
{
    jj_value_t r     = str_n(e, v->u.str.s, v->u.str.n);
    char      *d     = (char *)r.u.str.s;
    int        start = 1;

    for (size_t i = 0; i < r.u.str.n; i++) {
        unsigned char c = (unsigned char)d[i];
        switch (mode) {
        case 0: /* upper */
            d[i] = (char)toupper(c);
            break;
        case 1: /* lower */
            d[i] = (char)tolower(c);
            break;
        case 2: /* capitalize */
            d[i] = (char)(i == 0 ? toupper(c) : tolower(c));
            break;
        default: /* title */
            d[i]  = (char)(start ? toupper(c) : tolower(c));
            start = !isalnum(c);
            break;
        }
    }
    return r;
}

static jj_value_t replace(jj_eval_t *e, const jj_node_t *at, const jj_value_t *v,
                          const jj_args_t *args)
{
    const jj_value_t *from = jj_arg(args, 0, "old"), *to = jj_arg(args, 1, "new");
    jj_buf_t          b = {.a = jj_eval_arena(e), .in_arena = 1};
    size_t            i = 0;

    if (from == NULL || to == NULL || from->kind != JV_STR || to->kind != JV_STR) {
        jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "replace needs two strings");
    }
    if (from->u.str.n == 0) {
        return *v;
    }
    jj_buf_put(&b, "", 0);
    while (i < v->u.str.n) {
        if (i + from->u.str.n <= v->u.str.n &&
            memcmp(v->u.str.s + i, from->u.str.s, from->u.str.n) == 0) {
            jj_buf_put(&b, to->u.str.s, to->u.str.n);
            i += from->u.str.n;
        } else {
            jj_buf_put(&b, v->u.str.s + i, 1);
            i++;
        }
    }
    return jj_buf_take(&b);
}

static jj_value_t split(jj_eval_t *e, const jj_value_t *v, const jj_args_t *args)
{
    const jj_value_t *sep  = jj_arg(args, 0, "sep");
    const jj_value_t *max  = jj_arg(args, 1, "maxsplit");
    int64_t           left = max != NULL && max->kind == JV_INT && max->u.i >= 0 ? max->u.i : -1;
    jj_value_t        r    = jj_new_list(jj_eval_arena(e));
    const char       *s = v->u.str.s, *end = s + v->u.str.n;

    if (sep == NULL || sep->kind != JV_STR || sep->u.str.n == 0) {
        /* runs of white space, none at the ends */
        while (s < end) {
            const char *w;
            while (s < end && is_space(*s)) {
                s++;
            }
            if (s == end) {
                break;
            }
            w = s;
            if (left == 0) {
                size_t n = (size_t)(end - s);
                while (n > 0 && is_space(s[n - 1])) {
                    n--;
                }
                jj_list_push(jj_eval_arena(e), r.u.list, str_n(e, s, n));
                break;
            }
            while (s < end && !is_space(*s)) {
                s++;
            }
            jj_list_push(jj_eval_arena(e), r.u.list, str_n(e, w, (size_t)(s - w)));
            left--;
        }
        return r;
    }
    for (;;) {
        const char *hit = NULL;
        for (const char *p = s; left != 0 && p + sep->u.str.n <= end; p++) {
            if (memcmp(p, sep->u.str.s, sep->u.str.n) == 0) {
                hit = p;
                break;
            }
        }
        if (hit == NULL) {
            jj_list_push(jj_eval_arena(e), r.u.list, str_n(e, s, (size_t)(end - s)));
            return r;
        }
        jj_list_push(jj_eval_arena(e), r.u.list, str_n(e, s, (size_t)(hit - s)));
        s = hit + sep->u.str.n;
        left--;
    }
}

static int affix(const jj_value_t *v, const jj_value_t *x, int end)
{
    if (x == NULL || x->kind != JV_STR || x->u.str.n > v->u.str.n) {
        return 0;
    }
    return memcmp(v->u.str.s + (end ? v->u.str.n - x->u.str.n : 0), x->u.str.s, x->u.str.n) == 0;
}

static int affix_any(const jj_value_t *v, const jj_value_t *x, int end)
{
    if (x != NULL && x->kind == JV_LIST) { /* a tuple of prefixes */
        for (size_t i = 0; i < x->u.list->n; i++) {
            if (affix(v, &x->u.list->v[i], end)) {
                return 1;
            }
        }
        return 0;
    }
    return affix(v, x, end);
}

static jj_value_t pairs(jj_eval_t *e, const jj_value_t *v)
{
    jj_arena_t *a = jj_eval_arena(e);
    jj_value_t  r = jj_new_list(a);

    for (size_t i = 0; i < v->u.dict->n; i++) {
        jj_value_t pair = jj_new_list(a);
        jj_list_push(a, pair.u.list, jj_str(a, v->u.dict->keys[i], v->u.dict->klen[i]));
        jj_list_push(a, pair.u.list, v->u.dict->v[i]);
        jj_list_push(a, r.u.list, pair);
    }
    return r;
}

int jj_has_method(const jj_value_t *self, const char *name)
{
    static const char *const str_m[]  = {"strip",    "lstrip", "rstrip", "split", "startswith",
                                         "endswith", "upper",  "lower",  "title", "capitalize",
                                         "replace",  "find",   "count",  "join",  NULL};
    static const char *const dict_m[] = {"items", "keys", "values", "get", NULL};
    static const char *const list_m[] = {"append", "index", NULL};

    switch (self->kind) {
    case JV_STR:
        return in_list(str_m, name);
    case JV_DICT:
        return in_list(dict_m, name);
    case JV_LIST:
        return in_list(list_m, name);
    default:
        return 0;
    }
}

jj_value_t jj_method(jj_eval_t *e, const jj_node_t *at, jj_value_t *self, const char *name,
                     const jj_args_t *args)
{
    jj_arena_t       *a  = jj_eval_arena(e);
    const jj_value_t *a0 = jj_arg(args, 0, NULL);

    if (self->kind == JV_STR) {
        if (strcmp(name, "strip") == 0) {
            return strip(e, self, 3, a0);
        }
        if (strcmp(name, "lstrip") == 0) {
            return strip(e, self, 1, a0);
        }
        if (strcmp(name, "rstrip") == 0) {
            return strip(e, self, 2, a0);
        }
        if (strcmp(name, "split") == 0) {
            return split(e, self, args);
        }
        if (strcmp(name, "startswith") == 0 || strcmp(name, "endswith") == 0) {
            return jj_bool(affix_any(self, a0, name[0] == 'e'));
        }
        if (strcmp(name, "upper") == 0) {
            return change_case(e, self, 0);
        }
        if (strcmp(name, "lower") == 0) {
            return change_case(e, self, 1);
        }
        if (strcmp(name, "capitalize") == 0) {
            return change_case(e, self, 2);
        }
        if (strcmp(name, "title") == 0) {
            return change_case(e, self, 3);
        }
        if (strcmp(name, "replace") == 0) {
            return replace(e, at, self, args);
        }
        if (strcmp(name, "find") == 0 || strcmp(name, "count") == 0) {
            int64_t count = 0;
            if (a0 == NULL || a0->kind != JV_STR || a0->u.str.n == 0) {
                jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "%s needs a non-empty string", name);
            }
            for (size_t i = 0; i + a0->u.str.n <= self->u.str.n;) {
                if (memcmp(self->u.str.s + i, a0->u.str.s, a0->u.str.n) == 0) {
                    if (name[0] == 'f') {
                        return jj_int((int64_t)i);
                    }
                    count++;
                    i += a0->u.str.n;
                } else {
                    i++;
                }
            }
            return jj_int(name[0] == 'f' ? -1 : count);
        }
        if (strcmp(name, "join") == 0 && a0 != NULL) {
            jj_args_t sep = {.pos = self, .n_pos = 1};
            return jj_filter(e, at, "join", *a0, &sep);
        }
    } else if (self->kind == JV_DICT) {
        if (strcmp(name, "items") == 0) {
            return pairs(e, self);
        }
        if (strcmp(name, "keys") == 0 || strcmp(name, "values") == 0) {
            jj_value_t r = jj_new_list(a);
            for (size_t i = 0; i < self->u.dict->n; i++) {
                jj_list_push(a, r.u.list,
                             name[0] == 'k'
                                 ? jj_str(a, self->u.dict->keys[i], self->u.dict->klen[i])
                                 : self->u.dict->v[i]);
            }
            return r;
        }
        if (strcmp(name, "get") == 0 && a0 != NULL && a0->kind == JV_STR) {
            jj_value_t       *got  = jj_dict_get(self->u.dict, a0->u.str.s, a0->u.str.n);
            const jj_value_t *def  = jj_arg(args, 1, "default");
            jj_value_t        none = {.kind = JV_NONE};
            return got != NULL ? *got : def != NULL ? *def : none;
        }
    } else if (self->kind == JV_LIST) {
        if (strcmp(name, "append") == 0 && a0 != NULL) {
            jj_value_t none = {.kind = JV_NONE};
            jj_list_push(a, self->u.list, *a0);
            return none;
        }
        if (strcmp(name, "index") == 0 && a0 != NULL) {
            for (size_t i = 0; i < self->u.list->n; i++) {
                if (jj_equal(&self->u.list->v[i], a0)) {
                    return jj_int((int64_t)i);
                }
            }
            jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "index: the value is not in the list");
        }
    }
    jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "bad call of method '%s'", name);
}

static int64_t length(const jj_value_t *v)
{
    switch (v->kind) {
    case JV_STR: {
        int64_t n = 0; /* characters, not bytes */
        for (size_t i = 0; i < v->u.str.n; i++) {
            n += ((unsigned char)v->u.str.s[i] & 0xC0) != 0x80;
        }
        return n;
    }
    case JV_LIST:
        return (int64_t)v->u.list->n;
    case JV_DICT:
    case JV_NS:
        return (int64_t)v->u.dict->n;
    default:
        return 0;
    }
}

/* The items of a list, a dict's keys, or a string's characters. */
static jj_value_t as_list(jj_eval_t *e, const jj_node_t *at, const jj_value_t *v)
{
    jj_arena_t *a = jj_eval_arena(e);
    jj_value_t  r;

    if (v->kind == JV_LIST) {
        return *v;
    }
    r = jj_new_list(a);
    if (v->kind == JV_DICT || v->kind == JV_NS) {
        for (size_t i = 0; i < v->u.dict->n; i++) {
            jj_list_push(a, r.u.list, jj_str(a, v->u.dict->keys[i], v->u.dict->klen[i]));
        }
    } else if (v->kind == JV_STR) {
        for (size_t i = 0; i < v->u.str.n; i++) {
            jj_list_push(a, r.u.list, jj_str(a, v->u.str.s + i, 1));
        }
    } else if (v->kind != JV_UNDEF && v->kind != JV_NONE) {
        jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "the value is not iterable");
    }
    return r;
}

static jj_value_t attr_of(const jj_value_t *item, const jj_value_t *attr)
{
    jj_value_t undef = {.kind = JV_UNDEF};

    if (attr->kind == JV_STR && (item->kind == JV_DICT || item->kind == JV_NS)) {
        /* "a.b" walks nested mappings, as Jinja's attribute= does */
        const char *s = attr->u.str.s, *end = s + attr->u.str.n;
        jj_value_t  cur = *item;
        while (s <= end) {
            const char *dot = memchr(s, '.', (size_t)(end - s));
            size_t      n   = dot != NULL ? (size_t)(dot - s) : (size_t)(end - s);
            jj_value_t *got;
            if (cur.kind != JV_DICT && cur.kind != JV_NS) {
                return undef;
            }
            got = jj_dict_get(cur.u.dict, s, n);
            if (got == NULL) {
                return undef;
            }
            cur = *got;
            if (dot == NULL) {
                break;
            }
            s = dot + 1;
        }
        return cur;
    }
    return undef;
}

/* select/reject/selectattr/rejectattr: args [attr,] test [, test arg]. */
static jj_value_t select_items(jj_eval_t *e, const jj_node_t *at, const jj_value_t *v,
                               const jj_args_t *args, int by_attr, int keep)
{
    jj_arena_t *a     = jj_eval_arena(e);
    jj_value_t  items = as_list(e, at, v), r = jj_new_list(a);
    size_t      first = by_attr ? 1 : 0;
    const char *test  = NULL;
    jj_args_t   targs = {0};

    if (by_attr && args->n_pos < 1) {
        jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "selectattr needs an attribute name");
    }
    if (args->n_pos > first) {
        if (args->pos[first].kind != JV_STR) {
            jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "the test must be named by a string");
        }
        test = jj_strndup(a, args->pos[first].u.str.s, args->pos[first].u.str.n);
        if (!jj_test_known(test)) {
            jj_eval_fail(e, at, MOON_ERR_UNSUPPORTED, "unsupported test '%s'", test);
        }
        targs.pos   = args->pos + first + 1;
        targs.n_pos = args->n_pos - first - 1;
    }
    for (size_t i = 0; i < items.u.list->n; i++) {
        jj_value_t x = by_attr ? attr_of(&items.u.list->v[i], &args->pos[0]) : items.u.list->v[i];
        int        ok;
        jj_eval_step(e, at);
        ok = test != NULL ? jj_test(e, at, test, &x, &targs) : jj_truthy(&x);
        if (ok == keep) {
            jj_list_push(a, r.u.list, items.u.list->v[i]);
        }
    }
    return r;
}

static jj_value_t join(jj_eval_t *e, const jj_node_t *at, const jj_value_t *v,
                       const jj_args_t *args)
{
    const jj_value_t *sep   = jj_arg(args, 0, "d");
    const jj_value_t *attr  = jj_arg(args, 1, "attribute");
    jj_value_t        items = as_list(e, at, v);
    jj_buf_t          b     = {.a = jj_eval_arena(e), .in_arena = 1};

    jj_buf_put(&b, "", 0);
    for (size_t i = 0; i < items.u.list->n; i++) {
        jj_value_t x = attr != NULL ? attr_of(&items.u.list->v[i], attr) : items.u.list->v[i];
        if (i > 0 && sep != NULL) {
            jj_buf_value(&b, sep);
        }
        jj_buf_value(&b, &x);
    }
    return jj_buf_take(&b);
}

static jj_value_t indent(jj_eval_t *e, const jj_value_t *v, const jj_args_t *args)
{
    const jj_value_t *w          = jj_arg(args, 0, "width");
    const jj_value_t *first      = jj_arg(args, 1, "first");
    const jj_value_t *blank      = jj_arg(args, 2, "blank");
    jj_value_t        s          = jj_to_str(e, v);
    jj_buf_t          b          = {.a = jj_eval_arena(e), .in_arena = 1};
    int64_t           width      = w != NULL && w->kind == JV_INT ? w->u.i : 4;
    int               line_start = first != NULL && jj_truthy(first);

    jj_buf_put(&b, "", 0);
    for (size_t i = 0; i < s.u.str.n; i++) {
        int empty = s.u.str.s[i] == '\n';
        if (line_start && (!empty || (blank != NULL && jj_truthy(blank)))) {
            for (int64_t k = 0; k < width && k < 256; k++) {
                jj_buf_put(&b, " ", 1);
            }
        }
        jj_buf_put(&b, &s.u.str.s[i], 1);
        line_start = s.u.str.s[i] == '\n';
    }
    return jj_buf_take(&b);
}

jj_value_t jj_filter(jj_eval_t *e, const jj_node_t *at, const char *name, jj_value_t v,
                     const jj_args_t *args)
{
    jj_arena_t       *a  = jj_eval_arena(e);
    const jj_value_t *a0 = jj_arg(args, 0, NULL);

    if (strcmp(name, "safe") == 0) {
        return v;
    }
    if (strcmp(name, "tojson") == 0) {
        const jj_value_t *ind = jj_arg(args, 0, "indent");
        jj_buf_t          b   = {.a = a, .in_arena = 1};
        jj_buf_put(&b, "", 0);
        jj_buf_json(&b, &v, ind != NULL && ind->kind == JV_INT ? (int)(ind->u.i & 63) : -1, 0);
        return jj_buf_take(&b);
    }
    if (strcmp(name, "length") == 0 || strcmp(name, "count") == 0) {
        return jj_int(length(&v));
    }
    if (strcmp(name, "string") == 0) {
        return jj_to_str(e, &v);
    }
    if (strcmp(name, "default") == 0 || strcmp(name, "d") == 0) {
        const jj_value_t *b   = jj_arg(args, 1, "boolean");
        jj_value_t        def = a0 != NULL ? *a0 : jj_str_lit("");
        if (v.kind == JV_UNDEF || (b != NULL && jj_truthy(b) && !jj_truthy(&v))) {
            return def;
        }
        return v;
    }
    if (strcmp(name, "items") == 0) {
        if (v.kind == JV_UNDEF || v.kind == JV_NONE) {
            return jj_new_list(a);
        }
        if (v.kind != JV_DICT && v.kind != JV_NS) {
            jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "items needs a mapping");
        }
        return pairs(e, &v);
    }
    if (strcmp(name, "join") == 0) {
        return join(e, at, &v, args);
    }
    if (strcmp(name, "list") == 0) {
        return as_list(e, at, &v);
    }
    if (strcmp(name, "first") == 0 || strcmp(name, "last") == 0) {
        jj_value_t items = as_list(e, at, &v), undef = {.kind = JV_UNDEF};
        if (items.u.list->n == 0) {
            return undef;
        }
        return items.u.list->v[name[0] == 'f' ? 0 : items.u.list->n - 1];
    }
    if (strcmp(name, "reverse") == 0) {
        jj_value_t items = as_list(e, at, &v), r;
        if (v.kind == JV_STR) {
            char *d = jj_alloc(a, v.u.str.n + 1);
            for (size_t i = 0; i < v.u.str.n; i++) {
                d[i] = v.u.str.s[v.u.str.n - 1 - i];
            }
            return str_n(e, d, v.u.str.n);
        }
        r = jj_new_list(a);
        for (size_t i = items.u.list->n; i > 0; i--) {
            jj_list_push(a, r.u.list, items.u.list->v[i - 1]);
        }
        return r;
    }
    if (strcmp(name, "unique") == 0) {
        jj_value_t items = as_list(e, at, &v), r = jj_new_list(a);
        for (size_t i = 0; i < items.u.list->n; i++) {
            int seen = 0;
            for (size_t k = 0; k < r.u.list->n && !seen; k++) {
                seen = jj_equal(&r.u.list->v[k], &items.u.list->v[i]);
            }
            if (!seen) {
                jj_list_push(a, r.u.list, items.u.list->v[i]);
            }
        }
        return r;
    }
    if (strcmp(name, "map") == 0) {
        const jj_value_t *attr  = jj_arg(args, 99, "attribute");
        jj_value_t        items = as_list(e, at, &v), r = jj_new_list(a);
        for (size_t i = 0; i < items.u.list->n; i++) {
            jj_args_t  none = {0};
            jj_value_t x;
            if (attr != NULL) {
                x = attr_of(&items.u.list->v[i], attr);
            } else if (a0 != NULL && a0->kind == JV_STR) {
                char *f = jj_strndup(a, a0->u.str.s, a0->u.str.n);
                if (!jj_filter_known(f)) {
                    jj_eval_fail(e, at, MOON_ERR_UNSUPPORTED, "unsupported filter '%s'", f);
                }
                x = jj_filter(e, at, f, items.u.list->v[i], &none);
            } else {
                jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "map needs a filter or attribute=");
            }
            jj_list_push(a, r.u.list, x);
        }
        return r;
    }
    if (strcmp(name, "select") == 0 || strcmp(name, "reject") == 0) {
        return select_items(e, at, &v, args, 0, name[0] == 's');
    }
    if (strcmp(name, "selectattr") == 0 || strcmp(name, "rejectattr") == 0) {
        return select_items(e, at, &v, args, 1, name[0] == 's');
    }
    if (strcmp(name, "dictsort") == 0) {
        jj_value_t r;
        if (v.kind != JV_DICT) {
            jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "dictsort needs a mapping");
        }
        r = pairs(e, &v);
        /* insertion sort by key: mappings in templates are small */
        for (size_t i = 1; i < r.u.list->n; i++) {
            for (size_t k = i; k > 0; k--) {
                jj_value_t *x = &r.u.list->v[k - 1].u.list->v[0], *y = &r.u.list->v[k].u.list->v[0];
                size_t      n = x->u.str.n < y->u.str.n ? x->u.str.n : y->u.str.n;
                int         c = memcmp(x->u.str.s, y->u.str.s, n);
                jj_value_t  t;
                if (c < 0 || (c == 0 && x->u.str.n <= y->u.str.n)) {
                    break;
                }
                t                  = r.u.list->v[k - 1];
                r.u.list->v[k - 1] = r.u.list->v[k];
                r.u.list->v[k]     = t;
            }
        }
        return r;
    }
    if (strcmp(name, "indent") == 0) {
        return indent(e, &v, args);
    }
    if (strcmp(name, "int") == 0 || strcmp(name, "float") == 0 || strcmp(name, "abs") == 0 ||
        strcmp(name, "round") == 0 || strcmp(name, "sum") == 0) {
        double     d = 0;
        jj_value_t r = {.kind = JV_FLOAT};
        if (strcmp(name, "sum") == 0) {
            jj_value_t items   = as_list(e, at, &v);
            int        all_int = 1;
            int64_t    isum    = 0;
            for (size_t i = 0; i < items.u.list->n; i++) {
                jj_value_t *x = &items.u.list->v[i];
                all_int &= x->kind == JV_INT;
                isum += x->kind == JV_INT ? x->u.i : 0;
                d += x->kind == JV_INT ? (double)x->u.i : x->kind == JV_FLOAT ? x->u.f : 0;
            }
            if (all_int) {
                return jj_int(isum);
            }
            r.u.f = d;
            return r;
        }
        if (v.kind == JV_INT) {
            d = (double)v.u.i;
        } else if (v.kind == JV_FLOAT) {
            d = v.u.f;
        } else if (v.kind == JV_BOOL) {
            d = v.u.b;
        } else if (v.kind == JV_STR) {
            char *s = jj_strndup(a, v.u.str.s, v.u.str.n);
            d       = strtod(s, NULL);
        }
        if (name[0] == 'i') {
            return jj_int(isfinite(d) && fabs(d) < 9e18 ? (int64_t)d : 0);
        }
        if (name[0] == 'a') {
            if (v.kind == JV_INT) {
                return jj_int(v.u.i < 0 ? (int64_t)(0 - (uint64_t)v.u.i) : v.u.i);
            }
            d = fabs(d);
        }
        if (name[0] == 'r') {
            const jj_value_t *prec = jj_arg(args, 0, "precision");
            double p = pow(10, prec != NULL && prec->kind == JV_INT ? (double)(prec->u.i % 16) : 0);
            d        = round(d * p) / p;
        }
        r.u.f = d;
        return r;
    }
    if (strcmp(name, "wordcount") == 0) {
        jj_args_t  none = {0};
        jj_value_t s    = jj_to_str(e, &v);
        return jj_int((int64_t)split(e, &s, &none).u.list->n);
    }
    if (strcmp(name, "batch") == 0) {
        jj_value_t items = as_list(e, at, &v), r = jj_new_list(a), cur = {0};
        int64_t    size = a0 != NULL && a0->kind == JV_INT && a0->u.i > 0 ? a0->u.i : 1;
        for (size_t i = 0; i < items.u.list->n; i++) {
            if (i % (uint64_t)size == 0) {
                cur = jj_new_list(a);
                jj_list_push(a, r.u.list, cur);
            }
            jj_list_push(a, cur.u.list, items.u.list->v[i]);
        }
        return r;
    }
    /* string filters */
    v = jj_to_str(e, &v);
    if (strcmp(name, "trim") == 0) {
        return strip(e, &v, 3, a0);
    }
    if (strcmp(name, "upper") == 0) {
        return change_case(e, &v, 0);
    }
    if (strcmp(name, "lower") == 0) {
        return change_case(e, &v, 1);
    }
    if (strcmp(name, "capitalize") == 0) {
        return change_case(e, &v, 2);
    }
    if (strcmp(name, "title") == 0) {
        return change_case(e, &v, 3);
    }
    if (strcmp(name, "replace") == 0) {
        return replace(e, at, &v, args);
    }
    jj_eval_fail(e, at, MOON_ERR_UNSUPPORTED, "unsupported filter '%s'", name);
}

int jj_test(jj_eval_t *e, const jj_node_t *at, const char *name, const jj_value_t *v,
            const jj_args_t *args)
{
    const jj_value_t *a0 = jj_arg(args, 0, NULL);

    if (strcmp(name, "defined") == 0) {
        return v->kind != JV_UNDEF;
    }
    if (strcmp(name, "undefined") == 0) {
        return v->kind == JV_UNDEF;
    }
    if (strcmp(name, "none") == 0) {
        return v->kind == JV_NONE;
    }
    if (strcmp(name, "string") == 0) {
        return v->kind == JV_STR;
    }
    if (strcmp(name, "number") == 0) {
        return v->kind == JV_INT || v->kind == JV_FLOAT;
    }
    if (strcmp(name, "integer") == 0) {
        return v->kind == JV_INT;
    }
    if (strcmp(name, "float") == 0) {
        return v->kind == JV_FLOAT;
    }
    if (strcmp(name, "mapping") == 0) {
        return v->kind == JV_DICT || v->kind == JV_NS;
    }
    if (strcmp(name, "iterable") == 0 || strcmp(name, "sequence") == 0) {
        return v->kind == JV_LIST || v->kind == JV_DICT || v->kind == JV_STR;
    }
    if (strcmp(name, "boolean") == 0) {
        return v->kind == JV_BOOL;
    }
    if (strcmp(name, "true") == 0 || strcmp(name, "false") == 0) {
        return v->kind == JV_BOOL && v->u.b == (name[0] == 't');
    }
    if (strcmp(name, "callable") == 0) {
        return v->kind == JV_MACRO || v->kind == JV_FUNC || v->kind == JV_METHOD;
    }
    if (strcmp(name, "odd") == 0 || strcmp(name, "even") == 0) {
        return v->kind == JV_INT && ((v->u.i & 1) != 0) == (name[0] == 'o');
    }
    if (strcmp(name, "lower") == 0 || strcmp(name, "upper") == 0) {
        if (v->kind != JV_STR) {
            return 0;
        }
        for (size_t i = 0; i < v->u.str.n; i++) {
            if (name[0] == 'l' ? isupper((unsigned char)v->u.str.s[i])
                               : islower((unsigned char)v->u.str.s[i])) {
                return 0;
            }
        }
        return 1;
    }
    if (a0 == NULL) {
        jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "test '%s' needs an argument", name);
    }
    if (strcmp(name, "divisibleby") == 0) {
        return v->kind == JV_INT && a0->kind == JV_INT && a0->u.i != 0 && a0->u.i != -1
                   ? v->u.i % a0->u.i == 0
                   : a0->kind == JV_INT && a0->u.i == -1;
    }
    if (strcmp(name, "ne") == 0) {
        return !jj_equal(v, a0);
    }
    if (strcmp(name, "in") == 0) {
        if (a0->kind == JV_LIST) {
            for (size_t i = 0; i < a0->u.list->n; i++) {
                if (jj_equal(v, &a0->u.list->v[i])) {
                    return 1;
                }
            }
            return 0;
        }
        if (a0->kind == JV_DICT) {
            return v->kind == JV_STR && jj_dict_get(a0->u.dict, v->u.str.s, v->u.str.n) != NULL;
        }
        if (a0->kind == JV_STR && v->kind == JV_STR) {
            jj_args_t in = {.pos = (jj_value_t *)v, .n_pos = 1};
            return jj_method(e, at, (jj_value_t *)a0, "find", &in).u.i >= 0 || v->u.str.n == 0;
        }
        return 0;
    }
    return jj_equal(v, a0); /* equalto, eq, sameas */
}

jj_value_t jj_call_func(jj_eval_t *e, const jj_node_t *at, const char *name, const jj_args_t *args)
{
    jj_arena_t       *a  = jj_eval_arena(e);
    const jj_value_t *a0 = jj_arg(args, 0, NULL);

    if (strcmp(name, "raise_exception") == 0) {
        jj_value_t msg = a0 != NULL ? jj_to_str(e, a0) : jj_str_lit("raise_exception");
        jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "%.*s",
                     (int)(msg.u.str.n > 180 ? 180 : msg.u.str.n), msg.u.str.s);
    }
    if (strcmp(name, "namespace") == 0 || strcmp(name, "dict") == 0) {
        jj_value_t ns = jj_new_dict(a, name[0] == 'n' ? JV_NS : JV_DICT);
        if (a0 != NULL && (a0->kind == JV_DICT || a0->kind == JV_NS)) {
            for (size_t i = 0; i < a0->u.dict->n; i++) {
                jj_dict_set(a, ns.u.dict, a0->u.dict->keys[i], a0->u.dict->klen[i],
                            a0->u.dict->v[i]);
            }
        }
        for (size_t i = 0; i < args->n_kw; i++) {
            jj_dict_set(a, ns.u.dict, args->kw[i], strlen(args->kw[i]), args->kwv[i]);
        }
        return ns;
    }
    if (strcmp(name, "range") == 0) {
        int64_t    start = 0, stop, step = 1;
        jj_value_t r = jj_new_list(a);
        for (size_t i = 0; i < args->n_pos; i++) {
            if (args->pos[i].kind != JV_INT) {
                jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "range needs integers");
            }
        }
        if (args->n_pos == 0 || args->n_pos > 3) {
            jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "range takes 1 to 3 integers");
        }
        stop = args->pos[0].u.i;
        if (args->n_pos >= 2) {
            start = args->pos[0].u.i;
            stop  = args->pos[1].u.i;
        }
        if (args->n_pos == 3) {
            step = args->pos[2].u.i;
        }
        if (step == 0) {
            jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "range step cannot be zero");
        }
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            jj_eval_step(e, at);
            jj_list_push(a, r.u.list, jj_int(i));
            if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) {
                break;
            }
        }
        return r;
    }
    if (strcmp(name, "strftime_now") == 0) {
        char      tmp[128];
        time_t    now = time(NULL);
        struct tm tm;
        char     *fmt;
        size_t    n;
        if (a0 == NULL || a0->kind != JV_STR) {
            jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "strftime_now needs a format string");
        }
        fmt = jj_strndup(a, a0->u.str.s, a0->u.str.n);
        localtime_r(&now, &tm);
        n = strftime(tmp, sizeof(tmp), fmt, &tm);
        return str_n(e, tmp, n);
    }
    jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "unknown function '%s'", name);
}
