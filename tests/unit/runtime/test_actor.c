/* tests/unit/runtime/test_actor.c - actor semantics under the deterministic
 * executor (one thread, so the test can inspect state between steps): send
 * and reply, stale addresses, names, monitors, links, failures, supervisors,
 * timers and the virtual clock, allocation failures. */
#include "moonlet/moonlet.h"
#include "moonlet/transport.h"

#include "moon_test.h"

#include <string.h>

#define T_N_FIELDS(F, T) F(T, u64, n)
#define T_FAIL_FIELDS(F, T) F(T, i32, status)
#define T_MSGS(X)                                                                                  \
    X(T_MSG_REQ, t_req_t, T_N_FIELDS)                                                              \
    X(T_MSG_REPLY, t_reply_t, T_N_FIELDS)                                                          \
    X(T_MSG_FAIL, t_fail_t, T_FAIL_FIELDS)
MOON_MSG_DECLARE(T_MSGS, 220, T_MSG_END)
MOON_MSG_DEFINE(T_MSGS, t_msg_descs)

/* What the recorder actors saw, in order (single-threaded executor). */
typedef struct {
    uint32_t    type;
    moon_addr_t to, src, actor;
    int32_t     reason;
    uint64_t    n, now;
} seen_t;
static seen_t   seen[1024];
static uint32_t n_seen;
static int      n_fini;

static moon_runtime_t *new_rt(uint64_t seed)
{
    moon_runtime_config_t cfg;
    moon_runtime_t       *rt = NULL;

    moon_runtime_config_default(&cfg);
    cfg.deterministic = 1;
    cfg.seed          = seed;
    cfg.max_actors    = 4096;
    CU_ASSERT_EQUAL_FATAL(moon_runtime_create(&cfg, &rt), MOON_OK);
    n_seen = 0;
    n_fini = 0;
    return rt;
}

static moon_status_t send_n(moon_actor_t *self, moon_addr_t to, uint32_t type, uint64_t n)
{
    t_req_t *m = moon_msg_new(type, 0);

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->n = n;
    return moon_tell(self, to, &m->hdr);
}

