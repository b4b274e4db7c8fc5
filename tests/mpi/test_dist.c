/* tests/mpi/test_dist.c - the distributed runtime under mpirun -np 2..4:
 * global names, remote round trips, per-pair FIFO order from every rank to
 * every rank, credits under a flooding sender (back-pressure, nothing dropped,
 * receiver bounded), bad input from the wire, and bulk get/put of odd sizes
 * with descriptors carried in messages. The same binary runs over UCX shm,
 * UCX tcp and the MPI engine (CTest variants set UCX_TLS / MOON_TRANSPORT). */
#include "dist_test.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

/* ---- messages ------------------------------------------------------------- */
#define T_X_FIELDS(F, T) F(T, u64, x)
#define T_DESC_FIELDS(F, T) F(T, u64, len) F(T, bytes, desc)
#define T_MSGS(X)                                                                                  \
    X(T_PING, t_ping_t, T_X_FIELDS)                                                                \
    X(T_PONG, t_pong_t, T_X_FIELDS)                                                                \
    X(T_SEQ, t_seq_t, T_X_FIELDS)                                                                  \
    X(T_GO, t_go_t, T_X_FIELDS)                                                                    \
    X(T_DESC_REQ, t_desc_req_t, T_X_FIELDS)                                                        \
    X(T_DESC, t_desc_t, T_DESC_FIELDS)
MOON_MSG_DECLARE(T_MSGS, 200, T_END)
MOON_MSG_DEFINE(T_MSGS, t_descs)

#define MAX_RANKS 64

static void *new_msg(uint32_t type, uint64_t x)
{
    t_ping_t *m = moon_msg_new(type, 0);

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->x = x;
    return m;
}

static moon_status_t send_x(moon_actor_t *self, moon_addr_t to, uint32_t type, uint64_t x)
{
    moon_msg_hdr_t *m      = new_msg(type, x);
    moon_status_t   status = moon_send(self, to, m);

    if (status != MOON_OK) {
        moon_msg_release(m);
    }
    return status;
}

/* ---- echo ----------------------------------------------------------------- */
static moon_status_t echo_on_ping(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)send_x(self, msg->src, T_PONG, ((const t_ping_t *)msg)->x);
    return MOON_OK;
}
static const moon_actor_ops_t echo_ops = {.name = "echo", .on_msg = {[T_PING] = echo_on_ping}};

/* ---- client: count round trips, or report a SYS_ERROR ---------------------- */
typedef struct {
    moon_addr_t  target;
    uint64_t     count;
    _Atomic int *done;
    _Atomic int *error; /* status of a SYS_ERROR received, or 0 */
} client_args_t;

static moon_status_t client_init(moon_actor_t *self, const void *args)
{
    client_args_t *s = moon_actor_state(self);

    *s = *(const client_args_t *)args;
    return send_x(self, s->target, T_PING, 0);
}
static moon_status_t client_on_pong(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    client_args_t *s = moon_actor_state(self);
    uint64_t       x = ((const t_pong_t *)msg)->x;

    if (x + 1 < s->count) {
        return send_x(self, s->target, T_PING, x + 1);
    }
    atomic_store(s->done, 1);
    moon_actor_exit(self, MOON_OK);
    return MOON_OK;
}
static moon_status_t client_on_error(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    client_args_t *s = moon_actor_state(self);

    atomic_store(s->error, ((const moon_sys_error_t *)msg)->status);
    atomic_store(s->done, 1);
    moon_actor_exit(self, MOON_OK);
    return MOON_OK;
}
static const moon_actor_ops_t client_ops = {
    .name        = "client",
    .state_bytes = sizeof(client_args_t),
    .init        = client_init,
    .on_msg      = {[T_PONG] = client_on_pong, [MOON_MSG_SYS_ERROR] = client_on_error}};

/* ---- asker: resolves two names with moon_dist_whereis_async --------------- */
static _Atomic int         g_ask_replies;
static _Atomic moon_addr_t g_ask_addr;
static _Atomic int         g_ask_missing;

static moon_status_t asker_init(moon_actor_t *self, const void *args)
{
    moon_status_t status;

    (void)args;
    status = moon_dist_whereis_async(g_dist, "contested", moon_actor_addr(self), 1);
    return status != MOON_OK ? status
                             : moon_dist_whereis_async(g_dist, "never", moon_actor_addr(self), 2);
}
static moon_status_t asker_on_reply(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_dist_name_reply_t *r = (const moon_dist_name_reply_t *)msg;

    if (r->cookie == 1 && r->status == MOON_OK) {
        atomic_store(&g_ask_addr, r->addr);
    } else if (r->cookie == 2) {
        atomic_store(&g_ask_missing, r->status);
    }
    if (atomic_fetch_add(&g_ask_replies, 1) + 1 == 2) {
        moon_actor_exit(self, MOON_OK);
    }
    return MOON_OK;
}
static const moon_actor_ops_t asker_ops = {
    .name = "asker", .init = asker_init, .on_msg = {[MOON_MSG_DIST_NAME_REPLY] = asker_on_reply}};

/* ---- collector: checks FIFO order per sending rank ------------------------- */
typedef struct {
    uint64_t     expected;
    uint32_t     spin_ns; /* per message: a slow receiver */
    _Atomic int *done;
    _Atomic int *bad;
    uint64_t     count;
    uint64_t     next[MAX_RANKS];
} coll_state_t;

static moon_status_t coll_init(moon_actor_t *self, const void *args)
{
    coll_state_t *s = moon_actor_state(self);

    *s = *(const coll_state_t *)args;
    return MOON_OK;
}
static moon_status_t coll_on_seq(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    coll_state_t *s = moon_actor_state(self);
    uint32_t      r = moon_addr_rank(msg->src);

    if (r >= MAX_RANKS || ((const t_seq_t *)msg)->x != s->next[r]) {
        atomic_store(s->bad, 1);
    } else {
        s->next[r]++;
    }
    if (s->spin_ns) {
        double end = moon_test_now_s() + s->spin_ns * 1e-9;
        while (moon_test_now_s() < end) {
        }
    }
    if (++s->count == s->expected) {
        atomic_store(s->done, 1);
    }
    return MOON_OK;
}
static const moon_actor_ops_t coll_ops = {.name        = "collector",
                                          .state_bytes = sizeof(coll_state_t),
                                          .init        = coll_init,
                                          .on_msg      = {[T_SEQ] = coll_on_seq}};

