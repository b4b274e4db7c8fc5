/* benchmarks/bench_kvstore_dist.c - the distributed KV store under mpirun:
 * rank 0 runs the store shards (one per block size, arenas registered with the
 * bulk lane), ranks 1..N are client ranks, each with one actor driving the
 * store client library. For each configuration the active client ranks start
 * together (MPI barrier), each keeps `depth` operations in flight, and rank 0
 * prints one JSON line: aggregate GB/s (or ops/s) over the slowest client's
 * wall time, p50/p99 of every operation's latency (issue -> on_done).
 *   get / put:  256 KiB, 4 MiB, 32 MiB blocks (reserve -> RDMA put -> commit;
 *               get -> RDMA get -> release), 1, 2, 4 clients
 *   small_put / small_get: 4 KiB blocks; query: longest prefix of 32-key
 *               prompts (half cached), 1, 2, 4 clients, depth 1 and then
 *               --small_depth (default 8, at most 64: a prompt's blocks are
 *               stored or read together); "in_flight" = clients x depth
 * Args (or env): --iters=N (scale of the counts), --min_mib=N (each bulk line
 * moves at least N MiB, default 2048: a steady state, as its anchor's 16 GiB;
 * a few hundred MiB mostly timed the first touches), --depth=N, --small_depth=N,
 * --small_only=1 (only the small operations), --small_mask=N (1 small_put, 2 small_get,
 * 4 query; default 7), --bulk_mask=N (1 256 KiB, 2 4 MiB, 4 32 MiB; default 7), --all=1 (run
 * 1, 2, 4... clients up to --clients=N and the job's size; default: only
 * size - 1 clients: idle ranks polling on 2 cores distort the figures), --checksum=0|1 (1, the
 * default: the client hashes every block it puts (XXH3) and checks every block it gets; 0: neither,
 * as Mooncake's store does). */
#include "bench_util.h"
#include "kv_kinds.h"

#include "moonlet/alloc.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/store_client.h"
#include "store_shard.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROMPT_KEYS 32
#define MAX_SMALL_DEPTH 64 /* 4 KiB blocks / queries in flight per client */
#define BUF_BYTES ((size_t)MAX_DEPTH * (32u << 20))

enum { OP_PUT = 1, OP_GET, OP_QUERY };

#define B_RUN_FIELDS(F, T)                                                                         \
    F(T, u32, op) F(T, u32, kind) F(T, u32, depth) F(T, u64, iters) F(T, u64, key_base)
#define B_MSGS(X) X(B_MSG_RUN, b_run_t, B_RUN_FIELDS) X(B_MSG_DUMP, b_dump_t, B_RUN_FIELDS)
MOON_MSG_DECLARE(B_MSGS, 210, B_MSG_END)
MOON_MSG_DEFINE(B_MSGS, b_msg_descs)

static moon_dist_t    *g_dist;
static moon_runtime_t *g_rt;
static int             g_rank, g_size, g_checksum = 1;

/* ---- the client actor --------------------------------------------------------- */
typedef struct {
    moon_addr_t shards[N_KINDS];
} bench_args_t;

typedef struct {
    moon_store_client_t *client[N_KINDS];
    moon_dist_region_t  *reg;
    unsigned char       *buf; /* BUF_BYTES: MAX_DEPTH buffers of 32 MiB (4 KiB each for
                                 small blocks), registered once */
    moon_kv_key_t prompt[PROMPT_KEYS];
    /* the run in progress */
    uint32_t     op, kind, depth;
    uint64_t     iters, issued, completed, key_base, n_errors;
    uint64_t     t_issue[MAX_SMALL_DEPTH];
    double      *lat; /* iters */
    _Atomic int *done;
} bench_state_t;

static moon_bench_done_t g_done = MOON_BENCH_DONE_INIT;
static _Atomic int       g_dumped;
static double           *g_lat;
static uint64_t          g_errors;

static moon_kv_key_t key_of(uint32_t kind, uint64_t i)
{
    return (moon_kv_key_t){((uint64_t)g_rank << 48) | i, 0xbe7c0000ull + kind};
}

