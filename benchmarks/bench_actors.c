/* benchmarks/bench_actors.c - the Savina trio on the in-process runtime:
 *   pingpong  two actors, N round trips
 *   ring      A actors pass one token H hops
 *   forkjoin  one sender, W actors, M messages each
 * One benchmark per process (peak RSS is per process); prints one JSON line:
 * suite, bench, impl, msgs_per_s, peak_rss_mib and the parameters.
 * Usage: bench_actors --bench=pingpong|ring|forkjoin [--n=...] [--workers=...] */
#include "bench_util.h"

#include "moonlet/moonlet.h"

#include <stdio.h>
#include <string.h>

#define B_N_FIELDS(F, T) F(T, u64, n)
#define B_MSGS(X)                                                                                  \
    X(B_MSG_PING, b_ping_t, B_N_FIELDS)                                                            \
    X(B_MSG_TOKEN, b_token_t, B_N_FIELDS)                                                          \
    X(B_MSG_NEXT, b_next_t, B_N_FIELDS)                                                            \
    X(B_MSG_DONE, b_done_t, B_N_FIELDS)
MOON_MSG_DECLARE(B_MSGS, 240, B_MSG_END)
MOON_MSG_DEFINE(B_MSGS, b_msg_descs)

static inline moon_status_t send_n(moon_actor_t *self, moon_addr_t to, uint32_t type, uint64_t n)
{
    b_ping_t *m = moon_msg_new(type, 0);

    if (MOON_UNLIKELY(m == NULL)) {
        return MOON_ERR_NO_MEMORY;
    }
    m->n = n;
    return moon_tell(self, to, &m->hdr);
}

/* ---- pingpong: n counts messages; whoever sees the limit stops the run --- */
typedef struct {
    uint64_t    limit;
    moon_addr_t peer; /* MOON_ADDR_NONE: wait to be pinged */
} pp_args_t;

static moon_status_t pp_init(moon_actor_t *self, const void *args)
{
    const pp_args_t *a = args;

    *(uint64_t *)moon_actor_state(self) = a->limit;
    return a->peer != MOON_ADDR_NONE ? send_n(self, a->peer, B_MSG_PING, 1) : MOON_OK;
}

static moon_status_t pp_on_ping(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    uint64_t n = ((const b_ping_t *)msg)->n;

    if (n >= *(uint64_t *)moon_actor_state(self)) {
        moon_runtime_shutdown(moon_actor_runtime(self), 0);
        return MOON_OK;
    }
    return send_n(self, msg->src, B_MSG_PING, n + 1);
}

static const moon_actor_ops_t pp_ops = {
    .name        = "pp",
    .state_bytes = sizeof(uint64_t),
    .init        = pp_init,
    .on_msg      = {[B_MSG_PING] = pp_on_ping},
};

/* ---- ring: NEXT tells each actor its successor; TOKEN n hops on ----------- */
static moon_status_t ring_on_next(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    *(moon_addr_t *)moon_actor_state(self) = ((const b_next_t *)msg)->n;
    return MOON_OK;
}

static moon_status_t ring_on_token(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    uint64_t left = ((const b_token_t *)msg)->n;

    if (left == 0) {
        moon_runtime_shutdown(moon_actor_runtime(self), 0);
        return MOON_OK;
    }
    return send_n(self, *(moon_addr_t *)moon_actor_state(self), B_MSG_TOKEN, left - 1);
}

static const moon_actor_ops_t ring_ops = {
    .name        = "ring",
    .state_bytes = sizeof(moon_addr_t),
    .on_msg      = {[B_MSG_NEXT] = ring_on_next, [B_MSG_TOKEN] = ring_on_token},
};

/* ---- forkjoin: workers count PINGs and report DONE to the sender ---------- */
static moon_status_t fj_on_ping(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    uint64_t *got = moon_actor_state(self);

    /* The last round carries n == 1: the worker has then had all of them. */
    ++*got;
    return ((const b_ping_t *)msg)->n == 1 ? send_n(self, msg->src, B_MSG_DONE, *got) : MOON_OK;
}

static const moon_actor_ops_t fj_worker_ops = {
    .name        = "fj-worker",
    .state_bytes = sizeof(uint64_t),
    .on_msg      = {[B_MSG_PING] = fj_on_ping},
};

typedef struct {
    const moon_addr_t *workers; /* borrowed from main for the run */
    uint32_t           n_workers, n_done;
    uint64_t           rounds_left, n_received;
} fj_sender_t;

static moon_status_t fj_sender_init(moon_actor_t *self, const void *args)
{
    fj_sender_t *st = moon_actor_state(self);

    *st = *(const fj_sender_t *)args;
    return send_n(self, moon_actor_addr(self), B_MSG_NEXT, 0);
}

/* One round per turn: a message to every worker, then a NEXT to itself, so
 * the sender's turns stay short and back-pressure can mute it. */
static moon_status_t fj_on_next(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    fj_sender_t  *st = moon_actor_state(self);
    moon_status_t status;

    (void)msg;
    for (uint32_t i = 0; i < st->n_workers; i++) {
        status = send_n(self, st->workers[i], B_MSG_PING, st->rounds_left);
        if (status != MOON_OK) {
            return status;
        }
    }
    return --st->rounds_left > 0 ? send_n(self, moon_actor_addr(self), B_MSG_NEXT, 0) : MOON_OK;
}