/* ---- sender: n messages to each target, chunk per turn ---------------------- */
typedef struct {
    moon_addr_t  targets[MAX_RANKS];
    uint32_t     n_targets;
    uint64_t     n, chunk, sent;
    _Atomic int *done;
    _Atomic int *bad;
} sender_state_t;

static moon_status_t sender_init(moon_actor_t *self, const void *args)
{
    sender_state_t *s = moon_actor_state(self);

    *s = *(const sender_state_t *)args;
    return send_x(self, moon_actor_addr(self), T_GO, 0);
}
static moon_status_t sender_on_go(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    sender_state_t *s   = moon_actor_state(self);
    uint64_t        end = MOON_MIN(s->n, s->sent + s->chunk);

    (void)msg;
    for (; s->sent < end; s->sent++) {
        for (uint32_t t = 0; t < s->n_targets; t++) {
            if (send_x(self, s->targets[t], T_SEQ, s->sent) != MOON_OK) {
                atomic_store(s->bad, 1);
            }
        }
    }
    if (s->sent < s->n) {
        return send_x(self, moon_actor_addr(self), T_GO, 0);
    }
    atomic_store(s->done, 1);
    return MOON_OK;
}
static const moon_actor_ops_t sender_ops = {.name        = "sender",
                                            .state_bytes = sizeof(sender_state_t),
                                            .init        = sender_init,
                                            .on_msg      = {[T_GO] = sender_on_go}};

/* ---- tests ---------------------------------------------------------------- */
static void test_names_and_round_trips(void)
{
    char          name[32];
    moon_addr_t   echo, addr;
    _Atomic int   done = 0, error = 0;
    client_args_t ca;
    moon_addr_t   client;
    int           ok = 1;

    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &echo_ops, NULL, NULL, &echo), MOON_OK);
    snprintf(name, sizeof(name), "echo/%u", g_rank);
    CU_ASSERT_EQUAL(moon_dist_register(g_dist, name, echo), MOON_OK);
    moon_dist_barrier(g_dist);
    for (uint32_t r = 0; r < g_size; r++) {
        snprintf(name, sizeof(name), "echo/%u", r);
        if (moon_dist_whereis(g_dist, name, 5000000000ull, &addr) != MOON_OK ||
            moon_addr_rank(addr) != r) {
            ok = 0;
        }
    }
    CU_ASSERT(ok);
    CU_ASSERT_EQUAL(moon_dist_whereis(g_dist, "no/such/name", 0, &addr), MOON_ERR_NOT_FOUND);
    /* 1000 round trips to the next rank's echo */
    snprintf(name, sizeof(name), "echo/%u", (g_rank + 1) % g_size);
    CU_ASSERT_EQUAL_FATAL(moon_dist_whereis(g_dist, name, 5000000000ull, &addr), MOON_OK);
    ca = (client_args_t){addr, 1000, &done, &error};
    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &client_ops, &ca, NULL, &client), MOON_OK);
    CU_ASSERT(dist_test_wait(&done, 30));
    CU_ASSERT_EQUAL(atomic_load(&error), 0);
    CU_ASSERT(dist_test_all(atomic_load(&done) && !atomic_load(&error)));
    moon_dist_barrier(g_dist);
    moon_stop(g_rt, echo, MOON_OK);
}

/* The registry is replicated: a whereis waits for a later registration;
 * registrations of one name that cross on the wire settle on the same winner
 * on every rank; a registration made after another was seen wins even from a
 * lower rank (Lamport order, not rank order). */
/* The last rank registers names with its n-th allocation failing, n = 1..:
 * a registration that fails for memory reaches no rank (not even its own
 * copy), one that succeeds reaches every rank. */
static void names_without_memory(moon_addr_t echo)
{
    enum { N_TRIES = 48 };
    uint8_t failed[N_TRIES] = {0};
    int     n_failed = 0, ok = 1;
    char    name[32];

    if (g_rank == g_size - 1) {
        for (int n = 0; n < N_TRIES; n++) {
            moon_status_t st;

            snprintf(name, sizeof(name), "oom/%d", n);
            moon_fault_fail_after_here((uint64_t)n + 1); /* not the progress thread's */
            st = moon_dist_register(g_dist, name, echo);
            moon_fault_reset();
            CU_ASSERT(st == MOON_OK || st == MOON_ERR_NO_MEMORY);
            failed[n] = st != MOON_OK;
            n_failed += failed[n];
        }
        CU_ASSERT(n_failed > 0 && n_failed < N_TRIES); /* both paths were taken */
    }
    if (g_size > 1) {
        MPI_Bcast(failed, N_TRIES, MPI_UINT8_T, g_size - 1, MPI_COMM_WORLD);
    }
    moon_dist_barrier(g_dist); /* what was sent has arrived */
    for (int n = 0; n < N_TRIES; n++) {
        moon_addr_t addr = MOON_ADDR_NONE;

        snprintf(name, sizeof(name), "oom/%d", n);
        if (failed[n]) {
            ok &= moon_dist_whereis(g_dist, name, 0, &addr) == MOON_ERR_NOT_FOUND;
        } else {
            ok &= moon_dist_whereis(g_dist, name, 10000000000ull, &addr) == MOON_OK &&
                  moon_addr_rank(addr) == (uint32_t)g_size - 1;
        }
    }
    CU_ASSERT(ok);
    CU_ASSERT(dist_test_all(ok));
}

