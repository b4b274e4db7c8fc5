/* model/jinja/parser.c - tokens to a syntax tree by recursive descent, with
 * Jinja's precedence: conditional, or, and, not, comparisons (in, is), ~,
 * + -, * / // %, **, unary - +, then postfix (.attr, [i], [a:b:c], (args),
 * | filter, is test). Tags outside the subset, and filters or tests the
 * evaluator lacks, stop the parse with MOON_ERR_UNSUPPORTED at their place. */
#include "jinja_internal.h"

#include "jinja_builtins.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    jj_arena_t         *a;
    const jj_tok_t     *t;
    size_t              n, pos;
    moon_jinja_error_t *err;
    jmp_buf            *jmp;
    int                 depth;
} parser_t;

static void fail_at(parser_t *p, const jj_tok_t *t, moon_status_t status, const char *fmt, ...)
{
    va_list ap;

    if (p->err != NULL) {
        p->err->line = t->line;
        p->err->col  = t->col;
        va_start(ap, fmt);
        vsnprintf(p->err->msg, sizeof(p->err->msg), fmt, ap);
        va_end(ap);
    }
    p->a->status_on_fail = status;
    longjmp(*p->jmp, 2);
}

static const jj_tok_t *peek(parser_t *p)
{
    return &p->t[p->pos];
}

static const jj_tok_t *next(parser_t *p)
{
    const jj_tok_t *t = &p->t[p->pos];

    if (t->kind != JT_EOF) {
        p->pos++;
    }
    return t;
}

static int is_op(const jj_tok_t *t, const char *op)
{
    return t->kind == JT_OP && strcmp(t->s, op) == 0;
}

static int is_name(const jj_tok_t *t, const char *name)
{
    return t->kind == JT_NAME && strcmp(t->s, name) == 0;
}

static const char *describe(const jj_tok_t *t)
{
    switch (t->kind) {
    case JT_EOF:
        return "the end of the template";
    case JT_TEXT:
        return "text";
    case JT_EXPR_CLOSE:
        return "'}}'";
    case JT_STMT_CLOSE:
        return "'%}'";
    case JT_EXPR_OPEN:
        return "'{{'";
    case JT_STMT_OPEN:
        return "'{%'";
    case JT_STRING:
        return "a string";
    case JT_INT:
    case JT_FLOAT:
        return "a number";
    default:
        return t->s;
    }
}

static void expect_op(parser_t *p, const char *op)
{
    const jj_tok_t *t = next(p);

    if (!is_op(t, op)) {
        fail_at(p, t, MOON_ERR_INVALID_PARAM, "expected '%s', found %s", op, describe(t));
    }
}

static const char *expect_name(parser_t *p)
{
    const jj_tok_t *t = next(p);

    if (t->kind != JT_NAME) {
        fail_at(p, t, MOON_ERR_INVALID_PARAM, "expected a name, found %s", describe(t));
    }
    return t->s;
}

static void expect_close(parser_t *p)
{
    const jj_tok_t *t = next(p);

    if (t->kind != JT_STMT_CLOSE) {
        fail_at(p, t, MOON_ERR_INVALID_PARAM, "expected '%%}', found %s", describe(t));
    }
}

static jj_node_t *node(parser_t *p, jj_node_kind_t kind, const jj_tok_t *at)
{
    jj_node_t *n = jj_alloc(p->a, sizeof(*n));

    n->kind = kind;
    n->line = at->line;
    n->col  = at->col;
    return n;
}

typedef struct {
    jj_node_t  **v;
    const char **kw;
    size_t       n, cap;
} vec_t;

static void vec_push(parser_t *p, vec_t *v, jj_node_t *n, const char *kw)
{
    if (v->n == v->cap) {
        size_t       cap = v->cap ? v->cap * 2 : 4;
        jj_node_t  **nv  = jj_alloc(p->a, cap * sizeof(*nv));
        const char **nk  = jj_alloc(p->a, cap * sizeof(*nk));
        if (v->n > 0) {
            memcpy(nv, v->v, v->n * sizeof(*nv));
            memcpy(nk, v->kw, v->n * sizeof(*nk));
        }
        v->v   = nv;
        v->kw  = nk;
        v->cap = cap;
    }
    v->v[v->n]  = n;
    v->kw[v->n] = kw;
    v->n++;
}

