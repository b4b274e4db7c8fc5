/* benchmarks/bench_serve.c - the serving cluster's questions (one per
 * --bench), each printing one JSON line with its anchor measured in the
 * same run:
 *   prefix_reuse    TTFT of a --prompt-token prompt (2,048; 16-token blocks)
 *                   whose --shared-token prefix (all but the last 64) is in
 *                   the store over the TTFT of the same prompt with the
 *                   store empty (target <= 0.15 from 2,048 tokens, else
 *                   0.25), with where the cached TTFT goes;
 *   handover        TTFT of a --prompt-token prompt (2,048; 16-token blocks)
 *                   through 1 prefill + 1 decode over the engine's own
 *                   prefill of that prompt in one call plus one decode step
 *                   (target <= 1.05 from 2,048 tokens, else 1.10), with the
 *                   engine's time in calls of --prefill-chunk tokens and the
 *                   served request's queue, compute and TTFT beside it
 *                   (--first-via-decode=1: the first token through the
 *                   decode instance, as before issue 26);
 *   decode          tokens/s of 32 concurrent greedy requests on one decode
 *                   instance over the engine's batch-32 decode with the same
 *                   threads (target >= 0.85);
 *   disagg_goodput  goodput (TTFT <= 2 s and TBT <= 5 ms, or 3x the batch-1
 *                   step where that is longer) of
 *                   1 prefill + 1 decode over that of 2 colocated instances,
 *                   same workload, same cores (target >= 1.2);
 *   messages        actor messages (and bulk completions among them) of one
 *                   cold request (--prompt tokens, --max-tokens out, 16-token
 *                   blocks, --replicas store replicas) over the count the
 *                   per-block protocol of e0d97dc took for the same request
 *                   (a recorded anchor: a count, not a time; target <= 0.2).
 * The timed lines run --rounds (default 5) rounds, each an anchor run and a
 * measured run back to back in this process; a line's figures are the
 * medians over rounds, "ratio" (= "ratio_median") the median of the rounds'
 * ratios with "ratio_min" and "ratio_max", null when every anchor read 0.
 * The cluster runs in this process (one actor worker, one engine thread per
 * instance unless --threads); the driver is the client API's thread client,
 * which stamps each token's arrival on the runtime's thread. */
#include "bench_util.h"
#include "moonlet/log.h"
#include "moonlet/model.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REQS 256
#define MAX_TOKS 1024

typedef struct {
    uint64_t submit_ns, first_ns, last_ns;
    uint64_t t_ns[MAX_TOKS]; /* arrival of each token */
    uint32_t n;
    uint32_t n_cached;
    int      done, finish;
    uint64_t queue_ns, prefill_ns, ttft_ns; /* the server's own */
} track_t;

static track_t         *g_track;
static uint64_t         g_base;
static _Atomic uint32_t g_n_done;

/* On a runtime worker: stamp and count (never blocks). */
static void on_event(void *arg, const moon_serve_event_t *ev)
{
    uint64_t now = moon_bench_now_ns();
    track_t *t;

    (void)arg;
    if (ev->request_id < g_base || ev->request_id >= g_base + MAX_REQS) {
        return;
    }
    t = &g_track[ev->request_id - g_base];
    if (ev->kind == MOON_SERVE_EV_TOKEN) {
        if (t->n == 0) {
            t->first_ns = now;
        }
        if (t->n < MAX_TOKS) {
            t->t_ns[t->n] = now;
        }
        t->n++;
        t->last_ns = now;
    } else {
        t->n_cached   = ev->n_cached;
        t->queue_ns   = ev->queue_ns;
        t->prefill_ns = ev->prefill_ns;
        t->ttft_ns    = ev->ttft_ns;
        t->finish     = (int)ev->finish;
        t->done       = 1;
        atomic_fetch_add(&g_n_done, 1);
    }
}

/* Messages dispatched, by type (the runtime's trace hook, on its worker). */
static _Atomic uint64_t g_n_msgs[MOON_MSG_MAX_TYPES];

static void count_msg(void *arg, uint64_t now_ns, const moon_msg_hdr_t *msg, moon_addr_t dst)
{
    (void)arg, (void)now_ns, (void)dst;
    atomic_fetch_add_explicit(&g_n_msgs[msg->type % MOON_MSG_MAX_TYPES], 1, memory_order_relaxed);
}

typedef struct {
    moon_runtime_t       *rt;
    moon_serve_cluster_t *cluster;
    moon_serve_client_t  *client;
} cluster_t;

