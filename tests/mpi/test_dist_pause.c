/* tests/mpi/test_dist_pause.c - a paused rank is slow, not dead (issue 27).
 * Under mpirun -np 3 or 4 (tests/scripts/run_contended.sh adds CPU
 * contention with stress-ng when it is installed), one rank (the last, or
 * MOON_TEST_VICTIM) is stopped with SIGSTOP by another for MOON_TEST_PAUSE_MS
 * (3000: past the default 2 s peer timeout), then continued. The test checks
 * that
 *   - messages flow between every pair of ranks before the pause,
 *   - the other ranks keep exchanging messages while it is stopped,
 *   - messages sent to it while it is stopped are answered once it runs again,
 *   - no rank is declared lost anywhere (no PEER_DOWN, moon_dist_peer_alive),
 *     and the suspicion, if any, is lifted,
 *   - messages flow between every pair of ranks afterwards, and the job ends
 *     with a collective (every rank is still a member).
 * Run with every rank on this host (its process is checked) and as pseudo
 * hosts (MOON_SPLIT_HOSTS: only the adaptive dead deadline applies). */
#include "dist_test.h"

#include "moonlet/log.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#define T_X_FIELDS(F, T) F(T, u64, x)
#define T_MSGS(X)                                                                                  \
    X(T_PING, t_ping_t, T_X_FIELDS)                                                                \
    X(T_PONG, t_pong_t, T_X_FIELDS)
MOON_MSG_DECLARE(T_MSGS, 200, T_END)
MOON_MSG_DEFINE(T_MSGS, t_descs)

#define ROUNDS 50 /* sequential round trips per peer and phase */
#define BURST 100 /* pings sent to the stopped rank at once */

static moon_status_t send_x(moon_actor_t *self, moon_addr_t to, uint32_t type, uint64_t x)
{
    t_ping_t     *m = moon_msg_new(type, 0);
    moon_status_t status;

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->x   = x;
    status = moon_send(self, to, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return status;
}

static moon_status_t echo_on_ping(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)send_x(self, msg->src, T_PONG, ((const t_ping_t *)msg)->x);
    return MOON_OK;
}
static const moon_actor_ops_t echo_ops = {.name = "echo", .on_msg = {[T_PING] = echo_on_ping}};

/* ---- watcher: counts PEER_DOWN ------------------------------------------- */
static _Atomic int g_peer_downs;

static moon_status_t watcher_on_peer_down(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    MOON_ERROR("test: rank %u reported lost", ((const moon_sys_peer_down_t *)msg)->rank);
    atomic_fetch_add(&g_peer_downs, 1);
    return MOON_OK;
}
static const moon_actor_ops_t watcher_ops = {
    .name = "watcher", .on_msg = {[MOON_MSG_SYS_PEER_DOWN] = watcher_on_peer_down}};

/* ---- client: `rounds` round trips to one echo, sequential or all at once - */
typedef struct {
    moon_addr_t  to;
    uint32_t     rounds;
    int          burst;
    _Atomic int *done;
} client_args_t;

typedef struct {
    client_args_t a;
    uint32_t      got;
} client_t;

static moon_status_t client_init(moon_actor_t *self, const void *args)
{
    client_t *c = moon_actor_state(self);

    c->a = *(const client_args_t *)args;
    for (uint32_t i = 0; i < (c->a.burst ? c->a.rounds : 1); i++) {
        moon_status_t status = send_x(self, c->a.to, T_PING, i);
        if (status != MOON_OK) {
            return status;
        }
    }
    return MOON_OK;
}
static moon_status_t client_on_pong(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    client_t *c = moon_actor_state(self);

    (void)msg;
    if (++c->got == c->a.rounds) {
        atomic_fetch_add(c->a.done, 1);
        return MOON_OK;
    }
    return c->a.burst ? MOON_OK : send_x(self, c->a.to, T_PING, c->got);
}
static const moon_actor_ops_t client_ops = {.name        = "client",
                                            .state_bytes = sizeof(client_t),
                                            .init        = client_init,
                                            .on_msg      = {[T_PONG] = client_on_pong}};

static moon_addr_t g_echo[64];

/* Starts `rounds` round trips (burst: all at once) to rank r's echo. */
static void start_client(uint32_t r, uint32_t rounds, int burst, _Atomic int *done)
{
    client_args_t a = {g_echo[r], rounds, burst, done};
    moon_addr_t   c;

    CU_ASSERT_EQUAL(moon_spawn(g_rt, &client_ops, &a, NULL, &c), MOON_OK);
}

/* Round trips from this rank to every other one; 1 when all completed. */
static int all_pairs(double timeout_s)
{
    static _Atomic int done;
    int                want = 0;

    atomic_store(&done, 0);
    for (uint32_t r = 0; r < g_size; r++) {
        if (r != g_rank) {
            start_client(r, ROUNDS, 0, &done);
            want++;
        }
    }
    for (double end = moon_test_now_s() + timeout_s;
         atomic_load(&done) < want && moon_test_now_s() < end;) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return atomic_load(&done) == want;
}

