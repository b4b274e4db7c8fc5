/* tests/unit/model/test_prefill_rows.c - moon_engine_prefill_rows on
 * stories260K: row i's logits are those a prefill of the first i + 1 tokens
 * gives (so the last row's are moon_engine_prefill's), in one chunk or two;
 * the hidden rows agree between the CPU and reference backends and give the
 * logits through the classifier's argmax; COST refuses. */
#include "moon_test.h"
#include "moonlet/kv_cache.h"
#include "moonlet/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N 23u

static moon_model_t              *g_m;
static const moon_model_config_t *g_c;

static double max_diff(const float *a, const float *b, size_t n)
{
    double worst = 0.0;

    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    }
    return worst;
}

/* An engine of kind, a KV cache and an empty sequence in it. */
static void open_engine(moon_backend_kind_t kind, moon_engine_t **e, moon_kv_cache_t **kv,
                        uint32_t *seq)
{
    moon_engine_config_t ecfg = {.kind = kind, .max_chunk = 64, .n_threads = 1};
    moon_kv_config_t     kcfg = moon_model_kv_config(g_c, 8, 16, 1);

    if (kind == MOON_BACKEND_COST) {
        ecfg.cost                = moon_cost_llama3_70b();
        ecfg.cost.shape.n_layers = 0; /* the model's own shape */
    }
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(g_m, &ecfg, e), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, kv), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(*kv, seq), MOON_OK);
}

static void rows_of(moon_backend_kind_t kind, const int32_t *ids, uint32_t split, float *logits,
                    float *hidden)
{
    moon_engine_t   *e;
    moon_kv_cache_t *kv;
    uint32_t         seq;

    open_engine(kind, &e, &kv, &seq);
    CU_ASSERT_EQUAL(moon_engine_prefill_rows(e, kv, seq, ids, split, logits, hidden, NULL),
                    MOON_OK);
    if (split < N) { /* the rest as a second chunk, after the first's KV */
        CU_ASSERT_EQUAL(
            moon_engine_prefill_rows(e, kv, seq, ids + split, N - split,
                                     logits ? logits + (size_t)split * g_c->vocab_size : NULL,
                                     hidden ? hidden + (size_t)split * g_c->dim : NULL, NULL),
            MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_kv_seq_len(kv, seq), N);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(e);
}

static void test_rows(void)
{
    int32_t ids[N];
    size_t  V = g_c->vocab_size, D = g_c->dim;
    float  *lg = malloc(N * V * sizeof(float)), *one = malloc(V * sizeof(float));
    float  *hc = malloc(N * D * sizeof(float)), *hr = malloc(N * D * sizeof(float));
    double  worst = 0.0;

    CU_ASSERT_FATAL(lg && one && hc && hr);
    for (uint32_t i = 0; i < N; i++) {
        ids[i] = (int32_t)((i * 37u + 1u) % g_c->vocab_size);
    }
    rows_of(MOON_BACKEND_CPU, ids, 9, lg, hc);
    rows_of(MOON_BACKEND_REF, ids, N, NULL, hr);
    /* row i: a plain prefill of ids[0..i] */
    for (uint32_t i = 0; i < N; i += 5) {
        moon_engine_t   *e;
        moon_kv_cache_t *kv;
        uint32_t         seq;

        open_engine(MOON_BACKEND_CPU, &e, &kv, &seq);
        CU_ASSERT_EQUAL(moon_engine_prefill(e, kv, seq, ids, i + 1, one, NULL), MOON_OK);
        worst = fmax(worst, max_diff(one, lg + i * V, V));
        moon_kv_cache_destroy(kv);
        moon_engine_destroy(e);
    }
    printf("\n  rows vs prefills: max diff %.2e, hidden cpu vs ref %.2e ", worst,
           max_diff(hc, hr, N * D));
    CU_ASSERT(worst <= 1e-4);
    CU_ASSERT(max_diff(hc, hr, N * D) <= 1e-4);
    free(lg);
    free(one);
    free(hc);
    free(hr);
}

static void test_cost_refuses(void)
{
    moon_engine_config_t ecfg = {.kind = MOON_BACKEND_COST, .max_chunk = 64};
    moon_kv_config_t     kcfg = moon_model_kv_config(g_c, 8, 16, 1);
    moon_engine_t       *e;
    moon_kv_cache_t     *kv;
    uint32_t             seq;
    int32_t              ids[2] = {1, 2};
    float                h[2 * 1024];

    ecfg.cost                = moon_cost_llama3_70b();
    ecfg.cost.shape.n_layers = 0; /* the model's own shape */
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(g_m, &ecfg, &e), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(kv, &seq), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill_rows(e, kv, seq, ids, 2, NULL, h, NULL),
                    MOON_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(moon_kv_seq_len(kv, seq), 0); /* nothing changed */
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(e);
}

int main(void)
{
    int rc;

    if (moon_model_load(MOON_MODELS_DIR "/stories260K/stories260K.gguf", &g_m) != MOON_OK) {
        fprintf(stderr, "test_prefill_rows: cannot load stories260K\n");
        return 1;
    }
    g_c = moon_model_config(g_m);
    rc  = MOON_TEST_RUN("prefill_rows", NULL, NULL, test_rows, test_cost_refuses);
    moon_model_destroy(g_m);
    return rc;
}