static int cluster_up(cluster_t *c, const moon_serve_config_t *cfg)
{
    moon_runtime_config_t      rcfg;
    moon_serve_client_config_t cc    = {.on_event = on_event};
    uint32_t                   n_pre = cfg->colocated ? 0 : cfg->n_prefill;
    uint32_t n_dec = cfg->colocated ? cfg->n_prefill + cfg->n_decode : cfg->n_decode;

    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 1;
    rcfg.trace     = count_msg;
    if (moon_runtime_create(&rcfg, &c->rt) != MOON_OK || moon_runtime_start(c->rt) != MOON_OK ||
        moon_serve_cluster_start(cfg, c->rt, NULL, &c->cluster) != MOON_OK) {
        return -1;
    }
    cc.conductor = moon_serve_cluster_conductor(c->cluster);
    if (moon_serve_client_create(c->rt, &cc, &c->client) != MOON_OK ||
        moon_serve_client_wait_ready(c->client, n_pre, n_dec, 60000000000ull) != MOON_OK) {
        return -1;
    }
    return 0;
}

static void cluster_down(cluster_t *c)
{
    moon_serve_client_destroy(c->client);
    moon_serve_cluster_stop(c->cluster);
    moon_runtime_shutdown(c->rt, 0);
    moon_runtime_wait(c->rt);
    moon_runtime_destroy(c->rt);
}

static void tokens_of(int32_t *t, uint32_t n, uint32_t seed, uint32_t vocab)
{
    for (uint32_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = 3 + (int32_t)((seed >> 8) % (vocab - 3));
    }
}

static void wait_done(uint32_t n)
{
    while (atomic_load(&g_n_done) < n) {
        nanosleep(&(struct timespec){0, 200000}, NULL);
    }
}

/* Submits one request (its events go to g_track[i]). */
static void submit(cluster_t *c, uint32_t i, const int32_t *tok, uint32_t n, uint32_t max_tokens)
{
    moon_serve_params_t p;
    uint64_t            id;

    moon_serve_params_default(&p);
    p.tokens             = tok;
    p.n_tokens           = n;
    p.max_tokens         = max_tokens;
    p.flags              = MOON_SERVE_F_IGNORE_EOS;
    g_track[i].submit_ns = moon_bench_now_ns();
    if (moon_serve_client_submit(c->client, &p, &id) != MOON_OK || id != g_base + i) {
        fprintf(stderr, "bench_serve: submit %u failed\n", i);
        exit(1);
    }
}

/* Runs request i alone; returns its TTFT (s). */
static double one_ttft(cluster_t *c, uint32_t i, const int32_t *tok, uint32_t n, uint32_t max)
{
    uint32_t before = atomic_load(&g_n_done);

    submit(c, i, tok, n, max);
    wait_done(before + 1);
    return (double)(g_track[i].first_ns - g_track[i].submit_ns) * 1e-9;
}

static void reset_tracks(cluster_t *c)
{
    memset(g_track, 0, MAX_REQS * sizeof(*g_track));
    atomic_store(&g_n_done, 0);
    /* the next request id: ask for one and note it */
    moon_serve_params_t p;
    int32_t             t = 5;
    uint64_t            id;
    moon_serve_params_default(&p);
    p.tokens     = &t;
    p.n_tokens   = 1;
    p.max_tokens = 1;
    g_base       = UINT64_MAX / 2; /* events of the probe are not tracked */
    moon_serve_client_submit(c->client, &p, &id);
    nanosleep(&(struct timespec){0, 50000000}, NULL);
    g_base = id + 1;
}

/* ---- engine anchors ------------------------------------------------------ */

typedef struct {
    moon_model_t    *model;
    moon_engine_t   *engine;
    moon_kv_cache_t *kv;
    float           *logits;
} anchor_t;

static void anchor_open(anchor_t *a, const char *path, uint32_t threads, uint32_t max_batch,
                        uint32_t max_chunk)
{
    moon_engine_config_t       ec = {.kind      = MOON_BACKEND_CPU,
                                     .n_threads = threads,
                                     .max_batch = max_batch,
                                     .max_chunk = max_chunk};
    const moon_model_config_t *mc;
    moon_kv_config_t           kc;

    if (moon_model_load(path, &a->model) != MOON_OK ||
        moon_engine_create(a->model, &ec, &a->engine) != MOON_OK) {
        fprintf(stderr, "bench_serve: anchor engine\n");
        exit(1);
    }
    mc = moon_model_config(a->model);
    kc = moon_model_kv_config(mc, 16, (mc->seq_len / 16) * (max_batch > 4 ? max_batch / 2 : 2),
                              max_batch);
    if (moon_kv_cache_create(&kc, &a->kv) != MOON_OK) {
        exit(1);
    }
    a->logits = calloc((size_t)max_batch * mc->vocab_size, sizeof(float));
}

static void anchor_close(anchor_t *a)
{
    free(a->logits);
    moon_kv_cache_destroy(a->kv);
    moon_engine_destroy(a->engine);
    moon_model_destroy(a->model);
}

