/* model/cost_model.c - the COST backend: same interface as the others, but it
 * computes nothing and returns modeled durations. Prefill FLOPs follow
 * Mooncake's Eq. 1, flops(n) = l (4 n^2 d + 22 n d^2), over a configured
 * throughput; a decode step is the larger (roofline) of the bytes it reads
 * (weights once, plus each sequence's KV) over a bandwidth and its FLOPs
 * (2 per parameter per sequence, plus attention over the contexts) over a
 * throughput; or fitted coefficients instead (moonlet/model.h). Pure
 * functions; no threads. */
#include "model_internal.h"
#include "moonlet/alloc.h"

#include <math.h>

typedef struct {
    moon_cost_config_t cost;
} cost_state_t;

/* Eq. 1 counts heads as wide as the model (q_dim = d). Where they are not
 * (Qwen3-0.6B: 16 heads of 128 over d = 1024) attention works over q_dim,
 * and the Q and output projections, 2 q_dim d of the 22 d^2 weights' FLOPs
 * per token, change by 4 d (q_dim - d); with q_dim = d this is Eq. 1. */
double moon_cost_prefill_flops(const moon_model_config_t *s, uint64_t n_prefix, uint64_t n)
{
    double l = s->n_layers, d = s->dim;
    double q = s->n_heads && s->head_dim ? (double)moon_model_q_dim(s) : d;
    double a = (double)n_prefix, b = (double)(n_prefix + n);

    return l * (4.0 * (b * b - a * a) * q + (b - a) * (22.0 * d * d + 4.0 * d * (q - d)));
}

double moon_cost_params(const moon_model_config_t *s)
{
    double q_dim  = (double)s->n_heads * s->head_dim;
    double kv_dim = (double)s->n_kv_heads * s->head_dim;

    return (double)s->n_layers * (2.0 * q_dim * s->dim + 2.0 * kv_dim * s->dim +
                                  3.0 * (double)s->hidden_dim * s->dim) +
           (double)s->vocab_size * s->dim;
}

static double weight_bytes(const moon_cost_config_t *c)
{
    return c->weight_bytes > 0.0 ? c->weight_bytes : 2.0 * moon_cost_params(&c->shape);
}

double moon_cost_prefill_s(const moon_cost_config_t *c, uint64_t n_prefix, uint64_t n)
{
    const moon_cost_fit_t *f = &c->fit;

    if (f->enabled) {
        double a = (double)n_prefix, b = (double)(n_prefix + n);
        return f->a0 + f->a1 * (double)n + f->a2 * (b * b - a * a);
    }
    return c->step_overhead_s + moon_cost_prefill_flops(&c->shape, n_prefix, n) / c->flops_per_s;
}

uint64_t moon_cost_kv_bytes_per_token(const moon_cost_config_t *c)
{
    return 2ull * c->shape.n_layers * c->shape.n_kv_heads * c->shape.head_dim *
           (c->kv_bytes_per_elem ? c->kv_bytes_per_elem : 2);
}

double moon_cost_decode_memory_s(const moon_cost_config_t *c, uint64_t total_ctx_tokens)
{
    double kv = (double)total_ctx_tokens * (double)moon_cost_kv_bytes_per_token(c);

    return (weight_bytes(c) + kv) / c->mem_bytes_per_s;
}

double moon_cost_decode_compute_s(const moon_cost_config_t *c, uint32_t batch,
                                  uint64_t total_ctx_tokens)
{
    const moon_model_config_t *s = &c->shape;
    double rate  = c->decode_flops_per_s > 0.0 ? c->decode_flops_per_s : c->flops_per_s;
    double attn  = 4.0 * s->n_layers * (double)s->n_heads * s->head_dim * (double)total_ctx_tokens;
    double gemms = 2.0 * moon_cost_params(s) * (double)batch;

    return (gemms + attn) / rate;
}

double moon_cost_decode_s(const moon_cost_config_t *c, uint32_t batch, uint64_t total_ctx_tokens)
{
    const moon_cost_fit_t *f = &c->fit;
    double                 mem, comp;

    if (f->enabled) {
        return f->d0 + f->d1 * (double)batch + f->d2 * (double)total_ctx_tokens;
    }
    mem  = moon_cost_decode_memory_s(c, total_ctx_tokens);
    comp = moon_cost_decode_compute_s(c, batch, total_ctx_tokens);
    return c->step_overhead_s + (mem > comp ? mem : comp);
}