static void test_names_replicated(void)
{
    moon_addr_t echo, addr = MOON_ADDR_NONE, lo, hi;
    double      t0;

    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &echo_ops, NULL, NULL, &echo), MOON_OK);
    /* waiting: the last rank registers 200 ms after the barrier */
    moon_dist_barrier(g_dist);
    if (g_rank == g_size - 1) {
        nanosleep(&(struct timespec){0, 200000000}, NULL);
        CU_ASSERT_EQUAL(moon_dist_register(g_dist, "late", echo), MOON_OK);
    } else {
        CU_ASSERT_EQUAL(moon_dist_whereis(g_dist, "late", 10000000000ull, &addr), MOON_OK);
        CU_ASSERT_EQUAL(moon_addr_rank(addr), g_size - 1);
    }
    t0 = moon_test_now_s();
    CU_ASSERT_EQUAL(moon_dist_whereis(g_dist, "never", 50000000ull, &addr), MOON_ERR_NOT_FOUND);
    CU_ASSERT(moon_test_now_s() - t0 >= 0.045);
    CU_ASSERT_EQUAL(moon_dist_register(g_dist, "elsewhere", echo ^ (1ull << 44)) /* another rank */,
                    MOON_ERR_INVALID_PARAM);
    /* crossing registrations: every rank at once */
    CU_ASSERT_EQUAL(moon_dist_register(g_dist, "contested", echo), MOON_OK);
    moon_dist_barrier(g_dist);
    CU_ASSERT_EQUAL_FATAL(moon_dist_whereis(g_dist, "contested", 0, &addr), MOON_OK);
    lo = hi = addr;
    if (g_size > 1) {
        MPI_Allreduce(&addr, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&addr, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    }
    CU_ASSERT_EQUAL(lo, hi);
    {
        /* the same from an actor, asynchronously */
        moon_addr_t asker;
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &asker_ops, NULL, NULL, &asker), MOON_OK);
        for (int i = 0; i < 10000 && atomic_load(&g_ask_replies) < 2; i++) {
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
        CU_ASSERT_EQUAL(atomic_load(&g_ask_replies), 2);
        CU_ASSERT_EQUAL(atomic_load(&g_ask_addr), addr);
        CU_ASSERT_EQUAL(atomic_load(&g_ask_missing), MOON_ERR_NOT_FOUND);
    }
    names_without_memory(echo);
    if (g_size < 2) {
        moon_stop(g_rt, echo, MOON_OK);
        return;
    }
    /* later wins: rank 1 first, then rank 0, which has seen rank 1's */
    if (g_rank == 1) {
        CU_ASSERT_EQUAL(moon_dist_register(g_dist, "moved", echo), MOON_OK);
    }
    moon_dist_barrier(g_dist);
    if (g_rank == 0) {
        CU_ASSERT_EQUAL(moon_dist_register(g_dist, "moved", echo), MOON_OK);
    }
    moon_dist_barrier(g_dist);
    CU_ASSERT_EQUAL(moon_dist_whereis(g_dist, "moved", 0, &addr), MOON_OK);
    CU_ASSERT_EQUAL(moon_addr_rank(addr), 0);
    moon_dist_barrier(g_dist);
    moon_stop(g_rt, echo, MOON_OK);
}

/* The barrier's promise, many times over: a registration made before it is
 * in every copy after it, so a rank that registers the same name next holds
 * a later version and wins everywhere. A message taken off the peer queue
 * but not yet charged to the credit window once looked delivered, and a
 * rank could leave the barrier before the other's registration arrived
 * (names_replicated's "later wins" failed now and then under TSan). */
static void test_barrier_orders_registrations(void)
{
    moon_addr_t echo, addr;
    int         n  = getenv("MOON_TEST_SMALL") ? 100 : 400;
    int         ok = 1, told = 0;

    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &echo_ops, NULL, NULL, &echo), MOON_OK);
    moon_dist_barrier(g_dist);
    for (int i = 0; i < n && g_size > 1; i++) {
        char     name[32];
        uint32_t first = (uint32_t)i % (uint32_t)g_size, then = (first + 1) % (uint32_t)g_size;

        snprintf(name, sizeof(name), "flip/%d", i);
        if (g_rank == first) {
            ok &= moon_dist_register(g_dist, name, echo) == MOON_OK;
        }
        moon_dist_barrier(g_dist);
        addr = MOON_ADDR_NONE;
        ok &= moon_dist_whereis(g_dist, name, 0, &addr) == MOON_OK && moon_addr_rank(addr) == first;
        moon_dist_barrier(g_dist); /* all have looked before `then` registers */
        if (g_rank == then) {
            ok &= moon_dist_register(g_dist, name, echo) == MOON_OK;
        }
        moon_dist_barrier(g_dist);
        addr = MOON_ADDR_NONE;
        ok &= moon_dist_whereis(g_dist, name, 0, &addr) == MOON_OK && moon_addr_rank(addr) == then;
        if (!ok && !told) { /* no break: every rank must take the same barriers */
            fprintf(stderr, "rank %d: %s wrong after the barrier (round %d)\n", g_rank, name, i);
            told = 1;
        }
    }
    CU_ASSERT(ok);
    CU_ASSERT(dist_test_all(ok));
    moon_stop(g_rt, echo, MOON_OK);
}

/* Every rank sends N numbered messages to every other rank's collector. */
static void run_all_to_all(uint64_t n, uint32_t spin_ns, uint32_t only_to_zero)
{
    char           name[32];
    _Atomic int    cdone = 0, sdone = 0, bad = 0;
    coll_state_t   cs = {0};
    sender_state_t ss = {0};
    moon_addr_t    coll, snd, addr;
    uint32_t       n_senders = only_to_zero ? (g_rank == 0 ? g_size - 1 : 0) : g_size - 1;

    cs.expected = n * n_senders;
    cs.spin_ns  = spin_ns;
    cs.done     = &cdone;
    cs.bad      = &bad;
    if (cs.expected == 0) {
        atomic_store(&cdone, 1);
    }
    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &coll_ops, &cs, NULL, &coll), MOON_OK);
    snprintf(name, sizeof(name), "coll%u/%u", only_to_zero, g_rank);
    CU_ASSERT_EQUAL(moon_dist_register(g_dist, name, coll), MOON_OK);
    moon_dist_barrier(g_dist);
    for (uint32_t r = 0; r < g_size; r++) {
        if (r == g_rank || (only_to_zero && r != 0)) {
            continue;
        }
        snprintf(name, sizeof(name), "coll%u/%u", only_to_zero, r);
        CU_ASSERT_EQUAL_FATAL(moon_dist_whereis(g_dist, name, 5000000000ull, &addr), MOON_OK);
        ss.targets[ss.n_targets++] = addr;
    }
    ss.n     = n;
    ss.chunk = 2000;
    ss.done  = &sdone;
    ss.bad   = &bad;
    if (ss.n_targets > 0) {
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &sender_ops, &ss, NULL, &snd), MOON_OK);
        CU_ASSERT(dist_test_wait(&sdone, 120));
        if (spin_ns) {
            moon_dist_stats_t  st;
            moon_actor_stats_t as;
            moon_dist_stats(g_dist, &st);
            /* the flooding sender was muted by the full window, and stalled on
             * credits; none of its sends failed (sender_on_go counts any status
             * but MOON_OK as bad: a full window is no MOON_ERR_NO_RESOURCE) */
            CU_ASSERT(moon_actor_stats(g_rt, snd, &as) == MOON_OK && as.n_muted > 0);
            CU_ASSERT(st.n_credit_stalls > 0);
            printf("rank %u: sender muted %llu times, %llu credit stalls\n", g_rank,
                   (unsigned long long)as.n_muted, (unsigned long long)st.n_credit_stalls);
        }
    }
    CU_ASSERT(dist_test_wait(&cdone, 120));
    CU_ASSERT_EQUAL(atomic_load(&bad), 0);
    if (spin_ns && g_rank == 0) {
        moon_actor_stats_t as;
        CU_ASSERT_EQUAL(moon_actor_stats(g_rt, coll, &as), MOON_OK);
        /* bounded: mailbox bound (256) plus at most one credit window per sender */
        printf("rank 0: slow receiver mailbox high water %llu\n",
               (unsigned long long)as.depth_high_water);
        CU_ASSERT(as.depth_high_water <= 256 + 64ull * (g_size - 1) + 256);
    }
    CU_ASSERT(dist_test_all(atomic_load(&cdone) && !atomic_load(&bad)));
    moon_dist_barrier(g_dist);
    moon_stop(g_rt, coll, MOON_OK);
}

