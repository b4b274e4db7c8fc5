/* moonlet/actor.h - actors: ops tables, spawning, sending, stopping, links,
 * monitors, timers and the name registry.
 *
 * An actor's state is touched only by its own turns: handlers run one at a
 * time, never concurrently, possibly on different threads. Handlers never
 * block; long work is started asynchronously and its completion comes back as
 * a message. Functions taking `self` are called from that actor's handlers
 * (or init/fini); the others are safe from any thread. */
#ifndef MOONLET_ACTOR_H
#define MOONLET_ACTOR_H

#include "moonlet/msg.h"
#include "moonlet/sys_msgs.h"

MOON_EXTERN_C_BEGIN

typedef struct moon_actor   moon_actor_t;   /* opaque */
typedef struct moon_runtime moon_runtime_t; /* opaque */

/* Returns MOON_OK to go on; any error status fails the actor with that reason
 * (its supervisor, links and monitors are told; the process goes on). msg is
 * borrowed until return; keep it with moon_msg_retain. */
typedef moon_status_t (*moon_handler_fn)(moon_actor_t *self, const moon_msg_hdr_t *msg);

typedef struct {
    const char *name;        /* shown in logs and traces */
    size_t      state_bytes; /* private state, zeroed, runtime-allocated */
    /* Optional (NULL: nothing to do). Runs before any message; args are
     * borrowed for the call. An error fails the spawn, fini is not called. */
    moon_status_t (*init)(moon_actor_t *self, const void *args);
    /* Optional. Runs once after the last handler, whatever the reason. */
    void (*fini)(moon_actor_t *self);
    /* NULL entries: messages of that type are counted, logged at debug and dropped. */
    moon_handler_fn on_msg[MOON_MSG_MAX_TYPES];
} moon_actor_ops_t;

#define MOON_SPAWN_CONTROL 0x1u /* never muted by back-pressure (supervisors, schedulers) */

typedef struct {
    const char *name;        /* optional: register under this name (copied) */
    uint32_t    flags;       /* MOON_SPAWN_* */
    moon_addr_t link;        /* optional: link both ways to this actor from birth */
    moon_addr_t monitor;     /* optional: this actor gets DOWN when the new one ends */
    uint64_t    monitor_ref; /* ref carried by that DOWN */
    uint32_t    sim_node;    /* deterministic executor: the simulated node it runs on
                                (moon_runtime_config_t.sim_latency_ns, sim_bytes_per_s) */
} moon_spawn_opts_t;

/* Spawns an actor; init runs on the calling thread before this returns.
 * opts may be NULL. MOON_ERR_NO_RESOURCE: actor table full; MOON_ERR_EXISTS:
 * name taken; MOON_ERR_NO_MEMORY; or init's error. *addr_p set on success. */
MOON_API moon_status_t moon_spawn(moon_runtime_t *rt, const moon_actor_ops_t *ops, const void *args,
                                  const moon_spawn_opts_t *opts, moon_addr_t *addr_p);

/* Sends msg from self to `to`. MOON_OK moves ownership to the runtime; on any
 * error the caller still owns msg. MOON_ERR_NO_ACTOR: `to` is stale or never
 * existed (nothing is ever delivered to a reused slot); MOON_ERR_UNSUPPORTED:
 * `to` is on another rank and no transport is attached. If `to` is
 * overloaded, self is muted after the current handler until `to` drains. */
MOON_API moon_status_t moon_send(moon_actor_t *self, moon_addr_t to, moon_msg_hdr_t *msg);
/* moon_send that always consumes msg: on error it is released (fire and
 * forget). Returns moon_send's status. */
MOON_API moon_status_t moon_tell(moon_actor_t *self, moon_addr_t to, moon_msg_hdr_t *msg);
/* The same from outside any actor (main thread, transport, timers). Never muted. */
MOON_API moon_status_t moon_runtime_send(moon_runtime_t *rt, moon_addr_t to, moon_msg_hdr_t *msg);

/* Asks an actor to stop (it finishes its current handler first); its monitors
 * see reason. MOON_ERR_NO_ACTOR when already gone. Any thread. */
