/* tests/unit/model/test_golden.c - the bundled stories260K GGUF reproduces
 * every case of tests/data/stories260K/expected_greedy.json token for token
 * (ids and text), on the reference and the fast CPU backends, token by token
 * (decode) and with the prompt run as one prefill chunk; on the CUDA backend
 * too where the build has it and a device is present (else "skipped"). Also
 * the first-step sanity logits (tolerance 1e-4 relative). */
#include "model_test_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORIES MOON_MODELS_DIR "/stories260K/stories260K.gguf"
#define EXPECTED MOON_TEST_DATA_DIR "/stories260K/expected_greedy.json"

static moon_model_t *model;
static cJSON        *expected;

static int setup(void)
{
    FILE *f = fopen(EXPECTED, "rb");
    char *buf;
    long  n;

    if (f == NULL || moon_model_load(STORIES, &model) != MOON_OK) {
        return 1;
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        n = 0;
    }
    fclose(f);
    expected = cJSON_Parse(buf);
    free(buf);
    return expected == NULL;
}

static int teardown(void)
{
    cJSON_Delete(expected);
    moon_model_destroy(model);
    return 0;
}

/* Runs one case: greedy, BOS + prompt, `steps` forward passes, stop on BOS. */
static void run_case(moon_backend_kind_t kind, int prefill_prompt, const cJSON *cs)
{
    const moon_model_config_t *c      = moon_model_config(model);
    const moon_tokenizer_t    *tok    = moon_model_tokenizer(model);
    const char                *prompt = cJSON_GetObjectItem(cs, "prompt")->valuestring;
    int                        steps  = cJSON_GetObjectItem(cs, "steps")->valueint;
    const cJSON               *want_p = cJSON_GetObjectItem(cs, "prompt_ids");
    const cJSON               *want_g = cJSON_GetObjectItem(cs, "generated_ids");
    const char                *want_t = cJSON_GetObjectItem(cs, "text")->valuestring;
    moon_engine_config_t ecfg = {.kind = kind, .n_threads = 2, .max_batch = 4, .max_chunk = 64};
    moon_kv_config_t     kcfg = moon_model_kv_config(c, 16, 64, 2);
    moon_engine_t       *eng  = NULL;
    moon_kv_cache_t     *kv   = NULL;
    int32_t              ids[600], gen[600];
    size_t               n_ids  = 0;
    int                  n_gen  = 0;
    float               *logits = malloc(c->vocab_size * sizeof(float));
    char                 text[4096];
    size_t               len;
    uint32_t             seq;
    int32_t              token;
    int                  pos = 0;

    CU_ASSERT_EQUAL_FATAL(moon_engine_create(model, &ecfg, &eng), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(kv, &seq), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(
        moon_tokenizer_encode(tok, prompt, strlen(prompt), true, ids, 600, &n_ids), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(n_ids, (size_t)cJSON_GetArraySize(want_p));
    for (size_t i = 0; i < n_ids; i++) {
        CU_ASSERT_EQUAL(ids[i], cJSON_GetArrayItem(want_p, (int)i)->valueint);
    }
    if (prefill_prompt) {
        /* whole prompt in one chunk; the forced prompt tokens are "generated" too */
        CU_ASSERT_EQUAL_FATAL(moon_engine_prefill(eng, kv, seq, ids, (uint32_t)n_ids, logits, NULL),
                              MOON_OK);
        for (size_t i = 1; i < n_ids; i++) {
            gen[n_gen++] = ids[i];
        }
        pos = (int)n_ids;
    } else {
        CU_ASSERT_EQUAL_FATAL(moon_engine_decode(eng, kv, &seq, &ids[0], 1, logits, NULL), MOON_OK);
        pos = 1;
        for (size_t i = 1; i < n_ids; i++) {
            gen[n_gen++] = ids[i];
            CU_ASSERT_EQUAL_FATAL(moon_engine_decode(eng, kv, &seq, &ids[i], 1, logits, NULL),
                                  MOON_OK);
            pos++;
        }
    }
    for (;;) {
        token        = moon_argmax(logits, c->vocab_size);
        gen[n_gen++] = token;
        if (pos >= steps || token == 1) {
            break;
        }
        CU_ASSERT_EQUAL_FATAL(moon_engine_decode(eng, kv, &seq, &token, 1, logits, NULL), MOON_OK);
        pos++;
    }
    CU_ASSERT_EQUAL(n_gen, cJSON_GetArraySize(want_g));
    for (int i = 0; i < n_gen && i < cJSON_GetArraySize(want_g); i++) {
        if (gen[i] != cJSON_GetArrayItem(want_g, i)->valueint) {
            printf("\n%s case '%s': step %d got %d want %d\n", moon_engine_name(eng), prompt, i,
                   gen[i], cJSON_GetArrayItem(want_g, i)->valueint);
            CU_FAIL("generated id differs");
            break;
        }
    }
    CU_ASSERT_EQUAL(moon_tokenizer_decode(tok, 1, gen, (size_t)n_gen, text, sizeof(text), &len),
                    MOON_OK);
    CU_ASSERT_STRING_EQUAL(text, want_t);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(eng);
    free(logits);
}

static void run_all(moon_backend_kind_t kind, int prefill_prompt)
{
    const cJSON *cases = cJSON_GetObjectItem(expected, "cases");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(cases), 3);
    for (int i = 0; i < cJSON_GetArraySize(cases); i++) {
        run_case(kind, prefill_prompt, cJSON_GetArrayItem(cases, i));
    }
}

static void test_ref_decode(void)
{
    run_all(MOON_BACKEND_REF, 0);
}
static void test_ref_prefill(void)
{
    run_all(MOON_BACKEND_REF, 1);
}
static void test_cpu_decode(void)
{
    run_all(MOON_BACKEND_CPU, 0);
}
static void test_cpu_prefill(void)
{
    run_all(MOON_BACKEND_CPU, 1);
}

#ifdef MOON_WITH_CUDA
static void test_cuda_decode(void)
{
    if (!mt_no_cuda_device()) {
        run_all(MOON_BACKEND_CUDA, 0);
    }
}
static void test_cuda_prefill(void)
{
    if (!mt_no_cuda_device()) {
        run_all(MOON_BACKEND_CUDA, 1);
    }
}
#endif

static void check_first_step(moon_backend_kind_t kind)
{
    const moon_model_config_t *c    = moon_model_config(model);
    moon_engine_config_t       ecfg = {.kind = kind, .n_threads = 2};
    moon_kv_config_t           kcfg = moon_model_kv_config(c, 16, 4, 1);
    moon_engine_t             *eng;
    moon_kv_cache_t           *kv;
    uint32_t                   seq;
    int32_t                    bos = 1;
    float                      logits[512];

    CU_ASSERT_EQUAL_FATAL(moon_engine_create(model, &ecfg, &eng), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(kv, &seq), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_engine_decode(eng, kv, &seq, &bos, 1, logits, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_argmax(logits, 512), 403);
    CU_ASSERT(fabsf(logits[1] - 8.40434f) <= 1e-4f * 8.40434f);
    CU_ASSERT(fabsf(logits[403] - 17.02352f) <= 1e-4f * 17.02352f);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(eng);
}

static void test_first_step_logits(void)
{
    check_first_step(MOON_BACKEND_REF);
    check_first_step(MOON_BACKEND_CPU);
}

#ifdef MOON_WITH_CUDA
static void test_cuda_first_step_logits(void)
{
    if (!mt_no_cuda_device()) {
        check_first_step(MOON_BACKEND_CUDA);
    }
}
#endif

#ifdef MOON_WITH_CUDA
#define CUDA_TESTS , test_cuda_first_step_logits, test_cuda_decode, test_cuda_prefill
#else
#define CUDA_TESTS
#endif
MOON_TEST_MAIN("golden", setup, teardown, test_first_step_logits, test_ref_decode, test_ref_prefill,
               test_cpu_decode, test_cpu_prefill CUDA_TESTS)