static void test_fifo_order_all_pairs(void)
{
    run_all_to_all(getenv("MOON_TEST_SMALL") ? 2000 : 20000, 0, 0);
}

static void test_flooding_sender_is_slowed_not_dropped(void)
{
    if (g_size < 2) {
        return;
    }
    run_all_to_all(20000, 3000, 1);
}

/* ---- busy: a long turn on the only worker, right after round trips --------- */
#define BUSY_TURN_S 1.0
#define BUSY_STREAM 100

static _Atomic int g_busy_started, g_busy_ended;
static double      g_busy_in_s; /* written by the busy turn: how long the stream took */

/* Echoes pings; on T_GO, its pong leaves first, then the turn spins, watching
 * the client's stream come in (the rank's only worker is here all along). */
static moon_status_t busy_echo_on_go(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    moon_dist_stats_t st;
    uint64_t          before;
    double            t0, now;

    moon_dist_stats(g_dist, &st); /* nothing of the stream is in yet: it follows this pong */
    before = st.n_received;
    (void)send_x(self, msg->src, T_PONG, UINT64_MAX);
    atomic_store(&g_busy_started, 1);
    g_busy_in_s = -1;
    for (t0 = now = moon_test_now_s(); now < t0 + BUSY_TURN_S; now = moon_test_now_s()) {
        if (g_busy_in_s < 0) {
            moon_dist_stats(g_dist, &st);
            if (st.n_received >= before + BUSY_STREAM) {
                g_busy_in_s = now - t0;
            }
        }
    }
    atomic_store(&g_busy_ended, 1);
    return MOON_OK;
}
static const moon_actor_ops_t busy_echo_ops = {
    .name = "busy-echo", .on_msg = {[T_PING] = echo_on_ping, [T_GO] = busy_echo_on_go}};

/* Round trips for a while, then T_GO; at its pong, a stream to a collector. */
typedef struct {
    moon_addr_t  echo, coll;
    double       until_s;
    _Atomic int *done;
} busy_client_t;

static moon_status_t busy_client_init(moon_actor_t *self, const void *args)
{
    *(busy_client_t *)moon_actor_state(self) = *(const busy_client_t *)args;
    return send_x(self, ((const busy_client_t *)args)->echo, T_PING, 0);
}
static moon_status_t busy_client_on_pong(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    busy_client_t *s = moon_actor_state(self);
    uint64_t       x = ((const t_pong_t *)msg)->x;

    if (x != UINT64_MAX) {
        return send_x(self, s->echo, moon_test_now_s() < s->until_s ? T_PING : T_GO, x + 1);
    }
    for (uint64_t i = 0; i < BUSY_STREAM; i++) {
        CU_ASSERT_EQUAL(send_x(self, s->coll, T_SEQ, i), MOON_OK);
    }
    atomic_store(s->done, 1);
    moon_actor_exit(self, MOON_OK);
    return MOON_OK;
}
static const moon_actor_ops_t busy_client_ops = {.name        = "busy-client",
                                                 .state_bytes = sizeof(busy_client_t),
                                                 .init        = busy_client_init,
                                                 .on_msg      = {[T_PONG] = busy_client_on_pong}};

/* A rank whose only worker drove progress between round trips (its progress
 * thread napping, deferring to it), then runs a long turn, still takes in
 * frames during it: the progress thread takes over within two naps (a few
 * ms; the bound here leaves room for a loaded machine), not when the turn
 * ends. What came in is delivered, in order, after the turn. */
