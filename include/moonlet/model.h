/* moonlet/model.h - Llama model (weights from GGUF) and the engine that runs
 * it: prefill of a chunk of tokens and decode of a batch of sequences over a
 * paged KV cache. Backends sit behind one interface, chosen once at create:
 *   REF   plain single-threaded reference path (llama2.c style),
 *   CPU   fast path: threads, SIMD, batched GEMM,
 *   CUDA  GPU path (built with MOON_WITH_CUDA),
 *   COST  computes nothing; returns modeled durations (Mooncake Eq. 1).
 * A model is immutable after load and may be shared by engines. An engine is
 * driven by one thread at a time (its own worker threads are internal). */
#ifndef MOONLET_MODEL_H
#define MOONLET_MODEL_H

#include "moonlet/config.h"
#include "moonlet/defs.h"
#include "moonlet/gguf.h"
#include "moonlet/kv_cache.h"
#include "moonlet/status.h"
#include "moonlet/tokenizer.h"

#include <stdbool.h>

/* Architectures (general.architecture). */
typedef enum {
    MOON_ARCH_LLAMA = 0, /* Llama 2/3.x, Mistral, TinyLlama, SmolLM: RoPE on adjacent pairs */
    MOON_ARCH_QWEN2 = 1, /* Qwen 2/2.5: Q/K/V biases, RoPE on halves (NeoX) */
    MOON_ARCH_QWEN3 = 2, /* Qwen 3: per-head Q and K RMSNorm before RoPE (NeoX) */
} moon_model_arch_t;
#define MOON_MODEL_ARCHS "llama, qwen2, qwen3"

typedef struct {
    uint32_t dim;        /* n_embd */
    uint32_t hidden_dim; /* SwiGLU width */
    uint32_t n_layers;
    uint32_t n_heads;
    uint32_t n_kv_heads; /* < n_heads: grouped-query attention */
    uint32_t head_dim;   /* per head of Q, K and V: dim / n_heads unless the file says */
    uint32_t vocab_size;
    uint32_t seq_len;         /* context length */
    float    norm_eps;        /* RMSNorm epsilon */
    float    rope_theta;      /* RoPE base */
    uint32_t arch;            /* moon_model_arch_t */
    uint32_t rope_neox;       /* 1: rotate (i, i + head_dim / 2), 0: (2i, 2i + 1) */
    float    rope_freq_scale; /* positions scaled by it (linear rope scaling; 1: none) */
    /* YaRN (rope.scaling.type yarn, llama.cpp's rope_yarn): the context the
     * model was trained at (original_context_length; 0: no YaRN) and the
     * ramp's bounds in rotations (yarn_beta_fast 32, yarn_beta_slow 1 unless
     * the file says); rope_freq_scale is 1 / factor */
    uint32_t rope_yarn_orig_ctx;
    float    rope_yarn_beta_fast, rope_yarn_beta_slow;
} moon_model_config_t;

/* The width of Q and of the attention output (wo's columns): n_heads *
 * head_dim, which is dim except in models whose heads are wider or narrower
 * than dim / n_heads (Qwen 3 0.6B: dim 1024, 16 heads of 128). */
static inline uint32_t moon_model_q_dim(const moon_model_config_t *c)
{
    return c->n_heads * c->head_dim;
}

/* The name of an architecture ("llama"...; "?" when out of range). */
MOON_API const char *moon_model_arch_name(uint32_t arch);

/* A weight matrix (out rows x in cols, row-major, rows of type). */
typedef struct {
    moon_ggml_type_t type;
    uint32_t         rows, cols;
    size_t           row_bytes;
    const void      *data; /* (rows, cols) in the mapping or owned by the model */
} moon_tensor_t;

typedef struct moon_model moon_model_t;

/* Reads hyper-parameters from a GGUF's ARCH.* keys (head_dim from
 * attention.key_length, which must equal attention.value_length and
 * rope.dimension_count where present, else dim / n_heads). MOON_ERR_UNSUPPORTED (logged, with
 * the supported list) for an architecture other than MOON_MODEL_ARCHS or a
 * rope scaling other than none/linear; MOON_ERR_CORRUPT on missing or
 * inconsistent keys. */
MOON_API moon_status_t moon_model_config_from_gguf(const moon_gguf_t   *gguf,
                                                   moon_model_config_t *cfg_p);

