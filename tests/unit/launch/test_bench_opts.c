/* tests/unit/launch/test_bench_opts.c - `moonlet bench` option parsing (a
 * moonlet/config.h table): defaults, both spellings, vLLM aliases, strict
 * errors naming the flag, the workload positional, and endpoint URLs. */
#include "loadgen_http.h"
#include "loadgen_opts.h"

#include "moon_test.h"

#include <string.h>

static moon_status_t parse(moon_loadgen_opts_t *o, char *err, const char *a, const char *b,
                           const char *c, const char *d)
{
    char *argv[6] = {"bench"};
    int   argc    = 1;

    if (a)
        argv[argc++] = (char *)a;
    if (b)
        argv[argc++] = (char *)b;
    if (c)
        argv[argc++] = (char *)c;
    if (d)
        argv[argc++] = (char *)d;
    err[0] = '\0';
    return moon_loadgen_opts_parse(argc, argv, o, err, 200);
}

static void test_defaults(void)
{
    moon_loadgen_opts_t o;
    char                err[200];

    CU_ASSERT_EQUAL_FATAL(parse(&o, err, "random", NULL, NULL, NULL), MOON_OK);
    CU_ASSERT_EQUAL(o.workload, MOON_LOADGEN_WL_RANDOM);
    CU_ASSERT_STRING_EQUAL(o.base_url, "http://127.0.0.1:8000");
    CU_ASSERT_STRING_EQUAL(o.endpoint, "completions");
    CU_ASSERT_PTR_NULL(o.model);
    CU_ASSERT_EQUAL(o.num_prompts, 100);
    CU_ASSERT_EQUAL(o.rate, 0.0);
    CU_ASSERT_EQUAL(o.burstiness, 1.0);
    CU_ASSERT_EQUAL(o.vocab, 512);
    CU_ASSERT_EQUAL(o.block_scale, 512);
    CU_ASSERT_EQUAL(o.ignore_eos, 1);
    CU_ASSERT_EQUAL(o.progress, 1);
    CU_ASSERT_TRUE(moon_loadgen_opts_tokens(&o));
    CU_ASSERT_FALSE(moon_loadgen_opts_is_chat(&o));
}

static void test_spellings_and_aliases(void)
{
    moon_loadgen_opts_t o;
    char                err[200];

    CU_ASSERT_EQUAL_FATAL(parse(&o, err, "trace", "t.jsonl", "--request-rate=2.5", "--seed"),
                          MOON_ERR_INVALID_PARAM); /* --seed without its value */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--seed"));
    CU_ASSERT_EQUAL_FATAL(parse(&o, err, "trace", "t.jsonl", "--request-rate=2.5", "--seed=9"),
                          MOON_OK);
    CU_ASSERT_EQUAL(o.workload, MOON_LOADGEN_WL_TRACE);
    CU_ASSERT_STRING_EQUAL(o.trace_path, "t.jsonl");
    CU_ASSERT_EQUAL(o.rate, 2.5);
    CU_ASSERT_EQUAL(o.seed, 9);
    CU_ASSERT_EQUAL(o.num_prompts, 0); /* trace: every record */
    CU_ASSERT_EQUAL_FATAL(
        parse(&o, err, "--random-input-len", "7", "shared-prefix", "--ignore-eos"), MOON_OK);
    CU_ASSERT_EQUAL(o.input_len, 7);
    CU_ASSERT_EQUAL(o.workload, MOON_LOADGEN_WL_SHARED_PREFIX);
    CU_ASSERT_EQUAL(o.ignore_eos, 1);
    CU_ASSERT_EQUAL_FATAL(parse(&o, err, "random", "--no-ignore-eos", "--endpoint=chat", NULL),
                          MOON_OK);
    CU_ASSERT_EQUAL(o.ignore_eos, 0);
    CU_ASSERT_TRUE(moon_loadgen_opts_is_chat(&o));
    CU_ASSERT_FALSE(moon_loadgen_opts_tokens(&o)); /* chat carries words */
    CU_ASSERT_EQUAL_FATAL(parse(&o, err, "random", "--ignore-eos=0", "--prompt-format=words",
                                "--random-range-ratio=0.5"),
                          MOON_OK);
    CU_ASSERT_EQUAL(o.ignore_eos, 0);
    CU_ASSERT_EQUAL(o.prompt_format, MOON_LOADGEN_FMT_WORDS);
    CU_ASSERT_FALSE(moon_loadgen_opts_tokens(&o));
    CU_ASSERT_EQUAL(o.range_ratio, 0.5);
    CU_ASSERT_EQUAL_FATAL(parse(&o, err, "random", "--goodput", "ttft:500 tpot:50.5", NULL),
                          MOON_OK);
    CU_ASSERT_EQUAL(o.slo_ttft_ms, 500);
    CU_ASSERT_EQUAL(o.slo_tpot_ms, 50.5);
    CU_ASSERT_EQUAL(o.slo_e2el_ms, 0);
    CU_ASSERT_EQUAL_FATAL(parse(&o, err, "random", "--endpoint", "/v1/chat/completions", NULL),
                          MOON_OK);
    CU_ASSERT_TRUE(moon_loadgen_opts_is_chat(&o));
    CU_ASSERT_EQUAL_FATAL(parse(&o, err, "--help", NULL, NULL, NULL), MOON_OK);
    CU_ASSERT_TRUE(o.help);
}

