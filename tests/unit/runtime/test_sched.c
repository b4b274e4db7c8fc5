/* tests/unit/runtime/test_sched.c - the threaded executor with real worker
 * threads: work spreads over workers by stealing, a ring delivers every hop,
 * back-pressure mutes a flooding sender and bounds the receiver's mailbox
 * without losing anything (control actors are exempt), concurrent outside
 * senders lose nothing, timers fire on the real clock. Runs under TSan. */
#include "moonlet/moonlet.h"

#include "moon_test.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdatomic.h>
#include <unistd.h>

#define T_N_FIELDS(F, T) F(T, u64, n)
#define T_MSGS(X)                                                                                  \
    X(T_MSG_WORK, t_work_t, T_N_FIELDS)                                                            \
    X(T_MSG_KICK, t_kick_t, T_N_FIELDS)                                                            \
    X(T_MSG_DONE, t_done_t, T_N_FIELDS)
MOON_MSG_DECLARE(T_MSGS, 235, T_MSG_END)
MOON_MSG_DEFINE(T_MSGS, t_msg_descs)

static moon_runtime_t *new_rt(uint32_t workers, uint32_t bound)
{
    moon_runtime_config_t cfg;
    moon_runtime_t       *rt = NULL;

    moon_runtime_config_default(&cfg);
    cfg.n_workers     = workers;
    cfg.mailbox_bound = bound;
    CU_ASSERT_EQUAL_FATAL(moon_runtime_create(&cfg, &rt), MOON_OK);
    return rt;
}

static moon_status_t send_n(moon_actor_t *self, moon_addr_t to, uint32_t type, uint64_t n)
{
    t_work_t *m = moon_msg_new(type, 0);

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->n = n;
    return moon_tell(self, to, &m->hdr);
}

/* ---- counter: counts WORK (optionally spinning a little per message),
 * records which threads ran it, shuts down at `expect`. */
typedef struct {
    uint64_t expect, spin;
} counter_args_t;
typedef struct {
    counter_args_t args;
    uint64_t       got;
} counter_state_t;

static _Atomic uint64_t total_got;
static pthread_t        threads_seen[8];
static _Atomic uint32_t n_threads_seen;
static pthread_mutex_t  seen_lock = PTHREAD_MUTEX_INITIALIZER;

static void note_thread(void)
{
    pthread_t me = pthread_self();

    pthread_mutex_lock(&seen_lock);
    for (uint32_t i = 0; i < atomic_load(&n_threads_seen); i++) {
        if (pthread_equal(threads_seen[i], me)) {
            pthread_mutex_unlock(&seen_lock);
            return;
        }
    }
    if (atomic_load(&n_threads_seen) < 8) {
        threads_seen[atomic_fetch_add(&n_threads_seen, 1)] = me;
    }
    pthread_mutex_unlock(&seen_lock);
}

static moon_status_t counter_init(moon_actor_t *self, const void *args)
{
    ((counter_state_t *)moon_actor_state(self))->args = *(const counter_args_t *)args;
    return MOON_OK;
}

static moon_status_t counter_on_work(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    counter_state_t  *st = moon_actor_state(self);
    volatile uint64_t x  = 0;

    (void)msg;
    for (uint64_t i = 0; i < st->args.spin; i++) {
        x += i;
    }
    if (st->got % 256 == 0) {
        note_thread();
    }
    st->got++;
    if (atomic_fetch_add(&total_got, 1) + 1 == st->args.expect) {
        moon_runtime_shutdown(moon_actor_runtime(self), 0);
    }
    return MOON_OK;
}

static moon_status_t counter_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    (void)msg;
    return MOON_ERR_IO; /* crash on request */
}

static const moon_actor_ops_t counter_ops = {
    .name        = "counter",
    .state_bytes = sizeof(counter_state_t),
    .init        = counter_init,
    .on_msg      = {[T_MSG_WORK] = counter_on_work, [T_MSG_DONE] = counter_on_done},
};

/* ---- flooder: on KICK n, sends n WORK to its target, 500 per turn. */
typedef struct {
    moon_addr_t target;
    uint64_t    left;
} flood_state_t;

static moon_status_t flood_init(moon_actor_t *self, const void *args)
{
    ((flood_state_t *)moon_actor_state(self))->target = *(const moon_addr_t *)args;
    return MOON_OK;
}