/* Opens path (mmap) and binds every weight, checking names, types and shapes;
 * builds the tokenizer when the file has one. MOON_ERR_NOT_FOUND/IO/CORRUPT. */
MOON_API moon_status_t moon_model_load(const char *path, moon_model_t **model_p);
/* The same over a GGUF image in memory: data is BORROWED and must outlive
 * the model (a weight push's staging copy, verified before). Same statuses. */
MOON_API moon_status_t moon_model_load_memory(const void *data, size_t bytes,
                                              moon_model_t **model_p);
MOON_API void          moon_model_destroy(moon_model_t *model); /* NULL: no-op */
/* The GGUF bytes the model's tensors point into (the file's mapping or the
 * caller's memory), borrowed from the model. */
MOON_API void moon_model_image(const moon_model_t *model, const void **data_p, size_t *bytes_p);
/* Whether next may replace cur in a running deployment: the same
 * hyper-parameters, the same tensor names, types and shapes, and the same
 * tokenizer (every tokenizer.* key). MOON_OK; MOON_ERR_UNSUPPORTED (another
 * architecture or shape) or MOON_ERR_INVALID_PARAM (another tokenizer), with
 * the cause written to why (why_len bytes) and logged. */
MOON_API moon_status_t moon_model_check_compatible(const moon_model_t *cur,
                                                   const moon_model_t *next, char *why,
                                                   size_t why_len);

MOON_API const moon_model_config_t *moon_model_config(const moon_model_t *model);
/* NULL when the file had no tokenizer. Owned by the model. */
MOON_API const moon_tokenizer_t *moon_model_tokenizer(const moon_model_t *model);
/* Bytes of weights streamed per token (every matrix once, incl. the classifier). */
MOON_API uint64_t moon_model_weight_bytes(const moon_model_t *model);
/* The main matrix type (of layer 0's attn_q). */
MOON_API moon_ggml_type_t moon_model_weight_type(const moon_model_t *model);

/* A KV cache config for the model with n_blocks blocks of block_tokens. */
MOON_API moon_kv_config_t moon_model_kv_config(const moon_model_config_t *cfg,
                                               uint32_t block_tokens, uint32_t n_blocks,
                                               uint32_t max_seqs);

/* Writes a random-weight Llama of shape cfg to path (head_dim 0: dim /
 * n_heads; any other even size is written as attention.key_length and
 * value_length, as llama.cpp does; weights uniform in
 * +-1/sqrt(in), norms near 1, a byte-level tokenizer of cfg->vocab_size tokens
 * when vocab_size >= 259), matrices in type. Deterministic in seed. */
MOON_API moon_status_t moon_model_write_random(const moon_model_config_t *cfg,
                                               moon_ggml_type_t type, uint64_t seed,
                                               const char *path);

/* moon_model_write_random with more choices: the architecture and linear
 * rope scaling come from cfg (arch, rope_freq_scale: 0 or 1 none); qwen2
 * gets Q/K/V biases, qwen3 per-head Q/K norms; rope_freqs adds Llama 3.1's
 * rope_freqs.weight (factor 8, original context 8192); vocab_path (may be
 * NULL) copies every tokenizer.* key of that GGUF (a vocabulary from
 * model/convert/hf_tokenizer.mjs), whose token count then sets the vocabulary
 * size; chat_template (may be NULL) is written as tokenizer.chat_template.
 * The classifier is tied (no output.weight) unless untied.
 * MOON_ERR_INVALID_PARAM:
 * a bad shape; the reader's and writer's statuses. */
typedef struct {
    moon_ggml_type_t type;
    uint64_t         seed;
    int              rope_freqs;
    int              untied; /* write output.weight */
    const char      *vocab_path;
    const char      *chat_template; /* tokenizer.chat_template to write (NULL: the
                                       vocabulary's, if any) */
} moon_model_write_opts_t;
MOON_API moon_status_t moon_model_write_random_ex(const moon_model_config_t     *cfg,
                                                  const moon_model_write_opts_t *opts,
                                                  const char                    *path);