static void test_pause(void)
{
    const char        *venv     = getenv("MOON_TEST_VICTIM");
    const char        *penv     = getenv("MOON_TEST_PAUSE_MS");
    const uint32_t     victim   = venv != NULL ? (uint32_t)atoi(venv) % g_size : g_size - 1;
    const uint32_t     stopper  = (victim + 1) % g_size;
    const long         pause_ms = penv != NULL ? atol(penv) : 3000;
    int64_t            pids[64] = {0};
    int64_t            me       = (int64_t)getpid();
    static _Atomic int during, to_victim;
    moon_addr_t        watcher;
    moon_dist_stats_t  st;
    char               name[32];

    CU_ASSERT_FATAL(g_size >= 3 && g_size <= 64);
    MPI_Allgather(&me, 1, MPI_INT64_T, pids, 1, MPI_INT64_T, MPI_COMM_WORLD);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &watcher_ops, NULL, NULL, &watcher), MOON_OK);
    CU_ASSERT_EQUAL(moon_dist_watch_peers(g_dist, watcher), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &echo_ops, NULL, NULL, &g_echo[g_rank]), MOON_OK);
    snprintf(name, sizeof(name), "echo/%u", g_rank);
    CU_ASSERT_EQUAL(moon_dist_register(g_dist, name, g_echo[g_rank]), MOON_OK);
    moon_dist_barrier(g_dist);
    for (uint32_t r = 0; r < g_size; r++) {
        snprintf(name, sizeof(name), "echo/%u", r);
        CU_ASSERT_EQUAL_FATAL(moon_dist_whereis(g_dist, name, 10000000000ull, &g_echo[r]), MOON_OK);
    }
    /* before: every pair */
    CU_ASSERT(dist_test_all(all_pairs(30)));
    moon_dist_barrier(g_dist);

    if (g_rank == stopper) {
        CU_ASSERT_EQUAL(kill((pid_t)pids[victim], SIGSTOP), 0);
        printf("rank %u: stopped rank %u (pid %lld) for %ld ms\n", g_rank, victim,
               (long long)pids[victim], pause_ms);
    }
    if (g_rank != victim) {
        /* while it is stopped: the others talk among themselves, and queue
         * a burst for it */
        nanosleep(&(struct timespec){0, 200000000}, NULL);
        start_client(victim, BURST, 1, &to_victim);
        for (uint32_t r = 0; r < g_size; r++) {
            if (r != g_rank && r != victim) {
                start_client(r, ROUNDS, 0, &during);
            }
        }
        CU_ASSERT(dist_test_wait(&during, 30)); /* the first of them */
    }
    if (g_rank == stopper) {
        struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000};
        nanosleep(&ts, NULL); /* from the stop, give or take the 0.2 s above */
        CU_ASSERT_EQUAL(kill((pid_t)pids[victim], SIGCONT), 0);
        printf("rank %u: continued rank %u\n", g_rank, victim);
    }
    if (g_rank != victim) {
        CU_ASSERT(dist_test_wait(&to_victim, 30)); /* answered once it runs again */
    }
    /* after: every pair, and the job still ends with collectives */
    CU_ASSERT(dist_test_all(all_pairs(30)));
    moon_dist_barrier(g_dist);
    /* every peer was heard from: the tick (5 ms) lifts the suspicion */
    for (double end = moon_test_now_s() + 10; moon_test_now_s() < end;) {
        int any = 0;
        for (uint32_t r = 0; r < g_size; r++) {
            any |= moon_dist_peer_suspected(g_dist, r);
        }
        if (!any) {
            break;
        }
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    for (uint32_t r = 0; r < g_size; r++) {
        CU_ASSERT(moon_dist_peer_alive(g_dist, r));
        CU_ASSERT(!moon_dist_peer_suspected(g_dist, r));
    }
    CU_ASSERT_EQUAL(atomic_load(&g_peer_downs), 0);
    moon_dist_stats(g_dist, &st);
    CU_ASSERT_EQUAL(st.n_peers_lost, 0);
    CU_ASSERT_EQUAL(st.n_peers_suspected, st.n_peers_back); /* every suspicion lifted */
    printf("rank %u: peers lost %llu, suspected %llu, heard from again %llu\n", g_rank,
           (unsigned long long)st.n_peers_lost, (unsigned long long)st.n_peers_suspected,
           (unsigned long long)st.n_peers_back);
}

int main(int argc, char **argv)
{
    if (dist_test_setup(&argc, &argv, NULL, 0) != 0 || moon_msg_register(t_descs) != MOON_OK) {
        return 1;
    }
    return dist_test_teardown(MOON_TEST_RUN("dist_pause", NULL, NULL, test_pause));
}