static int finite_nonneg(double x)
{
    return isfinite(x) && x >= 0.0;
}

moon_status_t moon_cost_check(const moon_cost_config_t *c)
{
    const moon_cost_fit_t *f = &c->fit;

    if (c->shape.n_layers == 0 || c->shape.dim == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (f->enabled) {
        return finite_nonneg(f->a0) && finite_nonneg(f->a1) && finite_nonneg(f->a2) &&
                       finite_nonneg(f->d0) && finite_nonneg(f->d1) && finite_nonneg(f->d2)
                   ? MOON_OK
                   : MOON_ERR_INVALID_PARAM;
    }
    if (!(isfinite(c->flops_per_s) && c->flops_per_s > 0.0) ||
        !(isfinite(c->mem_bytes_per_s) && c->mem_bytes_per_s > 0.0) ||
        !finite_nonneg(c->decode_flops_per_s) || !finite_nonneg(c->weight_bytes) ||
        !finite_nonneg(c->step_overhead_s)) {
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_OK;
}

moon_cost_config_t moon_cost_llama3_70b(void)
{
    moon_cost_config_t c = {
        .shape             = {.dim        = 8192,
                              .hidden_dim = 28672,
                              .n_layers   = 80,
                              .n_heads    = 64,
                              .n_kv_heads = 8,
                              .head_dim   = 128,
                              .vocab_size = 128256,
                              .seq_len    = 131072,
                              .norm_eps   = 1e-5f,
                              .rope_theta = 500000.0f},
        .flops_per_s       = 8 * 312e12 * 0.5, /* 8 x A800 bf16 dense, 50 % MFU */
        .mem_bytes_per_s   = 8 * 2.0e12 * 0.6, /* 8 x HBM2e, 60 % achieved */
        .weight_bytes      = 0.0,
        .kv_bytes_per_elem = 2,
        .step_overhead_s   = 0.0,
    };
    return c;
}

static moon_status_t cost_create(const moon_model_t *m, const moon_engine_config_t *cfg,
                                 void **state_p)
{
    cost_state_t *s;

    s = moon_calloc(1, sizeof(*s));
    if (s == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    s->cost = cfg->cost;
    if (m != NULL && s->cost.shape.n_layers == 0) {
        s->cost.shape = m->cfg; /* no modeled shape given: the model's own */
    }
    if (moon_cost_check(&s->cost) != MOON_OK) {
        moon_free(s);
        return MOON_ERR_INVALID_PARAM;
    }
    *state_p = s;
    return MOON_OK;
}

static void cost_destroy(void *state)
{
    moon_free(state);
}

static moon_status_t cost_prefill(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                  const int32_t *tokens, uint32_t n, float *logits,
                                  double *modeled_s_p)
{
    cost_state_t *s      = state;
    uint32_t      prefix = kv ? kv->seqs[seq].n_tokens : 0;

    (void)tokens;
    (void)logits;
    *modeled_s_p = moon_cost_prefill_s(&s->cost, prefix, n);
    return MOON_OK;
}

static moon_status_t cost_decode(void *state, moon_kv_cache_t *kv, const uint32_t *seqs,
                                 const int32_t *tokens, uint32_t n_seqs, float *logits,
                                 double *modeled_s_p)
{
    cost_state_t *s   = state;
    uint64_t      ctx = 0;

    (void)tokens;
    (void)logits;
    for (uint32_t b = 0; kv != NULL && b < n_seqs; b++) {
        ctx += kv->seqs[seqs[b]].n_tokens + 1;
    }
    *modeled_s_p = moon_cost_decode_s(&s->cost, n_seqs, ctx);
    return MOON_OK;
}

const moon_model_backend_ops_t moon_backend_cost_ops = {
    .name    = "cost",
    .create  = cost_create,
    .destroy = cost_destroy,
    .prefill = cost_prefill,
    .decode  = cost_decode,
    .kv_f16  = 1,
};
