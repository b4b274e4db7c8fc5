/* tests/unit/launch/test_bench_stats.c - `moonlet bench` metrics on
 * hand-made timelines: percentiles, TPOT/ITL definitions, throughput,
 * goodput and SLO attainment, peak concurrency. */
#include "loadgen_stats.h"

#include "moon_test.h"

#include <math.h>
#include <string.h>

#define NEAR(_a, _b) CU_ASSERT(fabs((double)(_a) - (_b)) < 1e-9 * (1 + fabs((double)(_b))))

static void test_percentile_interpolates_like_numpy(void)
{
    double x[] = {1, 2, 3, 4};

    NEAR(moon_loadgen_percentile(x, 4, 50), 2.5);
    NEAR(moon_loadgen_percentile(x, 4, 90), 3.7);
    NEAR(moon_loadgen_percentile(x, 4, 99), 3.97);
    NEAR(moon_loadgen_percentile(x, 4, 0), 1);
    NEAR(moon_loadgen_percentile(x, 4, 100), 4);
    NEAR(moon_loadgen_percentile(x, 1, 99), 1);
    NEAR(moon_loadgen_percentile(x, 0, 50), 0);
}

static void test_dist_is_in_ms_with_population_std(void)
{
    double              x[] = {0.004, 0.001, 0.003, 0.002}; /* seconds, unsorted */
    moon_loadgen_dist_t d;

    moon_loadgen_dist(x, 4, &d);
    CU_ASSERT_EQUAL(d.n, 4);
    NEAR(d.mean, 2.5);
    NEAR(d.median, 2.5);
    NEAR(d.p90, 3.7);
    NEAR(d.p99, 3.97);
    NEAR(d.std, sqrt(1.25));
    NEAR(d.min, 1);
    NEAR(d.max, 4);
    moon_loadgen_dist(x, 0, &d);
    CU_ASSERT_EQUAL(d.n, 0);
    NEAR(d.mean, 0);
}

/* A: 3 chunks at 0.1, 0.15, 0.25 s after its send at 0; B: one token at
 * 0.2 s after its send at 0.1; C: failed. */
static double itl_a[] = {0.05, 0.1};

static void timelines(moon_loadgen_result_t r[3])
{
    memset(r, 0, 3 * sizeof(*r));
    r[0] = (moon_loadgen_result_t){.ok       = 1,
                                   .send_s   = 0,
                                   .ttft_s   = 0.1,
                                   .e2el_s   = 0.25,
                                   .n_in     = 10,
                                   .n_out    = 3,
                                   .n_chunks = 3,
                                   .n_itl    = 2,
                                   .itl_s    = itl_a};
    r[1] = (moon_loadgen_result_t){.ok       = 1,
                                   .send_s   = 0.1,
                                   .ttft_s   = 0.2,
                                   .e2el_s   = 0.2,
                                   .n_in     = 20,
                                   .n_out    = 1,
                                   .n_chunks = 1};
    r[2] = (moon_loadgen_result_t){.ok = 0, .send_s = 0.2, .e2el_s = 0.01, .n_in = 30};
}

static void test_vllm_definitions_on_timelines(void)
{
    moon_loadgen_result_t r[3];
    moon_loadgen_stats_t  s;

    timelines(r);
    r[0].n_cached = 4;
    r[1].n_cached = 2;
    r[2].n_cached = 9; /* failed: not counted */
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_stats_compute(r, 3, 2.0, NULL, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.completed, 2);
    CU_ASSERT_EQUAL(s.failed, 1);
    CU_ASSERT_EQUAL(s.total_input, 30); /* failed requests count nothing */
    CU_ASSERT_EQUAL(s.total_output, 4);
    CU_ASSERT_EQUAL(s.total_cached, 6); /* usage's cached tokens of completed requests */
    NEAR(s.request_throughput, 1.0);
    NEAR(s.output_throughput, 2.0);
    NEAR(s.total_token_throughput, 17.0);
    CU_ASSERT_FALSE(s.has_slo);
    /* TTFT over completed requests */
    CU_ASSERT_EQUAL(s.ttft.n, 2);
    NEAR(s.ttft.mean, 150);
    /* TPOT = (E2EL - TTFT) / (N_out - 1), only where N_out > 1 */
    CU_ASSERT_EQUAL(s.tpot.n, 1);
    NEAR(s.tpot.mean, 75);
    /* ITL: every gap between chunks */
    CU_ASSERT_EQUAL(s.itl.n, 2);
    NEAR(s.itl.mean, 75);
    NEAR(s.itl.min, 50);
    NEAR(s.itl.max, 100);
    CU_ASSERT_EQUAL(s.e2el.n, 2);
    NEAR(s.e2el.mean, 225);
    /* A [0, 0.25] and B [0.1, 0.3] overlap; C starts at 0.2 inside both */
    CU_ASSERT_EQUAL(s.peak_concurrency, 3);
}

