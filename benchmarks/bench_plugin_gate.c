/* benchmarks/bench_plugin_gate.c - what one request filter adds to a
 * request's way to its first token, and what a token observer adds to a
 * decode step, measured where they happen: an actor holding the conductor's
 * gate (moon_plugin_gate_*, as the conductor calls it) on one runtime
 * worker, as `moonlet serve` runs, with the probe plugin loaded
 * (filter=pass,tokens=1: a filter actor that accepts at once, and an
 * observer of every token).
 *   filter:   a SUBMIT through the gate: FILTER to the filter actor, its
 *             VERDICT back, the timer of its deadline started and cancelled;
 *             the time from gate_filter to the outcome, per request. Anchor:
 *             one message the actor sends itself (the least a step between
 *             actors costs), alternating in rounds. Target (issue 25): <= 5 us
 *             p50 added per filter.
 *   observer: a decode step's --batch tokens given to moon_plugin_token and
 *             flushed (one TOKENS to the observer actor, which runs on the
 *             same worker before the step's next message: its turn is
 *             counted), then a message to itself, per step; anchor: the same
 *             with the tokens given to a no-op, alternating in rounds.
 * The end-to-end figures (requests/s and TTFT through the gateway, with and
 * without the plugin) are benchmarks/suites/plugins.sh's.
 * Usage: bench_plugin_gate --probe=libplugin_probe.so [--n=20000] [--rounds=7]
 *                          [--batch=8] */
#include "bench_util.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_msgs.h"
#include "moonlet/sys_msgs.h"
#include "plugin_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_NS 120000000000ull
#define N_PROMPT 24u

#define G_RUN_FIELDS(F, T) F(T, u32, mode) F(T, u32, n)
#define G_MSGS(X)                                                                                  \
    X(G_MSG_RUN, g_run_t, G_RUN_FIELDS)                                                            \
    X(G_MSG_HOP, g_hop_t, G_RUN_FIELDS)
MOON_MSG_DECLARE_IN(G_MSGS, USER, G_MSG_END)
MOON_MSG_DEFINE(G_MSGS, g_msg_descs)

enum { MODE_HOP, MODE_FILTER, MODE_NOOP_STEP, MODE_OBSERVED_STEP };

static moon_bench_done_t g_done = MOON_BENCH_DONE_INIT;
static double           *g_ns; /* one sample per iteration of the run */
static uint32_t          g_batch;
static volatile uint32_t g_sink; /* the no-op step's stores */

typedef struct {
    moon_plugin_gate_t *gate;
    uint32_t            mode, i, n;
    uint64_t            t0;
} drv_t;

static void next(moon_actor_t *self, drv_t *d);

static void sample(moon_actor_t *self, drv_t *d)
{
    g_ns[d->i++] = (double)(moon_now(moon_actor_runtime(self)) - d->t0);
    next(self, d);
}

/* A decode step's tokens to the hooks (or to a no-op store). */
static void step(moon_actor_t *self, drv_t *d, int observed)
{
    for (uint32_t b = 0; b < g_batch; b++) {
        if (observed) {
            moon_plugin_token(self, moon_actor_addr(self), b + 1, d->i, 300 + b, 0);
        } else {
            g_sink = d->i + b;
        }
    }
    if (observed) {
        moon_plugin_tokens_flush(self);
    }
}