static jj_node_t *expr(parser_t *p);
static jj_node_t *or_expr(parser_t *p);
static jj_node_t *unary(parser_t *p);

static void enter(parser_t *p, const jj_tok_t *at)
{
    if (++p->depth > 200) {
        fail_at(p, at, MOON_ERR_INVALID_PARAM, "nested too deeply");
    }
}

/* (args) after the '(' : positional and keyword arguments. */
static void call_args(parser_t *p, jj_node_t *n)
{
    vec_t v = {0};

    while (!is_op(peek(p), ")")) {
        const char *kw = NULL;

        if (peek(p)->kind == JT_NAME && is_op(&p->t[p->pos + 1], "=")) {
            kw = next(p)->s;
            next(p);
        }
        vec_push(p, &v, expr(p), kw);
        if (!is_op(peek(p), ",")) {
            break;
        }
        next(p);
    }
    expect_op(p, ")");
    n->args.v  = v.v;
    n->args.n  = v.n;
    n->kwnames = v.kw;
}

static jj_node_t *lit(parser_t *p, const jj_tok_t *t, jj_value_t v)
{
    jj_node_t *n = node(p, JN_LIT, t);

    n->lit = v;
    return n;
}

static jj_node_t *primary(parser_t *p)
{
    const jj_tok_t *t = next(p);
    jj_node_t      *n;
    vec_t           v = {0};

    switch (t->kind) {
    case JT_STRING: {
        jj_value_t s = {.kind = JV_STR};
        s.u.str.s    = t->s;
        s.u.str.n    = t->n;
        /* adjacent literals join, as in Python */
        while (peek(p)->kind == JT_STRING) {
            const jj_tok_t *u = next(p);
            char           *d = jj_alloc(p->a, s.u.str.n + u->n + 1);
            memcpy(d, s.u.str.s, s.u.str.n);
            memcpy(d + s.u.str.n, u->s, u->n);
            s.u.str.s = d;
            s.u.str.n += u->n;
        }
        return lit(p, t, s);
    }
    case JT_INT:
        return lit(p, t, jj_int(t->i));
    case JT_FLOAT: {
        jj_value_t f = {.kind = JV_FLOAT};
        f.u.f        = t->f;
        return lit(p, t, f);
    }
    case JT_NAME:
        if (strcmp(t->s, "true") == 0 || strcmp(t->s, "True") == 0) {
            return lit(p, t, jj_bool(1));
        }
        if (strcmp(t->s, "false") == 0 || strcmp(t->s, "False") == 0) {
            return lit(p, t, jj_bool(0));
        }
        if (strcmp(t->s, "none") == 0 || strcmp(t->s, "None") == 0) {
            jj_value_t none = {.kind = JV_NONE};
            return lit(p, t, none);
        }
        n       = node(p, JN_NAME, t);
        n->name = t->s;
        return n;
    case JT_OP:
        if (is_op(t, "(")) {
            jj_node_t *e = expr(p);
            if (!is_op(peek(p), ",")) {
                expect_op(p, ")");
                return e;
            }
            vec_push(p, &v, e, NULL);
            while (is_op(peek(p), ",")) {
                next(p);
                if (is_op(peek(p), ")")) {
                    break;
                }
                vec_push(p, &v, expr(p), NULL);
            }
            expect_op(p, ")");
            n = node(p, JN_TUPLE, t);
        } else if (is_op(t, "[")) {
            while (!is_op(peek(p), "]")) {
                vec_push(p, &v, expr(p), NULL);
                if (!is_op(peek(p), ",")) {
                    break;
                }
                next(p);
            }
            expect_op(p, "]");
            n = node(p, JN_LIST, t);
        } else if (is_op(t, "{")) {
            while (!is_op(peek(p), "}")) {
                vec_push(p, &v, expr(p), NULL);
                expect_op(p, ":");
                vec_push(p, &v, expr(p), NULL);
                if (!is_op(peek(p), ",")) {
                    break;
                }
                next(p);
            }
            expect_op(p, "}");
            n = node(p, JN_DICT, t);
        } else {
            break;
        }
        n->args.v = v.v;
        n->args.n = v.n;
        return n;
    default:
        break;
    }
    fail_at(p, t, MOON_ERR_INVALID_PARAM, "expected an expression, found %s", describe(t));
    return NULL;
}

