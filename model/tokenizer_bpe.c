/* model/tokenizer_bpe.c - byte-level BPE (GPT-2 vocabularies: Llama 3, Qwen,
 * SmolLM; tokenizer.ggml.model = gpt2). Encoding follows Hugging Face
 * tokenizers and llama.cpp: added tokens are matched first (never split), the
 * text between them is split by the family's pre-tokenizer regex (written out
 * by hand over code point classes), and each piece is merged pair by pair,
 * lowest merge rank first. Immutable after create; encode allocates its
 * scratch per call (it is not on a decode step's path). */
#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "tokenizer_internal.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

typedef enum {
    PRE_GPT2,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PRE_LLAMA3, /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PRE_QWEN2,  /* the same with \p{N} one digit at a time */
    PRE_SMOLLM, /* every \p{N} alone, then GPT-2's regex on the rest */
} pre_kind_t;

static const struct {
    const char *name;
    pre_kind_t  kind;
} pre_names[] = {
    {"llama-bpe", PRE_LLAMA3}, {"llama3", PRE_LLAMA3}, {"llama-v3", PRE_LLAMA3},
    {"qwen2", PRE_QWEN2},      {"smollm", PRE_SMOLLM}, {"gpt2", PRE_GPT2},
    {"gpt-2", PRE_GPT2},       {"default", PRE_GPT2},
};
#define PRE_SUPPORTED "llama-bpe, llama3, llama-v3, qwen2, smollm, gpt2, gpt-2, default"

typedef struct {
    uint64_t key;  /* left id << 32 | right id */
    uint32_t rank; /* index in tokenizer.ggml.merges */
    int32_t  id;   /* the merged token; -1: empty slot */
} merge_t;

struct moon_tok_bpe {
    pre_kind_t pre;
    bool       ignore_merges; /* a piece that is a token is taken whole (Llama 3) */
    merge_t   *merges;        /* (mask + 1) open addressing */
    uint64_t   mask;
    int32_t    byte_tok[256]; /* the token of each single byte */
};

/* ---- the GPT-2 byte map ---------------------------------------------------- */

/* GPT-2 writes byte b as a code point: printable Latin-1 as itself, the
 * other 68 bytes (0x00-0x20, 0x7f-0xa0, 0xad) as 256, 257, ... in order. The
 * byte code point cp stands for, or -1. */
static int cp_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff)) {
        return (int)cp;
    }
    if (cp >= 256 && cp <= 256 + 0x20) {
        return (int)(cp - 256);
    }
    if (cp >= 256 + 0x21 && cp <= 256 + 0x21 + (0xa0 - 0x7f)) {
        return (int)(cp - 256 - 0x21 + 0x7f);
    }
    return cp == 256 + 0x21 + (0xa0 - 0x7f) + 1 ? 0xad : -1;
}

size_t moon_tok_bpe_unmap(const char *s, size_t len, char *out)
{
    size_t o = 0;

    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t   k = moon_utf8_decode((const uint8_t *)s + i, len - i, &cp);
        int      b = cp_byte(cp);
        if (b >= 0) {
            out[o++] = (char)b;
        } else {
            memcpy(out + o, s + i, k);
            o += k;
        }
        i += k;
    }
    return o;
}

/* ---- merges ---------------------------------------------------------------- */

static uint64_t merge_slot(uint64_t key, uint64_t mask)
{
    return (key * 0x9e3779b97f4a7c15ull >> 17) & mask;
}

static const merge_t *merge_find(const moon_tok_bpe_t *bpe, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;

    for (uint64_t i = merge_slot(key, bpe->mask);; i = (i + 1) & bpe->mask) {
        const merge_t *m = &bpe->merges[i];
        if (m->id < 0) {
            return NULL;
        }
        if (m->key == key) {
            return m;
        }
    }
}