static moon_status_t ext_send(moon_runtime_t *rt, moon_addr_t to, uint32_t type, uint64_t n)
{
    t_req_t      *m = moon_msg_new(type, 0);
    moon_status_t status;

    m->n   = n;
    status = moon_runtime_send(rt, to, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return status;
}

/* recorder: logs everything; REQ n is answered with REPLY n; FAIL fails it;
 * REQ with n == 999 exits normally. */
static moon_status_t rec_any(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    seen_t *s = &seen[n_seen < 1024 ? n_seen++ : 1023];

    memset(s, 0, sizeof(*s));
    s->type = msg->type;
    s->to   = moon_actor_addr(self);
    s->src  = msg->src;
    s->now  = moon_now(moon_actor_runtime(self));
    switch (msg->type) {
    case T_MSG_REQ:
        s->n = ((const t_req_t *)msg)->n;
        if (s->n == 999) {
            moon_actor_exit(self, MOON_OK);
            return MOON_OK;
        }
        return msg->src != MOON_ADDR_NONE ? send_n(self, msg->src, T_MSG_REPLY, s->n) : MOON_OK;
    case T_MSG_REPLY:
        s->n = ((const t_reply_t *)msg)->n;
        return MOON_OK;
    case T_MSG_FAIL:
        return ((const t_fail_t *)msg)->status;
    case MOON_MSG_SYS_DOWN:
        s->actor  = ((const moon_sys_down_t *)msg)->actor;
        s->reason = ((const moon_sys_down_t *)msg)->reason;
        s->n      = ((const moon_sys_down_t *)msg)->ref;
        return MOON_OK;
    case MOON_MSG_SYS_EXIT:
        s->actor  = ((const moon_sys_exit_t *)msg)->actor;
        s->reason = ((const moon_sys_exit_t *)msg)->reason;
        return MOON_OK;
    case MOON_MSG_SYS_TIMER:
        s->n = ((const moon_sys_timer_t *)msg)->cookie;
        return MOON_OK;
    }
    return MOON_OK;
}

static void rec_fini(moon_actor_t *self)
{
    (void)self;
    n_fini++;
}

/* init args: optional address to send REQ 1 to at start. */
static moon_status_t rec_init(moon_actor_t *self, const void *args)
{
    const moon_addr_t *to = args;

    return to != NULL && *to != MOON_ADDR_NONE ? send_n(self, *to, T_MSG_REQ, 1) : MOON_OK;
}

static const moon_actor_ops_t rec_ops = {
    .name   = "rec",
    .init   = rec_init,
    .fini   = rec_fini,
    .on_msg = {[T_MSG_REQ]          = rec_any,
               [T_MSG_REPLY]        = rec_any,
               [T_MSG_FAIL]         = rec_any,
               [MOON_MSG_SYS_DOWN]  = rec_any,
               [MOON_MSG_SYS_EXIT]  = rec_any,
               [MOON_MSG_SYS_TIMER] = rec_any},
};

static uint32_t count_seen(uint32_t type, moon_addr_t to)
{
    uint32_t c = 0;

    for (uint32_t i = 0; i < n_seen; i++) {
        c += seen[i].type == type && (to == MOON_ADDR_NONE || seen[i].to == to);
    }
    return c;
}

static const seen_t *find_seen(uint32_t type, moon_addr_t to)
{
    for (uint32_t i = 0; i < n_seen; i++) {
        if (seen[i].type == type && seen[i].to == to) {
            return &seen[i];
        }
    }
    return NULL;
}

static void test_send_and_reply(void)
{
    moon_runtime_t    *rt = new_rt(1);
    moon_addr_t        a, b;
    moon_actor_stats_t st;

    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, &a, NULL, &b), MOON_OK); /* b sends REQ 1 to a */
    moon_runtime_run(rt);
    CU_ASSERT_EQUAL(count_seen(T_MSG_REQ, a), 1);
    CU_ASSERT_EQUAL(count_seen(T_MSG_REPLY, b), 1);
    CU_ASSERT_EQUAL(find_seen(T_MSG_REPLY, b)->src, a);
    CU_ASSERT_EQUAL(moon_actor_stats(rt, a, &st), MOON_OK);
    CU_ASSERT_EQUAL(st.n_processed, 1);
    CU_ASSERT_EQUAL(moon_spawn(rt, NULL, NULL, NULL, &a), MOON_ERR_INVALID_PARAM);
    moon_runtime_destroy(rt);
    CU_ASSERT_EQUAL(n_fini, 2); /* destroy ends live actors */
}

static void test_stale_address_never_reaches_a_reused_slot(void)
{
    moon_runtime_t      *rt = new_rt(1);
    moon_addr_t          a, b;
    moon_runtime_stats_t rs;

    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &a), MOON_OK);
    CU_ASSERT_EQUAL(ext_send(rt, a, T_MSG_REQ, 999), MOON_OK); /* a exits on this one */
    CU_ASSERT_EQUAL(ext_send(rt, a, T_MSG_REQ, 5), MOON_OK);   /* queued behind: dead letter */
    moon_runtime_run(rt);
    CU_ASSERT_EQUAL(count_seen(T_MSG_REQ, a), 1);
    moon_runtime_stats(rt, &rs);
    CU_ASSERT_EQUAL(rs.n_dead_letters, 1);
    CU_ASSERT_EQUAL(rs.n_actors_alive, 0);
    CU_ASSERT_EQUAL(ext_send(rt, a, T_MSG_REQ, 6), MOON_ERR_NO_ACTOR);
    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &b), MOON_OK);
    CU_ASSERT_NOT_EQUAL(a, b);
    CU_ASSERT_EQUAL(a >> 20, b >> 20); /* the slot was reused, with a new generation */
    CU_ASSERT_EQUAL(ext_send(rt, a, T_MSG_REQ, 7), MOON_ERR_NO_ACTOR);
    moon_runtime_step(rt, 0);
    CU_ASSERT_EQUAL(count_seen(T_MSG_REQ, b), 0);
    CU_ASSERT_EQUAL(ext_send(rt, (moon_addr_t)12345 << 20, T_MSG_REQ, 1), MOON_ERR_NO_ACTOR);
    CU_ASSERT_EQUAL(ext_send(rt, (moon_addr_t)3 << 44, T_MSG_REQ, 1), MOON_ERR_UNSUPPORTED);
    moon_runtime_destroy(rt);
}

