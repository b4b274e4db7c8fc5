/* tests/unit/model/test_cuda.c - the CUDA backend against the CPU paths
 * (MOON_WITH_CUDA builds only). Random GQA models (F32, BF16, Q8_0 weights),
 * chunked prefills and batched decode steps over the paged KV cache; logits
 * within 1e-3 x max(1, max |ref|) of the reference backend (and of the fast
 * CPU backend for F32); head sizes 20 and 128, and heads not dim / n_heads
 * wide; qwen2 and qwen3 models; a 1,804-token context; every row's logits and hidden states
 * (prefill_rows). Also the device mirror of the host cache: a cache written
 * in turn by the CPU and the GPU, prefix blocks shared by fork, blocks
 * imported into a second cache, a new cache of another block shape. Without a device every test
 * prints "skipped: no device". */
#include "model_test_util.h"

#include <stdlib.h>
#include <string.h>

#define TOL 1e-3f
#define VOCAB 400
#define BT 8 /* block tokens: every prefill below crosses blocks */

static moon_model_t *model_of(moon_ggml_type_t type, char *path, size_t len)
{
    moon_model_config_t shape = mt_shape(128, 256, 3, 8, 2, VOCAB, 128);
    return mt_random_model(&shape, type, 77, path, len);
}

static moon_model_t *model_shaped(const moon_model_config_t *shape, char *path, size_t len)
{
    return mt_random_model(shape, MOON_GGML_F32, 78, path, len);
}

static moon_engine_t *engine_of(const moon_model_t *m, moon_backend_kind_t kind)
{
    moon_engine_config_t cfg = {.kind = kind, .n_threads = 2, .max_batch = 4, .max_chunk = 48};
    moon_engine_t       *e   = NULL;

    CU_ASSERT_EQUAL(moon_engine_create(m, &cfg, &e), MOON_OK);
    return e;
}

/* Three sequences prefilled with different lengths (10, 17, 24 tokens), then
 * five decode steps of all three: the worst relative logits difference of
 * engine a against engine b, each on a cache of its own. */
static float compare_engines(const moon_model_t *m, moon_engine_t *a, moon_engine_t *b)
{
    moon_kv_config_t kcfg = moon_model_kv_config(moon_model_config(m), BT, 64, 3);
    moon_kv_cache_t *ka = NULL, *kb = NULL;
    uint32_t         sa[3], sb[3];
    int32_t          toks[64];
    float           *la = calloc(3 * VOCAB, sizeof(float)), *lb = calloc(3 * VOCAB, sizeof(float));
    float            worst = 0.0f;
    uint64_t         rng   = 3;

    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &ka), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kb), MOON_OK);
    for (int i = 0; i < 64; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % VOCAB);
    }
    for (int s = 0; s < 3; s++) {
        CU_ASSERT_EQUAL(moon_kv_seq_create(ka, &sa[s]), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_seq_create(kb, &sb[s]), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_prefill(a, ka, sa[s], toks + s, 10 + 7 * s, la, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_prefill(b, kb, sb[s], toks + s, 10 + 7 * s, lb, NULL), MOON_OK);
        worst = fmaxf(worst, mt_rel_diff(la, lb, VOCAB));
    }
    for (int step = 0; step < 5; step++) {
        CU_ASSERT_EQUAL(moon_engine_decode(a, ka, sa, toks + 40 + step, 3, la, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_decode(b, kb, sb, toks + 40 + step, 3, lb, NULL), MOON_OK);
        worst = fmaxf(worst, mt_rel_diff(la, lb, 3 * VOCAB));
    }
    moon_kv_cache_destroy(ka);
    moon_kv_cache_destroy(kb);
    free(la);
    free(lb);
    return worst;
}

/* The worst difference of the CUDA engine from the reference (and, for F32,
 * from the fast CPU path: it rounds BF16 activations, so exact for F32 only). */
static void check_model(moon_model_t *m, int f32, const char *name)
{
    moon_engine_t *gpu, *ref, *cpu;
    float          d_ref, d_cpu = 0.0f;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gpu   = engine_of(m, MOON_BACKEND_CUDA);
    ref   = engine_of(m, MOON_BACKEND_REF);
    cpu   = engine_of(m, MOON_BACKEND_CPU);
    d_ref = compare_engines(m, gpu, ref);
    if (f32) {
        d_cpu = compare_engines(m, gpu, cpu);
    }
    printf("\n  %s: cuda vs ref %.2e, vs cpu %.2e ", name, (double)d_ref, (double)d_cpu);
    CU_ASSERT(d_ref <= TOL);
    CU_ASSERT(d_cpu <= TOL);
    moon_engine_destroy(gpu);
    moon_engine_destroy(ref);
    moon_engine_destroy(cpu);
    moon_model_destroy(m);
}

static void test_cuda_matches_cpu(void)
{
    static const struct {
        moon_ggml_type_t type;
        const char      *name;
    } types[] = {{MOON_GGML_F32, "f32"}, {MOON_GGML_BF16, "bf16"}, {MOON_GGML_Q8_0, "q8_0"}};
    char path[256];

    if (mt_no_cuda_device()) {
        return;
    }
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        check_model(model_of(types[i].type, path, sizeof(path)), types[i].type == MOON_GGML_F32,
                    types[i].name);
        unlink(path);
    }
}