static moon_status_t flood_on_kick(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    flood_state_t *st = moon_actor_state(self);
    moon_status_t  status;

    if (msg->src == MOON_ADDR_NONE) {
        st->left = ((const t_kick_t *)msg)->n;
    }
    for (int i = 0; i < 500 && st->left > 0; i++, st->left--) {
        status = send_n(self, st->target, T_MSG_WORK, st->left);
        if (status != MOON_OK) {
            return status;
        }
    }
    return st->left > 0 ? send_n(self, moon_actor_addr(self), T_MSG_KICK, 0) : MOON_OK;
}

static const moon_actor_ops_t flood_ops = {
    .name        = "flooder",
    .state_bytes = sizeof(flood_state_t),
    .init        = flood_init,
    .on_msg      = {[T_MSG_KICK] = flood_on_kick},
};

static void ext_send(moon_runtime_t *rt, moon_addr_t to, uint32_t type, uint64_t n)
{
    t_work_t *m = moon_msg_new(type, 0);

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->n = n;
    CU_ASSERT_EQUAL(moon_runtime_send(rt, to, &m->hdr), MOON_OK);
}

static void test_work_spreads_over_workers(void)
{
    moon_runtime_t *rt   = new_rt(2, 1024);
    counter_args_t  args = {.expect = 16 * 20000, .spin = 200};
    moon_addr_t     c[16], f[16];

    atomic_store(&total_got, 0);
    atomic_store(&n_threads_seen, 0);
    for (int i = 0; i < 16; i++) {
        CU_ASSERT_EQUAL(moon_spawn(rt, &counter_ops, &args, NULL, &c[i]), MOON_OK);
        CU_ASSERT_EQUAL(moon_spawn(rt, &flood_ops, &c[i], NULL, &f[i]), MOON_OK);
        ext_send(rt, f[i], T_MSG_KICK, 20000);
    }
    CU_ASSERT_EQUAL(moon_runtime_run(rt), 0);
    CU_ASSERT_EQUAL(atomic_load(&total_got), args.expect);
    CU_ASSERT(atomic_load(&n_threads_seen) >= 2); /* both workers ran counters */
    moon_runtime_destroy(rt);
}

static void test_backpressure_mutes_the_sender_and_loses_nothing(void)
{
    moon_runtime_t    *rt   = new_rt(2, 256);
    counter_args_t     args = {.expect = 200000, .spin = 300}; /* a slow receiver */
    moon_addr_t        c, f;
    moon_actor_stats_t cs, fs;

    atomic_store(&total_got, 0);
    CU_ASSERT_EQUAL(moon_spawn(rt, &counter_ops, &args, NULL, &c), MOON_OK);
    CU_ASSERT_EQUAL(moon_spawn(rt, &flood_ops, &c, NULL, &f), MOON_OK);
    ext_send(rt, f, T_MSG_KICK, args.expect);
    CU_ASSERT_EQUAL(moon_runtime_run(rt), 0);
    CU_ASSERT_EQUAL(atomic_load(&total_got), args.expect);
    CU_ASSERT_EQUAL(moon_actor_stats(rt, c, &cs), MOON_OK);
    CU_ASSERT_EQUAL(moon_actor_stats(rt, f, &fs), MOON_OK);
    CU_ASSERT_EQUAL(cs.n_processed, args.expect);
    CU_ASSERT(fs.n_muted > 0);
    /* Bounded: the bound plus what one sender turn can add before it is muted. */
    printf("(depth high water %llu, muted %llu times) ", (unsigned long long)cs.depth_high_water,
           (unsigned long long)fs.n_muted);
    /* Bounded: the sender flags the receiver once its backlog passes the
     * bound (checked every 64 sends) and is muted after its handler (500
     * sends), whether or not the receiver's thread got to run meanwhile. */
    CU_ASSERT(cs.depth_high_water < 256 + 64 + 2 * 500);
    CU_ASSERT(cs.depth_high_water >= 256);
    moon_runtime_destroy(rt);
}

static void test_control_actors_are_never_muted(void)
{
    moon_runtime_t    *rt   = new_rt(2, 256);
    counter_args_t     args = {.expect = 50000, .spin = 300};
    moon_spawn_opts_t  ctl  = {.flags = MOON_SPAWN_CONTROL};
    moon_addr_t        c, f;
    moon_actor_stats_t fs;

    atomic_store(&total_got, 0);
    CU_ASSERT_EQUAL(moon_spawn(rt, &counter_ops, &args, NULL, &c), MOON_OK);
    CU_ASSERT_EQUAL(moon_spawn(rt, &flood_ops, &c, &ctl, &f), MOON_OK);
    ext_send(rt, f, T_MSG_KICK, args.expect);
    CU_ASSERT_EQUAL(moon_runtime_run(rt), 0);
    CU_ASSERT_EQUAL(atomic_load(&total_got), args.expect);
    CU_ASSERT_EQUAL(moon_actor_stats(rt, f, &fs), MOON_OK);
    CU_ASSERT_EQUAL(fs.n_muted, 0);
    moon_runtime_destroy(rt);
}