/* Best of reps: one prefill of tok[0..n) in one call, and a batch-1 step after it. */
static void anchor_prefill(anchor_t *a, const int32_t *tok, uint32_t n, int reps, double *pre_s,
                           double *step_s)
{
    *pre_s  = 1e9;
    *step_s = 1e9;
    for (int r = 0; r < reps; r++) {
        uint32_t seq;
        double   d1 = 0, d2 = 0;
        int32_t  t = tok[0];
        moon_kv_seq_create(a->kv, &seq);
        moon_engine_prefill(a->engine, a->kv, seq, tok, n, a->logits, &d1);
        moon_engine_decode(a->engine, a->kv, &seq, &t, 1, a->logits, &d2);
        moon_kv_seq_destroy(a->kv, seq);
        *pre_s  = d1 < *pre_s ? d1 : *pre_s;
        *step_s = d2 < *step_s ? d2 : *step_s;
    }
}

/* Median tokens/s of batch-b decode steps at context ctx. */
static double anchor_decode(anchor_t *a, uint32_t b, uint32_t ctx, uint32_t steps, uint32_t vocab)
{
    uint32_t seqs[64];
    int32_t *tok = calloc(ctx, sizeof(*tok)), next[64];
    double  *d   = calloc(steps, sizeof(double)), med;

    tokens_of(tok, ctx, 9, vocab);
    for (uint32_t i = 0; i < b; i++) {
        moon_kv_seq_create(a->kv, &seqs[i]);
        for (uint32_t k = 0; k < ctx; k += 128) {
            moon_engine_prefill(a->engine, a->kv, seqs[i], tok + k, MOON_MIN(128, ctx - k), NULL,
                                NULL);
        }
        next[i] = tok[i];
    }
    for (uint32_t s = 0; s < steps; s++) {
        moon_engine_decode(a->engine, a->kv, seqs, next, b, a->logits, &d[s]);
    }
    med = moon_bench_percentile(d, steps, 50);
    for (uint32_t i = 0; i < b; i++) {
        moon_kv_seq_destroy(a->kv, seqs[i]);
    }
    free(tok);
    free(d);
    return b / med;
}

/* ---- the questions ---------------------------------------------------------- */

/* One line: the figure and its anchor (each the median over rounds), the
 * median round ratio with its min and max (null when no anchor was > 0). */
static void emit(const char *bench, const char *label, const char *fig, double v,
                 const char *anchor, double va, const char *unit, moon_bench_rounds_t *rr,
                 double target)
{
    moon_bench_json_t j;

    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "bench", bench);
    moon_bench_json_str(&j, "model", label);
    moon_bench_json_num(&j, fig, v);
    moon_bench_json_num(&j, anchor, va);
    moon_bench_json_str(&j, "unit", unit);
    moon_bench_rounds_json(rr, &j);
    moon_bench_json_num(&j, "target", target);
    moon_bench_json_num(&j, "peak_rss_mib", moon_bench_peak_rss_mib());
    moon_bench_json_end(&j);
}

static double median(double *v, uint32_t n)
{
    return moon_bench_percentile(v, n, 50);
}

/* Median over rounds of a track field (ns) of the requests i0, i0 + 2, ... */
static double track_median_s(uint32_t i0, uint32_t iters, size_t off)
{
    double v[16];

    for (uint32_t i = 0; i < iters; i++) {
        uint64_t ns;
        memcpy(&ns, (const char *)&g_track[i0 + 2 * i] + off, sizeof(ns));
        v[i] = (double)ns * 1e-9;
    }
    return median(v, iters);
}

static void bench_prefix_reuse(moon_serve_config_t *cfg, const char *label, uint32_t iters,
                               uint32_t n, uint32_t shared)
{
    cluster_t           c;
    uint32_t            vocab;
    int32_t            *a, *b;
    double              cold[16], warm[16];
    uint32_t            cached = 0;
    moon_bench_rounds_t rr     = {0};

    cfg->n_store      = 1;
    cfg->block_tokens = 16;
    if (cluster_up(&c, cfg) != 0) {
        exit(1);
    }
    vocab  = moon_model_config(moon_serve_cluster_model(c.cluster))->vocab_size;
    n      = MOON_MIN(n, moon_model_config(moon_serve_cluster_model(c.cluster))->seq_len - 2);
    shared = MOON_MIN(shared, n - 1) / cfg->block_tokens * cfg->block_tokens;
    a      = calloc(n, sizeof(*a));
    b      = calloc(n, sizeof(*b));
    reset_tracks(&c);
    for (uint32_t i = 0; i < iters; i++) {
        tokens_of(a, n, 100 + i, vocab);
        memcpy(b, a, n * sizeof(*b));
        tokens_of(b + shared, n - shared, 900 + i, vocab);
        cold[i] = one_ttft(&c, 2 * i, a, n, 1);
        nanosleep(&(struct timespec){0, 200000000}, NULL); /* a's puts commit */
        warm[i] = one_ttft(&c, 2 * i + 1, b, n, 1);
        cached  = g_track[2 * i + 1].n_cached;
        moon_bench_rounds_add(&rr, warm[i], cold[i]);
    }
    cluster_down(&c);
    free(a);
    free(b);
    if (cached != shared) {
        fprintf(stderr, "bench_serve: prefix_reuse: %u tokens came from the store, not %u\n",
                cached, shared);
    }
    {
        /* where the cached TTFT goes (medians over rounds, the server's
         * clocks): queue (arrival to the prefill's start), the fetch and
         * handover (the rest beside the compute), the suffix's compute */
        moon_bench_json_t j;
        double            q  = track_median_s(1, iters, offsetof(track_t, queue_ns));
        double            pc = track_median_s(1, iters, offsetof(track_t, prefill_ns));
        double            t  = track_median_s(1, iters, offsetof(track_t, ttft_ns));
        moon_bench_json_begin(&j);
        moon_bench_json_str(&j, "bench", "prefix_reuse");
        moon_bench_json_str(&j, "model", label);
        moon_bench_json_int(&j, "prompt_tokens", n);
        moon_bench_json_int(&j, "cached_tokens", cached);
        moon_bench_json_int(&j, "block_tokens", cfg->block_tokens);
        moon_bench_json_num(&j, "ttft_cached_ms", median(warm, iters) * 1e3);
        moon_bench_json_num(&j, "ttft_cold_ms", median(cold, iters) * 1e3);
        moon_bench_json_num(&j, "cached_server_queue_ms", q * 1e3);
        moon_bench_json_num(&j, "cached_server_compute_ms", pc * 1e3);
        moon_bench_json_num(&j, "cached_server_fetch_handover_ms", (t - q - pc) * 1e3);
        moon_bench_json_num(&j, "cached_server_ttft_ms", t * 1e3);
        moon_bench_json_num(&j, "cold_server_compute_ms",
                            track_median_s(0, iters, offsetof(track_t, prefill_ns)) * 1e3);
        moon_bench_json_str(&j, "unit", "ms");
        moon_bench_rounds_json(&rr, &j);
        moon_bench_json_num(&j, "target", n >= 2048 ? 0.15 : 0.25);
        moon_bench_json_num(&j, "peak_rss_mib", moon_bench_peak_rss_mib());
        moon_bench_json_end(&j);
    }
}

