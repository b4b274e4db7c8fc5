/* model/convert/model_write.c - writing Llama models as GGUF: the random
 * model writer (gen-model) and the llama2.c converter. Load-time only; the
 * loader is model/model.c. */
#include "moonlet/model.h"

#include "model_internal.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- writing models -------------------------------------------------------- */

/* Llama hyper-parameter and tokenizer keys shared by gen-model and convert. */
static moon_status_t write_llama_keys(moon_gguf_writer_t *w, const moon_model_config_t *c,
                                      const char *name, const char *license, uint32_t file_type)
{
    moon_status_t status = MOON_OK;

#define PUT(_call)                                                                                 \
    do {                                                                                           \
        if (status == MOON_OK) {                                                                   \
            status = (_call);                                                                      \
        }                                                                                          \
    } while (0)
    const char *arch = moon_model_arch_name(c->arch);
    char        key[96];
#define PUT_ARCH(_fn, _suffix, _v)                                                                 \
    do {                                                                                           \
        snprintf(key, sizeof(key), "%s.%s", arch, (_suffix));                                      \
        PUT(_fn(w, key, (_v)));                                                                    \
    } while (0)
    PUT(moon_gguf_writer_kv_str(w, "general.architecture", arch));
    PUT(moon_gguf_writer_kv_str(w, "general.name", name ? name : "moonlet-random"));
    if (license != NULL) {
        PUT(moon_gguf_writer_kv_str(w, "general.license", license));
    }
    PUT(moon_gguf_writer_kv_u32(w, "general.file_type", file_type));
    PUT(moon_gguf_writer_kv_u32(w, "general.alignment", MOON_GGUF_DEFAULT_ALIGNMENT));
    PUT_ARCH(moon_gguf_writer_kv_u32, "vocab_size", c->vocab_size);
    PUT_ARCH(moon_gguf_writer_kv_u32, "context_length", c->seq_len);
    PUT_ARCH(moon_gguf_writer_kv_u32, "embedding_length", c->dim);
    PUT_ARCH(moon_gguf_writer_kv_u32, "block_count", c->n_layers);
    PUT_ARCH(moon_gguf_writer_kv_u32, "feed_forward_length", c->hidden_dim);
    PUT_ARCH(moon_gguf_writer_kv_u32, "rope.dimension_count", c->head_dim);
    PUT_ARCH(moon_gguf_writer_kv_f32, "rope.freq_base", c->rope_theta);
    PUT_ARCH(moon_gguf_writer_kv_u32, "attention.head_count", c->n_heads);
    PUT_ARCH(moon_gguf_writer_kv_u32, "attention.head_count_kv", c->n_kv_heads);
    PUT_ARCH(moon_gguf_writer_kv_f32, "attention.layer_norm_rms_epsilon", c->norm_eps);
    if (c->head_dim * c->n_heads != c->dim) { /* as llama.cpp writes such models */
        PUT_ARCH(moon_gguf_writer_kv_u32, "attention.key_length", c->head_dim);
        PUT_ARCH(moon_gguf_writer_kv_u32, "attention.value_length", c->head_dim);
    }
    if (c->rope_freq_scale > 0.0f && c->rope_freq_scale != 1.0f) {
        PUT_ARCH(moon_gguf_writer_kv_str, "rope.scaling.type",
                 c->rope_yarn_orig_ctx != 0 ? "yarn" : "linear");
        PUT_ARCH(moon_gguf_writer_kv_f32, "rope.scaling.factor", 1.0f / c->rope_freq_scale);
    }
    if (c->rope_yarn_orig_ctx != 0) {
        /* the betas only when not llama.cpp's defaults (0: the default) */
        float fast = c->rope_yarn_beta_fast > 0.0f ? c->rope_yarn_beta_fast : 32.0f;
        float slow = c->rope_yarn_beta_slow > 0.0f ? c->rope_yarn_beta_slow : 1.0f;
        PUT_ARCH(moon_gguf_writer_kv_u32, "rope.scaling.original_context_length",
                 c->rope_yarn_orig_ctx);
        if (fast != 32.0f || slow != 1.0f) {
            PUT_ARCH(moon_gguf_writer_kv_f32, "rope.scaling.yarn_beta_fast", fast);
            PUT_ARCH(moon_gguf_writer_kv_f32, "rope.scaling.yarn_beta_slow", slow);
        }
    }
#undef PUT_ARCH
#undef PUT
    return status;
}

static moon_status_t write_tokenizer_keys(moon_gguf_writer_t *w, char **tokens, const float *scores,
                                          const int32_t *types, uint32_t n)
{
    moon_status_t status = moon_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama");

    if (status == MOON_OK) {
        status =
            moon_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, n);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_arr(w, "tokenizer.ggml.scores", MOON_GGUF_FLOAT32, scores, n);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", MOON_GGUF_INT32, types, n);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_bool(w, "tokenizer.ggml.add_eos_token", false);
    }
    return status;
}

/* Tensor i of the canonical llama order: name, GGUF dims, element count
 * (c->head_dim set). */