/* Writes the GGUF at in to out with its matrices in type_name (F32, F16,
 * BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, or llama.cpp's mixes Q4_K_M / Q5_K_M:
 * Q6_K for output.weight and for attn_v / ffn_down in the first and last
 * eighth of the layers and every third between). Every key is copied
 * (general.file_type set to llama.cpp's value); vectors stay as they are; a
 * matrix whose rows are not whole blocks falls back to Q8_0 (or F16).
 * MOON_ERR_INVALID_PARAM: an unknown type (logged with the list); the
 * reader's and writer's statuses. */
MOON_API moon_status_t moon_model_quantize(const char *in, const char *out, const char *type_name);

/* Writes a copy of the GGUF at src to dst where the F32 tensors whose name
 * contains pattern ("" : all) are scaled element-wise by 1 + scale * u, u
 * uniform in [-1, 1) (deterministic in seed). Everything else is the same
 * bytes at the same offsets: a second model for weight-push tests whose
 * unchanged tensors are bit-identical. *n_changed_p (may be NULL): tensors
 * changed. MOON_ERR_NOT_FOUND: no F32 tensor matches; the reader's and
 * writer's statuses (MOON_ERR_IO, MOON_ERR_CORRUPT). */
MOON_API moon_status_t moon_model_write_perturbed(const char *src, const char *dst,
                                                  const char *pattern, float scale, uint64_t seed,
                                                  uint32_t *n_changed_p);
/* The same change in memory: perturbs the GGUF image [data, data + len)
 * in place (bytes equal to moon_model_write_perturbed's output for the
 * same pattern, scale and seed). MOON_ERR_CORRUPT: not a GGUF image;
 * MOON_ERR_NOT_FOUND: no F32 tensor matches (the image is unchanged). */
MOON_API moon_status_t moon_model_perturb_image(void *data, size_t len, const char *pattern,
                                                float scale, uint64_t seed, uint32_t *n_changed_p);

/* Converts a llama2.c checkpoint (legacy v0 format) and tokenizer.bin into a
 * GGUF v3 file (F32), with name/license metadata (both may be NULL). */
MOON_API moon_status_t moon_model_convert_llama2c(const char *ckpt_path, const char *tok_path,
                                                  const char *out_path, const char *name,
                                                  const char *license);

/* ---- engine -------------------------------------------------------------- */

typedef enum {
    MOON_BACKEND_REF  = 0,
    MOON_BACKEND_CPU  = 1,
    MOON_BACKEND_CUDA = 2,
    MOON_BACKEND_COST = 3,
} moon_backend_kind_t;

/* Cost model (COST backend and moon_cost_* helpers).
 *
 * Roofline form (fit.enabled == 0), all rates effective (peak times
 * efficiency):
 *   prefill(p, n) = step_overhead_s + (flops(p + n) - flops(p)) / flops_per_s,
 *                   flops(x) = l (4 x^2 d + 22 x d^2)            (Mooncake Eq. 1)
 *   decode(b, C)  = step_overhead_s + max(memory, compute)         (roofline)
 *     memory      = (weight bytes + C * KV bytes per token) / mem_bytes_per_s
 *     compute     = (2 * params * b + 4 * l * d * C) / decode_flops_per_s
 * for b sequences holding C context tokens in all (d = n_heads * head_dim;
 * 4 l d per context token is the QK^T and AV products of one new token).
 * The step is the max of the two terms, not their sum: weights stream while
 * the GEMMs run, so a small batch is memory-bound and a large one
 * compute-bound.
 *
 * Fitted form (fit.enabled == 1; coefficients from timing the real engine,
 * the conductor's start-up calibration, same forms as the scheduler's
 * predictor moon_sched_cost_t):
 *   prefill(p, n) = a0 + a1 n + a2 ((p + n)^2 - p^2)
 *   decode(b, C)  = d0 + d1 b + d2 C
 * The rates and step_overhead_s are then unused. */
typedef struct {
    int    enabled;
    double a0, a1, a2; /* prefill: s, s per token, s per token^2 */
    double d0, d1, d2; /* decode step: s, s per sequence, s per context token */
} moon_cost_fit_t;

