/* launch/replay/calibrate_service.h - the in-service step of `moonlet calibrate`:
 * the engine's start-up timing (best of a few warm calls on an idle
 * instance) predicts a serving instance too well. In service a call finds
 * colder caches and the other instances' threads on the same cores, its
 * completion waits for the actors' worker, and every token takes the
 * same way out. So a trace slice is replayed on a real in-process cluster
 * of the same actors (moon_replay_real_run, wall clock; a few times, the
 * records pooled), and the profile is refitted from what its requests took:
 *   - network.latency_s: half the median of what the two ends of a
 *     request's path add to its TTFT (the SUBMIT to the conductor, the first
 *     TOKEN to the client): one message between actors of this process;
 *   - prefill: a1, a2 and fitted request_s from each request's service at
 *     its prefill instance (start to the decode taking the first token: the
 *     engine calls and everything around them: the store's round trips, a
 *     core to run on), less what the simulator charges there anyway (the
 *     start-up a0 and the hand-off per chunk, the hand-over message), one
 *     sample per bin of similar lengths (their means), fitted by
 *     moon_sched_cost_fit_prefill, whose a0 is then the constant per
 *     request: the simulated prefill instance charges it with a request's
 *     first chunk; a0 stays the start-up one per call;
 *   - fitted step_gap_s: the median TBT the real cluster streamed minus the
 *     simulator's on the same slice with the refitted profile (a few
 *     rounds: a longer step changes batching, so the gap is re-measured).
 * The decode coefficients stay the engine's; the step gap carries what
 * service adds to them. */
#ifndef MOON_LAUNCH_CALIBRATE_SERVICE_H
#define MOON_LAUNCH_CALIBRATE_SERVICE_H

#include "profile.h"
#include "trace.h"

typedef struct {
    const moon_trace_t *trace;      /* the slice replayed (borrowed) */
    const char         *model_path; /* the GGUF the real instances serve */
    const char         *policy;     /* the conductor's (NULL: the default) */
    uint32_t            nodes_prefill, nodes_decode, block_tokens, threads;
    uint32_t            real_runs; /* real replays of the slice, pooled (0: 1) */
    double              time_scale;
    uint64_t            seed;
} moon_cal_service_config_t;

/* What the step measured, real beside the simulator's replay of the same
 * slice with the profile as refitted (medians over the requests that
 * finished; TBT over those of two tokens or more). */
typedef struct {
    uint32_t n_requests; /* finished, over the real runs */
    double   real_ttft_median_s, sim_ttft_median_s;
    double   real_tbt_median_s, sim_tbt_median_s;
} moon_cal_service_report_t;

/* Replays cfg's slice on a real cluster and refits *profile (fitted already
 * by the engine's timing: fit.enabled) as above; report_p (may be NULL) gets
 * the figures. *profile is changed on success only.
 * MOON_ERR_INVALID_PARAM: bad config or no fit; MOON_ERR_NO_RESOURCE: too
 * few requests finished to fit (logged); the runs' errors. */
moon_status_t moon_calibrate_service(const moon_cal_service_config_t *cfg, moon_profile_t *profile,
                                     moon_cal_service_report_t *report_p);

#endif /* MOON_LAUNCH_CALIBRATE_SERVICE_H */
