/* tests/unit/gateway/test_gw_config.c - the gateway's option table: its
 * defaults, flags as `moonlet serve` parses them, and bad values refused. */
#include "gateway.h"
#include "moon_test.h"

#include <string.h>

static void test_defaults(void)
{
    moon_gateway_config_t c;

    CU_ASSERT_EQUAL_FATAL(moon_gateway_config_default(&c), MOON_OK);
    CU_ASSERT_STRING_EQUAL(c.host, "127.0.0.1");
    CU_ASSERT_EQUAL(c.port, 8000);
    CU_ASSERT_PTR_NULL(c.model_name);
    CU_ASSERT_PTR_NULL(c.api_key);
    CU_ASSERT_EQUAL(c.body_limit_bytes, 4u << 20);
    CU_ASSERT_EQUAL(c.idle_timeout_s, 30);
    CU_ASSERT_EQUAL(c.body_timeout_s, 60);
    CU_ASSERT_EQUAL(c.http_threads, 2);
    CU_ASSERT_EQUAL(c.stats_interval_ms, 500);
}

static void test_flags(void)
{
    moon_gateway_config_t c;
    moon_config_t        *cfg    = NULL;
    char                 *argv[] = {"serve",        "--host", "0.0.0.0",   "--port=9001",
                                    "--model-name", "tiny",   "--api-key", "k",
                                    "--body-limit", "64k",    NULL};

    CU_ASSERT_EQUAL_FATAL(moon_config_defaults(&moon_gateway_config_table, &c), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_config_create(&cfg), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_config_add(cfg, &moon_gateway_config_table, &c), MOON_OK);
    CU_ASSERT_EQUAL(moon_config_parse(cfg, 10, argv), MOON_OK);
    CU_ASSERT_STRING_EQUAL(c.host, "0.0.0.0");
    CU_ASSERT_EQUAL(c.port, 9001);
    CU_ASSERT_STRING_EQUAL(c.model_name, "tiny");
    CU_ASSERT_STRING_EQUAL(c.api_key, "k");
    CU_ASSERT_EQUAL(c.body_limit_bytes, 64u << 10);
    moon_config_destroy(cfg);
}

static void test_bad_values(void)
{
    moon_gateway_config_t c;
    moon_config_t        *cfg       = NULL;
    char                 *port[]    = {"serve", "--port", "70000", NULL};
    char                 *threads[] = {"serve", "--http-threads", "0", NULL};

    moon_config_defaults(&moon_gateway_config_table, &c);
    CU_ASSERT_EQUAL_FATAL(moon_config_create(&cfg), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_config_add(cfg, &moon_gateway_config_table, &c), MOON_OK);
    CU_ASSERT_EQUAL(moon_config_parse(cfg, 3, port), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NOT_NULL(strstr(moon_config_error(cfg), "port"));
    CU_ASSERT_EQUAL(moon_config_parse(cfg, 3, threads), MOON_ERR_INVALID_PARAM);
    moon_config_destroy(cfg);
}

MOON_TEST_MAIN("gw_config", NULL, NULL, test_defaults, test_flags, test_bad_values)
