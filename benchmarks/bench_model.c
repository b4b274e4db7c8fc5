/* benchmarks/bench_model.c - model engine throughput, one configuration per
 * process (so peak RSS is that configuration's), one JSON line each:
 *   --bench=decode  --batch=B   decode steps of B sequences (context ~64)
 *   --bench=prefill --prompt=N  one N-token prefill chunk
 *   --bench=roofline            streaming-read bandwidth with --threads
 *                               threads -> batch-1 decode bound (weight bytes / bw)
 *   --bench=openblas --prompt=N OpenBLAS sgemm at the prefill shapes -> the
 *                               tokens/s a prefill at sgemm's FLOP rate reaches
 *   --bench=cuda_roofline       (CUDA builds) device-memory read bandwidth over
 *                               the bytes of one decode token -> batch-1 bound
 *   --bench=cublas --prompt=N   (CUDA builds) cuBLAS sgemm at the prefill shapes
 *   --bench=fma_peak            peak multiply-add rate with --threads threads
 *                               (AVX-512 FMA; vdpbf16ps too for a BF16 model)
 *                               -> the decode bound of a compute-bound batch
 *                               (peak FLOP/s over the FLOPs of one decode token)
 * --model=PATH (GGUF), --label=NAME (the "model" field), --threads=T (0 =
 * cores), --impl=cpu|ref|cuda, --iters=K. --interleave=R (decode): R rounds of
 * iters/R steps, each followed by a streaming-read pass; the line then also
 * carries roofline_tokens_per_s measured beside it (best of each).
 * --rounds=R (decode, no interleave): the best of R rounds of iters/R steps
 * (a shared machine: one slow round does not sink the figure).
 * --kv=f16|f32|auto: the KV cache's elements (auto: f16 where the backend
 * reads it, as `moonlet serve` and llama.cpp by default). */
#define _GNU_SOURCE
#include "bench_util.h"
#include "moonlet/model.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef MOON_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef MOON_WITH_CUDA
#include "cuda_anchors.h"
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double g_weight_mib = -1.0, g_kv_mib = -1.0; /* set for engine runs */
static double g_rss_override = -1.0;                /* peak RSS to report, if set */

static void emit(const char *bench, const char *impl, const char *label, int64_t batch,
                 int64_t threads, double tps, const char *extra_key, double extra)
{
    moon_bench_json_t j;

    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "suite", "model");
    moon_bench_json_str(&j, "bench", bench);
    moon_bench_json_str(&j, "impl", impl);
    moon_bench_json_str(&j, "model", label);
    moon_bench_json_int(&j, "batch", batch);
    moon_bench_json_int(&j, "threads", threads);
    moon_bench_json_num(&j, "tokens_per_s", tps);
    if (extra_key != NULL) {
        moon_bench_json_num(&j, extra_key, extra);
    }
    moon_bench_json_num(&j, "peak_rss_mib",
                        g_rss_override >= 0.0 ? g_rss_override : moon_bench_peak_rss_mib());
    if (g_weight_mib >= 0.0) {
        moon_bench_json_num(&j, "weight_mib", g_weight_mib);
        moon_bench_json_num(&j, "kv_mib", g_kv_mib);
    }
    moon_bench_json_end(&j);
}

/* ---- streaming read bandwidth --------------------------------------------------- */

