/* model/grammar/gbnf.c - GBNF text to a compiled grammar: a recursive-descent
 * parser that turns groups and repetitions into rules of their own (as
 * llama.cpp's grammar parser does) and character classes over code points
 * into UTF-8 byte sequences. Pure function of its input; no shared state. */
#include "grammar_internal.h"

#include "moonlet/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define REP_INF UINT32_MAX
#define MAX_RULES (1u << 20)
#define MAX_REPEAT 4096u /* a {m,n} bound past this is an error */
#define MAX_NEST 64u

typedef struct {
    gelem_t *el;
    uint32_t n, cap;
    char    *name;      /* NULL: generated */
    int      defined;   /* named rules: seen `name ::=` */
    uint32_t first_use; /* offset of a first reference, for errors */
} brule_t;

typedef struct {
    const char *s, *end, *start;
    brule_t    *rules;
    uint32_t    n_rules, cap_rules;
    uint32_t (*sets)[8];
    uint32_t n_sets, cap_sets;
    uint32_t utf8_any; /* rule id of "any multi-byte character", UINT32_MAX: none yet */
    uint32_t depth;
    char    *err;
    size_t   err_cap;
    int      failed, oom;
} parser_t;

static void fail(parser_t *p, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (p->failed) {
        return;
    }
    p->failed = 1;
    if (p->err == NULL || p->err_cap == 0) {
        return;
    }
    n = snprintf(p->err, p->err_cap, "grammar at offset %ld: ", (long)(p->s - p->start));
    if (n >= 0 && (size_t)n < p->err_cap) {
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->err_cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
}

static void oom(parser_t *p)
{
    p->oom = 1;
    fail(p, "out of memory");
}

static uint32_t rule_new(parser_t *p, const char *name, size_t name_len)
{
    brule_t *r;

    if (p->failed) {
        return 0;
    }
    if (p->n_rules == p->cap_rules) {
        uint32_t cap = p->cap_rules ? p->cap_rules * 2 : 64;
        void    *nr  = p->n_rules >= MAX_RULES ? NULL : moon_realloc(p->rules, cap * sizeof(*r));
        if (nr == NULL) {
            if (p->n_rules >= MAX_RULES) {
                fail(p, "more than %u rules", MAX_RULES);
            } else {
                oom(p);
            }
            return 0;
        }
        p->rules     = nr;
        p->cap_rules = cap;
    }
    r = &p->rules[p->n_rules];
    memset(r, 0, sizeof(*r));
    if (name != NULL) {
        r->name = moon_malloc(name_len + 1);
        if (r->name == NULL) {
            oom(p);
            return 0;
        }
        memcpy(r->name, name, name_len);
        r->name[name_len] = '\0';
    }
    return p->n_rules++;
}

static void push(parser_t *p, uint32_t rule, uint32_t type, uint32_t val)
{
    brule_t *r;

    if (p->failed) {
        return;
    }
    r = &p->rules[rule];
    if (r->n == r->cap) {
        uint32_t cap = r->cap ? r->cap * 2 : 8;
        void    *ne  = moon_realloc(r->el, cap * sizeof(gelem_t));
        if (ne == NULL) {
            oom(p);
            return;
        }
        r->el  = ne;
        r->cap = cap;
    }
    r->el[r->n].type = type & 15u;
    r->el[r->n].val  = val;
    r->n++;
}

static uint32_t rule_named(parser_t *p, const char *name, size_t len)
{
    for (uint32_t i = 0; i < p->n_rules; i++) {
        if (p->rules[i].name != NULL && strlen(p->rules[i].name) == len &&
            memcmp(p->rules[i].name, name, len) == 0) {
            return i;
        }
    }
    return rule_new(p, name, len);
}

static uint32_t set_add(parser_t *p, const uint32_t bits[8])
{
    for (uint32_t i = 0; i < p->n_sets; i++) {
        if (memcmp(p->sets[i], bits, sizeof(p->sets[i])) == 0) {
            return i;
        }
    }
    if (p->n_sets == p->cap_sets) {
        uint32_t cap = p->cap_sets ? p->cap_sets * 2 : 16;
        void    *ns  = moon_realloc(p->sets, cap * sizeof(*p->sets));
        if (ns == NULL) {
            oom(p);
            return 0;
        }
        p->sets     = ns;
        p->cap_sets = cap;
    }
    memcpy(p->sets[p->n_sets], bits, sizeof(p->sets[0]));
    return p->n_sets++;
}

static void set_range(uint32_t bits[8], uint32_t lo, uint32_t hi)
{
    for (uint32_t c = lo; c <= hi && c < 256; c++) {
        bits[c >> 5] |= 1u << (c & 31);
    }
}

static void push_set(parser_t *p, uint32_t rule, uint32_t lo, uint32_t hi)
{
    uint32_t bits[8] = {0};

    if (lo == hi) {
        push(p, rule, GE_CHAR, lo);
        return;
    }
    set_range(bits, lo, hi);
    push(p, rule, GE_SET, set_add(p, bits));
}

/* The rule "one UTF-8 character of 2 to 4 bytes". */
static uint32_t utf8_any_rule(parser_t *p)
{
    uint32_t r;

    if (p->utf8_any != UINT32_MAX) {
        return p->utf8_any;
    }
    r = rule_new(p, NULL, 0);
    push_set(p, r, 0xC2, 0xDF);
    push_set(p, r, 0x80, 0xBF);
    push(p, r, GE_ALT, 0);
    push_set(p, r, 0xE0, 0xEF);
    push_set(p, r, 0x80, 0xBF);
    push_set(p, r, 0x80, 0xBF);
    push(p, r, GE_ALT, 0);
    push_set(p, r, 0xF0, 0xF4);
    push_set(p, r, 0x80, 0xBF);
    push_set(p, r, 0x80, 0xBF);
    push_set(p, r, 0x80, 0xBF);
    push(p, r, GE_END, 0);
    p->utf8_any = r;
    return r;
}

static uint32_t utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static void skip_space(parser_t *p, int newline_ok)
{
    while (p->s < p->end) {
        char c = *p->s;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            p->s++;
        } else if (c == '#') {
            while (p->s < p->end && *p->s != '\n') {
                p->s++;
            }
        } else {
            break;
        }
    }
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* One (possibly escaped) code point of a literal or class. */
static uint32_t parse_char(parser_t *p)
{
    const uint8_t *u = (const uint8_t *)p->s;
    uint32_t       cp, n = 0;

    if (p->s >= p->end) {
        fail(p, "unexpected end of grammar");
        return 0;
    }
    if (*p->s == '\\') {
        p->s++;
        if (p->s >= p->end) {
            fail(p, "unexpected end after \\");
            return 0;
        }
        switch (*p->s++) {
        case 'n':
            return '\n';
        case 'r':
            return '\r';
        case 't':
            return '\t';
        case 'x':
            n = 2;
            break;
        case 'u':
            n = 4;
            break;
        case 'U':
            n = 8;
            break;
        default:
            return (uint8_t)p->s[-1];
        }
        cp = 0;
        for (uint32_t i = 0; i < n; i++) {
            int h = p->s < p->end ? hexval(*p->s) : -1;
            if (h < 0) {
                fail(p, "bad hex escape");
                return 0;
            }
            cp = cp * 16 + (uint32_t)h;
            p->s++;
        }
        return cp > 0x10FFFF ? (fail(p, "code point out of range"), 0u) : cp;
    }
    /* a UTF-8 sequence in the grammar text stands for its code point */
    if (u[0] < 0x80) {
        p->s++;
        return u[0];
    }
    n  = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 1;
    cp = n == 1 ? u[0] : u[0] & (0x7Fu >> n);
    if ((size_t)(p->end - p->s) < n) {
        fail(p, "truncated UTF-8 in grammar");
        return 0;
    }
    for (uint32_t i = 1; i < n; i++) {
        cp = (cp << 6) | (u[i] & 0x3F);
    }
    p->s += n;
    return cp;
}

static void parse_literal(parser_t *p, uint32_t rule)
{
    p->s++; /* the quote */
    while (!p->failed && p->s < p->end && *p->s != '"') {
        uint8_t  b[4];
        uint32_t n = utf8_encode(parse_char(p), b);
        for (uint32_t i = 0; i < n; i++) {
            push(p, rule, GE_CHAR, b[i]);
        }
    }
    if (p->s >= p->end) {
        fail(p, "unterminated string literal");
        return;
    }
    p->s++;
}

/* [class]: ASCII code points become one byte set; others UTF-8 sequences
 * (each code point of a small range, or any multi-byte character for a
 * negated class or a range of more than 256). */
static void parse_class(parser_t *p, uint32_t rule)
{
    uint32_t bits[8] = {0}, lo, hi, alt_rule, n_big = 0;
    uint32_t big[64][2];
    int      neg = 0, any_multi = 0, first = 1;

    p->s++;
    if (p->s < p->end && *p->s == '^') {
        neg = 1;
        p->s++;
    }
    while (!p->failed && p->s < p->end && (*p->s != ']' || first)) {
        first = 0;
        lo = hi = parse_char(p);
        if (p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
            p->s++;
            hi = parse_char(p);
        }
        if (hi < lo) {
            fail(p, "empty range in class");
            return;
        }
        set_range(bits, lo, hi < 0x7F ? hi : 0x7F);
        if (hi >= 0x80) {
            if (neg || hi - (lo < 0x80 ? 0x80 : lo) >= 256 || n_big == 64) {
                any_multi = 1;
            } else {
                big[n_big][0] = lo < 0x80 ? 0x80 : lo;
                big[n_big][1] = hi;
                n_big++;
            }
        }
    }
    if (p->failed) {
        return;
    }
    if (p->s >= p->end) {
        fail(p, "unterminated character class");
        return;
    }
    p->s++;
    if (neg) {
        for (uint32_t w = 0; w < 4; w++) {
            bits[w] = ~bits[w];
        }
        any_multi = 1; /* excluded non-ASCII code points are not honoured (README) */
    }
    for (uint32_t w = 4; w < 8; w++) {
        bits[w] = 0;
    }
    if (!any_multi && n_big == 0) {
        uint32_t n = 0, only = 0;
        for (uint32_t c = 0; c < 128; c++) {
            if ((bits[c >> 5] >> (c & 31)) & 1u) {
                n++;
                only = c;
            }
        }
        if (n == 0) {
            fail(p, "empty character class");
        } else if (n == 1) {
            push(p, rule, GE_CHAR, only);
        } else {
            push(p, rule, GE_SET, set_add(p, bits));
        }
        return;
    }
    alt_rule     = rule_new(p, NULL, 0);
    int need_alt = 0;
    for (uint32_t w = 0; w < 4; w++) {
        if (bits[w] != 0) {
            push(p, alt_rule, GE_SET, set_add(p, bits));
            need_alt = 1;
            break;
        }
    }
    if (any_multi) {
        if (need_alt) {
            push(p, alt_rule, GE_ALT, 0);
        }
        push(p, alt_rule, GE_REF, utf8_any_rule(p));
        need_alt = 1;
    } else {
        for (uint32_t i = 0; i < n_big; i++) {
            for (uint32_t cp = big[i][0]; cp <= big[i][1]; cp++) {
                uint8_t  b[4];
                uint32_t n = utf8_encode(cp, b);
                if (need_alt) {
                    push(p, alt_rule, GE_ALT, 0);
                }
                for (uint32_t k = 0; k < n; k++) {
                    push(p, alt_rule, GE_CHAR, b[k]);
                }
                need_alt = 1;
            }
        }
    }
    push(p, alt_rule, GE_END, 0);
    push(p, rule, GE_REF, alt_rule);
}

static void parse_alternates(parser_t *p, uint32_t rule, int nested);

static uint32_t parse_uint(parser_t *p)
{
    uint32_t v   = 0;
    int      any = 0;

    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        v = v > MAX_REPEAT ? MAX_REPEAT + 1 : v * 10 + (uint32_t)(*p->s - '0');
        p->s++;
        any = 1;
    }
    if (!any) {
        fail(p, "expected a number");
    }
    return v;
}