/* Head sizes the attention kernel's lanes do not divide evenly (20: lanes
 * past the head idle) and its largest (128, one KV head for two); heads not
 * dim / n_heads wide (attention.key_length: Q and wo's input 4 x 128 = 512
 * for dim 256; 6 x 16 = 96 for dim 192). */
static void test_cuda_head_sizes(void)
{
    moon_model_config_t hs20   = mt_shape(120, 256, 2, 6, 3, VOCAB, 128);
    moon_model_config_t hs128  = mt_shape(256, 512, 2, 2, 1, VOCAB, 128);
    moon_model_config_t wide   = mt_shape(256, 512, 2, 4, 2, VOCAB, 128);
    moon_model_config_t narrow = mt_shape(192, 384, 2, 6, 3, VOCAB, 128);
    char                path[256];

    if (mt_no_cuda_device()) {
        return;
    }
    check_model(model_shaped(&hs20, path, sizeof(path)), 1, "head 20");
    unlink(path);
    check_model(model_shaped(&hs128, path, sizeof(path)), 1, "head 128");
    unlink(path);
    wide.head_dim   = 128;
    narrow.head_dim = 16;
    check_model(model_shaped(&wide, path, sizeof(path)), 1, "4 heads of 128, dim 256");
    unlink(path);
    check_model(model_shaped(&narrow, path, sizeof(path)), 1, "6 heads of 16, dim 192");
    unlink(path);
}

/* qwen2 (Q/K/V biases, NeoX RoPE) and qwen3 (per-head Q/K RMSNorm, NeoX
 * RoPE): the device kernels for what llama lacks. */
static void test_cuda_archs(void)
{
    static const struct {
        uint32_t    arch;
        const char *name;
    } archs[] = {{MOON_ARCH_QWEN2, "qwen2"}, {MOON_ARCH_QWEN3, "qwen3"}};
    char path[256];

    if (mt_no_cuda_device()) {
        return;
    }
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
        moon_model_config_t shape = mt_shape(128, 256, 2, 4, 2, VOCAB, 128);
        shape.arch                = archs[i].arch;
        check_model(model_shaped(&shape, path, sizeof(path)), 1, archs[i].name);
        unlink(path);
    }
}

/* prefill_rows (prompt logprobs, embeddings): every row's logits and final
 * hidden states as the CPU backend's, for a chunk of more rows than the
 * decode batch (30: straight into the caller's memory) and then one of
 * fewer (3: through the pinned staging) on the same sequence. */