/* Best of reps: the prompt in chunks of `chunk` tokens (the prefill
 * instance's calls), for the breakdown beside the one-call anchor. */
static double anchor_chunked(anchor_t *a, const int32_t *tok, uint32_t n, uint32_t chunk, int reps)
{
    double best = 1e9;

    for (int r = 0; r < reps; r++) {
        uint32_t seq;
        double   sum = 0;
        moon_kv_seq_create(a->kv, &seq);
        for (uint32_t k = 0; k < n; k += chunk) {
            double d = 0;
            moon_engine_prefill(a->engine, a->kv, seq, tok + k, MOON_MIN(chunk, n - k), a->logits,
                                &d);
            sum += d;
        }
        moon_kv_seq_destroy(a->kv, seq);
        best = sum < best ? sum : best;
    }
    return best;
}

static void bench_handover(moon_serve_config_t *cfg, const char *path, const char *label,
                           uint32_t iters, uint32_t n_prompt)
{
    cluster_t           c;
    anchor_t            an;
    int32_t            *a;
    double              ttft[16], anc[16], pre, step, pre_s[16], step_s[16], chunked[16];
    double              queue[16], compute[16], server[16];
    uint32_t            vocab, n;
    moon_bench_rounds_t rr = {0};

    cfg->n_store      = 0; /* nothing reused: the whole prompt computes and moves */
    cfg->block_tokens = 16;
    if (cluster_up(&c, cfg) != 0) {
        exit(1);
    }
    vocab = moon_model_config(moon_serve_cluster_model(c.cluster))->vocab_size;
    n     = MOON_MIN(n_prompt, moon_model_config(moon_serve_cluster_model(c.cluster))->seq_len - 2);
    a     = calloc(n, sizeof(*a));
    /* the anchor computes the whole prompt in one call */
    anchor_open(&an, path, cfg->threads, 1, n);
    reset_tracks(&c);
    /* rounds alternating with the anchor (the cluster idles meanwhile) */
    for (uint32_t i = 0; i < iters; i++) {
        tokens_of(a, n, 300 + i, vocab);
        anchor_prefill(&an, a, n, 1, &pre, &step);
        pre_s[i]   = pre;
        step_s[i]  = step;
        chunked[i] = anchor_chunked(&an, a, n, cfg->prefill_chunk, 1);
        anc[i]     = pre + step;
        ttft[i]    = one_ttft(&c, i, a, n, 2);
        queue[i]   = g_track[i].queue_ns * 1e-9;
        compute[i] = g_track[i].prefill_ns * 1e-9;
        server[i]  = g_track[i].ttft_ns * 1e-9;
        moon_bench_rounds_add(&rr, ttft[i], anc[i]);
    }
    cluster_down(&c);
    anchor_close(&an);
    free(a);
    {
        /* where the TTFT goes (medians over rounds): the engine's one call
         * and its calls of prefill_chunk tokens, the served request's queue
         * and compute (the prefill instance's clock) and its TTFT on the
         * server's clock (arrival to the first token's send) */
        moon_bench_json_t j;
        moon_bench_json_begin(&j);
        moon_bench_json_str(&j, "bench", "handover");
        moon_bench_json_str(&j, "model", label);
        moon_bench_json_int(&j, "prompt_tokens", n);
        moon_bench_json_int(&j, "block_tokens", cfg->block_tokens);
        moon_bench_json_int(&j, "prefill_chunk", cfg->prefill_chunk);
        moon_bench_json_int(&j, "first_via_decode", (uint32_t)cfg->first_via_decode);
        moon_bench_json_num(&j, "ttft_ms", median(ttft, iters) * 1e3);
        moon_bench_json_num(&j, "engine_prefill_plus_step_ms", median(anc, iters) * 1e3);
        moon_bench_json_num(&j, "engine_prefill_ms", median(pre_s, iters) * 1e3);
        moon_bench_json_num(&j, "engine_step_ms", median(step_s, iters) * 1e3);
        moon_bench_json_num(&j, "engine_chunked_prefill_ms", median(chunked, iters) * 1e3);
        moon_bench_json_num(&j, "server_queue_ms", median(queue, iters) * 1e3);
        moon_bench_json_num(&j, "server_prefill_compute_ms", median(compute, iters) * 1e3);
        moon_bench_json_num(&j, "server_ttft_ms", median(server, iters) * 1e3);
        moon_bench_json_str(&j, "unit", "ms");
        moon_bench_rounds_json(&rr, &j);
        moon_bench_json_num(&j, "target", n >= 2048 ? 1.05 : 1.10);
        moon_bench_json_num(&j, "peak_rss_mib", moon_bench_peak_rss_mib());
        moon_bench_json_end(&j);
    }
}

