/* model/tokenizer.c - the vocabulary from GGUF and SentencePiece BPE
 * (llama.cpp's: scores pick the merges, in tokenizer_merge.c's heap; added
 * tokens matched first, in tokenizer_added.c); byte-level BPE is
 * tokenizer_bpe.c. Pieces are kept
 * as the bytes they stand for (SentencePiece: U+2581 replaced by a space;
 * GPT-2: the byte map undone), sorted once for binary-search lookup.
 * Immutable after create. */
#include "moonlet/tokenizer.h"

#include "moonlet/alloc.h"
#include "tokenizer_internal.h"
#include "moonlet/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const moon_tokenizer_t *sort_ctx; /* qsort has no context argument */

static int cmp_bytes(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, MOON_MIN(alen, blen));
    return c != 0 ? c : (alen < blen ? -1 : alen > blen);
}

static int cmp_ids(const void *a, const void *b)
{
    const moon_tokenizer_t *t = sort_ctx;
    uint32_t                x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    int c = cmp_bytes(t->arena + t->off[x], t->len[x], t->arena + t->off[y], t->len[y]);
    return c != 0 ? c : (x < y ? -1 : x > y); /* duplicates: lowest id first */
}

int32_t moon_tok_lookup(const moon_tokenizer_t *t, const char *s, size_t n)
{
    uint32_t lo = 0, hi = t->n_sorted;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        uint32_t id  = t->sorted[mid];
        int      c   = cmp_bytes(t->arena + t->off[id], t->len[id], s, n);
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo < t->n_sorted) {
        uint32_t id = t->sorted[lo];
        if (cmp_bytes(t->arena + t->off[id], t->len[id], s, n) == 0) {
            return (int32_t)id;
        }
    }
    return -1;
}

static int parse_byte_token(const char *s, uint64_t n)
{
    unsigned v;
    char     buf[8];

    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') {
        return -1;
    }
    memcpy(buf, s, 6);
    buf[6] = '\0';
    if (sscanf(buf, "<0x%2X>", &v) != 1) {
        return -1;
    }
    return (int)v;
}

void moon_tokenizer_destroy(moon_tokenizer_t *t)
{
    if (t == NULL) {
        return;
    }
    moon_free(t->arena);
    moon_free(t->off);
    moon_free(t->len);
    moon_free(t->scores);
    moon_free(t->type);
    moon_free(t->byte_value);
    moon_free(t->sorted);
    moon_free(t->added);
    moon_tok_bpe_destroy(t->bpe);
    moon_free(t);
}

