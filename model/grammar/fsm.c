/* model/grammar/fsm.c - the token automaton: a grammar run as a pushdown
 * automaton over bytes (llama.cpp's stacks of element positions), whose
 * parse states (sets of stacks) are interned into numbered states. A state's
 * token mask comes from one walk of the vocabulary's byte trie (tokens that
 * share a prefix share its work) and is cached; so are token transitions.
 * One automaton belongs to one thread. */
#include "grammar_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/hash.h"
#include "moonlet/htab.h"
#include "moonlet/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 512u   /* frames in one stack */
#define MAX_STACKS 2048u /* stacks in one parse state */
#define MAX_STATES (1u << 20)
/* What one automaton's states may hold (masks, byte tables, stacks): past
 * it no new state is made (MOON_ERR_NO_RESOURCE), so a schema whose
 * bounded repetitions make a state per position cannot exhaust memory. */
#define MAX_FSM_BYTES (128ull << 20)

/* ---- vocabulary ---------------------------------------------------------- */

typedef struct {
    uint32_t child;   /* first child node, 0: none */
    uint32_t sibling; /* next sibling, 0: none */
    uint32_t token;   /* first token ending here (index into tok_next chain), UINT32_MAX: none */
    uint8_t  byte;
} tnode_t;

struct moon_grammar_vocab {
    uint32_t  n;
    int32_t   eos;
    char     *bytes; /* every token's bytes */
    uint32_t *off;   /* n + 1 */
    tnode_t  *nodes; /* node 0: the root */
    uint32_t  n_nodes;
    uint32_t *tok_next; /* n: the next token ending at the same node, UINT32_MAX: none */
};

static uint32_t trie_child(moon_grammar_vocab_t *v, uint32_t node, uint8_t b, int create)
{
    uint32_t c = v->nodes[node].child;

    while (c != 0 && v->nodes[c].byte != b) {
        c = v->nodes[c].sibling;
    }
    if (c != 0 || !create) {
        return c;
    }
    c                    = v->n_nodes++;
    v->nodes[c].byte     = b;
    v->nodes[c].child    = 0;
    v->nodes[c].token    = UINT32_MAX;
    v->nodes[c].sibling  = v->nodes[node].child;
    v->nodes[node].child = c;
    return c;
}

moon_status_t moon_grammar_vocab_create(uint32_t n_tokens, const char *const *pieces,
                                        const uint32_t *lens, int32_t eos,
                                        moon_grammar_vocab_t **v_p)
{
    moon_grammar_vocab_t *v;
    size_t                total = 0;

    if (n_tokens == 0 || pieces == NULL || lens == NULL || v_p == NULL ||
        eos >= (int32_t)n_tokens) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < n_tokens; i++) {
        total += lens[i];
    }
    v = moon_calloc(1, sizeof(*v));
    if (v == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    v->n        = n_tokens;
    v->eos      = eos;
    v->bytes    = moon_malloc(total + 1);
    v->off      = moon_malloc((n_tokens + 1) * sizeof(uint32_t));
    v->nodes    = moon_malloc((total + 1) * sizeof(tnode_t));
    v->tok_next = moon_malloc(n_tokens * sizeof(uint32_t));
    if (v->bytes == NULL || v->off == NULL || v->nodes == NULL || v->tok_next == NULL) {
        moon_grammar_vocab_destroy(v);
        return MOON_ERR_NO_MEMORY;
    }
    memset(&v->nodes[0], 0, sizeof(tnode_t));
    v->nodes[0].token = UINT32_MAX;
    v->n_nodes        = 1;
    total             = 0;
    for (uint32_t i = 0; i < n_tokens; i++) {
        uint32_t node = 0;
        v->off[i]     = (uint32_t)total;
        memcpy(v->bytes + total, pieces[i], lens[i]);
        total += lens[i];
        v->tok_next[i] = UINT32_MAX;
        if (lens[i] == 0 || (int32_t)i == eos) {
            continue;
        }
        for (uint32_t k = 0; k < lens[i]; k++) {
            node = trie_child(v, node, (uint8_t)pieces[i][k], 1);
        }
        v->tok_next[i]       = v->nodes[node].token;
        v->nodes[node].token = i;
    }
    v->off[n_tokens] = (uint32_t)total;
    *v_p             = v;
    return MOON_OK;
}

