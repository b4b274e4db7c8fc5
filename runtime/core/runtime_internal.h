/* runtime/core/runtime_internal.h - the actor slot, the runtime and the executor
 * interface shared by runtime/ sources. Private to runtime/.
 *
 * A slot is the schedulable unit: its mailbox outlives incarnations, and each
 * incarnation has its own generation. Messages carry the address they were
 * sent to, so one sent to an older incarnation is dropped at dispatch, never
 * delivered to the new one. Slots are never freed while the runtime lives. */
#ifndef MOON_RUNTIME_INTERNAL_H
#define MOON_RUNTIME_INTERNAL_H

#include "mailbox.h"

#include "moonlet/runtime.h"
#include "moonlet/transport.h"
#include "moonlet/vec.h"

#include <pthread.h>

#define ADDR_RANK_BITS 20
#define ADDR_SLOT_BITS 24
#define ADDR_GEN_BITS 20
#define ADDR_GEN_MASK ((1u << ADDR_GEN_BITS) - 1)
#define ADDR_SLOT_MASK ((1u << ADDR_SLOT_BITS) - 1)

static inline moon_addr_t addr_make(uint32_t rank, uint32_t slot, uint32_t gen)
{
    return ((uint64_t)rank << (ADDR_SLOT_BITS + ADDR_GEN_BITS)) |
           ((uint64_t)slot << ADDR_GEN_BITS) | (gen & ADDR_GEN_MASK);
}
static inline uint32_t addr_slot(moon_addr_t a)
{
    return (uint32_t)(a >> ADDR_GEN_BITS) & ADDR_SLOT_MASK;
}
static inline uint32_t addr_gen(moon_addr_t a)
{
    return (uint32_t)a & ADDR_GEN_MASK;
}

typedef struct {
    moon_addr_t watcher;
    uint64_t    ref;
} monitor_t;

struct moon_actor {
    moon_mailbox_t mbox;

    /* read by senders */
    alignas(MOON_CACHE_LINE) _Atomic uint32_t gen; /* live incarnation; bumped at its end */
    _Atomic uint8_t alive;
    _Atomic uint8_t overloaded;
    uint32_t        index;
    moon_runtime_t *rt;

    /* owned by the running turn */
    alignas(MOON_CACHE_LINE) const moon_actor_ops_t *ops;
    void              *state;
    moon_addr_t        addr;
    uint32_t           flags;            /* MOON_SPAWN_* */
    uint32_t           sim_node;         /* deterministic executor: its simulated node */
    uint64_t           sim_lane_free_ns; /* its messages to other nodes leave from then on */
    uint8_t            exiting;          /* exit requested during this turn */
    moon_status_t      exit_reason;
    struct moon_actor *mute_on; /* overloaded receiver hit during this turn */
    uint64_t           send_seq;
    uint32_t           turn_sends; /* messages sent during this turn */
    struct moon_actor *bp_target;  /* last receiver, for sender-side pressure checks */
    uint64_t           bp_sent, bp_seen, bp_excess; /* sends since the last check, its
                                                     * n_processed then, our backlog at it (a lower bound) */
    moon_vec_t         links;                       /* moon_addr_t */
    moon_vec_t         monitors;                    /* monitor_t */
    char              *name;                        /* registered name, owned */
    _Atomic uint32_t   n_extra_names; /* names given with moon_register (dropped at the end) */
    struct moon_actor *next_sched;    /* executor's intrusive lists */

    /* back-pressure: actors muted on this one, under mute_lock */
    pthread_mutex_t    mute_lock;
    struct moon_actor *muted_head;
    struct moon_actor *mute_next;

    /* counters: written by the turn, read racily by moon_actor_stats */
    _Atomic uint64_t n_processed, n_dropped, depth_hwm, n_muted;
};

/* How actors get run: the threaded scheduler or the deterministic executor.
 * Chosen once at create (STYLE §12: polymorphism at setup time). */
typedef struct {
    /* a is now runnable (its mailbox was claimed); any thread */
    void (*schedule)(moon_runtime_t *rt, moon_actor_t *a);
    uint64_t (*now)(const moon_runtime_t *rt);
    /* the earliest timer deadline may have moved earlier */
    void (*timers_changed)(moon_runtime_t *rt);
} moon_exec_ops_t;

typedef struct moon_timers  moon_timers_t;
typedef struct moon_workers moon_workers_t;
typedef struct moon_detexec moon_detexec_t;
typedef struct moon_names   moon_names_t;