/* One round of the served figure: B concurrent requests; tokens/s over the
 * steady window (every request has its first token, none is done). */
static double decode_round(cluster_t *c, int32_t (*tok)[32], uint32_t B, uint32_t prompt,
                           uint32_t max_new)
{
    uint64_t t0 = 0, t1 = UINT64_MAX, n_tok = 0;

    reset_tracks(c);
    for (uint32_t i = 0; i < B; i++) {
        submit(c, i, tok[i], prompt, max_new);
    }
    wait_done(B);
    for (uint32_t i = 0; i < B; i++) {
        t0 = g_track[i].first_ns > t0 ? g_track[i].first_ns : t0;
        t1 = g_track[i].last_ns < t1 ? g_track[i].last_ns : t1;
    }
    for (uint32_t i = 0; i < B; i++) {
        for (uint32_t k = 0; k < MOON_MIN(g_track[i].n, MAX_TOKS); k++) {
            n_tok += g_track[i].t_ns[k] > t0 && g_track[i].t_ns[k] <= t1;
        }
    }
    return t1 > t0 ? (double)n_tok / ((double)(t1 - t0) * 1e-9) : 0.0;
}

static void bench_decode(moon_serve_config_t *cfg, const char *path, const char *label,
                         uint32_t threads, uint32_t rounds)
{
    enum { B = 32, PROMPT = 32 };
    cluster_t           c;
    anchor_t            an;
    int32_t             tok[B][PROMPT];
    uint32_t            vocab, max_new, ctx;
    double              tps[MOON_BENCH_MAX_ROUNDS], anc[MOON_BENCH_MAX_ROUNDS];
    moon_bench_rounds_t rr = {0};

    cfg->n_store   = 0;
    cfg->max_batch = B;
    cfg->threads   = threads;
    {
        moon_model_t *m = NULL;
        if (moon_model_load(path, &m) != MOON_OK) {
            exit(1);
        }
        ctx = moon_model_config(m)->seq_len;
        moon_model_destroy(m);
    }
    /* room for all 32 at their longest: every one is admitted at once */
    cfg->kv_blocks = B * ((PROMPT + MOON_MIN(256, ctx - PROMPT - 1) + 15) / 16) + 64;
    if (cluster_up(&c, cfg) != 0) {
        exit(1);
    }
    ctx     = moon_model_config(moon_serve_cluster_model(c.cluster))->seq_len;
    vocab   = moon_model_config(moon_serve_cluster_model(c.cluster))->vocab_size;
    max_new = MOON_MIN(256, ctx - PROMPT - 1);
    for (uint32_t i = 0; i < B; i++) {
        tokens_of(tok[i], PROMPT, 500 + i, vocab);
    }
    /* rounds alternating with the anchor (each idles while the other runs) */
    anchor_open(&an, path, threads, B, 128);
    for (uint32_t r = 0; r < rounds; r++) {
        anc[r] = anchor_decode(&an, B, PROMPT + max_new / 2, 24, vocab);
        tps[r] = decode_round(&c, tok, B, PROMPT, max_new);
        moon_bench_rounds_add(&rr, tps[r], anc[r]);
    }
    anchor_close(&an);
    cluster_down(&c);
    emit("decode", label, "tokens_per_s", median(tps, rounds), "engine_batch32_tokens_per_s",
         median(anc, rounds), "tokens/s", &rr, 0.85);
}