void moon_grammar_vocab_destroy(moon_grammar_vocab_t *v)
{
    if (v != NULL) {
        moon_free(v->bytes);
        moon_free(v->off);
        moon_free(v->nodes);
        moon_free(v->tok_next);
        moon_free(v);
    }
}

uint32_t moon_grammar_vocab_n(const moon_grammar_vocab_t *v)
{
    return v != NULL ? v->n : 0;
}

/* ---- scratch arena: bump allocation in chunks, rewound to a mark --------- */

typedef struct {
    uint32_t **chunks;
    uint32_t   n_chunks, cur; /* chunk in use */
    size_t     used;          /* words used in chunks[cur] */
    int        oom;
} arena_t;

#define CHUNK_WORDS (1u << 16)

typedef struct {
    uint32_t cur;
    size_t   used;
} mark_t;

static uint32_t *arena_alloc(arena_t *a, size_t words)
{
    words = (words + 1) & ~(size_t)1; /* 8-byte alignment: stack_t holds a pointer */
    if (words > CHUNK_WORDS) {
        a->oom = 1;
        return NULL;
    }
    if (a->n_chunks == 0 || a->used + words > CHUNK_WORDS) {
        if (a->n_chunks != 0) {
            a->cur++;
        }
        if (a->cur >= a->n_chunks) {
            void *nc = moon_realloc(a->chunks, (a->n_chunks + 1) * sizeof(*a->chunks));
            if (nc == NULL) {
                a->oom = 1;
                return NULL;
            }
            a->chunks              = nc;
            a->chunks[a->n_chunks] = moon_malloc(CHUNK_WORDS * sizeof(uint32_t));
            if (a->chunks[a->n_chunks] == NULL) {
                a->oom = 1;
                return NULL;
            }
            a->n_chunks++;
            a->cur = a->n_chunks - 1;
        }
        a->used = 0;
    }
    a->used += words;
    return a->chunks[a->cur] + a->used - words;
}

static mark_t arena_mark(const arena_t *a)
{
    mark_t m = {a->cur, a->used};
    return m;
}

static void arena_rewind(arena_t *a, mark_t m)
{
    a->cur  = m.cur;
    a->used = m.used;
}

static void arena_fini(arena_t *a)
{
    for (uint32_t i = 0; i < a->n_chunks; i++) {
        moon_free(a->chunks[i]);
    }
    moon_free(a->chunks);
    memset(a, 0, sizeof(*a));
}

/* ---- stacks ------------------------------------------------------------- */

/* A stack: n positions (elements to match next), the top last. A set: n
 * stacks. Both live in the arena (or, for interned states, in their blob). */
typedef struct {
    const uint32_t *pos;
    uint32_t        n;
} stack_t;

typedef struct {
    stack_t *s;
    uint32_t n, cap;
    int      overflow;
} sset_t;

typedef struct {
    uint32_t *blob; /* [n_stacks, (len, positions...)...] */
    uint32_t  words;
    uint32_t *mask;  /* NULL until computed */
    uint32_t *bnext; /* 256: the state after each byte (BYTE_*), NULL until a walk needs it */
    uint8_t   accepting, final;
} state_t;

#define BYTE_UNKNOWN UINT32_MAX
#define BYTE_DEAD (UINT32_MAX - 1)

typedef struct {
    uint64_t hash;
    uint32_t id;
} intern_elem_t;

typedef struct {
    uint64_t        hash;
    const uint32_t *blob;
    uint32_t        words;
} intern_key_t;

typedef struct {
    uint64_t key; /* state << 32 | token */
    uint32_t next;
} trans_elem_t;

