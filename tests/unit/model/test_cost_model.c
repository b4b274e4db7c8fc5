/* tests/unit/model/test_cost_model.c - the COST backend: Mooncake Eq. 1 for
 * prefill, bytes read for decode, LLaMA3-70B's 320 KB of KV per token, and
 * that the engine interface drives it (with and without a KV cache). */
#include "moon_test.h"
#include "moonlet/model.h"

#include <math.h>

static void test_eq1_and_kv_bytes(void)
{
    moon_cost_config_t c = moon_cost_llama3_70b();
    double             l = 80, d = 8192, n = 1000;

    CU_ASSERT_EQUAL(moon_cost_kv_bytes_per_token(&c), 327680); /* 320 KiB */
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_prefill_flops(&c.shape, 0, 1000),
                           l * (4 * n * n * d + 22 * n * d * d), 1.0);
    /* a cached prefix only saves work: f(p + n) - f(p) */
    CU_ASSERT(moon_cost_prefill_s(&c, 4000, 1000) < moon_cost_prefill_s(&c, 0, 5000));
    CU_ASSERT(moon_cost_prefill_s(&c, 4000, 1000) > moon_cost_prefill_s(&c, 0, 1000));
    /* decode grows with the KV it reads */
    CU_ASSERT(moon_cost_decode_s(&c, 8, 80000) > moon_cost_decode_s(&c, 8, 8000));
}

static void test_engine_interface(void)
{
    moon_engine_config_t ecfg = {.kind = MOON_BACKEND_COST, .max_batch = 4, .max_chunk = 4096};
    moon_engine_t       *eng;
    moon_kv_cache_t     *kv;
    moon_kv_config_t     kcfg;
    static int32_t       toks[4096];
    uint32_t             seq;
    double               t1, t2, td;

    ecfg.cost = moon_cost_llama3_70b();
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(NULL, &ecfg, &eng), MOON_OK);
    CU_ASSERT_STRING_EQUAL(moon_engine_name(eng), "cost");
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, NULL, 0, toks, 4096, NULL, &t1), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(t1, moon_cost_prefill_s(&ecfg.cost, 0, 4096), 1e-12);
    moon_engine_destroy(eng);
    /* with a KV cache (of a tiny shape) the lengths advance and prefixes count */
    ecfg.cost.shape.n_layers   = 2;
    ecfg.cost.shape.n_kv_heads = 1;
    ecfg.cost.shape.head_dim   = 8;
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(NULL, &ecfg, &eng), MOON_OK);
    kcfg             = moon_model_kv_config(&ecfg.cost.shape, 512, 32, 2);
    kcfg.max_seq_len = 16384;
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &seq), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, seq, toks, 4096, NULL, &t1), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, seq, toks, 4096, NULL, &t2), MOON_OK);
    CU_ASSERT(t2 > t1);
    CU_ASSERT_EQUAL(moon_kv_seq_len(kv, seq), 8192);
    CU_ASSERT_EQUAL(moon_engine_decode(eng, kv, &seq, toks, 1, NULL, &td), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(td, moon_cost_decode_s(&ecfg.cost, 1, 8193), 1e-12);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(eng);
}

static CU_TestInfo tests[] = {
    {"eq1_and_kv_bytes", test_eq1_and_kv_bytes},
    {"engine_interface", test_engine_interface},
    CU_TEST_INFO_NULL,
};
static CU_SuiteInfo suites[] = {{"cost_model", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void)
{
    return moon_test_run(suites);
}
