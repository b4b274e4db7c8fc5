/* tests/unit/model/test_cuda.c - the CUDA backend against the CPU path
 * (MOON_WITH_CUDA builds only): a random GQA model, a chunked prefill and
 * batched decode steps over the paged KV cache; logits within 1e-3 x
 * max(1, max |cpu|). Without a device it prints "skipped: no device". */
#include "model_test_util.h"

#include <cuda_runtime.h>
#include <stdlib.h>

#define TOL 1e-3f

static void test_cuda_matches_cpu(void)
{
    int                  n_dev = 0;
    moon_model_config_t  shape = mt_shape(128, 256, 3, 8, 2, 400, 128);
    char                 path[256];
    moon_model_t        *m;
    moon_engine_config_t ec = {
        .kind = MOON_BACKEND_CPU, .n_threads = 2, .max_batch = 3, .max_chunk = 32};
    moon_engine_config_t eg = {.kind = MOON_BACKEND_CUDA, .max_batch = 3, .max_chunk = 32};
    moon_engine_t       *cpu, *gpu;
    moon_kv_cache_t     *kc, *kg;
    moon_kv_config_t     kcfg;
    uint32_t             sc[3], sg[3];
    int32_t              toks[64];
    float                lc[3 * 400], lg[3 * 400], worst = 0.0f;
    uint64_t             rng = 3;

    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev <= 0) {
        moon_test_skip("no device");
        return;
    }
    m = mt_random_model(&shape, MOON_GGML_F32, 77, path, sizeof(path));
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    kcfg = moon_model_kv_config(moon_model_config(m), 8, 64, 3);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ec, &cpu), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &eg, &gpu), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kc), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kg), MOON_OK);
    for (int i = 0; i < 64; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % 400);
    }
    for (int s = 0; s < 3; s++) {
        CU_ASSERT_EQUAL(moon_kv_seq_create(kc, &sc[s]), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_seq_create(kg, &sg[s]), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_prefill(cpu, kc, sc[s], toks + s, 10 + 7 * s, lc, NULL),
                        MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_prefill(gpu, kg, sg[s], toks + s, 10 + 7 * s, lg, NULL),
                        MOON_OK);
        worst = fmaxf(worst, mt_rel_diff(lg, lc, 400));
    }
    for (int step = 0; step < 5; step++) {
        CU_ASSERT_EQUAL(moon_engine_decode(cpu, kc, sc, toks + 40 + step, 3, lc, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_decode(gpu, kg, sg, toks + 40 + step, 3, lg, NULL), MOON_OK);
        worst = fmaxf(worst, mt_rel_diff(lg, lc, 3 * 400));
    }
    printf("\n  cuda vs cpu: max rel diff %.2e ", (double)worst);
    CU_ASSERT(worst <= TOL);
    moon_kv_cache_destroy(kc);
    moon_kv_cache_destroy(kg);
    moon_engine_destroy(cpu);
    moon_engine_destroy(gpu);
    moon_model_destroy(m);
    unlink(path);
}

static CU_TestInfo tests[] = {
    {"cuda_matches_cpu", test_cuda_matches_cpu},
    CU_TEST_INFO_NULL,
};
static CU_SuiteInfo suites[] = {{"cuda", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void)
{
    return moon_test_run(suites);
}
