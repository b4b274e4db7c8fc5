/* model/jinja/jinja_internal.h - the engine's private types: an arena that
 * owns every node and value (freed at once; errors unwind by longjmp with
 * nothing to free one by one), tokens, the syntax tree and values. */
#ifndef MOON_MODEL_JINJA_INTERNAL_H
#define MOON_MODEL_JINJA_INTERNAL_H

#include "moonlet/jinja.h"

#include <setjmp.h>
#include <stdint.h>

/* ---- arena ---- */
typedef struct jj_chunk jj_chunk_t;
typedef struct {
    jj_chunk_t *head;
    size_t      used, cap; /* of head */
    size_t      total, limit;
    jmp_buf    *fail; /* where to jump when out of memory or over limit */
    int         status_on_fail;
} jj_arena_t;

void *jj_alloc(jj_arena_t *a, size_t n); /* zeroed; longjmps on failure */
char *jj_strndup(jj_arena_t *a, const char *s, size_t n);
void  jj_arena_free(jj_arena_t *a);

/* ---- lexer ---- */
typedef enum {
    JT_EOF,
    JT_TEXT,
    JT_EXPR_OPEN,  /* {{ */
    JT_EXPR_CLOSE, /* }} */
    JT_STMT_OPEN,  /* {% */
    JT_STMT_CLOSE, /* %} */
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP, /* punctuation and operators, text in s */
} jj_tok_kind_t;

typedef struct {
    jj_tok_kind_t kind;
    int           line, col;
    const char   *s; /* text (arena), NUL terminated */
    size_t        n;
    int64_t       i;
    double        f;
} jj_tok_t;

typedef struct {
    jj_tok_t *toks;
    size_t    n;
} jj_toks_t;

/* Splits src into tokens (arena). 0, or -1 with err set (a syntax error). */
int jj_lex(jj_arena_t *a, const char *src, size_t len, jj_toks_t *out, moon_jinja_error_t *err);

/* ---- syntax tree ---- */
typedef enum {
    /* expressions */
    JN_LIT, /* value in lit */
    JN_NAME,
    JN_ATTR,   /* a.name */
    JN_INDEX,  /* a[b] */
    JN_SLICE,  /* a[b:c:d], kids may be NULL */
    JN_CALL,   /* a(args, k=v) */
    JN_FILTER, /* a | name(args) */
    JN_TEST,   /* a is [not] name(args) */
    JN_UNARY,  /* op: not, -, + */
    JN_BINARY, /* op */
    JN_AND,
    JN_OR,
    JN_COND, /* b if a else c */
    JN_LIST,
    JN_TUPLE,
    JN_DICT, /* args: key, value, key, value... */
    /* statements */
    JN_TEXT,
    JN_OUTPUT,
    JN_IF,    /* a: cond, body, orelse */
    JN_FOR,   /* names, a: iterable, b: filter cond, body, orelse */
    JN_SET,   /* target a (NAME or ATTR), b: value or NULL (block: body) */
    JN_MACRO, /* name, params (names, defaults in args), body */
    JN_BREAK,
    JN_CONTINUE,
} jj_node_kind_t;

typedef struct jj_node  jj_node_t;
typedef struct jj_value jj_value_t;

typedef struct {
    jj_node_t **v;
    size_t      n;
} jj_nodes_t;

typedef enum {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS, /* namespace(): a dict whose attributes set may change */
    JV_MACRO,
    JV_FUNC,   /* a global function (raise_exception, namespace, range...) */
    JV_METHOD, /* self.name, called later */
} jj_vkind_t;

typedef struct jj_list jj_list_t;
typedef struct jj_dict jj_dict_t;

struct jj_value {
    jj_vkind_t kind;
    union {
        int     b;
        int64_t i;
        double  f;
        struct {
            const char *s;
            size_t      n;
        } str;
        jj_list_t       *list;
        jj_dict_t       *dict;
        const jj_node_t *macro;
        const char      *func; /* JV_FUNC: its name */
        struct {
            jj_value_t *self;
            const char *name;
        } method;
    } u;
};

struct jj_list {
    jj_value_t *v;
    size_t      n, cap;
};

struct jj_dict {
    const char **keys;
    size_t      *klen;
    jj_value_t  *v;
    size_t       n, cap;
};

struct jj_node {
    jj_node_kind_t kind;
    int            line, col;
    const char    *name; /* NAME, ATTR, FILTER, TEST, SET target, MACRO; op for UNARY/BINARY */
    jj_node_t     *a, *b, *c;
    jj_nodes_t     args;    /* call/filter/test arguments, list items, dict pairs, macro defaults */
    const char   **kwnames; /* per args entry: keyword name or NULL; macro params */
    jj_nodes_t     body, orelse;
    const char   **names; /* FOR targets */
    size_t         n_names;
    int            negate; /* TEST: is not */
    jj_value_t     lit;
};

/* The compiled template. */
struct moon_jinja {
    jj_arena_t arena;
    jj_nodes_t body;
};

/* Parses toks into the template body. On an error sets err, puts the status
 * (MOON_ERR_UNSUPPORTED or MOON_ERR_INVALID_PARAM) in a->status_on_fail and
 * longjmps to *a->fail. */
void jj_parse(jj_arena_t *a, const jj_toks_t *toks, jj_nodes_t *body, moon_jinja_error_t *err);

/* ---- values ---- */
jj_value_t  jj_str(jj_arena_t *a, const char *s, size_t n); /* copies */
jj_value_t  jj_str_lit(const char *s);                      /* borrows a static string */
jj_value_t  jj_int(int64_t i);
jj_value_t  jj_bool(int b);
jj_value_t  jj_new_list(jj_arena_t *a);
jj_value_t  jj_new_dict(jj_arena_t *a, jj_vkind_t kind);
void        jj_list_push(jj_arena_t *a, jj_list_t *l, jj_value_t v);
void        jj_dict_set(jj_arena_t *a, jj_dict_t *d, const char *k, size_t kn, jj_value_t v);
jj_value_t *jj_dict_get(const jj_dict_t *d, const char *k, size_t kn); /* NULL: absent */
int         jj_truthy(const jj_value_t *v);
int         jj_equal(const jj_value_t *x, const jj_value_t *y);
/* JSON text to a value; 0, or -1 (not JSON, or nested too deep). */
int jj_from_json(jj_arena_t *a, const char *s, size_t n, jj_value_t *out);

/* A growing byte buffer in moon_malloc'd memory (the output survives the
 * arena), or in the arena (in_arena: a macro's or a set block's output, left
 * behind when an error unwinds). Fails by longjmp through the arena's
 * handler. */
typedef struct {
    char       *s;
    size_t      n, cap, limit;
    jj_arena_t *a;
    int         in_arena;
} jj_buf_t;
void jj_buf_put(jj_buf_t *b, const char *s, size_t n);
void jj_buf_puts(jj_buf_t *b, const char *s);
/* v as text (str of Jinja): strings as they are, none "None", true "True" */
void jj_buf_value(jj_buf_t *b, const jj_value_t *v);
/* v as JSON (tojson); indent < 0: one line */
void jj_buf_json(jj_buf_t *b, const jj_value_t *v, int indent, int depth);
/* A value of b's contents, in the arena; b is reset. */
jj_value_t jj_buf_take(jj_buf_t *b);

#endif /* MOON_MODEL_JINJA_INTERNAL_H */