struct moon_grammar_fsm {
    moon_grammar_t             *g;
    const moon_grammar_vocab_t *v;
    uint32_t                    words; /* mask words */
    state_t                    *states;
    uint32_t                    n_states, cap_states;
    uint32_t                    max_states; /* MAX_FSM_BYTES / what a state may hold */
    moon_htab_t                *intern;     /* blob -> state id */
    moon_htab_t                *trans;      /* (state, token) -> state */
    arena_t                     arena;
    uint32_t                   *tmp_mask;
};

static int sset_add(moon_grammar_fsm_t *f, sset_t *set, const uint32_t *pos, uint32_t n)
{
    if (set->n == set->cap) {
        uint32_t cap = set->cap ? set->cap * 2 : 8;
        stack_t *ns;
        if (cap > MAX_STACKS) {
            set->overflow = 1;
            return 0;
        }
        ns = (stack_t *)arena_alloc(&f->arena, cap * sizeof(stack_t) / sizeof(uint32_t));
        if (ns == NULL) {
            set->overflow = 1;
            return 0;
        }
        if (set->n > 0) {
            memcpy(ns, set->s, set->n * sizeof(stack_t));
        }
        set->s   = ns;
        set->cap = cap;
    }
    set->s[set->n].pos = pos;
    set->s[set->n].n   = n;
    set->n++;
    return 1;
}

/* Adds to out every stack that stk (n frames, in the arena or borrowed)
 * reaches without reading a byte: tops that are characters, or the empty
 * stack (accept). A top at the end of an alternative pops; a rule reference
 * is replaced by each of the rule's alternatives (the caller's frame moved
 * past it, or dropped when nothing follows: right recursion stays flat). */
static void expand(moon_grammar_fsm_t *f, const uint32_t *stk, uint32_t n, sset_t *out)
{
    const moon_grammar_t *g = f->g;

    while (n > 0 && (g->el[stk[n - 1]].type == GE_END || g->el[stk[n - 1]].type == GE_ALT)) {
        n--;
    }
    if (n == 0 || g->el[stk[n - 1]].type == GE_CHAR || g->el[stk[n - 1]].type == GE_SET) {
        sset_add(f, out, stk, n);
        return;
    }
    if (n >= MAX_DEPTH || out->overflow) {
        out->overflow = 1;
        return;
    }
    {
        uint32_t pos  = stk[n - 1];
        uint32_t rule = g->el[pos].val;
        uint32_t next = pos + 1, m = n - 1;
        gelem_t  ne = g->el[next];

        if (ne.type != GE_END && ne.type != GE_ALT) {
            m = n;
        }
        for (uint32_t a = g->alt_off[rule]; a < g->alt_off[rule + 1] && !out->overflow; a++) {
            uint32_t *ns = arena_alloc(&f->arena, m + 1);
            if (ns == NULL) {
                out->overflow = 1;
                return;
            }
            memcpy(ns, stk, (n - 1) * sizeof(uint32_t));
            if (m == n) {
                ns[n - 1] = next;
            }
            ns[m] = g->alt_start[a];
            expand(f, ns, m + 1, out);
        }
    }
}

/* The stacks of in after reading byte c. */
static void advance(moon_grammar_fsm_t *f, const sset_t *in, uint8_t c, sset_t *out)
{
    memset(out, 0, sizeof(*out));
    for (uint32_t i = 0; i < in->n && !out->overflow; i++) {
        const stack_t *s = &in->s[i];
        uint32_t      *ns;
        if (s->n == 0 || !moon_gelem_match(f->g, f->g->el[s->pos[s->n - 1]], c)) {
            continue;
        }
        ns = arena_alloc(&f->arena, s->n);
        if (ns == NULL) {
            out->overflow = 1;
            return;
        }
        memcpy(ns, s->pos, s->n * sizeof(uint32_t));
        ns[s->n - 1]++;
        expand(f, ns, s->n, out);
    }
}