/* Replaces the elements [from, end) of rule by a repetition {min, max} of
 * them (REP_INF: unbounded). */
static void repeat_last(parser_t *p, uint32_t rule, uint32_t from, uint32_t min, uint32_t max)
{
    uint32_t item, n;

    if (p->failed) {
        return;
    }
    if (max != REP_INF && (max < min || max > MAX_REPEAT)) {
        fail(p, "bad repetition {%u,%u}", min, max);
        return;
    }
    if (min > MAX_REPEAT) {
        fail(p, "repetition over %u", MAX_REPEAT);
        return;
    }
    item = rule_new(p, NULL, 0);
    if (p->failed) {
        return;
    }
    n = p->rules[rule].n - from;
    for (uint32_t i = 0; i < n; i++) {
        gelem_t e = p->rules[rule].el[from + i];
        push(p, item, e.type, e.val);
    }
    push(p, item, GE_END, 0);
    p->rules[rule].n = from;
    for (uint32_t i = 0; i < min; i++) {
        push(p, rule, GE_REF, item);
    }
    if (max == REP_INF) {
        uint32_t star = rule_new(p, NULL, 0); /* star ::= item star | */
        push(p, star, GE_REF, item);
        push(p, star, GE_REF, star);
        push(p, star, GE_ALT, 0);
        push(p, star, GE_END, 0);
        push(p, rule, GE_REF, star);
    } else if (max > min) {
        uint32_t next = UINT32_MAX; /* opt_k ::= item opt_{k+1} | */
        for (uint32_t k = 0; k < max - min && !p->failed; k++) {
            uint32_t opt = rule_new(p, NULL, 0);
            push(p, opt, GE_REF, item);
            if (next != UINT32_MAX) {
                push(p, opt, GE_REF, next);
            }
            push(p, opt, GE_ALT, 0);
            push(p, opt, GE_END, 0);
            next = opt;
        }
        push(p, rule, GE_REF, next);
    }
}