/* A test's single argument without parentheses ("is divisibleby 3"). */
static int starts_operand(const jj_tok_t *t)
{
    static const char *const kw[] = {"and", "or", "else", "if", "in", "is", "not"};

    if (t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT) {
        return 1;
    }
    if (t->kind != JT_NAME) {
        return 0;
    }
    for (size_t i = 0; i < sizeof(kw) / sizeof(kw[0]); i++) {
        if (strcmp(t->s, kw[i]) == 0) {
            return 0;
        }
    }
    return 1;
}

static jj_node_t *postfix(parser_t *p)
{
    jj_node_t *n = primary(p);

    for (;;) {
        const jj_tok_t *t = peek(p);
        jj_node_t      *m;

        if (is_op(t, ".")) {
            next(p);
            m       = node(p, JN_ATTR, t);
            m->a    = n;
            m->name = expect_name(p);
        } else if (is_op(t, "[")) {
            jj_node_t *idx[3] = {NULL, NULL, NULL};
            int        k      = 0;
            next(p);
            for (;;) {
                if (!is_op(peek(p), ":") && !is_op(peek(p), "]")) {
                    idx[k] = expr(p);
                }
                if (!is_op(peek(p), ":") || k == 2) {
                    break;
                }
                next(p);
                k++;
            }
            expect_op(p, "]");
            if (k == 0) {
                if (idx[0] == NULL) {
                    fail_at(p, t, MOON_ERR_INVALID_PARAM, "empty subscript");
                }
                m    = node(p, JN_INDEX, t);
                m->b = idx[0];
            } else {
                m            = node(p, JN_SLICE, t);
                m->b         = idx[0];
                m->c         = idx[1];
                m->args.v    = jj_alloc(p->a, sizeof(jj_node_t *));
                m->args.v[0] = idx[2];
                m->args.n    = 1;
            }
            m->a = n;
        } else if (is_op(t, "(")) {
            next(p);
            m    = node(p, JN_CALL, t);
            m->a = n;
            call_args(p, m);
        } else if (is_op(t, "|")) {
            next(p);
            m       = node(p, JN_FILTER, peek(p));
            m->a    = n;
            m->name = expect_name(p);
            if (!jj_filter_known(m->name)) {
                fail_at(p, &p->t[p->pos - 1], MOON_ERR_UNSUPPORTED, "unsupported filter '%s'",
                        m->name);
            }
            if (is_op(peek(p), "(")) {
                next(p);
                call_args(p, m);
            }
        } else if (is_name(t, "is")) {
            next(p);
            m = node(p, JN_TEST, t);
            if (is_name(peek(p), "not")) {
                next(p);
                m->negate = 1;
            }
            m->a = n;
            t    = peek(p);
            if (is_name(t, "none") || is_name(t, "true") || is_name(t, "false")) {
                next(p);
                m->name = t->s; /* keywords as test names */
            } else {
                m->name = expect_name(p);
            }
            if (!jj_test_known(m->name)) {
                fail_at(p, t, MOON_ERR_UNSUPPORTED, "unsupported test '%s'", m->name);
            }
            if (is_op(peek(p), "(")) {
                next(p);
                call_args(p, m);
            } else if (starts_operand(peek(p))) {
                vec_t v = {0};
                vec_push(p, &v, postfix(p), NULL);
                m->args.v  = v.v;
                m->args.n  = 1;
                m->kwnames = v.kw;
            }
        } else {
            return n;
        }
        n = m;
    }
}

static jj_node_t *binary(parser_t *p, const jj_tok_t *t, const char *op, jj_node_t *a, jj_node_t *b)
{
    jj_node_t *n = node(p, JN_BINARY, t);

    n->name = op;
    n->a    = a;
    n->b    = b;
    return n;
}

