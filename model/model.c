/* model/model.c - Llama hyper-parameters and weights from GGUF. Load-time
 * only; writing models (gen-model, convert) is model/convert/model_write.c. */
#include "moonlet/model.h"

#include "model_internal.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const arch_names[] = {"llama", "qwen2", "qwen3"}; /* by moon_model_arch_t */
MOON_STATIC_ASSERT(MOON_ARCH_QWEN3 == 2, "arch_names follows moon_model_arch_t");

const char *moon_model_arch_name(uint32_t arch)
{
    return arch < MOON_ARRAY_SIZE(arch_names) ? arch_names[arch] : "?";
}

static moon_status_t arch_u32(const moon_gguf_t *g, const char *arch, const char *key, int required,
                              uint32_t dflt, uint32_t *v)
{
    char          name[128];
    moon_status_t status;

    snprintf(name, sizeof(name), "%s.%s", arch, key);
    status = moon_gguf_get_u32(g, name, v);
    if (status == MOON_ERR_NOT_FOUND && !required) {
        *v = dflt;
        return MOON_OK;
    }
    if (status != MOON_OK) {
        MOON_ERROR("model: key %s missing or not an unsigned integer", name);
        return MOON_ERR_CORRUPT;
    }
    return MOON_OK;
}

static float arch_f32(const moon_gguf_t *g, const char *arch, const char *key, float dflt)
{
    char  name[128];
    float v;

    snprintf(name, sizeof(name), "%s.%s", arch, key);
    return moon_gguf_get_f32(g, name, &v) == MOON_OK ? v : dflt;
}

/* head_dim from attention.key_length: models whose heads are not dim / n_heads
 * wide (Qwen 3 0.6B, Gemma, some Mistral) say so there; others need not, and
 * then dim must split evenly. V heads as wide as K heads (value_length), and
 * RoPE over the whole head (rope.dimension_count): both are what every
 * supported architecture does, and anything else is refused, not misread. */
static moon_status_t read_head_dim(const moon_gguf_t *g, const char *arch, moon_model_config_t *c)
{
    uint32_t dflt = c->dim % c->n_heads == 0 ? c->dim / c->n_heads : 0;
    uint32_t k_len, v_len, rope_dims;

    if (arch_u32(g, arch, "attention.key_length", 0, dflt, &k_len) != MOON_OK ||
        arch_u32(g, arch, "attention.value_length", 0, k_len, &v_len) != MOON_OK ||
        arch_u32(g, arch, "rope.dimension_count", 0, k_len, &rope_dims) != MOON_OK) {
        return MOON_ERR_CORRUPT;
    }
    if (k_len == 0 || k_len % 2 != 0 || (uint64_t)c->n_heads * k_len > MOON_MODEL_MAX_DIM) {
        MOON_ERROR("model: head size %u unusable (dim %u, %u heads): it must be even, at most "
                   "%u in all heads, and given as attention.key_length when the heads do not "
                   "split dim",
                   k_len, c->dim, c->n_heads, MOON_MODEL_MAX_DIM);
        return MOON_ERR_CORRUPT;
    }
    if (v_len != k_len || rope_dims != k_len) {
        MOON_ERROR("model: attention.value_length %u or rope.dimension_count %u unsupported "
                   "(both must equal the head size %u)",
                   v_len, rope_dims, k_len);
        return MOON_ERR_UNSUPPORTED;
    }
    c->head_dim = k_len;
    return MOON_OK;
}

