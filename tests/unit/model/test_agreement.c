/* tests/unit/model/test_agreement.c - the fast CPU path matches the reference
 * on random models of several shapes (with and without GQA) and weight types:
 * chunked prefill, single decode and batched decode of sequences at different
 * lengths. Tolerance: max |fast - ref| <= 1e-4 x max(1, max |ref|) per logits
 * vector (the two differ only in summation order), except where BF16 weights
 * meet BF16 products (vdpbf16ps in the batch-in-lanes steps, 29-32 rows, on
 * CPUs with AVX512_BF16): the activations are rounded to BF16 there (8
 * significant bits, as the weights), and 4e-3 holds (7e-4-1.1e-3 seen). Those
 * models run twice: with MOON_CPU_BF16_DP=0 at 1e-4, and with the products.
 * Likewise quantised weights (Q8_0, Q4_0, K-quants) meet activations quantised
 * to Q8 (llama.cpp's q8_0 / q8_K) by default: 1e-2 holds (1.4e-3-3.1e-3 seen);
 * with MOON_CPU_Q8_ACT=0 they multiply F32 activations, at 1e-4. */
#include "model_test_util.h"
#include "moonlet/alloc.h"

#include <stdlib.h>
#include <string.h>

#define TOL 1e-4f
#define TOL_BF16P 4e-3f /* BF16 weights x BF16-rounded activations */
#define TOL_Q8 1e-2f    /* quantised weights x Q8 activations */

typedef struct {
    moon_model_config_t shape;
    moon_ggml_type_t    type;
    int                 rope_freqs; /* Llama 3.1's rope_freqs.weight */
} agree_case_t;

/* The KV cache type of both engines' caches (test_kv_f16 sets F16). */
static moon_kv_type_t agree_kv_type = MOON_KV_F32;

