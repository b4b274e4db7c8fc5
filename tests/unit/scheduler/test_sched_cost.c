/* tests/unit/scheduler/test_sched_cost.c - the cost predictor's forms and the
 * fits: known coefficients recovered from synthetic samples, fewer terms from
 * few samples, no negative coefficient, bad input refused. */
#include "moonlet/sched_cost.h"

#include "sched_test_util.h"

#include <string.h>

static void test_prefill_form_has_the_prefix_attention_term(void)
{
    moon_sched_cost_t c = {.a0 = 0.5, .a1 = 2.0, .a2 = 3.0};

    SCHED_ASSERT_NEAR(moon_sched_cost_prefill_s(&c, 10, 0), 0.5 + 20.0 + 300.0, 1e-9);
    /* (p + n)^2 - p^2 = 15^2 - 5^2 = 200 */
    SCHED_ASSERT_NEAR(moon_sched_cost_prefill_s(&c, 10, 5), 0.5 + 20.0 + 600.0, 1e-9);
    CU_ASSERT_EQUAL(moon_sched_cost_prefill_s(&c, 0, 5), 0.0);
    CU_ASSERT_EQUAL(moon_sched_cost_prefill_s(NULL, 10, 5), 0.0);
}

static void test_step_and_transfer_forms(void)
{
    moon_sched_cost_t c = {.d0               = 1.0,
                           .d1               = 0.5,
                           .d2               = 0.25,
                           .xfer_latency_s   = 0.1,
                           .xfer_bytes_per_s = 100.0,
                           .block_bytes      = 50};

    SCHED_ASSERT_NEAR(moon_sched_cost_step_s(&c, 4, 8), 1.0 + 2.0 + 2.0, 1e-12);
    CU_ASSERT_EQUAL(moon_sched_cost_step_s(&c, 0, 8), 0.0);
    SCHED_ASSERT_NEAR(moon_sched_cost_transfer_s(&c, 3), 0.1 + 1.5, 1e-12);
    CU_ASSERT_EQUAL(moon_sched_cost_transfer_s(&c, 0), 0.0);
    c.xfer_bytes_per_s = 0.0;
    CU_ASSERT(isinf(moon_sched_cost_transfer_s(&c, 1)));
}

static void test_fit_prefill_recovers_three_terms(void)
{
    moon_sched_cost_t           truth = {.a0 = 2e-3, .a1 = 5e-5, .a2 = 3e-8};
    moon_sched_cost_t           fit   = {.d0 = 7.0, .block_bytes = 9};
    moon_sched_prefill_sample_t s[6];
    uint64_t                    n[6] = {16, 64, 128, 256, 384, 512}, p[6] = {0, 0, 64, 0, 128, 0};

    for (int i = 0; i < 6; i++) {
        s[i] = (moon_sched_prefill_sample_t){n[i], p[i],
                                             moon_sched_cost_prefill_s(&truth, n[i], p[i])};
    }
    CU_ASSERT_EQUAL_FATAL(moon_sched_cost_fit_prefill(s, 6, &fit), MOON_OK);
    SCHED_ASSERT_NEAR(fit.a0, truth.a0, 1e-6 * truth.a0);
    SCHED_ASSERT_NEAR(fit.a1, truth.a1, 1e-6 * truth.a1);
    SCHED_ASSERT_NEAR(fit.a2, truth.a2, 1e-6 * truth.a2);
    /* the other fields are left alone */
    CU_ASSERT_EQUAL(fit.d0, 7.0);
    CU_ASSERT_EQUAL(fit.block_bytes, 9);
}

static void test_fit_prefill_tolerates_noise(void)
{
    moon_sched_cost_t           truth = {.a0 = 1e-3, .a1 = 1e-4, .a2 = 1e-7}, fit = {0};
    moon_sched_prefill_sample_t s[40];
    uint64_t                    rng = 7;

    for (int i = 0; i < 40; i++) {
        uint64_t n   = 8 + (uint64_t)i * 12;
        double   err = 1.0 + 0.01 * ((double)(moon_test_rand(&rng) % 2001) / 1000.0 - 1.0);
        s[i] = (moon_sched_prefill_sample_t){n, 0, moon_sched_cost_prefill_s(&truth, n, 0) * err};
    }
    CU_ASSERT_EQUAL_FATAL(moon_sched_cost_fit_prefill(s, 40, &fit), MOON_OK);
    /* +-1 % noise: predictions within 2 % over the sampled range */
    for (uint64_t n = 8; n <= 480; n += 59) {
        double want = moon_sched_cost_prefill_s(&truth, n, 0);
        CU_ASSERT(fabs(moon_sched_cost_prefill_s(&fit, n, 0) - want) <= 0.02 * want);
    }
}

static void test_fit_prefill_falls_back_to_fewer_terms(void)
{
    moon_sched_cost_t           fit    = {.a0 = 9, .a1 = 9, .a2 = 9};
    moon_sched_prefill_sample_t one    = {100, 0, 0.5};
    moon_sched_prefill_sample_t two[2] = {{100, 0, 0.03}, {300, 0, 0.07}}; /* 0.01 + 2e-4 n */

    CU_ASSERT_EQUAL_FATAL(moon_sched_cost_fit_prefill(&one, 1, &fit), MOON_OK);
    CU_ASSERT_EQUAL(fit.a0, 0.0);
    SCHED_ASSERT_NEAR(fit.a1, 0.005, 1e-12);
    CU_ASSERT_EQUAL(fit.a2, 0.0);

    CU_ASSERT_EQUAL_FATAL(moon_sched_cost_fit_prefill(two, 2, &fit), MOON_OK);
    SCHED_ASSERT_NEAR(fit.a0, 0.01, 1e-9);
    SCHED_ASSERT_NEAR(fit.a1, 2e-4, 1e-12);
    CU_ASSERT_EQUAL(fit.a2, 0.0);
}

