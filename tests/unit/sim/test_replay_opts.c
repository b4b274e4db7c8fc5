/* tests/unit/sim/test_replay_opts.c - `moonlet replay` option parsing: the
 * defaults, both value forms, and each kind of bad input naming the option. */
#include "moon_test.h"
#include "replay_opts.h"

#include <string.h>

#define ARGV(...) ((char *[]){"replay", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"replay", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(o, err, ...)                                                                         \
    moon_replay_opts_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (o), (err), sizeof(err))

static void test_defaults_and_forms(void)
{
    moon_replay_opts_t o;
    char               err[256];

    CU_ASSERT_EQUAL_FATAL(PARSE(&o, err, "--trace", "t.jsonl", "--sim", "--out=d"), 0);
    CU_ASSERT_STRING_EQUAL(o.trace, "t.jsonl");
    CU_ASSERT_STRING_EQUAL(o.out, "d");
    CU_ASSERT_TRUE(o.sim);
    CU_ASSERT_FALSE(o.colocated);
    CU_ASSERT_PTR_NULL(o.policy);
    CU_ASSERT_STRING_EQUAL(o.profile, "llama3-70b-8xa800");
    CU_ASSERT_EQUAL(o.nodes_prefill, 8);
    CU_ASSERT_EQUAL(o.nodes_decode, 8);
    CU_ASSERT_EQUAL(o.block_tokens, 512);
    CU_ASSERT_EQUAL(o.seed, 1);
    CU_ASSERT_DOUBLE_EQUAL(o.ttft_slo_s, 30.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(o.tbt_slo_s, 0.1, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(o.time_scale, 1.0, 0.0);
    CU_ASSERT_EQUAL(PARSE(&o, err, "--trace", "t", "--sim", "--out", "d", "--nodes-prefill", "3",
                          "--nodes-decode=5", "--colocated", "--policy", "mooncake+reject",
                          "--ttft-slo-ms", "10000", "--tbt-slo-ms=200", "--time-scale", "0.5",
                          "--seed", "42", "--profile", "llama3-8b-h200", "--block-tokens", "256",
                          "--max-requests", "100", "--block-scale", "16", "--max-context=512"),
                    0);
    CU_ASSERT_EQUAL(o.nodes_prefill, 3);
    CU_ASSERT_EQUAL(o.nodes_decode, 5);
    CU_ASSERT_TRUE(o.colocated);
    CU_ASSERT_STRING_EQUAL(o.policy, "mooncake+reject");
    CU_ASSERT_DOUBLE_EQUAL(o.ttft_slo_s, 10.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(o.tbt_slo_s, 0.2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(o.time_scale, 0.5, 0.0);
    CU_ASSERT_EQUAL(o.seed, 42);
    CU_ASSERT_EQUAL(o.block_tokens, 256);
    CU_ASSERT_EQUAL(o.max_requests, 100);
    CU_ASSERT_EQUAL(o.block_scale, 16);
    CU_ASSERT_EQUAL(o.max_context, 512);
    /* --list-policies and --help need nothing else */
    CU_ASSERT_EQUAL(PARSE(&o, err, "--list-policies"), 0);
    CU_ASSERT_TRUE(o.list_policies);
    CU_ASSERT_EQUAL(PARSE(&o, err, "--help"), 0);
}

static void test_bad_input_names_the_option(void)
{
    static const struct {
        const char *args[5];
        const char *expect;
    } cases[] = {
        {{"--bogus"}, "--bogus"},
        {{"--trace"}, "--trace"},
        {{"--trace", ""}, "--trace, --out and --profile take a non-empty value"},
        {{"--trace", "t", "--nodes-prefill", "0"},
         "--nodes-prefill: '0' is not an integer in [1, 4096]"},
        {{"--trace", "t", "--nodes-decode", "-1"}, "--nodes-decode: '-1' is not"},
        {{"--trace", "t", "--seed", "12x"}, "--seed: '12x' is not"},
        {{"--trace", "t", "--time-scale", "0"}, "--time-scale: '0' is not a finite number"},
        {{"--trace", "t", "--tbt-slo-ms", "abc"}, "--tbt-slo-ms: 'abc' is not a finite number"},
        {{"--trace", "t", "--ttft-slo-ms", "inf"}, "--ttft-slo-ms: 'inf' is not a finite number"},
        {{"--trace", "t", "--sim=maybe"}, "--sim"},
        {{"--trace", "t", "--sim"}, "--out is required"},
        {{"--trace", "t", "--out=d"}, NULL}, /* over HTTP, to --url's default */
        {{"--trace", "t", "--out=d", "--policy=a"}, "over HTTP the server places requests"},
        {{"--trace", "t", "--out=d", "--colocated"}, "need --sim or --real"},
        {{"--trace", "t", "--out=d", "--shed-share=0.9"}, "need --sim or --real"},
        {{"--trace", "t", "--sim", "--out=d", "--shed-after=0"}, "--shed-after: '0' is not"},
        {{"--trace", "t", "--real", "--out=d"}, "--real needs --model"},
        {{"--sim", "--out", "d"}, "--trace is required"},
        {{"--trace", "t", "--sim", "--out=d", "--policy=a"}, NULL},
        {{"--trace=t", "--sim", "--out=d", "--policy=a", "--compare=b"}, "exclude each other"},
        {{"--trace", "t", "--block-tokens", "99999999999"}, "--block-tokens: '99999999999'"},
        {{"--trace", "t", "--block-scale", "513"},
         "--block-scale: '513' is not an integer in [0, 512]"},
        {{"--trace", "t", "--max-context", "1"}, "--max-context: 1 leaves no room"},
        {{"--trace", "t", "extra"}, "unexpected argument 'extra'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char              *argv[7] = {"replay"};
        int                argc    = 1;
        moon_replay_opts_t o;
        char               err[256];
        int                rc;

        for (int k = 0; k < 5 && cases[i].args[k] != NULL; k++) {
            argv[argc++] = (char *)cases[i].args[k];
        }
        rc = moon_replay_opts_parse(argc, argv, &o, err, sizeof(err));
        if (cases[i].expect == NULL) {
            CU_ASSERT_EQUAL(rc, 0);
            continue;
        }
        CU_ASSERT_EQUAL(rc, -1);
        if (strstr(err, cases[i].expect) == NULL) {
            fprintf(stderr, "case %zu: got '%s', want '%s'\n", i, err, cases[i].expect);
            CU_FAIL("error text");
        }
    }
}

static void test_split_compare(void)
{
    const char *names[MOON_REPLAY_MAX_COMPARE];
    const char *all[] = {"random", "least-loaded", "mooncake"};
    char        buf[64];

    CU_ASSERT_EQUAL(
        moon_replay_split_compare("random,mooncake+reject", buf, sizeof(buf), names, all, 3), 2);
    CU_ASSERT_STRING_EQUAL(names[0], "random");
    CU_ASSERT_STRING_EQUAL(names[1], "mooncake+reject");
    CU_ASSERT_EQUAL(moon_replay_split_compare("all", buf, sizeof(buf), names, all, 3), 3);
    CU_ASSERT_STRING_EQUAL(names[2], "mooncake");
    CU_ASSERT_EQUAL(moon_replay_split_compare("a,a", buf, sizeof(buf), names, all, 3), -1);
    CU_ASSERT_EQUAL(moon_replay_split_compare(",", buf, sizeof(buf), names, all, 3), -1);
    CU_ASSERT_EQUAL(moon_replay_split_compare("a,b", buf, 3, names, all, 3), -1);
}

MOON_TEST_MAIN("replay_opts", NULL, NULL, test_defaults_and_forms, test_bad_input_names_the_option,
               test_split_compare)