moon_status_t moon_model_config_from_gguf(const moon_gguf_t *g, moon_model_config_t *cfg_p)
{
    moon_model_config_t       c = {0};
    char                      arch[64];
    const char               *s;
    uint64_t                  len;
    const moon_gguf_tensor_t *emb;
    char                      key[128];
    moon_status_t             status;

    if (g == NULL || cfg_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_gguf_get_str(g, "general.architecture", &s, &len) != MOON_OK || len == 0 ||
        len >= sizeof(arch)) {
        MOON_ERROR("model: general.architecture missing");
        return MOON_ERR_CORRUPT;
    }
    memcpy(arch, s, len);
    arch[len] = '\0';
    for (c.arch = 0; c.arch < MOON_ARRAY_SIZE(arch_names); c.arch++) {
        if (strcmp(arch, arch_names[c.arch]) == 0) {
            break;
        }
    }
    if (c.arch == MOON_ARRAY_SIZE(arch_names)) {
        MOON_ERROR("model: architecture '%s' unsupported (supported: " MOON_MODEL_ARCHS ")", arch);
        return MOON_ERR_UNSUPPORTED;
    }
    c.rope_neox       = c.arch == MOON_ARCH_QWEN2 || c.arch == MOON_ARCH_QWEN3;
    c.rope_freq_scale = 1.0f;
    snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
    if (moon_gguf_get_str(g, key, &s, &len) == MOON_OK &&
        !(len == 4 && memcmp(s, "none", 4) == 0)) {
        float factor = arch_f32(g, arch, "rope.scaling.factor", 0.0f);
        int   yarn   = len == 4 && memcmp(s, "yarn", 4) == 0;
        if (!((len == 6 && memcmp(s, "linear", 6) == 0) || yarn) || !(factor > 0.0f)) {
            MOON_ERROR("model: rope scaling '%.*s' (factor %g) unsupported (supported: none, "
                       "linear, yarn; Llama 3.1 frequencies come as rope_freqs.weight)",
                       (int)MOON_MIN(len, 32), s, (double)factor);
            return MOON_ERR_UNSUPPORTED;
        }
        c.rope_freq_scale = 1.0f / factor;
        if (yarn) {
            c.rope_yarn_beta_fast = arch_f32(g, arch, "rope.scaling.yarn_beta_fast", 32.0f);
            c.rope_yarn_beta_slow = arch_f32(g, arch, "rope.scaling.yarn_beta_slow", 1.0f);
            if (arch_u32(g, arch, "rope.scaling.original_context_length", 1, 0,
                         &c.rope_yarn_orig_ctx) != MOON_OK ||
                c.rope_yarn_orig_ctx == 0) {
                MOON_ERROR("model: yarn rope scaling needs %s.rope.scaling.original_context_length",
                           arch);
                return MOON_ERR_CORRUPT;
            }
        }
    }
    if (arch_u32(g, arch, "embedding_length", 1, 0, &c.dim) != MOON_OK ||
        arch_u32(g, arch, "block_count", 1, 0, &c.n_layers) != MOON_OK ||
        arch_u32(g, arch, "feed_forward_length", 1, 0, &c.hidden_dim) != MOON_OK ||
        arch_u32(g, arch, "attention.head_count", 1, 0, &c.n_heads) != MOON_OK ||
        arch_u32(g, arch, "attention.head_count_kv", 0, c.n_heads, &c.n_kv_heads) != MOON_OK ||
        arch_u32(g, arch, "context_length", 0, 2048, &c.seq_len) != MOON_OK) {
        return MOON_ERR_CORRUPT;
    }
    c.norm_eps   = arch_f32(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f);
    c.rope_theta = arch_f32(g, arch, "rope.freq_base", 10000.0f);
    emb          = moon_gguf_find_tensor(g, "token_embd.weight");
    if (arch_u32(g, arch, "vocab_size", 0, emb ? (uint32_t)emb->ne[1] : 0, &c.vocab_size) !=
        MOON_OK) {
        return MOON_ERR_CORRUPT;
    }
    if (c.dim == 0 || c.dim > MOON_MODEL_MAX_DIM || c.n_layers == 0 ||
        c.n_layers > MOON_MODEL_MAX_LAYERS || c.hidden_dim == 0 ||
        c.hidden_dim > 4 * MOON_MODEL_MAX_DIM || c.n_heads == 0 || c.n_kv_heads == 0 ||
        c.n_heads % c.n_kv_heads != 0 || c.vocab_size == 0 || c.vocab_size > MOON_MODEL_MAX_VOCAB ||
        c.seq_len == 0 || c.seq_len > MOON_MODEL_MAX_CTX || !(c.norm_eps > 0.0f) ||
        !(c.rope_theta > 0.0f)) {
        MOON_ERROR("model: inconsistent hyper-parameters (dim %u, heads %u/%u, layers %u, "
                   "hidden %u, vocab %u, ctx %u)",
                   c.dim, c.n_heads, c.n_kv_heads, c.n_layers, c.hidden_dim, c.vocab_size,
                   c.seq_len);
        return MOON_ERR_CORRUPT;
    }
    status = read_head_dim(g, arch, &c);
    if (status != MOON_OK) {
        return status;
    }
    *cfg_p = c;
    return MOON_OK;
}