static int cmp_stack(const void *a, const void *b)
{
    const stack_t *x = a, *y = b;
    if (x->n != y->n) {
        return x->n < y->n ? -1 : 1;
    }
    for (uint32_t i = 0; i < x->n; i++) {
        if (x->pos[i] != y->pos[i]) {
            return x->pos[i] < y->pos[i] ? -1 : 1;
        }
    }
    return 0;
}

static uint64_t intern_hash(const void *key, void *arg)
{
    (void)arg;
    return ((const intern_key_t *)key)->hash;
}

static int intern_eq(const void *key, const void *elem, void *arg)
{
    const moon_grammar_fsm_t *f = arg;
    const intern_key_t       *k = key;
    const intern_elem_t      *e = elem;
    const state_t            *s = &f->states[e->id];

    return e->hash == k->hash && s->words == k->words &&
           memcmp(s->blob, k->blob, k->words * sizeof(uint32_t)) == 0;
}

static const moon_htab_type_t intern_type = {
    .elem_bytes = sizeof(intern_elem_t),
    .key_bytes  = sizeof(uint64_t), /* unused: key_eq compares */
    .hash       = intern_hash,
    .key_eq     = intern_eq,
};
static const moon_htab_type_t trans_type = {
    .elem_bytes = sizeof(trans_elem_t),
    .key_bytes  = sizeof(uint64_t),
};