static void test_names(void)
{
    moon_runtime_t   *rt = new_rt(1);
    moon_addr_t       a, b, found;
    moon_spawn_opts_t opts = {.name = "store/3"};

    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, &opts, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_whereis(rt, "store/3", &found), MOON_OK);
    CU_ASSERT_EQUAL(found, a);
    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, &opts, &b), MOON_ERR_EXISTS);
    CU_ASSERT_EQUAL(moon_register(rt, "store/3", a), MOON_ERR_EXISTS);
    CU_ASSERT_EQUAL(moon_register(rt, "", a), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_whereis(rt, "nobody", &found), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_stop(rt, a, MOON_OK), MOON_OK);
    moon_runtime_run(rt);
    CU_ASSERT_EQUAL(moon_whereis(rt, "store/3", &found), MOON_ERR_NOT_FOUND); /* dropped */
    CU_ASSERT_EQUAL(moon_stop(rt, a, MOON_OK), MOON_ERR_NO_ACTOR);
    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, &opts, &b), MOON_OK);
    CU_ASSERT_EQUAL(moon_unregister(rt, "store/3"), MOON_OK);
    CU_ASSERT_EQUAL(moon_unregister(rt, "store/3"), MOON_ERR_NOT_FOUND);
    moon_runtime_destroy(rt);
}

/* watcher: monitors or links to the address it is given at init. */
typedef struct {
    moon_addr_t target;
    int         link;
} watch_args_t;

static moon_status_t watcher_init(moon_actor_t *self, const void *args)
{
    const watch_args_t *w = args;

    return w->link ? moon_link(self, w->target) : moon_monitor(self, w->target, 77);
}

static const moon_actor_ops_t watcher_ops = {
    .name   = "watcher",
    .init   = watcher_init,
    .fini   = rec_fini,
    .on_msg = {[MOON_MSG_SYS_DOWN] = rec_any, [MOON_MSG_SYS_EXIT] = rec_any},
};
static const moon_actor_ops_t linker_noexit_ops = {
    .name   = "linker",
    .init   = watcher_init,
    .fini   = rec_fini,
    .on_msg = {[MOON_MSG_SYS_DOWN] = rec_any},
};

static void test_monitor_reports_down_with_reason(void)
{
    moon_runtime_t *rt = new_rt(3);
    moon_addr_t     a, w, w2;
    watch_args_t    args;
    t_fail_t       *f;
    const seen_t   *s;

    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &a), MOON_OK);
    args = (watch_args_t){a, 0};
    CU_ASSERT_EQUAL(moon_spawn(rt, &watcher_ops, &args, NULL, &w), MOON_OK);
    moon_runtime_step(rt, 0); /* the monitor is installed */
    f         = moon_msg_new(T_MSG_FAIL, 0);
    f->status = MOON_ERR_CORRUPT;
    CU_ASSERT_EQUAL(moon_runtime_send(rt, a, &f->hdr), MOON_OK);
    moon_runtime_step(rt, 0);
    s = find_seen(MOON_MSG_SYS_DOWN, w);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->actor, a);
    CU_ASSERT_EQUAL(s->reason, MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL(s->n, 77);
    /* Monitoring an actor that is already gone: DOWN with NO_ACTOR at once. */
    CU_ASSERT_EQUAL(moon_spawn(rt, &watcher_ops, &args, NULL, &w2), MOON_OK);
    moon_runtime_step(rt, 0);
    s = find_seen(MOON_MSG_SYS_DOWN, w2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->reason, MOON_ERR_NO_ACTOR);
    moon_runtime_destroy(rt);
}

static void test_monitor_racing_a_death_still_gets_down(void)
{
    /* MONITOR queued behind the message that kills the target: the dead
     * slot answers it, so the watcher is never left waiting. */
    moon_runtime_t *rt = new_rt(4);
    moon_addr_t     a, w;
    watch_args_t    args;

    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &a), MOON_OK);
    CU_ASSERT_EQUAL(ext_send(rt, a, T_MSG_REQ, 999), MOON_OK);
    args = (watch_args_t){a, 0};
    CU_ASSERT_EQUAL(moon_spawn(rt, &watcher_ops, &args, NULL, &w), MOON_OK);
    moon_runtime_run(rt);
    CU_ASSERT_EQUAL(count_seen(MOON_MSG_SYS_DOWN, w), 1);
    moon_runtime_destroy(rt);
}

