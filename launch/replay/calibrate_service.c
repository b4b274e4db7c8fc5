/* launch/replay/calibrate_service.c - refitting a profile from a real cluster's
 * service (calibrate_service.h): real replays of the slice, the prefill
 * refit and the message latency from its records, then the step gap
 * against simulated replays of the same slice. */
#include "calibrate_service.h"

#include "moonlet/serve_cluster.h"
#include "sim_run.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/sched_cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CAL_MIN_BINS 3     /* sample lengths a fit of three terms needs */
#define CAL_BIN_NEW 16     /* tokens: requests this close in new ... */
#define CAL_BIN_PREFIX 64  /* ... and cached tokens are one sample */
#define CAL_GAP_ROUNDS 3   /* step gap re-measurements (each one simulated replay) */
#define CAL_GAP_CLOSE 0.02 /* ... until the simulated TBT is this close (relative) */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (reordered); 0 for n = 0. */
static double median(double *v, uint32_t n)
{
    if (n == 0) {
        return 0.0;
    }
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int finished(const moon_sim_record_t *x)
{
    return x->status == MOON_SIM_REQ_OK && x->first_token_ns > x->arrival_ns &&
           x->prefill_start_ns != UINT64_MAX;
}

typedef enum { M_TTFT, M_TBT, M_ENDS } measure_t;

/* Median of one measure over the finished requests (scratch: recs->n). */
static double median_of(const moon_sim_records_t *recs, measure_t m, double *scratch)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < recs->n; i++) {
        const moon_sim_record_t *x    = &recs->recs[i];
        double                   ttft = (double)(x->first_token_ns - x->arrival_ns) * 1e-9;

        if (!finished(x)) {
            continue;
        }
        if (m == M_TTFT) {
            scratch[n++] = ttft;
        } else if (m == M_TBT && x->output_tokens >= 2) {
            scratch[n++] = (double)x->tbt_ns * 1e-9;
        } else if (m == M_ENDS && x->decode_ttft_ns > 0) {
            /* the instances count from the conductor's arrival to the decode
             * taking the first token; the rest is the SUBMIT's and the first
             * TOKEN's way */
            scratch[n++] = fmax(0.0, ttft - (double)x->decode_ttft_ns * 1e-9);
        }
    }
    return median(scratch, n);
}

/* One request's service at its prefill instance less what the simulator
 * charges there anyway: its engine calls' start-up cost (a0 and the
 * hand-off, per chunk) and the hand-over message to the decode. */
static int service_sample(const moon_sim_record_t *x, const moon_profile_t *p, uint32_t chunk,
                          moon_sched_prefill_sample_t *s)
{
    uint64_t queue = x->prefill_start_ns - x->arrival_ns; /* the instances' own queue_ns */
    uint64_t n_new;
    double   calls;

    if (!finished(x) || x->decode_ttft_ns <= queue || x->prefix_hit_tokens >= x->input_tokens) {
        return 0;
    }
    n_new = x->input_tokens - x->prefix_hit_tokens;
    calls = (double)((n_new + chunk - 1) / chunk);
    *s    = (moon_sched_prefill_sample_t){
           .n_new    = n_new,
           .n_prefix = x->prefix_hit_tokens,
           .seconds  = (double)(x->decode_ttft_ns - queue) * 1e-9 -
                      calls * (p->fit.a0 + p->fit_handoff_s) - p->network.latency_s,
    };
    return 1;
}

static int cmp_sample(const void *a, const void *b)
{
    const moon_sched_prefill_sample_t *x = a, *y = b;

    if (x->n_prefix / CAL_BIN_PREFIX != y->n_prefix / CAL_BIN_PREFIX) {
        return x->n_prefix < y->n_prefix ? -1 : 1;
    }
    return x->n_new < y->n_new ? -1 : x->n_new > y->n_new;
}

static int cmp_seconds(const void *a, const void *b)
{
    const moon_sched_prefill_sample_t *x = a, *y = b;

    return x->seconds < y->seconds ? -1 : x->seconds > y->seconds;
}

/* The samples of the finished requests, one per bin of similar lengths into
 * s (the bin's mean lengths, its median seconds): single requests in
 * service are noisy with a long tail (a call that lost its core), which a
 * deterministic model cannot give only some requests; the typical request
 * is what the TTFT median follows. Returns the bins. */
