/* actors/instance/serve_calibrate.c - timing the engine at start-up, fitting the cost
 * model the conductor predicts with; timing the engine runner's hand-off. */
#include "serve_calibrate.h"

#include "engine_runner.h"
#include "moonlet/serve_msgs.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define CAL_REPS 5 /* best of: a shared machine's noise only ever adds time */
#define CAL_MIN_REPS 2
#define CAL_SAMPLE_S 0.2
#define CAL_MAX_SAMPLES 16

/* Tokens of a sample prompt: any ids of the vocabulary (timing only). */
static void fill_tokens(int32_t *t, uint32_t n, uint32_t vocab)
{
    for (uint32_t i = 0; i < n; i++) {
        t[i] = (int32_t)(3 + (i * 7919u) % (vocab > 4 ? vocab - 3 : 1));
    }
}

/* A sequence of c tokens whose K/V are a constant: a decode step's or a
 * prefill's time depends on how many positions it attends to, not on their
 * values. Prefilling them instead (for decode, b sequences of up to ctx / 4
 * tokens for every batch size) made a 110M model's start-up take minutes.
 * The bytes are written (a small finite value in F32, F16 and BF16) so the
 * step reads memory of its own, as a real batch does, not the zero page. */
static moon_status_t sized_seq(moon_kv_cache_t *kv, uint32_t c, uint32_t *seq_p)
{
    moon_status_t status = moon_kv_seq_create(kv, seq_p);

    if (status == MOON_OK && (status = moon_kv_seq_reserve(kv, *seq_p, c)) != MOON_OK) {
        moon_kv_seq_destroy(kv, *seq_p);
    }
    if (status != MOON_OK) {
        return status;
    }
    moon_kv_seq_advance(kv, *seq_p, c);
    for (uint32_t i = 0; i < moon_kv_seq_n_blocks(kv, *seq_p); i++) {
        uint32_t block = moon_kv_seq_block(kv, *seq_p, i);
        void    *data  = moon_kv_block_data(kv, block);
        if (data != NULL) { /* NULL: a modeled cache (simulation) */
            memset(data, 0x3c, moon_kv_block_bytes(kv));
            moon_kv_block_mark_written(kv, block);
        }
    }
    return MOON_OK;
}

/* Whether a sample has had runs enough: max of them, or CAL_MIN_REPS once
 * its runs took CAL_SAMPLE_S. Noise is a small part of a long run, and best
 * of 5 of every sample was most of a 110M F32 model's start-up: 2,480 timed
 * prefill tokens, about 10 s on one core. Short samples (a small model's)
 * still run max times. */
static int runs_enough(int runs, int max, double spent_s)
{
    return runs >= max || (runs >= CAL_MIN_REPS && spent_s >= CAL_SAMPLE_S);
}

/* Best of up to CAL_REPS prefills of n tokens after a prefix of p. */
static moon_status_t time_prefill(moon_engine_t *e, moon_kv_cache_t *kv, const int32_t *tok,
                                  uint32_t p, uint32_t n, double *best_p)
{
    double best = -1.0, spent = 0.0;

    for (int r = 0; !runs_enough(r, CAL_REPS, spent); r++) {
        uint32_t      seq;
        double        dur    = 0.0;
        moon_status_t status = sized_seq(kv, p, &seq);
        if (status != MOON_OK) {
            return status;
        }
        status = moon_engine_prefill(e, kv, seq, tok + p, n, NULL, &dur);
        moon_kv_seq_destroy(kv, seq);
        if (status != MOON_OK) {
            return status;
        }
        best = best < 0.0 || dur < best ? dur : best;
        spent += dur;
    }
    *best_p = best;
    return MOON_OK;
}

static moon_status_t calibrate_prefill(moon_engine_t *e, moon_kv_cache_t *kv, const int32_t *tok,
                                       uint32_t ctx, uint32_t chunk, moon_sched_cost_t *cost)
{
    const uint32_t              fr[][2] = {{0, 8}, {0, 4}, {0, 2}, {0, 1}, {1, 1}, {2, 1}};
    moon_sched_prefill_sample_t s[CAL_MAX_SAMPLES];
    uint32_t                    n = 0;

    /* {prefix in chunks, new tokens as chunk / k} */
    for (uint32_t i = 0; i < MOON_ARRAY_SIZE(fr); i++) {
        uint32_t p = fr[i][0] * chunk, m = chunk / fr[i][1];
        if (m == 0 || p + m >= ctx || time_prefill(e, kv, tok, p, m, &s[n].seconds) != MOON_OK) {
            continue;
        }
        s[n].n_prefix = p;
        s[n].n_new    = m;
        n++;
    }
    return n > 0 ? moon_sched_cost_fit_prefill(s, n, cost) : MOON_ERR_NO_RESOURCE;
}

static moon_status_t time_decode(moon_engine_t *e, moon_kv_cache_t *kv, const int32_t *tok,
                                 uint32_t b, uint32_t c, double *best_p)
{
    uint32_t      seqs[256];
    uint32_t      made = 0;
    double        best = -1.0, spent = 0.0;
    moon_status_t status = MOON_OK;

    for (; made < b && status == MOON_OK; made++) {
        if ((status = sized_seq(kv, c, &seqs[made])) != MOON_OK) {
            break;
        }
    }
    for (int r = 0; status == MOON_OK && !runs_enough(r, CAL_REPS + 1, spent); r++) {
        double dur = 0.0;
        status     = moon_engine_decode(e, kv, seqs, tok, b, NULL, &dur);
        best       = best < 0.0 || dur < best ? dur : best;
        spent += dur;
    }
    for (uint32_t i = 0; i < made; i++) {
        moon_kv_seq_destroy(kv, seqs[i]);
    }
    *best_p = best;
    return status;
}