static void test_link_propagates_failure_unless_trapped(void)
{
    moon_runtime_t    *rt = new_rt(5);
    moon_addr_t        a, trap, plain, normal, b;
    watch_args_t       args;
    moon_actor_stats_t st;

    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &a), MOON_OK);
    args = (watch_args_t){a, 1};
    CU_ASSERT_EQUAL(moon_spawn(rt, &watcher_ops, &args, NULL, &trap), MOON_OK);
    CU_ASSERT_EQUAL(moon_spawn(rt, &linker_noexit_ops, &args, NULL, &plain), MOON_OK);
    moon_runtime_step(rt, 0);
    CU_ASSERT_EQUAL(moon_stop(rt, a, MOON_ERR_TIMED_OUT), MOON_OK);
    moon_runtime_step(rt, 0);
    CU_ASSERT_EQUAL(find_seen(MOON_MSG_SYS_EXIT, trap)->reason, MOON_ERR_TIMED_OUT);
    CU_ASSERT_EQUAL(moon_actor_stats(rt, trap, &st), MOON_OK);            /* trapped: alive */
    CU_ASSERT_EQUAL(moon_actor_stats(rt, plain, &st), MOON_ERR_NO_ACTOR); /* failed too */
    /* A normal stop does not take linked actors down. */
    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &b), MOON_OK);
    args = (watch_args_t){b, 1};
    CU_ASSERT_EQUAL(moon_spawn(rt, &linker_noexit_ops, &args, NULL, &normal), MOON_OK);
    moon_runtime_step(rt, 0);
    CU_ASSERT_EQUAL(moon_stop(rt, b, MOON_OK), MOON_OK);
    moon_runtime_step(rt, 0);
    CU_ASSERT_EQUAL(moon_actor_stats(rt, normal, &st), MOON_OK);
    moon_runtime_destroy(rt);
}

static moon_status_t failing_init(moon_actor_t *self, const void *args)
{
    (void)self;
    (void)args;
    return MOON_ERR_IO;
}
static const moon_actor_ops_t bad_init_ops = {
    .name = "bad-init", .init = failing_init, .fini = rec_fini};

static void test_init_failure_is_returned(void)
{
    moon_runtime_t      *rt = new_rt(1);
    moon_addr_t          a  = 0;
    moon_runtime_stats_t rs;
    moon_spawn_opts_t    opts = {.name = "x"};

    CU_ASSERT_EQUAL(moon_spawn(rt, &bad_init_ops, NULL, &opts, &a), MOON_ERR_IO);
    CU_ASSERT_EQUAL(a, 0);
    CU_ASSERT_EQUAL(n_fini, 0);
    moon_runtime_stats(rt, &rs);
    CU_ASSERT_EQUAL(rs.n_actors_alive, 0);
    CU_ASSERT_EQUAL(moon_whereis(rt, "x", &a), MOON_ERR_NOT_FOUND);
    moon_runtime_destroy(rt);
}

static void test_supervisor_restarts_then_escalates(void)
{
    moon_runtime_t   *rt    = new_rt(6);
    moon_child_spec_t child = {
        .name = "worker", .ops = &rec_ops, .restart = MOON_RESTART_PERMANENT};
    moon_supervisor_args_t args = {.strategy     = MOON_SUP_ONE_FOR_ONE,
                                   .max_restarts = 2,
                                   .window_ns    = 1000000000ull,
                                   .children     = &child,
                                   .n_children   = 1};
    moon_addr_t            sup, w0, w1, watcher;
    watch_args_t           wa;

    CU_ASSERT_EQUAL(moon_supervisor_spawn(rt, &args, NULL, &sup), MOON_OK);
    wa = (watch_args_t){sup, 0};
    CU_ASSERT_EQUAL(moon_spawn(rt, &watcher_ops, &wa, NULL, &watcher), MOON_OK);
    for (int crash = 0; crash < 3; crash++) {
        t_fail_t *f;

        CU_ASSERT_EQUAL_FATAL(moon_whereis(rt, "worker", &w0), MOON_OK);
        f         = moon_msg_new(T_MSG_FAIL, 0);
        f->status = MOON_ERR_INVALID_PARAM;
        CU_ASSERT_EQUAL(moon_runtime_send(rt, w0, &f->hdr), MOON_OK);
        moon_runtime_step(rt, 0);
        if (crash < 2) { /* restarted: a new incarnation under the same name */
            CU_ASSERT_EQUAL(moon_whereis(rt, "worker", &w1), MOON_OK);
            CU_ASSERT_NOT_EQUAL(w0, w1);
            CU_ASSERT_EQUAL(count_seen(MOON_MSG_SYS_DOWN, watcher), 0);
        }
    }
    /* Third failure within the window: the supervisor gives up and says so. */
    CU_ASSERT_EQUAL(count_seen(MOON_MSG_SYS_DOWN, watcher), 1);
    CU_ASSERT_EQUAL(find_seen(MOON_MSG_SYS_DOWN, watcher)->reason, MOON_ERR_ACTOR_FAILED);
    CU_ASSERT_EQUAL(moon_whereis(rt, "worker", &w1), MOON_ERR_NOT_FOUND);
    moon_runtime_destroy(rt);
}

