/* tests/unit/sim/test_profile.c - profile files: the two shipped profiles and
 * what they derive (by hand), strict errors naming the key, and a fitted
 * profile written by calibration loading back equal. */
#include "moon_test.h"
#include "profile.h"

#include "moonlet/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_default_profile(void)
{
    moon_profile_t       p;
    moon_profile_error_t e;
    moon_cost_config_t   c;

    CU_ASSERT_EQUAL_FATAL(moon_profile_load(MOON_PROFILE_DEFAULT, MOON_PROFILE_DIR, &p, &e),
                          MOON_OK);
    CU_ASSERT_STRING_EQUAL(p.name, "llama3-70b-8xa800");
    CU_ASSERT_EQUAL(p.shape.n_layers, 80);
    CU_ASSERT_EQUAL(p.shape.seq_len, 262144);
    CU_ASSERT_EQUAL(p.device.count, 8);
    CU_ASSERT_EQUAL(p.network.nics_per_node, 4);
    CU_ASSERT_FALSE(p.fit.enabled);
    c = moon_profile_cost(&p);
    CU_ASSERT_EQUAL(moon_cost_check(&c), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(c.flops_per_s, 8 * 312e12 * 0.5, 1.0);
    CU_ASSERT_DOUBLE_EQUAL(c.decode_flops_per_s, 8 * 312e12 * 0.5, 1.0);
    CU_ASSERT_DOUBLE_EQUAL(c.mem_bytes_per_s, 8 * 2.039e12 * 0.6, 1.0);
    CU_ASSERT_DOUBLE_EQUAL(c.weight_bytes, 2 * 69501714432.0, 1.0);
    CU_ASSERT_EQUAL(moon_cost_kv_bytes_per_token(&c), 327680);
    /* 8 x 80 GB x 0.9 - 139 GB of weights */
    CU_ASSERT_DOUBLE_EQUAL(moon_profile_kv_capacity_bytes(&p), 576e9 - 2 * 69501714432.0, 1.0);
    /* 200 Gbps / 8 x 0.87 = 21.75 GB/s per NIC, 87 GB/s over 4 (Transfer Engine) */
    CU_ASSERT_DOUBLE_EQUAL(moon_profile_nic_bytes_per_s(&p), 21.75e9, 1.0);
    /* Eq. 1 over the profile's throughput: 8k tokens from scratch */
    CU_ASSERT_DOUBLE_EQUAL(
        moon_cost_prefill_s(&c, 0, 8192),
        80.0 * (4.0 * 8192 * 8192 * 8192 + 22.0 * 8192 * 8192.0 * 8192) / 1.248e15, 1e-9);
}

static void test_h200_profile_and_paths(void)
{
    moon_profile_t p;

    CU_ASSERT_EQUAL_FATAL(
        moon_profile_load(MOON_PROFILE_DIR "/llama3-8b-h200.json", NULL, &p, NULL), MOON_OK);
    CU_ASSERT_STRING_EQUAL(p.name, "llama3-8b-h200");
    CU_ASSERT_EQUAL(p.shape.dim, 4096);
    CU_ASSERT_EQUAL(p.device.count, 1);
    {
        moon_cost_config_t c = moon_profile_cost(&p);
        CU_ASSERT_EQUAL(moon_cost_kv_bytes_per_token(&c), 131072); /* 128 KiB */
        CU_ASSERT_DOUBLE_EQUAL(c.mem_bytes_per_s, 4.8e12 * 0.7, 1.0);
    }
    /* by name in the built-in folder (dir NULL) */
    CU_ASSERT_EQUAL(moon_profile_load("llama3-8b-h200", NULL, &p, NULL), MOON_OK);
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(moon_profile_load("no-such-profile", MOON_PROFILE_DIR, &p, NULL),
                    MOON_ERR_NOT_FOUND);
    moon_log_set_level(MOON_LOG_WARN);
}

/* The profiles of the families issue 28 serves: each loads, and its KV bytes
 * per token are 2 l kv_heads head_dim 2. */
static void test_family_profiles(void)
{
    static const struct {
        const char *name;
        uint64_t    kv_bytes;
    } cases[] = {
        {"qwen2.5-7b-h200", 2ull * 28 * 4 * 128 * 2},
        {"qwen3-8b-h200", 2ull * 36 * 8 * 128 * 2},
        {"mistral-7b-h200", 2ull * 32 * 8 * 128 * 2},
    };
    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        moon_profile_t     p;
        moon_cost_config_t c;
        CU_ASSERT_EQUAL_FATAL(moon_profile_load(cases[i].name, NULL, &p, NULL), MOON_OK);
        CU_ASSERT_STRING_EQUAL(p.name, cases[i].name);
        c = moon_profile_cost(&p);
        CU_ASSERT_EQUAL(moon_cost_kv_bytes_per_token(&c), cases[i].kv_bytes);
        CU_ASSERT(moon_cost_decode_s(&c, 1, 1000) > 0.0);
    }
}

