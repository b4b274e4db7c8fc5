/* model/jinja/eval.c - renders a compiled template: scopes (a for loop and
 * a macro call open one; if does not, as in Jinja), expressions, statements
 * and the render budget; the public parse and render entry points. */
#include "jinja_builtins.h"

#include "moonlet/alloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define RENDER_ARENA_LIMIT (256u << 20) /* bytes of values one render may make */
#define RENDER_OUT_LIMIT (64u << 20)    /* bytes of output */
#define RENDER_STEP_LIMIT 20000000u     /* nodes evaluated */
#define RENDER_MAX_DEPTH 64             /* macro calls inside macro calls */

typedef struct frame frame_t;
struct frame {
    jj_dict_t *vars;
    frame_t   *parent;
};

struct jj_eval {
    jj_arena_t          a;
    jj_buf_t            root; /* the render's output */
    jj_buf_t           *out;  /* where text goes now (root, a macro's, a set block's) */
    frame_t            *globals;
    moon_jinja_error_t *err;
    uint64_t            steps;
    int                 depth;
    int                 ctl; /* 1: break, 2: continue pending */
};

_Noreturn void jj_eval_fail(jj_eval_t *e, const jj_node_t *at, moon_status_t status,
                            const char *fmt, ...)
{
    va_list ap;

    if (e->err != NULL) {
        e->err->line = at != NULL ? at->line : 0;
        e->err->col  = at != NULL ? at->col : 0;
        va_start(ap, fmt);
        vsnprintf(e->err->msg, sizeof(e->err->msg), fmt, ap);
        va_end(ap);
    }
    e->a.status_on_fail = status;
    longjmp(*e->a.fail, 2);
}

jj_arena_t *jj_eval_arena(jj_eval_t *e)
{
    return &e->a;
}

void jj_eval_step(jj_eval_t *e, const jj_node_t *at)
{
    if (++e->steps > RENDER_STEP_LIMIT) {
        jj_eval_fail(e, at, MOON_ERR_NO_RESOURCE, "the render ran past %u steps",
                     RENDER_STEP_LIMIT);
    }
}

static jj_value_t *lookup(frame_t *f, const char *name)
{
    size_t n = strlen(name);

    for (; f != NULL; f = f->parent) {
        jj_value_t *v = jj_dict_get(f->vars, name, n);
        if (v != NULL) {
            return v;
        }
    }
    return NULL;
}

static frame_t *new_frame(jj_eval_t *e, frame_t *parent)
{
    frame_t *f = jj_alloc(&e->a, sizeof(*f));

    f->vars   = jj_new_dict(&e->a, JV_DICT).u.dict;
    f->parent = parent;
    return f;
}

static jj_value_t eval(jj_eval_t *e, frame_t *f, const jj_node_t *n);
static void       exec_body(jj_eval_t *e, frame_t *f, const jj_nodes_t *body);

static jj_value_t undef(void)
{
    jj_value_t v = {.kind = JV_UNDEF};

    return v;
}

/* v.name or v[name] for a string key. */
static jj_value_t get_key(jj_eval_t *e, jj_value_t *v, const char *k, size_t kn, int attr)
{
    if (v->kind == JV_DICT || v->kind == JV_NS) {
        jj_value_t *got = jj_dict_get(v->u.dict, k, kn);
        if (got != NULL) {
            return *got;
        }
    }
    if (attr && jj_has_method(v, k)) {
        jj_value_t m     = {.kind = JV_METHOD};
        m.u.method.self  = jj_alloc(&e->a, sizeof(jj_value_t));
        *m.u.method.self = *v;
        m.u.method.name  = jj_strndup(&e->a, k, kn);
        return m;
    }
    return undef();
}

static int64_t norm_index(int64_t i, size_t n)
{
    return i < 0 ? i + (int64_t)n : i;
}

static jj_value_t index_value(jj_eval_t *e, const jj_node_t *at, jj_value_t v, jj_value_t k)
{
    if (k.kind == JV_STR) {
        return get_key(e, &v, k.u.str.s, k.u.str.n, 0);
    }
    if (k.kind != JV_INT) {
        if (v.kind == JV_UNDEF) {
            return undef();
        }
        jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "index must be an integer or a string");
    }
    if (v.kind == JV_LIST) {
        int64_t i = norm_index(k.u.i, v.u.list->n);
        return i >= 0 && (uint64_t)i < v.u.list->n ? v.u.list->v[i] : undef();
    }
    if (v.kind == JV_STR) {
        int64_t i = norm_index(k.u.i, v.u.str.n);
        return i >= 0 && (uint64_t)i < v.u.str.n ? jj_str(&e->a, v.u.str.s + i, 1) : undef();
    }
    return undef();
}

