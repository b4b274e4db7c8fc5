/* model/jinja/lexer.c - template source to tokens. First the source is
 * rewritten as Hugging Face's renderer does (trailing newline dropped,
 * lstrip_blocks, trim_blocks), keeping each byte's original offset for
 * line:col; then text runs and tags are split, and "-" in a tag's delimiter
 * strips the white space beside it. */
#include "jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    jj_arena_t         *a;
    const char         *orig;
    char               *s;   /* preprocessed */
    size_t             *off; /* original offset of each byte of s */
    size_t              n, pos;
    jj_tok_t           *toks;
    size_t              n_toks, cap;
    moon_jinja_error_t *err;
    size_t              last_o; /* where() walks on from its last answer */
    int                 last_line, last_col;
} lex_t;

static void where(lex_t *l, size_t pos, int *line, int *col)
{
    size_t o = pos < l->n ? l->off[pos] : (l->n > 0 ? l->off[l->n - 1] + 1 : 0);

    lex_t *w = l;

    if (o < w->last_o || w->last_line == 0) {
        w->last_o    = 0;
        w->last_line = 1;
        w->last_col  = 1;
    }
    for (; w->last_o < o; w->last_o++) {
        if (l->orig[w->last_o] == '\n') {
            w->last_line++;
            w->last_col = 1;
        } else {
            w->last_col++;
        }
    }
    *line = w->last_line;
    *col  = w->last_col;
}

static int fail(lex_t *l, size_t pos, const char *msg)
{
    if (l->err != NULL) {
        where(l, pos, &l->err->line, &l->err->col);
        snprintf(l->err->msg, sizeof(l->err->msg), "%s", msg);
    }
    return -1;
}