static void next(moon_actor_t *self, drv_t *d)
{
    moon_serve_submit_t *m;
    int32_t             *ids;

    {
        if (d->i == d->n) {
            moon_bench_done_set(&g_done);
            return;
        }
        d->t0 = moon_now(moon_actor_runtime(self));
        if (d->mode == MODE_NOOP_STEP || d->mode == MODE_OBSERVED_STEP) {
            step(self, d, d->mode == MODE_OBSERVED_STEP);
        }
        if (d->mode != MODE_FILTER) { /* the observer's turn comes before the hop's */
            g_hop_t *h = moon_msg_new(G_MSG_HOP, 0);
            MOON_CHECK(h != NULL && moon_send(self, moon_actor_addr(self), &h->hdr) == MOON_OK);
            return;
        }
        m   = moon_msg_new(MOON_MSG_SERVE_SUBMIT, 16);
        ids = malloc(N_PROMPT * sizeof(*ids));
        MOON_CHECK(m != NULL && ids != NULL);
        m->reply_to   = moon_actor_addr(self);
        m->request_id = d->i + 1;
        m->max_tokens = 16;
        for (uint32_t k = 0; k < N_PROMPT; k++) {
            ids[k] = (int32_t)(3 + k);
        }
        MOON_CHECK(moon_plugin_gate_filter(d->gate, self, m, ids, N_PROMPT) == MOON_INPROGRESS);
        moon_msg_release(&m->hdr); /* the gate holds its own reference */
        return;
    }
}

static moon_status_t drv_init(moon_actor_t *self, const void *args)
{
    (void)args;
    return moon_plugin_gate_create(64, &((drv_t *)moon_actor_state(self))->gate);
}

static void drv_fini(moon_actor_t *self)
{
    moon_plugin_gate_destroy(((drv_t *)moon_actor_state(self))->gate);
}

static moon_status_t drv_on_run(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    drv_t         *d = moon_actor_state(self);
    const g_run_t *r = (const void *)msg;

    d->mode = r->mode;
    d->n    = r->n;
    d->i    = 0;
    next(self, d);
    return MOON_OK;
}

static moon_status_t drv_on_hop(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)msg;
    sample(self, moon_actor_state(self));
    return MOON_OK;
}

static moon_status_t drv_on_verdict(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    drv_t                *d = moon_actor_state(self);
    moon_plugin_outcome_t out;

    if (moon_plugin_gate_on_verdict(d->gate, self, msg, &out) != MOON_OK) {
        return MOON_OK; /* more filters: not this probe */
    }
    MOON_CHECK(!out.rejected);
    moon_plugin_outcome_fini(&out);
    sample(self, d);
    return MOON_OK;
}

static moon_status_t drv_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    drv_t                *d = moon_actor_state(self);
    moon_plugin_outcome_t out;

    if (moon_plugin_gate_on_timer(d->gate, self, msg, &out) == MOON_OK) {
        MOON_ERROR("bench_plugin_gate: the filter did not answer within its deadline");
        exit(1);
    }
    return MOON_OK;
}

static const moon_actor_ops_t drv_ops = {
    .name        = "gate-driver",
    .state_bytes = sizeof(drv_t),
    .init        = drv_init,
    .fini        = drv_fini,
    .on_msg      = {[G_MSG_RUN]               = drv_on_run,
                    [G_MSG_HOP]               = drv_on_hop,
                    [MOON_MSG_PLUGIN_VERDICT] = drv_on_verdict,
                    [MOON_MSG_SYS_TIMER]      = drv_on_timer},
};

/* One run of n iterations in mode: its p50, ns. */
static double run(moon_runtime_t *rt, moon_addr_t drv, uint32_t mode, uint32_t n)
{
    g_run_t *m = moon_msg_new(G_MSG_RUN, 0);

    MOON_CHECK(m != NULL);
    m->mode = mode;
    m->n    = n;
    moon_bench_done_reset(&g_done);
    MOON_CHECK(moon_runtime_send(rt, drv, &m->hdr) == MOON_OK);
    MOON_CHECK(moon_bench_done_wait(&g_done, WAIT_NS, NULL) == 0);
    return moon_bench_percentile(g_ns, n, 50);
}