static int64_t slice_bound(const jj_value_t *b, int64_t def, int64_t n, int64_t step)
{
    int64_t i;

    if (b->kind != JV_INT) {
        return def;
    }
    i = b->u.i < 0 ? b->u.i + n : b->u.i;
    if (step > 0) {
        return i < 0 ? 0 : i > n ? n : i;
    }
    return i < -1 ? -1 : i > n - 1 ? n - 1 : i;
}

static jj_value_t slice(jj_eval_t *e, const jj_node_t *n, frame_t *f)
{
    jj_value_t v    = eval(e, f, n->a);
    jj_value_t none = {.kind = JV_NONE};
    jj_value_t lo   = n->b != NULL ? eval(e, f, n->b) : none;
    jj_value_t hi   = n->c != NULL ? eval(e, f, n->c) : none;
    jj_value_t st   = n->args.v[0] != NULL ? eval(e, f, n->args.v[0]) : none;
    int64_t    step = st.kind == JV_INT ? st.u.i : 1;
    int64_t    len, start, stop;
    jj_value_t r;

    if (v.kind != JV_LIST && v.kind != JV_STR) {
        jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "only lists and strings can be sliced");
    }
    if (step == 0) {
        jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "slice step cannot be zero");
    }
    len   = v.kind == JV_LIST ? (int64_t)v.u.list->n : (int64_t)v.u.str.n;
    start = slice_bound(&lo, step > 0 ? 0 : len - 1, len, step);
    stop  = slice_bound(&hi, step > 0 ? len : -1, len, step);
    if (v.kind == JV_LIST) {
        r = jj_new_list(&e->a);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            jj_list_push(&e->a, r.u.list, v.u.list->v[i]);
        }
        return r;
    }
    {
        char  *d = jj_alloc(&e->a, (size_t)len + 1);
        size_t k = 0;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            d[k++] = v.u.str.s[i];
        }
        r         = (jj_value_t){.kind = JV_STR};
        r.u.str.s = d;
        r.u.str.n = k;
        return r;
    }
}

static void eval_args(jj_eval_t *e, frame_t *f, const jj_node_t *n, jj_args_t *args)
{
    memset(args, 0, sizeof(*args));
    if (n->args.n == 0) {
        return;
    }
    args->pos = jj_alloc(&e->a, n->args.n * sizeof(jj_value_t));
    args->kw  = jj_alloc(&e->a, n->args.n * sizeof(const char *));
    args->kwv = jj_alloc(&e->a, n->args.n * sizeof(jj_value_t));
    for (size_t i = 0; i < n->args.n; i++) {
        jj_value_t v = eval(e, f, n->args.v[i]);
        if (n->kwnames != NULL && n->kwnames[i] != NULL) {
            args->kw[args->n_kw]    = n->kwnames[i];
            args->kwv[args->n_kw++] = v;
        } else {
            args->pos[args->n_pos++] = v;
        }
    }
}

static jj_value_t call_macro(jj_eval_t *e, const jj_node_t *at, const jj_node_t *m,
                             const jj_args_t *args)
{
    frame_t   *f     = new_frame(e, e->globals);
    jj_buf_t  *saved = e->out, buf = {.a = &e->a, .limit = RENDER_OUT_LIMIT, .in_arena = 1};
    jj_value_t r;

    if (++e->depth > RENDER_MAX_DEPTH) {
        jj_eval_fail(e, at, MOON_ERR_NO_RESOURCE, "macros call each other too deeply");
    }
    for (size_t i = 0; i < m->args.n; i++) {
        const jj_value_t *v   = jj_arg(args, i, m->kwnames[i]);
        jj_value_t        val = undef();
        if (v != NULL) {
            val = *v;
        } else if (m->args.v[i] != NULL) {
            val = eval(e, f, m->args.v[i]);
        }
        jj_dict_set(&e->a, f->vars, m->kwnames[i], strlen(m->kwnames[i]), val);
    }
    e->out = &buf;
    exec_body(e, f, &m->body);
    e->ctl = 0;
    r      = jj_buf_take(&buf);
    e->out = saved;
    e->depth--;
    return r;
}