static moon_status_t bind_matrix(const moon_gguf_t *g, const char *name, uint32_t rows,
                                 uint32_t cols, int required, moon_tensor_t *t)
{
    const moon_gguf_tensor_t *gt = moon_gguf_find_tensor(g, name);

    if (gt == NULL) {
        if (!required) {
            return MOON_ERR_NOT_FOUND;
        }
        MOON_ERROR("model: tensor %s missing", name);
        return MOON_ERR_CORRUPT;
    }
    if (gt->n_dims != 2 || gt->ne[0] != cols || gt->ne[1] != rows) {
        MOON_ERROR("model: tensor %s has shape [%llu, %llu], want [%u, %u]", name,
                   (unsigned long long)gt->ne[0], (unsigned long long)gt->ne[1], cols, rows);
        return MOON_ERR_CORRUPT;
    }
    t->type      = gt->type;
    t->rows      = rows;
    t->cols      = cols;
    t->row_bytes = moon_ggml_type_bytes(gt->type, cols);
    t->data      = gt->data;
    return MOON_OK;
}

static moon_status_t bind_norm(const moon_gguf_t *g, const char *name, uint32_t dim, float *dst)
{
    const moon_gguf_tensor_t *gt = moon_gguf_find_tensor(g, name);

    if (gt == NULL || gt->n_elems != dim || gt->ne[0] != dim) {
        MOON_ERROR("model: norm tensor %s missing or not of %u elements", name, dim);
        return MOON_ERR_CORRUPT;
    }
    moon_ggml_dequantize(gt->type, gt->data, dst, dim);
    return MOON_OK;
}

/* A vector tensor name of n floats: MOON_OK into dst, MOON_ERR_NOT_FOUND
 * when absent and optional (logged when required), MOON_ERR_CORRUPT when of
 * another size. */
static moon_status_t bind_vec(const moon_gguf_t *g, const char *name, uint32_t n, int required,
                              float *dst)
{
    const moon_gguf_tensor_t *gt = moon_gguf_find_tensor(g, name);

    if (gt == NULL && !required) {
        return MOON_ERR_NOT_FOUND;
    }
    return bind_norm(g, name, n, dst);
}

/* The tensors some architectures add: Q/K/V biases (qwen2; optional for
 * llama), per-head Q/K norms (qwen3), rope_freqs (Llama 3.1+). */
