/* moonlet/runtime.h - one actor runtime per (simulated) rank: its actor table,
 * its executor (worker threads pinned with hwloc, or the deterministic
 * single-threaded executor with a virtual clock), timers and names.
 * create/destroy from one thread; run from one thread; shutdown from any. */
#ifndef MOONLET_RUNTIME_H
#define MOONLET_RUNTIME_H

#include "moonlet/actor.h"

MOON_EXTERN_C_BEGIN

/* Called for every message dispatched (before its handler), on the dispatching
 * thread: the deterministic executor's trace, debugging. */
typedef void (*moon_trace_fn)(void *arg, uint64_t now_ns, const moon_msg_hdr_t *msg,
                              moon_addr_t dst);

typedef struct {
    uint32_t      n_workers;     /* 0: one per core (hwloc) */
    int           pin_workers;   /* bind worker i to core i (hwloc) */
    uint32_t      batch;         /* max messages per actor turn (default 100) */
    uint32_t      mailbox_bound; /* depth that marks an actor overloaded (default 1024) */
    uint32_t      max_actors;    /* actor table size (default 1 << 20) */
    uint32_t      rank;          /* this runtime's rank in addresses */
    int           deterministic; /* 1: seeded single-thread executor, virtual clock */
    uint64_t      seed;          /* deterministic executor's seed */
    uint64_t      sim_max_ns;    /* deterministic: stop when virtual time passes this (0: never) */
    moon_trace_fn trace;         /* optional */
    void         *trace_arg;
    /* deterministic: a message from an actor to one on another sim_node
     * (moon_spawn_opts_t) leaves once the sender's earlier ones have (each
     * actor sends on a lane of its own), takes its bytes (header and spans)
     * / sim_bytes_per_s on that lane (0: size not priced; else >= 1) and arrives
     * sim_latency_ns after it left (0: at once). Idle lane: latency +
     * bytes / rate after the send. */
    uint64_t sim_latency_ns;
    double   sim_bytes_per_s;
    /* deterministic: fault injection on the simulated network (NULL: none).
     * Called for every message from an actor on node `from` to one on node
     * `to` before it is held, in the executor's deterministic order. Returns
     * 1 to lose it (as a broken connection would), 0 to deliver it with the
     * sender's lane busy until now + *hold_ns (0 on entry: it and the
     * sender's later messages leave no earlier, as from a slow or paused
     * sender) and arriving no earlier than *not_before_ns (0 on entry: a
     * paused receiver). Both keep each pair's messages in order. */
    int (*sim_fault)(void *arg, uint32_t from, uint32_t to, uint64_t now_ns, uint64_t *hold_ns,
                     uint64_t *not_before_ns);
    void *sim_fault_arg;
} moon_runtime_config_t;

MOON_API void moon_runtime_config_default(moon_runtime_config_t *cfg);

/* Creates a runtime (no thread started yet). Registers the runtime's message
 * types. MOON_ERR_INVALID_PARAM for a bad config. */
MOON_API moon_status_t moon_runtime_create(const moon_runtime_config_t *cfg, moon_runtime_t **rt_p);
/* Stops workers if running, ends every actor (fini runs), frees everything. */
MOON_API void moon_runtime_destroy(moon_runtime_t *rt);

/* Runs actors until moon_runtime_shutdown() or until no actor is alive.
 * Threaded: starts the workers and blocks; deterministic: runs the seeded
 * loop on the calling thread (also stopping when nothing is runnable and no
 * timer is pending). Returns the shutdown code (0 when actors ran out). */
MOON_API int moon_runtime_run(moon_runtime_t *rt);
/* Threaded only: start workers and return; moon_runtime_wait blocks like run. */
MOON_API moon_status_t moon_runtime_start(moon_runtime_t *rt);
MOON_API int           moon_runtime_wait(moon_runtime_t *rt);
/* Makes run/wait return with code; any thread, also from handlers. */
MOON_API void moon_runtime_shutdown(moon_runtime_t *rt, int code);

/* Deterministic only: runs at most n dispatches (0: until idle); returns how
 * many ran. Lets tests step a schedule. */
MOON_API uint64_t moon_runtime_step(moon_runtime_t *rt, uint64_t n);

typedef struct {
    uint64_t n_actors_alive;
    uint64_t n_dead_letters; /* messages for actors that had ended */
    uint64_t n_dispatched;   /* messages handled by each slot's current incarnation (racy) */
    uint64_t n_timers;       /* timers started and not yet delivered or canceled */
    uint32_t n_workers;
} moon_runtime_stats_t;
MOON_API void moon_runtime_stats(moon_runtime_t *rt, moon_runtime_stats_t *stats_p);

MOON_EXTERN_C_END

#endif /* MOONLET_RUNTIME_H */
