/* tests/support/moon_test.c - CUnit driver shared by every test executable. */
#define _DEFAULT_SOURCE /* mincore */
#include "moon_test.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Splits the stringized list in place into the tests' names ("test_" off). */
static int name_tests(char *list, CU_TestInfo *tests, const moon_test_suite_t *suite)
{
    char *save = NULL, *tok = strtok_r(list, ", \t\n", &save);

    for (size_t i = 0; i < suite->n_fns; i++, tok = strtok_r(NULL, ", \t\n", &save)) {
        if (tok == NULL) {
            return -1;
        }
        tests[i].pName     = strncmp(tok, "test_", 5) == 0 ? tok + 5 : tok;
        tests[i].pTestFunc = suite->fns[i];
    }
    return tok == NULL ? 0 : -1;
}

static unsigned run_registered(CU_SuiteInfo *suites)
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
    return failures;
}

int moon_test_run(moon_test_suite_t suite)
{
    CU_TestInfo *tests = calloc(suite.n_fns + 1, sizeof(*tests)); /* NULL-terminated */
    char        *list  = strdup(suite.fn_names);
    unsigned     failures;

    if (tests == NULL || list == NULL || name_tests(list, tests, &suite) != 0) {
        fprintf(stderr, "moon_test: cannot list the tests of suite %s\n", suite.name);
        failures = 1;
    } else {
        CU_SuiteInfo suites[] = {{suite.name, suite.init, suite.clean, NULL, NULL, tests},
                                 CU_SUITE_INFO_NULL};
        failures              = run_registered(suites);
    }
    free(list);
    free(tests);
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

size_t moon_test_rss_bytes(void)
{
    FILE         *f    = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;

    if (f == NULL) {
        return 0;
    }
    if (fscanf(f, "%lu %lu", &size, &resident) != 2) {
        resident = 0;
    }
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

size_t moon_test_resident_bytes(const void *p, size_t n)
{
    size_t         page  = (size_t)sysconf(_SC_PAGESIZE);
    size_t         pages = (n + page - 1) / page, count = 0;
    unsigned char *vec = malloc(pages > 0 ? pages : 1);

    if (vec != NULL && mincore((void *)p, n, vec) == 0) {
        for (size_t i = 0; i < pages; i++) {
            count += vec[i] & 1;
        }
    }
    free(vec);
    return count * page;
}

char *moon_test_read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long  n;

    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL) {
        buf[n] = '\0';
        if (len_p != NULL) {
            *len_p = (size_t)n;
        }
    }
    return buf;
}