static void test_cuda_prefill_rows(void)
{
    char                       path[256];
    moon_model_t              *m;
    moon_engine_t             *e[2];
    moon_kv_cache_t           *kv[2] = {NULL, NULL};
    moon_kv_config_t           kcfg;
    const moon_model_config_t *c;
    uint32_t                   seq[2];
    int32_t                    toks[33];
    uint64_t                   rng = 11;
    float                     *lg[2], *hd[2];

    if (mt_no_cuda_device()) {
        return;
    }
    m = model_of(MOON_GGML_F32, path, sizeof(path));
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    c    = moon_model_config(m);
    kcfg = moon_model_kv_config(c, BT, 64, 1);
    e[0] = engine_of(m, MOON_BACKEND_CUDA);
    e[1] = engine_of(m, MOON_BACKEND_CPU);
    for (int i = 0; i < 33; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % VOCAB);
    }
    for (int k = 0; k < 2; k++) {
        lg[k] = calloc((size_t)30 * VOCAB, sizeof(float));
        hd[k] = calloc((size_t)30 * c->dim, sizeof(float));
        CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv[k]), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_seq_create(kv[k], &seq[k]), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_prefill_rows(e[k], kv[k], seq[k], toks, 30, lg[k], hd[k], NULL),
                        MOON_OK);
    }
    printf("\n  30 rows: logits %.2e, hidden %.2e ", (double)mt_rel_diff(lg[0], lg[1], 30 * VOCAB),
           (double)mt_rel_diff(hd[0], hd[1], 30 * c->dim));
    CU_ASSERT(mt_rel_diff(lg[0], lg[1], 30 * VOCAB) <= TOL);
    CU_ASSERT(mt_rel_diff(hd[0], hd[1], 30 * c->dim) <= TOL);
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL(
            moon_engine_prefill_rows(e[k], kv[k], seq[k], toks + 30, 3, lg[k], hd[k], NULL),
            MOON_OK);
    }
    CU_ASSERT(mt_rel_diff(lg[0], lg[1], 3 * VOCAB) <= TOL);
    CU_ASSERT(mt_rel_diff(hd[0], hd[1], 3 * c->dim) <= TOL);
    for (int k = 0; k < 2; k++) {
        moon_kv_cache_destroy(kv[k]);
        moon_engine_destroy(e[k]);
        free(lg[k]);
        free(hd[k]);
    }
    moon_model_destroy(m);
    unlink(path);
}

/* A context of 1,800 tokens (prefill chunks of 256, then decode steps): each
 * warp of the attention kernel runs over hundreds of positions and blocks. */
static void test_cuda_long_context(void)
{
    moon_model_config_t  shape = mt_shape(64, 128, 2, 4, 2, VOCAB, 2048);
    moon_engine_config_t ec    = {
           .kind = MOON_BACKEND_CPU, .n_threads = 2, .max_batch = 2, .max_chunk = 256};
    moon_engine_config_t eg = {.kind = MOON_BACKEND_CUDA, .max_batch = 2, .max_chunk = 256};
    char                 path[256];
    moon_model_t        *m;
    moon_engine_t       *cpu = NULL, *gpu = NULL;
    moon_kv_cache_t     *kc, *kg;
    moon_kv_config_t     kcfg;
    uint32_t             sc, sg;
    int32_t             *toks = malloc(1810 * sizeof(int32_t));
    float                lc[VOCAB], lg[VOCAB], worst = 0.0f;
    uint64_t             rng = 5;

    if (mt_no_cuda_device()) {
        free(toks);
        return;
    }
    m = model_shaped(&shape, path, sizeof(path));
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ec, &cpu), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &eg, &gpu), MOON_OK);
    kcfg = moon_model_kv_config(moon_model_config(m), 16, 120, 1);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kc), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kg), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kc, &sc), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kg, &sg), MOON_OK);
    for (int i = 0; i < 1810; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % VOCAB);
    }
    for (int p = 0; p < 1800; p += 200) {
        CU_ASSERT_EQUAL(moon_engine_prefill(cpu, kc, sc, toks + p, 200, lc, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_prefill(gpu, kg, sg, toks + p, 200, lg, NULL), MOON_OK);
        worst = fmaxf(worst, mt_rel_diff(lg, lc, VOCAB));
    }
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(moon_engine_decode(cpu, kc, &sc, toks + 1800 + i, 1, lc, NULL), MOON_OK);
        CU_ASSERT_EQUAL(moon_engine_decode(gpu, kg, &sg, toks + 1800 + i, 1, lg, NULL), MOON_OK);
        worst = fmaxf(worst, mt_rel_diff(lg, lc, VOCAB));
    }
    CU_ASSERT_EQUAL(moon_kv_seq_len(kg, sg), 1804u);
    printf("\n  1804 tokens: cuda vs cpu %.2e ", (double)worst);
    CU_ASSERT(worst <= TOL);
    moon_kv_cache_destroy(kc);
    moon_kv_cache_destroy(kg);
    moon_engine_destroy(cpu);
    moon_engine_destroy(gpu);
    moon_model_destroy(m);
    unlink(path);
    free(toks);
}