/* TBT of a request: the mean of its slowest 10 % of token gaps (the paper's). */
static double tbt_of(const track_t *t)
{
    uint32_t n = MOON_MIN(t->n, MAX_TOKS), k;
    double   gaps[MAX_TOKS], sum = 0;

    if (n < 2) {
        return 0.0;
    }
    for (uint32_t i = 1; i < n; i++) {
        gaps[i - 1] = (double)(t->t_ns[i] - t->t_ns[i - 1]) * 1e-9;
    }
    moon_bench_percentile(gaps, n - 1, 50); /* sorts */
    k = (n - 1 + 9) / 10;
    for (uint32_t i = 0; i < k; i++) {
        sum += gaps[n - 2 - i];
    }
    return sum / k;
}

/* One run of the workload: requests with Poisson arrivals at rate; goodput. */
static double goodput_run(moon_serve_config_t *cfg, uint32_t n_req, double rate, double tbt_slo,
                          uint32_t lo, uint32_t hi, uint32_t out, double *attain_p)
{
    cluster_t c;
    uint32_t  vocab, good = 0;
    int32_t  *tok  = calloc((size_t)n_req * hi, sizeof(int32_t));
    uint64_t  seed = 77, start, end = 0;
    double    at = 0.0;

    if (cluster_up(&c, cfg) != 0) {
        exit(1);
    }
    vocab = moon_model_config(moon_serve_cluster_model(c.cluster))->vocab_size;
    reset_tracks(&c);
    start = moon_bench_now_ns();
    for (uint32_t i = 0; i < n_req; i++) {
        uint32_t len;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        len  = lo + (uint32_t)((seed >> 33) % (hi - lo + 1));
        tokens_of(tok + (size_t)i * hi, len, 1000 + i, vocab);
        at += -log(1.0 - (double)((seed >> 11) & 0xfffff) / 1048577.0) / rate;
        while (moon_bench_now_ns() < start + (uint64_t)(at * 1e9)) {
            nanosleep(&(struct timespec){0, 100000}, NULL);
        }
        submit(&c, i, tok + (size_t)i * hi, len, out);
    }
    wait_done(n_req);
    cluster_down(&c);
    for (uint32_t i = 0; i < n_req; i++) {
        const track_t *t    = &g_track[i];
        double         ttft = (double)(t->first_ns - t->submit_ns) * 1e-9;
        good += t->n > 0 && ttft <= 2.0 && tbt_of(t) <= tbt_slo;
        end = t->last_ns > end ? t->last_ns : end;
    }
    free(tok);
    *attain_p = (double)good / n_req;
    return good / ((double)(end - start) * 1e-9);
}

/* A TBT SLO a deployment would set: 5 ms (200 tokens/s per stream), or 3x
 * the batch-1 step where the model is too slow for that (110M on CPU). */
#define TBT_SLO_FLOOR_S 5e-3

static void bench_disagg(moon_serve_config_t *cfg, const char *path, const char *label,
                         uint32_t n_req, uint32_t rounds)
{
    anchor_t            an;
    int32_t             a[512];
    double              pre, step, rate, tbt_slo;
    double              g_dis[MOON_BENCH_MAX_ROUNDS], g_col[MOON_BENCH_MAX_ROUNDS];
    double              att_dis[MOON_BENCH_MAX_ROUNDS], att_col[MOON_BENCH_MAX_ROUNDS];
    uint32_t            ctx, lo = 400, hi = 480, out = 64;
    moon_bench_rounds_t rr = {0};

    anchor_open(&an, path, 1, 1, 512);
    ctx = moon_model_config(an.model)->seq_len;
    if (hi + out >= ctx) { /* stories260K: context 512 */
        hi = ctx - out - 8;
        lo = hi - 80;
    }
    tokens_of(a, (lo + hi) / 2, 3, moon_model_config(an.model)->vocab_size);
    anchor_prefill(&an, a, (lo + hi) / 2, 3, &pre, &step);
    anchor_close(&an);
    /* near saturation of one prefill instance */
    rate         = 0.9 / pre;
    tbt_slo      = MOON_MAX(TBT_SLO_FLOOR_S, 3.0 * step);
    cfg->n_store = 0; /* distinct prompts: nothing to reuse in either mode */
    /* rounds alternating the anchor (colocated) and the measurement */
    for (uint32_t r = 0; r < rounds; r++) {
        cfg->colocated = 1;
        g_col[r]       = goodput_run(cfg, n_req, rate, tbt_slo, lo, hi, out, &att_col[r]);
        cfg->colocated = 0;
        g_dis[r]       = goodput_run(cfg, n_req, rate, tbt_slo, lo, hi, out, &att_dis[r]);
        moon_bench_rounds_add(&rr, g_dis[r], g_col[r]);
    }
    {
        moon_bench_json_t j;
        moon_bench_json_begin(&j);
        moon_bench_json_str(&j, "bench", "disagg_goodput");
        moon_bench_json_str(&j, "model", label);
        moon_bench_json_num(&j, "goodput_rps", median(g_dis, rounds));
        moon_bench_json_num(&j, "colocated_goodput_rps", median(g_col, rounds));
        moon_bench_json_num(&j, "slo_attainment", median(att_dis, rounds));
        moon_bench_json_num(&j, "colocated_slo_attainment", median(att_col, rounds));
        moon_bench_json_num(&j, "rate_rps", rate);
        moon_bench_json_num(&j, "tbt_slo_ms", tbt_slo * 1e3);
        moon_bench_json_num(&j, "engine_step_ms", step * 1e3);
        moon_bench_json_int(&j, "requests", n_req);
        moon_bench_json_str(&j, "unit", "requests/s");
        moon_bench_rounds_json(&rr, &j);
        moon_bench_json_num(&j, "target", 1.2);
        moon_bench_json_end(&j);
    }
}