/* The state of set (sorted and deduplicated here), interned. */
static moon_status_t intern(moon_grammar_fsm_t *f, sset_t *set, uint32_t *id_p)
{
    uint32_t      words = 1, w = 1, n = 0;
    uint32_t     *blob;
    intern_key_t  key;
    intern_elem_t elem, *found;
    state_t      *st;
    int           accepting = 0;
    moon_status_t status;

    if (set->overflow) {
        return MOON_ERR_NO_RESOURCE;
    }
    qsort(set->s, set->n, sizeof(stack_t), cmp_stack);
    for (uint32_t i = 0; i < set->n; i++) {
        if (n > 0 && cmp_stack(&set->s[n - 1], &set->s[i]) == 0) {
            continue;
        }
        set->s[n++] = set->s[i];
        words += 1 + set->s[i].n;
    }
    set->n = n;
    blob   = arena_alloc(&f->arena, words);
    if (blob == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    blob[0] = n;
    for (uint32_t i = 0; i < n; i++) {
        blob[w++] = set->s[i].n;
        memcpy(blob + w, set->s[i].pos, set->s[i].n * sizeof(uint32_t));
        w += set->s[i].n;
        accepting |= set->s[i].n == 0;
    }
    key.hash  = moon_hash_bytes(blob, words * sizeof(uint32_t));
    key.blob  = blob;
    key.words = words;
    found     = moon_htab_find(f->intern, &key);
    if (found != NULL) {
        *id_p = found->id;
        return MOON_OK;
    }
    if (f->n_states >= f->max_states) {
        return MOON_ERR_NO_RESOURCE;
    }
    if (f->n_states == f->cap_states) {
        uint32_t cap = f->cap_states ? f->cap_states * 2 : 64;
        void    *ns  = moon_realloc(f->states, cap * sizeof(state_t));
        if (ns == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        f->states     = ns;
        f->cap_states = cap;
    }
    st       = &f->states[f->n_states];
    st->blob = moon_malloc(words * sizeof(uint32_t));
    if (st->blob == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    memcpy(st->blob, blob, words * sizeof(uint32_t));
    st->words     = words;
    st->mask      = NULL;
    st->bnext     = NULL;
    st->accepting = (uint8_t)accepting;
    st->final     = (uint8_t)(accepting && n == 1);
    elem.hash     = key.hash;
    elem.id       = f->n_states;
    status        = moon_htab_insert(f->intern, &key, &elem, NULL);
    if (status != MOON_OK) {
        moon_free(st->blob);
        return status;
    }
    *id_p = f->n_states++;
    return MOON_OK;
}

/* The set of an interned state (stacks pointing into its blob). */
static int state_set(moon_grammar_fsm_t *f, uint32_t id, sset_t *set)
{
    const uint32_t *b = f->states[id].blob;
    uint32_t        w = 1;

    memset(set, 0, sizeof(*set));
    for (uint32_t i = 0; i < b[0]; i++) {
        if (!sset_add(f, set, b + w + 1, b[w])) {
            return 0;
        }
        w += 1 + b[w];
    }
    return 1;
}

moon_status_t moon_grammar_fsm_create(moon_grammar_t *g, const moon_grammar_vocab_t *v,
                                      moon_grammar_fsm_t **fsm_p)
{
    moon_grammar_fsm_t *f;
    moon_status_t       status;
    sset_t              start;
    uint32_t            root, id;

    if (g == NULL || v == NULL || fsm_p == NULL) {
        moon_grammar_destroy(g);
        return MOON_ERR_INVALID_PARAM;
    }
    f = moon_calloc(1, sizeof(*f));
    if (f == NULL) {
        moon_grammar_destroy(g);
        return MOON_ERR_NO_MEMORY;
    }
    f->g     = g;
    f->v     = v;
    f->words = (v->n + 31) / 32;
    /* a state: its mask, byte table and about 64 words of stacks */
    f->max_states = (uint32_t)MOON_MIN((uint64_t)MAX_STATES,
                                       MAX_FSM_BYTES / ((uint64_t)f->words * 4 + 1024 + 256));
    f->tmp_mask   = moon_malloc(f->words * sizeof(uint32_t));
    status        = f->tmp_mask == NULL ? MOON_ERR_NO_MEMORY : MOON_OK;
    if (status == MOON_OK) {
        status = moon_htab_create(&intern_type, f, 0, 0, &f->intern);
    }
    if (status == MOON_OK) {
        status = moon_htab_create(&trans_type, NULL, 0, 0, &f->trans);
    }
    if (status == MOON_OK) {
        /* the start: root's alternatives, as if root were referenced */
        memset(&start, 0, sizeof(start));
        for (uint32_t a = g->alt_off[0]; a < g->alt_off[1]; a++) {
            uint32_t *ns = arena_alloc(&f->arena, 1);
            if (ns == NULL) {
                status = MOON_ERR_NO_MEMORY;
                break;
            }
            ns[0] = g->alt_start[a];
            expand(f, ns, 1, &start);
        }
        (void)root;
        if (status == MOON_OK) {
            status = intern(f, &start, &id);
        }
        arena_rewind(&f->arena, (mark_t){0, 0});
    }
    if (status != MOON_OK) {
        moon_grammar_fsm_destroy(f);
        return status;
    }
    *fsm_p = f;
    return MOON_OK;
}

void moon_grammar_fsm_destroy(moon_grammar_fsm_t *f)
{
    if (f == NULL) {
        return;
    }
    for (uint32_t i = 0; i < f->n_states; i++) {
        moon_free(f->states[i].blob);
        moon_free(f->states[i].mask);
        moon_free(f->states[i].bnext);
    }
    moon_free(f->states);
    moon_htab_destroy(f->intern);
    moon_htab_destroy(f->trans);
    arena_fini(&f->arena);
    moon_free(f->tmp_mask);
    moon_grammar_destroy(f->g);
    moon_free(f);
}

/* Marks in mask every token below node whose bytes set can read. */
static void walk(moon_grammar_fsm_t *f, uint32_t node, const sset_t *set, uint32_t *mask, int *oom)
{
    const moon_grammar_vocab_t *v = f->v;

    for (uint32_t c = v->nodes[node].child; c != 0 && !*oom; c = v->nodes[c].sibling) {
        mark_t m = arena_mark(&f->arena);
        sset_t next;
        advance(f, set, v->nodes[c].byte, &next);
        if (f->arena.oom) {
            *oom = 1;
        }
        /* an overflowing set is treated as dead: its tokens stay masked */
        if (next.n > 0 && !next.overflow) {
            for (uint32_t t = v->nodes[c].token; t != UINT32_MAX; t = v->tok_next[t]) {
                mask[t >> 5] |= 1u << (t & 31);
            }
            walk(f, c, &next, mask, oom);
        }
        arena_rewind(&f->arena, m);
    }
}

/* The state after byte c in state (interned, and cached in the state's byte
 * table): BYTE_DEAD when c cannot follow. Errors: the automaton's limits. */
static moon_status_t byte_next(moon_grammar_fsm_t *f, uint32_t state, uint8_t c, uint32_t *next_p)
{
    uint32_t     *bn = f->states[state].bnext;
    sset_t        cur, next;
    uint32_t      id     = BYTE_DEAD;
    moon_status_t status = MOON_OK;

    if (bn == NULL) {
        bn = moon_malloc(256 * sizeof(uint32_t));
        if (bn == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        memset(bn, 0xFF, 256 * sizeof(uint32_t)); /* BYTE_UNKNOWN */
        f->states[state].bnext = bn;
    }
    if (bn[c] != BYTE_UNKNOWN) {
        *next_p = bn[c];
        return MOON_OK;
    }
    if (!state_set(f, state, &cur)) {
        status = MOON_ERR_NO_MEMORY;
    } else {
        advance(f, &cur, c, &next);
        if (next.overflow) {
            status = MOON_ERR_NO_RESOURCE;
        } else if (next.n > 0) {
            status = intern(f, &next, &id);
        }
    }
    arena_rewind(&f->arena, (mark_t){0, 0});
    if (status != MOON_OK) {
        return status;
    }
    f->states[state].bnext[c] = id; /* states[] may have moved: not bn */
    *next_p                   = id;
    return MOON_OK;
}

/* The walk over interned states: each trie edge is one table lookup once
 * the byte transitions of the states it meets are known (they recur: inside
 * a string every letter leads back to the same state). */
static void walk_states(moon_grammar_fsm_t *f, uint32_t node, uint32_t state, uint32_t *mask,
                        int *oom)
{
    const moon_grammar_vocab_t *v = f->v;

    for (uint32_t c = v->nodes[node].child; c != 0 && !*oom; c = v->nodes[c].sibling) {
        uint32_t      next;
        moon_status_t status = byte_next(f, state, v->nodes[c].byte, &next);
        if (status == MOON_ERR_NO_RESOURCE) {
            continue; /* as the set walk: an overflowing set is dead */
        }
        if (status != MOON_OK) {
            *oom = 1;
            return;
        }
        if (next == BYTE_DEAD) {
            continue;
        }
        for (uint32_t t = v->nodes[c].token; t != UINT32_MAX; t = v->tok_next[t]) {
            mask[t >> 5] |= 1u << (t & 31);
        }
        walk_states(f, c, next, mask, oom);
    }
}

moon_status_t moon_grammar_fsm_mask(moon_grammar_fsm_t *f, uint32_t state, const uint32_t **mask_p)
{
    state_t *st;
    sset_t   set;
    int      oom = 0;

    if (f == NULL || state >= f->n_states || mask_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    st = &f->states[state];
    if (st->mask != NULL) {
        *mask_p = st->mask;
        return MOON_OK;
    }
    memset(f->tmp_mask, 0, f->words * sizeof(uint32_t));
    if (f->n_states < f->max_states / 2) {
        walk_states(f, 0, state, f->tmp_mask, &oom);
    } else if (state_set(f, state, &set)) { /* near the limit: sets, nothing interned */
        walk(f, 0, &set, f->tmp_mask, &oom);
    } else {
        oom = 1;
    }
    arena_rewind(&f->arena, (mark_t){0, 0});
    if (oom) {
        return MOON_ERR_NO_MEMORY;
    }
    st = &f->states[state]; /* the walk may have moved states[] */
    if (st->accepting && f->v->eos >= 0) {
        f->tmp_mask[f->v->eos >> 5] |= 1u << (f->v->eos & 31);
    }
    st->mask = moon_malloc(f->words * sizeof(uint32_t));
    if (st->mask == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    memcpy(st->mask, f->tmp_mask, f->words * sizeof(uint32_t));
    *mask_p = st->mask;
    return MOON_OK;
}

/* Reads len bytes from state; *id_p: the state after them (interned). */
static moon_status_t read_bytes(moon_grammar_fsm_t *f, uint32_t state, const uint8_t *b, size_t len,
                                uint32_t *id_p)
{
    sset_t        cur, next;
    moon_status_t status;

    if (!state_set(f, state, &cur)) {
        arena_rewind(&f->arena, (mark_t){0, 0});
        return MOON_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < len; i++) {
        advance(f, &cur, b[i], &next);
        if (next.overflow || next.n == 0) {
            arena_rewind(&f->arena, (mark_t){0, 0});
            return next.overflow ? MOON_ERR_NO_RESOURCE : MOON_ERR_INVALID_PARAM;
        }
        cur = next;
    }
    status = intern(f, &cur, id_p);
    arena_rewind(&f->arena, (mark_t){0, 0});
    return status;
}

moon_status_t moon_grammar_fsm_next(moon_grammar_fsm_t *f, uint32_t state, int32_t token,
                                    uint32_t *next_p)
{
    uint64_t            key;
    const trans_elem_t *found;
    trans_elem_t        elem;
    moon_status_t       status;
    uint32_t            len;

    if (f == NULL || state >= f->n_states || token < 0 || (uint32_t)token >= f->v->n ||
        next_p == NULL || token == f->v->eos) {
        return MOON_ERR_INVALID_PARAM;
    }
    key   = (uint64_t)state << 32 | (uint32_t)token;
    found = moon_htab_find(f->trans, &key);
    if (found != NULL) {
        *next_p = found->next;
        return MOON_OK;
    }
    len = f->v->off[token + 1] - f->v->off[token];
    if (len == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = read_bytes(f, state, (const uint8_t *)f->v->bytes + f->v->off[token], len, &elem.next);
    if (status != MOON_OK) {
        return status;
    }
    elem.key = key;
    status   = moon_htab_insert(f->trans, &key, &elem, NULL);
    if (status != MOON_OK) {
        return status;
    }
    *next_p = elem.next;
    return MOON_OK;
}

int moon_grammar_fsm_accepting(const moon_grammar_fsm_t *f, uint32_t state)
{
    return f != NULL && state < f->n_states && f->states[state].accepting;
}

int moon_grammar_fsm_final(const moon_grammar_fsm_t *f, uint32_t state)
{
    return f != NULL && state < f->n_states && f->states[state].final;
}

int moon_grammar_fsm_match(moon_grammar_fsm_t *f, uint32_t state, const char *bytes, size_t len,
                           uint32_t *next_p)
{
    uint32_t id;

    if (f == NULL || state >= f->n_states || (bytes == NULL && len > 0)) {
        return 0;
    }
    if (read_bytes(f, state, (const uint8_t *)bytes, len, &id) != MOON_OK) {
        return 0;
    }
    if (next_p != NULL) {
        *next_p = id;
    }
    return 1;
}

uint32_t moon_grammar_fsm_n_states(const moon_grammar_fsm_t *f)
{
    return f != NULL ? f->n_states : 0;
}

void moon_grammar_mask_apply(const uint32_t *mask, float *logits, uint32_t n)
{
    for (uint32_t w = 0; w < (n + 31) / 32; w++) {
        uint32_t bits = mask[w];
        if (bits == UINT32_MAX) {
            continue;
        }
        for (uint32_t b = 0; b < 32 && w * 32 + b < n; b++) {
            if (!((bits >> b) & 1u)) {
                logits[w * 32 + b] = -INFINITY;
            }
        }
    }
}

/* ---- cache ---------------------------------------------------------------- */

typedef struct {
    uint64_t            hash;
    char               *spec;
    size_t              len;
    moon_grammar_fsm_t *fsm;
    uint32_t            refs;
    uint64_t            last_use;
} centry_t;

struct moon_grammar_cache {
    const moon_grammar_vocab_t *v;
    centry_t                   *e;
    uint32_t                    n, cap, keep;
    uint64_t                    clock;
};

moon_status_t moon_grammar_cache_create(const moon_grammar_vocab_t *v, uint32_t capacity,
                                        moon_grammar_cache_t **cache_p)
{
    moon_grammar_cache_t *c;

    if (v == NULL || cache_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    c = moon_calloc(1, sizeof(*c));
    if (c == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    c->v     = v;
    c->keep  = capacity;
    *cache_p = c;
    return MOON_OK;
}

void moon_grammar_cache_destroy(moon_grammar_cache_t *c)
{
    if (c == NULL) {
        return;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->e[i].refs != 0) {
            MOON_WARN("grammar cache destroyed with %u users of an automaton", c->e[i].refs);
        }
        moon_grammar_fsm_destroy(c->e[i].fsm);
        moon_free(c->e[i].spec);
    }
    moon_free(c->e);
    moon_free(c);
}

/* Drops least recently used unheld entries past the capacity. */
static void cache_trim(moon_grammar_cache_t *c)
{
    for (;;) {
        uint32_t unused = 0, victim = UINT32_MAX;
        for (uint32_t i = 0; i < c->n; i++) {
            if (c->e[i].refs == 0) {
                unused++;
                if (victim == UINT32_MAX || c->e[i].last_use < c->e[victim].last_use) {
                    victim = i;
                }
            }
        }
        if (unused <= c->keep || victim == UINT32_MAX) {
            return;
        }
        moon_grammar_fsm_destroy(c->e[victim].fsm);
        moon_free(c->e[victim].spec);
        c->e[victim] = c->e[--c->n];
    }
}

moon_status_t moon_grammar_cache_get(moon_grammar_cache_t *c, const char *spec, size_t len,
                                     moon_grammar_fsm_t **fsm_p, char *err, size_t err_cap)
{
    uint64_t            h;
    moon_grammar_t     *g;
    moon_grammar_fsm_t *fsm;
    moon_status_t       status;
    centry_t           *e;

    if (c == NULL || spec == NULL || fsm_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    h = moon_hash_bytes(spec, len);
    for (uint32_t i = 0; i < c->n; i++) {
        e = &c->e[i];
        if (e->hash == h && e->len == len && memcmp(e->spec, spec, len) == 0) {
            e->refs++;
            e->last_use = ++c->clock;
            *fsm_p      = e->fsm;
            return MOON_OK;
        }
    }
    status = moon_grammar_from_spec(spec, len, &g, err, err_cap);
    if (status != MOON_OK) {
        return status;
    }
    status = moon_grammar_fsm_create(g, c->v, &fsm);
    if (status != MOON_OK) {
        return status;
    }
    if (c->n == c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 8;
        void    *ne  = moon_realloc(c->e, cap * sizeof(centry_t));
        if (ne == NULL) {
            moon_grammar_fsm_destroy(fsm);
            return MOON_ERR_NO_MEMORY;
        }
        c->e   = ne;
        c->cap = cap;
    }
    e       = &c->e[c->n];
    e->spec = moon_malloc(len + 1);
    if (e->spec == NULL) {
        moon_grammar_fsm_destroy(fsm);
        return MOON_ERR_NO_MEMORY;
    }
    memcpy(e->spec, spec, len);
    e->spec[len] = '\0';
    e->len       = len;
    e->hash      = h;
    e->fsm       = fsm;
    e->refs      = 1;
    e->last_use  = ++c->clock;
    c->n++;
    *fsm_p = fsm;
    return MOON_OK;
}

void moon_grammar_cache_put(moon_grammar_cache_t *c, moon_grammar_fsm_t *fsm)
{
    if (c == NULL || fsm == NULL) {
        return;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->e[i].fsm == fsm) {
            if (c->e[i].refs > 0) {
                c->e[i].refs--;
            }
            cache_trim(c);
            return;
        }
    }
}