static int at_rule_def(parser_t *p)
{
    const char *s = p->s;

    while (s < p->end && is_name_char(*s)) {
        s++;
    }
    if (s == p->s) {
        return 0;
    }
    while (s < p->end && (*s == ' ' || *s == '\t')) {
        s++;
    }
    return p->end - s >= 3 && memcmp(s, "::=", 3) == 0;
}

static void parse_sequence(parser_t *p, uint32_t rule, int nested)
{
    uint32_t last = UINT32_MAX;

    for (;;) {
        skip_space(p, nested);
        if (p->failed || p->s >= p->end) {
            return;
        }
        char c = *p->s;
        if (c == '"') {
            last = p->rules[rule].n;
            parse_literal(p, rule);
        } else if (c == '[') {
            last = p->rules[rule].n;
            parse_class(p, rule);
        } else if (c == '.') {
            uint32_t bits[8] = {0};
            uint32_t any     = rule_new(p, NULL, 0);
            set_range(bits, 1, 0x7F);
            push(p, any, GE_SET, set_add(p, bits));
            push(p, any, GE_ALT, 0);
            push(p, any, GE_REF, utf8_any_rule(p));
            push(p, any, GE_END, 0);
            last = p->rules[rule].n;
            push(p, rule, GE_REF, any);
            p->s++;
        } else if (c == '(') {
            uint32_t sub;
            if (++p->depth > MAX_NEST) {
                fail(p, "groups nested deeper than %u", MAX_NEST);
                return;
            }
            p->s++;
            sub = rule_new(p, NULL, 0);
            parse_alternates(p, sub, 1);
            push(p, sub, GE_END, 0);
            skip_space(p, 1);
            if (p->failed) {
                return;
            }
            if (p->s >= p->end || *p->s != ')') {
                fail(p, "expected )");
                return;
            }
            p->s++;
            p->depth--;
            last = p->rules[rule].n;
            push(p, rule, GE_REF, sub);
        } else if (is_name_char(c)) {
            const char *name = p->s;
            uint32_t    ref;
            if (!nested && at_rule_def(p)) {
                return; /* the next rule */
            }
            while (p->s < p->end && is_name_char(*p->s)) {
                p->s++;
            }
            ref = rule_named(p, name, (size_t)(p->s - name));
            if (!p->failed && !p->rules[ref].defined && p->rules[ref].first_use == 0) {
                p->rules[ref].first_use = (uint32_t)(name - p->start) + 1;
            }
            last = p->rules[rule].n;
            push(p, rule, GE_REF, ref);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            uint32_t min = 0, max = REP_INF;
            if (last == UINT32_MAX) {
                fail(p, "'%c' with nothing before it", c);
                return;
            }
            p->s++;
            if (c == '+') {
                min = 1;
            } else if (c == '?') {
                max = 1;
            } else if (c == '{') {
                skip_space(p, 0);
                min = max = parse_uint(p);
                skip_space(p, 0);
                if (p->s < p->end && *p->s == ',') {
                    p->s++;
                    skip_space(p, 0);
                    max = p->s < p->end && *p->s == '}' ? REP_INF : parse_uint(p);
                    skip_space(p, 0);
                }
                if (p->s >= p->end || *p->s != '}') {
                    fail(p, "expected }");
                    return;
                }
                p->s++;
            }
            repeat_last(p, rule, last, min, max);
            last = UINT32_MAX;
        } else {
            return; /* '|', ')', newline or something the caller judges */
        }
    }
}

