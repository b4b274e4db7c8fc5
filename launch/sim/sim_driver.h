/* launch/sim/sim_driver.h - the replay's client actor: submits each trace request
 * to the conductor at its arrival (time-scaled, relative to the driver's
 * start) with timers, and records every TOKEN and DONE it gets back into
 * moon_sim_records_t. Under the deterministic executor this is virtual time;
 * the same actor replays against a real in-process cluster on wall time.
 * Prompt tokens come from the trace's hash ids (moon_trace_fill_tokens:
 * equal ids, equal tokens, so the conductor's block keys see the trace's
 * prefix sharing); max_tokens is the trace's output length and EOS is
 * ignored, so every request streams exactly that many tokens. When the last
 * request ends the driver shuts the runtime down (code 0), or sets *done. */
#ifndef MOON_LAUNCH_SIM_DRIVER_H
#define MOON_LAUNCH_SIM_DRIVER_H

#include "progress.h"
#include "sim_report.h"
#include "trace.h"

#include "moonlet/actor.h"

#include <stdatomic.h>

typedef struct {
    const moon_trace_t *trace;      /* borrowed: outlives the actor */
    double              time_scale; /* > 0 */
    moon_addr_t         conductor;
    uint32_t            first_token_id; /* prompt ids in [first_token_id, vocab_size) */
    uint32_t            vocab_size;
    uint64_t            seed;     /* mixed into the prompt tokens */
    moon_sim_records_t *recs;     /* borrowed, initialised with trace->n_reqs records */
    moon_progress_t    *progress; /* may be NULL */
    uint64_t            start_ns; /* the trace's 0 is this long after the spawn */
    _Atomic int        *done;     /* NULL: shut the runtime down at the end; else set to 1 */
} moon_sim_driver_args_t;

/* Spawn with args (copied at init). init fails with MOON_ERR_INVALID_PARAM on
 * bad args, MOON_ERR_NO_MEMORY. The actor fails (MOON_ERR_CORRUPT, logged)
 * on an event for an unknown request. */
extern const moon_actor_ops_t moon_sim_driver_ops;

#endif /* MOON_LAUNCH_SIM_DRIVER_H */
