/* examples/supervised_pingpong.c - a custom actor program, the one the README
 * walks through: its own message types, a ping-pong pair, and a counter under
 * a supervisor that survives a crashing child.
 *
 *   driver --PING--> ponger --PONG--> driver        (N round trips, timed)
 *   driver --INCR--> "counter" (supervised)         (state: a number)
 *   driver --CRASH-> "counter"  -> fails -> the supervisor restarts it
 *   driver --GET---> the new "counter" --VALUE--> driver
 */
#include "moonlet/moonlet.h"

#include <stdio.h>
#include <stdlib.h>

/* 1. Message types: one list; ids from MOON_MSG_USER_BASE (128) up. */
#define EX_COUNT_FIELDS(F, T) F(T, u64, n)
#define EX_INCR_FIELDS(F, T) F(T, i64, by)
#define EX_EMPTY_FIELDS(F, T)
#define EX_VALUE_FIELDS(F, T) F(T, i64, value)
#define EX_MSGS(X)                                                                                 \
    X(EX_MSG_PING, ex_ping_t, EX_COUNT_FIELDS)                                                     \
    X(EX_MSG_PONG, ex_pong_t, EX_COUNT_FIELDS)                                                     \
    X(EX_MSG_INCR, ex_incr_t, EX_INCR_FIELDS)                                                      \
    X(EX_MSG_GET, ex_get_t, EX_EMPTY_FIELDS)                                                       \
    X(EX_MSG_VALUE, ex_value_t, EX_VALUE_FIELDS)                                                   \
    X(EX_MSG_CRASH, ex_crash_t, EX_EMPTY_FIELDS)
MOON_MSG_DECLARE_IN(EX_MSGS, USER, EX_MSG_END)
MOON_MSG_DEFINE(EX_MSGS, ex_msg_descs)

/* 2. The ponger: answers every PING with a PONG to its sender. No state. */
static moon_status_t ponger_on_ping(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    ex_pong_t *pong = moon_msg_new(EX_MSG_PONG, 0);

    if (pong == NULL) {
        return MOON_ERR_NO_MEMORY; /* fails this actor; the process goes on */
    }
    pong->n = ((const ex_ping_t *)msg)->n;
    return moon_tell(self, msg->src, &pong->hdr); /* tell: released if the send fails */
}

static const moon_actor_ops_t ponger_ops = {
    .name   = "ponger",
    .on_msg = {[EX_MSG_PING] = ponger_on_ping},
};

/* 3. The counter: a number; CRASH makes its handler fail on purpose. */
typedef struct {
    int64_t value;
} counter_state_t;

static moon_status_t counter_on_incr(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    counter_state_t *st = moon_actor_state(self);

    st->value += ((const ex_incr_t *)msg)->by;
    return MOON_OK;
}

