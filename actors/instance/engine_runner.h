/* actors/instance/engine_runner.h - runs a serving instance's forward passes off the
 * actor's turn, so heartbeats, cancels, store renewals and load reports are
 * handled while a long prefill computes.
 *
 * A job is a function the runner calls with the job's argument; its end comes
 * back to the owner actor as SERVE_ENGINE_DONE {job, status, duration_s}.
 *  - threaded: one engine thread per runner (the engine's own pool threads
 *    are its helpers); the owner must not touch what the job uses until the
 *    completion arrives;
 *  - inline (the deterministic executor): the job runs within submit (the
 *    cost-model engine only models it) and its completion comes after the
 *    modeled duration as a timer of the owner (virtual time):
 *    moon_engine_runner_timer() turns that timer back into the completion.
 * One job at a time per runner. */
#ifndef MOON_ACTORS_ENGINE_RUNNER_H
#define MOON_ACTORS_ENGINE_RUNNER_H

#include "moonlet/actor.h"

/* Runs on the engine thread; *duration_s_p: measured or modeled seconds. */
typedef moon_status_t (*moon_engine_job_fn)(void *arg, double *duration_s_p);

typedef struct moon_engine_runner moon_engine_runner_t;

/* Creates a runner for the actor owner of rt; threaded starts the thread,
 * bound to core when core >= 0. MOON_ERR_NO_MEMORY, MOON_ERR_IO (thread
 * creation failed). */
MOON_API moon_status_t moon_engine_runner_create(moon_runtime_t *rt, moon_addr_t owner,
                                                 int threaded, int32_t core,
                                                 moon_engine_runner_t **runner_p);
/* Waits for a job in flight, joins the thread, frees. NULL: no-op. */
MOON_API void moon_engine_runner_destroy(moon_engine_runner_t *runner);
/* Starts fn(arg) as job. self is the owner (inline timers). MOON_OK: one
 * completion follows; MOON_ERR_NO_RESOURCE: a job is already in flight. */
MOON_API moon_status_t moon_engine_runner_submit(moon_engine_runner_t *runner, moon_actor_t *self,
                                                 moon_engine_job_fn fn, void *arg, uint64_t job);
/* 1 when jobs run on the runner's own thread (not inline, in virtual time). */
MOON_API int moon_engine_runner_threaded(const moon_engine_runner_t *runner);
/* 1 while a job is in flight. */
MOON_API int moon_engine_runner_busy(const moon_engine_runner_t *runner);
/* Reads a completion: an ENGINE_DONE message, or an inline runner's TIMER.
 * Returns 1 and fills the outputs when msg is one (the runner is then idle);
 * 0 otherwise. */
MOON_API int moon_engine_runner_done(moon_engine_runner_t *runner, const moon_msg_hdr_t *msg,
                                     uint64_t *job_p, moon_status_t *status_p,
                                     double *duration_s_p);

#endif /* MOON_ACTORS_ENGINE_RUNNER_H */
