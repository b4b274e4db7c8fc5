/* tests/unit/model/test_cost_model.c - the COST backend: Mooncake Eq. 1 for
 * prefill, the roofline max of bytes read and FLOPs for decode, fitted
 * coefficients, LLaMA3-70B's 320 KB of KV per token, and that the engine
 * interface drives it (with a KV cache, and by lengths without one). */
#include "moon_test.h"
#include "moonlet/model.h"

#include <math.h>

static void test_eq1_and_kv_bytes(void)
{
    moon_cost_config_t c = moon_cost_llama3_70b();
    double             l = 80, d = 8192, n = 1000;

    CU_ASSERT_EQUAL(moon_cost_kv_bytes_per_token(&c), 327680); /* 320 KiB */
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_prefill_flops(&c.shape, 0, 1000),
                           l * (4 * n * n * d + 22 * n * d * d), 1.0);
    /* heads wider than d / n_heads (Qwen3-0.6B: 16 of 128 over d = 1024):
     * attention over q_dim, and the Q and output projections 2 q_dim d each */
    {
        moon_model_config_t q3 = {.n_layers = 28, .dim = 1024, .n_heads = 16, .head_dim = 128};
        double              dq = 1024, qd = 2048;

        CU_ASSERT_DOUBLE_EQUAL(moon_cost_prefill_flops(&q3, 0, 1000),
                               28 * (4 * n * n * qd + 22 * n * dq * dq + 4 * n * dq * (qd - dq)),
                               1.0);
        /* that is 18 d^2 of the other weights plus 4 q_dim d for Q and O */
        CU_ASSERT_DOUBLE_EQUAL(moon_cost_prefill_flops(&q3, 0, 1) - 28 * 4 * qd,
                               28 * (18 * dq * dq + 4 * qd * dq), 1.0);
    }
    /* a cached prefix only saves work: f(p + n) - f(p) */
    CU_ASSERT(moon_cost_prefill_s(&c, 4000, 1000) < moon_cost_prefill_s(&c, 0, 5000));
    CU_ASSERT(moon_cost_prefill_s(&c, 4000, 1000) > moon_cost_prefill_s(&c, 0, 1000));
    /* decode grows with the KV it reads */
    CU_ASSERT(moon_cost_decode_s(&c, 8, 80000) > moon_cost_decode_s(&c, 8, 8000));
}

static void test_engine_interface(void)
{
    moon_engine_config_t ecfg = {.kind = MOON_BACKEND_COST, .max_batch = 4, .max_chunk = 4096};
    moon_engine_t       *eng;
    moon_kv_cache_t     *kv;
    moon_kv_config_t     kcfg;
    static int32_t       toks[4096];
    uint32_t             seq;
    double               t1, t2, td;

    ecfg.cost = moon_cost_llama3_70b();
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(NULL, &ecfg, &eng), MOON_OK);
    CU_ASSERT_STRING_EQUAL(moon_engine_name(eng), "cost");
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, NULL, 0, toks, 4096, NULL, &t1), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(t1, moon_cost_prefill_s(&ecfg.cost, 0, 4096), 1e-12);
    moon_engine_destroy(eng);
    /* with a KV cache (of a tiny shape) the lengths advance and prefixes count */
    ecfg.cost.shape.n_layers   = 2;
    ecfg.cost.shape.n_kv_heads = 1;
    ecfg.cost.shape.head_dim   = 8;
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(NULL, &ecfg, &eng), MOON_OK);
    kcfg             = moon_model_kv_config(&ecfg.cost.shape, 512, 32, 2);
    kcfg.max_seq_len = 16384;
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &seq), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, seq, toks, 4096, NULL, &t1), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, seq, toks, 4096, NULL, &t2), MOON_OK);
    CU_ASSERT(t2 > t1);
    CU_ASSERT_EQUAL(moon_kv_seq_len(kv, seq), 8192);
    CU_ASSERT_EQUAL(moon_engine_decode(eng, kv, &seq, toks, 1, NULL, &td), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(td, moon_cost_decode_s(&ecfg.cost, 1, 8193), 1e-12);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(eng);
}