/* Returns the largest relative difference seen. */
static float check_model(const agree_case_t *ac, uint64_t seed, float tol)
{
    char                       path[256];
    moon_model_t              *m = NULL;
    const moon_model_config_t *c;
    moon_engine_config_t ecfg_ref = {.kind = MOON_BACKEND_REF, .max_batch = 4, .max_chunk = 32};
    moon_engine_config_t ecfg_cpu = {
        .kind = MOON_BACKEND_CPU, .n_threads = 2, .max_batch = 4, .max_chunk = 32};
    moon_engine_t   *ref = NULL, *cpu = NULL;
    moon_kv_cache_t *kr = NULL, *kc = NULL;
    moon_kv_config_t kcfg;
    uint32_t         sr[3], sc[3];
    int32_t          toks[3][40];
    float           *lr, *lc;
    uint64_t         rng   = seed;
    float            worst = 0.0f;

    snprintf(path, sizeof(path), "/tmp/moon_test_agree_%d_%llu.gguf", (int)getpid(),
             (unsigned long long)seed);
    CU_ASSERT_EQUAL_FATAL(moon_model_write_random_ex(
                              &ac->shape,
                              &(moon_model_write_opts_t){
                                  .type = ac->type, .seed = seed, .rope_freqs = ac->rope_freqs},
                              path),
                          MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_model_load(path, &m), MOON_OK);
    c              = moon_model_config(m);
    kcfg           = moon_model_kv_config(c, 4, 64, 3); /* 4-token blocks: paging crosses blocks */
    kcfg.elem_type = agree_kv_type;
    lr             = malloc(4 * (size_t)c->vocab_size * sizeof(float));
    lc             = malloc(4 * (size_t)c->vocab_size * sizeof(float));
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg_ref, &ref), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg_cpu, &cpu), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kr), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kc), MOON_OK);
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < 40; i++) {
            toks[s][i] = (int32_t)(moon_test_rand(&rng) % c->vocab_size);
        }
        CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(kr, &sr[s]), MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_kv_seq_create(kc, &sc[s]), MOON_OK);
    }
    /* prefill: sequences of 5, 13 and 30 tokens, the last in two chunks (9 + 21:
     * a chunk over 16 rows takes two vectors of batch lanes) */
    {
        uint32_t lens[3] = {5, 13, 30};
        for (int s = 0; s < 3; s++) {
            uint32_t first = s == 2 ? 9 : lens[s];
            CU_ASSERT_EQUAL(moon_engine_prefill(ref, kr, sr[s], toks[s], lens[s], lr, NULL),
                            MOON_OK);
            CU_ASSERT_EQUAL(moon_engine_prefill(cpu, kc, sc[s], toks[s], first, lc, NULL), MOON_OK);
            if (first < lens[s]) {
                CU_ASSERT_EQUAL(
                    moon_engine_prefill(cpu, kc, sc[s], toks[s] + first, lens[s] - first, lc, NULL),
                    MOON_OK);
            }
            worst = fmaxf(worst, mt_rel_diff(lc, lr, c->vocab_size));
        }
    }
    /* batched decode: 6 steps of all three sequences at once */
    for (int step = 0; step < 6; step++) {
        int32_t in[3];
        for (int s = 0; s < 3; s++) {
            in[s] = toks[s][30 + step];
        }
        CU_ASSERT_EQUAL(moon_engine_decode(ref, kr, sr, in, 3, lr, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_decode(cpu, kc, sc, in, 3, lc, NULL), MOON_OK);
        for (int s = 0; s < 3; s++) {
            worst = fmaxf(worst, mt_rel_diff(lc + (size_t)s * c->vocab_size,
                                             lr + (size_t)s * c->vocab_size, c->vocab_size));
        }
    }
    /* single-sequence decode (the batch-1 matvec kernels) */
    for (int step = 0; step < 3; step++) {
        CU_ASSERT_EQUAL(moon_engine_decode(ref, kr, &sr[1], &toks[1][step], 1, lr, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_decode(cpu, kc, &sc[1], &toks[1][step], 1, lc, NULL), MOON_OK);
        worst = fmaxf(worst, mt_rel_diff(lc, lr, c->vocab_size));
    }
    printf("\n  %s dim %u heads %u/%u of %u %s%s: max rel diff %.2e ",
           moon_model_arch_name(c->arch), c->dim, c->n_heads, c->n_kv_heads, c->head_dim,
           moon_ggml_type_name(ac->type), agree_kv_type == MOON_KV_F16 ? " f16 kv" : "",
           (double)worst);
    CU_ASSERT(worst <= tol);
    moon_kv_cache_destroy(kr);
    moon_kv_cache_destroy(kc);
    moon_engine_destroy(ref);
    moon_engine_destroy(cpu);
    moon_model_destroy(m);
    unlink(path);
    free(lr);
    free(lc);
    return worst;
}

static void test_shapes_f32(void)
{
    agree_case_t cases[] = {
        {mt_shape(64, 128, 2, 4, 4, 300, 64), MOON_GGML_F32, 0},  /* MHA */
        {mt_shape(64, 96, 2, 8, 2, 320, 64), MOON_GGML_F32, 0},   /* GQA 4:1 */
        {mt_shape(128, 256, 1, 4, 1, 259, 64), MOON_GGML_F32, 0}, /* MQA, head_dim 32 */
        {mt_shape(96, 160, 3, 6, 3, 512, 64), MOON_GGML_F32, 0},  /* odd sizes for SIMD tails */
        {mt_shape(80, 172, 2, 4, 2, 300, 64), MOON_GGML_F32, 0},  /* head_dim 20: a masked vector */
        {mt_shape(512, 1024, 1, 8, 4, 2000, 64), MOON_GGML_F32,
         0}, /* big enough to split threads */
    };
    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        check_model(&cases[i], 11 + i, TOL);
    }
}

/* Sets an environment knob the engine reads at create; returns its old value
 * for env_restore. */
static char *env_set(const char *name, const char *value)
{
    char *old = getenv(name) != NULL ? strdup(getenv(name)) : NULL;

    setenv(name, value, 1);
    return old;
}

static void env_restore(const char *name, char *old)
{
    if (old != NULL) {
        setenv(name, old, 1);
        free(old);
    } else {
        unsetenv(name);
    }
}

static int is_quant(moon_ggml_type_t t)
{
    return t == MOON_GGML_Q8_0 || t == MOON_GGML_Q4_0 || t == MOON_GGML_Q4_K ||
           t == MOON_GGML_Q5_K || t == MOON_GGML_Q6_K;
}

/* A model at its tolerance: F32/BF16/F16 at tol; quantised weights twice, with
 * F32 activations (MOON_CPU_Q8_ACT=0) at tol, then with Q8 activations at
 * TOL_Q8, where the logits must show the rounding (the integer kernels ran). */
static void check_any(const agree_case_t *ac, uint64_t seed, float tol)
{
    char *q8;

    if (!is_quant(ac->type)) {
        check_model(ac, seed, tol);
        return;
    }
    q8 = env_set("MOON_CPU_Q8_ACT", "0");
    check_model(ac, seed, tol);
    setenv("MOON_CPU_Q8_ACT", "1", 1);
    CU_ASSERT(check_model(ac, seed, TOL_Q8) > 1e-6f);
    env_restore("MOON_CPU_Q8_ACT", q8);
}

