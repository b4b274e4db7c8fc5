/* tests/mpi/test_dist_idle.c - idle ranks sleep (issue 27). Under mpirun
 * -np 4, each rank runs an actor that sends one message to the next rank
 * every 100 ms (the light periodic traffic of an idle serving cluster: load
 * reports, store statistics), and measures its own process's CPU time over
 * MOON_TEST_IDLE_S (5) seconds. Each rank prints its figure ("idle cpu: rank
 * R x.xx% of a core") and the test fails when a rank used MOON_TEST_IDLE_MAX
 * (10) % of a core or more: spinning progress threads or workers (a
 * quarter of a core per rank before the fix) make it fail. The messages
 * must keep arriving meanwhile (a rank that sleeps through them fails too). */
#include "dist_test.h"

#include <string.h>
#include <time.h>

#define T_X_FIELDS(F, T) F(T, u64, x)
#define T_MSGS(X) X(T_TICK, t_tick_t, T_X_FIELDS)
MOON_MSG_DECLARE(T_MSGS, 200, T_END)
MOON_MSG_DEFINE(T_MSGS, t_descs)

static moon_addr_t g_next;
static _Atomic int g_got;

static moon_status_t ticker_init(moon_actor_t *self, const void *args)
{
    uint64_t timer;

    (void)args;
    return moon_timer_start(self, 100000000ull, 100000000ull, 0, &timer);
}
static moon_status_t ticker_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    t_tick_t *m = moon_msg_new(T_TICK, 0);

    (void)msg;
    if (m != NULL && moon_send(self, g_next, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return MOON_OK;
}
static moon_status_t ticker_on_tick(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    (void)msg;
    atomic_fetch_add(&g_got, 1);
    return MOON_OK;
}
static const moon_actor_ops_t ticker_ops = {
    .name   = "ticker",
    .init   = ticker_init,
    .on_msg = {[MOON_MSG_SYS_TIMER] = ticker_on_timer, [T_TICK] = ticker_on_tick}};

static double cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_idle(void)
{
    const char *senv = getenv("MOON_TEST_IDLE_S");
    const char *menv = getenv("MOON_TEST_IDLE_MAX");
    double      secs = senv != NULL ? atof(senv) : 5.0, max_pct = menv != NULL ? atof(menv) : 10;
    double      c0, t0, pct, all[64] = {0};
    moon_addr_t me;
    char        name[32];
    int         got0;

    CU_ASSERT_FATAL(g_size <= 64);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &ticker_ops, NULL, NULL, &me), MOON_OK);
    snprintf(name, sizeof(name), "ticker/%u", g_rank);
    CU_ASSERT_EQUAL(moon_dist_register(g_dist, name, me), MOON_OK);
    moon_dist_barrier(g_dist);
    snprintf(name, sizeof(name), "ticker/%u", (g_rank + 1) % g_size);
    CU_ASSERT_EQUAL_FATAL(moon_dist_whereis(g_dist, name, 10000000000ull, &g_next), MOON_OK);
    nanosleep(&(struct timespec){1, 0}, NULL); /* settle */
    got0 = atomic_load(&g_got);
    c0   = cpu_s();
    t0   = moon_test_now_s();
    nanosleep(&(struct timespec){(time_t)secs, (long)((secs - (time_t)secs) * 1e9)}, NULL);
    pct = (cpu_s() - c0) * 100 / (moon_test_now_s() - t0);
    MPI_Gather(&pct, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        for (uint32_t r = 0; r < g_size; r++) {
            printf("idle cpu: rank %u %.2f%% of a core over %.1f s (bound %.0f%%)\n", r, all[r],
                   secs, max_pct);
        }
        fflush(stdout);
    }
    CU_ASSERT(pct < max_pct);
    /* ~10 a second kept arriving (a generous half of them) */
    CU_ASSERT(atomic_load(&g_got) - got0 >= (int)(secs * 10 / 2));
    moon_dist_barrier(g_dist);
}

int main(int argc, char **argv)
{
    if (dist_test_setup(&argc, &argv, NULL, 0) != 0 || moon_msg_register(t_descs) != MOON_OK) {
        return 1;
    }
    return dist_test_teardown(MOON_TEST_RUN("dist_idle", NULL, NULL, test_idle));
}
