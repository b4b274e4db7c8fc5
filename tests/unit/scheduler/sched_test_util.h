/* tests/unit/scheduler/sched_test_util.h - hand-built cluster views for the
 * scheduler tests: simple costs with round numbers, instances by role, and a
 * request builder. Header-only, single-threaded. */
#ifndef MOON_TEST_SCHED_UTIL_H
#define MOON_TEST_SCHED_UTIL_H

#include "moonlet/sched_policy.h"

#include "moon_test.h"

#include <math.h>

#define SCHED_BLOCK_TOKENS 16u

/* prefill 1 ms per token (no fixed or attention term), decode step 10 ms +
 * 1 ms per sequence, transfer 1 ms per block with no latency. */
static inline moon_sched_cost_t sched_test_cost(void)
{
    moon_sched_cost_t c = {0};

    c.a1               = 1e-3;
    c.d0               = 10e-3;
    c.d1               = 1e-3;
    c.block_bytes      = 1000000;
    c.xfer_bytes_per_s = 1e9;
    return c;
}

/* A view of n_prefill prefill instances (indices 0..) then n_decode decode
 * ones, all alive with sched_test_cost(), ids = index + 100; decode instances
 * have max_batch 0 (unbounded) and an unknown KV pool (not checked). */
static inline void sched_test_view(moon_sched_view_t *view, uint32_t n_prefill, uint32_t n_decode)
{
    CU_ASSERT_EQUAL_FATAL(moon_sched_view_init(view, n_prefill + n_decode), MOON_OK);
    for (uint32_t i = 0; i < n_prefill + n_decode; i++) {
        view->inst[i].id    = 100 + i;
        view->inst[i].role  = i < n_prefill ? MOON_SCHED_ROLE_PREFILL : MOON_SCHED_ROLE_DECODE;
        view->inst[i].alive = 1;
        view->inst[i].cost  = sched_test_cost();
    }
}

/* A prompt of n_blocks full blocks (plus 0 tokens), 100 tokens to generate,
 * no SLOs, no cache anywhere, at time 0. */
static inline moon_sched_request_t sched_test_request(uint32_t n_blocks, const uint32_t *local)
{
    moon_sched_request_t r = {0};

    r.tag           = 1;
    r.prompt_tokens = (uint64_t)n_blocks * SCHED_BLOCK_TOKENS;
    r.block_tokens  = SCHED_BLOCK_TOKENS;
    r.n_blocks      = n_blocks;
    r.local_blocks  = local;
    r.max_tokens    = 100;
    return r;
}

static inline moon_sched_policy_t *sched_test_policy(const char *name)
{
    moon_sched_policy_t *p = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_sched_policy_create(name, NULL, &p), MOON_OK);
    return p;
}

#define SCHED_ASSERT_NEAR(_a, _b, _tol) CU_ASSERT(fabs((double)(_a) - (double)(_b)) <= (_tol))

#endif /* MOON_TEST_SCHED_UTIL_H */