moon_status_t moon_tokenizer_create(const moon_gguf_t *g, moon_tokenizer_t **tok_p)
{
    static const char *sp = "\xe2\x96\x81"; /* U+2581 */
    moon_tokenizer_t  *t;
    moon_gguf_type_t   et;
    uint64_t           n, n_scores = 0, n_types = 0, total = 0;
    uint32_t           v;
    moon_status_t      status;
    const char        *model;
    uint64_t           model_len;
    bool               gpt2 = false, flag;

    if (g == NULL || tok_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len) == MOON_OK &&
        !(model_len == 5 && memcmp(model, "llama", 5) == 0)) {
        if (!(model_len == 4 && memcmp(model, "gpt2", 4) == 0)) {
            MOON_ERROR("tokenizer: tokenizer.ggml.model '%.*s' unsupported (supported: llama, "
                       "gpt2)",
                       (int)MOON_MIN(model_len, 64), model);
            return MOON_ERR_CORRUPT;
        }
        gpt2 = true;
    }
    if (moon_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, NULL) != MOON_OK ||
        et != MOON_GGUF_STRING || n == 0 || n > (1u << 24)) {
        MOON_ERROR("tokenizer: tokenizer.ggml.tokens missing or not a string array");
        return MOON_ERR_CORRUPT;
    }
    if (moon_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n_scores, NULL) == MOON_OK &&
        n_scores != n) {
        MOON_ERROR("tokenizer: %llu scores for %llu tokens", (unsigned long long)n_scores,
                   (unsigned long long)n);
        return MOON_ERR_CORRUPT;
    }
    if (moon_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n_types, NULL) == MOON_OK &&
        n_types != n) {
        MOON_ERROR("tokenizer: %llu token types for %llu tokens", (unsigned long long)n_types,
                   (unsigned long long)n);
        return MOON_ERR_CORRUPT;
    }
    t = moon_calloc(1, sizeof(*t));
    if (t == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    t->n_vocab = (uint32_t)n;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        uint64_t    len;
        moon_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len);
        total += len + 1;
    }
    status = MOON_ERR_NO_MEMORY;
    if (total > UINT32_MAX) {
        status = MOON_ERR_CORRUPT;
        goto err;
    }
    t->arena      = moon_malloc(total);
    t->off        = moon_malloc(n * sizeof(*t->off));
    t->len        = moon_malloc(n * sizeof(*t->len));
    t->scores     = moon_calloc(n, sizeof(*t->scores));
    t->type       = moon_malloc(n);
    t->byte_value = moon_malloc(n * sizeof(*t->byte_value));
    t->sorted     = moon_malloc(n * sizeof(*t->sorted));
    if (!t->arena || !t->off || !t->len || !t->scores || !t->type || !t->byte_value || !t->sorted) {
        goto err;
    }
    for (int b = 0; b < 256; b++) {
        t->byte_id[b] = -1;
    }
    total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        uint64_t    len;
        uint32_t    o = (uint32_t)total;
        double      d = 0.0;

        moon_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len);
        if (n_scores == n && moon_gguf_get_arr_f64(g, "tokenizer.ggml.scores", i, &d) == MOON_OK) {
            t->scores[i] = (float)d;
        }
        t->type[i] = MOON_TOK_NORMAL;
        if (n_types == n &&
            moon_gguf_get_arr_f64(g, "tokenizer.ggml.token_type", i, &d) == MOON_OK) {
            t->type[i] = (uint8_t)(d >= 1 && d <= 6 ? d : MOON_TOK_NORMAL);
        }
        if (gpt2 && t->type[i] == MOON_TOK_NORMAL) {
            total += moon_tok_bpe_unmap(s, len, t->arena + total); /* only shrinks */
        } else if (gpt2) {
            memcpy(t->arena + total, s, len); /* added tokens are stored as text */
            total += len;
        } else {
            /* copy with U+2581 -> ' ' (the piece only shrinks) */
            for (uint64_t j = 0; j < len;) {
                if (len - j >= 3 && memcmp(s + j, sp, 3) == 0) {
                    t->arena[total++] = ' ';
                    j += 3;
                } else {
                    t->arena[total++] = s[j++];
                }
            }
        }
        t->arena[total++] = '\0';
        t->off[i]         = o;
        t->len[i]         = (uint32_t)(total - 1 - o);
        t->max_piece      = MOON_MAX(t->max_piece, t->len[i]);
        t->byte_value[i]  = -1;
        if (t->type[i] == MOON_TOK_BYTE) {
            int bv = parse_byte_token(t->arena + o, t->len[i]);
            if (bv < 0) {
                MOON_ERROR("tokenizer: byte token %llu is not <0xXX>", (unsigned long long)i);
                status = MOON_ERR_CORRUPT;
                goto err;
            }
            t->byte_value[i] = (int16_t)bv;
            if (t->byte_id[bv] < 0) {
                t->byte_id[bv] = (int32_t)i;
            }
        }
        if (t->type[i] == MOON_TOK_NORMAL || t->type[i] == MOON_TOK_USER) {
            t->sorted[t->n_sorted++] = (uint32_t)i;
        }
    }
    sort_ctx = t;
    qsort(t->sorted, t->n_sorted, sizeof(*t->sorted), cmp_ids);
    sort_ctx = NULL;
    t->bos   = 1;
    t->eos   = 2;
    t->unk   = 0;
    if (moon_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v) == MOON_OK) {
        t->bos = (int32_t)v;
    }
    if (moon_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v) == MOON_OK) {
        t->eos = (int32_t)v;
    }
    if (moon_gguf_get_u32(g, "tokenizer.ggml.unknown_token_id", &v) == MOON_OK) {
        t->unk = (int32_t)v;
    }
    if ((uint32_t)t->bos >= n || (uint32_t)t->eos >= n || (uint32_t)t->unk >= n) {
        MOON_ERROR("tokenizer: bos/eos/unk id out of range");
        status = MOON_ERR_CORRUPT;
        goto err;
    }
    status = moon_tok_added_load(t);
    if (status != MOON_OK) {
        goto err;
    }
    if (gpt2) {
        status = moon_tok_bpe_create(t, g, &t->bpe);
        if (status != MOON_OK) {
            goto err;
        }
    }
    /* llama.cpp's defaults: SentencePiece vocabularies start with BOS, byte-level
     * ones only for the families that do (llama-bpe) */
    t->add_bos = t->bpe == NULL || moon_tok_bpe_default_bos(t->bpe);
    if (moon_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &flag) == MOON_OK) {
        t->add_bos = flag;
    }
    if (moon_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &flag) == MOON_OK) {
        t->add_eos = flag;
    }
    *tok_p = t;
    return MOON_OK;