static moon_status_t load_merges(moon_tok_bpe_t *bpe, const moon_tokenizer_t *t,
                                 const moon_gguf_t *g)
{
    moon_gguf_type_t et;
    uint64_t         n = 0, cap = 16, n_skipped = 0, buf_bytes;
    char            *buf;

    if (moon_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, NULL) != MOON_OK ||
        et != MOON_GGUF_STRING || n == 0) {
        MOON_ERROR("tokenizer: a gpt2 vocabulary needs tokenizer.ggml.merges (a string array; "
                   "missing or empty)");
        return MOON_ERR_CORRUPT;
    }
    if (n > (1u << 24)) {
        MOON_ERROR("tokenizer: %llu merges is past the limit", (unsigned long long)n);
        return MOON_ERR_CORRUPT;
    }
    while (cap < n + n / 3) {
        cap *= 2;
    }
    bpe->merges = moon_malloc(cap * sizeof(*bpe->merges));
    buf_bytes   = 2 * t->max_piece + 8;
    buf         = moon_malloc(buf_bytes);
    if (bpe->merges == NULL || buf == NULL) {
        moon_free(buf);
        return MOON_ERR_NO_MEMORY;
    }
    bpe->mask = cap - 1;
    for (uint64_t i = 0; i < cap; i++) {
        bpe->merges[i].id = -1;
    }
    for (uint64_t r = 0; r < n; r++) {
        const char *s, *sp;
        uint64_t    len;
        int32_t     a, b, ab;
        size_t      la, lb;
        uint64_t    key;

        moon_gguf_get_arr_str(g, "tokenizer.ggml.merges", r, &s, &len);
        /* "left right": a byte-level piece never holds a space (0x20 is mapped) */
        sp = len > 2 ? memchr(s + 1, ' ', len - 2) : NULL;
        if (sp == NULL) {
            n_skipped++;
            continue;
        }
        if (len > buf_bytes) { /* unmapping never lengthens */
            char *nb = moon_realloc(buf, len);
            if (nb == NULL) {
                moon_free(buf);
                return MOON_ERR_NO_MEMORY;
            }
            buf       = nb;
            buf_bytes = len;
        }
        la = moon_tok_bpe_unmap(s, (size_t)(sp - s), buf);
        lb = moon_tok_bpe_unmap(sp + 1, len - (size_t)(sp - s) - 1, buf + la);
        a  = moon_tok_lookup(t, buf, la);
        b  = moon_tok_lookup(t, buf + la, lb);
        ab = moon_tok_lookup(t, buf, la + lb);
        if (a < 0 || b < 0 || ab < 0) {
            n_skipped++;
            continue;
        }
        key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        for (uint64_t i = merge_slot(key, bpe->mask);; i = (i + 1) & bpe->mask) {
            merge_t *m = &bpe->merges[i];
            if (m->id < 0) {
                *m = (merge_t){.key = key, .rank = (uint32_t)r, .id = ab};
                break;
            }
            if (m->key == key) {
                break; /* a repeated merge keeps its first rank */
            }
        }
    }
    moon_free(buf);
    if (n_skipped > 0) {
        MOON_WARN("tokenizer: %llu of %llu merges name pieces not in the vocabulary (ignored)",
                  (unsigned long long)n_skipped, (unsigned long long)n);
    }
    return MOON_OK;
}

/* ---- create -------------------------------------------------------------------- */

void moon_tok_bpe_destroy(moon_tok_bpe_t *bpe)
{
    if (bpe == NULL) {
        return;
    }
    moon_free(bpe->merges);
    moon_free(bpe);
}

bool moon_tok_bpe_default_bos(const moon_tok_bpe_t *bpe)
{
    return bpe->pre == PRE_LLAMA3;
}

moon_status_t moon_tok_bpe_create(const moon_tokenizer_t *t, const moon_gguf_t *g,
                                  moon_tok_bpe_t **bpe_p)
{
    moon_tok_bpe_t *bpe;
    const char     *pre;
    uint64_t        pre_len = 0;
    moon_status_t   status;

    bpe = moon_calloc(1, sizeof(*bpe));
    if (bpe == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    bpe->pre = PRE_GPT2;
    if (moon_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len) == MOON_OK) {
        size_t i;
        for (i = 0; i < MOON_ARRAY_SIZE(pre_names); i++) {
            if (strlen(pre_names[i].name) == pre_len &&
                memcmp(pre_names[i].name, pre, pre_len) == 0) {
                bpe->pre = pre_names[i].kind;
                break;
            }
        }
        if (i == MOON_ARRAY_SIZE(pre_names)) {
            MOON_ERROR("tokenizer: pre-tokenizer '%.*s' unsupported (supported: " PRE_SUPPORTED ")",
                       (int)MOON_MIN(pre_len, 64), pre);
            status = MOON_ERR_CORRUPT;
            goto err;
        }
    } else {
        MOON_WARN("tokenizer: no tokenizer.ggml.pre; splitting as GPT-2 does");
    }
    bpe->ignore_merges = bpe->pre == PRE_LLAMA3;
    for (int b = 0; b < 256; b++) {
        char c           = (char)b;
        bpe->byte_tok[b] = moon_tok_lookup(t, &c, 1);
        if (bpe->byte_tok[b] < 0) {
            MOON_ERROR("tokenizer: the byte-level vocabulary has no token for byte 0x%02x", b);
            status = MOON_ERR_CORRUPT;
            goto err;
        }
    }
    status = load_merges(bpe, t, g);
    if (status != MOON_OK) {
        goto err;
    }
    *bpe_p = bpe;
    return MOON_OK;

err:
    moon_tok_bpe_destroy(bpe);
    return status;
}