/* The default profile's text with one substitution (from -> to). */
static char *edited(const char *from, const char *to)
{
    static char out[8192];
    char        text[8192];
    FILE       *f = fopen(MOON_PROFILE_DIR "/llama3-70b-8xa800.json", "r");
    size_t      n;
    char       *at;

    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    n       = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    at = strstr(text, from);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    snprintf(out, sizeof(out), "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return out;
}

static void test_strict_errors_name_the_key(void)
{
    static const struct {
        const char *from, *to, *expect;
    } cases[] = {
        {"\"dim\": 8192", "\"dim\": 8192.5", "model.dim must be an integer"},
        {"\"dim\": 8192,", "", "missing key model.dim"},
        {"\"count\": 8", "\"count\": 0", "device.count must be an integer >= 1"},
        {"\"mem_efficiency\": 0.6", "\"mem_efficiency\": 1.5", "device.mem_efficiency must be"},
        {"\"latency_s\": 20e-6", "\"latency_s\": -1", "network.latency_s must be a number >= 0"},
        {"\"ssd_bytes\": 15.36e12", "\"ssd_byte\": 15.36e12", "unknown key store.ssd_byte"},
        {"\"dram_bytes\": 1e12", "\"dram_bytes\": \"1e12\"", "store.dram_bytes must be"},
        {"\"moonlet-profile/1\"", "\"moonlet-profile/2\"", "format must be"},
        {"\"store\": {", "\"stor\": {", "unknown key stor"},
        {"\"n_kv_heads\": 8", "\"n_kv_heads\": 7", "n_kv_heads must divide n_heads"},
        {"\"head_dim\": 128", "\"head_dim\": 127", "head_dim (127) must be even"},
        {"\"store\": {", "\"fitted\": {\"a0\": 1}, \"store\": {", "missing key fitted.a1"},
        {"\"model\": {", "\"model\": [", "not a JSON object"},
    };
    moon_log_set_level(0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        moon_profile_t       p;
        moon_profile_error_t e = {{0}};

        memset(&p, 0x5a, sizeof(p));
        CU_ASSERT_EQUAL(moon_profile_parse(edited(cases[i].from, cases[i].to), "x", &p, &e),
                        MOON_ERR_CORRUPT);
        if (strstr(e.msg, cases[i].expect) == NULL) {
            fprintf(stderr, "case %zu: got '%s', want '%s'\n", i, e.msg, cases[i].expect);
            CU_FAIL("error message");
        }
        CU_ASSERT_EQUAL(((unsigned char *)&p)[0], 0x5a); /* untouched */
    }
    moon_log_set_level(MOON_LOG_WARN);
}

/* Field by field (padding bytes may differ). */
static int same_profile(const moon_profile_t *a, const moon_profile_t *b)
{
    return strcmp(a->name, b->name) == 0 && strcmp(a->doc, b->doc) == 0 &&
           memcmp(&a->shape, &b->shape, sizeof(a->shape)) == 0 &&
           a->weight_bytes_per_param == b->weight_bytes_per_param &&
           a->kv_bytes_per_elem == b->kv_bytes_per_elem &&
           strcmp(a->device.name, b->device.name) == 0 && a->device.count == b->device.count &&
           a->device.flops_per_s == b->device.flops_per_s &&
           a->device.prefill_efficiency == b->device.prefill_efficiency &&
           a->device.decode_efficiency == b->device.decode_efficiency &&
           a->device.mem_bytes_per_s == b->device.mem_bytes_per_s &&
           a->device.mem_efficiency == b->device.mem_efficiency &&
           a->device.mem_bytes == b->device.mem_bytes &&
           a->device.mem_usable == b->device.mem_usable &&
           a->device.step_overhead_s == b->device.step_overhead_s &&
           a->network.nics_per_node == b->network.nics_per_node &&
           a->network.nic_bits_per_s == b->network.nic_bits_per_s &&
           a->network.nic_efficiency == b->network.nic_efficiency &&
           a->network.latency_s == b->network.latency_s &&
           memcmp(&a->store, &b->store, sizeof(a->store)) == 0 &&
           a->fit.enabled == b->fit.enabled && a->fit.a0 == b->fit.a0 && a->fit.a1 == b->fit.a1 &&
           a->fit.a2 == b->fit.a2 && a->fit.d0 == b->fit.d0 && a->fit.d1 == b->fit.d1 &&
           a->fit.d2 == b->fit.d2 && a->fit_handoff_s == b->fit_handoff_s &&
           a->fit_request_s == b->fit_request_s && a->fit_step_gap_s == b->fit_step_gap_s &&
           strcmp(a->fit_source, b->fit_source) == 0;
}

/* Calibration writes a fitted variant; it loads back equal and the cost
 * model then follows the fit, every call paying the engine hand-off too and
 * every decode step the in-service step gap. */
static void test_fitted_round_trip(void)
{
    moon_profile_t  p, q;
    moon_cost_fit_t fit = {
        .a0 = 1e-3, .a1 = 2.5e-5, .a2 = 3e-10, .d0 = 4e-3, .d1 = 1e-4, .d2 = 7e-8};
    char path[] = "/tmp/moon_profile_XXXXXX";
    int  fd     = mkstemp(path);

    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_EQUAL_FATAL(moon_profile_load(MOON_PROFILE_DEFAULT, MOON_PROFILE_DIR, &p, NULL),
                          MOON_OK);
    fit.a0 = -1;
    CU_ASSERT_EQUAL(moon_profile_set_fit(&p, &fit, "x"), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_FALSE(p.fit.enabled);
    fit.a0 = 1e-3;
    CU_ASSERT_EQUAL(moon_profile_set_fit(&p, &fit, "calibration: cpu, 2 threads"), MOON_OK);
    snprintf(p.name, sizeof(p.name), "fitted-here");
    p.fit_handoff_s  = 5e-5;
    p.fit_step_gap_s = 2e-4;
    p.fit_request_s  = 3e-4;
    CU_ASSERT_EQUAL_FATAL(moon_profile_write(&p, path), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_profile_load(path, NULL, &q, NULL), MOON_OK);
    unlink(path);
    CU_ASSERT_TRUE(same_profile(&p, &q));
    CU_ASSERT_TRUE(q.fit.enabled);
    CU_ASSERT_STRING_EQUAL(q.fit_source, "calibration: cpu, 2 threads");
    {
        moon_cost_config_t c = moon_profile_cost(&q);
        CU_ASSERT_DOUBLE_EQUAL(q.fit_handoff_s, 5e-5, 0.0);
        CU_ASSERT_DOUBLE_EQUAL(moon_cost_prefill_s(&c, 0, 100), 5e-5 + 1e-3 + 2.5e-3 + 3e-6, 1e-15);
        CU_ASSERT_DOUBLE_EQUAL(q.fit_step_gap_s, 2e-4, 0.0);
        CU_ASSERT_DOUBLE_EQUAL(q.fit_request_s, 3e-4, 0.0); /* the prefill actor's, not a0 */
        CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_s(&c, 2, 300), 5e-5 + 2e-4 + 4e-3 + 2e-4 + 2.1e-5,
                               1e-15);
    }
    /* a profile without a fit writes no "fitted" section */
    CU_ASSERT_EQUAL_FATAL(moon_profile_load(MOON_PROFILE_DEFAULT, MOON_PROFILE_DIR, &p, NULL),
                          MOON_OK);
    fd = mkstemp(strcpy(path, "/tmp/moon_profile_XXXXXX"));
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_EQUAL_FATAL(moon_profile_write(&p, path), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_profile_load(path, NULL, &q, NULL), MOON_OK);
    unlink(path);
    CU_ASSERT_TRUE(same_profile(&p, &q));
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(moon_profile_write(&p, "/nonexistent/dir/p.json"), MOON_ERR_IO);
    moon_log_set_level(MOON_LOG_WARN);
}

MOON_TEST_MAIN("profile", NULL, NULL, test_default_profile, test_h200_profile_and_paths,
               test_family_profiles, test_strict_errors_name_the_key, test_fitted_round_trip)