static void test_busy_worker_does_not_stop_progress(void)
{
    moon_addr_t   ids[2] = {MOON_ADDR_NONE, MOON_ADDR_NONE}, actor;
    _Atomic int   done = 0, bad = 0;
    coll_state_t  cs = {.expected = BUSY_STREAM, .done = &done, .bad = &bad};
    busy_client_t bc;
    int           ok = 1;

    if (g_size < 2) {
        return;
    }
    atomic_store(&g_busy_started, 0);
    atomic_store(&g_busy_ended, 0);
    if (g_rank == 0) {
        ok = moon_spawn(g_rt, &busy_echo_ops, NULL, NULL, &ids[0]) == MOON_OK &&
             moon_spawn(g_rt, &coll_ops, &cs, NULL, &ids[1]) == MOON_OK;
        CU_ASSERT(ok);
    }
    MPI_Bcast(ids, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (dist_test_all(ids[0] != MOON_ADDR_NONE && ids[1] != MOON_ADDR_NONE)) {
        if (g_rank == 0) {
            CU_ASSERT(dist_test_wait(&g_busy_ended, 30));
            /* all of it taken in during the turn, well before its end */
            CU_ASSERT(g_busy_in_s >= 0 && g_busy_in_s < 0.5);
            CU_ASSERT(dist_test_wait(&done, 10));
            CU_ASSERT_EQUAL(atomic_load(&bad), 0);
        } else if (g_rank == 1) {
            /* a second of round trips: the progress thread's naps reach their
             * cap (a nap that kept doubling, uncapped, would be ~0.5-1 s long
             * when the turn starts, and the check below would fail) */
            bc = (busy_client_t){ids[0], ids[1], moon_test_now_s() + 1.0, &done};
            CU_ASSERT(moon_spawn(g_rt, &busy_client_ops, &bc, NULL, &actor) == MOON_OK &&
                      dist_test_wait(&done, 30));
        }
    }
    moon_dist_barrier(g_dist);
    for (int k = 0; g_rank == 0 && k < 2; k++) {
        if (ids[k] != MOON_ADDR_NONE) {
            moon_stop(g_rt, ids[k], MOON_OK);
        }
    }
}

/* Garbage frames, a record that fails to decode, and a message to a stale
 * address: counted, answered where possible, and the receiver goes on. */
static void test_bad_input_is_counted_and_dropped(void)
{
    moon_addr_t       stale = MOON_ADDR_NONE, echo;
    moon_dist_stats_t st;
    _Atomic int       done = 0, error = 0;
    client_args_t     ca;
    moon_addr_t       client;

    if (g_size < 2) {
        return;
    }
    if (g_rank == 0) {
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &echo_ops, NULL, NULL, &stale), MOON_OK);
        CU_ASSERT_EQUAL(moon_stop(g_rt, stale, MOON_OK), MOON_OK);
        while (moon_actor_stats(g_rt, stale, &(moon_actor_stats_t){0}) == MOON_OK) {
            nanosleep(&(struct timespec){0, 100000}, NULL); /* stopping is asynchronous */
        }
    }
    MPI_Bcast(&stale, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (g_rank == 1) {
        /* frame layout (runtime/dist/dist.c): u16 magic 0x4d44, u8 kind, u8 pad,
         * u32 src_rank, u32 credits, u32 n_records; records: u64 to, u32 len,
         * then len bytes of msgpack, or (len's top bit set) a u32 layout and
         * a message image. */
        unsigned char f[16 + 12 + 8] = {0};
        uint16_t      magic          = 0x4d44;
        uint32_t      one = 1, n_rec = 1, len = 8;
        uint64_t      to = stale;

        CU_ASSERT_EQUAL(moon_dist_send_raw(g_dist, 0, "abc", 3), MOON_OK); /* truncated */
        memcpy(f, "XXXXXXXXXXXXXXXX", 16);                                 /* bad magic */
        CU_ASSERT_EQUAL(moon_dist_send_raw(g_dist, 0, f, 16), MOON_OK);
        memset(f, 0, sizeof(f));
        memcpy(f, &magic, 2);
        f[2] = 1; /* BATCH */
        memcpy(f + 4, &one, 4);
        memcpy(f + 12, &n_rec, 4);
        memcpy(f + 16, &to, 8);
        len = 4000; /* longer than the frame */
        memcpy(f + 24, &len, 4);
        CU_ASSERT_EQUAL(moon_dist_send_raw(g_dist, 0, f, sizeof(f)), MOON_OK);
        len = 8; /* in range, but not msgpack of a T_PING */
        memcpy(f + 24, &len, 4);
        memset(f + 28, 0xc1, 8);
        CU_ASSERT_EQUAL(moon_dist_send_raw(g_dist, 0, f, sizeof(f)), MOON_OK);
        len = 0x80000000u | 8; /* an image shorter than a message header */
        memcpy(f + 24, &len, 4);
        CU_ASSERT_EQUAL(moon_dist_send_raw(g_dist, 0, f, sizeof(f)), MOON_OK);
        len = 0x80000000u | 2; /* an image record without room for its layout */
        memcpy(f + 24, &len, 4);
        CU_ASSERT_EQUAL(moon_dist_send_raw(g_dist, 0, f, sizeof(f) - 6), MOON_OK);
        f[2] = 99; /* unknown kind */
        CU_ASSERT_EQUAL(moon_dist_send_raw(g_dist, 0, f, 16), MOON_OK);
        /* a well-formed message to the stale address: SYS_ERROR comes back */
        ca = (client_args_t){stale, 1, &done, &error};
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &client_ops, &ca, NULL, &client), MOON_OK);
        CU_ASSERT(dist_test_wait(&done, 10));
        CU_ASSERT_EQUAL(atomic_load(&error), MOON_ERR_NO_ACTOR);
    }
    moon_dist_barrier(g_dist);
    if (g_rank == 0) {
        moon_dist_stats(g_dist, &st);
        CU_ASSERT(st.n_bad_frames >= 3);
        CU_ASSERT(st.n_bad_msgs >= 3);
        CU_ASSERT(st.n_stale >= 1);
        printf("rank 0: bad frames %llu, bad messages %llu, stale %llu\n",
               (unsigned long long)st.n_bad_frames, (unsigned long long)st.n_bad_msgs,
               (unsigned long long)st.n_stale);
    }
    /* the receiver still works */
    CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &echo_ops, NULL, NULL, &echo), MOON_OK);
    CU_ASSERT_EQUAL(moon_dist_register(g_dist, g_rank == 0 ? "echo-after-bad/0" : "x", echo) ==
                            MOON_OK ||
                        g_rank != 0,
                    1);
    moon_dist_barrier(g_dist);
    if (g_rank == 1) {
        moon_addr_t addr;
        atomic_store(&done, 0);
        CU_ASSERT_EQUAL_FATAL(moon_dist_whereis(g_dist, "echo-after-bad/0", 0, &addr), MOON_OK);
        ca = (client_args_t){addr, 100, &done, &error};
        atomic_store(&error, 0);
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &client_ops, &ca, NULL, &client), MOON_OK);
        CU_ASSERT(dist_test_wait(&done, 10));
        CU_ASSERT_EQUAL(atomic_load(&error), 0);
    }
    moon_dist_barrier(g_dist);
    moon_stop(g_rt, echo, MOON_OK);
}

/* ---- a message that does not encode: its span lies outside it -------------- */
typedef struct {
    moon_addr_t  target;
    _Atomic int *done;
    _Atomic int *status; /* moon_send's status for the bad message */
} badspan_args_t;

static moon_status_t badspan_init(moon_actor_t *self, const void *args)
{
    badspan_args_t *s = moon_actor_state(self);

    *s = *(const badspan_args_t *)args;
    return send_x(self, s->target, T_PING, 0);
}
/* From a handler, where a message may leave at once (dist.c's direct
 * path); dist_send refuses it before any path is chosen. */