static void test_supervisor_transient_child_stops_normally(void)
{
    moon_runtime_t   *rt        = new_rt(7);
    moon_child_spec_t child     = {.name = "t", .ops = &rec_ops, .restart = MOON_RESTART_TRANSIENT};
    moon_supervisor_args_t args = {
        .max_restarts = 1, .window_ns = 1000000000ull, .children = &child, .n_children = 1};
    moon_addr_t sup, w;

    CU_ASSERT_EQUAL(moon_supervisor_spawn(rt, &args, NULL, &sup), MOON_OK);
    CU_ASSERT_EQUAL(moon_whereis(rt, "t", &w), MOON_OK);
    CU_ASSERT_EQUAL(ext_send(rt, w, T_MSG_REQ, 999), MOON_OK); /* normal exit */
    moon_runtime_step(rt, 0);
    CU_ASSERT_EQUAL(moon_whereis(rt, "t", &w), MOON_ERR_NOT_FOUND); /* not restarted */
    CU_ASSERT_EQUAL(moon_stop(rt, sup, MOON_OK), MOON_OK);
    moon_runtime_run(rt);
    moon_runtime_destroy(rt);
}

/* timer actor: starts a one-shot (cookie 1 of kind 7, 5 ms), a periodic (cookie 2,
 * every 10 ms) and a one-shot it cancels at once (cookie 3); at the 3rd
 * periodic tick it cancels the periodic; then a 1-hour timer (cookie 4). */
typedef struct {
    uint64_t periodic, ticks;
} timer_state_t;

static moon_status_t timer_init(moon_actor_t *self, const void *args)
{
    timer_state_t *st = moon_actor_state(self);
    uint64_t       id, doomed;

    (void)args;
    CU_ASSERT_EQUAL(moon_timer_start_kind(self, 7, 5000000, 0, 1, &id), MOON_OK);
    CU_ASSERT_EQUAL(moon_timer_start(self, 10000000, 10000000, 2, &st->periodic), MOON_OK);
    CU_ASSERT_EQUAL(moon_timer_start(self, 1000000, 0, 3, &doomed), MOON_OK);
    CU_ASSERT_EQUAL(moon_timer_cancel(self, doomed), MOON_OK);
    CU_ASSERT_EQUAL(moon_timer_cancel(self, doomed), MOON_ERR_NOT_FOUND);
    return MOON_OK;
}

static moon_status_t timer_on_tick(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    timer_state_t *st = moon_actor_state(self);
    uint64_t       id;

    rec_any(self, msg);
    /* the kind it was started with; 0 from moon_timer_start */
    CU_ASSERT_EQUAL(((const moon_sys_timer_t *)msg)->kind,
                    ((const moon_sys_timer_t *)msg)->cookie == 1 ? 7u : 0u);
    if (((const moon_sys_timer_t *)msg)->cookie == 2 && ++st->ticks == 3) {
        CU_ASSERT_EQUAL(moon_timer_cancel(self, st->periodic), MOON_OK);
        CU_ASSERT_EQUAL(moon_timer_start(self, 3600ull * 1000000000ull, 0, 4, &id), MOON_OK);
    }
    return MOON_OK;
}

static const moon_actor_ops_t timer_ops = {
    .name        = "timers",
    .state_bytes = sizeof(timer_state_t),
    .init        = timer_init,
    .on_msg      = {[MOON_MSG_SYS_TIMER] = timer_on_tick},
};