static jj_tok_t *push(lex_t *l, jj_tok_kind_t kind, size_t pos)
{
    jj_tok_t *t;

    if (l->n_toks == l->cap) {
        size_t    cap = l->cap ? l->cap * 2 : 64;
        jj_tok_t *nt  = jj_alloc(l->a, cap * sizeof(*nt));
        if (l->n_toks > 0) {
            memcpy(nt, l->toks, l->n_toks * sizeof(*nt));
        }
        l->toks = nt;
        l->cap  = cap;
    }
    t       = &l->toks[l->n_toks++];
    t->kind = kind;
    where(l, pos, &t->line, &t->col);
    t->s = "";
    return t;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static void preprocess(lex_t *l, const char *src, size_t len)
{
    size_t n = 0;

    if (len > 0 && src[len - 1] == '\n') {
        len--;
    }
    l->s   = jj_alloc(l->a, len + 1);
    l->off = jj_alloc(l->a, (len + 1) * sizeof(size_t));
    for (size_t i = 0; i < len;) {
        /* lstrip_blocks: blanks from a line's start to a block or comment tag */
        if (i == 0 || src[i - 1] == '\n') {
            size_t j = i;
            while (j < len && (src[j] == ' ' || src[j] == '\t')) {
                j++;
            }
            if (j > i && j + 1 < len && src[j] == '{' &&
                (src[j + 1] == '%' || src[j + 1] == '#' || src[j + 1] == '-')) {
                i = j;
            }
        }
        l->s[n]     = src[i];
        l->off[n++] = i;
        /* trim_blocks: the newline right after a block or comment tag */
        if (src[i] == '}' && i > 0 &&
            (src[i - 1] == '%' || src[i - 1] == '#' || src[i - 1] == '-') && i + 1 < len &&
            src[i + 1] == '\n') {
            i += 2;
            continue;
        }
        i++;
    }
    l->n = n;
}

static int lex_string(lex_t *l)
{
    char      q     = l->s[l->pos];
    size_t    start = l->pos++;
    char     *d     = jj_alloc(l->a, l->n - l->pos + 1);
    size_t    n     = 0;
    jj_tok_t *t;

    while (l->pos < l->n && l->s[l->pos] != q) {
        char c = l->s[l->pos++];
        if (c == '\\' && l->pos < l->n) {
            c = l->s[l->pos++];
            switch (c) {
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'r':
                c = '\r';
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            default:
                break;
            }
        }
        d[n++] = c;
    }
    if (l->pos >= l->n) {
        return fail(l, start, "unterminated string");
    }
    l->pos++;
    t    = push(l, JT_STRING, start);
    t->s = d;
    t->n = n;
    return 0;
}

static int lex_number(lex_t *l)
{
    size_t    start    = l->pos;
    int       is_float = 0;
    char      tmp[64];
    size_t    n = 0;
    jj_tok_t *t;

    while (l->pos < l->n && ((l->s[l->pos] >= '0' && l->s[l->pos] <= '9') || l->s[l->pos] == '_' ||
                             (l->s[l->pos] == '.' && !is_float && l->pos + 1 < l->n &&
                              l->s[l->pos + 1] >= '0' && l->s[l->pos + 1] <= '9'))) {
        is_float |= l->s[l->pos] == '.';
        if (l->s[l->pos] != '_' && n < sizeof(tmp) - 1) {
            tmp[n++] = l->s[l->pos];
        }
        l->pos++;
    }
    tmp[n] = 0;
    t      = push(l, is_float ? JT_FLOAT : JT_INT, start);
    if (is_float) {
        t->f = strtod(tmp, NULL);
    } else {
        t->i = strtoll(tmp, NULL, 10);
    }
    return 0;
}

/* Tokens of one tag up to its closing delimiter (close: '}' or '%'). */
static int lex_tag(lex_t *l, char close)
{
    static const char *ops2[] = {"==", "!=", "<=", ">=", "//", "**"};

    for (;;) {
        size_t start;
        char   c;

        while (l->pos < l->n && is_ws(l->s[l->pos])) {
            l->pos++;
        }
        if (l->pos >= l->n) {
            return fail(l, l->pos, close == '}' ? "unclosed '{{'" : "unclosed '{%'");
        }
        start = l->pos;
        c     = l->s[l->pos];
        if (c == '-' && l->pos + 2 < l->n + 0 && l->s[l->pos + 1] == close &&
            l->s[l->pos + 2] == '}') {
            push(l, close == '}' ? JT_EXPR_CLOSE : JT_STMT_CLOSE, start);
            l->pos += 3;
            while (l->pos < l->n && is_ws(l->s[l->pos])) {
                l->pos++;
            }
            return 0;
        }
        if (c == close && l->pos + 1 < l->n && l->s[l->pos + 1] == '}') {
            push(l, close == '}' ? JT_EXPR_CLOSE : JT_STMT_CLOSE, start);
            l->pos += 2;
            return 0;
        }
        if (c == '\'' || c == '"') {
            if (lex_string(l) != 0) {
                return -1;
            }
            continue;
        }
        if (c >= '0' && c <= '9') {
            lex_number(l);
            continue;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            jj_tok_t *t;
            while (l->pos < l->n &&
                   ((l->s[l->pos] >= 'a' && l->s[l->pos] <= 'z') ||
                    (l->s[l->pos] >= 'A' && l->s[l->pos] <= 'Z') ||
                    (l->s[l->pos] >= '0' && l->s[l->pos] <= '9') || l->s[l->pos] == '_')) {
                l->pos++;
            }
            t    = push(l, JT_NAME, start);
            t->s = jj_strndup(l->a, l->s + start, l->pos - start);
            t->n = l->pos - start;
            continue;
        }
        for (size_t k = 0; k < sizeof(ops2) / sizeof(ops2[0]); k++) {
            if (l->pos + 1 < l->n && memcmp(l->s + l->pos, ops2[k], 2) == 0) {
                jj_tok_t *t = push(l, JT_OP, start);
                t->s        = ops2[k];
                t->n        = 2;
                l->pos += 2;
                goto next;
            }
        }
        if (strchr("+-*/%~<>=()[]{},.:|", c) != NULL) {
            jj_tok_t *t = push(l, JT_OP, start);
            t->s        = jj_strndup(l->a, &c, 1);
            t->n        = 1;
            l->pos++;
            continue;
        }
        return fail(l, start, "unexpected character in a tag");
    next:;
    }
}

int jj_lex(jj_arena_t *a, const char *src, size_t len, jj_toks_t *out, moon_jinja_error_t *err)
{
    lex_t l = {.a = a, .orig = src, .err = err};

    preprocess(&l, src, len);
    while (l.pos < l.n) {
        size_t start = l.pos, end;
        int    strip_left;
        char   kind;

        while (l.pos < l.n &&
               !(l.s[l.pos] == '{' && l.pos + 1 < l.n && strchr("{%#", l.s[l.pos + 1]) != NULL)) {
            l.pos++;
        }
        end        = l.pos;
        strip_left = l.pos + 2 < l.n && l.s[l.pos + 2] == '-';
        if (strip_left) {
            while (end > start && is_ws(l.s[end - 1])) {
                end--;
            }
        }
        if (end > start) {
            jj_tok_t *t = push(&l, JT_TEXT, start);
            t->s        = jj_strndup(a, l.s + start, end - start);
            t->n        = end - start;
        }
        if (l.pos >= l.n) {
            break;
        }
        kind  = l.s[l.pos + 1];
        start = l.pos;
        l.pos += strip_left ? 3 : 2;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = l.pos; i + 1 < l.n; i++) {
                if (l.s[i] == '#' && l.s[i + 1] == '}') {
                    e = l.s + i;
                    break;
                }
            }
            if (e == NULL) {
                return fail(&l, start, "unclosed comment '{#'");
            }
            l.pos = (size_t)(e - l.s) + 2;
            if (e > l.s + start + 2 && e[-1] == '-') {
                while (l.pos < l.n && is_ws(l.s[l.pos])) {
                    l.pos++;
                }
            }
            continue;
        }
        push(&l, kind == '{' ? JT_EXPR_OPEN : JT_STMT_OPEN, start);
        if (lex_tag(&l, kind == '{' ? '}' : '%') != 0) {
            return -1;
        }
    }
    push(&l, JT_EOF, l.n);
    out->toks = l.toks;
    out->n    = l.n_toks;
    return 0;
}