static moon_model_config_t with_arch(moon_model_config_t c, uint32_t arch, float freq_scale)
{
    c.arch            = arch;
    c.rope_freq_scale = freq_scale;
    return c;
}

/* Qwen 2 (biases, NeoX RoPE), Qwen 3 (Q/K norms), Llama 3.1 rope_freqs and
 * linear rope scaling: the fast path's handling of each against the
 * reference's, F32 and a quantised type, decode batches that split. */
static void test_architectures(void)
{
    agree_case_t cases[] = {
        {with_arch(mt_shape(64, 96, 2, 8, 2, 320, 64), MOON_ARCH_QWEN2, 1.0f), MOON_GGML_F32, 0},
        {with_arch(mt_shape(128, 256, 2, 4, 2, 300, 64), MOON_ARCH_QWEN3, 1.0f), MOON_GGML_F32, 0},
        {with_arch(mt_shape(128, 256, 2, 4, 2, 300, 64), MOON_ARCH_QWEN2, 1.0f), MOON_GGML_Q8_0, 0},
        {with_arch(mt_shape(128, 256, 1, 2, 1, 300, 64), MOON_ARCH_LLAMA, 1.0f), MOON_GGML_F32, 1},
        {with_arch(mt_shape(64, 128, 1, 4, 4, 300, 64), MOON_ARCH_LLAMA, 0.25f), MOON_GGML_F32, 0},
        {with_arch(mt_shape(512, 1024, 1, 8, 4, 600, 64), MOON_ARCH_QWEN3, 1.0f), MOON_GGML_F32, 0},
        /* K-quants: 256-element super-blocks, multiplied from the file's blocks */
        {with_arch(mt_shape(256, 512, 2, 4, 2, 300, 64), MOON_ARCH_LLAMA, 1.0f), MOON_GGML_Q4_K, 0},
        {with_arch(mt_shape(256, 512, 1, 4, 2, 300, 64), MOON_ARCH_QWEN2, 1.0f), MOON_GGML_Q5_K, 0},
        {with_arch(mt_shape(512, 768, 1, 8, 4, 300, 64), MOON_ARCH_QWEN3, 1.0f), MOON_GGML_Q6_K, 0},
    };
    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        check_any(&cases[i], 41 + i, TOL);
    }
}

static moon_model_config_t with_head_dim(moon_model_config_t c, uint32_t arch, uint32_t head_dim)
{
    c.arch     = arch;
    c.head_dim = head_dim;
    return c;
}

/* Heads wider or narrower than dim / n_heads (attention.key_length): Q and
 * the attention output n_heads * head_dim wide, the KV rows n_kv_heads *
 * head_dim; every path (prefill GEMM attention, batched, split and batch-1
 * decode, the masked-vector head, Q8 activations) against the reference. */
static void test_head_dim(void)
{
    agree_case_t cases[] = {
        /* Q wider than dim (Qwen 3 0.6B's 1024 -> 16 x 128 in small) */
        {with_head_dim(mt_shape(64, 128, 2, 4, 2, 300, 64), MOON_ARCH_LLAMA, 32), MOON_GGML_F32, 0},
        {with_head_dim(mt_shape(128, 256, 2, 4, 2, 300, 64), MOON_ARCH_QWEN3, 64), MOON_GGML_F32,
         0},
        /* narrower, and a head of 20 (a masked last vector) */
        {with_head_dim(mt_shape(128, 256, 2, 4, 2, 300, 64), MOON_ARCH_QWEN3, 16), MOON_GGML_F32,
         0},
        {with_head_dim(mt_shape(64, 96, 1, 4, 4, 300, 64), MOON_ARCH_LLAMA, 20), MOON_GGML_F32, 0},
        /* Q/K/V biases q_dim wide, a quantised wo of q_dim columns */
        {with_head_dim(mt_shape(64, 128, 2, 4, 2, 300, 64), MOON_ARCH_QWEN2, 24), MOON_GGML_Q8_0,
         0},
        /* head 128 as in Qwen 3, rope_freqs over head_dim / 2, big enough to thread */
        {with_head_dim(mt_shape(256, 512, 1, 4, 2, 600, 64), MOON_ARCH_QWEN3, 128), MOON_GGML_F32,
         0},
        {with_head_dim(mt_shape(128, 256, 1, 2, 1, 300, 64), MOON_ARCH_LLAMA, 96), MOON_GGML_F32,
         1},
    };
    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        check_any(&cases[i], 51 + i, TOL);
    }
}