static void test_timers_on_the_virtual_clock(void)
{
    moon_runtime_t *rt = new_rt(8);
    moon_addr_t     a;
    double          t0         = moon_test_now_s();
    uint64_t        expect_n[] = {1, 2, 2, 2, 4};
    uint64_t        expect_t[] = {5, 10, 20, 30, 30 + 3600000};

    CU_ASSERT_EQUAL(moon_spawn(rt, &timer_ops, NULL, NULL, &a), MOON_OK);
    moon_runtime_run(rt); /* returns when no timer is left */
    CU_ASSERT_EQUAL_FATAL(n_seen, 5);
    for (uint32_t i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(seen[i].n, expect_n[i]);
        CU_ASSERT_EQUAL(seen[i].now, expect_t[i] * 1000000ull);
    }
    CU_ASSERT(moon_test_now_s() - t0 < 5.0); /* an hour of virtual time, at once */
    CU_ASSERT_EQUAL(moon_now(rt), (30 + 3600000) * 1000000ull);
    moon_runtime_destroy(rt);
}

static void test_spawn_survives_allocation_failures(void)
{
    moon_runtime_t *rt = new_rt(9);
    int             ok = 0, failed = 0;

    for (uint64_t k = 1; k <= 12; k++) {
        moon_addr_t       a;
        moon_spawn_opts_t opts = {.name = "named", .monitor = MOON_ADDR_NONE};
        moon_status_t     status;

        moon_fault_fail_after(k);
        status = moon_spawn(rt, &rec_ops, NULL, &opts, &a);
        moon_fault_reset();
        CU_ASSERT(status == MOON_OK || status == MOON_ERR_NO_MEMORY);
        if (status == MOON_OK) {
            ok++;
            CU_ASSERT_EQUAL(moon_stop(rt, a, MOON_OK), MOON_OK);
            moon_runtime_step(rt, 0);
        } else {
            failed++;
        }
    }
    CU_ASSERT(failed > 0);
    CU_ASSERT(ok > 0);
    moon_runtime_destroy(rt);
}

static void test_names_registered_later_die_with_the_actor(void)
{
    moon_runtime_t *rt = new_rt(1);
    moon_addr_t     a, found;

    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_register(rt, "alias", a), MOON_OK);
    CU_ASSERT_EQUAL(moon_register(rt, "alias2", a), MOON_OK);
    CU_ASSERT_EQUAL(moon_stop(rt, a, MOON_OK), MOON_OK);
    moon_runtime_run(rt);
    CU_ASSERT_EQUAL(moon_whereis(rt, "alias", &found), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_whereis(rt, "alias2", &found), MOON_ERR_NOT_FOUND);
    moon_runtime_destroy(rt);
}

/* forwarder: retains what it gets and tries to send it on (not allowed), then
 * sends a copy (allowed). */
static moon_addr_t   forward_to;
static moon_status_t fwd_on_req(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    void *copy;

    moon_msg_retain(msg);
    CU_ASSERT_EQUAL(moon_send(self, forward_to, (moon_msg_hdr_t *)msg), MOON_ERR_INVALID_PARAM);
    moon_msg_release(msg);
    CU_ASSERT_EQUAL(moon_send(self, forward_to, (moon_msg_hdr_t *)msg), MOON_ERR_INVALID_PARAM);
    copy = moon_msg_dup(msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
    return moon_tell(self, forward_to, copy);
}
static const moon_actor_ops_t fwd_ops = {.name = "fwd", .on_msg = {[T_MSG_REQ] = fwd_on_req}};

static void test_forwarding_a_received_message_needs_a_copy(void)
{
    moon_runtime_t *rt = new_rt(1);
    moon_addr_t     f;

    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &forward_to), MOON_OK);
    CU_ASSERT_EQUAL(moon_spawn(rt, &fwd_ops, NULL, NULL, &f), MOON_OK);
    for (uint64_t n = 1; n <= 5; n++) {
        CU_ASSERT_EQUAL(ext_send(rt, f, T_MSG_REQ, n), MOON_OK);
    }
    moon_runtime_run(rt);
    CU_ASSERT_EQUAL(count_seen(T_MSG_REQ, forward_to), 5); /* each copy once, mailboxes intact */
    moon_runtime_destroy(rt);
}

static moon_status_t exit_in_init(moon_actor_t *self, const void *args)
{
    (void)args;
    CU_ASSERT_EQUAL(moon_timer_start(self, 1000, 0, 1, &(uint64_t){0}), MOON_OK);
    moon_actor_exit(self, MOON_ERR_TIMED_OUT);
    return MOON_OK;
}
static const moon_actor_ops_t exit_init_ops = {
    .name   = "exit-in-init",
    .init   = exit_in_init,
    .fini   = rec_fini,
    .on_msg = {[MOON_MSG_SYS_TIMER] = rec_any},
};