static moon_status_t bind_extras(moon_model_t *m)
{
    const moon_model_config_t *c      = &m->cfg;
    uint32_t                   kv_dim = c->n_kv_heads * c->head_dim;
    uint32_t                   q_dim  = moon_model_q_dim(c);
    size_t                     per    = (size_t)q_dim + 2 * kv_dim + 2 * c->head_dim;
    float                     *p;
    char                       name[96];
    moon_status_t              status;

    m->extra_mem = moon_malloc((per * c->n_layers + c->head_dim / 2) * sizeof(float));
    if (m->extra_mem == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    p = m->extra_mem;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        moon_layer_t *L = &m->layers[l];
        struct {
            const char   *suffix;
            uint32_t      n;
            int           required;
            const float **dst;
        } vecs[] = {
            {"attn_q.bias", q_dim, c->arch == MOON_ARCH_QWEN2, &L->bq},
            {"attn_k.bias", kv_dim, c->arch == MOON_ARCH_QWEN2, &L->bk},
            {"attn_v.bias", kv_dim, c->arch == MOON_ARCH_QWEN2, &L->bv},
            {"attn_q_norm.weight", c->head_dim, c->arch == MOON_ARCH_QWEN3, &L->q_norm},
            {"attn_k_norm.weight", c->head_dim, c->arch == MOON_ARCH_QWEN3, &L->k_norm},
        };
        for (size_t i = 0; i < MOON_ARRAY_SIZE(vecs); i++) {
            snprintf(name, sizeof(name), "blk.%u.%s", l, vecs[i].suffix);
            status = bind_vec(m->gguf, name, vecs[i].n, vecs[i].required, p);
            if (status == MOON_OK) {
                *vecs[i].dst = p;
                p += vecs[i].n;
            } else if (status != MOON_ERR_NOT_FOUND) {
                return status;
            }
        }
        if ((L->bq == NULL) != (L->bk == NULL) || (L->bq == NULL) != (L->bv == NULL) ||
            (L->q_norm == NULL) != (L->k_norm == NULL)) {
            MOON_ERROR("model: layer %u has some of the Q/K/V biases or Q/K norms, not all", l);
            return MOON_ERR_CORRUPT;
        }
    }
    status = bind_vec(m->gguf, "rope_freqs.weight", c->head_dim / 2, 0, p);
    if (status == MOON_OK) {
        for (uint32_t j = 0; j < c->head_dim / 2; j++) {
            if (!(p[j] > 0.0f) || !isfinite(p[j])) {
                MOON_ERROR("model: rope_freqs.weight[%u] = %g is not a positive factor", j,
                           (double)p[j]);
                return MOON_ERR_CORRUPT;
            }
        }
        m->rope_freqs = p;
    } else if (status != MOON_ERR_NOT_FOUND) {
        return status;
    }
    return MOON_OK;
}