/* Recorded once on the per-block protocol of e0d97dc (this benchmark, same
 * request, 110M model with a 4,096-token context): the messages (timers and
 * load reports apart) of one
 * cold 2,048-token request with 128 output tokens, 16-token blocks, by store
 * replicas (index 1 and 2). */
static const double k_messages_baseline[3] = {0, 1062, 1703};

static void snap_msgs(uint64_t *v)
{
    for (uint32_t t = 0; t < MOON_MSG_MAX_TYPES; t++) {
        v[t] = atomic_load(&g_n_msgs[t]);
    }
}

/* Timers and load reports tick with the clock (a slow machine sends more of
 * them): counted apart from the request's messages. */
static int periodic(uint32_t t)
{
    return t == MOON_MSG_SYS_TIMER || t == MOON_MSG_SERVE_LOAD;
}

static uint64_t n_msgs_now(void)
{
    uint64_t n = 0;
    for (uint32_t t = 0; t < MOON_MSG_MAX_TYPES; t++) {
        n += periodic(t) ? 0 : atomic_load(&g_n_msgs[t]);
    }
    return n;
}

/* Waits until the count stands still for half a second (deadline 60 s). */
static void settle(void)
{
    uint64_t last, deadline = moon_bench_now_ns() + 60000000000ull;

    do {
        last = n_msgs_now();
        nanosleep(&(struct timespec){0, 500000000}, NULL);
    } while (n_msgs_now() != last && moon_bench_now_ns() < deadline);
}

static void bench_messages(moon_serve_config_t *cfg, const char *label, uint32_t n_prompt,
                           uint32_t max_tokens, uint32_t replicas)
{
    cluster_t c;
    uint64_t  before[MOON_MSG_MAX_TYPES], after[MOON_MSG_MAX_TYPES];
    uint64_t  n = 0, n_store = 0, n_serve = 0, n_bulk = 0, done0;
    int32_t  *tok;
    uint32_t  vocab;

    cfg->n_store      = replicas;
    cfg->replicas     = replicas;
    cfg->block_tokens = 16;
    cfg->kv_blocks    = 4096 / 16 + 16; /* a 4,096-token context (a pool holds one at least) */
    if (cluster_up(&c, cfg) != 0) {
        exit(1);
    }
    vocab    = moon_model_config(moon_serve_cluster_model(c.cluster))->vocab_size;
    n_prompt = MOON_MIN(n_prompt, moon_model_config(moon_serve_cluster_model(c.cluster))->seq_len -
                                      max_tokens - 1);
    tok      = calloc(n_prompt, sizeof(*tok));
    tokens_of(tok, n_prompt, 4242, vocab);
    done0 = atomic_load(&g_n_msgs[MOON_MSG_SERVE_DONE]);
    reset_tracks(&c);
    /* the probe of reset_tracks ends (its DONE) before the count starts */
    for (int i = 0; i < 60000 && atomic_load(&g_n_msgs[MOON_MSG_SERVE_DONE]) == done0; i++) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    settle();
    snap_msgs(before);
    submit(&c, 0, tok, n_prompt, max_tokens);
    wait_done(1);
    settle(); /* the puts of the prompt's blocks may end after the last token */
    snap_msgs(after);
    cluster_down(&c);
    for (uint32_t t = 0; t < MOON_MSG_MAX_TYPES; t++) {
        uint64_t d = after[t] - before[t];
        if (d == 0) {
            continue;
        }
        fprintf(stderr, "messages: replicas %u: %-26s %" PRIu64 "\n", replicas, moon_msg_name(t),
                d);
        if (periodic(t)) {
            continue;
        }
        n += d;
        n_store += t >= 32 && t < 64 ? d : 0;
        n_serve += t >= 64 && t < 112 ? d : 0;
        n_bulk += t == MOON_MSG_DIST_BULK_DONE ? d : 0;
    }
    if (g_track[0].n != max_tokens) {
        fprintf(stderr, "bench_serve: messages: %u tokens came back, not %u\n", g_track[0].n,
                max_tokens);
    }
    {
        moon_bench_json_t j;
        double            base = k_messages_baseline[MOON_MIN(replicas, 2u)];
        moon_bench_json_begin(&j);
        moon_bench_json_str(&j, "bench", "messages");
        moon_bench_json_str(&j, "model", label);
        moon_bench_json_int(&j, "prompt_tokens", n_prompt);
        moon_bench_json_int(&j, "output_tokens", max_tokens);
        moon_bench_json_int(&j, "block_tokens", 16);
        moon_bench_json_int(&j, "replicas", replicas);
        moon_bench_json_int(&j, "messages", (int64_t)n);
        moon_bench_json_int(&j, "store_messages", (int64_t)n_store);
        moon_bench_json_int(&j, "serve_messages", (int64_t)n_serve);
        moon_bench_json_int(&j, "bulk_completions", (int64_t)n_bulk);
        moon_bench_json_int(&j, "timers",
                            (int64_t)(after[MOON_MSG_SYS_TIMER] - before[MOON_MSG_SYS_TIMER]));
        moon_bench_json_int(&j, "load_reports",
                            (int64_t)(after[MOON_MSG_SERVE_LOAD] - before[MOON_MSG_SERVE_LOAD]));
        moon_bench_json_num(&j, "baseline_messages_e0d97dc", base);
        moon_bench_json_str(&j, "unit", "messages");
        if (base > 0 && replicas <= 2 && n_prompt == 2048 && max_tokens == 128) {
            moon_bench_json_num(&j, "ratio", (double)n / base);
        } else { /* no anchor for this shape: no ratio */
            moon_bench_json_null(&j, "ratio");
        }
        moon_bench_json_num(&j, "target", 0.2);
        moon_bench_json_end(&j);
    }
    free(tok);
}