typedef struct {
    char     name[64];
    uint32_t n_dims;
    uint64_t ne[2];
    int      is_norm; /* 1: a norm (1 + 0.1 u), 2: a bias (0.1 u), 3: rope_freqs */
} tensor_desc_t;

static uint32_t llama_tensors(const moon_model_config_t *c, int with_output, int rope_freqs,
                              tensor_desc_t *d)
{
    uint32_t kv_dim = c->n_kv_heads * c->head_dim;
    uint32_t q_dim  = moon_model_q_dim(c);
    uint32_t n      = 0;

#define ADD(_nd, _ne0, _ne1, _norm, ...)                                                           \
    do {                                                                                           \
        snprintf(d[n].name, sizeof(d[n].name), __VA_ARGS__);                                       \
        d[n].n_dims  = (_nd);                                                                      \
        d[n].ne[0]   = (_ne0);                                                                     \
        d[n].ne[1]   = (_ne1);                                                                     \
        d[n].is_norm = (_norm);                                                                    \
        n++;                                                                                       \
    } while (0)
    ADD(2, c->dim, c->vocab_size, 0, "token_embd.weight");
    for (uint32_t l = 0; l < c->n_layers; l++) {
        ADD(1, c->dim, 1, 1, "blk.%u.attn_norm.weight", l);
        ADD(2, c->dim, q_dim, 0, "blk.%u.attn_q.weight", l);
        ADD(2, c->dim, kv_dim, 0, "blk.%u.attn_k.weight", l);
        ADD(2, c->dim, kv_dim, 0, "blk.%u.attn_v.weight", l);
        if (c->arch == MOON_ARCH_QWEN2) {
            ADD(1, q_dim, 1, 2, "blk.%u.attn_q.bias", l);
            ADD(1, kv_dim, 1, 2, "blk.%u.attn_k.bias", l);
            ADD(1, kv_dim, 1, 2, "blk.%u.attn_v.bias", l);
        }
        if (c->arch == MOON_ARCH_QWEN3) {
            ADD(1, c->head_dim, 1, 1, "blk.%u.attn_q_norm.weight", l);
            ADD(1, c->head_dim, 1, 1, "blk.%u.attn_k_norm.weight", l);
        }
        ADD(2, q_dim, c->dim, 0, "blk.%u.attn_output.weight", l);
        ADD(1, c->dim, 1, 1, "blk.%u.ffn_norm.weight", l);
        ADD(2, c->dim, c->hidden_dim, 0, "blk.%u.ffn_gate.weight", l);
        ADD(2, c->hidden_dim, c->dim, 0, "blk.%u.ffn_down.weight", l);
        ADD(2, c->dim, c->hidden_dim, 0, "blk.%u.ffn_up.weight", l);
    }
    ADD(1, c->dim, 1, 1, "output_norm.weight");
    if (rope_freqs) {
        ADD(1, c->head_dim / 2, 1, 3, "rope_freqs.weight");
    }
    if (with_output) {
        ADD(2, c->dim, c->vocab_size, 0, "output.weight");
    }
#undef ADD
    return n;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s) /* [-1, 1) */
{
    return (float)((double)(rng_next(s) >> 11) * (1.0 / 4503599627370496.0) - 1.0);
}

static void free_strs(char **strs, uint32_t n)
{
    for (uint32_t i = 0; strs != NULL && i < n; i++) {
        moon_free(strs[i]);
    }
    moon_free(strs);
}

/* Byte-level vocabulary: <unk>, <s>, </s>, 256 byte tokens, then pieces. */
static moon_status_t make_vocab(uint32_t n, char ***tokens_p, float **scores_p, int32_t **types_p)
{
    char   **tokens = moon_calloc(n, sizeof(*tokens));
    float   *scores = moon_calloc(n, sizeof(*scores));
    int32_t *types  = moon_calloc(n, sizeof(*types));

    if (tokens == NULL || scores == NULL || types == NULL) {
        goto err;
    }
    for (uint32_t i = 0; i < n; i++) {
        char buf[32];
        if (i == 0) {
            snprintf(buf, sizeof(buf), "<unk>");
            types[i] = 2;
        } else if (i <= 2) {
            snprintf(buf, sizeof(buf), i == 1 ? "<s>" : "</s>");
            types[i] = 3;
        } else if (i < 259) {
            snprintf(buf, sizeof(buf), "<0x%02X>", i - 3);
            types[i] = 6;
        } else if (i == 259) {
            snprintf(buf, sizeof(buf), "\xe2\x96\x81"); /* the word-start piece alone */
            types[i] = 1;
        } else if (i < 286) {
            snprintf(buf, sizeof(buf), "%c", (char)('a' + (i - 260)));
            types[i]  = 1;
            scores[i] = -(float)(i - 259);
        } else {
            /* distinct pieces: U+2581 then the index in base 26 */
            uint32_t v = i - 286, k = 3;
            memcpy(buf, "\xe2\x96\x81", 3);
            do {
                buf[k++] = (char)('a' + v % 26);
                v /= 26;
            } while (v != 0);
            buf[k]    = '\0';
            types[i]  = 1;
            scores[i] = -(float)(i - 259);
        }
        tokens[i] = moon_strdup(buf);
        if (tokens[i] == NULL) {
            goto err;
        }
    }
    *tokens_p = tokens;
    *scores_p = scores;
    *types_p  = types;
    return MOON_OK;
err:
    free_strs(tokens, n);
    moon_free(scores);
    moon_free(types);
    return MOON_ERR_NO_MEMORY;
}

