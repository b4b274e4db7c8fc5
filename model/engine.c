/* model/engine.c - the engine front end: picks a backend once at create,
 * checks arguments, reserves KV room, times the call and advances sequence
 * lengths. Driven by one thread at a time. */
#include "model_internal.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <time.h>

struct moon_engine {
    const moon_model_backend_ops_t *ops;
    void                           *state;
    const moon_model_t             *model;
    moon_engine_config_t            cfg; /* cfg.tuning points at tuning */
    moon_engine_tuning_t            tuning;
    moon_model_config_t             shape;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The backend of kind, NULL when unknown or not built in (CUDA). */
static const moon_model_backend_ops_t *backend_ops(moon_backend_kind_t kind)
{
    switch (kind) {
    case MOON_BACKEND_REF:
        return &moon_backend_ref_ops;
    case MOON_BACKEND_CPU:
        return &moon_backend_cpu_ops;
    case MOON_BACKEND_COST:
        return &moon_backend_cost_ops;
#ifdef MOON_WITH_CUDA
    case MOON_BACKEND_CUDA:
        return &moon_backend_cuda_ops;
#endif
    default:
        return NULL;
    }
}

moon_status_t moon_backend_kv_type(moon_backend_kind_t kind, moon_kv_type_t want,
                                   moon_kv_type_t *type_p)
{
    const moon_model_backend_ops_t *ops = backend_ops(kind);
    /* not built in (CUDA): what it reads once built; F32 today */
    int f16 = ops != NULL ? ops->kv_f16 : 0;

    if (ops == NULL && kind != MOON_BACKEND_CUDA) {
        MOON_ERROR("engine: no backend of kind %d", (int)kind);
        return MOON_ERR_INVALID_PARAM;
    }
    if (want == MOON_KV_AUTO) {
        want = f16 ? MOON_KV_F16 : MOON_KV_F32;
    }
    if (moon_kv_type_bytes(want) == 0) {
        MOON_ERROR("engine: kv cache type %d is neither f32 nor f16", (int)want);
        return MOON_ERR_UNSUPPORTED;
    }
    if (want == MOON_KV_F16 && !f16) {
        MOON_ERROR("engine: the %s backend reads an f32 kv cache only",
                   ops != NULL ? ops->name : "cuda");
        return MOON_ERR_UNSUPPORTED;
    }
    *type_p = want;
    return MOON_OK;
}

moon_status_t moon_engine_create(const moon_model_t *model, const moon_engine_config_t *cfg,
                                 moon_engine_t **engine_p)
{
    moon_engine_t *e;
    moon_status_t  status;

    if (cfg == NULL || engine_p == NULL || (model == NULL && cfg->kind != MOON_BACKEND_COST)) {
        return MOON_ERR_INVALID_PARAM;
    }
    e = moon_calloc(1, sizeof(*e));
    if (e == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    e->cfg   = *cfg;
    e->model = model;
    if (cfg->tuning != NULL) {
        e->tuning = *cfg->tuning;
    } else if ((status = moon_engine_tuning_default(&e->tuning)) != MOON_OK) {
        moon_free(e);
        return status;
    }
    e->cfg.tuning = &e->tuning; /* backends read it at create, never NULL */
    if (e->cfg.max_batch == 0) {
        e->cfg.max_batch = 64;
    }
    if (e->cfg.max_chunk == 0) {
        e->cfg.max_chunk = 512;
    }
    e->shape = model ? model->cfg : cfg->cost.shape;
    if (cfg->cost.shape.n_layers == 0) {
        e->cfg.cost.shape = e->shape; /* COST models the loaded model's own shape */
    }
    e->ops = backend_ops(cfg->kind);
    if (e->ops == NULL) {
        moon_free(e);
        return cfg->kind == MOON_BACKEND_CUDA ? MOON_ERR_UNSUPPORTED : MOON_ERR_INVALID_PARAM;
    }
    status = e->ops->create(model, &e->cfg, &e->state);
    if (status != MOON_OK) {
        moon_free(e);
        return status;
    }
    *engine_p = e;
    return MOON_OK;
}

void moon_engine_destroy(moon_engine_t *e)
{
    if (e == NULL) {
        return;
    }
    e->ops->destroy(e->state);
    moon_free(e);
}

const char *moon_engine_name(const moon_engine_t *e)
{
    return e->ops->name;
}

static int kv_matches(const moon_engine_t *e, const moon_kv_cache_t *kv)
{
    const moon_kv_config_t *k = &kv->cfg;
    return k->n_layers == e->shape.n_layers && k->n_kv_heads == e->shape.n_kv_heads &&
           k->head_dim == e->shape.head_dim && k->max_seq_len <= e->shape.seq_len &&
           (k->elem_type == MOON_KV_F32 || e->ops->kv_f16) &&
           (kv->data != NULL || e->cfg.kind == MOON_BACKEND_COST); /* virtual: COST only */
}

/* Both prefills: rows 0 runs the backend's prefill (logits: the last row's),
 * rows 1 its prefill_rows (every row's logits and hidden states). */
static moon_status_t prefill_any(moon_engine_t *e, moon_kv_cache_t *kv, uint32_t seq,
                                 const int32_t *tokens, uint32_t n, float *logits, float *hidden,
                                 int rows, double *duration_s_p)
{
    double        modeled = -1.0, t0;
    uint32_t      len0    = 0;
    moon_status_t status;

    if (e == NULL || tokens == NULL || n == 0 || n > e->cfg.max_chunk ||
        (kv == NULL && e->cfg.kind != MOON_BACKEND_COST)) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (rows && (e->ops->prefill_rows == NULL || kv == NULL)) {
        return MOON_ERR_UNSUPPORTED;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= e->shape.vocab_size) {
            return MOON_ERR_INVALID_PARAM;
        }
    }
    if (kv != NULL) {
        if (!kv_matches(e, kv) || seq >= kv->cfg.max_seqs || !kv->seqs[seq].used) {
            return MOON_ERR_INVALID_PARAM;
        }
        len0   = kv->seqs[seq].n_tokens;
        status = moon_kv_seq_reserve(kv, seq, n);
        if (status != MOON_OK) {
            return status;
        }
    }
    t0     = now_s();
    status = rows ? e->ops->prefill_rows(e->state, kv, seq, tokens, n, logits, hidden, &modeled)
                  : e->ops->prefill(e->state, kv, seq, tokens, n, logits, &modeled);
    if (kv != NULL && !e->ops->tags_writes) {
        moon_kv_mark_host_written(kv, seq, len0, n);
    }
    if (kv != NULL) {
        if (status == MOON_OK) {
            moon_kv_seq_advance(kv, seq, n);
        } else {
            moon_kv_seq_truncate(kv, seq, len0); /* give back the reserved blocks */
        }
    }
    if (status == MOON_OK && duration_s_p != NULL) {
        *duration_s_p = modeled >= 0.0 ? modeled : now_s() - t0;
    }
    return status;
}

moon_status_t moon_engine_prefill(moon_engine_t *e, moon_kv_cache_t *kv, uint32_t seq,
                                  const int32_t *tokens, uint32_t n, float *logits,
                                  double *duration_s_p)
{
    return prefill_any(e, kv, seq, tokens, n, logits, NULL, 0, duration_s_p);
}

moon_status_t moon_engine_prefill_rows(moon_engine_t *e, moon_kv_cache_t *kv, uint32_t seq,
                                       const int32_t *tokens, uint32_t n, float *logits,
                                       float *hidden, double *duration_s_p)
{
    return prefill_any(e, kv, seq, tokens, n, logits, hidden, 1, duration_s_p);
}

moon_status_t moon_engine_decode(moon_engine_t *e, moon_kv_cache_t *kv, const uint32_t *seqs,
                                 const int32_t *tokens, uint32_t n_seqs, float *logits,
                                 double *duration_s_p)
{
    double        modeled = -1.0, t0;
    moon_status_t status  = MOON_OK;
    uint32_t      done    = 0;

    if (e == NULL || tokens == NULL || n_seqs == 0 || n_seqs > e->cfg.max_batch ||
        (kv == NULL && e->cfg.kind != MOON_BACKEND_COST) || (kv != NULL && seqs == NULL)) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (kv != NULL && !kv_matches(e, kv)) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t b = 0; b < n_seqs; b++) {
        if (tokens[b] < 0 || (uint32_t)tokens[b] >= e->shape.vocab_size) {
            return MOON_ERR_INVALID_PARAM;
        }
        if (kv != NULL) {
            if (seqs[b] >= kv->cfg.max_seqs || !kv->seqs[seqs[b]].used) {
                return MOON_ERR_INVALID_PARAM;
            }
            for (uint32_t j = 0; j < b; j++) {
                if (seqs[j] == seqs[b]) {
                    return MOON_ERR_INVALID_PARAM;
                }
            }
        }
    }
    for (; kv != NULL && done < n_seqs; done++) {
        status = moon_kv_seq_reserve(kv, seqs[done], 1);
        if (status != MOON_OK) {
            break;
        }
    }
    if (status == MOON_OK) {
        t0     = now_s();
        status = e->ops->decode(e->state, kv, seqs, tokens, n_seqs, logits, &modeled);
        if (status == MOON_OK && duration_s_p != NULL) {
            *duration_s_p = modeled >= 0.0 ? modeled : now_s() - t0;
        }
    }
    for (uint32_t b = 0; kv != NULL && b < done; b++) {
        if (!e->ops->tags_writes) {
            moon_kv_mark_host_written(kv, seqs[b], kv->seqs[seqs[b]].n_tokens, 1);
        }
        if (status == MOON_OK) {
            moon_kv_seq_advance(kv, seqs[b], 1);
        } else {
            moon_kv_seq_truncate(kv, seqs[b], kv->seqs[seqs[b]].n_tokens);
        }
    }
    return status;
}

