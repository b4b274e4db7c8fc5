/* model/model_internal.h - the model's weights and the backend interface
 * (private to model/). Backends implement moon_model_backend_ops_t (ggml
 * style); the engine picks one at create and drives it. */
#ifndef MOON_MODEL_INTERNAL_H
#define MOON_MODEL_INTERNAL_H

#include "kv_internal.h"
#include "moonlet/model.h"

/* Sanity limits on a model's shape, shared by the loader and the writers: a
 * file past them is corrupt rather than big. */
#define MOON_MODEL_MAX_DIM (1u << 16)
#define MOON_MODEL_MAX_LAYERS 1024u
#define MOON_MODEL_MAX_VOCAB (1u << 22)
#define MOON_MODEL_MAX_CTX (1u << 20)

typedef struct {
    const float  *attn_norm; /* (dim) */
    const float  *ffn_norm;  /* (dim) */
    moon_tensor_t wq;        /* (q_dim, dim): q_dim = n_heads * head_dim */
    moon_tensor_t wk;        /* (kv_dim, dim) */
    moon_tensor_t wv;        /* (kv_dim, dim) */
    moon_tensor_t wo;        /* (dim, q_dim) */
    moon_tensor_t w1;        /* (hidden, dim) gate */
    moon_tensor_t w2;        /* (dim, hidden) down */
    moon_tensor_t w3;        /* (hidden, dim) up */
    const float  *bq;        /* (q_dim) Q bias, or NULL (qwen2) */
    const float  *bk;        /* (kv_dim) */
    const float  *bv;        /* (kv_dim) */
    const float  *q_norm;    /* (head_dim) per-head Q RMSNorm weight, or NULL (qwen3) */
    const float  *k_norm;    /* (head_dim) */
} moon_layer_t;

struct moon_model {
    moon_model_config_t cfg;
    moon_gguf_t        *gguf;        /* owned: the mapping the tensors point into */
    moon_tokenizer_t   *tok;         /* owned, may be NULL */
    moon_tensor_t       tok_embd;    /* (vocab, dim) */
    moon_tensor_t       output;      /* (vocab, dim) classifier; tied: == tok_embd */
    const float        *output_norm; /* (dim) */
    moon_layer_t       *layers;      /* (n_layers) */
    float              *norm_mem;    /* owned storage of every norm vector */
    float              *extra_mem;   /* owned storage of biases, Q/K norms, rope_freqs */
    const float        *rope_freqs;  /* (head_dim / 2) frequency divisors, or NULL */
};

/* The rotation of pair j (0 <= j < head_dim / 2) at position pos, as the
 * cosine and sine every backend multiplies by (rope.c): the angle pos *
 * freq_scale * theta^(-2j / head_dim) / rope_freqs[j], or YaRN's blend of
 * the scaled and unscaled angles with its magnitude scale (llama.cpp's). */
void moon_model_rope_cos_sin(const moon_model_t *m, uint32_t pos, uint32_t j, float *cos_p,
                             float *sin_p);

/* Backend vtable. Every member is required. The engine has already checked
 * arguments and reserved KV room for the new tokens; the backend writes their
 * K/V at positions seq_len.. and never changes lengths (the engine advances
 * them on success). modeled_s_p: a backend that models time (COST) stores
 * it; the others leave it untouched and the engine measures wall time.
 * tags_writes: the backend keeps kv->writer itself (a device mirror);
 * otherwise the engine tags the blocks a call wrote as written on the host. */
typedef struct {
    const char *name;
    moon_status_t (*create)(const moon_model_t *model, const moon_engine_config_t *cfg,
                            void **state_p);
    void (*destroy)(void *state);
    moon_status_t (*prefill)(void *state, moon_kv_cache_t *kv, uint32_t seq, const int32_t *tokens,
                             uint32_t n, float *logits, double *modeled_s_p);
    moon_status_t (*decode)(void *state, moon_kv_cache_t *kv, const uint32_t *seqs,
                            const int32_t *tokens, uint32_t n_seqs, float *logits,
                            double *modeled_s_p);
    int tags_writes;
    /* Optional (NULL: MOON_ERR_UNSUPPORTED): a prefill that gives back every
     * row, logits (n, vocab) and hidden (n, dim: the final normed hidden
     * states), either NULL. */
    moon_status_t (*prefill_rows)(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                  const int32_t *tokens, uint32_t n, float *logits, float *hidden,
                                  double *modeled_s_p);
    int kv_f16; /* reads and writes an F16 KV cache (all do F32) */
} moon_model_backend_ops_t;

extern const moon_model_backend_ops_t moon_backend_ref_ops;
extern const moon_model_backend_ops_t moon_backend_cpu_ops;
extern const moon_model_backend_ops_t moon_backend_cost_ops;
#ifdef MOON_WITH_CUDA
extern const moon_model_backend_ops_t moon_backend_cuda_ops;
#endif

/* Row r of an embedding/matrix tensor as floats (any type). */
void moon_tensor_row(const moon_tensor_t *t, uint32_t r, float *out);

#endif /* MOON_MODEL_INTERNAL_H */