typedef struct {
    moon_model_config_t shape;              /* modeled shape; n_layers 0: the model's */
    double              flops_per_s;        /* sustained prefill throughput */
    double              mem_bytes_per_s;    /* decode: weights + KV read bandwidth */
    double              decode_flops_per_s; /* decode GEMM throughput; 0: flops_per_s */
    double              weight_bytes;       /* 0: 2 bytes per parameter of shape */
    uint32_t            kv_bytes_per_elem;  /* e.g. 2 (fp16/bf16) */
    double              step_overhead_s;    /* fixed cost per call */
    moon_cost_fit_t     fit;                /* fitted coefficients (enabled: used instead) */
} moon_cost_config_t;

typedef enum {
    MOON_CPU_ISA_AUTO,   /* the widest kernels this CPU runs */
    MOON_CPU_ISA_AVX512, /* the same (named so a test can ask for it) */
    MOON_CPU_ISA_AVX2,   /* at most AVX2 */
    MOON_CPU_ISA_SCALAR, /* plain C kernels */
} moon_cpu_isa_t;

/* Switches of the fast backends, for tests and A/B runs: rows of
 * moon_engine_tuning_table (env MOON_CPU_*, MOON_CUDA_GRAPHS), whose docs and
 * defaults `moonlet config` shows. */
typedef struct {
    int      cpu_isa;            /* moon_cpu_isa_t */
    uint64_t cpu_par_min_macs;   /* below, a step runs on the calling thread */
    uint64_t cpu_split_max_macs; /* below, a decode batch splits across threads */
    uint32_t cpu_op_min_b;       /* AVX-512 outer-product matmul from this batch */
    uint32_t cpu_bt_min_b;       /* AVX-512 batch-in-lanes matmul from this batch */
    int      cpu_bf16_dp;        /* BF16 products in batch-in-lanes steps (AVX512_BF16) */
    int      cpu_q8_act;         /* quantised weights x Q8 activations (0: F32 activations) */
    uint32_t cpu_q8_max_b;       /* above: dequantised tiles through sgemm (OpenBLAS builds) */
    uint32_t cpu_qgemm_min_b;    /* from this batch: the integer GEMM (AVX-512 VNNI) */
    int      cpu_nt;             /* batched NT kernels (0: through sgemm) */
    int      cuda_graphs;        /* CUDA decode steps replayed as graphs */
} moon_engine_tuning_t;

MOON_API extern const moon_config_table_t moon_engine_tuning_table;

/* The table's defaults, then the environment. MOON_ERR_INVALID_PARAM: a
 * malformed variable (logged, naming it); t then holds the defaults only. */
MOON_API moon_status_t moon_engine_tuning_default(moon_engine_tuning_t *t);

typedef struct {
    moon_backend_kind_t kind;
    uint32_t            n_threads; /* CPU: 0 = online cores */
    uint32_t            pin; /* CPU: 1 binds pool thread i to core first_core + i (thread 0 is the
                                caller, which binds itself if it wants: moon_cpu_pin_self) */
    uint32_t                    first_core;
    uint32_t                    max_batch; /* decode sequences per call (0: 64) */
    uint32_t                    max_chunk; /* prefill tokens per call (0: 512) */
    uint32_t                    gpu;       /* CUDA: the device, modulo the devices present */
    moon_cost_config_t          cost;      /* COST only */
    const moon_engine_tuning_t *tuning;    /* borrowed for create; NULL: defaults and
                                            * environment (moon_engine_tuning_default) */
} moon_engine_config_t;

typedef struct moon_engine moon_engine_t;

/* Creates an engine for model (BORROWED: must outlive the engine; may be NULL
 * for COST, which then uses cfg->cost.shape). COST over a model checks
 * tokens and KV caches against the model's shape and models the durations of
 * cfg->cost.shape when it is set (n_layers > 0), else of the model's (the
 * simulator: a tiny model's real KV bookkeeping, a large model's times). Preallocates every buffer:
 * the calls below never allocate. MOON_ERR_UNSUPPORTED: CUDA not built or no device. */
MOON_API moon_status_t moon_engine_create(const moon_model_t         *model,
                                          const moon_engine_config_t *cfg,
                                          moon_engine_t             **engine_p);
MOON_API void          moon_engine_destroy(moon_engine_t *engine); /* NULL: no-op */
/* The KV cache type engines of kind read for a request (MOON_KV_AUTO: F16
 * where the backend reads it, as llama.cpp's default cache, else F32).
 * MOON_ERR_UNSUPPORTED (logged): that backend does not read want. */
