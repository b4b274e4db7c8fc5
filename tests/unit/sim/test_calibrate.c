/* tests/unit/sim/test_calibrate.c - calibration: a COST engine whose
 * durations follow known coefficients is timed and fitted back to exactly
 * those (the modeled times are exact, so the pipeline's points, contexts and
 * fits are checked without any wall-clock timing); bad arguments. */
#include "calibrate.h"
#include "moon_test.h"

#include <math.h>

static void test_cost_engine_fits_back(void)
{
    moon_model_t        *m;
    moon_engine_t       *eng;
    moon_engine_config_t ecfg = {.kind = MOON_BACKEND_COST, .max_batch = 8, .max_chunk = 512};
    moon_cost_fit_t      want = {
             .enabled = 1, .a0 = 2e-3, .a1 = 1.5e-4, .a2 = 4e-7, .d0 = 1e-3, .d1 = 2e-4, .d2 = 3e-6};
    moon_cost_fit_t       got = {0};
    moon_calibrate_opts_t o   = {.repeats = 3, .max_batch = 8};

    CU_ASSERT_EQUAL_FATAL(moon_model_load(MOON_MODELS_DIR "/stories260K/stories260K.gguf", &m),
                          MOON_OK);
    ecfg.cost     = moon_cost_llama3_70b();
    ecfg.cost.fit = want;
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg, &eng), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_calibrate_engine(m, eng, &ecfg, &o, &got), MOON_OK);
    CU_ASSERT_TRUE(got.enabled);
    CU_ASSERT_DOUBLE_EQUAL(got.a0, want.a0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(got.a1, want.a1, 1e-11);
    CU_ASSERT_DOUBLE_EQUAL(got.a2, want.a2, 1e-13);
    CU_ASSERT_DOUBLE_EQUAL(got.d0, want.d0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(got.d1, want.d1, 1e-10);
    CU_ASSERT_DOUBLE_EQUAL(got.d2, want.d2, 1e-12);
    CU_ASSERT_EQUAL(moon_calibrate_engine(NULL, eng, &ecfg, &o, &got), MOON_ERR_INVALID_PARAM);
    moon_engine_destroy(eng);
    moon_model_destroy(m);
}

static CU_TestInfo tests[] = {
    {"cost_engine_fits_back", test_cost_engine_fits_back},
    CU_TEST_INFO_NULL,
};
static CU_SuiteInfo suites[] = {{"calibrate", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void)
{
    return moon_test_run(suites);
}