static moon_status_t issue(moon_actor_t *self, bench_state_t *st, uint32_t slot)
{
    moon_store_client_t *c      = st->client[st->kind];
    size_t               n      = kind_bytes[st->kind];
    size_t               stride = st->kind == 3 ? kind_bytes[3] : (32u << 20);
    unsigned char       *buf    = st->buf + (size_t)slot * stride;
    uint64_t             i      = st->issued++;
    moon_status_t        status;

    (void)self;
    st->t_issue[slot] = moon_bench_now_ns();
    switch (st->op) {
    case OP_PUT:
        status =
            moon_store_client_put(c, key_of(st->kind, st->key_base + i), buf, n, st->reg, slot);
        break;
    case OP_GET: /* the keys key_base .. key_base + depth were stored first */
        status = moon_store_client_get(c, key_of(st->kind, st->key_base + i % st->depth), buf,
                                       stride, st->reg, slot);
        break;
    default:
        status = moon_store_client_query(c, MOON_STORE_OP_PREFIX, st->prompt, PROMPT_KEYS, slot);
        break;
    }
    return status;
}

static void finish_run(bench_state_t *st)
{
    g_errors = st->n_errors;
    moon_bench_done_set(&g_done);
}

static void bench_on_done(moon_actor_t *self, void *arg, const moon_store_done_t *done)
{
    bench_state_t *st   = moon_actor_state(self);
    uint32_t       slot = (uint32_t)done->cookie;

    (void)arg;
    if (done->status != MOON_OK) {
        if (st->n_errors++ == 0) {
            fprintf(stderr, "rank %d: store op %u failed: %s\n", g_rank, st->op,
                    moon_status_str(done->status));
        }
    }
    st->lat[st->completed++] = (double)(moon_bench_now_ns() - st->t_issue[slot]);
    if (st->completed == st->iters) {
        finish_run(st);
        return;
    }
    if (st->issued < st->iters && issue(self, st, slot) != MOON_OK) {
        st->n_errors++;
        st->lat[st->completed++] = 0;
        if (st->completed == st->iters) {
            finish_run(st);
        }
    }
}

static moon_status_t bench_init(moon_actor_t *self, const void *args)
{
    const bench_args_t        *a  = args;
    bench_state_t             *st = moon_actor_state(self);
    moon_store_client_config_t cfg;
    moon_status_t              status;

    memset(&cfg, 0, sizeof(cfg));
    cfg.dist          = g_dist;
    cfg.n_shards      = 1;
    cfg.n_replicas    = 1;
    cfg.tag           = (moon_kv_tag_t){1, 1};
    cfg.max_ops       = MAX_SMALL_DEPTH;
    cfg.verify_get    = g_checksum;
    cfg.skip_checksum = !g_checksum;
    cfg.on_done       = bench_on_done;
    for (uint32_t k = 0; k < N_KINDS; k++) {
        cfg.shards = &a->shards[k];
        status     = moon_store_client_create(self, &cfg, &st->client[k]);
        if (status != MOON_OK) {
            return status;
        }
    }
    st->buf = moon_aligned_alloc(4096, BUF_BYTES);
    if (st->buf == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < BUF_BYTES; i += 4096) {
        st->buf[i] = (unsigned char)(i >> 12); /* touch every page */
    }
    for (uint32_t i = 0; i < PROMPT_KEYS; i++) {
        st->prompt[i] = key_of(3, (1ull << 40) + i); /* the first half is stored by prepare */
    }
    return moon_dist_region_register(g_dist, st->buf, BUF_BYTES, &st->reg);
}

static void bench_fini(moon_actor_t *self)
{
    bench_state_t *st = moon_actor_state(self);

    moon_dist_region_deregister(g_dist, st->reg);
    for (uint32_t k = 0; k < N_KINDS; k++) {
        moon_store_client_destroy(st->client[k]);
    }
    moon_free(st->buf);
}

static moon_status_t bench_on_run(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bench_state_t *st = moon_actor_state(self);
    const b_run_t *r  = (const b_run_t *)msg;

    st->op        = r->op;
    st->kind      = r->kind;
    st->depth     = MOON_MIN(r->depth,
                             (uint32_t)MOON_MIN(r->iters, r->kind == 3 ? MAX_SMALL_DEPTH : MAX_DEPTH));
    st->iters     = r->iters;
    st->key_base  = r->key_base;
    st->issued    = 0;
    st->completed = 0;
    st->n_errors  = 0;
    st->lat       = g_lat;
    for (uint32_t s = 0; s < st->depth; s++) {
        if (issue(self, st, s) != MOON_OK) {
            st->n_errors++;
            st->lat[st->completed++] = 0;
        }
    }
    if (st->completed == st->iters) {
        finish_run(st);
    }
    return MOON_OK;
}