static void test_fit_never_returns_a_negative_coefficient(void)
{
    /* a concave curve: unconstrained least squares would make a2 < 0 */
    moon_sched_prefill_sample_t s[4] = {{100, 0, 1.0}, {200, 0, 1.8}, {300, 0, 2.4}, {400, 0, 2.8}};
    moon_sched_cost_t           fit  = {0};

    CU_ASSERT_EQUAL_FATAL(moon_sched_cost_fit_prefill(s, 4, &fit), MOON_OK);
    CU_ASSERT(fit.a0 >= 0.0 && fit.a1 >= 0.0 && fit.a2 >= 0.0);
    CU_ASSERT(fit.a0 > 0.0 || fit.a1 > 0.0);
    CU_ASSERT_EQUAL(fit.a2, 0.0);
}

static void test_fit_decode_recovers_three_terms(void)
{
    moon_sched_cost_t          truth = {.d0 = 8e-3, .d1 = 2e-4, .d2 = 1e-6}, fit = {0};
    moon_sched_decode_sample_t s[5];
    uint32_t                   b[5]   = {1, 2, 4, 8, 16};
    uint64_t                   ctx[5] = {100, 900, 400, 3000, 2000};

    for (int i = 0; i < 5; i++) {
        s[i] = (moon_sched_decode_sample_t){b[i], ctx[i],
                                            moon_sched_cost_step_s(&truth, b[i], ctx[i])};
    }
    CU_ASSERT_EQUAL_FATAL(moon_sched_cost_fit_decode(s, 5, &fit), MOON_OK);
    SCHED_ASSERT_NEAR(fit.d0, truth.d0, 1e-6 * truth.d0);
    SCHED_ASSERT_NEAR(fit.d1, truth.d1, 1e-6 * truth.d1);
    SCHED_ASSERT_NEAR(fit.d2, truth.d2, 1e-6 * truth.d2);
}

static void test_fit_decode_with_ctx_in_lockstep_keeps_a_pair(void)
{
    /* ctx = 64 b: the batch and context terms cannot be told apart */
    moon_sched_decode_sample_t s[4];
    moon_sched_cost_t          fit = {0};

    for (uint32_t i = 0; i < 4; i++) {
        uint32_t b = 1u << i;
        s[i]       = (moon_sched_decode_sample_t){b, 64u * b, 0.01 + 0.002 * b};
    }
    CU_ASSERT_EQUAL_FATAL(moon_sched_cost_fit_decode(s, 4, &fit), MOON_OK);
    SCHED_ASSERT_NEAR(fit.d0, 0.01, 1e-9);
    SCHED_ASSERT_NEAR(fit.d1, 0.002, 1e-9);
    CU_ASSERT_EQUAL(fit.d2, 0.0);
    /* one sample: the fixed cost alone */
    CU_ASSERT_EQUAL_FATAL(moon_sched_cost_fit_decode(s, 1, &fit), MOON_OK);
    SCHED_ASSERT_NEAR(fit.d0, 0.012, 1e-12);
    CU_ASSERT_EQUAL(fit.d1, 0.0);
}

static void test_fit_bad_input_changes_nothing(void)
{
    moon_sched_prefill_sample_t p[2] = {{10, 0, 0.1}, {20, 0, 0.2}};
    moon_sched_decode_sample_t  d[2] = {{1, 0, 0.1}, {2, 0, 0.2}};
    moon_sched_cost_t           fit  = {.a0 = 1, .a1 = 2, .a2 = 3, .d0 = 4, .d1 = 5, .d2 = 6};
    moon_sched_cost_t           keep = fit;

    CU_ASSERT_EQUAL(moon_sched_cost_fit_prefill(NULL, 2, &fit), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_cost_fit_prefill(p, 0, &fit), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_cost_fit_prefill(p, 2, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_cost_fit_decode(NULL, 2, &fit), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_cost_fit_decode(d, 0, &fit), MOON_ERR_INVALID_PARAM);
    p[1].seconds = 0.0;
    CU_ASSERT_EQUAL(moon_sched_cost_fit_prefill(p, 2, &fit), MOON_ERR_INVALID_PARAM);
    p[1].seconds = NAN;
    CU_ASSERT_EQUAL(moon_sched_cost_fit_prefill(p, 2, &fit), MOON_ERR_INVALID_PARAM);
    p[1] = (moon_sched_prefill_sample_t){0, 0, 0.2};
    CU_ASSERT_EQUAL(moon_sched_cost_fit_prefill(p, 2, &fit), MOON_ERR_INVALID_PARAM);
    d[0].batch = 0;
    CU_ASSERT_EQUAL(moon_sched_cost_fit_decode(d, 2, &fit), MOON_ERR_INVALID_PARAM);
    d[0] = (moon_sched_decode_sample_t){1, 0, -1.0};
    CU_ASSERT_EQUAL(moon_sched_cost_fit_decode(d, 2, &fit), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(memcmp(&fit, &keep, sizeof(fit)), 0);
}

MOON_TEST_MAIN("sched_cost", NULL, NULL, test_prefill_form_has_the_prefix_attention_term,
               test_step_and_transfer_forms, test_fit_prefill_recovers_three_terms,
               test_fit_prefill_tolerates_noise, test_fit_prefill_falls_back_to_fewer_terms,
               test_fit_never_returns_a_negative_coefficient, test_fit_decode_recovers_three_terms,
               test_fit_decode_with_ctx_in_lockstep_keeps_a_pair,
               test_fit_bad_input_changes_nothing)