static moon_status_t badspan_on_pong(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    badspan_args_t *s = moon_actor_state(self);
    t_desc_t       *m = moon_msg_new(T_DESC, 16);
    moon_status_t   status;

    (void)msg;
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->desc.off = 1u << 20; /* past the message's end */
    m->desc.n   = 16;
    status      = moon_send(self, s->target, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr); /* refused: still ours */
    }
    atomic_store(s->status, status);
    atomic_store(s->done, 1);
    moon_actor_exit(self, MOON_OK);
    return MOON_OK;
}
static const moon_actor_ops_t badspan_ops = {.name        = "badspan",
                                             .state_bytes = sizeof(badspan_args_t),
                                             .init        = badspan_init,
                                             .on_msg      = {[T_PONG] = badspan_on_pong}};

/* A remote message that cannot be encoded (a sender's bug) is refused to
 * its sender with an error, and nothing reaches the wire: the pair still
 * carries round trips after it. */
static void test_unencodable_message_is_refused(void)
{
    moon_addr_t    echo = MOON_ADDR_NONE, actor;
    _Atomic int    done = 0, status = 0, error = 0;
    badspan_args_t ba;
    client_args_t  ca;

    if (g_size < 2) {
        return;
    }
    if (g_rank == 0) {
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &echo_ops, NULL, NULL, &echo), MOON_OK);
    }
    MPI_Bcast(&echo, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (g_rank == 1) {
        int saved = moon_log_level;

        moon_log_set_level(0); /* the codec's error is expected */
        ba = (badspan_args_t){echo, &done, &status};
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &badspan_ops, &ba, NULL, &actor), MOON_OK);
        CU_ASSERT(dist_test_wait(&done, 10));
        moon_log_set_level(saved);
        CU_ASSERT_EQUAL(atomic_load(&status), MOON_ERR_INVALID_PARAM);
        atomic_store(&done, 0);
        ca = (client_args_t){echo, 100, &done, &error};
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &client_ops, &ca, NULL, &actor), MOON_OK);
        CU_ASSERT(dist_test_wait(&done, 10));
        CU_ASSERT_EQUAL(atomic_load(&error), 0);
    }
    moon_dist_barrier(g_dist);
    if (g_rank == 0) {
        moon_stop(g_rt, echo, MOON_OK);
    }
}

/* ---- bulk: owner hands out its descriptor in a message ---------------------- */
typedef struct {
    moon_dist_region_t *reg;
    size_t              len;
} owner_state_t;

static moon_status_t owner_init(moon_actor_t *self, const void *args)
{
    *(owner_state_t *)moon_actor_state(self) = *(const owner_state_t *)args;
    return MOON_OK;
}
static moon_status_t owner_on_req(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    owner_state_t *s = moon_actor_state(self);
    t_desc_t      *d = moon_msg_new(T_DESC, moon_dist_region_desc_bytes(s->reg));

    if (d == NULL || moon_dist_region_desc(s->reg, d, &d->desc) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    d->len = s->len;
    if (moon_send(self, msg->src, &d->hdr) != MOON_OK) {
        moon_msg_release(&d->hdr);
    }
    return MOON_OK;
}
static const moon_actor_ops_t owner_ops = {.name        = "bulk-owner",
                                           .state_bytes = sizeof(owner_state_t),
                                           .init        = owner_init,
                                           .on_msg      = {[T_DESC_REQ] = owner_on_req}};

/* Steps through a list of (get|put, remote_off, local_off, len). */
typedef struct {
    int      is_put;
    uint64_t remote_off, local_off, len;
} bulk_step_t;

typedef struct {
    moon_addr_t         owner;
    const bulk_step_t  *steps;
    uint32_t            n_steps, step;
    char               *local;
    moon_dist_region_t *local_reg;
    char               *desc;
    size_t              desc_len;
    _Atomic int        *done;
    _Atomic int        *bad;
    double              t0;
    double             *elapsed;
} bclient_state_t;

static moon_status_t bclient_issue(moon_actor_t *self)
{
    bclient_state_t   *s  = moon_actor_state(self);
    const bulk_step_t *st = &s->steps[s->step];
    moon_status_t      status;

    s->t0 = moon_test_now_s();
    if (st->is_put) {
        status = moon_dist_put(g_dist, s->local + st->local_off, s->local_reg, s->desc, s->desc_len,
                               st->remote_off, st->len, moon_actor_addr(self), s->step);
    } else {
        status = moon_dist_get(g_dist, s->local + st->local_off, s->local_reg, s->desc, s->desc_len,
                               st->remote_off, st->len, moon_actor_addr(self), s->step);
    }
    if (status != MOON_OK) {
        atomic_store(s->bad, 1);
        atomic_store(s->done, 1);
    }
    return MOON_OK;
}
static moon_status_t bclient_init(moon_actor_t *self, const void *args)
{
    bclient_state_t *s = moon_actor_state(self);

    *s = *(const bclient_state_t *)args;
    return send_x(self, s->owner, T_DESC_REQ, 0);
}
static moon_status_t bclient_on_desc(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bclient_state_t *s = moon_actor_state(self);
    const t_desc_t  *d = (const t_desc_t *)msg;

    s->desc_len = d->desc.n;
    s->desc     = malloc(s->desc_len);
    memcpy(s->desc, MOON_SPAN_PTR(d, d->desc), s->desc_len);
    return bclient_issue(self);
}
static moon_status_t bclient_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    bclient_state_t             *s = moon_actor_state(self);
    const moon_dist_bulk_done_t *m = (const moon_dist_bulk_done_t *)msg;

    if (s->elapsed != NULL) {
        s->elapsed[s->step] = moon_test_now_s() - s->t0;
    }
    if (m->status != MOON_OK || m->cookie != s->step || m->bytes != s->steps[s->step].len) {
        MOON_ERROR("bulk step %u: %s", s->step, moon_status_str(m->status));
        atomic_store(s->bad, 1);
    }
    if (++s->step == s->n_steps) {
        free(s->desc);
        atomic_store(s->done, 1);
        moon_actor_exit(self, MOON_OK);
        return MOON_OK;
    }
    return bclient_issue(self);
}
static const moon_actor_ops_t bclient_ops = {
    .name        = "bulk-client",
    .state_bytes = sizeof(bclient_state_t),
    .init        = bclient_init,
    .on_msg      = {[T_DESC] = bclient_on_desc, [MOON_MSG_DIST_BULK_DONE] = bclient_on_done}};

static unsigned char pattern(uint64_t i, uint32_t salt)
{
    return (unsigned char)((i * 2654435761u) >> 13) ^ (unsigned char)salt;
}

/* Memory for a region: registered heap memory, or (alloc 1, 2) the transport's
 * own allocation (moon_dist_region_alloc: a mapped shared segment on shm). */