static void line(const char *bench, const char *metric, const char *anchor_name,
                 moon_bench_rounds_t *rr, const double *added, int rounds, uint32_t n)
{
    moon_bench_json_t j;
    double            a[MOON_BENCH_MAX_ROUNDS];

    memcpy(a, added, (size_t)rounds * sizeof(*a));
    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "suite", "plugins");
    moon_bench_json_str(&j, "bench", bench);
    moon_bench_json_int(&j, "n", n);
    moon_bench_json_int(&j, "batch", g_batch);
    moon_bench_json_str(&j, "metric", metric);
    moon_bench_json_num(&j, "value", moon_bench_rounds_mean(rr));
    moon_bench_json_num(&j, anchor_name, moon_bench_rounds_anchor_mean(rr));
    moon_bench_json_num(&j, "added_median_ns", moon_bench_percentile(a, (size_t)rounds, 50));
    moon_bench_json_num(&j, "added_min_ns", moon_bench_percentile(a, (size_t)rounds, 0));
    moon_bench_json_num(&j, "added_max_ns", moon_bench_percentile(a, (size_t)rounds, 100));
    moon_bench_rounds_json(rr, &j);
    moon_bench_json_end(&j);
}

int main(int argc, char **argv)
{
    const char           *probe  = moon_bench_arg_str(argc, argv, "probe", NULL);
    uint32_t              n      = (uint32_t)moon_bench_arg_int(argc, argv, "n", 20000);
    int                   rounds = (int)moon_bench_arg_int(argc, argv, "rounds", 7);
    moon_runtime_config_t rcfg;
    moon_runtime_t       *rt;
    moon_addr_t           drv;
    moon_bench_rounds_t   rf = {0}, ro = {0};
    double                af[MOON_BENCH_MAX_ROUNDS], ao[MOON_BENCH_MAX_ROUNDS];
    char                  spec[4096];

    g_batch = (uint32_t)moon_bench_arg_int(argc, argv, "batch", 8);
    if (probe == NULL || n < 1 || rounds < 1 || rounds > MOON_BENCH_MAX_ROUNDS || g_batch < 1 ||
        g_batch > 256) {
        fprintf(stderr, "usage: bench_plugin_gate --probe=libplugin_probe.so [--n=20000] "
                        "[--rounds=7] [--batch=8]\n");
        return 2;
    }
    snprintf(spec, sizeof(spec), "%s:filter=pass,tokens=1", probe);
    g_ns = calloc(n, sizeof(*g_ns));
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 1; /* as `moonlet serve` runs a rank's actors */
    if (g_ns == NULL || moon_serve_msgs_register() != MOON_OK ||
        moon_msg_register(g_msg_descs) != MOON_OK || moon_plugin_load(spec) != MOON_OK ||
        moon_runtime_create(&rcfg, &rt) != MOON_OK || moon_runtime_start(rt) != MOON_OK ||
        moon_plugin_start(rt, NULL, NULL) != MOON_OK ||
        moon_spawn(rt, &drv_ops, NULL, NULL, &drv) != MOON_OK) {
        fprintf(stderr, "bench_plugin_gate: the runtime, the probe or the driver did not start\n");
        return 1;
    }
    run(rt, drv, MODE_FILTER, n < 1000 ? n : 1000); /* warm-up */
    for (int r = 0; r < rounds; r++) {
        double hop, filter, plain, observed;
        if (r % 2 == 0) {
            hop    = run(rt, drv, MODE_HOP, n);
            filter = run(rt, drv, MODE_FILTER, n);
        } else {
            filter = run(rt, drv, MODE_FILTER, n);
            hop    = run(rt, drv, MODE_HOP, n);
        }
        plain    = run(rt, drv, MODE_NOOP_STEP, n);
        observed = run(rt, drv, MODE_OBSERVED_STEP, n);
        moon_bench_rounds_add(&rf, filter, hop);
        moon_bench_rounds_add(&ro, observed, plain);
        af[r] = filter;
        ao[r] = observed - plain;
    }
    /* the gate's round trip is all the filter adds: without one the
     * conductor goes on at once (one pointer test) */
    line("plugin_gate", "filter_p50_ns", "anchor_self_message_p50_ns", &rf, af, rounds, n);
    line("plugin_observer", "step_p50_ns", "anchor_step_without_observer_p50_ns", &ro, ao, rounds,
         n);
    moon_stop(rt, drv, MOON_OK);
    moon_plugin_stop();
    moon_runtime_shutdown(rt, 0);
    moon_runtime_wait(rt);
    moon_runtime_destroy(rt);
    moon_plugin_unload();
    free(g_ns);
    return 0;
}