static moon_status_t counter_on_get(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    counter_state_t *st    = moon_actor_state(self);
    ex_value_t      *reply = moon_msg_new(EX_MSG_VALUE, 0);

    if (reply == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    reply->value = st->value;
    return moon_tell(self, msg->src, &reply->hdr);
}

static moon_status_t counter_on_crash(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    (void)msg;
    return MOON_ERR_INVALID_PARAM; /* any error status fails the actor */
}

static const moon_actor_ops_t counter_ops = {
    .name        = "counter",
    .state_bytes = sizeof(counter_state_t),
    .on_msg      = {[EX_MSG_INCR]  = counter_on_incr,
                    [EX_MSG_GET]   = counter_on_get,
                    [EX_MSG_CRASH] = counter_on_crash},
};

/* 4. The driver: runs the scenario, one step per message. */
typedef struct {
    moon_addr_t ponger, old_counter;
    uint64_t    n_round_trips, t0;
    int         phase;
} driver_state_t;

static moon_status_t send_empty(moon_actor_t *self, moon_addr_t to, uint32_t type)
{
    moon_msg_hdr_t *m = moon_msg_new(type, 0);

    return m != NULL ? moon_tell(self, to, m) : MOON_ERR_NO_MEMORY;
}

static moon_status_t send_ping(moon_actor_t *self, moon_addr_t to, uint64_t n)
{
    ex_ping_t *ping = moon_msg_new(EX_MSG_PING, 0);

    if (ping == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    ping->n = n;
    return moon_tell(self, to, &ping->hdr);
}

static moon_status_t driver_init(moon_actor_t *self, const void *args)
{
    driver_state_t *st = moon_actor_state(self);
    moon_status_t   status;

    st->n_round_trips = *(const uint64_t *)args;
    status            = moon_spawn(moon_actor_runtime(self), &ponger_ops, NULL, NULL, &st->ponger);
    if (status != MOON_OK) {
        return status;
    }
    st->t0 = moon_now(moon_actor_runtime(self));
    return send_ping(self, st->ponger, 1);
}

static moon_status_t driver_on_pong(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    driver_state_t *st = moon_actor_state(self);
    uint64_t        n  = ((const ex_pong_t *)msg)->n;
    moon_runtime_t *rt = moon_actor_runtime(self);
    moon_addr_t     counter;
    moon_status_t   status;

    if (n < st->n_round_trips) {
        return send_ping(self, st->ponger, n + 1);
    }
    printf("ping-pong: %llu round trips, %.0f round trips/s\n", (unsigned long long)n,
           (double)n * 1e9 / (double)(moon_now(rt) - st->t0));
    /* Count to 5 in the supervised counter, then crash it. */
    status = moon_whereis(rt, "counter", &counter);
    for (int i = 0; status == MOON_OK && i < 5; i++) {
        ex_incr_t *incr = moon_msg_new(EX_MSG_INCR, 0);
        if (incr == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        incr->by = 1;
        status   = moon_tell(self, counter, &incr->hdr);
    }
    if (status == MOON_OK) {
        status = send_empty(self, counter, EX_MSG_GET);
    }
    st->old_counter = counter;
    return status;
}

static moon_status_t driver_on_value(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    driver_state_t *st    = moon_actor_state(self);
    int64_t         value = ((const ex_value_t *)msg)->value;
    uint64_t        timer;

    if (st->phase == 0) {
        printf("counter %llx: value %lld; crashing it\n", (unsigned long long)st->old_counter,
               (long long)value);
        st->phase = 1;
        /* Let the supervisor restart it; look again in 10 ms. */
        MOON_CHECK(send_empty(self, st->old_counter, EX_MSG_CRASH) == MOON_OK);
        return moon_timer_start(self, 10 * 1000000ull, 0, 0, &timer);
    }
    printf("restarted counter: value %lld (fresh state)\n", (long long)value);
    moon_runtime_shutdown(moon_actor_runtime(self), value == 0 ? 0 : 1);
    return MOON_OK;
}

static moon_status_t driver_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    driver_state_t *st = moon_actor_state(self);
    moon_addr_t     counter;
    moon_status_t   status;

    (void)msg;
    status = send_empty(self, st->old_counter, EX_MSG_GET);
    printf("send to the old counter address: %s\n", moon_status_str(status));
    status = moon_whereis(moon_actor_runtime(self), "counter", &counter);
    if (status != MOON_OK) {
        return status;
    }
    printf("\"counter\" now names %llx\n", (unsigned long long)counter);
    return send_empty(self, counter, EX_MSG_GET);
}

static const moon_actor_ops_t driver_ops = {
    .name        = "driver",
    .state_bytes = sizeof(driver_state_t),
    .init        = driver_init,
    .on_msg      = {[EX_MSG_PONG]        = driver_on_pong,
                    [EX_MSG_VALUE]       = driver_on_value,
                    [MOON_MSG_SYS_TIMER] = driver_on_timer},
};

int main(int argc, char **argv)
{
    moon_runtime_config_t cfg;
    moon_runtime_t       *rt;
    moon_addr_t           sup, driver;
    uint64_t              n = argc > 1 ? strtoull(argv[1], NULL, 0) : 1000000;
    int                   code;

    /* The counter, restarted at most 3 times a second. */
    const moon_child_spec_t child = {
        .name = "counter", .ops = &counter_ops, .restart = MOON_RESTART_PERMANENT};
    const moon_supervisor_args_t sup_args = {.strategy     = MOON_SUP_ONE_FOR_ONE,
                                             .max_restarts = 3,
                                             .window_ns    = 1000000000ull,
                                             .children     = &child,
                                             .n_children   = 1};

    moon_runtime_config_default(&cfg);
    if (moon_msg_register(ex_msg_descs) != MOON_OK || moon_runtime_create(&cfg, &rt) != MOON_OK) {
        return 1;
    }
    if (moon_supervisor_spawn(rt, &sup_args, NULL, &sup) != MOON_OK ||
        moon_spawn(rt, &driver_ops, &n, NULL, &driver) != MOON_OK) {
        moon_runtime_destroy(rt);
        return 1;
    }
    code = moon_runtime_run(rt);
    moon_runtime_destroy(rt);
    printf("%s\n", code == 0 ? "demo ok" : "demo FAILED");
    return code;
}