moon_status_t moon_model_write_random(const moon_model_config_t *c, moon_ggml_type_t type,
                                      uint64_t seed, const char *path)
{
    moon_model_write_opts_t o = {.type = type, .seed = seed};
    return moon_model_write_random_ex(c, &o, path);
}

/* Llama 3.1's frequency factors (factor 8, low 1, high 4, original context
 * 8192; as llama.cpp's converter computes them) for head size hs. */
static void llama31_rope_factors(float theta, uint32_t hs, float *out)
{
    const double factor = 8.0, low = 1.0, high = 4.0, old_ctx = 8192.0;

    for (uint32_t j = 0; j < hs / 2; j++) {
        double freq    = 1.0 / pow(theta, (double)(2 * j) / (double)hs);
        double wavelen = 2.0 * 3.14159265358979323846 / freq;
        if (wavelen < old_ctx / high) {
            out[j] = 1.0f;
        } else if (wavelen > old_ctx / low) {
            out[j] = (float)factor;
        } else {
            double smooth = (old_ctx / wavelen - low) / (high - low);
            out[j]        = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

/* Copies the keys of g that start with prefix ("": all) into w, but skip
 * (may be NULL); *n_tok_p (may be NULL): tokenizer.ggml.tokens' count. */
static moon_status_t copy_kvs(moon_gguf_writer_t *w, const moon_gguf_t *g, const char *prefix,
                              const char *skip, uint64_t *n_tok_p)
{
    moon_status_t status = MOON_OK;
    uint64_t      n_tok  = 0;

    for (uint64_t i = 0; status == MOON_OK && i < moon_gguf_n_kv(g); i++) {
        const char      *key = moon_gguf_key_name(g, i);
        moon_gguf_type_t t   = moon_gguf_key_type(g, i), et;
        const char      *str;
        uint64_t         len, n;
        const void      *data;
        if (strncmp(key, prefix, strlen(prefix)) != 0 || (skip != NULL && strcmp(key, skip) == 0)) {
            continue;
        }
        if (t == MOON_GGUF_STRING) {
            char *v;
            moon_gguf_get_str(g, key, &str, &len);
            v = moon_malloc(len + 1);
            if (v == NULL) {
                status = MOON_ERR_NO_MEMORY;
                break;
            }
            memcpy(v, str, len);
            v[len] = '\0';
            status = moon_gguf_writer_kv_str(w, key, v);
            moon_free(v);
        } else if (t == MOON_GGUF_ARRAY) {
            moon_gguf_get_arr(g, key, &et, &n, &data);
            if (et == MOON_GGUF_STRING) {
                char **strs = moon_calloc(n + 1, sizeof(*strs));
                status      = strs == NULL ? MOON_ERR_NO_MEMORY : MOON_OK;
                for (uint64_t k = 0; status == MOON_OK && k < n; k++) {
                    moon_gguf_get_arr_str(g, key, k, &str, &len);
                    strs[k] = moon_malloc(len + 1);
                    if (strs[k] == NULL) {
                        status = MOON_ERR_NO_MEMORY;
                        break;
                    }
                    memcpy(strs[k], str, len);
                    strs[k][len] = '\0';
                }
                if (status == MOON_OK) {
                    status = moon_gguf_writer_kv_arr_str(w, key, (const char *const *)strs, n);
                }
                if (strcmp(key, "tokenizer.ggml.tokens") == 0) {
                    n_tok = n;
                }
                free_strs(strs, (uint32_t)n);
            } else if (data != NULL) {
                status = moon_gguf_writer_kv_arr(w, key, et, data, n);
            }
        } else {
            uint8_t  raw[8] = {0};
            size_t   bytes  = t == MOON_GGUF_UINT8 || t == MOON_GGUF_INT8 || t == MOON_GGUF_BOOL ? 1
                              : t == MOON_GGUF_UINT16 || t == MOON_GGUF_INT16                    ? 2
                              : t == MOON_GGUF_UINT64 || t == MOON_GGUF_INT64 || t == MOON_GGUF_FLOAT64
                                  ? 8
                                  : 4;
            uint64_t u;
            int64_t  si;
            double   f;
            if (t == MOON_GGUF_FLOAT32 || t == MOON_GGUF_FLOAT64) {
                moon_gguf_get_f64(g, key, &f);
                if (t == MOON_GGUF_FLOAT32) {
                    float f32 = (float)f;
                    memcpy(raw, &f32, 4);
                } else {
                    memcpy(raw, &f, 8);
                }
            } else if (t == MOON_GGUF_BOOL) {
                bool b = false;
                moon_gguf_get_bool(g, key, &b);
                raw[0] = b;
            } else if (moon_gguf_get_u64(g, key, &u) == MOON_OK) {
                memcpy(raw, &u, bytes); /* little-endian */
            } else if (moon_gguf_get_i64(g, key, &si) == MOON_OK) {
                memcpy(raw, &si, bytes);
            }
            status = moon_gguf_writer_kv_raw(w, key, t, raw);
        }
    }
    if (n_tok_p != NULL) {
        *n_tok_p = n_tok;
    }
    return status;
}

/* Copies every tokenizer.* key of the GGUF at path into w; *n_vocab_p: its
 * token count. */
static moon_status_t copy_vocab(moon_gguf_writer_t *w, const char *path, const char *skip,
                                uint32_t *n_vocab_p)
{
    moon_gguf_t  *g      = NULL;
    moon_status_t status = moon_gguf_open(path, &g);
    uint64_t      n_tok  = 0;

    if (status != MOON_OK) {
        return status;
    }
    status = copy_kvs(w, g, "tokenizer.", skip, &n_tok);
    moon_gguf_close(g);
    if (status == MOON_OK && (n_tok == 0 || n_tok > MOON_MODEL_MAX_VOCAB)) {
        MOON_ERROR("model: %s has no tokenizer.ggml.tokens", path);
        status = MOON_ERR_CORRUPT;
    }
    if (status == MOON_OK) {
        *n_vocab_p = (uint32_t)n_tok;
    }
    return status;
}

moon_status_t moon_model_write_random_ex(const moon_model_config_t     *c_in,
                                         const moon_model_write_opts_t *o, const char *path)
{
    moon_model_config_t  cc           = c_in != NULL ? *c_in : (moon_model_config_t){0};
    moon_model_config_t *c            = &cc;
    moon_ggml_type_t     type         = o != NULL ? o->type : MOON_GGML_F32;
    uint64_t             seed         = o != NULL ? o->seed : 0;
    uint32_t             n_vocab_file = 0;
    moon_gguf_writer_t  *w            = NULL;
    tensor_desc_t       *desc         = NULL;
    void               **bufs         = NULL;
    char               **tokens       = NULL;
    float               *scores = NULL, *tmp = NULL;
    int32_t             *types = NULL;
    uint32_t             n_t   = 0;
    uint64_t             rng   = seed;
    moon_status_t        status;

    if (c->head_dim == 0 && c->n_heads != 0 && c->dim % c->n_heads == 0) {
        c->head_dim = c->dim / c->n_heads; /* 0: the usual dim / n_heads */
    }
    if (c_in == NULL || o == NULL || path == NULL || c->arch > MOON_ARCH_QWEN3 || c->dim == 0 ||
        c->n_heads == 0 || c->head_dim == 0 || c->head_dim % 2 != 0 ||
        (uint64_t)c->n_heads * c->head_dim > MOON_MODEL_MAX_DIM || c->n_kv_heads == 0 ||
        c->n_heads % c->n_kv_heads != 0 || c->n_layers == 0 || c->hidden_dim == 0 ||
        c->vocab_size < 3 || c->seq_len == 0 ||
        moon_ggml_type_bytes(type, moon_ggml_block_size(type)) == 0 ||
        c->dim % moon_ggml_block_size(type) != 0 ||
        moon_model_q_dim(c) % moon_ggml_block_size(type) != 0 ||
        c->hidden_dim % moon_ggml_block_size(type) != 0) {
        MOON_ERROR("gen-model: shape unusable: dim %u, hidden %u, heads %u/%u of %u, %u layers, "
                   "vocab %u (heads must split dim unless head_dim is set, head_dim even, "
                   "kv heads divide heads, widths whole %s blocks)",
                   c->dim, c->hidden_dim, c->n_heads, c->n_kv_heads, c->head_dim, c->n_layers,
                   c->vocab_size, moon_ggml_type_name(type));
        return MOON_ERR_INVALID_PARAM;
    }
    desc = moon_calloc(12 * (size_t)c->n_layers + 5, sizeof(*desc));
    if (desc == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = moon_gguf_writer_create(&w);
    if (status != MOON_OK) {
        goto out;
    }
    if (o->vocab_path != NULL) { /* the vocabulary sets the size */
        status =
            copy_vocab(w, o->vocab_path,
                       o->chat_template != NULL ? "tokenizer.chat_template" : NULL, &n_vocab_file);
        if (status != MOON_OK) {
            goto out;
        }
        c->vocab_size = n_vocab_file;
    }
    n_t  = llama_tensors(c, o->untied, o->rope_freqs, desc);
    bufs = moon_calloc(n_t, sizeof(*bufs));
    if (bufs == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    status = write_llama_keys(w, c, "moonlet-random", "MIT", type == MOON_GGML_F32 ? 0 : 1);
    if (status == MOON_OK && o->vocab_path == NULL && c->vocab_size >= 259) {
        status = make_vocab(c->vocab_size, &tokens, &scores, &types);
        if (status == MOON_OK) {
            status = write_tokenizer_keys(w, tokens, scores, types, c->vocab_size);
        }
    }
    if (status == MOON_OK && o->chat_template != NULL) {
        status = moon_gguf_writer_kv_str(w, "tokenizer.chat_template", o->chat_template);
    }
    for (uint32_t i = 0; status == MOON_OK && i < n_t; i++) {
        uint64_t         n     = desc[i].ne[0] * desc[i].ne[1];
        moon_ggml_type_t ttype = desc[i].is_norm ? MOON_GGML_F32 : type;
        float            scale = desc[i].is_norm ? 0.1f : 1.0f / sqrtf((float)desc[i].ne[0]);
        float            base  = desc[i].is_norm == 1 ? 1.0f : 0.0f;
        if (i == 0) {
            scale = 1.0f; /* embeddings: unit scale so activations are not tiny */
        }
        tmp     = moon_malloc(n * sizeof(float));
        bufs[i] = moon_malloc(moon_ggml_type_bytes(ttype, n));
        if (tmp == NULL || bufs[i] == NULL) {
            status = MOON_ERR_NO_MEMORY;
            break;
        }
        for (uint64_t j = 0; j < n; j++) {
            tmp[j] = base + scale * rng_uniform(&rng);
        }
        if (desc[i].is_norm == 3) {
            llama31_rope_factors(c->rope_theta, c->head_dim, tmp);
        }
        moon_ggml_quantize(ttype, tmp, bufs[i], n);
        moon_free(tmp);
        tmp = NULL;
        status =
            moon_gguf_writer_tensor(w, desc[i].name, ttype, desc[i].n_dims, desc[i].ne, bufs[i]);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_write(w, path);
    }
out:
    moon_free(tmp);
    for (uint32_t i = 0; bufs != NULL && i < n_t; i++) {
        moon_free(bufs[i]);
    }
    moon_free(bufs);
    moon_free(desc);
    free_strs(tokens, c->vocab_size);
    moon_free(scores);
    moon_free(types);
    moon_gguf_writer_destroy(w);
    return status;
}

/* ---- llama2.c converter ------------------------------------------------------ */

static moon_status_t read_file(const char *path, uint8_t **data_p, size_t *len_p);

moon_status_t moon_model_perturb_image(void *data, size_t len, const char *pattern, float scale,
                                       uint64_t seed, uint32_t *n_changed_p)
{
    moon_gguf_t  *g         = NULL;
    uint32_t      n_changed = 0;
    uint64_t      rng       = seed * 0x9e3779b97f4a7c15ull + 1;
    moon_status_t status;

    if (data == NULL || pattern == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_gguf_open_memory(data, len, &g);
    for (uint64_t i = 0; status == MOON_OK && i < moon_gguf_n_tensors(g); i++) {
        const moon_gguf_tensor_t *t = moon_gguf_tensor(g, i);
        float *x = (float *)((uint8_t *)data + ((const uint8_t *)t->data - (uint8_t *)data));
        if (t->type != MOON_GGML_F32 || strstr(t->name, pattern) == NULL) {
            continue;
        }
        for (uint64_t e = 0; e < t->n_elems; e++) {
            float v;
            memcpy(&v, &x[e], 4);
            v *= 1.0f + scale * rng_uniform(&rng);
            memcpy(&x[e], &v, 4);
        }
        n_changed++;
    }
    moon_gguf_close(g);
    if (status == MOON_OK && n_changed == 0) {
        MOON_ERROR("model: no f32 tensor matches '%s'", pattern);
        status = MOON_ERR_NOT_FOUND;
    }
    if (status == MOON_OK && n_changed_p != NULL) {
        *n_changed_p = n_changed;
    }
    return status;
}

moon_status_t moon_model_write_perturbed(const char *src, const char *dst, const char *pattern,
                                         float scale, uint64_t seed, uint32_t *n_changed_p)
{
    uint8_t      *data = NULL;
    size_t        len  = 0;
    moon_status_t status;
    FILE         *f;

    if (src == NULL || dst == NULL || pattern == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = read_file(src, &data, &len);
    if (status == MOON_OK) {
        status = moon_model_perturb_image(data, len, pattern, scale, seed, n_changed_p);
    }
    if (status == MOON_OK) {
        f = fopen(dst, "wb");
        if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
            MOON_ERROR("model: writing %s failed: %s", dst, strerror(errno));
            status = MOON_ERR_IO;
        }
    }
    moon_free(data);
    return status;
}

static moon_status_t read_file(const char *path, uint8_t **data_p, size_t *len_p)
{
    /* O_NONBLOCK: a FIFO must not block in open(); only regular files */
    int         fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    FILE       *f;
    long        len;
    uint8_t    *data;

    if (fd < 0) {
        MOON_ERROR("convert: open %s: %s", path, strerror(errno));
        return errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (f = fdopen(fd, "rb")) == NULL) {
        MOON_ERROR("convert: %s is not a regular file", path);
        close(fd);
        return MOON_ERR_IO;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return MOON_ERR_IO;
    }
    data = moon_malloc((size_t)len + 1);
    if (data == NULL) {
        fclose(f);
        return MOON_ERR_NO_MEMORY;
    }
    if (fread(data, 1, (size_t)len, f) != (size_t)len) {
        MOON_ERROR("convert: read %s failed", path);
        moon_free(data);
        fclose(f);
        return MOON_ERR_IO;
    }
    fclose(f);
    *data_p = data;
    *len_p  = (size_t)len;
    return MOON_OK;
}

/* tokenizer.bin -> GGUF vocabulary (spaces back to U+2581, BOS/EOS renamed). */
static moon_status_t parse_llama2c_tokenizer(const uint8_t *d, size_t len, uint32_t n,
                                             char ***tokens_p, float **scores_p, int32_t **types_p)
{
    char   **tokens = moon_calloc(n, sizeof(*tokens));
    float   *scores = moon_calloc(n, sizeof(*scores));
    int32_t *types  = moon_calloc(n, sizeof(*types));
    size_t   o      = 4; /* max_token_length */

    if (tokens == NULL || scores == NULL || types == NULL) {
        goto nomem;
    }
    for (uint32_t i = 0; i < n; i++) {
        int32_t  tl;
        char    *s;
        size_t   k = 0;
        unsigned bv;
        if (len < o + 8) {
            goto corrupt;
        }
        memcpy(&scores[i], d + o, 4);
        memcpy(&tl, d + o + 4, 4);
        o += 8;
        if (tl < 0 || (size_t)tl > len - o) {
            goto corrupt;
        }
        s = moon_malloc((size_t)tl * 3 + 8);
        if (s == NULL) {
            goto nomem;
        }
        for (int32_t j = 0; j < tl; j++) {
            if (d[o + j] == ' ') {
                memcpy(s + k, "\xe2\x96\x81", 3);
                k += 3;
            } else {
                s[k++] = (char)d[o + j];
            }
        }
        s[k]     = '\0';
        types[i] = 1;
        if (i == 0) {
            types[i] = 2;
        } else if (i == 1 || i == 2) {
            snprintf(s, 8, i == 1 ? "<s>" : "</s>");
            types[i] = 3;
        } else if (k == 6 && sscanf(s, "<0x%2X>", &bv) == 1 && s[5] == '>') {
            types[i] = 6;
        }
        tokens[i] = s;
        o += (size_t)tl;
    }
    *tokens_p = tokens;
    *scores_p = scores;
    *types_p  = types;
    return MOON_OK;
corrupt:
    MOON_ERROR("convert: tokenizer file truncated or malformed");
    free_strs(tokens, n);
    moon_free(scores);
    moon_free(types);
    return MOON_ERR_CORRUPT;
nomem:
    free_strs(tokens, n);
    moon_free(scores);
    moon_free(types);
    return MOON_ERR_NO_MEMORY;
}

moon_status_t moon_model_convert_llama2c(const char *ckpt_path, const char *tok_path,
                                         const char *out_path, const char *name,
                                         const char *license)
{
    uint8_t            *ck = NULL, *tk = NULL;
    size_t              ck_len = 0, tk_len = 0, need, off;
    int32_t             h[7];
    moon_model_config_t c = {0};
    int                 shared;
    moon_gguf_writer_t *w      = NULL;
    char              **tokens = NULL;
    float              *scores = NULL;
    int32_t            *types  = NULL;
    tensor_desc_t      *desc   = NULL;
    uint32_t            n_t, kv_dim, hd;
    const float        *p;
    moon_status_t       status;

    if (ckpt_path == NULL || tok_path == NULL || out_path == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = read_file(ckpt_path, &ck, &ck_len);
    if (status == MOON_OK) {
        status = read_file(tok_path, &tk, &tk_len);
    }
    if (status != MOON_OK) {
        goto out;
    }
    status = MOON_ERR_CORRUPT;
    if (ck_len < sizeof(h)) {
        MOON_ERROR("convert: %s too short for a llama2.c header", ckpt_path);
        goto out;
    }
    memcpy(h, ck, sizeof(h));
    shared = h[5] > 0;
    if (h[0] <= 0 || h[1] <= 0 || h[2] <= 0 || h[3] <= 0 || h[4] <= 0 || h[5] == 0 || h[6] <= 0 ||
        h[0] % h[3] != 0 || h[3] % h[4] != 0 || h[0] > (int32_t)MOON_MODEL_MAX_DIM ||
        h[2] > (int32_t)MOON_MODEL_MAX_LAYERS || h[6] > (int32_t)MOON_MODEL_MAX_CTX ||
        h[1] > 4 * (int32_t)MOON_MODEL_MAX_DIM ||
        (h[5] < 0 ? -h[5] : h[5]) > (int32_t)MOON_MODEL_MAX_VOCAB) {
        MOON_ERROR("convert: implausible llama2.c header");
        goto out;
    }
    c.dim        = (uint32_t)h[0];
    c.hidden_dim = (uint32_t)h[1];
    c.n_layers   = (uint32_t)h[2];
    c.n_heads    = (uint32_t)h[3];
    c.n_kv_heads = (uint32_t)h[4];
    c.vocab_size = (uint32_t)(h[5] < 0 ? -h[5] : h[5]);
    c.seq_len    = (uint32_t)h[6];
    c.norm_eps   = 1e-5f;
    c.rope_theta = 10000.0f;
    hd           = c.dim / c.n_heads;
    c.head_dim   = hd;
    kv_dim       = c.n_kv_heads * hd;
    /* floats in the file, in llama2.c order */
    need = (size_t)c.vocab_size * c.dim +
           (size_t)c.n_layers * (2 * c.dim + 2 * (size_t)c.dim * c.dim +
                                 2 * (size_t)kv_dim * c.dim + 3 * (size_t)c.hidden_dim * c.dim) +
           c.dim + (size_t)c.seq_len * hd + (shared ? 0 : (size_t)c.vocab_size * c.dim);
    if ((ck_len - sizeof(h)) / 4 < need) {
        MOON_ERROR("convert: %s truncated (%zu bytes, want %zu)", ckpt_path, ck_len,
                   sizeof(h) + need * 4);
        goto out;
    }
    if (tk_len < 4) {
        MOON_ERROR("convert: %s too short", tok_path);
        goto out;
    }
    status = parse_llama2c_tokenizer(tk, tk_len, c.vocab_size, &tokens, &scores, &types);
    if (status != MOON_OK) {
        goto out;
    }
    desc = moon_calloc(9 * (size_t)c.n_layers + 4, sizeof(*desc));
    if (desc == NULL || moon_gguf_writer_create(&w) != MOON_OK) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    n_t    = llama_tensors(&c, !shared, 0, desc);
    status = write_llama_keys(w, &c, name, license, 0);
    if (status == MOON_OK) {
        status = write_tokenizer_keys(w, tokens, scores, types, c.vocab_size);
    }
    /* llama2.c groups each weight kind across layers: find each tensor's start */
    {
        const float *base = (const float *)(ck + sizeof(h));
        size_t       L = c.n_layers, D = c.dim, KV = kv_dim, H = c.hidden_dim;
        size_t       o_emb = 0;
        size_t       o_att = o_emb + (size_t)c.vocab_size * D;
        size_t       o_wq  = o_att + L * D;
        size_t       o_wk  = o_wq + L * D * D;
        size_t       o_wv  = o_wk + L * KV * D;
        size_t       o_wo  = o_wv + L * KV * D;
        size_t       o_ffn = o_wo + L * D * D;
        size_t       o_w1  = o_ffn + L * D;
        size_t       o_w2  = o_w1 + L * H * D;
        size_t       o_w3  = o_w2 + L * D * H;
        size_t       o_fin = o_w3 + L * H * D;
        size_t       o_cls = o_fin + D + (size_t)c.seq_len * hd;
        for (uint32_t i = 0; status == MOON_OK && i < n_t; i++) {
            const char *nm = desc[i].name;
            uint32_t    l  = 0;
            const char *kind;
            if (strcmp(nm, "token_embd.weight") == 0) {
                off = o_emb;
            } else if (strcmp(nm, "output_norm.weight") == 0) {
                off = o_fin;
            } else if (strcmp(nm, "output.weight") == 0) {
                off = o_cls;
            } else {
                sscanf(nm, "blk.%u.", &l);
                kind = strchr(nm + 4, '.') + 1;
#define K(_s, _o, _per)                                                                            \
    if (strncmp(kind, _s ".", strlen(_s) + 1) == 0) {                                              \
        off = (_o) + (size_t)l * (_per);                                                           \
    } else
                K("attn_norm", o_att, D)
                K("attn_q", o_wq, D * D)
                K("attn_k", o_wk, KV * D)
                K("attn_v", o_wv, KV * D)
                K("attn_output", o_wo, D * D)
                K("ffn_norm", o_ffn, D)
                K("ffn_gate", o_w1, H * D)
                K("ffn_down", o_w2, D * H)
                K("ffn_up", o_w3, H * D)
                {
                    off = 0;
                    MOON_CHECK(!"unknown tensor");
                }
#undef K
            }
            p      = base + off;
            status = moon_gguf_writer_tensor(w, nm, MOON_GGML_F32, desc[i].n_dims, desc[i].ne, p);
        }
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_write(w, out_path);
    }
out:
    moon_gguf_writer_destroy(w);
    free_strs(tokens, c.vocab_size);
    moon_free(scores);
    moon_free(types);
    moon_free(desc);
    moon_free(ck);
    moon_free(tk);
    return status;
}

/* ---- quantize ------------------------------------------------------------------ */

static const struct {
    const char      *name;
    moon_ggml_type_t base;
    int              mix;       /* _M: Q6_K for output and some attn_v / ffn_down */
    uint32_t         file_type; /* llama.cpp's general.file_type */
} quant_kinds[] = {
    {"F32", MOON_GGML_F32, 0, 0},      {"F16", MOON_GGML_F16, 0, 1},
    {"BF16", MOON_GGML_BF16, 0, 32},   {"Q8_0", MOON_GGML_Q8_0, 0, 7},
    {"Q4_0", MOON_GGML_Q4_0, 0, 2},    {"Q4_K", MOON_GGML_Q4_K, 0, 14},
    {"Q5_K", MOON_GGML_Q5_K, 0, 16},   {"Q6_K", MOON_GGML_Q6_K, 0, 18},
    {"Q4_K_M", MOON_GGML_Q4_K, 1, 15}, {"Q5_K_M", MOON_GGML_Q5_K, 1, 17},
};

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and
 * every third between. */
static int more_bits(uint32_t l, uint32_t n)
{
    return l < n / 8 || l >= 7 * n / 8 || (l >= n / 8 && (l - n / 8) % 3 == 2);
}

/* The type tensor gt gets under kind k (1-D tensors stay as they are). */
static moon_ggml_type_t quant_type_for(const moon_gguf_tensor_t *gt, int k, uint32_t n_layers)
{
    moon_ggml_type_t t = quant_kinds[k].base;
    unsigned         l;

    if (gt->n_dims < 2) {
        return gt->type;
    }
    if (quant_kinds[k].mix) {
        if (strcmp(gt->name, "output.weight") == 0) {
            t = MOON_GGML_Q6_K;
        } else if ((sscanf(gt->name, "blk.%u.attn_v.weight", &l) == 1 ||
                    sscanf(gt->name, "blk.%u.ffn_down.weight", &l) == 1) &&
                   (strstr(gt->name, "attn_v.weight") || strstr(gt->name, "ffn_down.weight")) &&
                   more_bits(l, n_layers)) {
            t = MOON_GGML_Q6_K;
        }
    }
    if (gt->ne[0] % moon_ggml_block_size(t) != 0) { /* rows not whole blocks */
        t = gt->ne[0] % MOON_GGML_QK == 0 ? MOON_GGML_Q8_0 : MOON_GGML_F16;
    }
    return t;
}

moon_status_t moon_model_quantize(const char *in, const char *out, const char *type_name)
{
    moon_gguf_t        *g        = NULL;
    moon_gguf_writer_t *w        = NULL;
    void              **bufs     = NULL;
    float              *row      = NULL;
    uint64_t            n_t      = 0;
    uint32_t            n_layers = 0;
    int                 k        = -1;
    moon_status_t       status;
    char                key[96];
    const char         *arch;
    uint64_t            arch_len;

    if (in == NULL || out == NULL || type_name == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < MOON_ARRAY_SIZE(quant_kinds); i++) {
        if (strcasecmp(type_name, quant_kinds[i].name) == 0) {
            k = (int)i;
        }
    }
    if (k < 0) {
        MOON_ERROR("quantize: type '%s' unknown (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, "
                   "Q4_K_M, Q5_K_M)",
                   type_name);
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_gguf_open(in, &g);
    if (status != MOON_OK) {
        return status;
    }
    if (moon_gguf_get_str(g, "general.architecture", &arch, &arch_len) == MOON_OK &&
        arch_len < 32) {
        snprintf(key, sizeof(key), "%.*s.block_count", (int)arch_len, arch);
        moon_gguf_get_u32(g, key, &n_layers);
    }
    n_t    = moon_gguf_n_tensors(g);
    bufs   = moon_calloc(n_t + 1, sizeof(*bufs));
    status = bufs == NULL ? MOON_ERR_NO_MEMORY : moon_gguf_writer_create(&w);
    if (status == MOON_OK) {
        status = copy_kvs(w, g, "", "general.file_type", NULL);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_u32(w, "general.file_type", quant_kinds[k].file_type);
    }
    for (uint64_t i = 0; status == MOON_OK && i < n_t; i++) {
        const moon_gguf_tensor_t *gt = moon_gguf_tensor(g, i);
        moon_ggml_type_t          t  = quant_type_for(gt, k, n_layers);
        uint64_t                  rows, cols = gt->ne[0];

        if (t == gt->type) {
            status = moon_gguf_writer_tensor(w, gt->name, t, gt->n_dims, gt->ne, gt->data);
            continue;
        }
        rows    = gt->n_elems / cols;
        bufs[i] = moon_malloc(moon_ggml_type_bytes(t, gt->n_elems));
        row     = moon_realloc(row, cols * sizeof(float));
        if (bufs[i] == NULL || row == NULL) {
            status = MOON_ERR_NO_MEMORY;
            break;
        }
        for (uint64_t r = 0; r < rows; r++) {
            moon_ggml_dequantize(
                gt->type, (const uint8_t *)gt->data + r * moon_ggml_type_bytes(gt->type, cols), row,
                cols);
            moon_ggml_quantize(t, row, (uint8_t *)bufs[i] + r * moon_ggml_type_bytes(t, cols),
                               cols);
        }
        status = moon_gguf_writer_tensor(w, gt->name, t, gt->n_dims, gt->ne, bufs[i]);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_write(w, out);
    }
    for (uint64_t i = 0; bufs != NULL && i < n_t; i++) {
        moon_free(bufs[i]);
    }
    moon_free(bufs);
    moon_free(row);
    moon_gguf_writer_destroy(w);
    moon_gguf_close(g);
    return status;
}