static moon_status_t bench_on_dump(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bench_state_t *st = moon_actor_state(self);

    (void)msg;
    MOON_WARN("bench client: %llu of %llu issued, %llu completed", (unsigned long long)st->issued,
              (unsigned long long)st->iters, (unsigned long long)st->completed);
    for (uint32_t k = 0; k < N_KINDS; k++) {
        moon_store_client_log_pending(st->client[k]);
    }
    atomic_store(&g_dumped, 1);
    return MOON_OK;
}

static moon_status_t bench_on_store(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bench_state_t *st = moon_actor_state(self);

    for (uint32_t k = 0; k < N_KINDS; k++) {
        if (moon_store_client_handle(st->client[k], msg)) {
            return MOON_OK;
        }
    }
    return MOON_OK;
}

static const moon_actor_ops_t bench_ops = {
    .name        = "bench-client",
    .state_bytes = sizeof(bench_state_t),
    .init        = bench_init,
    .fini        = bench_fini,
    .on_msg      = {MOON_STORE_CLIENT_ON_MSG(bench_on_store), [MOON_MSG_SYS_DOWN] = bench_on_store,
                    [B_MSG_RUN] = bench_on_run, [B_MSG_DUMP] = bench_on_dump},
};

/* ---- driver (main threads) ----------------------------------------------------- */
static moon_addr_t g_actor;

