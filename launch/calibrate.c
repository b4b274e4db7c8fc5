/* launch/calibrate.c - timing an engine and fitting the cost model
 * (calibrate.h). Durations are the engine's own (wall time, or modeled for
 * COST, which makes a COST engine's calibration exact: the tests use that). */
#include "calibrate.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/sched_cost.h"

#include <stdlib.h>
#include <string.h>

#define CAL_MAX_POINTS 64

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

typedef struct {
    moon_engine_t   *engine;
    moon_kv_cache_t *kv;
    int32_t         *tokens; /* (ctx) */
    uint32_t        *seqs;   /* (max_batch) */
    uint32_t         repeats, max_chunk, vocab;
    FILE            *samples;
} cal_t;

/* Prefills n tokens of seq at its end in chunks of max_chunk; *s_p: their time. */
static moon_status_t prefill(cal_t *c, uint32_t seq, uint32_t n, double *s_p)
{
    double        total = 0.0, d = 0.0;
    moon_status_t status = MOON_OK;

    for (uint32_t done = 0; status == MOON_OK && done < n; done += c->max_chunk) {
        uint32_t k = n - done < c->max_chunk ? n - done : c->max_chunk;
        status     = moon_engine_prefill(c->engine, c->kv, seq, c->tokens + done, k, NULL, &d);
        total += d;
    }
    *s_p = total;
    return status;
}

/* Median over repeats of prefilling n after a prefix of p. */
static moon_status_t time_prefill(cal_t *c, uint32_t p, uint32_t n, double *s_p)
{
    double        t[16], skip;
    moon_status_t status = MOON_OK;
    uint32_t      seq;

    for (uint32_t r = 0; status == MOON_OK && r < c->repeats; r++) {
        status = moon_kv_seq_create(c->kv, &seq);
        if (status != MOON_OK) {
            break;
        }
        status = p > 0 ? prefill(c, seq, p, &skip) : MOON_OK;
        if (status == MOON_OK) {
            status = prefill(c, seq, n, &t[r]);
        }
        moon_kv_seq_destroy(c->kv, seq);
    }
    if (status == MOON_OK) {
        qsort(t, c->repeats, sizeof(double), cmp_dbl);
        *s_p = t[c->repeats / 2];
    }
    return status;
}

/* Median over repeats of one decode step of b sequences of ctx tokens. */
static moon_status_t time_decode(cal_t *c, uint32_t b, uint32_t ctx, double *s_p)
{
    double        t[16], skip;
    moon_status_t status = MOON_OK;
    uint32_t      made   = 0;

    for (; made < b; made++) {
        status = moon_kv_seq_create(c->kv, &c->seqs[made]);
        if (status != MOON_OK) {
            break;
        }
        status = prefill(c, c->seqs[made], ctx, &skip);
        if (status != MOON_OK) {
            made++; /* created: destroyed below */
            break;
        }
    }
    for (uint32_t r = 0; status == MOON_OK && r < c->repeats; r++) {
        status = moon_engine_decode(c->engine, c->kv, c->seqs, c->tokens, b, NULL, &t[r]);
    }
    for (uint32_t i = 0; i < made; i++) {
        moon_kv_seq_destroy(c->kv, c->seqs[i]);
    }
    if (status == MOON_OK) {
        qsort(t, c->repeats, sizeof(double), cmp_dbl);
        *s_p = t[c->repeats / 2];
    }
    return status;
}