static void test_exit_during_init_ends_before_any_message(void)
{
    moon_runtime_t      *rt = new_rt(1);
    moon_addr_t          w, a;
    moon_spawn_opts_t    opts;
    moon_runtime_stats_t rs;

    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &w), MOON_OK);
    opts = (moon_spawn_opts_t){.monitor = w, .monitor_ref = 5};
    CU_ASSERT_EQUAL(moon_spawn(rt, &exit_init_ops, NULL, &opts, &a), MOON_OK);
    moon_runtime_step(rt, 0);
    CU_ASSERT_EQUAL(count_seen(MOON_MSG_SYS_TIMER, a), 0); /* no handler ran */
    CU_ASSERT_EQUAL(find_seen(MOON_MSG_SYS_DOWN, w)->reason, MOON_ERR_TIMED_OUT);
    CU_ASSERT_EQUAL(n_fini, 1);
    moon_runtime_stats(rt, &rs);
    CU_ASSERT_EQUAL(rs.n_timers, 0);
    moon_runtime_destroy(rt);
}

/* two one-shots due at the same instant; the first one's handler exits, so
 * the second is fired but never delivered: its entry must still be freed. */
static moon_status_t two_timers_init(moon_actor_t *self, const void *args)
{
    uint64_t id;

    (void)args;
    CU_ASSERT_EQUAL(moon_timer_start(self, 1000000, 0, 1, &id), MOON_OK);
    CU_ASSERT_EQUAL(moon_timer_start(self, 1000000, 0, 2, &id), MOON_OK);
    return MOON_OK;
}
static moon_status_t exit_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    rec_any(self, msg);
    moon_actor_exit(self, MOON_OK);
    return MOON_OK;
}
static const moon_actor_ops_t two_timers_ops = {
    .name   = "two-timers",
    .init   = two_timers_init,
    .on_msg = {[MOON_MSG_SYS_TIMER] = exit_on_timer},
};

static void test_undelivered_timer_does_not_leak(void)
{
    moon_runtime_t      *rt = new_rt(2);
    moon_addr_t          a;
    moon_runtime_stats_t rs;

    CU_ASSERT_EQUAL(moon_spawn(rt, &two_timers_ops, NULL, NULL, &a), MOON_OK);
    moon_runtime_stats(rt, &rs);
    CU_ASSERT_EQUAL(rs.n_timers, 2);
    moon_runtime_run(rt);
    CU_ASSERT_EQUAL(count_seen(MOON_MSG_SYS_TIMER, a), 1);
    moon_runtime_stats(rt, &rs);
    CU_ASSERT_EQUAL(rs.n_timers, 0);
    CU_ASSERT_EQUAL(rs.n_dead_letters, 1);
    moon_runtime_destroy(rt);
}

static void test_one_for_all_restarts_every_named_child(void)
{
    moon_runtime_t   *rt      = new_rt(11);
    moon_child_spec_t kids[3] = {
        {.name = "k0", .ops = &rec_ops, .restart = MOON_RESTART_PERMANENT},
        {.name = "k1", .ops = &rec_ops, .restart = MOON_RESTART_PERMANENT},
        {.name = "k2", .ops = &rec_ops, .restart = MOON_RESTART_PERMANENT},
    };
    moon_supervisor_args_t args = {.strategy     = MOON_SUP_ONE_FOR_ALL,
                                   .max_restarts = 5,
                                   .window_ns    = 1000000000ull,
                                   .children     = kids,
                                   .n_children   = 3};
    moon_addr_t            sup, before[3], after[3];
    moon_actor_stats_t     st;
    const char            *names[3] = {"k0", "k1", "k2"};
    t_fail_t              *f;

    CU_ASSERT_EQUAL(moon_supervisor_spawn(rt, &args, NULL, &sup), MOON_OK);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(moon_whereis(rt, names[i], &before[i]), MOON_OK);
    }
    f         = moon_msg_new(T_MSG_FAIL, 0);
    f->status = MOON_ERR_IO;
    CU_ASSERT_EQUAL(moon_runtime_send(rt, before[1], &f->hdr), MOON_OK);
    moon_runtime_step(rt, 0);
    CU_ASSERT_EQUAL(moon_actor_stats(rt, sup, &st), MOON_OK); /* did not escalate */
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(moon_whereis(rt, names[i], &after[i]), MOON_OK);
        CU_ASSERT_NOT_EQUAL(before[i], after[i]); /* every child is a new incarnation */
        CU_ASSERT_EQUAL(moon_actor_stats(rt, before[i], &st), MOON_ERR_NO_ACTOR);
    }
    moon_runtime_destroy(rt);
}