/* The decode step is the roofline max of its memory and compute terms, by
 * hand for LLaMA3-70B: 69,501,714,432 parameters (139 GB of bf16 weights),
 * 320 KiB of KV per token, 9.6 TB/s and 1,248 TFLOP/s effective. */
static void test_decode_roofline(void)
{
    moon_cost_config_t c   = moon_cost_llama3_70b();
    double             P   = 69501714432.0;
    double             kvt = 327680.0, bw = 9.6e12, fl = 1.248e15;
    double             l = 80, d = 8192;

    CU_ASSERT_DOUBLE_EQUAL(moon_cost_params(&c.shape), P, 0.5);
    /* batch 1, 1000 tokens of context: memory-bound */
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_memory_s(&c, 1000), (2 * P + 1000 * kvt) / bw, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_compute_s(&c, 1, 1000), (2 * P + 4 * l * d * 1000) / fl,
                           1e-12);
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_s(&c, 1, 1000), (2 * P + 1000 * kvt) / bw, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_s(&c, 1, 1000), 0.0145137, 1e-6);
    /* batch 512 of 100-token contexts: compute-bound, 57 ms */
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_s(&c, 512, 51200),
                           (2 * P * 512 + 4 * l * d * 51200) / fl, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_s(&c, 512, 51200), 0.0571346, 1e-6);
    /* compute grows with the batch at a fixed context; memory does not */
    CU_ASSERT(moon_cost_decode_compute_s(&c, 64, 51200) > moon_cost_decode_compute_s(&c, 8, 51200));
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_memory_s(&c, 51200),
                           moon_cost_decode_memory_s(&c, 51200), 0.0);
    /* a separate decode throughput, and the per-call overhead added once */
    c.decode_flops_per_s = fl / 2;
    c.step_overhead_s    = 0.001;
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_s(&c, 512, 51200),
                           0.001 + 2 * (2 * P * 512 + 4 * l * d * 51200) / fl, 1e-12);
}

/* A fitted profile's coefficients replace the roofline. */
static void test_fitted_form(void)
{
    moon_cost_config_t c = moon_cost_llama3_70b();

    c.fit = (moon_cost_fit_t){
        .enabled = 1, .a0 = 0.01, .a1 = 1e-4, .a2 = 1e-8, .d0 = 0.002, .d1 = 1e-4, .d2 = 1e-7};
    CU_ASSERT_EQUAL(moon_cost_check(&c), MOON_OK);
    /* 100 new tokens after 200: 0.01 + 100e-4 + 1e-8 (300^2 - 200^2) */
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_prefill_s(&c, 200, 100), 0.01 + 0.01 + 1e-8 * 50000, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(moon_cost_decode_s(&c, 4, 1000), 0.002 + 4e-4 + 1e-4, 1e-15);
    c.flops_per_s = 0; /* rates are unused by a fit */
    CU_ASSERT_EQUAL(moon_cost_check(&c), MOON_OK);
    c.fit.a2 = -1e-9;
    CU_ASSERT_EQUAL(moon_cost_check(&c), MOON_ERR_INVALID_PARAM);
    c.fit.a2 = NAN;
    CU_ASSERT_EQUAL(moon_cost_check(&c), MOON_ERR_INVALID_PARAM);
}