static jj_value_t call(jj_eval_t *e, frame_t *f, const jj_node_t *n)
{
    jj_value_t callee = eval(e, f, n->a);
    jj_args_t  args;

    eval_args(e, f, n, &args);
    switch (callee.kind) {
    case JV_MACRO:
        return call_macro(e, n, callee.u.macro, &args);
    case JV_FUNC:
        return jj_call_func(e, n, callee.u.func, &args);
    case JV_METHOD:
        return jj_method(e, n, callee.u.method.self, callee.u.method.name, &args);
    default:
        if (n->a->kind == JN_NAME) {
            jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "'%s' is not a function", n->a->name);
        }
        if (n->a->kind == JN_ATTR) {
            jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "no method '%s' on this value", n->a->name);
        }
        jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "this value cannot be called");
    }
}

static int is_number(const jj_value_t *v)
{
    return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL;
}

static double as_double(const jj_value_t *v)
{
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}

static int contains(jj_eval_t *e, const jj_node_t *at, const jj_value_t *x, const jj_value_t *in)
{
    switch (in->kind) {
    case JV_STR:
        if (x->kind != JV_STR) {
            jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "'in <string>' needs a string");
        }
        if (x->u.str.n == 0) {
            return 1;
        }
        for (size_t i = 0; i + x->u.str.n <= in->u.str.n; i++) {
            if (memcmp(in->u.str.s + i, x->u.str.s, x->u.str.n) == 0) {
                return 1;
            }
        }
        return 0;
    case JV_LIST:
        for (size_t i = 0; i < in->u.list->n; i++) {
            if (jj_equal(x, &in->u.list->v[i])) {
                return 1;
            }
        }
        return 0;
    case JV_DICT:
    case JV_NS:
        return x->kind == JV_STR && jj_dict_get(in->u.dict, x->u.str.s, x->u.str.n) != NULL;
    case JV_UNDEF:
    case JV_NONE:
        return 0;
    default:
        jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "'in' needs a string, list or mapping");
    }
}

static int compare(jj_eval_t *e, const jj_node_t *at, const jj_value_t *x, const jj_value_t *y)
{
    if (is_number(x) && is_number(y)) {
        double a = as_double(x), b = as_double(y);
        return a < b ? -1 : a > b ? 1 : 0;
    }
    if (x->kind == JV_STR && y->kind == JV_STR) {
        size_t n = x->u.str.n < y->u.str.n ? x->u.str.n : y->u.str.n;
        int    c = memcmp(x->u.str.s, y->u.str.s, n);
        return c != 0 ? c : x->u.str.n < y->u.str.n ? -1 : x->u.str.n > y->u.str.n ? 1 : 0;
    }
    jj_eval_fail(e, at, MOON_ERR_INVALID_PARAM, "cannot order these values");
}

static jj_value_t concat2(jj_eval_t *e, const jj_value_t *x, const jj_value_t *y)
{
    jj_value_t sx = jj_to_str(e, x), sy = jj_to_str(e, y), r = {.kind = JV_STR};
    char      *d = jj_alloc(&e->a, sx.u.str.n + sy.u.str.n + 1);

    memcpy(d, sx.u.str.s, sx.u.str.n);
    memcpy(d + sx.u.str.n, sy.u.str.s, sy.u.str.n);
    r.u.str.s = d;
    r.u.str.n = sx.u.str.n + sy.u.str.n;
    return r;
}