static void test_slots_retire_when_generations_run_out(void)
{
    moon_runtime_config_t cfg;
    moon_runtime_t       *rt;
    moon_addr_t           first, a;
    moon_actor_stats_t    st;

    moon_runtime_config_default(&cfg);
    cfg.deterministic = 1;
    cfg.max_actors    = 3; /* slots 1 and 2 */
    CU_ASSERT_EQUAL_FATAL(moon_runtime_create(&cfg, &rt), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, &rec_ops, NULL, NULL, &first), MOON_OK);
    a = first;
    for (uint32_t i = 0; i < (1u << 21); i++) { /* > 2 slots x 2^20 generations */
        CU_ASSERT_EQUAL_FATAL(moon_stop(rt, a, MOON_OK), MOON_OK);
        moon_runtime_step(rt, 0);
        if (moon_spawn(rt, &rec_ops, NULL, NULL, &a) != MOON_OK) {
            break; /* both slots retired */
        }
        if (a == first) {
            CU_FAIL("an old address came back to life");
            break;
        }
    }
    CU_ASSERT_EQUAL(moon_actor_stats(rt, first, &st), MOON_ERR_NO_ACTOR);
    CU_ASSERT_EQUAL(moon_spawn(rt, &rec_ops, NULL, NULL, &a), MOON_ERR_NO_RESOURCE);
    moon_runtime_destroy(rt);
}

/* A transport whose every peer is gone. */
static moon_status_t lost_send(void *ctx, moon_addr_t to, moon_msg_hdr_t *msg)
{
    (void)ctx;
    (void)to;
    (void)msg;
    return MOON_ERR_PEER_LOST;
}
static const moon_transport_ops_t lost_transport = {"lost", lost_send};

static void test_monitor_of_an_unreachable_rank_gets_down(void)
{
    moon_runtime_t *rt = new_rt(12);
    moon_addr_t     w, l;
    watch_args_t    args = {((moon_addr_t)5 << 44) | (1u << 20) | 1, 0}; /* an actor on rank 5 */

    moon_runtime_attach_transport(rt, &lost_transport, NULL);
    CU_ASSERT_EQUAL(moon_spawn(rt, &watcher_ops, &args, NULL, &w), MOON_OK);
    args.link = 1;
    CU_ASSERT_EQUAL(moon_spawn(rt, &watcher_ops, &args, NULL, &l), MOON_OK);
    moon_runtime_step(rt, 0);
    CU_ASSERT_EQUAL(find_seen(MOON_MSG_SYS_DOWN, w)->reason, MOON_ERR_PEER_LOST);
    CU_ASSERT_EQUAL(find_seen(MOON_MSG_SYS_EXIT, l)->reason, MOON_ERR_PEER_LOST);
    moon_runtime_destroy(rt);
}

static int setup(void)
{
    return moon_msg_register(t_msg_descs) != MOON_OK;
}

int main(void)
{
    moon_log_set_level(MOON_LOG_ERROR); /* failures here are on purpose */
    return MOON_TEST_RUN(
        "actor", setup, NULL, test_send_and_reply, test_stale_address_never_reaches_a_reused_slot,
        test_names, test_monitor_reports_down_with_reason,
        test_monitor_racing_a_death_still_gets_down, test_link_propagates_failure_unless_trapped,
        test_init_failure_is_returned, test_supervisor_restarts_then_escalates,
        test_supervisor_transient_child_stops_normally, test_timers_on_the_virtual_clock,
        test_spawn_survives_allocation_failures, test_names_registered_later_die_with_the_actor,
        test_forwarding_a_received_message_needs_a_copy,
        test_exit_during_init_ends_before_any_message, test_undelivered_timer_does_not_leak,
        test_one_for_all_restarts_every_named_child, test_slots_retire_when_generations_run_out,
        test_monitor_of_an_unreachable_rank_gets_down);
}
