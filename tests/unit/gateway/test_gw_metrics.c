/* tests/unit/gateway/test_gw_metrics.c - the Prometheus registry: text
 * format byte for byte, histogram buckets, label sets, bad use. */
#include "gw_metrics.h"
#include "moon_test.h"
#include "moonlet/alloc.h"

#include <string.h>

static void test_text_format(void)
{
    moon_gw_metrics_t  *m   = NULL;
    static const double b[] = {0.1, 1};
    char               *text;
    size_t              len = 0;

    CU_ASSERT_EQUAL_FATAL(moon_gw_metrics_create("model_name=\"x\"", &m), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "a:c_total", MOON_GW_COUNTER, "C.", NULL, 0),
                    MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "a:g", MOON_GW_GAUGE, "G.", NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "a:h", MOON_GW_HISTOGRAM, "H.", b, 2), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_add(m, "a:c_total", "r=\"stop\"", 2), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_add(m, "a:c_total", "r=\"stop\"", 1), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_add(m, "a:c_total", "r=\"length\"", 0.5), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_observe(m, "a:h", NULL, 0.05), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_observe(m, "a:h", NULL, 0.5), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_observe(m, "a:h", NULL, 7), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gw_metrics_render(m, &text, &len), MOON_OK);
    CU_ASSERT_STRING_EQUAL(text, "# HELP a:c_total C.\n"
                                 "# TYPE a:c_total counter\n"
                                 "a:c_total{model_name=\"x\",r=\"stop\"} 3\n"
                                 "a:c_total{model_name=\"x\",r=\"length\"} 0.5\n"
                                 "# HELP a:g G.\n"
                                 "# TYPE a:g gauge\n"
                                 "a:g{model_name=\"x\"} 0\n"
                                 "# HELP a:h H.\n"
                                 "# TYPE a:h histogram\n"
                                 "a:h_bucket{model_name=\"x\",le=\"0.1\"} 1\n"
                                 "a:h_bucket{model_name=\"x\",le=\"1\"} 2\n"
                                 "a:h_bucket{model_name=\"x\",le=\"+Inf\"} 3\n"
                                 "a:h_sum{model_name=\"x\"} 7.55\n"
                                 "a:h_count{model_name=\"x\"} 3\n");
    CU_ASSERT_EQUAL(len, strlen(text));
    moon_free(text);
    moon_gw_metrics_destroy(m);
}

static void test_no_const_labels(void)
{
    moon_gw_metrics_t *m = NULL;
    char              *text;
    double             v = -1;

    CU_ASSERT_EQUAL_FATAL(moon_gw_metrics_create(NULL, &m), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "g", MOON_GW_GAUGE, "G.", NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_set_gauge(m, "g", NULL, 4), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_add(m, "g", NULL, -1), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_get(m, "g", NULL, &v), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(v, 3, 1e-12);
    CU_ASSERT_EQUAL_FATAL(moon_gw_metrics_render(m, &text, NULL), MOON_OK);
    CU_ASSERT_STRING_EQUAL(text, "# HELP g G.\n# TYPE g gauge\ng 3\n");
    moon_free(text);
    moon_gw_metrics_destroy(m);
}

static void test_bad_use(void)
{
    moon_gw_metrics_t  *m     = NULL;
    static const double bad[] = {1, 0.5};
    double              v;

    CU_ASSERT_EQUAL_FATAL(moon_gw_metrics_create("", &m), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "c_total", MOON_GW_COUNTER, "C.", NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "c_total", MOON_GW_COUNTER, "C.", NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "g", MOON_GW_GAUGE, "G.", NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "g", MOON_GW_COUNTER, "G.", NULL, 0),
                    MOON_ERR_EXISTS);
    /* promtool's rule: a gauge (or histogram) named like a counter is refused */
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "blocks_total", MOON_GW_GAUGE, "B.", NULL, 0),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "9bad", MOON_GW_GAUGE, "x", NULL, 0),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare(m, "h", MOON_GW_HISTOGRAM, "x", bad, 2),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_metrics_add(m, "c_total", NULL, -1), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_metrics_observe(m, "c_total", NULL, 1), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_metrics_add(m, "nope", NULL, 1), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_gw_metrics_add(m, "c_total", "a=\"b\nc\"", 1), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_metrics_add(m, "c_total", "a=\"b", 1), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gw_metrics_get(m, "nope", NULL, &v), MOON_ERR_NOT_FOUND);
    moon_gw_metrics_destroy(m);
}

/* The serving catalogue declares vLLM's names under moonlet: */
static void test_serving_catalogue(void)
{
    moon_gw_metrics_t *m = NULL;
    char              *text;

    CU_ASSERT_EQUAL_FATAL(moon_gw_metrics_create("model_name=\"s\"", &m), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gw_metrics_declare_serving(m), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_metrics_declare_serving(m), MOON_OK); /* idempotent */
    CU_ASSERT_EQUAL(moon_gw_metrics_observe(m, MOON_GW_M_TTFT, NULL, 0.003), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gw_metrics_render(m, &text, NULL), MOON_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TYPE moonlet:time_to_first_token_seconds histogram\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(
        text, "moonlet:time_to_first_token_seconds_bucket{model_name=\"s\",le=\"0.0025\"} 0\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(
        text, "moonlet:time_to_first_token_seconds_bucket{model_name=\"s\",le=\"0.005\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(
        text, "moonlet:request_success_total{model_name=\"s\",finished_reason=\"stop\"} 0\n"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(text, "moonlet:kv_blocks_used{model_name=\"s\",tier=\"store_ssd\"} 0\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TYPE moonlet:prefix_cache_hits_total counter\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "# TYPE moonlet:num_requests_waiting gauge\n"));
    moon_free(text);
    moon_gw_metrics_destroy(m);
}

static void test_allocation_failures(void)
{
    for (uint64_t n = 1; n < 40; n++) {
        moon_gw_metrics_t *m = NULL;
        char              *text;

        moon_fault_fail_after(n);
        if (moon_gw_metrics_create("a=\"b\"", &m) == MOON_OK) {
            if (moon_gw_metrics_declare_serving(m) == MOON_OK &&
                moon_gw_metrics_render(m, &text, NULL) == MOON_OK) {
                moon_free(text);
            }
            moon_gw_metrics_destroy(m);
        }
        moon_fault_reset();
    }
    CU_PASS("no crash, no leak under ASan");
}

MOON_TEST_MAIN("gw_metrics", NULL, NULL, test_text_format, test_no_const_labels, test_bad_use,
               test_serving_catalogue, test_allocation_failures)