static moon_status_t calibrate_decode(moon_engine_t *e, moon_kv_cache_t *kv, const int32_t *tok,
                                      uint32_t ctx, uint32_t max_batch, moon_sched_cost_t *cost)
{
    moon_sched_decode_sample_t s[CAL_MAX_SAMPLES];
    uint32_t                   n = 0;

    for (uint32_t b = 1; b <= max_batch && b <= 256 && n + 2 <= CAL_MAX_SAMPLES; b *= 2) {
        const uint32_t cs[2] = {16, ctx / 4};
        for (uint32_t k = 0; k < 2; k++) {
            uint32_t c = cs[k];
            if (c == 0 || c + CAL_REPS + 2 >= ctx ||
                time_decode(e, kv, tok, b, c, &s[n].seconds) != MOON_OK) {
                continue;
            }
            s[n].batch      = b;
            s[n].ctx_tokens = (uint64_t)b * c;
            n++;
        }
    }
    return n > 0 ? moon_sched_cost_fit_decode(s, n, cost) : MOON_ERR_NO_RESOURCE;
}

moon_status_t moon_serve_calibrate(moon_engine_t *e, moon_kv_cache_t *kv, uint32_t vocab,
                                   uint32_t chunk, uint32_t max_batch, moon_sched_cost_t *cost)
{
    uint32_t      ctx    = moon_kv_cache_config(kv)->max_seq_len;
    int32_t      *tok    = moon_malloc((size_t)ctx * sizeof(*tok));
    moon_status_t status = MOON_OK;

    if (tok == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    fill_tokens(tok, ctx, vocab);
    if (chunk > 0) {
        status = calibrate_prefill(e, kv, tok, ctx, chunk, cost);
    }
    if (status == MOON_OK && max_batch > 0) {
        status = calibrate_decode(e, kv, tok, ctx, max_batch, cost);
    }
    if (status == MOON_OK) {
        MOON_INFO(
            "calibrated %s: prefill %.3g + %.3g n + %.3g n^2 s, step %.3g + %.3g b + %.3g ctx "
            "s",
            moon_engine_name(e), cost->a0, cost->a1, cost->a2, cost->d0, cost->d1, cost->d2);
    }
    moon_free(tok);
    return status;
}

/* ---- the hand-off: an owner actor bouncing an empty job off its runner ---- */
typedef struct {
    moon_engine_runner_t *runner;
    uint32_t              left;
    double                t0, *seconds_p;
    _Atomic int          *done;
} bounce_t;

typedef struct {
    uint32_t     n;
    double      *seconds_p;
    _Atomic int *done;
} bounce_args_t;

static double wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static moon_status_t empty_job(void *arg, double *duration_s_p)
{
    (void)arg;
    *duration_s_p = 0.0;
    return MOON_OK;
}

static moon_status_t bounce_init(moon_actor_t *self, const void *args)
{
    const bounce_args_t *a  = args;
    bounce_t            *st = moon_actor_state(self);
    moon_status_t        status;

    st->left      = a->n;
    st->seconds_p = a->seconds_p;
    st->done      = a->done;
    status = moon_engine_runner_create(moon_actor_runtime(self), moon_actor_addr(self), 1, -1,
                                       &st->runner);
    if (status == MOON_OK) {
        st->t0 = wall_s();
        status = moon_engine_runner_submit(st->runner, self, empty_job, NULL, 0);
    }
    return status;
}

static moon_status_t bounce_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bounce_t     *st = moon_actor_state(self);
    uint64_t      job;
    moon_status_t status;
    double        dur;

    if (!moon_engine_runner_done(st->runner, msg, &job, &status, &dur)) {
        return MOON_OK;
    }
    if (--st->left > 0) {
        return moon_engine_runner_submit(st->runner, self, empty_job, NULL, job + 1);
    }
    *st->seconds_p = wall_s() - st->t0;
    atomic_store(st->done, 1); /* seq_cst: the time is visible first */
    moon_actor_exit(self, MOON_OK);
    return MOON_OK;
}

static void bounce_fini(moon_actor_t *self)
{
    moon_engine_runner_destroy(((bounce_t *)moon_actor_state(self))->runner);
}

static const moon_actor_ops_t bounce_ops = {
    .name        = "calibrate-handoff",
    .state_bytes = sizeof(bounce_t),
    .init        = bounce_init,
    .fini        = bounce_fini,
    .on_msg      = {[MOON_MSG_SERVE_ENGINE_DONE] = bounce_on_done},
};

moon_status_t moon_serve_calibrate_handoff(uint32_t n, double *seconds_p)
{
    moon_runtime_config_t rc;
    moon_runtime_t       *rt    = NULL;
    _Atomic int           done  = 0;
    double                total = 0.0;
    bounce_args_t         a     = {.n = n, .seconds_p = &total, .done = &done};
    moon_addr_t           addr;
    moon_status_t         status;

    if (n == 0 || seconds_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    moon_runtime_config_default(&rc);
    rc.n_workers = 1; /* as a serving rank runs its instances */
    status       = moon_serve_msgs_register();
    if (status == MOON_OK) {
        status = moon_runtime_create(&rc, &rt);
    }
    if (status == MOON_OK) {
        status = moon_runtime_start(rt);
    }
    if (status == MOON_OK) {
        status = moon_spawn(rt, &bounce_ops, &a, NULL, &addr);
    }
    while (status == MOON_OK && !atomic_load(&done)) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (rt != NULL) {
        moon_runtime_shutdown(rt, 0);
        moon_runtime_wait(rt);
        moon_runtime_destroy(rt);
    }
    if (status == MOON_OK) {
        *seconds_p = total / n;
        MOON_INFO("calibrated the engine hand-off: %.3g s per call", *seconds_p);
    }
    return status;
}