static void test_errors_name_the_flag(void)
{
    static const struct {
        const char *a, *b, *msg; /* the error must contain msg */
    } cases[] = {
        {"--bogus", NULL, "'--bogus'"},
        {"--rate", "fast", "--rate: 'fast'"},
        {"--rate", "-1", "--rate: '-1'"},
        {"--rate", "nan", "--rate: 'nan'"},
        {"--num-prompts", "12x", "--num-prompts: '12x'"},
        {"--num-prompts", "-3", "--num-prompts: '-3'"},
        {"--num-prompts=", NULL, "--num-prompts: ''"},
        {"--vocab", "3", "--vocab: '3'"},
        {"--range-ratio", "1.5", "--range-ratio: '1.5'"},
        {"--block-scale", "1024", "--block-scale: '1024'"},
        {"--seed", "99999999999999999999999", "--seed: '99999999999999999999999'"},
        {"--ignore-eos=maybe", NULL, "--ignore-eos: 'maybe'"},
        {"--prompt-format", "bytes", "--prompt-format: 'bytes'"},
        {"--endpoint", "embeddings",
         "--endpoint: 'embeddings' is not completions, chat or a /path"},
        {"--base-url", "localhost:8000",
         "--base-url: 'localhost:8000' is not an http:// or https:// URL"},
        {"extra", NULL, "unexpected argument 'extra'"},
        {"--goodput", "ttft:", "--goodput: 'ttft:'"},
        {"--goodput", "ttft:-1", "--goodput: 'ttft:-1'"},
        {"--goodput", "itl:5", "--goodput: 'itl:5'"},
        {"--goodput", "ttft:5x", "--goodput: 'ttft:5x'"},
    };
    moon_loadgen_opts_t o;
    char                err[200];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CU_ASSERT_EQUAL(parse(&o, err, "random", cases[i].a, cases[i].b, NULL),
                        MOON_ERR_INVALID_PARAM);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].msg));
    }
    CU_ASSERT_EQUAL(parse(&o, err, NULL, NULL, NULL, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_STRING_EQUAL(err, "missing workload: random, shared-prefix or trace FILE");
    CU_ASSERT_EQUAL(parse(&o, err, "sharegpt", NULL, NULL, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(parse(&o, err, "trace", NULL, NULL, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_STRING_EQUAL(err, "trace: missing FILE");
    CU_ASSERT_EQUAL(parse(&o, err, "random", "--endpoint=chat", "--prompt-format=tokens", NULL),
                    MOON_ERR_INVALID_PARAM);
}

static void test_urls(void)
{
    char url[64];

    CU_ASSERT_EQUAL(moon_loadgen_http_url("http://h:1", "/v1/models", url, sizeof(url)), MOON_OK);
    CU_ASSERT_STRING_EQUAL(url, "http://h:1/v1/models");
    CU_ASSERT_EQUAL(moon_loadgen_http_url("http://h:1/", "/v1/models", url, sizeof(url)), MOON_OK);
    CU_ASSERT_STRING_EQUAL(url, "http://h:1/v1/models");
    CU_ASSERT_EQUAL(moon_loadgen_http_url("http://h:1/v1/", "/v1/completions", url, sizeof(url)),
                    MOON_OK);
    CU_ASSERT_STRING_EQUAL(url, "http://h:1/v1/completions");
    CU_ASSERT_EQUAL(moon_loadgen_http_url("http://h:1", "/v1/completions", url, 10),
                    MOON_ERR_INVALID_PARAM);
}

MOON_TEST_MAIN("bench_opts", NULL, NULL, test_defaults, test_spellings_and_aliases,
               test_errors_name_the_flag, test_urls)