/* One decode step of seq on e; returns the worst difference from want. */
static float step(moon_engine_t *e, moon_kv_cache_t *kv, uint32_t seq, int32_t tok,
                  const float *want, float *got)
{
    CU_ASSERT_EQUAL(moon_engine_decode(e, kv, &seq, &tok, 1, got, NULL), MOON_OK);
    return mt_rel_diff(got, want, VOCAB);
}

/* The GPU keeps a mirror of the host cache and uploads only what others
 * wrote. The CPU and the GPU take turns on one cache (each must see the
 * other's tokens); a fork shares prefix blocks and copies its partial one;
 * blocks exported from that cache and imported into a second one feed the
 * same GPU engine; and back on the first cache. Each step's logits are
 * checked against the reference backend doing the same on its own caches. */
static void test_mirror_follows_the_host_cache(void)
{
    char             path[256];
    moon_model_t    *m;
    moon_engine_t   *gpu, *cpu, *ref;
    moon_kv_config_t kcfg;
    moon_kv_cache_t *kv, *kr, *kv2, *kr2;
    uint32_t         a, ar, f, fr, c, cr;
    int32_t          toks[64];
    float            want[VOCAB], got[VOCAB], worst = 0.0f;
    uint64_t         rng = 11;
    size_t           bb;
    void            *buf;

    if (mt_no_cuda_device()) {
        return;
    }
    m = model_of(MOON_GGML_F32, path, sizeof(path));
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gpu  = engine_of(m, MOON_BACKEND_CUDA);
    cpu  = engine_of(m, MOON_BACKEND_CPU);
    ref  = engine_of(m, MOON_BACKEND_REF);
    kcfg = moon_model_kv_config(moon_model_config(m), BT, 32, 3);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kr), MOON_OK);
    kcfg.n_blocks += 8; /* a mirror of another size: the GPU's pool moves, its graphs must go */
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv2), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kr2), MOON_OK);
    for (int i = 0; i < 64; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % VOCAB);
    }
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kr, &ar), MOON_OK);

    /* CPU prefill, GPU decode, CPU decode, GPU decode: each reads the other's K/V */
    CU_ASSERT_EQUAL(moon_engine_prefill(cpu, kv, a, toks, 13, got, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(ref, kr, ar, toks, 13, want, NULL), MOON_OK);
    for (int i = 0; i < 6; i++) {
        moon_engine_t *e = i % 3 == 1 ? cpu : gpu;
        CU_ASSERT_EQUAL(moon_engine_decode(ref, kr, &ar, &toks[13 + i], 1, want, NULL), MOON_OK);
        worst = fmaxf(worst, step(e, kv, a, toks[13 + i], want, got));
    }
    /* GPU prefill of the rest, then a fork at 20 tokens: two shared blocks and a copied one */
    CU_ASSERT_EQUAL(moon_engine_prefill(gpu, kv, a, toks + 19, 14, got, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(ref, kr, ar, toks + 19, 14, want, NULL), MOON_OK);
    worst = fmaxf(worst, mt_rel_diff(got, want, VOCAB));
    /* the block fork copies into is one the GPU wrote last (freed just before) */
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &f), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(gpu, kv, f, toks + 7, BT, got, NULL), MOON_OK);
    moon_kv_seq_destroy(kv, f);
    CU_ASSERT_EQUAL(moon_kv_seq_fork(kv, a, 20, &f), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_fork(kr, ar, 20, &fr), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_block(kv, f, 1), moon_kv_seq_block(kv, a, 1));
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(moon_engine_decode(ref, kr, &fr, &toks[40 + i], 1, want, NULL), MOON_OK);
        worst = fmaxf(worst, step(gpu, kv, f, toks[40 + i], want, got));
        CU_ASSERT_EQUAL(moon_engine_decode(ref, kr, &ar, &toks[50 + i], 1, want, NULL), MOON_OK);
        worst = fmaxf(worst, step(gpu, kv, a, toks[50 + i], want, got));
    }
    /* a's first three full blocks move to a second cache, as the store moves them */
    bb  = moon_kv_block_bytes(kv);
    buf = malloc(bb);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv2, &c), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kr2, &cr), MOON_OK);
    for (uint32_t i = 0; i < 3; i++) {
        uint32_t nb, nr;
        CU_ASSERT_EQUAL(moon_kv_block_export(kv, moon_kv_seq_block(kv, a, i), -1, buf, bb),
                        MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_kv_block_alloc(kv2, &nb), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_block_import(kv2, nb, -1, buf, bb), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_seq_append_block(kv2, c, nb), MOON_OK);
        moon_kv_block_unref(kv2, nb);
        CU_ASSERT_EQUAL(moon_kv_block_export(kr, moon_kv_seq_block(kr, ar, i), -1, buf, bb),
                        MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_kv_block_alloc(kr2, &nr), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_block_import(kr2, nr, -1, buf, bb), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_seq_append_block(kr2, cr, nr), MOON_OK);
        moon_kv_block_unref(kr2, nr);
    }
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(moon_engine_decode(ref, kr2, &cr, &toks[30 + i], 1, want, NULL), MOON_OK);
        worst = fmaxf(worst, step(gpu, kv2, c, toks[30 + i], want, got));
    }
    /* an import over a block the GPU wrote: the next step must read the new bytes */
    CU_ASSERT_EQUAL(moon_kv_block_export(kr2, moon_kv_seq_block(kr2, cr, 0), -1, buf, bb), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_block_import(kv2, moon_kv_seq_block(kv2, c, 3), -1, buf, bb), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_block_import(kr2, moon_kv_seq_block(kr2, cr, 3), -1, buf, bb), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_decode(ref, kr2, &cr, &toks[5], 1, want, NULL), MOON_OK);
    worst = fmaxf(worst, step(gpu, kv2, c, toks[5], want, got));
    /* back to the first cache: a new mirror, every block read uploaded again */
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(moon_engine_decode(ref, kr, &ar, &toks[60 + i], 1, want, NULL), MOON_OK);
        worst = fmaxf(worst, step(gpu, kv, a, toks[60 + i], want, got));
    }
    printf("\n  mirror: cuda vs ref %.2e ", (double)worst);
    CU_ASSERT(worst <= TOL);
    free(buf);
    moon_kv_cache_destroy(kv);
    moon_kv_cache_destroy(kr);
    moon_kv_cache_destroy(kv2);
    moon_kv_cache_destroy(kr2);
    moon_engine_destroy(gpu);
    moon_engine_destroy(cpu);
    moon_engine_destroy(ref);
    moon_model_destroy(m);
    unlink(path);
}