typedef struct {
    const float *a;
    size_t       n;
    double       sum;
} sum_arg_t;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static double sum_avx512(const float *a, size_t n)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512 s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(a + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(a + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(a + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
#endif

static double sum_plain(const float *a, size_t n)
{
    float s[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8) {
        for (int k = 0; k < 8; k++) {
            s[k] += a[i + k];
        }
    }
    return (double)(s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7]);
}

static void *sum_thread(void *p)
{
    sum_arg_t *a = p;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        a->sum = sum_avx512(a->a, a->n);
        return NULL;
    }
#endif
    a->sum = sum_plain(a->a, a->n);
    return NULL;
}

/* A zero-filled float array of n elements, touched (so timing sees no faults). */
static float *stream_buf(size_t n)
{
    float *a = aligned_alloc(64, n * sizeof(float));
    for (size_t i = 0; a != NULL && i < n; i++) {
        a[i] = 1.0f;
    }
    return a;
}

/* Best of reps passes over a with nth threads, bytes/s. */
static double stream_pass_bw(const float *a, size_t n, int nth, int reps)
{
    pthread_t       th[64];
    sum_arg_t       args[64];
    double          best = 0.0;
    volatile double sink = 0.0;

    for (int r = 0; r < reps; r++) {
        uint64_t t0 = moon_bench_now_ns();
        for (int t = 0; t < nth; t++) {
            args[t].a = a + n / (size_t)nth * (size_t)t;
            args[t].n = n / (size_t)nth;
            pthread_create(&th[t], NULL, sum_thread, &args[t]);
        }
        for (int t = 0; t < nth; t++) {
            pthread_join(th[t], NULL);
            sink += args[t].sum;
        }
        {
            double bw = (double)(n * sizeof(float)) / ((double)(moon_bench_now_ns() - t0) * 1e-9);
            best      = bw > best ? bw : best;
        }
    }
    (void)sink;
    return best;
}

/* Best of reps passes over a 1 GiB array with nth threads, bytes/s. */
static double stream_read_bw(int nth, int reps)
{
    size_t n = (size_t)1 << 28;
    float *a = stream_buf(n);
    double bw;

    if (a == NULL) {
        return 0.0;
    }
    bw = stream_pass_bw(a, n, nth, reps);
    free(a);
    return bw;
}

/* ---- peak multiply-add rate --------------------------------------------------------- */

#define FMA_ACCS 16          /* independent accumulators: > latency x issue width */
#define FMA_ITERS (1u << 23) /* per pass and thread: 128 M vector multiply-adds */

typedef struct {
    int    bf16; /* 0: vfmadd231ps, 1: vdpbf16ps */
    double sum;
} fma_arg_t;

#if defined(__x86_64__)
/* FMA_ITERS rounds of FMA_ACCS independent vfmadd231ps chains on zmm: 32 FLOP each. */
__attribute__((target("avx512f"))) static double fma_loop_avx512(void)
{
    __m512 acc[FMA_ACCS];
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);

    for (int i = 0; i < FMA_ACCS; i++) {
        acc[i] = _mm512_set1_ps((float)i);
    }
    for (uint32_t it = 0; it < FMA_ITERS; it++) {
        for (int i = 0; i < FMA_ACCS; i++) {
            acc[i] = _mm512_fmadd_ps(acc[i], a, b);
        }
    }
    for (int i = 1; i < FMA_ACCS; i++) {
        acc[0] = _mm512_add_ps(acc[0], acc[i]);
    }
    return _mm512_reduce_add_ps(acc[0]);
}

/* The same with vdpbf16ps: 32 bf16 pairs into 16 floats, 64 FLOP each. */
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_loop_avx512(void)
{
    __m512   acc[FMA_ACCS];
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);

    for (int i = 0; i < FMA_ACCS; i++) {
        acc[i] = _mm512_set1_ps((float)i);
    }
    for (uint32_t it = 0; it < FMA_ITERS; it++) {
        for (int i = 0; i < FMA_ACCS; i++) {
            acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
        }
        __asm__ volatile("" : "+v"(a)); /* keep the operands in registers, the loop intact */
    }
    for (int i = 1; i < FMA_ACCS; i++) {
        acc[0] = _mm512_add_ps(acc[0], acc[i]);
    }
    return _mm512_reduce_add_ps(acc[0]);
}
#endif

static void *fma_thread(void *p)
{
    fma_arg_t *a = p;
#if defined(__x86_64__)
    a->sum = a->bf16 ? dpbf16_loop_avx512() : fma_loop_avx512();
#else
    a->sum = 0.0;
#endif
    return NULL;
}

/* Best of reps passes with nth threads, FLOP/s (0: the ISA is missing). */
static double fma_peak_flops(int nth, int reps, int bf16)
{
    pthread_t       th[64];
    fma_arg_t       args[64];
    double          best          = 0.0;
    volatile double sink          = 0.0;
    double          flop_per_insn = bf16 ? 64.0 : 32.0;

#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512f") || (bf16 && !__builtin_cpu_supports("avx512bf16"))) {
        return 0.0;
    }
#else
    return 0.0;