int main(int argc, char **argv)
{
    const char         *bench = moon_bench_arg_str(argc, argv, "bench", "handover");
    const char         *path  = moon_bench_arg_str(argc, argv, "model", NULL);
    const char         *label = moon_bench_arg_str(argc, argv, "label", "model");
    uint32_t            iters = (uint32_t)moon_bench_arg_int(argc, argv, "iters", 5);
    uint32_t            thr   = (uint32_t)moon_bench_arg_int(argc, argv, "threads", 1);
    moon_serve_config_t cfg;

    if (path == NULL) {
        fprintf(stderr,
                "usage: bench_serve --bench=prefix_reuse|handover|decode|disagg_goodput|messages "
                "--model=M.gguf [--label=L] [--rounds=N] [--threads=N] [--requests=N] "
                "[--prompt=N] [--max-tokens=N] [--replicas=N]\n");
        return 2;
    }
    /* --rounds (alias --iters): anchor/measurement pairs, each line's ratio
     * is the median pair's */
    iters   = (uint32_t)moon_bench_arg_int(argc, argv, "rounds", iters);
    iters   = MOON_MIN(MOON_MAX(iters, 1u), 16u);
    g_track = calloc(MAX_REQS, sizeof(*g_track));
    moon_serve_config_default(&cfg);
    cfg.model_path     = path;
    cfg.store_dram_mib = 256;
    cfg.prefill_chunk  = 128;
    /* --prefill-chunk-alone=0: every chunk of --prefill-chunk's 128 tokens */
    cfg.prefill_chunk_alone =
        (uint32_t)moon_bench_arg_int(argc, argv, "prefill-chunk-alone", cfg.prefill_chunk_alone);
    /* --first-via-decode=1: the first token through the decode instance (the before of 26) */
    cfg.first_via_decode = (int)moon_bench_arg_int(argc, argv, "first-via-decode", 0);
    if (strcmp(bench, "prefix_reuse") == 0) {
        uint32_t n = (uint32_t)moon_bench_arg_int(argc, argv, "prompt", 2048);
        /* the new turn after the cached history: 64 tokens unless told */
        bench_prefix_reuse(&cfg, label, iters, n,
                           (uint32_t)moon_bench_arg_int(argc, argv, "shared", n > 64 ? n - 64 : 0));
    } else if (strcmp(bench, "handover") == 0) {
        bench_handover(&cfg, path, label, iters,
                       (uint32_t)moon_bench_arg_int(argc, argv, "prompt", 2048));
    } else if (strcmp(bench, "decode") == 0) {
        bench_decode(&cfg, path, label, thr, iters);
    } else if (strcmp(bench, "disagg_goodput") == 0) {
        bench_disagg(&cfg, path, label,
                     (uint32_t)MOON_MIN(moon_bench_arg_int(argc, argv, "requests", 48), MAX_REQS),
                     iters);
    } else if (strcmp(bench, "messages") == 0) {
        cfg.threads = thr;
        bench_messages(&cfg, label, (uint32_t)moon_bench_arg_int(argc, argv, "prompt", 2048),
                       (uint32_t)moon_bench_arg_int(argc, argv, "max-tokens", 128),
                       (uint32_t)moon_bench_arg_int(argc, argv, "replicas", 1));
    } else {
        fprintf(stderr, "bench_serve: unknown --bench=%s\n", bench);
        return 2;
    }
    free(g_track);
    return 0;
}
