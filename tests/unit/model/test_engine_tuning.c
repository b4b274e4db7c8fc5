/* tests/unit/model/test_engine_tuning.c - the engine's tuning table: its
 * defaults, the MOON_CPU_* variables read at engine create, a caller's
 * tuning winning over them, and a malformed variable refused. */
#include "moonlet/model.h"

#include "moon_test.h"

#include <stdlib.h>

static moon_status_t create_cost(const moon_engine_tuning_t *t)
{
    moon_engine_config_t ecfg = {.kind = MOON_BACKEND_COST, .max_batch = 4, .max_chunk = 64};
    moon_engine_t       *eng  = NULL;
    moon_status_t        status;

    ecfg.cost   = moon_cost_llama3_70b();
    ecfg.tuning = t;
    status      = moon_engine_create(NULL, &ecfg, &eng);
    moon_engine_destroy(eng);
    return status;
}

static void test_defaults(void)
{
    moon_engine_tuning_t t;

    unsetenv("MOON_CPU_ISA");
    unsetenv("MOON_CPU_OP_MIN_B");
    CU_ASSERT_EQUAL_FATAL(moon_engine_tuning_default(&t), MOON_OK);
    CU_ASSERT_EQUAL(t.cpu_isa, MOON_CPU_ISA_AUTO);
    CU_ASSERT_EQUAL(t.cpu_par_min_macs, 1u << 19);
    CU_ASSERT_EQUAL(t.cpu_split_max_macs, 1u << 22);
    CU_ASSERT_EQUAL(t.cpu_op_min_b, 4);
    CU_ASSERT_EQUAL(t.cpu_bt_min_b, 29);
    CU_ASSERT(t.cpu_bf16_dp && t.cpu_nt && t.cuda_graphs);
    CU_ASSERT_EQUAL(moon_engine_tuning_default(NULL), MOON_ERR_INVALID_PARAM);
}

static void test_environment_read_at_create(void)
{
    moon_engine_tuning_t t;

    setenv("MOON_CPU_ISA", "scalar", 1);
    setenv("MOON_CPU_OP_MIN_B", "1", 1);
    CU_ASSERT_EQUAL_FATAL(moon_engine_tuning_default(&t), MOON_OK);
    CU_ASSERT_EQUAL(t.cpu_isa, MOON_CPU_ISA_SCALAR);
    CU_ASSERT_EQUAL(t.cpu_op_min_b, 1);
    CU_ASSERT_EQUAL(create_cost(NULL), MOON_OK);
    unsetenv("MOON_CPU_ISA");
    unsetenv("MOON_CPU_OP_MIN_B");
}

static void test_malformed_variable_refused(void)
{
    moon_engine_tuning_t t;

    setenv("MOON_CPU_OP_MIN_B", "5x", 1);
    CU_ASSERT_EQUAL(moon_engine_tuning_default(&t), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(t.cpu_op_min_b, 4); /* the defaults only */
    CU_ASSERT_EQUAL(create_cost(NULL), MOON_ERR_INVALID_PARAM);
    /* a caller's tuning is authoritative: the environment is not read */
    CU_ASSERT_EQUAL(create_cost(&t), MOON_OK);
    unsetenv("MOON_CPU_OP_MIN_B");
    setenv("MOON_CPU_ISA", "avx1", 1);
    CU_ASSERT_EQUAL(create_cost(NULL), MOON_ERR_INVALID_PARAM);
    unsetenv("MOON_CPU_ISA");
}

MOON_TEST_MAIN("engine_tuning", NULL, NULL, test_defaults, test_environment_read_at_create,
               test_malformed_variable_refused)