err:
    moon_tokenizer_destroy(t);
    return status;
}

uint32_t moon_tokenizer_n_vocab(const moon_tokenizer_t *t)
{
    return t->n_vocab;
}
int32_t moon_tokenizer_bos(const moon_tokenizer_t *t)
{
    return t->bos;
}
int32_t moon_tokenizer_eos(const moon_tokenizer_t *t)
{
    return t->eos;
}
size_t moon_tokenizer_max_piece(const moon_tokenizer_t *t)
{
    return t->max_piece;
}

typedef struct {
    const moon_tokenizer_t *t;
    char                   *buf; /* 2 max_piece */
} spm_ctx_t;

/* A pair merges when its joined text is a piece; the best score first.
 * Byte fallback tokens never merge (their text is "<0xXX>"). */
static int spm_pair(const void *ctx, int32_t l, int32_t r, double *key, int32_t *id)
{
    const spm_ctx_t        *c  = ctx;
    const moon_tokenizer_t *t  = c->t;
    size_t                  l1 = t->len[l], l2 = t->len[r];

    if (t->byte_value[l] >= 0 || t->byte_value[r] >= 0) {
        return 0;
    }
    memcpy(c->buf, t->arena + t->off[l], l1);
    memcpy(c->buf + l1, t->arena + t->off[r], l2);
    *id  = moon_tok_lookup(t, c->buf, l1 + l2);
    *key = *id >= 0 ? -(double)t->scores[*id] : 0.0;
    return *id >= 0;
}

/* SentencePiece BPE of one fragment (text between added tokens) into w
 * (room for len + 1 ids): the space prefix when asked (llama.cpp's
 * add_space_prefix: at the start and after an added token), one token per
 * UTF-8 character (bytes for a character outside the vocabulary), then the
 * adjacent pair whose joined piece scores best merges, leftmost on ties,
 * until no pair joins into a piece. Returns the ids written. */
static size_t spm_fragment(const spm_ctx_t *c, moon_tok_merge_t *s, const char *text, size_t len,
                           bool prefix, int32_t *w)
{
    const moon_tokenizer_t *t = c->t;
    size_t                  n = 0;

    if (prefix) {
        int32_t dummy = moon_tok_lookup(t, " ", 1);
        if (dummy >= 0) {
            s->sym[n++] = dummy;
        }
    }
    for (size_t i = 0; i < len;) {
        size_t  clen = 1;
        int32_t id;
        while (clen < 4 && i + clen < len && ((uint8_t)text[i + clen] & 0xc0) == 0x80 &&
               ((uint8_t)text[i] & 0xc0) != 0x80) {
            clen++;
        }
        id = moon_tok_lookup(t, text + i, clen);
        if (id >= 0) {
            s->sym[n++] = id;
        } else {
            for (size_t j = 0; j < clen; j++) {
                int32_t b   = t->byte_id[(uint8_t)text[i + j]];
                s->sym[n++] = b >= 0 ? b : t->unk;
            }
        }
        i += clen;
    }
    return moon_tok_merge(s, n, spm_pair, c, w);
}

/* SentencePiece: added tokens matched first, as they are; each fragment
 * between them encoded on its own (tokenizers' legacy Llama/Mistral
 * normalizer and llama.cpp agree: every fragment gets the space prefix).
 * MOON_ERR_NO_MEMORY only. */