struct moon_runtime {
    moon_runtime_config_t       cfg;
    const moon_exec_ops_t      *exec;
    moon_workers_t             *workers; /* threaded executor, or NULL */
    moon_detexec_t             *detexec; /* deterministic executor, or NULL */
    moon_timers_t              *timers;
    moon_names_t               *names;
    const moon_transport_ops_t *transport; /* NULL: single rank */
    void                       *transport_ctx;
    _Atomic(moon_idle_fn)       idle_hook; /* see moon_runtime_set_idle_hook */
    void *_Atomic               idle_ctx;

    moon_actor_t   **slots;      /* cfg.max_actors entries, created on first use */
    pthread_mutex_t  slot_lock;  /* free ring and slot creation */
    uint32_t        *free_slots; /* FIFO ring of cfg.max_actors: oldest free slot first */
    uint32_t         free_head, n_free;
    _Atomic uint32_t n_slots_used; /* slots 1..n_slots_used exist (release on publish) */

    _Atomic uint64_t n_alive, n_dead_letters;

    pthread_mutex_t done_lock; /* run/wait sleep here */
    pthread_cond_t  done_cond;
    _Atomic int     shutdown_requested;
    int             shutdown_code;
};

/* actor.c */
moon_actor_t *moon_rt_lookup(moon_runtime_t *rt, moon_addr_t addr); /* live incarnation or NULL */
/* 0 outside a message handler; inside one, a number that differs for every
 * handler call on this thread (a transport uses it to send the first message
 * of a handler at once and batch the rest). */
uint64_t moon_rt_dispatch_seq(void);
/* Runs up to `budget` messages of a; returns 1 if a must be rescheduled. */
int moon_actor_run_turn(moon_actor_t *a, uint32_t budget);
/* Ends every live actor (runtime teardown, no executor running). */
void     moon_actors_destroy_all(moon_runtime_t *rt);
void     moon_rt_note_maybe_done(moon_runtime_t *rt);
uint64_t moon_actors_processed(moon_runtime_t *rt); /* sum over actors, racy */

/* workers.c / det_exec.c */
moon_status_t                moon_workers_create(moon_runtime_t *rt, moon_workers_t **sched_p);
moon_status_t                moon_workers_start(moon_workers_t *s);
void                         moon_workers_stop(moon_workers_t *s);
void                         moon_workers_destroy(moon_workers_t *s);
uint32_t                     moon_workers_n_workers(const moon_workers_t *s);
extern const moon_exec_ops_t moon_workers_exec_ops;

moon_status_t                moon_detexec_create(moon_runtime_t *rt, moon_detexec_t **sim_p);
void                         moon_detexec_destroy(moon_detexec_t *sim);
uint64_t                     moon_detexec_run(moon_detexec_t *sim, uint64_t max_dispatches);
extern const moon_exec_ops_t moon_detexec_exec_ops;

/* Holds msg (its env's dst set) from sender to another node for its modeled trip: queued on the
 * sender's lane behind its earlier messages, bytes / sim_bytes_per_s on it,
 * then sim_latency_ns (moon_runtime_config_t). */
moon_status_t moon_detexec_send_remote(moon_detexec_t *sim, moon_actor_t *sender, uint32_t to_node,
                                       moon_msg_hdr_t *msg);

/* timer.c: a deadline heap; threaded mode runs it on its own thread,
 * deterministic mode polls it from the executor loop. */
moon_status_t moon_timers_create(moon_runtime_t *rt, moon_timers_t **t_p);
void          moon_timers_destroy(moon_timers_t *t);
moon_status_t moon_timers_start_thread(moon_timers_t *t);
void          moon_timers_stop_thread(moon_timers_t *t);
/* Fires every timer due at or before now; returns the next deadline or UINT64_MAX. */
uint64_t moon_timers_fire_due(moon_timers_t *t, uint64_t now);
/* Dispatch-time check: 1 if this TIMER message is still valid for delivery. */
int moon_timers_accept(moon_timers_t *t, const moon_sys_timer_t *m);
/* Timers allocated (armed, or fired and not yet delivered). */
uint64_t moon_timers_count(moon_timers_t *t);
/* Wakes the timer thread to look at the heap again. */
void moon_timers_kick(moon_timers_t *t);

/* names.c */
/* FNV-1a of a name (the runtime's and the distributed registry's buckets). */
uint32_t      moon_name_hash(const char *s);
moon_status_t moon_names_create(moon_names_t **n_p);
void          moon_names_destroy(moon_names_t *n);
void          moon_names_drop_addr(moon_names_t *n, const char *name, moon_addr_t addr);
/* Drops every name that maps to addr (scans the table: called only for actors
 * that registered names with moon_register). */
void moon_names_drop_all(moon_names_t *n, moon_addr_t addr);
/* actor.c: a name for a local actor was registered; it is dropped with it. */
void moon_names_note_extra(moon_runtime_t *rt, const char *name, moon_addr_t addr);

#endif /* MOON_RUNTIME_INTERNAL_H */
