/* tests/unit/scheduler/toy_cluster.h - a small event simulation in virtual
 * time that drives the scheduler library as the conductor would (decide,
 * commit, release, a load report after every decode step) against a toy
 * truth: FIFO prefill instances with their own prefix caches and a global
 * store, continuous-batching decode instances. Its costs are the predictor's
 * own, so predictions err only where the policy's view does. Seeded and
 * deterministic; single-threaded. Not the simulator of issue 16: a check that
 * the policies behave as their docs claim. */
#ifndef MOON_TEST_TOY_CLUSTER_H
#define MOON_TEST_TOY_CLUSTER_H

#include "moonlet/sched_policy.h"

#define TOY_MAX_INST 16
#define TOY_MAX_REQS 3000
#define TOY_MAX_BATCH 128
#define TOY_MAX_GAPS 256
#define TOY_SESSIONS 400

typedef struct {
    uint32_t          n_prefill, n_decode;
    moon_sched_cost_t cost;         /* every instance's */
    uint32_t          block_tokens; /* tokens per block */
    uint32_t          max_batch;
    uint32_t          n_reqs;
    double            rate;                            /* Poisson arrivals per second */
    uint32_t          new_blocks_min, new_blocks_span; /* per turn of a conversation */
    uint32_t          max_prompt_blocks;               /* a conversation restarts beyond */
    uint32_t          out_min, out_span;               /* tokens to generate */
    double            ttft_slo_s, tbt_slo_s;
    uint64_t          seed;
} toy_config_t;

typedef struct {
    uint32_t admitted, rejected, met; /* met: both SLOs */
    uint32_t ttft_miss, tbt_miss;
    double   goodput_rps;     /* met / span of arrivals */
    double   ttft_mean_s;     /* over admitted requests */
    uint64_t computed_tokens; /* prefill tokens computed by admitted requests */
    uint64_t fetched_blocks;
} toy_result_t;

/* Runs policy (by name, with early rejection as given) over cfg's workload.
 * Returns 0 on success, -1 when a scheduler call failed. */
int toy_cluster_run(const toy_config_t *cfg, const char *policy, int early_reject,
                    toy_result_t *result);

#endif /* MOON_TEST_TOY_CLUSTER_H */