#endif
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = moon_bench_now_ns();
        for (int t = 0; t < nth; t++) {
            args[t].bf16 = bf16;
            pthread_create(&th[t], NULL, fma_thread, &args[t]);
        }
        for (int t = 0; t < nth; t++) {
            pthread_join(th[t], NULL);
            sink += args[t].sum;
        }
        {
            double dt    = (double)(moon_bench_now_ns() - t0) * 1e-9;
            double flops = flop_per_insn * FMA_ACCS * (double)FMA_ITERS * nth / dt;
            best         = flops > best ? flops : best;
        }
    }
    (void)sink;
    return best;
}

/* ---- engine runs ---------------------------------------------------------------- */

static uint64_t layer_matmul_params(const moon_model_config_t *c)
{
    uint64_t kv_dim = (uint64_t)c->n_kv_heads * c->head_dim;
    return (uint64_t)c->n_layers *
           (2ull * c->dim * c->dim + 2ull * kv_dim * c->dim + 3ull * c->hidden_dim * c->dim);
}

/* FLOPs of one decode token at context ctx: every weight matmul (the output
 * projection included: decode computes every row's logits) and attention's
 * two dot products per cached position and head. */
static double decode_flops_per_token(const moon_model_config_t *c, int64_t ctx)
{
    double attn = 2.0 * 2.0 * (double)c->n_layers * c->n_heads * c->head_dim * (double)ctx;
    return 2.0 * ((double)layer_matmul_params(c) + (double)c->vocab_size * c->dim) + attn;
}

/* One layer's GEMMs at the prefill shape (M = prompt tokens): count[i]
 * products of (prompt, k[i]) by (n[i], k[i])^T, one per weight matrix (the
 * CUDA engine stacks wq/wk/wv and w1/w3 into fewer, larger products of the
 * same FLOPs). Returns their FLOPs. */
static double prefill_shapes(const moon_model_config_t *c, int64_t prompt, int n[4], int k[4],
                             int count[4])
{
    int    kv_dim = (int)(c->n_kv_heads * c->head_dim);
    int    sn[4]  = {(int)c->dim, kv_dim, (int)c->hidden_dim, (int)c->dim};
    int    sk[4]  = {(int)c->dim, (int)c->dim, (int)c->dim, (int)c->hidden_dim};
    int    sc[4]  = {2, 2, 2, 1};
    double flops  = 0.0;

    for (int i = 0; i < 4; i++) {
        n[i]     = sn[i];
        k[i]     = sk[i];
        count[i] = sc[i];
        flops += 2.0 * (double)prompt * sn[i] * sk[i] * sc[i];
    }
    return flops;
}

/* The GPU anchors (MOON_WITH_CUDA): impl=cuda_roofline, device-memory read
 * bandwidth over the bytes one decode token reads as the CUDA backend keeps
 * the weights (F32; native_tokens_per_s: over the file's weight bytes);
 * impl=cublas, cuBLAS sgemm at the prefill shapes as tokens/s. */
static int cuda_anchor(const char *bench, const moon_model_t *m, const char *label, int64_t prompt,
                       int64_t iters)
{
#ifdef MOON_WITH_CUDA
    const moon_model_config_t *c = moon_model_config(m);
    moon_bench_json_t          j;

    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "suite", "model");
    if (strcmp(bench, "cuda_roofline") == 0) {
        double bw  = moon_bench_cuda_read_bw((size_t)1 << 30, (int)(iters < 3 ? 3 : iters));
        double f32 = 4.0 * ((double)layer_matmul_params(c) + (double)c->vocab_size * c->dim);
        moon_bench_json_str(&j, "bench", "decode");
        moon_bench_json_str(&j, "impl", "cuda_roofline");
        moon_bench_json_str(&j, "model", label);
        moon_bench_json_int(&j, "batch", 1);
        moon_bench_json_num(&j, "tokens_per_s", bw / f32);
        moon_bench_json_num(&j, "native_tokens_per_s", bw / (double)moon_model_weight_bytes(m));
        moon_bench_json_num(&j, "read_gb_per_s", bw * 1e-9);
    } else {
        int    n[4], k[4], count[4];
        double rate;
        prefill_shapes(c, prompt, n, k, count);
        rate =
            moon_bench_cuda_sgemm_flops((int)prompt, n, k, count, 4, (int)(iters < 3 ? 3 : iters));
        moon_bench_json_str(&j, "bench", "prefill");
        moon_bench_json_str(&j, "impl", "cublas");
        moon_bench_json_str(&j, "model", label);
        moon_bench_json_int(&j, "batch", 1);
        moon_bench_json_num(&j, "tokens_per_s", rate / (2.0 * (double)layer_matmul_params(c)));
        moon_bench_json_num(&j, "gflops", rate * 1e-9);
    }
    moon_bench_json_num(&j, "peak_rss_mib", moon_bench_peak_rss_mib());
    moon_bench_json_end(&j);
    return 0;