static char *region_make(int alloc, size_t len, moon_dist_region_t **reg_p)
{
    void *p = NULL;

    if (alloc) {
        CU_ASSERT_EQUAL_FATAL(moon_dist_region_alloc(g_dist, len, &p, reg_p), MOON_OK);
        if (alloc > 1) { /* puts into it stream (a store's arena) */
            moon_dist_region_set_flags(*reg_p, MOON_DIST_REGION_STREAM);
        }
    } else {
        p = malloc(len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        CU_ASSERT_EQUAL_FATAL(moon_dist_region_register(g_dist, p, len, reg_p), MOON_OK);
    }
    return p;
}

static void region_drop(int alloc, char *p, moon_dist_region_t *reg)
{
    moon_dist_region_deregister(g_dist, reg);
    if (!alloc) {
        free(p);
    }
}

/* salt: the owner's content differs from round to round, so a get through a
 * stale (cached) mapping of an earlier region is caught. */
static void bulk_odd_sizes(int alloc, uint32_t salt)
{
    const size_t        region = (8u << 20) + 13;
    char               *remote = NULL, *local;
    moon_dist_region_t *reg = NULL, *lreg = NULL;
    moon_addr_t         owner = MOON_ADDR_NONE, bc;
    _Atomic int         done = 0, bad = 0;
    uint64_t            pbase   = 0;
    bulk_step_t         steps[] = {
                {0, 0, 0, 1},                    /* 1 B */
                {0, region - 1, 1, 1},           /* last byte, unaligned local */
                {0, 3, 5, 4097},                 /* unaligned both sides */
                {0, 1001, 8195, (3u << 20) + 5}, /* several slices */
                {0, 0, 4u << 20, region},        /* the whole region */
                {1, 0, 0, 0},                    /* put: filled in below */
                {1, 0, 0, 0},
                {0, 0, 0, 0}, /* read the puts back */
    };
    bclient_state_t bs   = {0};
    int             ok   = 1;
    const size_t    back = (4u << 20) + region + 16; /* where the puts are read back */

    if (g_size < 2) {
        return;
    }
    if (g_rank == 0) {
        remote = region_make(alloc, region, &reg);
        for (size_t i = 0; i < region; i++) {
            remote[i] = (char)pattern(i, salt);
        }
        owner_state_t os = {reg, region};
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &owner_ops, &os, NULL, &owner), MOON_OK);
    }
    MPI_Bcast(&owner, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    /* each client puts into its own stripe of the region's second half */
    pbase    = region / 2 + (g_rank - 1) * 70001 + 7;
    steps[5] = (bulk_step_t){1, pbase, 11, 1};
    steps[6] = (bulk_step_t){1, pbase + 1, 12, 65537};
    steps[7] = (bulk_step_t){0, pbase, back, 65538};
    local    = region_make(alloc, back + 65538 + 64, &lreg);
    memset(local, 0, back + 65538 + 64);
    if (g_rank != 0) {
        bs = (bclient_state_t){.owner     = owner,
                               .steps     = steps,
                               .n_steps   = 5,
                               .local     = local,
                               .local_reg = lreg,
                               .done      = &done,
                               .bad       = &bad};
        /* gets first (content checked), then puts and the read-back */
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &bclient_ops, &bs, NULL, &bc), MOON_OK);
        CU_ASSERT(dist_test_wait(&done, 60));
        CU_ASSERT_EQUAL(atomic_load(&bad), 0);
        ok &= (unsigned char)local[0] == pattern(0, salt);
        ok &= (unsigned char)local[1] == pattern(region - 1, salt);
        for (uint64_t i = 0; i < 4097; i++) {
            ok &= (unsigned char)local[5 + i] == pattern(3 + i, salt);
        }
        for (uint64_t i = 0; i < (3u << 20) + 5; i += 997) {
            ok &= (unsigned char)local[8195 + i] == pattern(1001 + i, salt);
        }
        for (uint64_t i = 0; i < region / 2; i += 4093) { /* other ranks put above */
            ok &= (unsigned char)local[(4u << 20) + i] == pattern(i, salt);
        }
        CU_ASSERT(ok);
        /* puts: byte i of the stripe becomes pattern(i, rank) */
        atomic_store(&done, 0);
        bs.steps   = steps + 5;
        bs.n_steps = 3;
        /* step 6 puts local[12..] at pbase+1: make it continue the pattern */
        for (uint64_t i = 1; i < 65538; i++) {
            local[12 + i - 1] = (char)pattern(i, g_rank);
        }
        local[11] = (char)pattern(0, g_rank);
        CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &bclient_ops, &bs, NULL, &bc), MOON_OK);
        CU_ASSERT(dist_test_wait(&done, 60));
        CU_ASSERT_EQUAL(atomic_load(&bad), 0);
        ok = 1;
        for (uint64_t i = 0; i < 65538; i++) {
            if ((unsigned char)local[back + i] != pattern(i, g_rank)) {
                if (ok) {
                    printf("rank %u: put/get mismatch at %llu: %u != %u\n", g_rank,
                           (unsigned long long)i, (unsigned char)local[back + i],
                           pattern(i, g_rank));
                }
                ok = 0;
            }
        }
        CU_ASSERT(ok);
    }
    CU_ASSERT(dist_test_all(!atomic_load(&bad) && ok));
    moon_dist_barrier(g_dist);
    region_drop(alloc, local, lreg);
    if (g_rank == 0) {
        moon_stop(g_rt, owner, MOON_OK);
        region_drop(alloc, remote, reg);
    }
}

static void test_bulk_odd_sizes(void)
{
    bulk_odd_sizes(0, 0);
}

/* The same on memory the transport allocated, twice: the second time the
 * regions are new, and what the first unpacked (and cached) must not be used;
 * the second time puts into the owner's region use streaming stores. */
static void test_bulk_odd_sizes_allocated(void)
{
    bulk_odd_sizes(1, 1);
    /* rank 0 deregistered the region the others mapped: with UCX they drop
     * its key from their caches (the mapping kept rank 0's memory alive) */
    if (g_rank != 0 && strcmp(moon_dist_engine(g_dist), "ucx") == 0) {
        moon_dist_stats_t st  = {0};
        double            end = moon_test_now_s() + 10;
        do {
            nanosleep(&(struct timespec){0, 1000000}, NULL);
            moon_dist_stats(g_dist, &st);
        } while (st.n_peer_regions_forgotten == 0 && moon_test_now_s() < end);
        CU_ASSERT(st.n_peer_regions_forgotten >= 1);
    }
    moon_dist_barrier(g_dist);
    bulk_odd_sizes(2, 2);
}