/* ---- ring: every hop delivered, in order, across workers. */
static moon_status_t ring_on_kick(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    *(moon_addr_t *)moon_actor_state(self) = ((const t_kick_t *)msg)->n;
    return MOON_OK;
}

static moon_status_t ring_on_work(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    uint64_t left = ((const t_work_t *)msg)->n;

    atomic_fetch_add(&total_got, 1);
    if (left == 0) {
        moon_runtime_shutdown(moon_actor_runtime(self), 7);
        return MOON_OK;
    }
    return send_n(self, *(moon_addr_t *)moon_actor_state(self), T_MSG_WORK, left - 1);
}

static const moon_actor_ops_t ring_ops = {
    .name        = "ring",
    .state_bytes = sizeof(moon_addr_t),
    .on_msg      = {[T_MSG_KICK] = ring_on_kick, [T_MSG_WORK] = ring_on_work},
};

static void test_ring_delivers_every_hop(void)
{
    moon_runtime_t *rt = new_rt(2, 1024);
    moon_addr_t     ring[300];

    atomic_store(&total_got, 0);
    for (int i = 0; i < 300; i++) {
        CU_ASSERT_EQUAL(moon_spawn(rt, &ring_ops, NULL, NULL, &ring[i]), MOON_OK);
    }
    for (int i = 0; i < 300; i++) {
        ext_send(rt, ring[i], T_MSG_KICK, ring[(i + 1) % 300]);
    }
    /* Several tokens at once, so workers have something to steal. */
    for (int t = 0; t < 4; t++) {
        ext_send(rt, ring[t * 75], T_MSG_WORK, 50000 + (uint64_t)t);
    }
    CU_ASSERT_EQUAL(moon_runtime_run(rt), 7); /* the first token to finish */
    CU_ASSERT(atomic_load(&total_got) >= 50001);
    moon_runtime_destroy(rt);
}

/* ---- outside senders: 4 threads send to one counter while it runs. */
typedef struct {
    moon_runtime_t *rt;
    moon_addr_t     to;
} sender_arg_t;

static void *outside_sender(void *arg)
{
    sender_arg_t *s = arg;

    for (int i = 0; i < 25000; i++) {
        t_work_t *m = moon_msg_new(T_MSG_WORK, 0);
        m->n        = (uint64_t)i;
        if (moon_runtime_send(s->rt, s->to, &m->hdr) != MOON_OK) {
            moon_msg_release(&m->hdr);
        }
    }
    moon_msg_cache_flush();
    return NULL;
}

static void test_outside_senders_lose_nothing(void)
{
    moon_runtime_t *rt   = new_rt(2, 1 << 20);
    counter_args_t  args = {.expect = 100000, .spin = 0};
    sender_arg_t    sa;
    pthread_t       tid[4];

    atomic_store(&total_got, 0);
    CU_ASSERT_EQUAL(moon_spawn(rt, &counter_ops, &args, NULL, &sa.to), MOON_OK);
    sa.rt = rt;
    CU_ASSERT_EQUAL(moon_runtime_start(rt), MOON_OK);
    for (int i = 0; i < 4; i++) {
        pthread_create(&tid[i], NULL, outside_sender, &sa);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(tid[i], NULL);
    }
    CU_ASSERT_EQUAL(moon_runtime_wait(rt), 0);
    CU_ASSERT_EQUAL(atomic_load(&total_got), args.expect);
    moon_runtime_destroy(rt);
}

/* ---- real-time periodic timer: 5 ticks of 2 ms, then a cancel. */
typedef struct {
    uint64_t id, ticks, t0;
} tick_state_t;

static moon_status_t tick_init(moon_actor_t *self, const void *args)
{
    tick_state_t *st = moon_actor_state(self);

    (void)args;
    st->t0 = moon_now(moon_actor_runtime(self));
    return moon_timer_start(self, 2000000, 2000000, 9, &st->id);
}

static moon_status_t tick_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    tick_state_t *st = moon_actor_state(self);

    CU_ASSERT_EQUAL(((const moon_sys_timer_t *)msg)->cookie, 9);
    if (++st->ticks == 5) {
        CU_ASSERT(moon_now(moon_actor_runtime(self)) - st->t0 >= 10000000);
        CU_ASSERT_EQUAL(moon_timer_cancel(self, st->id), MOON_OK);
        moon_actor_exit(self, MOON_OK); /* last actor: run returns */
    }
    return MOON_OK;
}

