/* tests/unit/model/test_numpy_xcheck.c - logits of random models (MHA and
 * GQA) and of stories260K, every position of a prompt, against an
 * independent NumPy implementation (tests/data/scripts/numpy_llama.py, in
 * float64). Tolerance: 1e-4 x max(1, max |numpy logit|). Reports itself
 * skipped when python3 with numpy is not available. */
#include "model_test_util.h"

#include <stdlib.h>
#include <string.h>

#define TOL 1e-4f
#define SCRIPT MOON_TEST_DATA_DIR "/scripts/numpy_llama.py"

static int have_numpy(void)
{
    return system(MOON_PYTHON3 " -c 'import numpy' >/dev/null 2>&1") == 0;
}

static void xcheck(moon_model_t *m, const char *path, moon_backend_kind_t kind, const int32_t *toks,
                   uint32_t n)
{
    const moon_model_config_t *c    = moon_model_config(m);
    moon_engine_config_t       ecfg = {.kind = kind, .n_threads = 2, .max_batch = 1};
    moon_kv_config_t           kcfg = moon_model_kv_config(c, 8, 16, 1);
    moon_engine_t             *eng;
    moon_kv_cache_t           *kv;
    uint32_t                   seq;
    float                     *ours = malloc((size_t)n * c->vocab_size * sizeof(float));
    float                     *want = malloc((size_t)n * c->vocab_size * sizeof(float));
    char                       cmd[4096], out[256];
    int                        len;
    FILE                      *f;
    float                      worst = 0.0f;

    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg, &eng), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(kv, &seq), MOON_OK);
    for (uint32_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL_FATAL(
            moon_engine_decode(eng, kv, &seq, &toks[i], 1, ours + (size_t)i * c->vocab_size, NULL),
            MOON_OK);
    }
    snprintf(out, sizeof(out), "/tmp/moon_test_numpy_%d.f32", (int)getpid());
    len = snprintf(cmd, sizeof(cmd), "%s %s %s %s", MOON_PYTHON3, SCRIPT, path, out);
    for (uint32_t i = 0; i < n; i++) {
        len += snprintf(cmd + len, sizeof(cmd) - (size_t)len, " %d", toks[i]);
    }
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    f = fopen(out, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fread(want, sizeof(float), (size_t)n * c->vocab_size, f),
                    (size_t)n * c->vocab_size);
    fclose(f);
    unlink(out);
    for (uint32_t i = 0; i < n; i++) {
        worst = fmaxf(worst, mt_rel_diff(ours + (size_t)i * c->vocab_size,
                                         want + (size_t)i * c->vocab_size, c->vocab_size));
    }
    printf("\n  %s heads %u/%u, %u positions: max rel diff vs numpy %.2e ", moon_engine_name(eng),
           c->n_heads, c->n_kv_heads, n, (double)worst);
    CU_ASSERT(worst <= TOL);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(eng);
    free(ours);
    free(want);
}

static void test_random_models(void)
{
    moon_model_config_t shapes[] = {mt_shape(64, 128, 2, 4, 4, 300, 64),
                                    mt_shape(64, 96, 3, 8, 2, 280, 64)};
    int32_t             toks[12];
    uint64_t            rng = 99;

    if (!have_numpy()) {
        moon_test_skip("python3 with numpy not found");
        return;
    }
    for (size_t s = 0; s < MOON_ARRAY_SIZE(shapes); s++) {
        char          path[256];
        moon_model_t *m = mt_random_model(&shapes[s], MOON_GGML_F32, 31 + s, path, sizeof(path));
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        for (int i = 0; i < 12; i++) {
            toks[i] = (int32_t)(moon_test_rand(&rng) % shapes[s].vocab_size);
        }
        xcheck(m, path, MOON_BACKEND_REF, toks, 12);
        xcheck(m, path, MOON_BACKEND_CPU, toks, 12);
        moon_model_destroy(m);
        unlink(path);
    }
}

static void test_stories260k(void)
{
    const char   *path    = MOON_MODELS_DIR "/stories260K/stories260K.gguf";
    const int32_t toks[5] = {1, 403, 407, 261, 378};
    moon_model_t *m;

    if (!have_numpy()) {
        moon_test_skip("python3 with numpy not found");
        return;
    }
    CU_ASSERT_EQUAL_FATAL(moon_model_load(path, &m), MOON_OK);
    xcheck(m, path, MOON_BACKEND_CPU, toks, 5);
    moon_model_destroy(m);
}

MOON_TEST_MAIN("numpy_xcheck", NULL, NULL, test_random_models, test_stories260k)