MOON_API moon_status_t moon_stop(moon_runtime_t *rt, moon_addr_t actor, moon_status_t reason);
/* Waits, from outside any actor, at most timeout_ms for a local actor to be
 * gone (after moon_stop: its last turn may still run, so what its handlers
 * use is freed only after this). MOON_OK when gone, MOON_ERR_TIMED_OUT. */
MOON_API moon_status_t moon_actor_wait_gone(moon_runtime_t *rt, moon_addr_t actor,
                                            uint32_t timeout_ms);
/* Ends self after the current handler: reason MOON_OK is a normal stop, an
 * error is a failure. */
MOON_API void moon_actor_exit(moon_actor_t *self, moon_status_t reason);

/* self watches target: one DOWN {target, reason, ref} when target ends
 * (reason MOON_ERR_NO_ACTOR if it was already gone, a peer status such as
 * MOON_ERR_PEER_LOST if its rank is unreachable). */
MOON_API moon_status_t moon_monitor(moon_actor_t *self, moon_addr_t target, uint64_t ref);
/* Links self and target both ways: when one ends, the other gets EXIT; an
 * abnormal EXIT fails an actor that has no EXIT handler. */
MOON_API moon_status_t moon_link(moon_actor_t *self, moon_addr_t target);
MOON_API moon_status_t moon_unlink(moon_actor_t *self, moon_addr_t target);

MOON_API moon_addr_t     moon_actor_addr(const moon_actor_t *self);
MOON_API void           *moon_actor_state(moon_actor_t *self);
MOON_API moon_runtime_t *moon_actor_runtime(moon_actor_t *self);
MOON_API const char     *moon_actor_name(const moon_actor_t *self);

/* Time, through the runtime only (virtual under the deterministic executor). */
MOON_API uint64_t moon_now(const moon_runtime_t *rt);

/* Starts a timer: after delay_ns, and then every period_ns if non-zero, self
 * gets TIMER {timer, cookie, kind 0}. *timer_p identifies it for cancel. */
MOON_API moon_status_t moon_timer_start(moon_actor_t *self, uint64_t delay_ns, uint64_t period_ns,
                                        uint64_t cookie, uint64_t *timer_p);
/* The same with TIMER's kind set: the module that starts a timer inside
 * another's actor (a KV pool, an engine runner) tells its own apart by kind,
 * so the cookie stays whole. Kind 0 is the actor's own; the kinds of modules
 * that share an actor are listed together where those modules live. */
MOON_API moon_status_t moon_timer_start_kind(moon_actor_t *self, uint32_t kind, uint64_t delay_ns,
                                             uint64_t period_ns, uint64_t cookie,
                                             uint64_t *timer_p);
/* Cancels: no TIMER of it is delivered after this returns. MOON_ERR_NOT_FOUND
 * if it already fired (one-shot), was canceled, or is not self's. */
MOON_API moon_status_t moon_timer_cancel(moon_actor_t *self, uint64_t timer);

/* Name registry. register: MOON_ERR_EXISTS if taken. whereis: MOON_ERR_NOT_FOUND
 * if unknown. Names are dropped when their actor ends. */
MOON_API moon_status_t moon_register(moon_runtime_t *rt, const char *name, moon_addr_t addr);
MOON_API moon_status_t moon_unregister(moon_runtime_t *rt, const char *name);
MOON_API moon_status_t moon_whereis(moon_runtime_t *rt, const char *name, moon_addr_t *addr_p);

typedef struct {
    uint64_t n_processed;      /* messages handled by this incarnation */
    uint64_t n_dropped;        /* no handler, stale timer */
    uint64_t depth_high_water; /* deepest mailbox seen at the end of a turn */
    uint64_t n_muted;          /* times this actor was muted by back-pressure */
    uint32_t overloaded;       /* mailbox above its bound right now */
} moon_actor_stats_t;
/* Counters of a live actor (racy snapshot). MOON_ERR_NO_ACTOR if gone. */
MOON_API moon_status_t moon_actor_stats(moon_runtime_t *rt, moon_addr_t actor,
                                        moon_actor_stats_t *stats_p);

static inline uint32_t moon_addr_rank(moon_addr_t a)
{
    return (uint32_t)(a >> 44);
}

MOON_EXTERN_C_END

#endif /* MOONLET_ACTOR_H */