static moon_status_t measure(cal_t *c, uint32_t ctx, uint32_t max_batch, moon_cost_fit_t *fit_p)
{
    moon_sched_prefill_sample_t ps[CAL_MAX_POINTS];
    moon_sched_decode_sample_t  ds[CAL_MAX_POINTS];
    moon_sched_cost_t           cost;
    uint32_t                    np = 0, nd = 0;
    moon_status_t               status = MOON_OK;

    for (uint32_t div = 16; status == MOON_OK && div >= 2; div /= 2) {
        uint32_t n = ctx / div ? ctx / div : 1; /* longer than a chunk: chunked, as served */
        for (uint32_t p = 0; status == MOON_OK && p <= n && p + n < ctx; p += n) {
            status          = time_prefill(c, p, n, &ps[np].seconds);
            ps[np].n_new    = n;
            ps[np].n_prefix = p;
            if (status == MOON_OK && c->samples != NULL) {
                fprintf(c->samples,
                        "{\"kind\": \"prefill\", \"n_new\": %u, \"n_prefix\": %u, "
                        "\"seconds\": %.9g}\n",
                        n, p, ps[np].seconds);
            }
            np++;
        }
    }
    for (uint32_t b = 1; status == MOON_OK && b <= max_batch; b *= 2) {
        for (uint32_t div = 8; status == MOON_OK && div >= 2; div /= 4) {
            uint32_t cx  = ctx / div ? ctx / div : 1;
            status       = time_decode(c, b, cx, &ds[nd].seconds);
            ds[nd].batch = b;
            /* each repeat's step reads one more token per sequence: the median's */
            ds[nd].ctx_tokens = (uint64_t)b * (cx + 1 + c->repeats / 2);
            if (status == MOON_OK && c->samples != NULL) {
                fprintf(c->samples,
                        "{\"kind\": \"decode\", \"batch\": %u, \"ctx_tokens\": %llu, "
                        "\"seconds\": %.9g}\n",
                        b, (unsigned long long)ds[nd].ctx_tokens, ds[nd].seconds);
            }
            nd++;
        }
    }
    if (status != MOON_OK) {
        MOON_ERROR("calibrate: timing the engine failed: %s", moon_status_str(status));
        return status;
    }
    memset(&cost, 0, sizeof(cost));
    status = moon_sched_cost_fit_prefill(ps, np, &cost);
    if (status == MOON_OK) {
        status = moon_sched_cost_fit_decode(ds, nd, &cost);
    }
    if (status != MOON_OK) {
        return status;
    }
    *fit_p = (moon_cost_fit_t){.enabled = 1,
                               .a0      = cost.a0,
                               .a1      = cost.a1,
                               .a2      = cost.a2,
                               .d0      = cost.d0,
                               .d1      = cost.d1,
                               .d2      = cost.d2};
    return MOON_OK;
}

moon_status_t moon_calibrate_engine(const moon_model_t *model, moon_engine_t *engine,
                                    const moon_engine_config_t  *ecfg,
                                    const moon_calibrate_opts_t *opts, moon_cost_fit_t *fit_p)
{
    const moon_model_config_t *mc;
    moon_calibrate_opts_t      o = {0};
    moon_kv_config_t           kcfg;
    cal_t                      c;
    uint32_t                   ctx, max_batch;
    moon_status_t              status;

    if (model == NULL || engine == NULL || ecfg == NULL || fit_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (opts != NULL) {
        o = *opts;
    }
    mc        = moon_model_config(model);
    ctx       = mc->seq_len;
    max_batch = o.max_batch ? o.max_batch : 16;
    if (ecfg->max_batch && max_batch > ecfg->max_batch) {
        max_batch = ecfg->max_batch;
    }
    memset(&c, 0, sizeof(c));
    c.engine    = engine;
    c.repeats   = o.repeats ? (o.repeats > 15 ? 15 : o.repeats) : 3;
    c.max_chunk = ecfg->max_chunk ? ecfg->max_chunk : 512;
    c.samples   = o.samples;
    if (ctx < 4 || mc->vocab_size < 4) {
        return MOON_ERR_INVALID_PARAM;
    }
    /* room for max_batch sequences of half a context, plus one full one */
    kcfg     = moon_model_kv_config(mc, 16, (max_batch + 2) * ((ctx + 15) / 16), max_batch + 1);
    status   = moon_kv_cache_create(&kcfg, &c.kv);
    c.tokens = moon_malloc((size_t)ctx * sizeof(int32_t));
    c.seqs   = moon_malloc((size_t)max_batch * sizeof(uint32_t));
    if (status == MOON_OK && (c.tokens == NULL || c.seqs == NULL)) {
        status = MOON_ERR_NO_MEMORY;
    }
    if (status == MOON_OK) {
        for (uint32_t i = 0; i < ctx; i++) {
            c.tokens[i] = (int32_t)(3 + i * 7919u % (mc->vocab_size - 3));
        }
        status = measure(&c, ctx, max_batch, fit_p);
    }
    moon_free(c.tokens);
    moon_free(c.seqs);
    moon_kv_cache_destroy(c.kv);
    return status;
}