/* Runs one operation loop on this client rank; returns elapsed ns. */
static uint64_t run_local(uint32_t op, uint32_t kind, uint32_t depth, uint64_t iters,
                          uint64_t key_base)
{
    b_run_t *m = moon_msg_new(B_MSG_RUN, 0);
    uint64_t t0, t1;

    m->op       = op;
    m->kind     = kind;
    m->depth    = depth;
    m->iters    = iters;
    m->key_base = key_base;
    moon_bench_done_reset(&g_done);
    t0 = moon_bench_now_ns();
    if (moon_runtime_send(g_rt, g_actor, &m->hdr) != MOON_OK) {
        fprintf(stderr, "rank %d: cannot reach the bench actor\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (moon_bench_done_wait(&g_done, 120ull * 1000 * 1000 * 1000, &t1) != 0) {
        /* a completion never came: say so rather than hang the suite */
        b_dump_t       *dump = moon_msg_new(B_MSG_DUMP, 0);
        struct timespec ts   = {0, 100000};

        fprintf(stderr, "rank %d: op %u on kind %u (%llu ops, depth %u) not done after 120 s\n",
                g_rank, op, kind, (unsigned long long)iters, depth);
        if (dump != NULL && moon_runtime_send(g_rt, g_actor, &dump->hdr) == MOON_OK) {
            for (int i = 0; i < 1000 && !atomic_load(&g_dumped); i++) {
                nanosleep(&ts, NULL);
            }
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return t1 - t0;
}

/* Waits for a non-blocking collective without spinning in MPI: a rank's main
 * thread busy in MPI_Barrier takes a core from the actors on 2-core machines.
 * The naps back off: the server rank waits here through every measured run,
 * and a wake each 50 us took its core from the store for ~10 us each. */
static void wait_req(MPI_Request *req)
{
    int      done   = 0;
    uint32_t nap_us = 50;

    while (MPI_Test(req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
        moon_bench_backoff_nap(&nap_us);
    }
}

static void quiet_barrier(void)
{
    MPI_Request req;

    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    wait_req(&req);
}

/* One configuration: every rank calls it (collective). */
static void run_config(const char *bench, uint32_t op, uint32_t kind, int clients, uint32_t depth,
                       uint64_t iters, uint64_t *key_base)
{
    int      active = g_rank >= 1 && g_rank <= clients;
    uint64_t ns = 0, max_ns = 0, errors = 0, sum_errors = 0;
    double  *all   = NULL;
    int      n_lat = active ? (int)iters : 0, *counts = NULL, *displs = NULL;

    quiet_barrier();              /* nobody still runs the previous configuration (its puts would
                                     evict the blocks stored here) */
    if (active && op == OP_GET) { /* the blocks to read, stored first */
        (void)run_local(OP_PUT, kind, depth, depth, *key_base);
        if (g_errors != 0) {
            fprintf(stderr, "rank %d: storing the blocks to read failed\n", g_rank);
        }
    }
    if (active) {
        /* warm-up: a tenth of the count, at least one round of depth and, for
         * blocks, as many as the arena has slots: a client's first write to a
         * page of a shard's arena faults it into its own mapping (~1.5 us per
         * 4 KiB page, a cold put runs at ~2 GB/s), and the anchor measures a
         * warm buffer too */
        uint64_t warm = MOON_MAX(iters / 10, depth);
        if (kind != 3 && op != OP_QUERY) {
            warm = MOON_MAX(warm, kind_slots[kind]);
        }
        (void)run_local(op, kind, depth, warm, op == OP_GET ? *key_base : *key_base + (1ull << 32));
    }
    quiet_barrier();
    if (active) {
        ns     = run_local(op, kind, depth, iters, *key_base + (op == OP_PUT ? (2ull << 32) : 0));
        errors = g_errors;
    }
    *key_base += 4ull << 32;
    {
        MPI_Request req[2];
        MPI_Ireduce(&ns, &max_ns, 1, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD, &req[0]);
        MPI_Ireduce(&errors, &sum_errors, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD, &req[1]);
        wait_req(&req[0]);
        wait_req(&req[1]);
    }
    if (g_rank == 0) {
        counts = calloc((size_t)g_size, sizeof(int));
        displs = calloc((size_t)g_size, sizeof(int));
    }
    MPI_Gather(&n_lat, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        int total = 0;
        for (int r = 0; r < g_size; r++) {
            displs[r] = total;
            total += counts[r];
        }
        all = malloc(sizeof(double) * (size_t)MOON_MAX(total, 1));
    }
    MPI_Gatherv(g_lat, n_lat, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        size_t            total = (size_t)clients * iters;
        double            secs  = (double)max_ns * 1e-9;
        moon_bench_json_t j;

        moon_bench_json_begin(&j);
        moon_bench_json_str(&j, "suite", "kvstore");
        moon_bench_json_str(&j, "bench", bench);
        moon_bench_json_str(&j, "impl", "moonlet");
        moon_bench_json_int(&j, "size_bytes",
                            op == OP_QUERY ? PROMPT_KEYS * 16 : (int64_t)kind_bytes[kind]);
        moon_bench_json_int(&j, "clients", clients);
        moon_bench_json_int(&j, "depth", depth);
        moon_bench_json_int(&j, "in_flight", (int64_t)clients * depth);
        moon_bench_json_int(&j, "iters", (int64_t)total);
        if (kind == 3 || op == OP_QUERY) {
            moon_bench_json_num(&j, "ops_per_s", (double)total / secs);
        } else {
            moon_bench_json_num(&j, "gb_per_s",
                                (double)total * (double)kind_bytes[kind] / secs / 1e9);
        }
        moon_bench_json_num(&j, "p50_us", moon_bench_percentile(all, total, 50) / 1e3);
        moon_bench_json_num(&j, "p99_us", moon_bench_percentile(all, total, 99) / 1e3);
        moon_bench_json_int(&j, "checksum", g_checksum);
        moon_bench_json_int(&j, "errors", (int64_t)sum_errors);
        moon_bench_json_str(&j, "engine", moon_dist_engine(g_dist));
        moon_bench_json_end(&j);
        fflush(stdout);
        free(all);
        free(counts);
        free(displs);
    }
}

static void stop_and_wait(moon_addr_t a)
{
    moon_actor_stats_t st;

    (void)moon_stop(g_rt, a, MOON_OK);
    while (moon_actor_stats(g_rt, a, &st) == MOON_OK) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv)
{
    moon_runtime_config_t cfg;
    moon_addr_t           shards[N_KINDS];
    int64_t               iters, max_clients, depth, min_bytes;
    int                   all, small_only, small_mask, bulk_mask;
    int64_t               small_depth;
    uint64_t              key_base = 1;
    char                  name[64];

    if (moon_dist_init(&argc, &argv, NULL, &g_dist) != MOON_OK) {
        fprintf(stderr, "bench_kvstore_dist: moon_dist_init failed\n");
        return 1;
    }
    iters       = moon_bench_arg_int(argc, argv, "iters", 200);
    depth       = MOON_MIN(moon_bench_arg_int(argc, argv, "depth", 4), MAX_DEPTH);
    min_bytes   = MOON_MAX(moon_bench_arg_int(argc, argv, "min_mib", 2048), 0) << 20;
    max_clients = moon_bench_arg_int(argc, argv, "clients", 4);
    all         = (int)moon_bench_arg_int(argc, argv, "all", 0);
    g_checksum  = (int)moon_bench_arg_int(argc, argv, "checksum", 1);
    small_only  = (int)moon_bench_arg_int(argc, argv, "small_only", 0);
    small_mask  = (int)moon_bench_arg_int(argc, argv, "small_mask", 7);
    bulk_mask   = (int)moon_bench_arg_int(argc, argv, "bulk_mask", 7);
    small_depth =
        MOON_MAX(MOON_MIN(moon_bench_arg_int(argc, argv, "small_depth", 8), MAX_SMALL_DEPTH), 1);
    g_rank = (int)moon_dist_rank(g_dist);
    g_size = (int)moon_dist_size(g_dist);
    if (g_size < 2) {
        fprintf(stderr, "bench_kvstore_dist: run under mpirun -np 2 or more\n");
        moon_dist_finalize(g_dist);
        return 1;
    }
    moon_runtime_config_default(&cfg);
    cfg.rank        = (uint32_t)g_rank;
    cfg.n_workers   = 1;
    cfg.pin_workers = 0;
    cfg.max_actors  = 1024;
    if (moon_runtime_create(&cfg, &g_rt) != MOON_OK || moon_dist_start(g_dist, g_rt) != MOON_OK ||
        moon_msg_register(b_msg_descs) != MOON_OK || moon_store_msgs_register() != MOON_OK ||
        moon_runtime_start(g_rt) != MOON_OK) {
        fprintf(stderr, "rank %d: runtime start failed\n", g_rank);
        return 1;
    }
    /* latencies of one line: the most operations any line runs */
    g_lat = calloc((size_t)MOON_MAX(iters * 64, min_bytes / (int64_t)kind_bytes[0]) + 1024,
                   sizeof(double));
    if (g_rank == 0) {
        for (uint32_t k = 0; k < N_KINDS; k++) {
            moon_store_shard_args_t a = {.shard_id   = 0,
                                         .slot_bytes = kind_bytes[k],
                                         .n_slots    = kind_slots[k],
                                         .dist       = g_dist,
                                         .name       = name};
            snprintf(name, sizeof(name), "bench/shard/%u", k);
            if (moon_spawn(g_rt, &moon_store_shard_ops, &a, NULL, &shards[k]) != MOON_OK) {
                fprintf(stderr, "rank 0: shard spawn failed\n");
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    moon_dist_barrier(g_dist);
    if (g_rank != 0) {
        bench_args_t a;
        for (uint32_t k = 0; k < N_KINDS; k++) {
            snprintf(name, sizeof(name), "bench/shard/%u", k);
            if (moon_dist_whereis(g_dist, name, 10000000000ull, &a.shards[k]) != MOON_OK) {
                fprintf(stderr, "rank %d: no store shard %s\n", g_rank, name);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        if (moon_spawn(g_rt, &bench_ops, &a, NULL, &g_actor) != MOON_OK) {
            fprintf(stderr, "rank %d: bench actor spawn failed\n", g_rank);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        /* the cached half of the query prompt */
        (void)run_local(OP_PUT, 3, 1, PROMPT_KEYS / 2, (1ull << 40));
    }
    quiet_barrier();
    for (int c = all ? 1 : g_size - 1; c <= MOON_MIN(max_clients, g_size - 1); c *= 2) {
        for (uint32_t k = 0; k < 3 && !small_only; k++) {
            uint64_t n = (uint64_t)MOON_MAX(MOON_MAX(iters / (int64_t)(1u << (2 * k)), 8),
                                            min_bytes / (int64_t)kind_bytes[k]);

            if (!(bulk_mask & (1 << k))) {
                continue;
            }
            run_config("put", OP_PUT, k, c, (uint32_t)depth, n, &key_base);
            run_config("get", OP_GET, k, c, (uint32_t)depth, n, &key_base);
        }
        /* small operations at depth 1, then at --small_depth (a prompt's
         * blocks are put or read together, so several are in flight) */
        for (int i = 0; i < (small_depth > 1 ? 2 : 1); i++) {
            uint64_t n  = (uint64_t)iters * 20;
            int64_t  sd = i == 0 ? 1 : small_depth;

            if (small_mask & 1) {
                run_config("small_put", OP_PUT, 3, c, (uint32_t)sd, n, &key_base);
            }
            if (small_mask & 2) {
                run_config("small_get", OP_GET, 3, c, (uint32_t)sd, n, &key_base);
            }
            if (small_mask & 4) {
                run_config("query", OP_QUERY, 3, c, (uint32_t)sd, n, &key_base);
            }
        }
    }
    quiet_barrier();
    /* end the actors (regions deregistered) before the engine closes */
    if (g_actor != MOON_ADDR_NONE) {
        stop_and_wait(g_actor);
    }
    for (uint32_t k = 0; g_rank == 0 && k < N_KINDS; k++) {
        stop_and_wait(shards[k]);
    }
    quiet_barrier();
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_dist_stop(g_dist);
    moon_runtime_destroy(g_rt);
    moon_dist_finalize(g_dist);
    free(g_lat);
    return 0;
}
