/* model/convert/hf_vocab.c - tokenizer.json to GGUF vocabulary keys: a
 * byte-level BPE (Llama 3, Qwen) as tokenizer.ggml.model gpt2, a
 * SentencePiece-style BPE (byte_fallback: Llama 2, Mistral 7B v0.1,
 * TinyLlama) as llama with scores. Mirrors model/convert/hf_tokenizer.mjs key
 * for key (the tests compare both). */
#include "hf_vocab.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB_MAX (1u << 22)

enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5, T_BYTE = 6 };

/* The pre-tokenizer regexes of the families llama.cpp names (tokenizer.ggml.pre). */
static const char LLAMA3_RE[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int is_type(const cJSON *o, const char *type)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) && strcmp(t->valuestring, type) == 0;
}

/* The pre-tokenizers of a (possibly nested) Sequence, flattened. */
static void flatten_pre(const cJSON *p, const cJSON **out, int *n, int cap)
{
    const cJSON *e;

    if (!cJSON_IsObject(p)) {
        return;
    }
    if (is_type(p, "Sequence")) {
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"))
        {
            flatten_pre(e, out, n, cap);
        }
    } else if (*n < cap) {
        out[(*n)++] = p;
    }
}

static const char *detect_pre(const cJSON *tj)
{
    const cJSON *pres[16], *split = NULL, *bl = NULL;
    int          n = 0, digits = 0;

    flatten_pre(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"), pres, &n, 16);
    for (int i = 0; i < n; i++) {
        if (is_type(pres[i], "Split") && split == NULL) {
            split = pres[i];
        } else if (is_type(pres[i], "ByteLevel") && bl == NULL) {
            bl = pres[i];
        } else if (is_type(pres[i], "Digits") &&
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pres[i], "individual_digits"))) {
            digits = 1;
        }
    }
    if (split != NULL) {
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
        if (cJSON_IsString(re) && strcmp(re->valuestring, LLAMA3_RE) == 0) {
            return "llama-bpe";
        }
        if (cJSON_IsString(re) && strcmp(re->valuestring, QWEN2_RE) == 0) {
            return "qwen2";
        }
        return NULL;
    }
    if (bl != NULL && !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(bl, "use_regex"))) {
        return digits ? "smollm" : "gpt2";
    }
    return NULL;
}

static const char *token_content(const cJSON *v)
{
    if (cJSON_IsString(v)) {
        return v->valuestring;
    }
    v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The id of a special token named in tokenizer_config.json, or -1. */
static int64_t id_of(const cJSON *vocab, const cJSON *added, const cJSON *v)
{
    const char  *s = token_content(v);
    const cJSON *a;

    if (s == NULL) {
        return -1;
    }
    cJSON_ArrayForEach(a, added)
    {
        const cJSON *c  = cJSON_GetObjectItemCaseSensitive(a, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (cJSON_IsString(c) && cJSON_IsNumber(id) && strcmp(c->valuestring, s) == 0) {
            return (int64_t)id->valuedouble;
        }
    }
    a = cJSON_GetObjectItemCaseSensitive(vocab, s);
    return cJSON_IsNumber(a) ? (int64_t)a->valuedouble : -1;
}

static int valid_id(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < VOCAB_MAX &&
           v->valuedouble == (double)(uint32_t)v->valuedouble;
}

/* tokens[] and types[] (n of each, tokens borrowed from tj or owned pads). */
static moon_status_t build_tokens(const cJSON *vocab, const cJSON *added, uint32_t min_tokens,
                                  const char ***tokens_p, int32_t **types_p, char **pads_p,
                                  uint32_t *n_p)
{
    const cJSON *e;
    uint32_t     n = min_tokens;
    const char **tokens;
    int32_t     *types;
    char        *pads, *p;

    cJSON_ArrayForEach(e, vocab)
    {
        if (!valid_id(e)) {
            MOON_ERROR("hf: tokenizer.json: token '%s' has a bad id", e->string);
            return MOON_ERR_CORRUPT;
        }
        n = (uint32_t)e->valuedouble + 1 > n ? (uint32_t)e->valuedouble + 1 : n;
    }
    cJSON_ArrayForEach(e, added)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!valid_id(id) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "content"))) {
            MOON_ERROR("hf: tokenizer.json: an added token lacks content or a valid id");
            return MOON_ERR_CORRUPT;
        }
        n = (uint32_t)id->valuedouble + 1 > n ? (uint32_t)id->valuedouble + 1 : n;
    }
    tokens = moon_calloc(n, sizeof(*tokens));
    types  = moon_calloc(n, sizeof(*types));
    pads   = moon_malloc((size_t)n * 16);
    if (tokens == NULL || types == NULL || pads == NULL) {
        moon_free(tokens);
        moon_free(types);
        moon_free(pads);
        return MOON_ERR_NO_MEMORY;
    }
    cJSON_ArrayForEach(e, vocab)
    {
        tokens[(uint32_t)e->valuedouble] = e->string;
        types[(uint32_t)e->valuedouble]  = T_NORMAL;
    }
    cJSON_ArrayForEach(e, added)
    {
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        tokens[id]  = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        types[id] =
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ? T_CONTROL : T_USER;
    }
    p = pads;
    for (uint32_t i = 0; i < n; i++) {
        if (tokens[i] == NULL) {
            snprintf(p, 16, "[PAD%u]", i);
            tokens[i] = p;
            types[i]  = T_UNUSED;
            p += 16;
        }
    }
    *tokens_p = tokens;
    *types_p  = types;
    *pads_p   = pads;
    *n_p      = n;
    return MOON_OK;
}