static jj_node_t *unary(parser_t *p)
{
    const jj_tok_t *t = peek(p);
    jj_node_t      *n;

    if (is_op(t, "-") || is_op(t, "+")) {
        next(p);
        enter(p, t);
        n       = node(p, JN_UNARY, t);
        n->name = t->s;
        n->a    = unary(p);
        p->depth--;
        return n;
    }
    return postfix(p);
}

static jj_node_t *power(parser_t *p)
{
    jj_node_t *n = unary(p);

    while (is_op(peek(p), "**")) {
        const jj_tok_t *t = next(p);
        n                 = binary(p, t, "**", n, unary(p));
    }
    return n;
}

static jj_node_t *math2(parser_t *p)
{
    jj_node_t *n = power(p);

    while (is_op(peek(p), "*") || is_op(peek(p), "/") || is_op(peek(p), "//") ||
           is_op(peek(p), "%")) {
        const jj_tok_t *t = next(p);
        n                 = binary(p, t, t->s, n, power(p));
    }
    return n;
}

static jj_node_t *math1(parser_t *p)
{
    jj_node_t *n = math2(p);

    while (is_op(peek(p), "+") || is_op(peek(p), "-")) {
        const jj_tok_t *t = next(p);
        n                 = binary(p, t, t->s, n, math2(p));
    }
    return n;
}

static jj_node_t *concat(parser_t *p)
{
    jj_node_t *n = math1(p);

    while (is_op(peek(p), "~")) {
        const jj_tok_t *t = next(p);
        n                 = binary(p, t, "~", n, math1(p));
    }
    return n;
}

static jj_node_t *compare(parser_t *p)
{
    static const char *const ops[] = {"==", "!=", "<", ">", "<=", ">="};
    jj_node_t               *n     = concat(p);

    for (;;) {
        const jj_tok_t *t  = peek(p);
        const char     *op = NULL;

        for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
            if (is_op(t, ops[i])) {
                op = ops[i];
            }
        }
        if (op == NULL && is_name(t, "in")) {
            op = "in";
        } else if (op == NULL && is_name(t, "not") && is_name(&p->t[p->pos + 1], "in")) {
            next(p);
            op = "not in";
        }
        if (op == NULL) {
            return n;
        }
        next(p);
        n = binary(p, t, op, n, concat(p));
    }
}

static jj_node_t *not_expr(parser_t *p)
{
    const jj_tok_t *t = peek(p);
    jj_node_t      *n;

    if (is_name(t, "not")) {
        next(p);
        enter(p, t);
        n       = node(p, JN_UNARY, t);
        n->name = "not";
        n->a    = not_expr(p);
        p->depth--;
        return n;
    }
    return compare(p);
}

static jj_node_t *and_expr(parser_t *p)
{
    jj_node_t *n = not_expr(p);

    while (is_name(peek(p), "and")) {
        const jj_tok_t *t = next(p);
        jj_node_t      *m = node(p, JN_AND, t);
        m->a              = n;
        m->b              = not_expr(p);
        n                 = m;
    }
    return n;
}

static jj_node_t *or_expr(parser_t *p)
{
    jj_node_t *n = and_expr(p);

    while (is_name(peek(p), "or")) {
        const jj_tok_t *t = next(p);
        jj_node_t      *m = node(p, JN_OR, t);
        m->a              = n;
        m->b              = and_expr(p);
        n                 = m;
    }
    return n;
}

static jj_node_t *expr(parser_t *p)
{
    const jj_tok_t *at = peek(p);
    jj_node_t      *n;

    enter(p, at);
    n = or_expr(p);
    while (is_name(peek(p), "if")) {
        const jj_tok_t *t = next(p);
        jj_node_t      *m = node(p, JN_COND, t);
        m->b              = n;
        m->a              = or_expr(p);
        if (is_name(peek(p), "else")) {
            next(p);
            m->c = expr(p);
        }
        n = m;
    }
    p->depth--;
    return n;
}

/* ---- statements ---- */

