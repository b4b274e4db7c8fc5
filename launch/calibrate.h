/* launch/calibrate.h - calibration: time an engine on its model (prefill at a
 * few lengths after a few prefixes, decode steps at a few batches and
 * contexts) and fit the cost model's coefficients (the scheduler's
 * least-squares fits, moonlet/sched_cost.h), so a profile can carry a
 * "fitted" section for this machine (profile.h) and the simulator predicts
 * what the real engine does. Single-threaded; allocates a KV cache of the
 * model for the run. */
#ifndef MOON_LAUNCH_CALIBRATE_H
#define MOON_LAUNCH_CALIBRATE_H

#include "moonlet/model.h"
#include "moonlet/status.h"

#include <stdio.h>

typedef struct {
    uint32_t repeats;   /* timings per point, the median kept (0: 3) */
    uint32_t max_batch; /* largest decode batch timed (0: 16) */
    FILE    *samples;   /* may be NULL: one JSON line per timed point */
} moon_calibrate_opts_t;

/* Times engine (created on model by the caller, at least 4 * max_batch
 * sequences allowed by the KV cache made here) and fits *fit_p (enabled).
 * Prefill points: n new tokens in {ctx/16, ctx/8, ctx/4, ctx/2} (at least 1;
 * in calls of at most the engine's chunk, as an instance serves) after
 * prefixes 0 and n; decode points: batches
 * 1, 2, 4, ... max_batch at contexts ctx/8 and ctx/2. MOON_ERR_INVALID_PARAM,
 * MOON_ERR_NO_MEMORY, or an engine call's status. */
moon_status_t moon_calibrate_engine(const moon_model_t *model, moon_engine_t *engine,
                                    const moon_engine_config_t  *ecfg,
                                    const moon_calibrate_opts_t *opts, moon_cost_fit_t *fit_p);

#endif /* MOON_LAUNCH_CALIBRATE_H */