/* merges as "a b" strings (the array form ["a", "b"] joined). */
static moon_status_t build_merges(const cJSON *merges, char ***out_p, uint32_t *n_p)
{
    uint32_t     n = (uint32_t)cJSON_GetArraySize(merges), i = 0;
    char       **out;
    const cJSON *m;

    out = moon_calloc(n + 1, sizeof(*out));
    if (out == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    cJSON_ArrayForEach(m, merges)
    {
        if (cJSON_IsString(m)) {
            out[i] = moon_strdup(m->valuestring);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            const char *a  = cJSON_GetArrayItem(m, 0)->valuestring;
            const char *b  = cJSON_GetArrayItem(m, 1)->valuestring;
            size_t      la = strlen(a), lb = strlen(b);
            out[i] = moon_malloc(la + lb + 2);
            if (out[i] != NULL) {
                memcpy(out[i], a, la);
                out[i][la] = ' ';
                memcpy(out[i] + la + 1, b, lb + 1);
            }
        } else {
            MOON_ERROR("hf: tokenizer.json: merge %u is neither \"a b\" nor [\"a\", \"b\"]", i);
            *n_p   = i;
            *out_p = out;
            return MOON_ERR_CORRUPT;
        }
        if (out[i++] == NULL) {
            *n_p   = i;
            *out_p = out;
            return MOON_ERR_NO_MEMORY;
        }
    }
    *n_p   = i;
    *out_p = out;
    return MOON_OK;
}

static int post_processor_templates(const cJSON *tj)
{
    char *s   = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(tj, "post_processor"));
    int   yes = s != NULL && strstr(s, "TemplateProcessing") != NULL;

    cJSON_free(s);
    return yes;
}

/* tokenizer_config.json's chat_template: a string, or the "default" one of a list. */
static const char *chat_template(const cJSON *tc)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(tc, "chat_template"), *e;

    if (cJSON_IsString(t)) {
        return t->valuestring;
    }
    cJSON_ArrayForEach(e, t)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *tpl  = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0 &&
            cJSON_IsString(tpl)) {
            return tpl->valuestring;
        }
    }
    return NULL;
}

/* ---- SentencePiece-style BPE ------------------------------------------------------ */

/* Whether the text gets SentencePiece's "▁" prefix and spaces as "▁", the
 * only shape llama.cpp's llama vocabulary encodes: the legacy normalizer
 * (Prepend "▁", Replace " " -> "▁") or a Metaspace pre-tokenizer that
 * prepends. */
static int spm_shape_ok(const cJSON *tj)
{
    static const char sp[]    = "\xe2\x96\x81";
    const cJSON      *norm    = cJSON_GetObjectItemCaseSensitive(tj, "normalizer");
    const cJSON      *pre     = cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"), *e;
    int               prepend = 0, replace = 0;

    if (is_type(pre, "Metaspace") && (cJSON_IsNull(norm) || norm == NULL)) {
        const cJSON *r  = cJSON_GetObjectItemCaseSensitive(pre, "replacement");
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(pre, "prepend_scheme");
        return cJSON_IsString(r) && strcmp(r->valuestring, sp) == 0 &&
               (!cJSON_IsString(ps) || strcmp(ps->valuestring, "never") != 0) &&
               !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space"));
    }
    if (!is_type(norm, "Sequence") || !(pre == NULL || cJSON_IsNull(pre))) {
        return 0;
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(norm, "normalizers"))
    {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "prepend");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(e, "pattern"), "String");
        if (is_type(e, "Prepend") && cJSON_IsString(v) && strcmp(v->valuestring, sp) == 0) {
            prepend = 1;
        } else if (is_type(e, "Replace") && cJSON_IsString(f) && strcmp(f->valuestring, " ") == 0 &&
                   cJSON_IsString(c) && strcmp(c->valuestring, sp) == 0) {
            replace = 1;
        } else {
            return 0;
        }
    }
    return prepend && replace;
}