/* Parses statements until one of the tags ends[] (NULL terminated) or EOF
 * (only when ends is NULL). Returns the end tag's name token, consumed with
 * its '{%' (the caller reads the rest of that tag). */
static const jj_tok_t *body(parser_t *p, jj_nodes_t *out, const char *const *ends,
                            const jj_tok_t *opened, const char *what);

static const jj_tok_t *stmt_if(parser_t *p, const jj_tok_t *t, jj_node_t *n)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const jj_tok_t          *end;

    n->a = expr(p);
    expect_close(p);
    end = body(p, &n->body, ends, t, "if");
    if (is_name(end, "elif")) {
        jj_node_t *m   = node(p, JN_IF, end);
        n->orelse.v    = jj_alloc(p->a, sizeof(jj_node_t *));
        n->orelse.v[0] = m;
        n->orelse.n    = 1;
        return stmt_if(p, end, m);
    }
    if (is_name(end, "else")) {
        static const char *const endif[] = {"endif", NULL};
        expect_close(p);
        end = body(p, &n->orelse, endif, t, "if");
    }
    expect_close(p);
    return end;
}

static void stmt_for(parser_t *p, const jj_tok_t *t, jj_node_t *n)
{
    static const char *const ends[]   = {"else", "endfor", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    const char             **names    = jj_alloc(p->a, 2 * sizeof(*names));
    const jj_tok_t          *end;
    int                      paren = is_op(peek(p), "(");

    if (paren) {
        next(p);
    }
    names[n->n_names++] = expect_name(p);
    if (is_op(peek(p), ",")) {
        next(p);
        names[n->n_names++] = expect_name(p);
    }
    if (paren) {
        expect_op(p, ")");
    }
    n->names = names;
    if (!is_name(next(p), "in")) {
        fail_at(p, &p->t[p->pos - 1], MOON_ERR_INVALID_PARAM, "expected 'in' in a for loop");
    }
    n->a = or_expr(p); /* "if" after the iterable filters the items */
    if (is_name(peek(p), "if")) {
        next(p);
        n->b = expr(p);
    }
    if (is_name(peek(p), "recursive")) {
        fail_at(p, peek(p), MOON_ERR_UNSUPPORTED, "unsupported: recursive for loops");
    }
    expect_close(p);
    end = body(p, &n->body, ends, t, "for");
    if (is_name(end, "else")) {
        expect_close(p);
        end = body(p, &n->orelse, endfor, t, "for");
    }
    expect_close(p);
}

static void stmt_set(parser_t *p, const jj_tok_t *t, jj_node_t *n)
{
    static const char *const ends[] = {"endset", NULL};
    const jj_tok_t          *at     = peek(p);
    jj_node_t               *target = node(p, JN_NAME, at);

    target->name = expect_name(p);
    if (is_op(peek(p), ".")) {
        jj_node_t *attr = node(p, JN_ATTR, peek(p));
        next(p);
        attr->a    = target;
        attr->name = expect_name(p);
        target     = attr;
    }
    if (is_op(peek(p), ",")) {
        fail_at(p, peek(p), MOON_ERR_UNSUPPORTED, "unsupported: set with several targets");
    }
    n->a = target;
    if (is_op(peek(p), "=")) {
        next(p);
        n->b = expr(p);
        expect_close(p);
        return;
    }
    expect_close(p);
    body(p, &n->body, ends, t, "set");
    expect_close(p);
}

static void stmt_macro(parser_t *p, const jj_tok_t *t, jj_node_t *n)
{
    static const char *const ends[] = {"endmacro", NULL};
    vec_t                    v      = {0};

    n->name = expect_name(p);
    expect_op(p, "(");
    while (!is_op(peek(p), ")")) {
        const char *name = expect_name(p);
        jj_node_t  *def  = NULL;

        if (is_op(peek(p), "=")) {
            next(p);
            def = expr(p);
        }
        vec_push(p, &v, def, name);
        if (!is_op(peek(p), ",")) {
            break;
        }
        next(p);
    }
    expect_op(p, ")");
    n->args.v  = v.v;
    n->args.n  = v.n;
    n->kwnames = v.kw;
    expect_close(p);
    body(p, &n->body, ends, t, "macro");
    if (peek(p)->kind == JT_NAME) {
        next(p); /* {% endmacro name %} */
    }
    expect_close(p);
}

static jj_node_t *statement(parser_t *p, const jj_tok_t *open)
{
    const jj_tok_t *t = next(p);
    jj_node_t      *n;

    if (t->kind != JT_NAME) {
        fail_at(p, t, MOON_ERR_INVALID_PARAM, "expected a tag name, found %s", describe(t));
    }
    enter(p, t);
    if (strcmp(t->s, "if") == 0) {
        n = node(p, JN_IF, open);
        stmt_if(p, open, n);
    } else if (strcmp(t->s, "for") == 0) {
        n = node(p, JN_FOR, open);
        stmt_for(p, open, n);
    } else if (strcmp(t->s, "set") == 0) {
        n = node(p, JN_SET, open);
        stmt_set(p, open, n);
    } else if (strcmp(t->s, "macro") == 0) {
        n = node(p, JN_MACRO, open);
        stmt_macro(p, open, n);
    } else if (strcmp(t->s, "break") == 0 || strcmp(t->s, "continue") == 0) {
        n = node(p, t->s[0] == 'b' ? JN_BREAK : JN_CONTINUE, open);
        expect_close(p);
    } else {
        static const char *const known[] = {"call", "filter",     "include",    "import",
                                            "from", "extends",    "block",      "with",
                                            "raw",  "generation", "autoescape", "do"};
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
            if (strcmp(t->s, known[i]) == 0) {
                fail_at(p, t, MOON_ERR_UNSUPPORTED, "unsupported tag '%s'", t->s);
            }
        }
        fail_at(p, t, MOON_ERR_INVALID_PARAM, "unknown tag '%s'", t->s);
        n = NULL;
    }
    p->depth--;
    return n;
}