/* More live regions of one owner than the UCX engine keeps unpacked keys for
 * (64): the keys of the first ones leave the cache while their regions stay
 * registered. Their memory must be left as it is (the owner is alive), so a
 * second pass over all of them, and the owner's own look, still find every
 * region's pattern. The first N_BIG are large enough (>= 16 MiB) that their
 * mappings are readied off the progress lock before the key goes (a second
 * mapping, page tables dropped): that must not touch the data either. */
enum { EVICT_N_REG = 80, EVICT_N_BIG = 3, EVICT_LEN = 65536, EVICT_BIG = 16u << 20 };

static size_t evict_len(int k)
{
    return k < EVICT_N_BIG ? EVICT_BIG : EVICT_LEN;
}

static int evict_pattern_ok(const char *p, int k)
{
    int ok = 1;

    for (size_t i = 0; i < evict_len(k); i += 509) {
        ok &= (unsigned char)p[i] == pattern(i, 100u + (uint32_t)k);
    }
    return ok;
}

static void test_bulk_cache_eviction_keeps_regions(void)
{
    char               *mem[EVICT_N_REG] = {0}, *local;
    moon_dist_region_t *reg[EVICT_N_REG] = {0}, *lreg = NULL;
    moon_addr_t         owners[EVICT_N_REG] = {0};
    int                 ok                  = 1;

    if (g_size < 2) {
        return;
    }
    if (g_rank == 0) {
        for (int k = 0; k < EVICT_N_REG; k++) {
            mem[k] = region_make(1, evict_len(k), &reg[k]);
            for (size_t i = 0; i < evict_len(k); i++) {
                mem[k][i] = (char)pattern(i, 100u + (uint32_t)k);
            }
            owner_state_t os = {reg[k], evict_len(k)};
            CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &owner_ops, &os, NULL, &owners[k]), MOON_OK);
        }
    }
    MPI_Bcast(owners, EVICT_N_REG, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    local = region_make(1, EVICT_BIG, &lreg);
    for (int pass = 0; pass < 2 && g_rank != 0; pass++) {
        for (int k = 0; k < EVICT_N_REG; k++) {
            bulk_step_t     step = {0, 0, 0, evict_len(k)};
            _Atomic int     done = 0, bad = 0;
            bclient_state_t bs = {.owner     = owners[k],
                                  .steps     = &step,
                                  .n_steps   = 1,
                                  .local     = local,
                                  .local_reg = lreg,
                                  .done      = &done,
                                  .bad       = &bad};
            moon_addr_t     bc;

            memset(local, 0, evict_len(k));
            CU_ASSERT_EQUAL_FATAL(moon_spawn(g_rt, &bclient_ops, &bs, NULL, &bc), MOON_OK);
            CU_ASSERT(dist_test_wait(&done, 30));
            ok &= !atomic_load(&bad);
            ok &= evict_pattern_ok(local, k);
        }
    }
    moon_dist_barrier(g_dist); /* every client is through both passes */
    for (int k = 0; k < EVICT_N_REG && g_rank == 0; k++) {
        ok &= evict_pattern_ok(mem[k], k);
    }
    CU_ASSERT(ok);
    CU_ASSERT(dist_test_all(ok));
    region_drop(1, local, lreg);
    for (int k = 0; k < EVICT_N_REG && g_rank == 0; k++) {
        moon_stop(g_rt, owners[k], MOON_OK);
        region_drop(1, mem[k], reg[k]);
    }
    moon_dist_barrier(g_dist);
}

static void test_placement_from_config(void)
{
    const char *spec = "conductor=0; prefill*=1-2;decode*=3,0\nstore/7=2; store*=1";
    uint32_t    r    = 99;

    CU_ASSERT_EQUAL(moon_dist_place(spec, "conductor", 4, &r), MOON_OK);
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(moon_dist_place(spec, "prefill/0", 4, &r), MOON_OK);
    CU_ASSERT_EQUAL(r, 1);
    CU_ASSERT_EQUAL(moon_dist_place(spec, "prefill/1", 4, &r), MOON_OK);
    CU_ASSERT_EQUAL(r, 2);
    CU_ASSERT_EQUAL(moon_dist_place(spec, "prefill/2", 4, &r), MOON_OK);
    CU_ASSERT_EQUAL(r, 1);
    CU_ASSERT_EQUAL(moon_dist_place(spec, "decode/1", 4, &r), MOON_OK);
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(moon_dist_place(spec, "store/7", 4, &r), MOON_OK); /* exact wins */
    CU_ASSERT_EQUAL(r, 2);
    CU_ASSERT_EQUAL(moon_dist_place(spec, "store/3", 4, &r), MOON_OK);
    CU_ASSERT_EQUAL(r, 1);
    CU_ASSERT_EQUAL(moon_dist_place(spec, "gateway", 4, &r), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_dist_place(spec, "decode/0", 3, &r), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_dist_place("x=1-", "x", 4, &r), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_dist_place("garbage", "x", 4, &r), MOON_ERR_INVALID_PARAM);
}

int main(int argc, char **argv)
{
    moon_dist_config_t dcfg;
    int                failures;

    moon_dist_config_default(&dcfg);
    dcfg.credits = 64; /* small window: credits and stalls are exercised */
    if (dist_test_setup(&argc, &argv, &dcfg, 256) != 0 || moon_msg_register(t_descs) != MOON_OK) {
        return 1;
    }
    failures = MOON_TEST_RUN(
        "dist", NULL, NULL, test_placement_from_config, test_names_and_round_trips,
        test_names_replicated, test_barrier_orders_registrations, test_fifo_order_all_pairs,
        test_flooding_sender_is_slowed_not_dropped, test_bad_input_is_counted_and_dropped,
        test_busy_worker_does_not_stop_progress, test_unencodable_message_is_refused,
        test_bulk_odd_sizes, test_bulk_odd_sizes_allocated, test_bulk_cache_eviction_keeps_regions);
    {
        void *p;
        if (moon_dist_region_alloc(g_dist, 1u << 16, &p, &g_region_left_on_stop) != MOON_OK) {
            failures++;
        }
    }
    return dist_test_teardown(failures);
}