/* <0xXX>: a byte fallback piece (llama.cpp's converter: the same regex) */
static int is_byte_piece(const char *s)
{
    return strlen(s) == 6 && memcmp(s, "<0x", 3) == 0 && isxdigit((unsigned char)s[3]) &&
           isxdigit((unsigned char)s[4]) && s[5] == '>';
}

static const char *const *sort_tokens; /* qsort has no context argument */

static int cmp_token_ids(const void *a, const void *b)
{
    return strcmp(sort_tokens[*(const uint32_t *)a], sort_tokens[*(const uint32_t *)b]);
}

/* The id of piece s among tokens (by[] sorted by piece), or -1. */
static int64_t find_piece(const char *const *tokens, const uint32_t *by, uint32_t n, const char *s)
{
    uint32_t lo = 0, hi = n;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int      c   = strcmp(tokens[by[mid]], s);
        if (c == 0) {
            return by[mid];
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return -1;
}

/* llama.cpp's SentencePiece encoder merges the adjacent pair whose joined
 * piece scores best; tokenizers' BPE merges the pair of lowest rank. The
 * two agree when a piece scores minus the rank of the first merge that makes
 * it (SentencePiece's own scores rank pieces the same way; Llama 2's "▁▁" is
 * made last, which its id alone would not say). Pieces no merge makes
 * (characters) score below every merge, by id; the others 0. types[] gets
 * BYTE for <0xXX> and UNKNOWN for unk. */
static moon_status_t spm_scores(char **merges, uint32_t n_merges, const char **tokens,
                                int32_t *types, uint32_t n, int64_t unk, float *scores)
{
    uint32_t *by  = moon_malloc((size_t)n * sizeof(*by));
    uint8_t  *set = moon_calloc(n, 1);
    char     *buf = NULL;
    size_t    cap = 0;

    if (by == NULL || set == NULL) {
        moon_free(by);
        moon_free(set);
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        by[i] = i;
        if (types[i] == T_NORMAL && is_byte_piece(tokens[i])) {
            types[i] = T_BYTE;
        }
    }
    if (unk >= 0 && unk < n) {
        types[unk] = T_UNKNOWN;
    }
    sort_tokens = tokens;
    qsort(by, n, sizeof(*by), cmp_token_ids);
    sort_tokens = NULL;
    for (uint32_t r = 0; r < n_merges; r++) {
        size_t  len = strlen(merges[r]);
        char   *sp  = strchr(merges[r], ' ');
        int64_t id;
        if (len + 1 > cap) {
            char *nb = moon_realloc(buf, len + 1);
            if (nb == NULL) {
                moon_free(buf);
                moon_free(by);
                moon_free(set);
                return MOON_ERR_NO_MEMORY;
            }
            buf = nb;
            cap = len + 1;
        }
        if (sp == NULL) {
            continue;
        }
        memcpy(buf, merges[r], (size_t)(sp - merges[r]));
        memcpy(buf + (sp - merges[r]), sp + 1, len - (size_t)(sp - merges[r]));
        id = find_piece(tokens, by, n, buf);
        if (id >= 0 && !set[id]) {
            scores[id] = -(float)r;
            set[id]    = 1;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!set[i]) {
            scores[i] = types[i] == T_NORMAL ? -(float)n_merges - (float)i : 0.0f;
        }
    }
    moon_free(buf);
    moon_free(by);
    moon_free(set);
    return MOON_OK;
}

moon_status_t moon_hf_vocab_write(const cJSON *tj, const cJSON *tc, uint32_t min_tokens,
                                  moon_gguf_writer_t *w, uint32_t *n_tokens_p)
{
    const cJSON  *model    = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON  *vocab    = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON  *added    = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
    const cJSON  *merges_j = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON  *mtype    = cJSON_GetObjectItemCaseSensitive(model, "type");
    const int     spm      = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    const char  **tokens   = NULL;
    int32_t      *types    = NULL;
    float        *scores   = NULL;
    char         *pads = NULL, **merges = NULL;
    uint32_t      n = 0, n_merges = 0;
    const char   *pre, *tpl;
    int64_t       bos, eos, pad, unk = -1;
    const cJSON  *add_bos;
    moon_status_t status;

    if (!is_type(model, "BPE")) {
        MOON_ERROR("hf: tokenizer.json: model type %s is not supported (supported: BPE, "
                   "byte-level or SentencePiece-style with byte_fallback)",
                   cJSON_IsString(mtype) ? mtype->valuestring : "(none)");
        return MOON_ERR_UNSUPPORTED;
    }
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges_j) || cJSON_GetArraySize(merges_j) == 0) {
        MOON_ERROR("hf: tokenizer.json: the BPE model has no vocab or no merges (%s)",
                   spm ? "a SentencePiece-style BPE's scores come from its merges"
                       : "byte-level BPE merges by them");
        return MOON_ERR_UNSUPPORTED;
    }
    if (spm && !spm_shape_ok(tj)) {
        MOON_ERROR("hf: tokenizer.json: a SentencePiece-style BPE whose normalizer is not "
                   "Prepend \"\xe2\x96\x81\" + Replace \" \" (nor a Metaspace pre-tokenizer that "
                   "prepends) is not supported");
        return MOON_ERR_UNSUPPORTED;
    }
    pre = spm ? "default" : detect_pre(tj);
    if (pre == NULL) {
        MOON_ERROR("hf: tokenizer.json: unknown pre-tokenizer (supported: llama-bpe, qwen2, "
                   "smollm, gpt2)");
        return MOON_ERR_UNSUPPORTED;
    }
    status = build_tokens(vocab, added, min_tokens, &tokens, &types, &pads, &n);
    if (status == MOON_OK) {
        status = build_merges(merges_j, &merges, &n_merges);
    }
    bos     = id_of(vocab, added, cJSON_GetObjectItemCaseSensitive(tc, "bos_token"));
    eos     = id_of(vocab, added, cJSON_GetObjectItemCaseSensitive(tc, "eos_token"));
    pad     = id_of(vocab, added, cJSON_GetObjectItemCaseSensitive(tc, "pad_token"));
    bos     = bos >= 0 ? bos : eos;
    add_bos = cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token");
    tpl     = chat_template(tc);
    if (spm) {
        unk = id_of(vocab, added, cJSON_GetObjectItemCaseSensitive(tc, "unk_token"));
        unk = unk >= 0 ? unk
                       : id_of(vocab, added, cJSON_GetObjectItemCaseSensitive(model, "unk_token"));
    }
    if (status == MOON_OK && spm) {
        scores = moon_malloc((size_t)n * sizeof(*scores));
        status = scores == NULL ? MOON_ERR_NO_MEMORY
                                : spm_scores(merges, n_merges, tokens, types, n, unk, scores);
    }