static moon_status_t spm_encode(const moon_tokenizer_t *t, const char *text, size_t len, int32_t *w,
                                size_t *n_p)
{
    spm_ctx_t        c = {t, moon_malloc(2 * t->max_piece + 8)};
    moon_tok_merge_t s = {0};
    size_t           n = 0, frag = 0;
    bool             prefix = true;

    s.sym  = moon_malloc((len + 1) * sizeof(*s.sym));
    s.prev = moon_malloc((len + 1) * sizeof(*s.prev));
    s.next = moon_malloc((len + 1) * sizeof(*s.next));
    s.heap = moon_malloc(3 * (len + 1) * sizeof(*s.heap));
    if (c.buf == NULL || !s.sym || !s.prev || !s.next || !s.heap) {
        n = SIZE_MAX;
    }
    for (size_t i = 0; n != SIZE_MAX && i <= len;) {
        /* at character starts only, as the byte-level path does */
        int32_t id = i < len && ((uint8_t)text[i] & 0xc0) != 0x80
                         ? moon_tok_match_added(t, text, i, len)
                         : -1;
        if (i < len && id < 0) {
            i++;
            continue;
        }
        if (i > frag) {
            n += spm_fragment(&c, &s, text + frag, i - frag, prefix, w + n);
            prefix = false;
        }
        if (id < 0) {
            break;
        }
        w[n++] = id;
        prefix = true;
        i += t->len[id];
        frag = i;
    }
    moon_free(c.buf);
    moon_free(s.sym);
    moon_free(s.prev);
    moon_free(s.next);
    moon_free(s.heap);
    *n_p = n;
    return n == SIZE_MAX ? MOON_ERR_NO_MEMORY : MOON_OK;
}

