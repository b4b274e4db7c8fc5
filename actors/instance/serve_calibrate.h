/* actors/instance/serve_calibrate.h - the start-up timing of an instance's engine that
 * the conductor's predictions come from: prefill at a few lengths and
 * prefixes, decode steps at a few batch sizes and contexts, each the best of
 * a few runs, fitted to the scheduler's cost model (moon_sched_cost_fit_*).
 * Under the COST backend the "timings" are the modeled durations. Runs on
 * the calling thread before the instance serves (it uses the pool, empty
 * then, and leaves it empty). */
#ifndef MOON_ACTORS_SERVE_CALIBRATE_H
#define MOON_ACTORS_SERVE_CALIBRATE_H

#include "moonlet/model.h"
#include "moonlet/sched_cost.h"

/* Fits cost->a0..a2 (prefill_chunk > 0) and cost->d0..d2 (max_batch > 0);
 * other fields untouched. MOON_ERR_NO_RESOURCE: the pool is too small for
 * any sample. */
MOON_API moon_status_t moon_serve_calibrate(moon_engine_t *engine, moon_kv_cache_t *kv,
                                            uint32_t vocab, uint32_t prefill_chunk,
                                            uint32_t max_batch, moon_sched_cost_t *cost);

/* What an instance pays per engine call on top of the call itself: the mean
 * round trip of n empty jobs from an actor (on a threaded runtime of one
 * worker, as a serving rank) to its engine runner's thread and back (the
 * hand-off, the thread's wake-up, the completion message, the owner's
 * turn) into *seconds_p. The simulator adds it to every modeled call.
 * MOON_ERR_INVALID_PARAM (n 0); the runtime's and runner's errors. */
MOON_API moon_status_t moon_serve_calibrate_handoff(uint32_t n, double *seconds_p);

#endif /* MOON_ACTORS_SERVE_CALIBRATE_H */