static void parse_alternates(parser_t *p, uint32_t rule, int nested)
{
    parse_sequence(p, rule, nested);
    skip_space(p, nested);
    while (!p->failed && p->s < p->end && *p->s == '|') {
        p->s++;
        push(p, rule, GE_ALT, 0);
        skip_space(p, 1);
        parse_sequence(p, rule, nested);
        skip_space(p, nested);
    }
}

static void parse_rules(parser_t *p)
{
    for (;;) {
        const char *name;
        uint32_t    r;

        skip_space(p, 1);
        if (p->failed || p->s >= p->end) {
            return;
        }
        name = p->s;
        while (p->s < p->end && is_name_char(*p->s)) {
            p->s++;
        }
        if (p->s == name) {
            fail(p, "expected a rule name");
            return;
        }
        r = rule_named(p, name, (size_t)(p->s - name));
        if (p->failed) {
            return;
        }
        if (p->rules[r].defined) {
            fail(p, "rule %s defined twice", p->rules[r].name);
            return;
        }
        p->rules[r].defined = 1;
        skip_space(p, 0);
        if (p->end - p->s < 3 || memcmp(p->s, "::=", 3) != 0) {
            fail(p, "expected ::=");
            return;
        }
        p->s += 3;
        skip_space(p, 1);
        parse_alternates(p, r, 0);
        push(p, r, GE_END, 0);
        if (p->failed) {
            return;
        }
        if (p->s < p->end && *p->s != '\n' && *p->s != '\r') {
            fail(p, "unexpected '%c'", *p->s);
            return;
        }
    }
}