static jj_value_t arith(jj_eval_t *e, const jj_node_t *n, const jj_value_t *x, const jj_value_t *y)
{
    const char *op = n->name;
    jj_value_t  r;

    if (op[0] == '+' && x->kind == JV_STR && y->kind == JV_STR) {
        return concat2(e, x, y);
    }
    if (op[0] == '+' && x->kind == JV_LIST && y->kind == JV_LIST) {
        r = jj_new_list(&e->a);
        for (size_t i = 0; i < x->u.list->n; i++) {
            jj_list_push(&e->a, r.u.list, x->u.list->v[i]);
        }
        for (size_t i = 0; i < y->u.list->n; i++) {
            jj_list_push(&e->a, r.u.list, y->u.list->v[i]);
        }
        return r;
    }
    if (op[0] == '*' && op[1] == 0 && x->kind == JV_STR && y->kind == JV_INT) {
        jj_value_t s = {.kind = JV_STR};
        int64_t    k = y->u.i > 0 ? y->u.i : 0;
        char      *d;
        if (x->u.str.n > 0 && (uint64_t)k > RENDER_OUT_LIMIT / x->u.str.n) {
            jj_eval_fail(e, n, MOON_ERR_NO_RESOURCE, "string repeated too many times");
        }
        d = jj_alloc(&e->a, x->u.str.n * (size_t)k + 1);
        for (int64_t i = 0; i < k; i++) {
            memcpy(d + (size_t)i * x->u.str.n, x->u.str.s, x->u.str.n);
        }
        s.u.str.s = d;
        s.u.str.n = x->u.str.n * (size_t)k;
        return s;
    }
    if (!is_number(x) || !is_number(y)) {
        jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "'%s' needs numbers (or strings for +)", op);
    }
    if (x->kind != JV_FLOAT && y->kind != JV_FLOAT && strcmp(op, "/") != 0 &&
        (strcmp(op, "**") != 0 || (y->kind == JV_INT && y->u.i >= 0 && y->u.i < 64))) {
        int64_t a = x->kind == JV_INT ? x->u.i : x->u.b, b = y->kind == JV_INT ? y->u.i : y->u.b;
        if (op[1] == '*') {
            uint64_t prod = 1;
            for (int64_t k = 0; k < b; k++) {
                prod *= (uint64_t)a;
            }
            return jj_int((int64_t)prod);
        }
        if ((op[0] == '%' || op[1] == '/') && b == 0) {
            jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "division by zero");
        }
        switch (op[0]) {
        case '+':
            return jj_int((int64_t)((uint64_t)a + (uint64_t)b));
        case '-':
            return jj_int((int64_t)((uint64_t)a - (uint64_t)b));
        case '*':
            return jj_int((int64_t)((uint64_t)a * (uint64_t)b));
        case '%': {
            int64_t m = (b == -1) ? 0 : a % b;
            return jj_int(m != 0 && ((m < 0) != (b < 0)) ? m + b : m);
        }
        default: { /* // floors */
            int64_t q = (b == -1) ? (int64_t)(0 - (uint64_t)a) : a / b;
            if (b != -1 && (a % b != 0) && ((a < 0) != (b < 0))) {
                q--;
            }
            return jj_int(q);
        }
        }
    }
    {
        double a = as_double(x), b = as_double(y);
        r = (jj_value_t){.kind = JV_FLOAT};
        if ((op[0] == '/' || op[0] == '%') && b == 0) {
            jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "division by zero");
        }
        switch (op[0]) {
        case '+':
            r.u.f = a + b;
            break;
        case '-':
            r.u.f = a - b;
            break;
        case '*':
            r.u.f = op[1] == '*' ? pow(a, b) : a * b;
            break;
        case '%':
            r.u.f = a - b * floor(a / b);
            break;
        default:
            r.u.f = op[1] == '/' ? floor(a / b) : a / b;
            break;
        }
        return r;
    }
}

static jj_value_t binary(jj_eval_t *e, frame_t *f, const jj_node_t *n)
{
    jj_value_t  x  = eval(e, f, n->a);
    jj_value_t  y  = eval(e, f, n->b);
    const char *op = n->name;

    if (strcmp(op, "~") == 0) {
        return concat2(e, &x, &y);
    }
    if (strcmp(op, "==") == 0) {
        return jj_bool(jj_equal(&x, &y));
    }
    if (strcmp(op, "!=") == 0) {
        return jj_bool(!jj_equal(&x, &y));
    }
    if (strcmp(op, "in") == 0) {
        return jj_bool(contains(e, n, &x, &y));
    }
    if (strcmp(op, "not in") == 0) {
        return jj_bool(!contains(e, n, &x, &y));
    }
    if (op[0] == '<' || op[0] == '>') {
        int c = compare(e, n, &x, &y);
        return jj_bool(op[0] == '<' ? (op[1] ? c <= 0 : c < 0) : (op[1] ? c >= 0 : c > 0));
    }
    return arith(e, n, &x, &y);
}