/* An F16 KV cache on both sides: the CPU path's F16 attention (the AVX-512
 * head kernel for head_dim % 16 == 0, the generic one for a masked head, the
 * prefill GEMM's gather) against the reference's, which rounds the same K/V
 * to the same fp16 bits, so only the summation order differs: TOL. */
static void test_kv_f16(void)
{
    agree_case_t cases[] = {
        {mt_shape(64, 128, 2, 4, 4, 300, 64), MOON_GGML_F32, 0}, /* head_dim 16 */
        {mt_shape(64, 96, 2, 8, 2, 320, 64), MOON_GGML_F32, 0},  /* GQA, head_dim 8 */
        {mt_shape(80, 172, 2, 4, 2, 300, 64), MOON_GGML_F32, 0}, /* head_dim 20 */
        {with_head_dim(mt_shape(256, 512, 1, 4, 2, 600, 64), MOON_ARCH_QWEN3, 128), MOON_GGML_F32,
         0},
        {with_arch(mt_shape(256, 512, 2, 4, 2, 300, 64), MOON_ARCH_LLAMA, 1.0f), MOON_GGML_Q4_K, 0},
    };
    agree_kv_type = MOON_KV_F16;
    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        check_any(&cases[i], 61 + i, TOL);
    }
    agree_kv_type = MOON_KV_F32;
}

/* The reference over an F16 and an F32 cache: the logits differ (the cache
 * really holds fp16) by about fp16's rounding of K and V, no more. */
static void test_kv_f16_rounding(void)
{
    moon_model_config_t  shape = mt_shape(64, 128, 2, 4, 2, 300, 64);
    char                 path[256];
    moon_model_t        *m  = mt_random_model(&shape, MOON_GGML_F32, 5, path, sizeof(path));
    moon_engine_config_t er = {.kind = MOON_BACKEND_REF, .max_batch = 1, .max_chunk = 64};
    moon_kv_config_t     kcfg[2];
    moon_engine_t       *ref;
    moon_kv_cache_t     *kv[2];
    uint32_t             seq[2];
    int32_t              toks[40];
    float                lg[2][300], d;
    uint64_t             rng = 3;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &er, &ref), MOON_OK);
    for (int i = 0; i < 40; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % 300);
    }
    for (int k = 0; k < 2; k++) {
        kcfg[k]           = moon_model_kv_config(moon_model_config(m), 16, 8, 1);
        kcfg[k].elem_type = k ? MOON_KV_F16 : MOON_KV_F32;
        CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg[k], &kv[k]), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_seq_create(kv[k], &seq[k]), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_prefill(ref, kv[k], seq[k], toks, 39, NULL, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_decode(ref, kv[k], &seq[k], toks + 39, 1, lg[k], NULL),
                        MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_kv_block_bytes(kv[1]) * 2, moon_kv_block_bytes(kv[0]));
    d = mt_rel_diff(lg[1], lg[0], 300);
    printf("\n  f16 against f32 kv cache: max rel diff %.2e ", (double)d);
    CU_ASSERT(d > 1e-7f && d < 1e-2f);
    for (int k = 0; k < 2; k++) {
        moon_kv_cache_destroy(kv[k]);
    }
    moon_engine_destroy(ref);
    moon_model_destroy(m);
    unlink(path);
}

static void test_weight_types(void)
{
    agree_case_t cases[] = {
        {mt_shape(64, 128, 2, 8, 4, 300, 64), MOON_GGML_BF16, 0},
        {mt_shape(80, 172, 2, 4, 2, 300, 64), MOON_GGML_BF16,
         0}, /* w2: 172 columns, a packed tail */
        {mt_shape(64, 128, 2, 8, 4, 300, 64), MOON_GGML_F16, 0},
        {mt_shape(64, 128, 2, 8, 4, 300, 64), MOON_GGML_Q8_0, 0},
        {mt_shape(64, 128, 2, 8, 4, 300, 64), MOON_GGML_Q4_0, 0},
    };
    char *dp = env_set("MOON_CPU_BF16_DP", "0"); /* exact mode: F32 activations everywhere */

    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        check_any(&cases[i], 21 + i, TOL);
    }
    env_restore("MOON_CPU_BF16_DP", dp);
}

/* BF16 weights with BF16 products (the default), every batched step through
 * the batch-in-lanes kernels: within TOL_BF16P; and where the CPU has the
 * products the logits show the rounding, so they really ran. */