const moon_cost_config_t *moon_engine_cost_config(const moon_engine_t *e)
{
    return e != NULL && e->cfg.kind == MOON_BACKEND_COST ? &e->cfg.cost : NULL;
}

moon_status_t moon_engine_model_prefill(const moon_engine_t *e, uint64_t n_prefix, uint64_t n,
                                        double *duration_s_p)
{
    if (e == NULL || duration_s_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (e->cfg.kind != MOON_BACKEND_COST) {
        return MOON_ERR_UNSUPPORTED;
    }
    if (n == 0 || n > e->cfg.max_chunk || n_prefix + n > e->shape.seq_len) {
        return MOON_ERR_INVALID_PARAM;
    }
    *duration_s_p = moon_cost_prefill_s(&e->cfg.cost, n_prefix, n);
    return MOON_OK;
}

moon_status_t moon_engine_model_decode(const moon_engine_t *e, const uint32_t *ctx_lens,
                                       uint32_t n_seqs, double *duration_s_p)
{
    uint64_t ctx = 0;

    if (e == NULL || ctx_lens == NULL || duration_s_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (e->cfg.kind != MOON_BACKEND_COST) {
        return MOON_ERR_UNSUPPORTED;
    }
    if (n_seqs == 0 || n_seqs > e->cfg.max_batch) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t b = 0; b < n_seqs; b++) {
        if ((uint64_t)ctx_lens[b] + 1 > e->shape.seq_len) {
            return MOON_ERR_INVALID_PARAM;
        }
        ctx += (uint64_t)ctx_lens[b] + 1; /* this step's token is read too */
    }
    *duration_s_p = moon_cost_decode_s(&e->cfg.cost, n_seqs, ctx);
    return MOON_OK;
}