static uint32_t binned_samples(const moon_sim_records_t *recs, const moon_profile_t *p,
                               uint32_t chunk, moon_sched_prefill_sample_t *s)
{
    uint32_t n = 0, out = 0;

    for (uint32_t i = 0; i < recs->n; i++) {
        n += service_sample(&recs->recs[i], p, chunk, &s[n]);
    }
    qsort(s, n, sizeof(*s), cmp_sample);
    for (uint32_t i = 0; i < n;) {
        double   sum_new = 0.0, sum_prefix = 0.0, mid;
        uint32_t j = i;

        for (; j < n && s[j].n_prefix / CAL_BIN_PREFIX == s[i].n_prefix / CAL_BIN_PREFIX &&
               s[j].n_new / CAL_BIN_NEW == s[i].n_new / CAL_BIN_NEW;
             j++) {
            sum_new += (double)s[j].n_new;
            sum_prefix += (double)s[j].n_prefix;
        }
        qsort(s + i, j - i, sizeof(*s), cmp_seconds);
        mid = (j - i) % 2 ? s[i + (j - i) / 2].seconds
                          : 0.5 * (s[i + (j - i) / 2 - 1].seconds + s[i + (j - i) / 2].seconds);
        /* a bin the per-call costs already explain adds nothing to fit */
        if (mid > 0.0) {
            s[out++] = (moon_sched_prefill_sample_t){
                .n_new    = (uint64_t)(sum_new / (j - i) + 0.5),
                .n_prefix = (uint64_t)(sum_prefix / (j - i) + 0.5),
                .seconds  = mid,
            };
        }
        i = j;
    }
    return out;
}

static moon_sim_run_config_t run_config(const moon_cal_service_config_t *c, const moon_profile_t *p)
{
    return (moon_sim_run_config_t){.trace         = c->trace,
                                   .profile       = p,
                                   .policy        = c->policy,
                                   .nodes_prefill = c->nodes_prefill,
                                   .nodes_decode  = c->nodes_decode,
                                   .block_tokens  = c->block_tokens,
                                   /* no SLO: no early rejection or shedding,
                                    * every request of the slice is a sample */
                                   .ttft_slo_s = 0.0,
                                   .tbt_slo_s  = 0.0,
                                   .time_scale = c->time_scale,
                                   .seed       = c->seed,
                                   .model_path = c->model_path,
                                   .threads    = c->threads,
                                   .backend    = MOON_BACKEND_CPU};
}

/* The simulator's replay of the slice with p: its TTFT and TBT medians. */
static moon_status_t simulate(const moon_cal_service_config_t *c, const moon_profile_t *p,
                              double *scratch, double *ttft_p, double *tbt_p)
{
    moon_sim_run_config_t rc = run_config(c, p);
    moon_sim_records_t    recs;
    moon_status_t         status = moon_sim_records_init(&recs, (uint32_t)c->trace->n_reqs);

    if (status == MOON_OK) {
        status = moon_replay_sim_run(&rc, &recs);
    }
    if (status == MOON_OK) {
        *ttft_p = median_of(&recs, M_TTFT, scratch);
        *tbt_p  = median_of(&recs, M_TBT, scratch);
    }
    moon_sim_records_fini(&recs);
    return status;
}

/* The message latency, then the prefill refit, from the real records into
 * p: a per-request constant (request_s, where the fit's a0 lands: every
 * sample is one request), a1 and a2; a0 stays the engine's per call. */