static void test_bf16_products(void)
{
    agree_case_t cases[] = {
        {mt_shape(64, 128, 2, 8, 4, 300, 64), MOON_GGML_BF16, 0},
        {mt_shape(128, 256, 1, 4, 1, 259, 64), MOON_GGML_BF16, 0},
        {mt_shape(512, 1024, 1, 8, 4, 2000, 64), MOON_GGML_BF16, 0},
    };
    const char *isa = getenv("MOON_CPU_ISA");
    char       *bt  = env_set("MOON_CPU_BT_MIN_B", "1");
    char       *on  = env_set("MOON_CPU_BF16_DP", "1");
    int         dp  = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") &&
             (isa == NULL || strcmp(isa, "avx512") == 0);

    for (size_t i = 0; i < MOON_ARRAY_SIZE(cases); i++) {
        float worst = check_model(&cases[i], 31 + i, TOL_BF16P);
        if (dp) {
            CU_ASSERT(worst > 1e-6f);
        }
    }
    env_restore("MOON_CPU_BT_MIN_B", bt);
    env_restore("MOON_CPU_BF16_DP", on);
    if (!dp) {
        printf("\n  (no AVX512_BF16 here: BF16 products not exercised) ");
    }
}

/* STYLE 5.6: prefill and decode never allocate (every moon_* allocation fails). */
static void test_forward_never_allocates(void)
{
    moon_model_config_t shape = mt_shape(64, 128, 2, 8, 2, 300, 64);
    char                path[256];
    moon_model_t       *m        = mt_random_model(&shape, MOON_GGML_BF16, 5, path, sizeof(path));
    moon_backend_kind_t kinds[2] = {MOON_BACKEND_REF, MOON_BACKEND_CPU};
    int32_t             toks[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    float               lg[2 * 300];

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    for (int k = 0; k < 2; k++) {
        moon_engine_config_t ecfg = {
            .kind = kinds[k], .n_threads = 2, .max_batch = 2, .max_chunk = 16};
        moon_kv_config_t kcfg = moon_model_kv_config(moon_model_config(m), 4, 16, 2);
        moon_engine_t   *eng;
        moon_kv_cache_t *kv;
        uint32_t         seqs[2];
        CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg, &eng), MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &seqs[0]), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &seqs[1]), MOON_OK);
        moon_fault_fail_after(1);
        CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, seqs[0], toks, 16, lg, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, seqs[1], toks, 3, lg, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_decode(eng, kv, seqs, toks, 2, lg, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_fault_count(), 0);
        moon_fault_reset();
        moon_kv_cache_destroy(kv);
        moon_engine_destroy(eng);
    }
    moon_model_destroy(m);
    unlink(path);
}

/* A long prefill chunk after a cached prefix: several query blocks of the
 * GEMM attention, each against a different number of keys. */
static void test_long_prefill_chunk(void)
{
    moon_model_config_t  shape = mt_shape(64, 128, 2, 8, 2, 300, 512);
    char                 path[256];
    moon_model_t        *m  = mt_random_model(&shape, MOON_GGML_F32, 9, path, sizeof(path));
    moon_engine_config_t er = {.kind = MOON_BACKEND_REF, .max_batch = 1, .max_chunk = 400};
    moon_engine_config_t ec = {
        .kind = MOON_BACKEND_CPU, .n_threads = 2, .max_batch = 1, .max_chunk = 400};
    moon_kv_config_t kcfg;
    moon_engine_t   *ref, *cpu;
    moon_kv_cache_t *kr, *kc;
    uint32_t         sr, sc;
    static int32_t   toks[420];
    float            lr[300], lc[300];
    uint64_t         rng = 17;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    kcfg = moon_model_kv_config(moon_model_config(m), 16, 32, 1);
    for (int i = 0; i < 420; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % 300);
    }
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &er, &ref), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ec, &cpu), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kr), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kc), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kr, &sr), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kc, &sc), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(ref, kr, sr, toks, 20, lr, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(cpu, kc, sc, toks, 20, lc, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(ref, kr, sr, toks + 20, 400, lr, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(cpu, kc, sc, toks + 20, 400, lc, NULL), MOON_OK);
    printf("\n  420-token context, 400-token chunk: max rel diff %.2e ",
           (double)mt_rel_diff(lc, lr, 300));
    CU_ASSERT(mt_rel_diff(lc, lr, 300) <= TOL);
    moon_kv_cache_destroy(kr);
    moon_kv_cache_destroy(kc);
    moon_engine_destroy(ref);
    moon_engine_destroy(cpu);
    moon_model_destroy(m);
    unlink(path);
}

MOON_TEST_MAIN("agreement", NULL, NULL, test_architectures, test_head_dim, test_long_prefill_chunk,
               test_forward_never_allocates, test_shapes_f32, test_weight_types, test_bf16_products,
               test_kv_f16, test_kv_f16_rounding)