static moon_status_t bind_weights(moon_model_t *m)
{
    const moon_model_config_t *c      = &m->cfg;
    uint32_t                   kv_dim = c->n_kv_heads * c->head_dim;
    uint32_t                   q_dim  = moon_model_q_dim(c);
    moon_status_t              status;
    char                       name[96];
    float                     *norm;

    m->layers   = moon_calloc(c->n_layers, sizeof(*m->layers));
    m->norm_mem = moon_malloc(((size_t)2 * c->n_layers + 1) * c->dim * sizeof(float));
    if (m->layers == NULL || m->norm_mem == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = bind_matrix(m->gguf, "token_embd.weight", c->vocab_size, c->dim, 1, &m->tok_embd);
    if (status != MOON_OK) {
        return status;
    }
    status = bind_matrix(m->gguf, "output.weight", c->vocab_size, c->dim, 0, &m->output);
    if (status == MOON_ERR_NOT_FOUND) {
        m->output = m->tok_embd; /* tied classifier */
    } else if (status != MOON_OK) {
        return status;
    }
    norm   = m->norm_mem;
    status = bind_norm(m->gguf, "output_norm.weight", c->dim, norm);
    if (status != MOON_OK) {
        return status;
    }
    m->output_norm = norm;
    norm += c->dim;
    for (uint32_t l = 0; l < c->n_layers; l++) {
        moon_layer_t *L = &m->layers[l];
        struct {
            const char    *suffix;
            uint32_t       rows, cols;
            moon_tensor_t *t;
        } mats[] = {
            {"attn_q", q_dim, c->dim, &L->wq},
            {"attn_k", kv_dim, c->dim, &L->wk},
            {"attn_v", kv_dim, c->dim, &L->wv},
            {"attn_output", c->dim, q_dim, &L->wo},
            {"ffn_gate", c->hidden_dim, c->dim, &L->w1},
            {"ffn_down", c->dim, c->hidden_dim, &L->w2},
            {"ffn_up", c->hidden_dim, c->dim, &L->w3},
        };
        for (size_t i = 0; i < MOON_ARRAY_SIZE(mats); i++) {
            snprintf(name, sizeof(name), "blk.%u.%s.weight", l, mats[i].suffix);
            status = bind_matrix(m->gguf, name, mats[i].rows, mats[i].cols, 1, mats[i].t);
            if (status != MOON_OK) {
                return status;
            }
        }
        snprintf(name, sizeof(name), "blk.%u.attn_norm.weight", l);
        status = bind_norm(m->gguf, name, c->dim, norm);
        if (status != MOON_OK) {
            return status;
        }
        L->attn_norm = norm;
        norm += c->dim;
        snprintf(name, sizeof(name), "blk.%u.ffn_norm.weight", l);
        status = bind_norm(m->gguf, name, c->dim, norm);
        if (status != MOON_OK) {
            return status;
        }
        L->ffn_norm = norm;
        norm += c->dim;
    }
    return bind_extras(m);
}

/* Binds a model over an open reader (owned by the model from here on). */
static moon_status_t load_from(const char *path, const void *data, size_t bytes,
                               moon_model_t **model_p)
{
    moon_model_t *m;
    moon_status_t status;

    m = moon_calloc(1, sizeof(*m));
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = path ? moon_gguf_open(path, &m->gguf) : moon_gguf_open_memory(data, bytes, &m->gguf);
    if (status != MOON_OK) {
        goto err;
    }
    status = moon_model_config_from_gguf(m->gguf, &m->cfg);
    if (status != MOON_OK) {
        goto err;
    }
    status = bind_weights(m);
    if (status != MOON_OK) {
        goto err;
    }
    if (moon_gguf_find_key(m->gguf, "tokenizer.ggml.tokens") >= 0) {
        status = moon_tokenizer_create(m->gguf, &m->tok);
        if (status != MOON_OK) {
            goto err;
        }
        if (moon_tokenizer_n_vocab(m->tok) > m->cfg.vocab_size) {
            MOON_ERROR("model: tokenizer has %u tokens, the model %u",
                       moon_tokenizer_n_vocab(m->tok), m->cfg.vocab_size);
            status = MOON_ERR_CORRUPT;
            goto err;
        }
    }
    *model_p = m;
    return MOON_OK;

err:
    moon_model_destroy(m);
    return status;
}

moon_status_t moon_model_load(const char *path, moon_model_t **model_p)
{
    if (path == NULL || model_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    return load_from(path, NULL, 0, model_p);
}

moon_status_t moon_model_load_memory(const void *data, size_t bytes, moon_model_t **model_p)
{
    if (data == NULL || bytes == 0 || model_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    return load_from(NULL, data, bytes, model_p);
}

void moon_model_image(const moon_model_t *m, const void **data_p, size_t *bytes_p)
{
    moon_gguf_image(m->gguf, data_p, bytes_p);
}

static int same_config(const moon_model_config_t *a, const moon_model_config_t *b)
{
    return a->dim == b->dim && a->hidden_dim == b->hidden_dim && a->n_layers == b->n_layers &&
           a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads &&
           a->head_dim == b->head_dim && a->vocab_size == b->vocab_size &&
           a->seq_len == b->seq_len && a->norm_eps == b->norm_eps &&
           a->rope_theta == b->rope_theta && a->arch == b->arch && a->rope_neox == b->rope_neox &&
           a->rope_freq_scale == b->rope_freq_scale &&
           a->rope_yarn_orig_ctx == b->rope_yarn_orig_ctx &&
           a->rope_yarn_beta_fast == b->rope_yarn_beta_fast &&
           a->rope_yarn_beta_slow == b->rope_yarn_beta_slow;
}

moon_status_t moon_model_check_compatible(const moon_model_t *cur, const moon_model_t *next,
                                          char *why, size_t why_len)
{
    uint64_t n = moon_gguf_n_tensors(cur->gguf);
    char     key[128];

    if (!same_config(&cur->cfg, &next->cfg) || moon_gguf_n_tensors(next->gguf) != n) {
        snprintf(why, why_len,
                 "another architecture: dim %u layers %u heads %u/%u ff %u vocab %u ctx %u, "
                 "serving dim %u layers %u heads %u/%u ff %u vocab %u ctx %u",
                 next->cfg.dim, next->cfg.n_layers, next->cfg.n_heads, next->cfg.n_kv_heads,
                 next->cfg.hidden_dim, next->cfg.vocab_size, next->cfg.seq_len, cur->cfg.dim,
                 cur->cfg.n_layers, cur->cfg.n_heads, cur->cfg.n_kv_heads, cur->cfg.hidden_dim,
                 cur->cfg.vocab_size, cur->cfg.seq_len);
        MOON_ERROR("model: %s", why);
        return MOON_ERR_UNSUPPORTED;
    }
    for (uint64_t i = 0; i < n; i++) {
        const moon_gguf_tensor_t *a = moon_gguf_tensor(cur->gguf, i);
        const moon_gguf_tensor_t *b = moon_gguf_find_tensor(next->gguf, a->name);
        if (b == NULL || b->type != a->type || b->n_dims != a->n_dims ||
            memcmp(b->ne, a->ne, sizeof(a->ne)) != 0) {
            snprintf(why, why_len, "another architecture: tensor %s %s", a->name,
                     b == NULL ? "is missing" : "has another type or shape");
            MOON_ERROR("model: %s", why);
            return MOON_ERR_UNSUPPORTED;
        }
    }
    if (!moon_gguf_keys_equal(cur->gguf, next->gguf, "tokenizer.", key, sizeof(key))) {
        snprintf(why, why_len, "the tokenizer changed (key %s): a push must keep the tokenizer",
                 key);
        MOON_ERROR("model: %s", why);
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_OK;
}

void moon_model_destroy(moon_model_t *m)
{
    if (m == NULL) {
        return;
    }
    moon_tokenizer_destroy(m->tok);
    moon_free(m->layers);
    moon_free(m->norm_mem);
    moon_free(m->extra_mem);
    moon_gguf_close(m->gguf);
    moon_free(m);
}

const moon_model_config_t *moon_model_config(const moon_model_t *m)
{
    return &m->cfg;
}
const moon_tokenizer_t *moon_model_tokenizer(const moon_model_t *m)
{
    return m->tok;
}
moon_ggml_type_t moon_model_weight_type(const moon_model_t *m)
{
    return m->layers[0].wq.type;
}

static uint64_t tensor_bytes(const moon_tensor_t *t)
{
    return (uint64_t)t->rows * t->row_bytes;
}

uint64_t moon_model_weight_bytes(const moon_model_t *m)
{
    uint64_t b = tensor_bytes(&m->output);

    for (uint32_t l = 0; l < m->cfg.n_layers; l++) {
        const moon_layer_t *L = &m->layers[l];
        b += tensor_bytes(&L->wq) + tensor_bytes(&L->wk) + tensor_bytes(&L->wv) +
             tensor_bytes(&L->wo) + tensor_bytes(&L->w1) + tensor_bytes(&L->w2) +
             tensor_bytes(&L->w3) + 2ull * m->cfg.dim * sizeof(float);
    }
    return b + (uint64_t)m->cfg.dim * sizeof(float);
}

moon_kv_config_t moon_model_kv_config(const moon_model_config_t *cfg, uint32_t block_tokens,
                                      uint32_t n_blocks, uint32_t max_seqs)
{
    moon_kv_config_t k = {
        .n_layers     = cfg->n_layers,
        .n_kv_heads   = cfg->n_kv_heads,
        .head_dim     = cfg->head_dim,
        .block_tokens = block_tokens,
        .n_blocks     = n_blocks,
        .max_seqs     = max_seqs,
        .max_seq_len  = cfg->seq_len,
    };
    return k;
}

void moon_tensor_row(const moon_tensor_t *t, uint32_t r, float *out)
{
    moon_ggml_dequantize(t->type, (const uint8_t *)t->data + (size_t)r * t->row_bytes, out,
                         t->cols);
}