/* A cache destroyed and another made (likely at the same address, with the
 * same pool size but other block geometry: 8-token blocks, then 16): the
 * GPU engine must not take the new one for the old (its mirror, tables and
 * decode graphs are the old geometry's). */
static void test_new_cache_of_another_shape(void)
{
    char           path[256];
    moon_model_t  *m;
    moon_engine_t *gpu, *ref;
    float         *lg = calloc(2 * VOCAB, sizeof(float)), *lr = calloc(2 * VOCAB, sizeof(float));
    float          worst = 0.0f;
    int32_t        toks[64];
    uint64_t       rng = 9;

    if (mt_no_cuda_device()) {
        free(lg);
        free(lr);
        return;
    }
    m = model_of(MOON_GGML_F32, path, sizeof(path));
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gpu = engine_of(m, MOON_BACKEND_CUDA);
    ref = engine_of(m, MOON_BACKEND_REF);
    for (int i = 0; i < 64; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % VOCAB);
    }
    for (uint32_t bt = 8; bt <= 16; bt *= 2) {
        moon_kv_config_t kcfg = moon_model_kv_config(moon_model_config(m), bt, 256 / bt, 2);
        moon_kv_cache_t *kg, *kr;
        uint32_t         sg[2], sr[2];
        CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kg), MOON_OK);
        CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kr), MOON_OK);
        for (int q = 0; q < 2; q++) {
            CU_ASSERT_EQUAL(moon_kv_seq_create(kg, &sg[q]), MOON_OK);
            CU_ASSERT_EQUAL(moon_kv_seq_create(kr, &sr[q]), MOON_OK);
            CU_ASSERT_EQUAL(moon_engine_prefill(gpu, kg, sg[q], toks + q, 20 + q, lg, NULL),
                            MOON_OK);
            CU_ASSERT_EQUAL(moon_engine_prefill(ref, kr, sr[q], toks + q, 20 + q, lr, NULL),
                            MOON_OK);
        }
        for (int i = 0; i < 3; i++) {
            CU_ASSERT_EQUAL(moon_engine_decode(gpu, kg, sg, toks + 30 + 2 * i, 2, lg, NULL),
                            MOON_OK);
            CU_ASSERT_EQUAL(moon_engine_decode(ref, kr, sr, toks + 30 + 2 * i, 2, lr, NULL),
                            MOON_OK);
            worst = fmaxf(worst, mt_rel_diff(lg, lr, 2 * VOCAB));
        }
        moon_kv_cache_destroy(kg);
        moon_kv_cache_destroy(kr);
    }
    printf("\n  two cache shapes: cuda vs ref %.2e ", (double)worst);
    CU_ASSERT(worst <= TOL);
    moon_engine_destroy(gpu);
    moon_engine_destroy(ref);
    moon_model_destroy(m);
    unlink(path);
    free(lg);
    free(lr);
}