MOON_API moon_status_t moon_backend_kv_type(moon_backend_kind_t kind, moon_kv_type_t want,
                                            moon_kv_type_t *type_p);
MOON_API const char   *moon_engine_name(const moon_engine_t *engine);

/* Prefill: runs tokens[0..n) at the end of sequence seq (n <= max_chunk),
 * writing their K/V into its blocks (reserving them) and advancing its length.
 * logits (vocab floats, may be NULL) receive the last token's logits.
 * *duration_s_p (may be NULL): wall time, or the modeled time for COST.
 * MOON_ERR_NO_RESOURCE: KV pool or context full (nothing changed). COST
 * accepts kv == NULL and then only models. */
MOON_API moon_status_t moon_engine_prefill(moon_engine_t *engine, moon_kv_cache_t *kv, uint32_t seq,
                                           const int32_t *tokens, uint32_t n, float *logits,
                                           double *duration_s_p);

/* The same prefill giving back every row of the chunk: logits (n, vocab)
 * and hidden (n, dim: the final hidden states after the output norm), either
 * may be NULL. For prompt logprobs and embeddings; costs the classifier over
 * every row when logits are asked. MOON_ERR_UNSUPPORTED: a backend without it
 * (COST) or kv NULL. */
MOON_API moon_status_t moon_engine_prefill_rows(moon_engine_t *engine, moon_kv_cache_t *kv,
                                                uint32_t seq, const int32_t *tokens, uint32_t n,
                                                float *logits, float *hidden, double *duration_s_p);

/* Decode step: one token per sequence for n_seqs distinct sequences
 * (n_seqs <= max_batch); logits (n_seqs, vocab). COST with kv == NULL models
 * a batch of empty contexts: use moon_engine_model_decode to give lengths. */
MOON_API moon_status_t moon_engine_decode(moon_engine_t *engine, moon_kv_cache_t *kv,
                                          const uint32_t *seqs, const int32_t *tokens,
                                          uint32_t n_seqs, float *logits, double *duration_s_p);

/* COST only, without a KV cache (the simulator: no pool of the modeled
 * shape is ever allocated). The modeled seconds of a prefill of n new tokens
 * after a cached prefix of n_prefix (1 <= n <= max_chunk, n_prefix + n <=
 * the shape's seq_len), and of a decode step over n_seqs sequences whose
 * context lengths (tokens already in the KV, before this step's token) are
 * ctx_lens[0..n_seqs) (1 <= n_seqs <= max_batch; each + 1 <= seq_len).
 * Nothing is stored. MOON_ERR_UNSUPPORTED: not the COST backend;
 * MOON_ERR_INVALID_PARAM: bad arguments (nothing changed). */
MOON_API moon_status_t moon_engine_model_prefill(const moon_engine_t *engine, uint64_t n_prefix,
                                                 uint64_t n, double *duration_s_p);
MOON_API moon_status_t moon_engine_model_decode(const moon_engine_t *engine,
                                                const uint32_t *ctx_lens, uint32_t n_seqs,
                                                double *duration_s_p);
/* The cost model the engine uses (COST: its config, shape from the model
 * when one was given); NULL for other backends. Borrowed from the engine. */
MOON_API const moon_cost_config_t *moon_engine_cost_config(const moon_engine_t *engine);

/* Cost model by itself (the forms above). kv bytes per token:
 * 2 * l * n_kv_heads * head_dim * elem; params: the shape's matrices and
 * classifier (embedding tied). */
MOON_API double moon_cost_prefill_flops(const moon_model_config_t *shape, uint64_t n_prefix,
                                        uint64_t n);
MOON_API double moon_cost_prefill_s(const moon_cost_config_t *cost, uint64_t n_prefix, uint64_t n);
MOON_API double moon_cost_decode_s(const moon_cost_config_t *cost, uint32_t batch,
                                   uint64_t total_ctx_tokens);
MOON_API uint64_t moon_cost_kv_bytes_per_token(const moon_cost_config_t *cost);
MOON_API double   moon_cost_params(const moon_model_config_t *shape);
/* The decode step's two roofline terms (seconds, without step_overhead_s). */
MOON_API double moon_cost_decode_memory_s(const moon_cost_config_t *cost,
                                          uint64_t                  total_ctx_tokens);