static void test_tpot_uses_usage_tokens_not_chunks(void)
{
    moon_loadgen_result_t r[3];

    timelines(r);
    r[0].n_out = 5; /* the server said 5 tokens in 3 chunks */
    NEAR(moon_loadgen_tpot(&r[0]), 0.15 / 4);
    NEAR(moon_loadgen_tpot(&r[1]), 0);
}

static void test_goodput_and_slo_attainment(void)
{
    moon_loadgen_result_t r[3];
    moon_loadgen_stats_t  s;
    moon_loadgen_slo_t    ttft_only = {.slo_ttft_ms = 150};
    moon_loadgen_slo_t    tpot_only = {.slo_tpot_ms = 80};
    moon_loadgen_slo_t    both      = {.slo_ttft_ms = 150, .slo_tpot_ms = 70};
    moon_loadgen_slo_t    e2el      = {.slo_e2el_ms = 200};

    timelines(r);
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_stats_compute(r, 3, 2.0, &ttft_only, &s), MOON_OK);
    CU_ASSERT_TRUE(s.has_slo);
    CU_ASSERT_EQUAL(s.good, 1); /* A: 100 ms; B: 200 ms */
    NEAR(s.request_goodput, 0.5);
    NEAR(s.slo_attainment, 0.5);
    /* B has one token: TPOT 0 meets any TPOT SLO (vLLM) */
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_stats_compute(r, 3, 2.0, &tpot_only, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.good, 2);
    NEAR(s.slo_attainment, 1.0);
    /* every given SLO must hold: A misses TPOT 70, B misses TTFT 150 */
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_stats_compute(r, 3, 2.0, &both, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.good, 0);
    NEAR(s.request_goodput, 0);
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_stats_compute(r, 3, 2.0, &e2el, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.good, 1); /* B's 200 ms is within; A's 250 is not */
}

static void test_back_to_back_requests_do_not_overlap(void)
{
    moon_loadgen_result_t r[2] = {
        {.ok = 1, .send_s = 0, .ttft_s = 0.5, .e2el_s = 1, .n_out = 1, .n_chunks = 1},
        {.ok = 1, .send_s = 1, .ttft_s = 0.5, .e2el_s = 1, .n_out = 1, .n_chunks = 1},
    };
    moon_loadgen_stats_t s;

    CU_ASSERT_EQUAL_FATAL(moon_loadgen_stats_compute(r, 2, 2.0, NULL, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.peak_concurrency, 1);
}

static void test_throughput_series_places_tokens_at_chunk_times(void)
{
    moon_loadgen_result_t r[3];
    moon_loadgen_stats_t  s;
    double                rate[4];

    timelines(r);
    r[0].n_out = 6; /* 2 tokens per chunk: chunks at 0.1, 0.15, 0.25 */
    moon_loadgen_throughput_series(r, 3, 0.2, rate, 4);
    NEAR(rate[0], 4 / 0.2); /* A's first two chunks */
    NEAR(rate[1], 3 / 0.2); /* A's last at 0.25, B's one token at 0.3 */
    NEAR(rate[2], 0);
    /* the peak is over 1 s buckets: every token falls into the first */
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_stats_compute(r, 3, 2.0, NULL, &s), MOON_OK);
    NEAR(s.peak_output_throughput, 7);
}

static void test_no_completed_request_gives_zeros(void)
{
    moon_loadgen_result_t r[1] = {{.ok = 0, .send_s = 0, .e2el_s = 0.1}};
    moon_loadgen_slo_t    slo  = {.slo_ttft_ms = 1};
    moon_loadgen_stats_t  s;

    CU_ASSERT_EQUAL_FATAL(moon_loadgen_stats_compute(r, 1, 0.1, &slo, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.completed, 0);
    CU_ASSERT_EQUAL(s.failed, 1);
    NEAR(s.slo_attainment, 0);
    NEAR(s.ttft.mean, 0);
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_stats_compute(r, 0, 0, NULL, &s), MOON_OK);
    CU_ASSERT_EQUAL(s.peak_concurrency, 0);
}

MOON_TEST_MAIN("bench_stats", NULL, NULL, test_percentile_interpolates_like_numpy,
               test_dist_is_in_ms_with_population_std, test_vllm_definitions_on_timelines,
               test_tpot_uses_usage_tokens_not_chunks, test_goodput_and_slo_attainment,
               test_back_to_back_requests_do_not_overlap,
               test_throughput_series_places_tokens_at_chunk_times,
               test_no_completed_request_gives_zeros)
