/* tests/unit/scheduler/test_sched_goodput.c - the policies in a toy cluster
 * (toy_cluster.h) in virtual time: the scheduling ablation orders as the
 * paper's (mean TTFT random > least-loaded > cache-aware > mooncake), moonlet
 * beats Algorithm 1's goodput at saturation under early rejection (with the
 * prefill or the decode side binding), and a run is deterministic. 8 prefill + 8 decode instances
 * with LLaMA-70B-like costs (Mooncake Eq. 1 at ~1.5 PFLOP/s, 512-token blocks of 164 MB over 87
 * GB/s), conversations of 2..60 blocks, SLO TTFT <= 10 s and TBT <= 100 ms. */
#include "toy_cluster.h"

#include "moon_test.h"

#include <stdio.h>

static toy_config_t paper_like(double rate)
{
    toy_config_t cfg = {0};

    cfg.n_prefill             = 8;
    cfg.n_decode              = 8;
    cfg.cost.a0               = 0.01;
    cfg.cost.a1               = 7.9e-5;
    cfg.cost.a2               = 1.75e-9;
    cfg.cost.d0               = 0.03;
    cfg.cost.d1               = 2e-4;
    cfg.cost.d2               = 2e-11;
    cfg.cost.block_bytes      = 164000000;
    cfg.cost.xfer_bytes_per_s = 87e9;
    cfg.cost.xfer_latency_s   = 1e-3;
    cfg.block_tokens          = 512;
    cfg.max_batch             = 128;
    cfg.n_reqs                = 3000;
    cfg.rate                  = rate;
    cfg.new_blocks_min        = 2;
    cfg.new_blocks_span       = 12;
    cfg.max_prompt_blocks     = 60;
    cfg.out_min               = 50;
    cfg.out_span              = 200;
    cfg.ttft_slo_s            = 10.0;
    cfg.tbt_slo_s             = 0.1;
    cfg.seed                  = 12345;
    return cfg;
}

static toy_result_t run(const toy_config_t *cfg, const char *policy, int early_reject)
{
    toy_result_t r = {0};

    CU_ASSERT_EQUAL_FATAL(toy_cluster_run(cfg, policy, early_reject, &r), 0);
    printf("\n{\"policy\": \"%s\", \"early_reject\": %d, \"rate\": %.1f, \"goodput_rps\": %.3f, "
           "\"ttft_mean_s\": %.3f, \"admitted\": %u, \"rejected\": %u, \"ttft_miss\": %u, "
           "\"tbt_miss\": %u, \"computed_tokens\": %llu, \"fetched_blocks\": %llu}",
           policy, early_reject, cfg->rate, r.goodput_rps, r.ttft_mean_s, r.admitted, r.rejected,
           r.ttft_miss, r.tbt_miss, (unsigned long long)r.computed_tokens,
           (unsigned long long)r.fetched_blocks);
    return r;
}

static void test_ablation_orders_as_the_paper(void)
{
    toy_config_t cfg    = paper_like(4.0);
    double       random = run(&cfg, "random", 0).ttft_mean_s;
    double       least  = run(&cfg, "least-loaded", 0).ttft_mean_s;
    double       cache  = run(&cfg, "cache-aware", 0).ttft_mean_s;
    double       alg1   = run(&cfg, "mooncake", 0).ttft_mean_s;
    double       ours   = run(&cfg, "moonlet", 0).ttft_mean_s;

    CU_ASSERT(random > least);
    CU_ASSERT(least > cache);
    CU_ASSERT(cache > alg1);
    CU_ASSERT(ours <= alg1 * 1.001);
}

static void test_moonlet_beats_algorithm_1_at_saturation(void)
{
    /* prefill-bound: the TTFT SLO caps admissions for both; Algorithm 1
     * loses requests to TBT misses, moonlet none */
    toy_config_t cfg  = paper_like(36.0);
    toy_result_t alg1 = run(&cfg, "mooncake", 1);
    toy_result_t ours = run(&cfg, "moonlet", 1);

    CU_ASSERT(ours.goodput_rps > alg1.goodput_rps);
    CU_ASSERT(alg1.tbt_miss > 0);
    CU_ASSERT_EQUAL(ours.tbt_miss, 0);
}

static void test_moonlet_beats_algorithm_1_when_decode_binds(void)
{
    /* two decode instances and TBT <= 80 ms: sequences placed earlier join
     * during a sequence's life and push the step past the SLO */
    toy_config_t cfg = paper_like(30.0);
    toy_result_t alg1, ours;

    cfg.n_decode  = 2;
    cfg.tbt_slo_s = 0.08;
    alg1          = run(&cfg, "mooncake", 1);
    ours          = run(&cfg, "moonlet", 1);
    CU_ASSERT(ours.goodput_rps >= 1.1 * alg1.goodput_rps);
    CU_ASSERT(ours.tbt_miss < alg1.tbt_miss);
}

static void test_runs_are_deterministic(void)
{
    toy_config_t cfg = paper_like(28.0);
    toy_result_t a = run(&cfg, "random", 1), b = run(&cfg, "random", 1);

    CU_ASSERT_EQUAL(a.met, b.met);
    CU_ASSERT_EQUAL(a.rejected, b.rejected);
    CU_ASSERT_EQUAL(a.ttft_mean_s, b.ttft_mean_s);
}

MOON_TEST_MAIN("sched_goodput", NULL, NULL, test_ablation_orders_as_the_paper,
               test_moonlet_beats_algorithm_1_at_saturation,
               test_moonlet_beats_algorithm_1_when_decode_binds, test_runs_are_deterministic)