static moon_status_t fj_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    fj_sender_t *st = moon_actor_state(self);

    st->n_received += ((const b_done_t *)msg)->n;
    if (++st->n_done == st->n_workers) {
        moon_runtime_shutdown(moon_actor_runtime(self), 0);
    }
    return MOON_OK;
}

static const moon_actor_ops_t fj_sender_ops = {
    .name        = "fj-sender",
    .state_bytes = sizeof(fj_sender_t),
    .init        = fj_sender_init,
    .on_msg      = {[B_MSG_NEXT] = fj_on_next, [B_MSG_DONE] = fj_on_done},
};

/* ---- driver --------------------------------------------------------------- */
static void ext_send(moon_runtime_t *rt, moon_addr_t to, uint32_t type, uint64_t n)
{
    b_ping_t *m = moon_msg_new(type, 0);

    MOON_CHECK(m != NULL);
    m->n = n;
    MOON_CHECK(moon_runtime_send(rt, to, &m->hdr) == MOON_OK);
}

int main(int argc, char **argv)
{
    const char           *bench  = moon_bench_arg_str(argc, argv, "bench", "pingpong");
    uint64_t              n      = (uint64_t)moon_bench_arg_int(argc, argv, "n", 0);
    uint32_t              actors = (uint32_t)moon_bench_arg_int(argc, argv, "actors", 0);
    moon_runtime_config_t cfg;
    moon_runtime_t       *rt;
    moon_bench_json_t     j;
    moon_addr_t          *addrs = NULL;
    uint64_t              t0, t1, n_msgs;
    moon_runtime_stats_t  rs;

    moon_runtime_config_default(&cfg);
    cfg.n_workers = (uint32_t)moon_bench_arg_int(argc, argv, "workers", 0);
    if (moon_msg_register(b_msg_descs) != MOON_OK || moon_runtime_create(&cfg, &rt) != MOON_OK) {
        return 1;
    }
    t0 = moon_bench_now_ns();
    if (strcmp(bench, "pingpong") == 0) {
        pp_args_t   args = {.limit = 2 * (n ? n : 1000000), .peer = MOON_ADDR_NONE};
        moon_addr_t a, b;

        n_msgs = args.limit;
        MOON_CHECK(moon_spawn(rt, &pp_ops, &args, NULL, &b) == MOON_OK);
        args.peer = b;
        t0        = moon_bench_now_ns();
        MOON_CHECK(moon_spawn(rt, &pp_ops, &args, NULL, &a) == MOON_OK); /* serves first */
    } else if (strcmp(bench, "ring") == 0) {
        actors = actors ? actors : 1000;
        n_msgs = n ? n : 10000000;
        addrs  = moon_calloc(actors, sizeof(*addrs));
        for (uint32_t i = 0; i < actors; i++) {
            MOON_CHECK(moon_spawn(rt, &ring_ops, NULL, NULL, &addrs[i]) == MOON_OK);
        }
        for (uint32_t i = 0; i < actors; i++) {
            ext_send(rt, addrs[i], B_MSG_NEXT, addrs[(i + 1) % actors]);
        }
        t0 = moon_bench_now_ns();
        ext_send(rt, addrs[0], B_MSG_TOKEN, n_msgs);
    } else if (strcmp(bench, "forkjoin") == 0) {
        fj_sender_t args = {0};
        moon_addr_t sender;

        actors = actors ? actors : 60;
        n      = n ? n : 100000;
        n_msgs = (uint64_t)actors * n;
        addrs  = moon_calloc(actors, sizeof(*addrs));
        for (uint32_t i = 0; i < actors; i++) {
            MOON_CHECK(moon_spawn(rt, &fj_worker_ops, NULL, NULL, &addrs[i]) == MOON_OK);
        }
        args = (fj_sender_t){.workers = addrs, .n_workers = actors, .rounds_left = n};
        t0   = moon_bench_now_ns();
        MOON_CHECK(moon_spawn(rt, &fj_sender_ops, &args, NULL, &sender) == MOON_OK);
    } else {
        fprintf(stderr, "unknown --bench=%s (pingpong, ring, forkjoin)\n", bench);
        return 2;
    }
    moon_runtime_run(rt);
    t1 = moon_bench_now_ns();
    moon_runtime_stats(rt, &rs);
    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "suite", "actors");
    moon_bench_json_str(&j, "bench", bench);
    moon_bench_json_str(&j, "impl", "moonlet");
    moon_bench_json_int(&j, "actors", bench[0] == 'p' ? 2 : (int64_t)actors);
    moon_bench_json_int(&j, "msgs", (int64_t)n_msgs);
    moon_bench_json_int(&j, "workers", (int64_t)rs.n_workers);
    moon_bench_json_num(&j, "seconds", (double)(t1 - t0) * 1e-9);
    moon_bench_json_num(&j, "msgs_per_s", (double)n_msgs * 1e9 / (double)(t1 - t0));
    moon_bench_json_num(&j, "peak_rss_mib", moon_bench_peak_rss_mib());
    moon_bench_json_end(&j);
    moon_runtime_destroy(rt);
    moon_free(addrs);
    return 0;
}