#else
    (void)bench, (void)m, (void)label, (void)prompt, (void)iters;
    fprintf(stderr, "bench_model: built without CUDA\n");
    return 2;
#endif
}

int main(int argc, char **argv)
{
    const char                *bench      = moon_bench_arg_str(argc, argv, "bench", "decode");
    const char                *path       = moon_bench_arg_str(argc, argv, "model", NULL);
    const char                *label      = moon_bench_arg_str(argc, argv, "label", "model");
    const char                *impl       = moon_bench_arg_str(argc, argv, "impl", "cpu");
    int64_t                    threads    = moon_bench_arg_int(argc, argv, "threads", 0);
    int64_t                    batch      = moon_bench_arg_int(argc, argv, "batch", 1);
    int64_t                    prompt     = moon_bench_arg_int(argc, argv, "prompt", 512);
    int64_t                    iters      = moon_bench_arg_int(argc, argv, "iters", 16);
    int64_t                    ctx        = moon_bench_arg_int(argc, argv, "ctx", 64);
    int64_t                    interleave = moon_bench_arg_int(argc, argv, "interleave", 0);
    int64_t                    n_rounds   = moon_bench_arg_int(argc, argv, "rounds", 1);
    const char                *kv_arg     = moon_bench_arg_str(argc, argv, "kv", "auto");
    moon_model_t              *m          = NULL;
    const moon_model_config_t *c;
    moon_engine_config_t       ecfg = {0};
    moon_engine_tuning_t       tuning;
    moon_engine_t             *eng = NULL;
    moon_kv_cache_t           *kv  = NULL;
    moon_kv_config_t           kcfg;
    uint32_t                  *seqs;
    int32_t                   *toks;
    float                     *logits;
    uint64_t                   rng = 1;

    if (threads <= 0) {
        threads = sysconf(_SC_NPROCESSORS_ONLN);
    }
    if (path == NULL || moon_model_load(path, &m) != MOON_OK) {
        fprintf(stderr, "bench_model: --model=PATH.gguf required and loadable\n");
        return 2;
    }
    c = moon_model_config(m);

    if (strcmp(bench, "roofline") == 0) {
        double bw = stream_read_bw((int)threads, (int)(iters < 3 ? 3 : iters)); /* best of iters */
        emit("decode", "roofline", label, 1, threads, bw / (double)moon_model_weight_bytes(m),
             "read_gb_per_s", bw * 1e-9);
        moon_model_destroy(m);
        return 0;
    }
    if (strcmp(bench, "fma_peak") == 0) {
        /* the compute roofline of batched decode: peak multiply-add rate with
         * threads = cores over the FLOPs of one token; for a BF16 model the
         * vdpbf16ps rate (bf16 pairs) is the bound, the FP32 rate rides along */
        int               reps    = (int)(iters < 3 ? 3 : iters);
        double            f32     = fma_peak_flops((int)threads, reps, 0);
        double            bf16    = moon_model_weight_type(m) == MOON_GGML_BF16
                                        ? fma_peak_flops((int)threads, reps, 1)
                                        : 0.0;
        double            peak    = bf16 > 0.0 ? bf16 : f32;
        double            per_tok = decode_flops_per_token(c, ctx);
        moon_bench_json_t j;

        moon_bench_json_begin(&j);
        moon_bench_json_str(&j, "suite", "model");
        moon_bench_json_str(&j, "bench", "decode");
        moon_bench_json_str(&j, "impl", "compute_roofline");
        moon_bench_json_str(&j, "model", label);
        moon_bench_json_int(&j, "batch", batch);
        moon_bench_json_int(&j, "threads", threads);
        moon_bench_json_num(&j, "tokens_per_s", peak / per_tok);
        moon_bench_json_str(&j, "peak_insn", bf16 > 0.0 ? "vdpbf16ps" : "vfmadd231ps");
        moon_bench_json_num(&j, "gflops", peak * 1e-9);
        moon_bench_json_num(&j, "fma_f32_gflops", f32 * 1e-9);
        if (bf16 > 0.0) {
            moon_bench_json_num(&j, "dpbf16_gflops", bf16 * 1e-9);
            moon_bench_json_num(&j, "fma_f32_tokens_per_s", f32 / per_tok);
        }
        moon_bench_json_num(&j, "mflop_per_token", per_tok * 1e-6);
        moon_bench_json_num(&j, "peak_rss_mib", moon_bench_peak_rss_mib());
        moon_bench_json_end(&j);
        moon_model_destroy(m);
        return 0;
    }
    if (strcmp(bench, "openblas") == 0) {
#ifdef MOON_HAVE_OPENBLAS
        int    n[4], k[4], count[4];
        size_t maxw = (size_t)MOON_MAX(c->dim, c->hidden_dim) * MOON_MAX(c->dim, c->hidden_dim);
        float *A    = calloc((size_t)prompt * MOON_MAX(c->dim, c->hidden_dim), sizeof(float));
        float *W    = calloc(maxw, sizeof(float));
        float *Y    = calloc((size_t)prompt * MOON_MAX(c->dim, c->hidden_dim), sizeof(float));
        double best = 1e30, flops = prefill_shapes(c, prompt, n, k, count);
        openblas_set_num_threads((int)threads);
        for (int64_t it = 0; it < (iters < 3 ? 3 : iters / 2); it++) {
            uint64_t t0 = moon_bench_now_ns();
            for (int i = 0; i < 4; i++) {
                for (int r = 0; r < count[i]; r++) {
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)prompt, n[i], k[i],
                                1.0f, A, k[i], W, k[i], 0.0f, Y, n[i]);
                }
            }
            double dt = (double)(moon_bench_now_ns() - t0) * 1e-9;
            best      = dt < best ? dt : best;
        }
        {
            double rate = flops / best; /* FLOP/s */
            emit("prefill", "openblas", label, 1, threads,
                 rate / (2.0 * (double)layer_matmul_params(c)), "gflops", rate * 1e-9);
        }
        free(A);
        free(W);
        free(Y);
