/* tests/mpi/test_dist_bulk_big.c - one-sided get and put of 1 GiB (override
 * with MOON_TEST_BULK_BYTES) between two ranks, zero-copy between regions the
 * transport allocated (moon_dist_region_alloc; test_dist covers registered heap
 * memory too), sliced so control messages keep flowing: a ping-pong runs during
 * the transfer and must complete while it is in flight. Run over shm and tcp
 * (CTest variants). The descriptor crosses ranks with MPI_Bcast here;
 * test_dist carries it inside a message. */
#include "dist_test.h"

#include <string.h>

#define T_X_FIELDS(F, T) F(T, u64, x)
#define T_MSGS(X)                                                                                  \
    X(T_PING, t_ping_t, T_X_FIELDS)                                                                \
    X(T_PONG, t_pong_t, T_X_FIELDS)
MOON_MSG_DECLARE(T_MSGS, 200, T_END)
MOON_MSG_DEFINE(T_MSGS, t_descs)

static _Atomic int g_done, g_status, g_pongs;
static double      g_t_done, g_t_pongs, g_t_first_pong;

static moon_status_t waiter_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    g_t_done = moon_test_now_s();
    atomic_store(&g_status, ((const moon_dist_bulk_done_t *)msg)->status);
    atomic_store(&g_done, 1);
    return MOON_OK;
}
static moon_addr_t g_echo;

static moon_status_t waiter_on_start(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    t_ping_t *m = moon_msg_new(T_PING, 0);

    (void)msg;
    m->x = 0;
    if (moon_send(self, g_echo, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return MOON_OK;
}

static moon_status_t waiter_on_pong(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    uint64_t x = ((const t_pong_t *)msg)->x;

    if (x == 0) {
        g_t_first_pong = moon_test_now_s();
    }
    if (x + 1 < 50) {
        t_ping_t *m = moon_msg_new(T_PING, 0);
        m->x        = x + 1;
        if (moon_send(self, msg->src, &m->hdr) != MOON_OK) {
            moon_msg_release(&m->hdr);
        }
    } else {
        g_t_pongs = moon_test_now_s();
        atomic_store(&g_pongs, 1);
    }
    return MOON_OK;
}
static moon_status_t echo_on_ping(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    t_pong_t *m = moon_msg_new(T_PONG, 0);

    m->x = ((const t_ping_t *)msg)->x;
    if (moon_send(self, msg->src, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return MOON_OK;
}
static const moon_actor_ops_t waiter_ops = {.name   = "waiter",
                                            .on_msg = {[MOON_MSG_DIST_BULK_DONE] = waiter_on_done,
                                                       [T_PONG]                  = waiter_on_pong,
                                                       [T_PING] = waiter_on_start}};
static const moon_actor_ops_t echo_ops   = {.name = "echo", .on_msg = {[T_PING] = echo_on_ping}};

static uint64_t word(uint64_t i, uint64_t salt)
{
    return (i * 0x9e3779b97f4a7c15ull) ^ salt;
}

static void test_one_gib_get_and_put(void)
{
    const char         *env = getenv("MOON_TEST_BULK_BYTES");
    size_t              len = env ? (size_t)strtoull(env, NULL, 0) : (1ull << 30);
    size_t              n   = len / 8;
    uint64_t           *buf = NULL;
    moon_dist_region_t *reg = NULL;
    moon_addr_t         waiter, echo;
    char                desc[512];
    uint64_t            desc_len = 0;
    int                 ok       = 1;
    double              t0;

    CU_ASSERT_FATAL(g_size == 2);
    /* as a store's arena and its clients' buffers: memory the transport placed */
    CU_ASSERT_EQUAL_FATAL(moon_dist_region_alloc(g_dist, len, (void **)&buf, &reg), MOON_OK);
    for (size_t i = 0; i < n; i++) {
        buf[i] = g_rank == 0 ? word(i, 1) : 0;
    }
    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &echo_ops, NULL, NULL, &echo), MOON_OK);
    if (g_rank == 0) {
        t_ping_t   *m = moon_msg_new(T_PING, moon_dist_region_desc_bytes(reg));
        moon_span_t span;
        CU_ASSERT_EQUAL_FATAL(moon_dist_region_desc(reg, m, &span), MOON_OK);
        desc_len = span.n;
        CU_ASSERT_FATAL(desc_len <= sizeof(desc));
        memcpy(desc, MOON_SPAN_PTR(m, span), desc_len);
        moon_msg_release(&m->hdr);
    }
    MPI_Bcast(&desc_len, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    MPI_Bcast(desc, (int)desc_len, MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(&echo, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (g_rank == 1) {
        t_ping_t *ping;

        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &waiter_ops, NULL, NULL, &waiter), MOON_OK);
        t0 = moon_test_now_s();
        CU_ASSERT_EQUAL(moon_dist_get(g_dist, buf, reg, desc, desc_len, 0, len, waiter, 1),
                        MOON_OK);
        /* control messages flow while the transfer is in flight */
        g_echo = echo;
        ping   = moon_msg_new(T_PING, 0);
        CU_ASSERT_EQUAL(moon_runtime_send(g_rt, waiter, &ping->hdr), MOON_OK);
        CU_ASSERT(dist_test_wait(&g_done, 120));
        CU_ASSERT_EQUAL(atomic_load(&g_status), MOON_OK);
        CU_ASSERT(dist_test_wait(&g_pongs, 30));
        printf("rank 1: get of %zu bytes in %.3f s (%.2f GB/s); first round trip done %.4f s, "
               "50 done %.3f s after the start\n",
               len, g_t_done - t0, len / (g_t_done - t0) / 1e9, g_t_first_pong - t0,
               g_t_pongs - t0);
        /* the transfer did not hold the control messages back until its end */
        CU_ASSERT(g_t_first_pong < g_t_done);
        for (size_t i = 0; i < n; i += 4099) {
            ok &= buf[i] == word(i, 1);
        }
        ok &= buf[n - 1] == word(n - 1, 1);
        CU_ASSERT(ok);
        /* put it back changed */
        for (size_t i = 0; i < n; i++) {
            buf[i] = word(i, 2);
        }
        atomic_store(&g_done, 0);
        t0 = moon_test_now_s();
        CU_ASSERT_EQUAL(moon_dist_put(g_dist, buf, reg, desc, desc_len, 0, len, waiter, 2),
                        MOON_OK);
        CU_ASSERT(dist_test_wait(&g_done, 120));
        CU_ASSERT_EQUAL(atomic_load(&g_status), MOON_OK);
        if (atomic_load(&g_status) != MOON_OK) {
            printf("rank 1: put failed: %s\n", moon_status_str(atomic_load(&g_status)));
        }
        printf("rank 1: put of %zu bytes in %.3f s (%.2f GB/s)\n", len, g_t_done - t0,
               len / (g_t_done - t0) / 1e9);
    }
    moon_dist_barrier(g_dist);
    if (g_rank == 0) {
        for (size_t i = 0; i < n; i += 4099) {
            ok &= buf[i] == word(i, 2);
        }
        ok &= buf[n - 1] == word(n - 1, 2);
        CU_ASSERT(ok);
    }
    CU_ASSERT(dist_test_all(ok));
    moon_dist_region_deregister(g_dist, reg); /* frees buf */
}

int main(int argc, char **argv)
{
    if (dist_test_setup(&argc, &argv, NULL, 0) != 0 || moon_msg_register(t_descs) != MOON_OK) {
        return 1;
    }
    return dist_test_teardown(MOON_TEST_RUN("dist_bulk_big", NULL, NULL, test_one_gib_get_and_put));
}
