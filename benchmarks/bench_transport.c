/* benchmarks/bench_transport.c - the distributed runtime between two ranks
 * (mpirun -np 2): actor round trip of a 64-byte message, one-way stream of
 * small messages, bulk get and put (4 MiB, 64 MiB), plus the MPI ping-pong
 * anchor measured in the same run. Rank 0 prints one JSON line per
 * configuration. The ucx_perftest anchors come from benchmarks/suites/transport.sh.
 * Lone round trips (--idle_rts, one each --idle_gap_ms) measure the latency
 * of a message that finds both ranks idle (their threads asleep), which is
 * what an idle cluster's first request pays; median and max in us.
 * Args (or env): --tls=shm|tcp (label only: UCX_TLS selects), --rt_iters,
 * --mpi_iters (default rt_iters), --stream_msgs, --bulk_iters (0 skips a part:
 * the suite runs the round trips apart, alternating with their anchor). */
#include "bench_util.h"

#include "moonlet/dist.h"
#include "moonlet/runtime.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define B_X_FIELDS(F, T) F(T, u64, x) F(T, bytes, pad)
#define B_MSGS(X)                                                                                  \
    X(B_PING, b_ping_t, B_X_FIELDS)                                                                \
    X(B_PONG, b_pong_t, B_X_FIELDS)                                                                \
    X(B_DATA, b_data_t, B_X_FIELDS)                                                                \
    X(B_GO, b_go_t, B_X_FIELDS)                                                                    \
    X(B_ACK, b_ack_t, B_X_FIELDS)
MOON_MSG_DECLARE(B_MSGS, 220, B_END)
MOON_MSG_DEFINE(B_MSGS, b_descs)

static moon_dist_t    *g_dist;
static moon_runtime_t *g_rt;
static uint32_t        g_rank;
static const char     *g_tls;

/* a message of exactly 64 bytes: 24 header + 8 x + 8 span + 24 payload */
static void *msg64(uint32_t type, uint64_t x)
{
    b_ping_t *m = moon_msg_new(type, 24);

    if (m != NULL) {
        m->x = x;
        memset(moon_msg_span_alloc(m, &m->pad, 24, 1, 0), 0x42, 24);
    }
    return m;
}

static void tell(moon_actor_t *self, moon_addr_t to, void *m)
{
    if (m == NULL || moon_send(self, to, m) != MOON_OK) {
        moon_msg_release(m);
    }
}