static const jj_tok_t *body(parser_t *p, jj_nodes_t *out, const char *const *ends,
                            const jj_tok_t *opened, const char *what)
{
    vec_t v = {0};

    for (;;) {
        const jj_tok_t *t = next(p);
        jj_node_t      *n;

        switch (t->kind) {
        case JT_EOF:
            if (ends != NULL) {
                fail_at(p, opened, MOON_ERR_INVALID_PARAM, "unclosed '%s' block", what);
            }
            out->v = v.v;
            out->n = v.n;
            return t;
        case JT_TEXT:
            n              = node(p, JN_TEXT, t);
            n->lit         = (jj_value_t){.kind = JV_STR};
            n->lit.u.str.s = t->s;
            n->lit.u.str.n = t->n;
            break;
        case JT_EXPR_OPEN:
            n    = node(p, JN_OUTPUT, t);
            n->a = expr(p);
            t    = next(p);
            if (t->kind != JT_EXPR_CLOSE) {
                fail_at(p, t, MOON_ERR_INVALID_PARAM, "expected '}}', found %s", describe(t));
            }
            break;
        case JT_STMT_OPEN: {
            const jj_tok_t *name = peek(p);
            for (size_t i = 0; ends != NULL && ends[i] != NULL; i++) {
                if (is_name(name, ends[i])) {
                    next(p);
                    out->v = v.v;
                    out->n = v.n;
                    return name;
                }
            }
            if (name->kind == JT_NAME &&
                (strncmp(name->s, "end", 3) == 0 || strcmp(name->s, "else") == 0 ||
                 strcmp(name->s, "elif") == 0)) {
                fail_at(p, name, MOON_ERR_INVALID_PARAM, "unexpected '%s'", name->s);
            }
            n = statement(p, t);
            break;
        }
        default:
            fail_at(p, t, MOON_ERR_INVALID_PARAM, "unexpected %s", describe(t));
            return NULL;
        }
        vec_push(p, &v, n, NULL);
    }
}

void jj_parse(jj_arena_t *a, const jj_toks_t *toks, jj_nodes_t *out, moon_jinja_error_t *err)
{
    parser_t p = {.a = a, .t = toks->toks, .n = toks->n, .err = err, .jmp = a->fail};

    body(&p, out, NULL, NULL, NULL);
}