moon_status_t moon_tokenizer_encode(const moon_tokenizer_t *t, const char *text, size_t len,
                                    bool add_bos, int32_t *ids, size_t max_ids, size_t *n_p)
{
    int32_t      *w;
    size_t        n = 0, n_text = 0;
    moon_status_t status;

    if (t == NULL || (text == NULL && len != 0) || (ids == NULL && max_ids != 0) || n_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    /* SentencePiece: a prefix per fragment, at most one fragment per byte */
    w = moon_malloc((2 * len + 3) * sizeof(*w));
    if (w == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    if (add_bos && t->add_bos) {
        w[n++] = t->bos;
    }
    status = t->bpe != NULL ? moon_tok_bpe_encode(t, text, len, w + n, &n_text)
                            : spm_encode(t, text, len, w + n, &n_text);
    if (status != MOON_OK) {
        moon_free(w);
        return status;
    }
    n += n_text;
    if (add_bos && t->add_eos) {
        w[n++] = t->eos;
    }
    if (n > max_ids) {
        if (max_ids > 0) {
            memcpy(ids, w, max_ids * sizeof(*w));
        }
        moon_free(w);
        return MOON_ERR_NO_RESOURCE;
    }
    if (n > 0) {
        memcpy(ids, w, n * sizeof(*w));
    }
    moon_free(w);
    *n_p = n;
    return MOON_OK;
}

static const char byte_chars[256] = {
#define B4(i) (char)(i), (char)(i + 1), (char)(i + 2), (char)(i + 3)
#define B16(i) B4(i), B4(i + 4), B4(i + 8), B4(i + 12)
#define B64(i) B16(i), B16(i + 16), B16(i + 32), B16(i + 48)
    B64(0), B64(64), B64(128), B64(192)
#undef B64
#undef B16
#undef B4
};

const char *moon_tokenizer_piece(const moon_tokenizer_t *t, int32_t prev, int32_t id, size_t *len_p)
{
    const char *s;
    size_t      len;

    if (t == NULL || id < 0 || (uint32_t)id >= t->n_vocab) {
        return NULL;
    }
    if (t->type[id] == MOON_TOK_CONTROL || t->type[id] == MOON_TOK_UNUSED) {
        *len_p = 0;
        return "";
    }
    if (t->byte_value[id] >= 0) {
        *len_p = 1;
        return &byte_chars[t->byte_value[id]];
    }
    s   = t->arena + t->off[id];
    len = t->len[id];
    if (t->bpe == NULL && prev == t->bos && len > 0 && s[0] == ' ') {
        s++;
        len--;
    }
    *len_p = len;
    return s;
}

moon_status_t moon_tokenizer_decode(const moon_tokenizer_t *t, int32_t prev, const int32_t *ids,
                                    size_t n, char *out, size_t cap, size_t *len_p)
{
    size_t total = 0;

    if (t == NULL || (ids == NULL && n != 0) || out == NULL || cap == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < n; i++) {
        size_t      len;
        const char *p = moon_tokenizer_piece(t, prev, ids[i], &len);
        if (p == NULL) {
            return MOON_ERR_INVALID_PARAM;
        }
        if (total + len + 1 > cap) {
            return MOON_ERR_NO_RESOURCE;
        }
        memcpy(out + total, p, len);
        total += len;
        prev = ids[i];
    }
    out[total] = '\0';
    if (len_p != NULL) {
        *len_p = total;
    }
    return MOON_OK;
}

void moon_tok_stream_init(moon_tok_stream_t *st, const moon_tokenizer_t *tok, int32_t prev)
{
    memset(st, 0, sizeof(*st));
    st->tok  = tok;
    st->prev = prev;
}

static size_t put_fffd(char *out)
{
    memcpy(out, "\xef\xbf\xbd", 3);
    return 3;
}

/* Bytes a lead byte needs in all (0: invalid lead). */
static uint32_t utf8_need(uint8_t b)
{
    if (b < 0x80) {
        return 1;
    }
    if (b >= 0xc2 && b <= 0xdf) {
        return 2;
    }
    if (b >= 0xe0 && b <= 0xef) {
        return 3;
    }
    if (b >= 0xf0 && b <= 0xf4) {
        return 4;
    }
    return 0;
}

/* Whether b may follow the pending bytes (rejects overlongs and surrogates). */
static int utf8_cont_ok(const moon_tok_stream_t *st, uint8_t b)
{
    if ((b & 0xc0) != 0x80) {
        return 0;
    }
    if (st->n_pend == 1) {
        switch (st->pend[0]) {
        case 0xe0:
            return b >= 0xa0;
        case 0xed:
            return b <= 0x9f;
        case 0xf0:
            return b >= 0x90;
        case 0xf4:
            return b <= 0x8f;
        default:
            break;
        }
    }
    return 1;
}

moon_status_t moon_tok_stream_push(moon_tok_stream_t *st, int32_t id, char *out, size_t cap,
                                   size_t *len_p)
{
    size_t      len, o = 0;
    const char *p;

    if (st == NULL || out == NULL || cap < MOON_TOK_STREAM_OUT_MAX(st->tok)) {
        return MOON_ERR_INVALID_PARAM;
    }
    p = moon_tokenizer_piece(st->tok, st->prev, id, &len);
    if (p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    st->prev = id;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)p[i];
        if (st->n_pend > 0) {
            if (utf8_cont_ok(st, b)) {
                st->pend[st->n_pend++] = b;
                if (st->n_pend == st->need) {
                    memcpy(out + o, st->pend, st->n_pend);
                    o += st->n_pend;
                    st->n_pend = 0;
                }
                continue;
            }
            o += put_fffd(out + o); /* broken sequence; b starts afresh */
            st->n_pend = 0;
        }
        st->need = utf8_need(b);
        if (st->need == 1) {
            out[o++] = (char)b;
        } else if (st->need == 0) {
            o += put_fffd(out + o);
        } else {
            st->pend[0] = b;
            st->n_pend  = 1;
        }
    }
    out[o] = '\0';
    if (len_p != NULL) {
        *len_p = o;
    }
    return MOON_OK;
}

void moon_tok_stream_flush(moon_tok_stream_t *st, char *out, size_t cap, size_t *len_p)
{
    size_t o = 0;

    if (st->n_pend > 0 && cap >= 4) {
        o          = put_fffd(out);
        st->n_pend = 0;
    }
    if (cap > o) {
        out[o] = '\0';
    }
    if (len_p != NULL) {
        *len_p = o;
    }
}