static jj_value_t eval(jj_eval_t *e, frame_t *f, const jj_node_t *n)
{
    jj_value_t v;
    jj_args_t  args;

    jj_eval_step(e, n);
    switch (n->kind) {
    case JN_LIT:
        return n->lit;
    case JN_NAME: {
        jj_value_t *got = lookup(f, n->name);
        if (got != NULL) {
            return *got;
        }
        if (jj_is_func(n->name)) {
            v        = (jj_value_t){.kind = JV_FUNC};
            v.u.func = n->name;
            return v;
        }
        return undef();
    }
    case JN_ATTR:
        v = eval(e, f, n->a);
        return get_key(e, &v, n->name, strlen(n->name), 1);
    case JN_INDEX:
        return index_value(e, n, eval(e, f, n->a), eval(e, f, n->b));
    case JN_SLICE:
        return slice(e, n, f);
    case JN_CALL:
        return call(e, f, n);
    case JN_FILTER:
        v = eval(e, f, n->a);
        eval_args(e, f, n, &args);
        return jj_filter(e, n, n->name, v, &args);
    case JN_TEST: {
        int r;
        v = eval(e, f, n->a);
        eval_args(e, f, n, &args);
        r = jj_test(e, n, n->name, &v, &args);
        return jj_bool(n->negate ? !r : r);
    }
    case JN_UNARY:
        v = eval(e, f, n->a);
        if (n->name[0] == 'n') {
            return jj_bool(!jj_truthy(&v));
        }
        if (v.kind == JV_INT || v.kind == JV_BOOL) {
            int64_t i = v.kind == JV_INT ? v.u.i : v.u.b;
            return jj_int(n->name[0] == '-' ? (int64_t)(0 - (uint64_t)i) : i);
        }
        if (v.kind == JV_FLOAT) {
            v.u.f = n->name[0] == '-' ? -v.u.f : v.u.f;
            return v;
        }
        jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "unary '%s' needs a number", n->name);
    case JN_BINARY:
        return binary(e, f, n);
    case JN_AND:
        v = eval(e, f, n->a);
        return jj_truthy(&v) ? eval(e, f, n->b) : v;
    case JN_OR:
        v = eval(e, f, n->a);
        return jj_truthy(&v) ? v : eval(e, f, n->b);
    case JN_COND:
        v = eval(e, f, n->a);
        if (jj_truthy(&v)) {
            return eval(e, f, n->b);
        }
        return n->c != NULL ? eval(e, f, n->c) : undef();
    case JN_LIST:
    case JN_TUPLE:
        v = jj_new_list(&e->a);
        for (size_t i = 0; i < n->args.n; i++) {
            jj_list_push(&e->a, v.u.list, eval(e, f, n->args.v[i]));
        }
        return v;
    case JN_DICT:
        v = jj_new_dict(&e->a, JV_DICT);
        for (size_t i = 0; i + 1 < n->args.n; i += 2) {
            jj_value_t k = eval(e, f, n->args.v[i]);
            if (k.kind != JV_STR) {
                jj_eval_fail(e, n->args.v[i], MOON_ERR_UNSUPPORTED,
                             "unsupported: dict keys other than strings");
            }
            jj_dict_set(&e->a, v.u.dict, k.u.str.s, k.u.str.n, eval(e, f, n->args.v[i + 1]));
        }
        return v;
    default:
        jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "a statement where an expression belongs");
    }
}