static moon_status_t finish(parser_t *p, moon_grammar_t **g_p)
{
    moon_grammar_t *g;
    uint32_t        n_el = 0, n_alt = 0;

    for (uint32_t r = 0; r < p->n_rules; r++) {
        if (p->rules[r].name != NULL && !p->rules[r].defined) {
            p->s = p->start + (p->rules[r].first_use ? p->rules[r].first_use - 1 : 0);
            fail(p, "undefined rule %s", p->rules[r].name);
            return MOON_ERR_INVALID_PARAM;
        }
        n_el += p->rules[r].n;
        for (uint32_t i = 0; i < p->rules[r].n; i++) {
            n_alt += p->rules[r].el[i].type == GE_ALT;
        }
        n_alt++;
    }
    g = moon_calloc(1, sizeof(*g));
    if (g == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    g->el         = moon_malloc((n_el + 1) * sizeof(gelem_t));
    g->rule_start = moon_malloc((p->n_rules + 1) * sizeof(uint32_t));
    g->alt_off    = moon_malloc((p->n_rules + 1) * sizeof(uint32_t));
    g->alt_start  = moon_malloc((n_alt + 1) * sizeof(uint32_t));
    g->sets       = moon_malloc((p->n_sets + 1) * sizeof(*g->sets));
    if (g->el == NULL || g->rule_start == NULL || g->alt_off == NULL || g->alt_start == NULL ||
        g->sets == NULL) {
        moon_grammar_destroy(g);
        return MOON_ERR_NO_MEMORY;
    }
    n_el = n_alt = 0;
    for (uint32_t r = 0; r < p->n_rules; r++) {
        g->rule_start[r]      = n_el;
        g->alt_off[r]         = n_alt;
        g->alt_start[n_alt++] = n_el;
        for (uint32_t i = 0; i < p->rules[r].n; i++) {
            g->el[n_el++] = p->rules[r].el[i];
            if (p->rules[r].el[i].type == GE_ALT) {
                g->alt_start[n_alt++] = n_el;
            }
        }
    }
    g->alt_off[p->n_rules] = n_alt;
    g->n_el                = n_el;
    g->n_rules             = p->n_rules;
    if (p->n_sets > 0) { /* a grammar without sets has none to copy (NULL) */
        memcpy(g->sets, p->sets, p->n_sets * sizeof(*g->sets));
    }
    g->n_sets = p->n_sets;
    *g_p      = g;
    return MOON_OK;
}

moon_status_t moon_grammar_from_gbnf(const char *text, size_t len, moon_grammar_t **g_p, char *err,
                                     size_t err_cap)
{
    parser_t      p;
    moon_status_t status;

    if (err != NULL && err_cap > 0) {
        err[0] = '\0';
    }
    if (text == NULL || g_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    memset(&p, 0, sizeof(p));
    p.s = p.start = text;
    p.end         = text + len;
    p.err         = err;
    p.err_cap     = err_cap;
    p.utf8_any    = UINT32_MAX;
    rule_new(&p, "root", 4); /* rule 0 */
    parse_rules(&p);
    if (!p.failed && !p.rules[0].defined) {
        fail(&p, "no root rule");
    }
    status = p.oom ? MOON_ERR_NO_MEMORY : p.failed ? MOON_ERR_INVALID_PARAM : finish(&p, g_p);
    if (status == MOON_ERR_INVALID_PARAM && !p.failed) {
        status = MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t r = 0; r < p.n_rules; r++) {
        moon_free(p.rules[r].el);
        moon_free(p.rules[r].name);
    }
    moon_free(p.rules);
    moon_free(p.sets);
    return status;
}

void moon_grammar_destroy(moon_grammar_t *g)
{
    if (g != NULL) {
        moon_free(g->el);
        moon_free(g->rule_start);
        moon_free(g->alt_off);
        moon_free(g->alt_start);
        moon_free(g->sets);
        moon_free(g);
    }
}

uint32_t moon_grammar_n_rules(const moon_grammar_t *g)
{
    return g != NULL ? g->n_rules : 0;
}
