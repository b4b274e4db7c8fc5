/* tests/unit/gateway/test_gw_cors.c - the allowed-origins check: exact
 * origins from a comma-separated list, "*", and nothing by default. */
#include "gw_cors.h"
#include "moon_test.h"

static void test_exact_origins(void)
{
    const char *list = "http://a.example, https://b.example:8443 ,http://c";

    CU_ASSERT_TRUE(moon_gw_cors_allowed(list, "http://a.example"));
    CU_ASSERT_TRUE(moon_gw_cors_allowed(list, "https://b.example:8443"));
    CU_ASSERT_TRUE(moon_gw_cors_allowed(list, "http://c"));
    CU_ASSERT_FALSE(moon_gw_cors_allowed(list, "http://a.example.evil"));
    CU_ASSERT_FALSE(moon_gw_cors_allowed(list, "http://a.exampl"));
    CU_ASSERT_FALSE(moon_gw_cors_allowed(list, "https://b.example"));
    CU_ASSERT_FALSE(moon_gw_cors_allowed(list, "http://"));
    CU_ASSERT_FALSE(moon_gw_cors_allowed(list, ""));
    CU_ASSERT_FALSE(moon_gw_cors_allowed(list, NULL));
}

static void test_star_and_none(void)
{
    CU_ASSERT_TRUE(moon_gw_cors_allowed("*", "http://anything"));
    CU_ASSERT_TRUE(moon_gw_cors_allowed("http://x, *", "null"));
    CU_ASSERT_FALSE(moon_gw_cors_allowed("*", NULL));
    CU_ASSERT_FALSE(moon_gw_cors_allowed(NULL, "http://a.example"));
    CU_ASSERT_FALSE(moon_gw_cors_allowed("", "http://a.example"));
    CU_ASSERT_FALSE(moon_gw_cors_allowed(" , ,", "http://a.example"));
    CU_ASSERT_FALSE(moon_gw_cors_allowed("**", "http://a.example"));
}

MOON_TEST_MAIN("gw_cors", NULL, NULL, test_exact_origins, test_star_and_none)
