/* moonlet/sched_cost.h - the conductor's cost predictor: how long an engine
 * takes to prefill n new tokens after a cached prefix of p, how long one decode
 * step of a batch takes, and how long moving KV blocks takes; and the
 * least-squares fits that derive the coefficients from timed samples (the
 * conductor times the loaded engine at start-up). Pure functions on plain
 * structs: no state, no threads, no allocation; safe from any thread. */
#ifndef MOONLET_SCHED_COST_H
#define MOONLET_SCHED_COST_H

#include "moonlet/status.h"

MOON_EXTERN_C_BEGIN

/* One engine's costs, all in seconds. The forms follow Mooncake's Eq. 1,
 * flops(x) = l (4 x^2 d + 22 x d^2): prefilling tokens p..p+n costs the
 * difference flops(p + n) - flops(p), linear in n plus an attention term in
 * (p + n)^2 - p^2:
 *   prefill_s(n, p) = a0 + a1 n + a2 ((p + n)^2 - p^2)        (p = 0: a0 + a1 n + a2 n^2)
 *   step_s(b, ctx)  = d0 + d1 b + d2 ctx    (b sequences, ctx = their summed context tokens)
 *   transfer_s(k)   = xfer_latency_s + k block_bytes / xfer_bytes_per_s   (k > 0; 0 for k = 0)
 * a0..a2 and d0..d2 match the serving HELLO message's fields. Every field must
 * be finite and >= 0; xfer_bytes_per_s = 0 means "no link": any transfer of
 * k > 0 blocks is infinitely slow (a policy then never plans one). */
typedef struct {
    double   a0, a1, a2;       /* prefill: s, s per token, s per token^2 */
    double   d0, d1, d2;       /* decode step: s, s per sequence, s per context token */
    double   xfer_latency_s;   /* per transfer (one request's blocks move as one) */
    double   xfer_bytes_per_s; /* the instance's link into the KV pool */
    uint64_t block_bytes;      /* KV bytes of one block (all layers) */
} moon_sched_cost_t;

/* Predicted seconds to prefill n_new tokens after n_prefix cached ones.
 * n_new = 0 gives 0. NULL cost gives 0. */
MOON_API double moon_sched_cost_prefill_s(const moon_sched_cost_t *cost, uint64_t n_new,
                                          uint64_t n_prefix);

/* Predicted seconds of one decode step over batch sequences holding ctx_tokens
 * context tokens in all. batch = 0 gives 0. NULL cost gives 0. */
MOON_API double moon_sched_cost_step_s(const moon_sched_cost_t *cost, uint32_t batch,
                                       uint64_t ctx_tokens);

/* Predicted seconds to move n_blocks KV blocks into this instance: 0 for
 * n_blocks = 0, HUGE_VAL when the cost has no link (xfer_bytes_per_s = 0).
 * NULL cost gives 0. */
MOON_API double moon_sched_cost_transfer_s(const moon_sched_cost_t *cost, uint32_t n_blocks);

/* One timed prefill: n_new tokens computed after n_prefix cached ones took
 * seconds. */
typedef struct {
    uint64_t n_new;
    uint64_t n_prefix;
    double   seconds;
} moon_sched_prefill_sample_t;

/* One timed decode step: batch sequences with ctx_tokens context in all. */
typedef struct {
    uint32_t batch;
    uint64_t ctx_tokens;
    double   seconds;
} moon_sched_decode_sample_t;

/* Fits cost->a0, a1, a2 to n_samples timed prefills (borrowed) by
 * non-negative least squares on the relative error (each sample weighted by
 * 1/seconds, so short and long prompts count alike). Robust to few samples:
 * every subset of the three terms that the samples can determine is solved,
 * the subsets with a negative coefficient are dropped, and the one with the
 * smallest residual wins (ties: fewer terms, then a1 before a0 before a2);
 * terms left out are 0. One sample therefore gives a1 = seconds / n_new; two
 * at different lengths give a0 + a1 n. Writes only a0..a2, and only on
 * success; the other fields are left as they are.
 * MOON_ERR_INVALID_PARAM (logged, nothing changed): NULL, n_samples = 0, a
 * sample with n_new = 0 or seconds not finite and > 0. */
MOON_API moon_status_t moon_sched_cost_fit_prefill(const moon_sched_prefill_sample_t *samples,
                                                   uint32_t n_samples, moon_sched_cost_t *cost);

/* The same for cost->d0, d1, d2 from timed decode steps (samples with
 * batch >= 1); the tie order is d0 before d1 before d2, then {d0, d1},
 * {d0, d2}, {d1, d2}, all (one sample: d0 = seconds). When ctx grows with
 * batch in lockstep (ctx = L batch) the two terms cannot be told apart and
 * the fit keeps a pair (d0 + d1 b). Writes only d0..d2, only on success.
 * MOON_ERR_INVALID_PARAM (logged, nothing changed): NULL, n_samples = 0, a
 * sample with batch = 0 or seconds not finite and > 0. */
MOON_API moon_status_t moon_sched_cost_fit_decode(const moon_sched_decode_sample_t *samples,
                                                  uint32_t n_samples, moon_sched_cost_t *cost);

MOON_EXTERN_C_END

#endif /* MOONLET_SCHED_COST_H */