/* Prefix and context lengths without a KV cache; a bad cost is refused. */
static void test_model_calls_without_kv(void)
{
    moon_engine_config_t ecfg   = {.kind = MOON_BACKEND_COST, .max_batch = 4, .max_chunk = 8192};
    moon_engine_t       *eng    = NULL;
    uint32_t             ctx[5] = {1000, 2000, 0, 4000, 5};
    double               t      = -1.0;

    ecfg.cost = moon_cost_llama3_70b();
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(NULL, &ecfg, &eng), MOON_OK);
    CU_ASSERT_PTR_NOT_NULL(moon_engine_cost_config(eng));
    CU_ASSERT_EQUAL(moon_engine_model_prefill(eng, 4000, 1000, &t), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(t, moon_cost_prefill_s(&ecfg.cost, 4000, 1000), 1e-15);
    CU_ASSERT_EQUAL(moon_engine_model_decode(eng, ctx, 4, &t), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(t, moon_cost_decode_s(&ecfg.cost, 4, 7004), 1e-15);
    t = -1.0;
    CU_ASSERT_EQUAL(moon_engine_model_prefill(eng, 0, 0, &t), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_engine_model_prefill(eng, 0, 8193, &t), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_engine_model_prefill(eng, 131072, 1, &t), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_engine_model_decode(eng, ctx, 5, &t), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_engine_model_decode(eng, ctx, 0, &t), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_engine_model_decode(eng, NULL, 1, &t), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_DOUBLE_EQUAL(t, -1.0, 0.0); /* nothing written on errors */
    moon_engine_destroy(eng);
    ecfg.cost.mem_bytes_per_s = 0;
    eng                       = NULL;
    CU_ASSERT_EQUAL(moon_engine_create(NULL, &ecfg, &eng), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(eng);
    ecfg.cost                = moon_cost_llama3_70b();
    ecfg.cost.shape.n_layers = 0;
    CU_ASSERT_EQUAL(moon_engine_create(NULL, &ecfg, &eng), MOON_ERR_INVALID_PARAM);
}

/* Other backends do not model. */
static void test_model_calls_need_cost(void)
{
    moon_engine_config_t ecfg = {.kind = MOON_BACKEND_REF};
    moon_model_t        *m;
    moon_engine_t       *eng;
    uint32_t             ctx = 3;
    double               t;

    CU_ASSERT_EQUAL_FATAL(moon_model_load(MOON_MODELS_DIR "/stories260K/stories260K.gguf", &m),
                          MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg, &eng), MOON_OK);
    CU_ASSERT_PTR_NULL(moon_engine_cost_config(eng));
    CU_ASSERT_EQUAL(moon_engine_model_prefill(eng, 0, 4, &t), MOON_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(moon_engine_model_decode(eng, &ctx, 1, &t), MOON_ERR_UNSUPPORTED);
    moon_engine_destroy(eng);
    /* COST over a loaded model without a modeled shape models that model's */
    ecfg.kind                = MOON_BACKEND_COST;
    ecfg.cost                = moon_cost_llama3_70b();
    ecfg.cost.shape.n_layers = 0;
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg, &eng), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_cost_config(eng)->shape.dim, 64);
    CU_ASSERT_EQUAL(moon_engine_model_prefill(eng, 0, 4, &t), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(t, moon_cost_prefill_s(moon_engine_cost_config(eng), 0, 4), 1e-18);
    moon_engine_destroy(eng);
    /* with one, the tiny model's KV bookkeeping and the modeled shape's times */
    ecfg.cost = moon_cost_llama3_70b();
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg, &eng), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_cost_config(eng)->shape.dim, 8192);
    {
        moon_kv_config_t kc = moon_model_kv_config(moon_model_config(m), 16, 8, 1);
        moon_kv_cache_t *kv;
        uint32_t         seq;
        int32_t          toks[4] = {1, 2, 3, 4};
        CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kc, &kv), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &seq), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, seq, toks, 4, NULL, &t), MOON_OK);
        CU_ASSERT_DOUBLE_EQUAL(t, moon_cost_prefill_s(&ecfg.cost, 0, 4), 1e-15);
        CU_ASSERT_EQUAL(moon_kv_seq_len(kv, seq), 4);
        moon_kv_cache_destroy(kv);
    }
    moon_engine_destroy(eng);
    moon_model_destroy(m);
}

MOON_TEST_MAIN("cost_model", NULL, NULL, test_eq1_and_kv_bytes, test_engine_interface,
               test_decode_roofline, test_fitted_form, test_model_calls_without_kv,
               test_model_calls_need_cost)