static const moon_actor_ops_t tick_ops = {
    .name        = "ticker",
    .state_bytes = sizeof(tick_state_t),
    .init        = tick_init,
    .on_msg      = {[MOON_MSG_SYS_TIMER] = tick_on_timer},
};

static void test_periodic_timer_on_the_real_clock(void)
{
    moon_runtime_t *rt = new_rt(2, 1024);
    moon_addr_t     a;
    double          t0 = moon_test_now_s();

    CU_ASSERT_EQUAL(moon_spawn(rt, &tick_ops, NULL, NULL, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_runtime_run(rt), 0); /* returns when no actor is left */
    CU_ASSERT(moon_test_now_s() - t0 >= 0.010);
    moon_runtime_destroy(rt);
}

/* moon_actor_wait_gone from outside: a live actor is still there when the
 * wait times out; once stopped, it is gone well within the deadline. */
static void test_wait_gone_after_stop(void)
{
    moon_runtime_t *rt    = new_rt(2, 1024);
    counter_args_t  cargs = {.expect = UINT64_MAX, .spin = 0};
    moon_addr_t     a;

    CU_ASSERT_EQUAL_FATAL(moon_runtime_start(rt), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &counter_ops, &cargs, NULL, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_actor_wait_gone(rt, a, 20), MOON_ERR_TIMED_OUT);
    CU_ASSERT_EQUAL(moon_stop(rt, a, MOON_OK), MOON_OK);
    CU_ASSERT_EQUAL(moon_actor_wait_gone(rt, a, 10000), MOON_OK);
    moon_runtime_shutdown(rt, 0);
    moon_runtime_wait(rt);
    moon_runtime_destroy(rt);
}

/* Named children crash over and over while the supervisor runs on another
 * worker: a restart must never find the old incarnation's name still taken. */
static void test_supervisor_restarts_named_children_across_workers(void)
{
    moon_runtime_t        *rt    = new_rt(2, 1024);
    counter_args_t         cargs = {.expect = UINT64_MAX, .spin = 0};
    char                   names[8][16];
    moon_child_spec_t      kids[8];
    moon_supervisor_args_t args = {.strategy     = MOON_SUP_ONE_FOR_ONE,
                                   .max_restarts = 100000,
                                   .window_ns    = 1000000000ull,
                                   .children     = kids,
                                   .n_children   = 8};
    moon_addr_t            sup, child;
    moon_actor_stats_t     st;
    uint64_t               rng     = 5;
    int                    crashes = 0;

    for (int i = 0; i < 8; i++) {
        snprintf(names[i], sizeof(names[i]), "kid%d", i);
        kids[i] = (moon_child_spec_t){.name       = names[i],
                                      .ops        = &counter_ops,
                                      .args       = &cargs,
                                      .args_bytes = sizeof(cargs),
                                      .restart    = MOON_RESTART_PERMANENT};
    }
    CU_ASSERT_EQUAL_FATAL(moon_supervisor_spawn(rt, &args, NULL, &sup), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_runtime_start(rt), MOON_OK);
    for (int round = 0; round < 20000; round++) {
        if (moon_whereis(rt, names[moon_test_rand(&rng) % 8], &child) == MOON_OK) {
            t_done_t *m = moon_msg_new(T_MSG_DONE, 0);
            if (moon_runtime_send(rt, child, &m->hdr) == MOON_OK) {
                crashes++;
            } else {
                moon_msg_release(&m->hdr);
            }
        }
    }
    nanosleep(&(struct timespec){0, 50000000}, NULL);
    CU_ASSERT_EQUAL(moon_actor_stats(rt, sup, &st), MOON_OK); /* never escalated */
    for (int i = 0; i < 8; i++) {
        CU_ASSERT_EQUAL(moon_whereis(rt, names[i], &child), MOON_OK);
    }
    CU_ASSERT(crashes > 100);
    moon_runtime_shutdown(rt, 0);
    moon_runtime_wait(rt);
    moon_runtime_destroy(rt);
}

static int setup(void)
{
    return moon_msg_register(t_msg_descs) != MOON_OK;
}

MOON_TEST_MAIN("sched", setup, NULL, test_work_spreads_over_workers,
               test_backpressure_mutes_the_sender_and_loses_nothing,
               test_control_actors_are_never_muted, test_ring_delivers_every_hop,
               test_outside_senders_lose_nothing, test_periodic_timer_on_the_real_clock,
               test_supervisor_restarts_named_children_across_workers, test_wait_gone_after_stop)