/* ---- pre-tokenizers ---------------------------------------------------------------- */

#define F_L MOON_UNICODE_F_LETTER
#define F_N MOON_UNICODE_F_NUMBER
#define F_S MOON_UNICODE_F_SPACE

typedef struct {
    const uint32_t *cp; /* (n) code points of the fragment */
    const uint32_t *fl; /* (n) their class flags */
} cps_t;

static uint32_t ascii_lower(uint32_t c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

static int is_nl(uint32_t c)
{
    return c == '\r' || c == '\n';
}

/* 's 't 're 've 'm 'll 'd at i: the end of the match, or i. */
static size_t match_contraction(const cps_t *p, size_t i, size_t end, bool fold)
{
    uint32_t c1, c2;

    if (p->cp[i] != '\'' || i + 1 >= end) {
        return i;
    }
    c1 = fold ? ascii_lower(p->cp[i + 1]) : p->cp[i + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        return i + 2;
    }
    if (i + 2 < end) {
        c2 = fold ? ascii_lower(p->cp[i + 2]) : p->cp[i + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
            return i + 3;
        }
    }
    return i;
}

/* \s+(?!\S)|\s+ at a white space i (what both regexes end with). */
static size_t match_spaces(const cps_t *p, size_t i, size_t end)
{
    size_t j = i;

    while (j < end && (p->fl[j] & F_S)) {
        j++;
    }
    /* followed by a non-space: leave it the last space (if that leaves any) */
    return j < end && j - i > 1 ? j - 1 : j;
}

static size_t run(const cps_t *p, size_t j, size_t end, uint32_t want, uint32_t mask)
{
    while (j < end && (p->fl[j] & mask) == want) {
        j++;
    }
    return j;
}

/* Llama 3 / Qwen 2 at i (digits: the most \p{N} in one piece): the match's end. */
static size_t match_llama3(const cps_t *p, size_t i, size_t end, size_t digits)
{
    uint32_t c = p->cp[i], f = p->fl[i];
    size_t   j = match_contraction(p, i, end, true);

    if (j > i) {
        return j;
    }
    if (f & F_L) { /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        return run(p, i + 1, end, F_L, F_L);
    }
    if (!(f & F_N) && !is_nl(c) && i + 1 < end && (p->fl[i + 1] & F_L)) {
        return run(p, i + 2, end, F_L, F_L);
    }
    if (f & F_N) { /* \p{N}{1,digits} */
        for (j = i + 1; j < end && j - i < digits && (p->fl[j] & F_N); j++) {
        }
        return j;
    }
    j = c == ' ' ? i + 1 : i; /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if (j < end && !(p->fl[j] & (F_S | F_L | F_N))) {
        j = run(p, j + 1, end, 0, F_S | F_L | F_N);
        while (j < end && is_nl(p->cp[j])) {
            j++;
        }
        return j;
    }
    if (f & F_S) { /* \s*[\r\n]+ : up to the run's last line break */
        size_t last_nl = end;
        for (j = i; j < end && (p->fl[j] & F_S); j++) {
            if (is_nl(p->cp[j])) {
                last_nl = j;
            }
        }
        if (last_nl < end) {
            return last_nl + 1;
        }
        return match_spaces(p, i, end);
    }
    return i + 1;
}

/* GPT-2 at i. */
static size_t match_gpt2(const cps_t *p, size_t i, size_t end)
{
    size_t j = match_contraction(p, i, end, false);

    if (j > i) {
        return j;
    }
    j = p->cp[i] == ' ' ? i + 1 : i;
    if (j < end && (p->fl[j] & F_L)) {
        return run(p, j + 1, end, F_L, F_L);
    }
    if (j < end && (p->fl[j] & F_N)) {
        return run(p, j + 1, end, F_N, F_N);
    }
    if (j < end && !(p->fl[j] & (F_S | F_L | F_N))) {
        return run(p, j + 1, end, 0, F_S | F_L | F_N);
    }
    if (p->fl[i] & F_S) {
        return match_spaces(p, i, end);
    }
    return i + 1;
}

/* ---- merging ------------------------------------------------------------------------ */

typedef moon_tok_merge_t bpe_scratch_t;

static int bpe_pair(const void *ctx, int32_t l, int32_t r, double *key, int32_t *id)
{
    const merge_t *m = merge_find(ctx, l, r);

    if (m == NULL) {
        return 0;
    }
    *key = m->rank;
    *id  = m->id;
    return 1;
}

/* Appends the tokens of one piece w[0..n) to out. */
static size_t bpe_piece(const moon_tokenizer_t *t, bpe_scratch_t *s, const char *w, size_t n,
                        int32_t *out)
{
    const moon_tok_bpe_t *bpe = t->bpe;

    if (bpe->ignore_merges && n > 1) {
        int32_t id = moon_tok_lookup(t, w, n);
        if (id >= 0 && t->type[id] == MOON_TOK_NORMAL) {
            out[0] = id;
            return 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        s->sym[i] = bpe->byte_tok[(uint8_t)w[i]];
    }
    return moon_tok_merge(s, n, bpe_pair, bpe, out);
}

typedef struct {
    uint32_t *cp;  /* (len) */
    uint32_t *fl;  /* (len) */
    size_t   *off; /* (len + 1) byte offset of each code point */
} text_cps_t;

/* Splits code points [a, b) of the text into pieces and merges each. */
static size_t encode_fragment(const moon_tokenizer_t *t, bpe_scratch_t *s, const text_cps_t *tc,
                              const char *text, size_t a, size_t b, int32_t *out)
{
    cps_t  p = {tc->cp, tc->fl};
    size_t k = 0;

    for (size_t i = a; i < b;) {
        size_t j;
        switch (t->bpe->pre) {
        case PRE_LLAMA3:
            j = match_llama3(&p, i, b, 3);
            break;
        case PRE_QWEN2:
            j = match_llama3(&p, i, b, 1);
            break;
        case PRE_SMOLLM: /* each digit alone; GPT-2 up to the next digit */
            if (p.fl[i] & F_N) {
                j = i + 1;
            } else {
                size_t e = run(&p, i, b, 0, F_N);
                j        = match_gpt2(&p, i, e);
            }
            break;
        default:
            j = match_gpt2(&p, i, b);
            break;
        }
        k += bpe_piece(t, s, text + tc->off[i], tc->off[j] - tc->off[i], out + k);
        i = j;
    }
    return k;
}

moon_status_t moon_tok_bpe_encode(const moon_tokenizer_t *t, const char *text, size_t len,
                                  int32_t *w, size_t *n_p)
{
    text_cps_t    tc = {0};
    bpe_scratch_t s  = {0};
    size_t        n = 0, n_cp = 0, frag = 0;
    moon_status_t ret = MOON_ERR_NO_MEMORY;

    if (len == 0) {
        *n_p = 0;
        return MOON_OK;
    }
    tc.cp  = moon_malloc(len * sizeof(*tc.cp));
    tc.fl  = moon_malloc(len * sizeof(*tc.fl));
    tc.off = moon_malloc((len + 1) * sizeof(*tc.off));
    s.sym  = moon_malloc(len * sizeof(*s.sym));
    s.prev = moon_malloc(len * sizeof(*s.prev));
    s.next = moon_malloc(len * sizeof(*s.next));
    s.heap = moon_malloc(3 * len * sizeof(*s.heap));
    if (!tc.cp || !tc.fl || !tc.off || !s.sym || !s.prev || !s.next || !s.heap) {
        goto out;
    }
    /* added tokens first (at code point boundaries); the text between them
     * goes through the pre-tokenizer */
    for (size_t i = 0; i < len;) {
        int32_t id = moon_tok_match_added(t, text, i, len);
        if (id >= 0) {
            tc.off[n_cp] = i;
            n += encode_fragment(t, &s, &tc, text, frag, n_cp, w + n);
            w[n++] = id;
            i += t->len[id];
            frag = n_cp;
            continue;
        }
        tc.off[n_cp] = i;
        i += moon_utf8_decode((const uint8_t *)text + i, len - i, &tc.cp[n_cp]);
        tc.fl[n_cp] = moon_unicode_flags(tc.cp[n_cp]);
        n_cp++;
    }
    tc.off[n_cp] = len;
    n += encode_fragment(t, &s, &tc, text, frag, n_cp, w + n);
    *n_p = n;
    ret  = MOON_OK;
out:
    moon_free(tc.cp);
    moon_free(tc.fl);
    moon_free(tc.off);
    moon_free(s.sym);
    moon_free(s.prev);
    moon_free(s.next);
    moon_free(s.heap);
    return ret;
}