static void exec_for(jj_eval_t *e, frame_t *f, const jj_node_t *n)
{
    jj_value_t it = eval(e, f, n->a), items = jj_new_list(&e->a);
    size_t     count;

    if (it.kind == JV_LIST) {
        items = it;
    } else if (it.kind == JV_DICT || it.kind == JV_NS) {
        for (size_t i = 0; i < it.u.dict->n; i++) {
            jj_list_push(&e->a, items.u.list,
                         jj_str(&e->a, it.u.dict->keys[i], it.u.dict->klen[i]));
        }
    } else if (it.kind == JV_STR) {
        for (size_t i = 0; i < it.u.str.n; i++) {
            jj_list_push(&e->a, items.u.list, jj_str(&e->a, it.u.str.s + i, 1));
        }
    } else if (it.kind != JV_UNDEF && it.kind != JV_NONE) {
        jj_eval_fail(e, n->a, MOON_ERR_INVALID_PARAM, "cannot loop over this value");
    }
    if (n->b != NULL) { /* "for x in xs if cond": loop over those that pass */
        jj_value_t kept = jj_new_list(&e->a);
        for (size_t i = 0; i < items.u.list->n; i++) {
            frame_t   *lf = new_frame(e, f);
            jj_value_t c;
            jj_dict_set(&e->a, lf->vars, n->names[0], strlen(n->names[0]), items.u.list->v[i]);
            c = eval(e, lf, n->b);
            if (jj_truthy(&c)) {
                jj_list_push(&e->a, kept.u.list, items.u.list->v[i]);
            }
        }
        items = kept;
    }
    count = items.u.list->n;
    if (count == 0) {
        exec_body(e, f, &n->orelse);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        frame_t    *lf   = new_frame(e, f);
        jj_value_t  loop = jj_new_dict(&e->a, JV_DICT);
        jj_value_t  item = items.u.list->v[i];
        jj_arena_t *a    = &e->a;

        jj_dict_set(a, loop.u.dict, "index", 5, jj_int((int64_t)i + 1));
        jj_dict_set(a, loop.u.dict, "index0", 6, jj_int((int64_t)i));
        jj_dict_set(a, loop.u.dict, "revindex", 8, jj_int((int64_t)(count - i)));
        jj_dict_set(a, loop.u.dict, "revindex0", 9, jj_int((int64_t)(count - i - 1)));
        jj_dict_set(a, loop.u.dict, "first", 5, jj_bool(i == 0));
        jj_dict_set(a, loop.u.dict, "last", 4, jj_bool(i + 1 == count));
        jj_dict_set(a, loop.u.dict, "length", 6, jj_int((int64_t)count));
        jj_dict_set(a, loop.u.dict, "previtem", 8, i > 0 ? items.u.list->v[i - 1] : undef());
        jj_dict_set(a, loop.u.dict, "nextitem", 8,
                    i + 1 < count ? items.u.list->v[i + 1] : undef());
        jj_dict_set(a, lf->vars, "loop", 4, loop);
        if (n->n_names == 2) {
            if (item.kind != JV_LIST || item.u.list->n != 2) {
                jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM, "cannot unpack the item into 2 names");
            }
            jj_dict_set(a, lf->vars, n->names[0], strlen(n->names[0]), item.u.list->v[0]);
            jj_dict_set(a, lf->vars, n->names[1], strlen(n->names[1]), item.u.list->v[1]);
        } else {
            jj_dict_set(a, lf->vars, n->names[0], strlen(n->names[0]), item);
        }
        exec_body(e, lf, &n->body);
        if (e->ctl == 1) {
            e->ctl = 0;
            break;
        }
        e->ctl = 0;
    }
}

static void exec_set(jj_eval_t *e, frame_t *f, const jj_node_t *n)
{
    jj_value_t v;

    if (n->b != NULL) {
        v = eval(e, f, n->b);
    } else {
        jj_buf_t *saved = e->out, buf = {.a = &e->a, .limit = RENDER_OUT_LIMIT, .in_arena = 1};
        e->out = &buf;
        exec_body(e, f, &n->body);
        v      = jj_buf_take(&buf);
        e->out = saved;
    }
    if (n->a->kind == JN_ATTR) {
        jj_value_t *ns = lookup(f, n->a->a->name);
        if (ns == NULL || ns->kind != JV_NS) {
            jj_eval_fail(e, n, MOON_ERR_INVALID_PARAM,
                         "'%s' is not a namespace: cannot set an attribute on it", n->a->a->name);
        }
        jj_dict_set(&e->a, ns->u.dict, n->a->name, strlen(n->a->name), v);
        return;
    }
    jj_dict_set(&e->a, f->vars, n->a->name, strlen(n->a->name), v);
}