/* Bad calls get their error and change nothing: a batch or chunk over the
 * engine's limits, a token out of the vocabulary. */
static void test_bad_calls_change_nothing(void)
{
    char             path[256];
    moon_model_t    *m;
    moon_engine_t   *gpu;
    moon_kv_config_t kcfg;
    moon_kv_cache_t *kv;
    uint32_t         s[5];
    int32_t          toks[64] = {0};
    float           *lg       = calloc(5 * VOCAB, sizeof(float));

    if (mt_no_cuda_device()) {
        free(lg);
        return;
    }
    m = model_of(MOON_GGML_F32, path, sizeof(path));
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gpu  = engine_of(m, MOON_BACKEND_CUDA);
    kcfg = moon_model_kv_config(moon_model_config(m), BT, 32, 5);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &s[i]), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_engine_prefill(gpu, kv, s[0], toks, 49, lg, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_engine_decode(gpu, kv, s, toks, 5, lg, NULL), MOON_ERR_INVALID_PARAM);
    toks[3] = VOCAB;
    CU_ASSERT_EQUAL(moon_engine_prefill(gpu, kv, s[0], toks, 8, lg, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_seq_len(kv, s[0]), 0u);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 32u);
    toks[3] = 0;
    CU_ASSERT_EQUAL(moon_engine_prefill(gpu, kv, s[0], toks, 8, lg, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_len(kv, s[0]), 8u);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(gpu);
    moon_model_destroy(m);
    unlink(path);
    free(lg);
}

MOON_TEST_MAIN("cuda", NULL, NULL, test_cuda_matches_cpu, test_cuda_head_sizes, test_cuda_archs,
               test_cuda_prefill_rows, test_cuda_long_context, test_mirror_follows_the_host_cache,
               test_new_cache_of_another_shape, test_bad_calls_change_nothing)