static moon_status_t refit_prefill(const moon_sim_records_t *real, uint32_t chunk, double *scratch,
                                   moon_profile_t *p)
{
    moon_sched_prefill_sample_t *s = moon_calloc(real->n, sizeof(*s));
    moon_sched_cost_t            cost;
    uint32_t                     n;
    moon_status_t                status;

    if (s == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    p->network.latency_s = 0.5 * median_of(real, M_ENDS, scratch);
    n                    = binned_samples(real, p, chunk, s);
    if (n < CAL_MIN_BINS) {
        MOON_ERROR("calibrate: the slice's finished requests make %u sample lengths (%d needed)", n,
                   CAL_MIN_BINS);
        moon_free(s);
        return MOON_ERR_NO_RESOURCE;
    }
    memset(&cost, 0, sizeof(cost));
    status = moon_sched_cost_fit_prefill(s, n, &cost);
    moon_free(s);
    if (status != MOON_OK) {
        return status;
    }
    p->fit_request_s = cost.a0;
    p->fit.a1        = cost.a1;
    p->fit.a2        = cost.a2;
    MOON_INFO("calibrate: in service over %u lengths: prefill %.3g per request + %.3g n + "
              "%.3g n^2 s, message %.3g s",
              n, p->fit_request_s, p->fit.a1, p->fit.a2, p->network.latency_s);
    return MOON_OK;
}

/* cfg->real_runs real replays of the slice, their records one after the
 * other in *pooled_p (initialised here; the caller finis it): the machine's
 * load moves between runs, and a fit on one would follow one moment. */
static moon_status_t replay_real(const moon_cal_service_config_t *cfg, const moon_profile_t *p,
                                 moon_sim_records_t *pooled_p)
{
    moon_sim_run_config_t rc     = run_config(cfg, p);
    uint32_t              n      = (uint32_t)cfg->trace->n_reqs;
    uint32_t              runs   = cfg->real_runs ? cfg->real_runs : 1;
    moon_status_t         status = moon_sim_records_init(pooled_p, runs * n);

    for (uint32_t k = 0; status == MOON_OK && k < runs; k++) {
        moon_sim_records_t one;

        status = moon_sim_records_init(&one, n);
        if (status == MOON_OK) {
            status = moon_replay_real_run(&rc, &one);
        }
        for (uint32_t i = 0; status == MOON_OK && i < n; i++) {
            moon_sim_record_t *x = &pooled_p->recs[k * n + i];
            *x                   = one.recs[i];
            x->gaps_ns           = NULL; /* one's, freed with it (TBT is computed by now) */
            x->n_gaps = x->cap_gaps = 0;
        }
        moon_sim_records_fini(&one);
    }
    return status;
}

moon_status_t moon_calibrate_service(const moon_cal_service_config_t *cfg, moon_profile_t *profile,
                                     moon_cal_service_report_t *report_p)
{
    moon_profile_t            p;
    moon_serve_config_t       sc;
    moon_sim_records_t        real;
    moon_cal_service_report_t r;
    double                   *scratch;
    moon_status_t             status;

    if (cfg == NULL || profile == NULL || !profile->fit.enabled || cfg->trace == NULL ||
        cfg->trace->n_reqs == 0 || cfg->model_path == NULL) {
        MOON_ERROR("calibrate: the in-service step needs a trace slice, a model and a fit");
        return MOON_ERR_INVALID_PARAM;
    }
    p = *profile;
    memset(&r, 0, sizeof(r));
    moon_serve_config_default(&sc); /* the real instances' prefill chunk */
    scratch =
        moon_calloc(cfg->trace->n_reqs * (cfg->real_runs ? cfg->real_runs : 1), sizeof(*scratch));
    if (scratch == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = replay_real(cfg, &p, &real);
    if (status == MOON_OK) {
        status = refit_prefill(&real, sc.prefill_chunk, scratch, &p);
    }

    if (status == MOON_OK) {
        r.real_ttft_median_s = median_of(&real, M_TTFT, scratch);
        r.real_tbt_median_s  = median_of(&real, M_TBT, scratch);
        for (uint32_t i = 0; i < real.n; i++) {
            r.n_requests += finished(&real.recs[i]);
        }
        p.fit_step_gap_s = 0.0;
    }
    /* the step gap: what the simulator's TBT lacks, re-measured after each
     * correction (a longer step batches more, so the first guess is short) */
    for (int round = 0; status == MOON_OK && round <= CAL_GAP_ROUNDS; round++) {
        double miss;

        status = simulate(cfg, &p, scratch, &r.sim_ttft_median_s, &r.sim_tbt_median_s);
        miss   = r.real_tbt_median_s - r.sim_tbt_median_s;
        if (status != MOON_OK || round == CAL_GAP_ROUNDS ||
            fabs(miss) <= CAL_GAP_CLOSE * r.real_tbt_median_s) {
            break;
        }
        p.fit_step_gap_s = fmax(0.0, p.fit_step_gap_s + miss);
    }
    moon_sim_records_fini(&real);
    moon_free(scratch);
    if (status == MOON_OK) {
        MOON_INFO("calibrate: step gap %.3g s; slice TTFT median real %.3g s sim %.3g s, TBT "
                  "median real %.3g s sim %.3g s",
                  p.fit_step_gap_s, r.real_ttft_median_s, r.sim_ttft_median_s, r.real_tbt_median_s,
                  r.sim_tbt_median_s);
        *profile = p;
        if (report_p != NULL) {
            *report_p = r;
        }
    }
    return status;
}