#define PUT(_call)                                                                                 \
    do {                                                                                           \
        if (status == MOON_OK) {                                                                   \
            status = (_call);                                                                      \
        }                                                                                          \
    } while (0)
    PUT(moon_gguf_writer_kv_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2"));
    PUT(moon_gguf_writer_kv_str(w, "tokenizer.ggml.pre", pre));
    PUT(moon_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", tokens, n));
    if (spm) {
        PUT(moon_gguf_writer_kv_arr(w, "tokenizer.ggml.scores", MOON_GGUF_FLOAT32, scores, n));
    }
    PUT(moon_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", MOON_GGUF_INT32, types, n));
    if (!spm) { /* llama.cpp's llama vocabulary merges by score, and has none */
        PUT(moon_gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges,
                                        n_merges));
    }
    if (bos >= 0 && bos < n) {
        PUT(moon_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos));
    }
    if (eos >= 0 && eos < n) {
        PUT(moon_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos));
    }
    if (unk >= 0 && unk < n) {
        PUT(moon_gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk));
    }
    if (pad >= 0 && pad < n) {
        PUT(moon_gguf_writer_kv_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad));
    }
    PUT(moon_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token",
                                 cJSON_IsBool(add_bos) ? cJSON_IsTrue(add_bos)
                                                       : spm || post_processor_templates(tj) ||
                                                             strcmp(pre, "llama-bpe") == 0));
    PUT(moon_gguf_writer_kv_bool(
        w, "tokenizer.ggml.add_eos_token",
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tc, "add_eos_token"))));
    if (tpl != NULL) {
        PUT(moon_gguf_writer_kv_str(w, "tokenizer.chat_template", tpl));
    }
#undef PUT
    for (uint32_t i = 0; merges != NULL && i < n_merges; i++) {
        moon_free(merges[i]);
    }
    moon_free(merges);
    moon_free(tokens);
    moon_free(types);
    moon_free(scores);
    moon_free(pads);
    if (status == MOON_OK) {
        *n_tokens_p = n;
    }
    return status;
}