/* A phase that has not ended after this long is stuck: say so. */
static void wait_done(moon_bench_done_t *done, const char *what)
{
    if (moon_bench_done_wait(done, 300ull * 1000000000ull, NULL) != 0) {
        fprintf(stderr, "rank %u: %s not done after 300 s\n", g_rank, what);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* ---- round trip ----------------------------------------------------------- */
static moon_bench_done_t g_rt_done = MOON_BENCH_DONE_INIT;
static uint64_t          g_rt_iters, g_rt_warm, g_rt_t0, g_rt_t1;
static moon_addr_t       g_echo;

static moon_status_t echo_on_ping(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    tell(self, msg->src, msg64(B_PONG, ((const b_ping_t *)msg)->x));
    return MOON_OK;
}
static moon_status_t pinger_on_go(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)msg;
    tell(self, g_echo, msg64(B_PING, 0));
    return MOON_OK;
}
static moon_status_t pinger_on_pong(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    uint64_t x = ((const b_pong_t *)msg)->x + 1;

    if (x == g_rt_warm) {
        g_rt_t0 = moon_bench_now_ns();
    }
    if (x == g_rt_warm + g_rt_iters) {
        g_rt_t1 = moon_bench_now_ns();
        moon_bench_done_set(&g_rt_done);
        return MOON_OK;
    }
    tell(self, g_echo, msg64(B_PING, x));
    return MOON_OK;
}

/* ---- stream --------------------------------------------------------------- */
static moon_bench_done_t g_st_done = MOON_BENCH_DONE_INIT;
static uint64_t          g_st_n, g_st_sent, g_st_got, g_st_t0, g_st_t1;
static moon_addr_t       g_sink;

static moon_status_t sink_on_data(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    if (++g_st_got == g_st_n) {
        g_st_got = 0;
        tell(self, msg->src, msg64(B_ACK, 0));
    }
    return MOON_OK;
}
static moon_status_t streamer_on_go(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    uint64_t end = MOON_MIN(g_st_n, g_st_sent + 256);

    (void)msg;
    if (g_st_sent == 0) {
        g_st_t0 = moon_bench_now_ns();
    }
    for (; g_st_sent < end; g_st_sent++) {
        b_data_t *m = moon_msg_new(B_DATA, 0);
        m->x        = g_st_sent;
        tell(self, g_sink, m);
    }
    if (g_st_sent < g_st_n) {
        tell(self, moon_actor_addr(self), msg64(B_GO, 0));
    }
    return MOON_OK;
}
static moon_status_t streamer_on_ack(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    (void)msg;
    g_st_t1 = moon_bench_now_ns();
    moon_bench_done_set(&g_st_done);
    return MOON_OK;
}

/* ---- bulk ----------------------------------------------------------------- */
static moon_bench_done_t   g_bk_done = MOON_BENCH_DONE_INIT;
static uint64_t            g_bk_total, g_bk_issued, g_bk_completed, g_bk_t0, g_bk_t1;
static int                 g_bk_put, g_bk_failed;
static size_t              g_bk_size;
static char               *g_bk_local, g_bk_desc[512];
static size_t              g_bk_desc_len;
static moon_dist_region_t *g_bk_lreg;

static void bulk_issue(moon_actor_t *self)
{
    moon_status_t status;

    if (g_bk_put) {
        status = moon_dist_put(g_dist, g_bk_local, g_bk_lreg, g_bk_desc, g_bk_desc_len, 0,
                               g_bk_size, moon_actor_addr(self), g_bk_issued);
    } else {
        status = moon_dist_get(g_dist, g_bk_local, g_bk_lreg, g_bk_desc, g_bk_desc_len, 0,
                               g_bk_size, moon_actor_addr(self), g_bk_issued);
    }
    g_bk_failed |= status != MOON_OK;
    g_bk_issued++;
}
static moon_status_t bulker_on_go(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    uint64_t depth = ((const b_go_t *)msg)->x;

    g_bk_t0 = moon_bench_now_ns();
    for (uint64_t i = 0; i < depth && g_bk_issued < g_bk_total; i++) {
        bulk_issue(self);
    }
    return MOON_OK;
}
static moon_status_t bulker_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    g_bk_failed |= ((const moon_dist_bulk_done_t *)msg)->status != MOON_OK;
    if (++g_bk_completed == g_bk_total) {
        g_bk_t1 = moon_bench_now_ns();
        moon_bench_done_set(&g_bk_done);
    } else if (g_bk_issued < g_bk_total) {
        bulk_issue(self);
    }
    return MOON_OK;
}

static const moon_actor_ops_t rank1_ops = {
    .name = "bench-echo", .on_msg = {[B_PING] = echo_on_ping, [B_DATA] = sink_on_data}};
static const moon_actor_ops_t rank0_ops = {.name   = "bench-driver",
                                           .on_msg = {[B_PING]                  = pinger_on_go,
                                                      [B_PONG]                  = pinger_on_pong,
                                                      [B_GO]                    = streamer_on_go,
                                                      [B_ACK]                   = streamer_on_ack,
                                                      [B_DATA]                  = bulker_on_go,
                                                      [MOON_MSG_DIST_BULK_DONE] = bulker_on_done}};

/* Optional dispatch trace (env MOON_BENCH_DISPATCH_TRACE=dir): with the
 * transport's MOON_DIST_TRACE it splits a round trip into its hops. */
static FILE *g_dtrace;
static void  dispatch_trace(void *arg, uint64_t now_ns, const moon_msg_hdr_t *msg, moon_addr_t dst)
{
    (void)arg;
    (void)dst;
    fprintf(g_dtrace, "dispatch %llu %s %llu\n", (unsigned long long)msg->seq,
            moon_msg_name(msg->type), (unsigned long long)now_ns);
}

static void json_line(const char *bench, const char *impl, uint64_t size, const char *metric,
                      double value, uint64_t iters)
{
    moon_bench_json_t j;

    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "suite", "transport");
    moon_bench_json_str(&j, "bench", bench);
    moon_bench_json_str(&j, "impl", impl);
    moon_bench_json_str(&j, "tls", g_tls);
    moon_bench_json_int(&j, "size_bytes", (int64_t)size);
    moon_bench_json_num(&j, metric, value);
    moon_bench_json_int(&j, "iters", (int64_t)iters);
    moon_bench_json_end(&j);
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* MPI ping-pong anchor, 64 B, on the main threads (same run, same machine). */
static void mpi_pingpong(uint64_t iters)
{
    char     buf[64] = {0};
    uint64_t t0      = 0;

    MPI_Barrier(MPI_COMM_WORLD);
    for (uint64_t i = 0; i < iters + iters / 10; i++) {
        if (i == iters / 10) {
            t0 = moon_bench_now_ns();
        }
        if (g_rank == 0) {
            MPI_Send(buf, 64, MPI_BYTE, 1, 5, MPI_COMM_WORLD);
            MPI_Recv(buf, 64, MPI_BYTE, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, 64, MPI_BYTE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 64, MPI_BYTE, 0, 5, MPI_COMM_WORLD);
        }
    }
    if (g_rank == 0) {
        json_line("roundtrip", "mpi", 64, "round_trips_per_s",
                  iters / ((moon_bench_now_ns() - t0) * 1e-9), iters);
    }
}