MOON_API double moon_cost_decode_compute_s(const moon_cost_config_t *cost, uint32_t batch,
                                           uint64_t total_ctx_tokens);
/* MOON_OK when cost can model (rates > 0 and finite, or a fit with finite
 * coefficients >= 0; a shape with layers and dim); MOON_ERR_INVALID_PARAM. */
MOON_API moon_status_t moon_cost_check(const moon_cost_config_t *cost);
/* A LLaMA3-70B shape (l 80, d 8192, 64 heads, 8 KV heads, ff 28672, vocab
 * 128256) on an A800-like device: 320 KB/token of 2-byte KV. */
MOON_API moon_cost_config_t moon_cost_llama3_70b(void);

/* ---- sampling ------------------------------------------------------------- */

typedef struct {
    float    temperature; /* 0: greedy */
    float    top_p;       /* 1: off */
    uint32_t top_k;       /* 0: off */
    uint64_t rng;         /* state; seeded by moon_sampler_init */
    uint32_t vocab_size;
    /* private: scratch of vocab_size (index, prob) pairs */
    void *scratch;
    void *ctl; /* the controls' state (moon_sampler_set_ctl); NULL: none, the plain path */
} moon_sampler_t;

/* Per-request controls on the logits, as OpenAI and vLLM define them, in
 * vLLM's order: repetition, frequency and presence penalties on the raw
 * logits, then the logit bias, then min_tokens' mask; temperature, min_p,
 * top-k and top-p come after, in moon_sampler_sample. Every default (all
 * zero, repetition_penalty 0 or 1) is off. */
typedef struct {
    float presence_penalty;    /* [-2, 2]: minus this once per token generated before */
    float frequency_penalty;   /* [-2, 2]: minus this per occurrence so far */
    float repetition_penalty;  /* > 0: prompt or generated tokens' logits divided
                                  (positive) or multiplied (negative) by it (CTRL) */
    float          min_p;      /* [0, 1]: tokens below min_p * the top one's prob dropped */
    uint32_t       min_tokens; /* ban_ids are masked until this many were accepted */
    const int32_t *ban_ids;    /* (n_ban) EOS and stop ids; copied */
    uint32_t       n_ban;
    const int32_t *bias_ids; /* (n_bias) ids < vocab_size, with bias[i] added to each; copied */
    const float   *bias;
    uint32_t       n_bias;
} moon_sampler_ctl_t;

MOON_API moon_status_t moon_sampler_init(moon_sampler_t *s, uint32_t vocab_size, float temperature,
                                         float top_p, uint32_t top_k, uint64_t seed);
MOON_API void          moon_sampler_fini(moon_sampler_t *s);
/* Sets the controls (ctl borrowed for the call); prompt (n_prompt ids,
 * borrowed) counts for the repetition penalty. All off: nothing is kept and
 * sampling stays on its plain path. MOON_ERR_INVALID_PARAM (nothing
 * changed): a value out of its range, an id out of the vocabulary;
 * MOON_ERR_NO_MEMORY. Not on the hot path: allocates the state (a count per
 * vocabulary entry when a penalty is on). */
MOON_API moon_status_t moon_sampler_set_ctl(moon_sampler_t *s, const moon_sampler_ctl_t *ctl,
                                            const int32_t *prompt, uint32_t n_prompt);
/* A token generated (sampled or resumed): counts for the penalties and
 * min_tokens. No-op without controls. */
MOON_API void moon_sampler_accept(moon_sampler_t *s, int32_t token);
/* Picks a token from logits (modified in place: controls applied, scaled and
 * soft-maxed). Does not accept it (moon_sampler_accept). */
MOON_API int32_t moon_sampler_sample(moon_sampler_t *s, float *logits);
MOON_API int32_t moon_argmax(const float *x, uint32_t n);
/* Log-probabilities of the raw logits (n, borrowed, unchanged): *lp_p gets
 * token's, and top_ids / top_lps (k each, caller's) the k most likely ids,
 * most likely first (ties: the lower id). k <= MOON_LOGPROBS_MAX. O(n k). */
#define MOON_LOGPROBS_MAX 20u
MOON_API void moon_logprobs(const float *logits, uint32_t n, int32_t token, uint32_t k, float *lp_p,
                            int32_t *top_ids, float *top_lps);

#endif /* MOONLET_MODEL_H */