#else
        fprintf(stderr, "bench_model: built without OpenBLAS\n");
#endif
        moon_model_destroy(m);
        return 0;
    }
    if (strcmp(bench, "cuda_roofline") == 0 || strcmp(bench, "cublas") == 0) {
        int rc = cuda_anchor(bench, m, label, prompt, iters);
        moon_model_destroy(m);
        return rc;
    }

    ecfg.kind = strcmp(impl, "ref") == 0        ? MOON_BACKEND_REF
                : strncmp(impl, "cuda", 4) == 0 ? MOON_BACKEND_CUDA /* cuda, cuda_nograph */
                                                : MOON_BACKEND_CPU;
    if (moon_engine_tuning_default(&tuning) != MOON_OK) { /* MOON_CPU_* A/B switches */
        return 1;
    }
    tuning.cuda_graphs = strcmp(impl, "cuda_nograph") != 0;
    ecfg.tuning        = &tuning;
    ecfg.n_threads     = (uint32_t)threads;
    ecfg.max_batch     = (uint32_t)batch;
    ecfg.max_chunk     = (uint32_t)MOON_MAX(prompt, ctx);
    if (moon_engine_create(m, &ecfg, &eng) != MOON_OK) {
        fprintf(stderr, "bench_model: engine create failed\n");
        return 1;
    }
    {
        int64_t  need    = strcmp(bench, "prefill") == 0 ? prompt : ctx + iters + 4;
        uint32_t per_seq = (uint32_t)((need + 15) / 16);
        kcfg = moon_model_kv_config(c, 16, per_seq * (uint32_t)batch + 2, (uint32_t)batch);
    }
    if (moon_backend_kv_type(ecfg.kind,
                             strcmp(kv_arg, "f32") == 0   ? MOON_KV_F32
                             : strcmp(kv_arg, "f16") == 0 ? MOON_KV_F16
                                                          : MOON_KV_AUTO,
                             &kcfg.elem_type) != MOON_OK ||
        moon_kv_cache_create(&kcfg, &kv) != MOON_OK) {
        fprintf(stderr, "bench_model: KV cache create failed\n");
        return 1;
    }
    g_weight_mib = (double)moon_model_weight_bytes(m) / 1048576.0;
    g_kv_mib     = (double)moon_kv_pool_bytes(kv) / 1048576.0;
    seqs         = calloc((size_t)batch, sizeof(*seqs));
    toks         = calloc((size_t)MOON_MAX(prompt, ctx) * (size_t)batch + 1, sizeof(*toks));
    logits       = calloc((size_t)batch * c->vocab_size, sizeof(float));
    for (int64_t i = 0; i < MOON_MAX(prompt, ctx) * batch; i++) {
        rng     = rng * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((rng >> 33) % c->vocab_size);
    }
    if (strcmp(bench, "prefill") == 0) {
        double best = 1e30;
        for (int64_t it = 0; it < (iters < 2 ? 2 : iters / 8 + 1); it++) {
            double dt = 0.0;
            moon_kv_seq_create(kv, &seqs[0]);
            if (moon_engine_prefill(eng, kv, seqs[0], toks, (uint32_t)prompt, logits, &dt) !=
                MOON_OK) {
                fprintf(stderr, "bench_model: prefill failed\n");
                return 1;
            }
            moon_kv_seq_destroy(kv, seqs[0]);
            best = dt < best ? dt : best;
        }
        emit("prefill", impl, label, 1, threads, (double)prompt / best, "gflops",
             2.0 * (double)layer_matmul_params(c) * (double)prompt / best * 1e-9);
    } else {
        uint64_t t0;
        double   dt;
        for (int64_t b = 0; b < batch; b++) {
            moon_kv_seq_create(kv, &seqs[b]);
            if (moon_engine_prefill(eng, kv, seqs[b], toks + b * ctx, (uint32_t)ctx, NULL, NULL) !=
                MOON_OK) {
                fprintf(stderr, "bench_model: context prefill failed\n");
                return 1;
            }
        }
        for (int64_t it = 0; it < 2; it++) { /* warm-up */
            moon_engine_decode(eng, kv, seqs, toks, (uint32_t)batch, logits, NULL);
        }
        /* rounds of decode steps, each followed (with --interleave) by a
         * streaming-read pass: the bound is measured beside the figure it bounds */
        {
            int64_t rounds = interleave > 0 ? interleave : n_rounds > 0 ? n_rounds : 1;
            int64_t per    = iters / rounds > 0 ? iters / rounds : 1;
            double  best = 0.0, best_bw = 0.0, rss = 0.0;
            size_t  bn   = (size_t)1 << 27; /* 512 MiB of floats */
            float  *buf  = NULL;
            int64_t step = 0;
            for (int64_t r = 0; r < rounds; r++) {
                t0 = moon_bench_now_ns();
                for (int64_t it = 0; it < per; it++, step++) {
                    if (moon_engine_decode(eng, kv, seqs, toks + step, (uint32_t)batch, logits,
                                           NULL) != MOON_OK) {
                        fprintf(stderr, "bench_model: decode failed\n");
                        return 1;
                    }
                }
                dt   = (double)(moon_bench_now_ns() - t0) * 1e-9;
                best = (double)(batch * per) / dt > best ? (double)(batch * per) / dt : best;
                if (interleave > 0) {
                    if (buf == NULL) {
                        rss = moon_bench_peak_rss_mib(); /* the engine's, before the buffer */
                        buf = stream_buf(bn);
                    }
                    if (buf != NULL) {
                        double bw = stream_pass_bw(buf, bn, (int)threads, 2);
                        best_bw   = bw > best_bw ? bw : best_bw;
                    }
                }
            }
            if (buf == NULL) {
                rss = moon_bench_peak_rss_mib();
            }
            free(buf);
            if (interleave > 0) {
                /* peak RSS of the engine alone: taken before the bandwidth buffer */
                g_rss_override = rss;
                emit("decode", impl, label, batch, threads, best, "roofline_tokens_per_s",
                     best_bw / (double)moon_model_weight_bytes(m));
            } else {
                emit("decode", impl, label, batch, threads, best, NULL, 0.0);
            }
        }
    }
    free(seqs);
    free(toks);
    free(logits);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(eng);
    moon_model_destroy(m);
    return 0;
}