static void exec_body(jj_eval_t *e, frame_t *f, const jj_nodes_t *body)
{
    for (size_t i = 0; i < body->n && e->ctl == 0; i++) {
        const jj_node_t *n = body->v[i];
        jj_value_t       v;

        jj_eval_step(e, n);
        switch (n->kind) {
        case JN_TEXT:
            jj_buf_put(e->out, n->lit.u.str.s, n->lit.u.str.n);
            break;
        case JN_OUTPUT:
            v = eval(e, f, n->a);
            jj_buf_value(e->out, &v);
            break;
        case JN_IF:
            v = eval(e, f, n->a);
            exec_body(e, f, jj_truthy(&v) ? &n->body : &n->orelse);
            break;
        case JN_FOR:
            exec_for(e, f, n);
            break;
        case JN_SET:
            exec_set(e, f, n);
            break;
        case JN_MACRO:
            v         = (jj_value_t){.kind = JV_MACRO};
            v.u.macro = n;
            jj_dict_set(&e->a, f->vars, n->name, strlen(n->name), v);
            break;
        case JN_BREAK:
            e->ctl = 1;
            break;
        case JN_CONTINUE:
            e->ctl = 2;
            break;
        default:
            break;
        }
    }
}

static void set_message(moon_jinja_error_t *err, moon_status_t status)
{
    if (err != NULL && err->msg[0] == 0) {
        snprintf(err->msg, sizeof(err->msg), "%s",
                 status == MOON_ERR_NO_RESOURCE ? "the render ran past its memory budget"
                                                : "out of memory");
    }
}

moon_status_t moon_jinja_parse(const char *src, size_t len, moon_jinja_t **tpl_p,
                               moon_jinja_error_t *err)
{
    moon_jinja_t *volatile tpl = NULL;
    jmp_buf       jmp;
    jj_toks_t     toks;
    moon_status_t status;

    if (err != NULL) {
        memset(err, 0, sizeof(*err));
    }
    tpl = moon_calloc(1, sizeof(*tpl));
    if (tpl == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    tpl->arena.fail  = &jmp;
    tpl->arena.limit = 64u << 20;
    if (setjmp(jmp) != 0) {
        status = tpl->arena.status_on_fail;
        set_message(err, status);
        moon_jinja_destroy(tpl);
        return status;
    }
    if (jj_lex(&tpl->arena, src != NULL ? src : "", src != NULL ? len : 0, &toks, err) != 0) {
        moon_jinja_destroy(tpl);
        return MOON_ERR_INVALID_PARAM;
    }
    jj_parse(&tpl->arena, &toks, &tpl->body, err);
    tpl->arena.fail = NULL;
    *tpl_p          = tpl;
    return MOON_OK;
}

void moon_jinja_destroy(moon_jinja_t *tpl)
{
    if (tpl == NULL) {
        return;
    }
    jj_arena_free(&tpl->arena);
    moon_free(tpl);
}

moon_status_t moon_jinja_render(const moon_jinja_t *tpl, const char *vars_json, size_t len,
                                char **out_p, size_t *len_p, moon_jinja_error_t *err)
{
    jj_eval_t *volatile e = NULL;
    jmp_buf       jmp;
    jj_value_t    vars;
    moon_status_t status;

    if (err != NULL) {
        memset(err, 0, sizeof(*err));
    }
    e = moon_calloc(1, sizeof(*e));
    if (e == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    e->a.fail     = &jmp;
    e->a.limit    = RENDER_ARENA_LIMIT;
    e->err        = err;
    e->root.a     = &e->a;
    e->root.limit = RENDER_OUT_LIMIT;
    e->out        = &e->root;
    if (setjmp(jmp) != 0) {
        status = e->a.status_on_fail;
        set_message(err, status);
        moon_free(e->root.s);
        jj_arena_free(&e->a);
        moon_free(e);
        return status;
    }
    e->globals = new_frame(e, NULL);
    if (vars_json != NULL) {
        if (jj_from_json(&e->a, vars_json, len, &vars) != 0 || vars.kind != JV_DICT) {
            jj_eval_fail(e, NULL, MOON_ERR_INVALID_PARAM, "the variables are not a JSON object");
        }
        e->globals->vars = vars.u.dict;
    }
    jj_buf_put(e->out, "", 0);
    exec_body(e, e->globals, &tpl->body);
    *out_p = e->root.s;
    if (len_p != NULL) {
        *len_p = e->root.n;
    }
    jj_arena_free(&e->a);
    moon_free(e);
    return MOON_OK;
}
