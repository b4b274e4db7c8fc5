/* tests/support/moon_test.c - CUnit driver shared by every test executable. */
#include "moon_test.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <time.h>

int moon_test_run(CU_SuiteInfo *suites)
{
    unsigned failures;

    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "cunit: %s\n", CU_get_error_msg());
        return 1;
    }
    if (CU_register_suites(suites) != CUE_SUCCESS) {
        fprintf(stderr, "cunit: %s\n", CU_get_error_msg());
        CU_cleanup_registry();
        return 1;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failures = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    if (CU_get_error() != CUE_SUCCESS) {
        failures++;
    }
    CU_cleanup_registry();
    return failures != 0;
}

void moon_test_skip(const char *why)
{
    printf("skipped: %s\n", why);
    fflush(stdout);
}

double moon_test_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