static void run_bulk(moon_addr_t driver, int put, size_t size, uint64_t iters, int quiet)
{
    b_go_t *go;

    g_bk_put    = put;
    g_bk_size   = size;
    g_bk_total  = iters;
    g_bk_issued = g_bk_completed = 0;
    g_bk_failed                  = 0;
    moon_bench_done_reset(&g_bk_done);
    go    = moon_msg_new(B_DATA, 0);
    go->x = size >= (32u << 20) ? 2 : 4; /* transfers in flight */
    if (moon_runtime_send(g_rt, driver, &go->hdr) != MOON_OK) {
        moon_msg_release(&go->hdr);
        return;
    }
    wait_done(&g_bk_done, "bulk transfers");
    if (quiet) {
        return;
    }
    json_line(put ? "bulk_put" : "bulk_get", "moonlet", size, "gb_per_s",
              g_bk_failed ? 0.0 : (double)size * iters / ((g_bk_t1 - g_bk_t0) * 1e-9) / 1e9, iters);
}

int main(int argc, char **argv)
{
    moon_runtime_config_t cfg;
    uint64_t              rt_iters, mpi_iters, stream_n, bulk_iters, idle_rts, idle_gap;
    moon_addr_t           me = MOON_ADDR_NONE, peer = MOON_ADDR_NONE;
    const size_t          max_bulk = 64u << 20;
    char                 *region;
    moon_dist_region_t   *reg;

    g_tls      = moon_bench_arg_str(argc, argv, "tls", "shm");
    rt_iters   = (uint64_t)moon_bench_arg_int(argc, argv, "rt_iters", 20000);
    mpi_iters  = (uint64_t)moon_bench_arg_int(argc, argv, "mpi_iters", (int64_t)rt_iters);
    stream_n   = (uint64_t)moon_bench_arg_int(argc, argv, "stream_msgs", 1000000);
    bulk_iters = (uint64_t)moon_bench_arg_int(argc, argv, "bulk_iters", 20);
    idle_rts   = (uint64_t)moon_bench_arg_int(argc, argv, "idle_rts", 0);
    idle_gap   = (uint64_t)moon_bench_arg_int(argc, argv, "idle_gap_ms", 50);
    if (moon_dist_init(&argc, &argv, NULL, &g_dist) != MOON_OK || moon_dist_size(g_dist) != 2) {
        fprintf(stderr, "bench_transport: run under mpirun -np 2\n");
        return 1;
    }
    g_rank = moon_dist_rank(g_dist);
    moon_msg_register(b_descs);
    moon_runtime_config_default(&cfg);
    cfg.rank        = g_rank;
    cfg.n_workers   = 1;
    cfg.pin_workers = 0;
    cfg.max_actors  = 1024;
    if (getenv("MOON_BENCH_DISPATCH_TRACE") != NULL) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/dispatch.%u.log", getenv("MOON_BENCH_DISPATCH_TRACE"),
                 g_rank);
        g_dtrace = fopen(path, "w");
        if (g_dtrace != NULL) {
            cfg.trace = dispatch_trace;
        }
    }
    if (moon_runtime_create(&cfg, &g_rt) != MOON_OK || moon_dist_start(g_dist, g_rt) != MOON_OK ||
        moon_runtime_start(g_rt) != MOON_OK) {
        fprintf(stderr, "bench_transport: start failed\n");
        return 1;
    }
    if (mpi_iters > 0) {
        mpi_pingpong(mpi_iters);
    }
    moon_spawn(g_rt, g_rank == 0 ? &rank0_ops : &rank1_ops, NULL, NULL, &me);
    MPI_Sendrecv(&me, 1, MPI_UINT64_T, 1 - (int)g_rank, 1, &peer, 1, MPI_UINT64_T, 1 - (int)g_rank,
                 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    g_echo = g_sink = peer;

    /* round trip */
    if (g_rank == 0 && rt_iters > 0) {
        g_rt_iters = rt_iters;
        g_rt_warm  = rt_iters / 10;
        moon_runtime_send(g_rt, me, msg64(B_PING, 0));
        wait_done(&g_rt_done, "round trips");
        json_line("roundtrip", "moonlet", 64, "round_trips_per_s",
                  rt_iters / ((g_rt_t1 - g_rt_t0) * 1e-9), rt_iters);
    }
    moon_dist_barrier(g_dist);

    /* lone round trips, each after idle_gap ms of nothing */
    if (g_rank == 0 && idle_rts > 0) {
        double *us = calloc(idle_rts, sizeof(*us));
        for (uint64_t i = 0; us != NULL && i < idle_rts; i++) {
            nanosleep(
                &(struct timespec){(time_t)(idle_gap / 1000), (long)(idle_gap % 1000) * 1000000},
                NULL);
            moon_bench_done_reset(&g_rt_done);
            g_rt_iters = 1;
            g_rt_warm  = 0; /* the pong of ping 0 ends it; t0 is now */
            g_rt_t0    = moon_bench_now_ns();
            moon_runtime_send(g_rt, me, msg64(B_PING, 0));
            wait_done(&g_rt_done, "lone round trips");
            us[i] = (g_rt_t1 - g_rt_t0) / 1e3;
        }
        if (us != NULL) {
            double max = 0;
            for (uint64_t i = 0; i < idle_rts; i++) {
                max = MOON_MAX(max, us[i]);
            }
            qsort(us, idle_rts, sizeof(*us), cmp_double);
            json_line("roundtrip_idle", "moonlet", 64, "median_us", us[idle_rts / 2], idle_rts);
            json_line("roundtrip_idle", "moonlet", 64, "max_us", max, idle_rts);
        }
        free(us);
    }
    moon_dist_barrier(g_dist);

    /* stream: 8-byte payload messages (40 bytes with the header) */
    g_st_n = stream_n;
    moon_dist_barrier(g_dist);
    if (g_rank == 0 && stream_n > 0) {
        moon_runtime_send(g_rt, me, msg64(B_GO, 0));
        wait_done(&g_st_done, "stream");
        json_line("stream", "moonlet", sizeof(b_data_t), "msgs_per_s",
                  stream_n / ((g_st_t1 - g_st_t0) * 1e-9), stream_n);
    }
    moon_dist_barrier(g_dist);

    /* bulk: rank 1 owns the region, rank 0 gets and puts (into and from a
     * region of its own, allocated the same way: as a store and its clients) */
    if (moon_dist_region_alloc(g_dist, max_bulk, (void **)&region, &reg) != MOON_OK) {
        fprintf(stderr, "bench_transport: no %zu-byte region\n", max_bulk);
        return 1;
    }
    memset(region, 1, max_bulk);
    if (g_rank == 1) {
        b_ping_t *m = moon_msg_new(B_PING, moon_dist_region_desc_bytes(reg));
        moon_dist_region_desc(reg, m, &m->pad);
        g_bk_desc_len = m->pad.n;
        memcpy(g_bk_desc, MOON_SPAN_PTR(m, m->pad), g_bk_desc_len);
        moon_msg_release(&m->hdr);
    }
    MPI_Bcast(&g_bk_desc_len, 1, MPI_UINT64_T, 1, MPI_COMM_WORLD);
    MPI_Bcast(g_bk_desc, (int)g_bk_desc_len, MPI_BYTE, 1, MPI_COMM_WORLD);
    g_bk_local = region;
    g_bk_lreg  = reg;
    if (g_rank == 0 && bulk_iters > 0) {
        const size_t sizes[] = {4u << 20, 64u << 20};
        /* warm-up, untimed: endpoint and rkey set-up, first touches of every
         * page of both regions and of the peer's mapping (as ucx_perftest
         * warms up before it measures) */
        run_bulk(me, 0, max_bulk, 1, 1);
        run_bulk(me, 1, max_bulk, 1, 1);
        for (int put = 0; put < 2; put++) {
            for (int s = 0; s < 2; s++) {
                uint64_t it = sizes[s] > (8u << 20) ? MOON_MAX(bulk_iters / 4, 2) : bulk_iters;
                run_bulk(me, put, sizes[s], it, 0);
            }
        }
    }
    moon_dist_barrier(g_dist);
    moon_dist_region_deregister(g_dist, reg); /* before the engine closes */
    moon_dist_stop(g_dist);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_runtime_destroy(g_rt);
    moon_dist_finalize(g_dist);
    return 0;
}
