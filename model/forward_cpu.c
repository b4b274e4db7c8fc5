/* model/forward_cpu.c - the fast CPU backend. A prefill chunk of B tokens
 * (or a decode batch of B sequences) goes through each layer as one batch:
 * the weight matmuls are GEMMs (on AVX-512 our outer-product kernels for F32
 * and BF16 from 4 rows, batch-in-lanes kernels for 29-32 rows, which for BF16
 * weights multiply BF16-rounded activations with vdpbf16ps where the CPU has
 * it; else OpenBLAS sgemm on each thread's slice of output rows; other weight
 * types are dequantized tile by tile), batch-1 matvecs
 * use AVX-512/AVX2 kernels chosen at create by a runtime CPU check, and
 * attention runs over the paged KV cache split by (token, head). Threads: a
 * pool of n_threads (the caller is thread 0); work is split by ith/nth rows,
 * except that a decode batch of a small model splits by batch rows for the
 * whole pass (run_split). Steps too small to pay for a dispatch run on the
 * calling thread. Every buffer is allocated at create: prefill and decode
 * never allocate. */
#include "model_internal.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define MOON_X86 1
#endif
#ifdef MOON_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define TILE_ROWS 64    /* weight rows dequantized at a time for GEMM */
#define ATTN_QCHUNK 128 /* query rows per score block in prefill attention */

typedef float (*dot_fn)(const void *w, const float *x, uint32_t n);
typedef void (*axpy_fn)(float *y, float a, const float *x, uint32_t n);
typedef void (*swiglu_fn)(float *h, const float *h3, size_t n);
typedef float (*softmax_exp_fn)(float *a, uint32_t n);

typedef struct cpu_state cpu_state_t;

/* One parallel step: which op and its operands. */
typedef enum { JOB_MATMUL, JOB_ATTN, JOB_ATTN_GEMM, JOB_RMSNORM, JOB_SWIGLU } job_kind_t;

typedef struct {
    job_kind_t kind;
    uint32_t   b; /* batch rows */
    /* matmul: up to 3 matrices sharing x */
    const moon_tensor_t *w[3];
    float               *y[3]; /* (b, w->rows) */
    uint32_t             n_mats;
    const float         *x; /* (b, cols) */
    /* attention */
    uint32_t layer;
    /* rmsnorm: out = norm(in) * weight, rows of dim */
    const float *norm_w;
    float       *out;
    const float *in;
} job_t;

struct cpu_state {
    const moon_model_t *m;
    moon_tp_t          *tp;
    uint32_t            nth;
    uint32_t            max_b;
    dot_fn              dot[31]; /* by ggml type; NULL: dequantize the row first */
    dot_fn              dot_f32;
    axpy_fn             axpy;
    swiglu_fn           swiglu;
    softmax_exp_fn      softmax_exp;
    int                 nt_isa;   /* batched NT kernels: 512, 2 (AVX2) or 0 (none) */
    uint32_t            op_min_b; /* outer-product matmuls from this batch on (AVX-512) */
    float              *x;        /* (max_b, dim) residual stream */
    float              *xb;       /* (max_b, dim) */
    float              *q;        /* (max_b, dim) */
    float              *k;        /* (max_b, kv_dim); inside hb2 when kv_owned is 0 */
    float              *v;        /* (max_b, kv_dim); inside hb2 when kv_owned is 0 */
    int                 kv_owned;
    float              *ao; /* (max_b, dim) attention output: aliases q (each (row, head)
                             * slice of q is dead once its output is written) */
    float   *hb;            /* (max_b, hidden) */
    float   *hb2;           /* (max_b, hidden) */
    float   *att;           /* (nth, seq_len) attention scores */
    float   *wtile;         /* (nth, TILE_ROWS, max_cols) dequantized weight rows */
    float   *pack;          /* (nth, OP_KC, 16 OP_PV) packed weight panel (outer-product path) */
    float   *xt;            /* (nth, max_cols, BT_MAX_B) X transposed (batch-in-lanes path) */
    float   *yt;            /* (nth, BT_CHUNK, BT_MAX_B) its outputs before the store */
    uint32_t bt_min_b;      /* batch-in-lanes matmuls from this batch on (to BT_MAX_B) */
    int      bf16_dp;       /* BF16 weights x BF16-rounded activations there (AVX512_BF16) */
    uint64_t par_min_macs;  /* a step of fewer multiply-adds runs on the calling thread */
    uint64_t split_max_macs; /* decode splits the batch across threads below this step size */
    uint64_t row_max_macs;   /* multiply-adds of one row's largest matmul step */
    cpu_state_t *views;      /* (nth, view_stride bytes) per-thread views for a split decode */
    size_t       view_stride;
    const int32_t *split_tokens; /* split decode: the step's tokens and logits */
    float         *split_logits;
    uint32_t       split_b;
    float   *rope;          /* (seq_len, head_dim / 2, 2) cos, sin */
    float   *kc;            /* (nth, seq_len, head_dim) one head's K gathered from the blocks */
    float   *vc;            /* (nth, seq_len, head_dim) one head's V */
    float   *sc;            /* (nth, ATTN_QCHUNK, seq_len) attention scores of a prefill chunk */
    uint32_t max_chunk;
    /* per call */
    moon_kv_cache_t      *kv;
    const moon_kv_seq_t **seq; /* (max_b) sequence of each batch row */
    uint32_t             *pos; /* (max_b) position of each batch row */
    job_t                 job;
};

/* ---- dot kernels -------------------------------------------------------------- */

static float dot_f32_scalar(const void *w, const float *x, uint32_t n)
{
    const float *a    = w;
    float        s[4] = {0};
    uint32_t     i    = 0;
    for (; i + 4 <= n; i += 4) {
        s[0] += a[i] * x[i];
        s[1] += a[i + 1] * x[i + 1];
        s[2] += a[i + 2] * x[i + 2];
        s[3] += a[i + 3] * x[i + 3];
    }
    for (; i < n; i++) {
        s[0] += a[i] * x[i];
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static float dot_bf16_scalar(const void *w, const float *x, uint32_t n)
{
    const uint16_t *a = w;
    float           s = 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        s += moon_bf16_to_f32(a[i]) * x[i];
    }
    return s;
}

#ifdef MOON_X86
__attribute__((target("avx512f"))) static float dot_f32_avx512(const void *w, const float *x,
                                                               uint32_t n)
{
    const float *a  = w;
    __m512       s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512       s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    uint32_t     i = 0;
    float        r;

    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(x + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(x + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(x + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(x + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(x + i), s0);
    }
    r = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    for (; i < n; i++) {
        r += a[i] * x[i];
    }
    return r;
}

__attribute__((target("avx512f"))) static inline __m512 bf16x16(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

__attribute__((target("avx512f"))) static float dot_bf16_avx512(const void *w, const float *x,
                                                                uint32_t n)
{
    const uint16_t *a  = w;
    __m512          s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512          s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    uint32_t        i = 0;
    float           r;

    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(bf16x16(a + i), _mm512_loadu_ps(x + i), s0);
        s1 = _mm512_fmadd_ps(bf16x16(a + i + 16), _mm512_loadu_ps(x + i + 16), s1);
        s2 = _mm512_fmadd_ps(bf16x16(a + i + 32), _mm512_loadu_ps(x + i + 32), s2);
        s3 = _mm512_fmadd_ps(bf16x16(a + i + 48), _mm512_loadu_ps(x + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) {
        s0 = _mm512_fmadd_ps(bf16x16(a + i), _mm512_loadu_ps(x + i), s0);
    }
    r = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    for (; i < n; i++) {
        r += moon_bf16_to_f32(a[i]) * x[i];
    }
    return r;
}

__attribute__((target("avx2,fma"))) static float hsum256(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo        = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo        = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma"))) static float dot_f32_avx2(const void *w, const float *x,
                                                              uint32_t n)
{
    const float *a  = w;
    __m256       s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256       s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    uint32_t     i = 0;
    float        r;

    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    r = hsum256(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) {
        r += a[i] * x[i];
    }
    return r;
}

__attribute__((target("avx2,fma"))) static float dot_bf16_avx2(const void *w, const float *x,
                                                               uint32_t n)
{
    const uint16_t *a  = w;
    __m256          s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    uint32_t        i = 0;
    float           r;

    for (; i + 16 <= n; i += 16) {
        __m256i v0 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(a + i)));
        __m256i v1 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(a + i + 8)));
        s0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), _mm256_loadu_ps(x + i),
                             s0);
        s1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)),
                             _mm256_loadu_ps(x + i + 8), s1);
    }
    r = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) {
        r += moon_bf16_to_f32(a[i]) * x[i];
    }
    return r;
}
#endif /* MOON_X86 */

static void axpy_scalar(float *y, float a, const float *x, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        y[i] += a * x[i];
    }
}

#ifdef MOON_X86
__attribute__((target("avx512f"))) static void axpy_avx512(float *y, float a, const float *x,
                                                           uint32_t n)
{
    __m512   va = _mm512_set1_ps(a);
    uint32_t i  = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    }
    for (; i < n; i++) {
        y[i] += a * x[i];
    }
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, float a, const float *x,
                                                          uint32_t n)
{
    __m256   va = _mm256_set1_ps(a);
    uint32_t i  = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) {
        y[i] += a * x[i];
    }
}
#endif

/* h = silu(h) * h3 */
static void swiglu_scalar(float *h, const float *h3, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = h[i];
        h[i]    = g * (1.0f / (1.0f + expf(-g))) * h3[i];
    }
}

/* a[t] = exp(a[t] - max a) for t < n (n >= 1); returns their sum */
static float softmax_exp_scalar(float *a, uint32_t n)
{
    float max = -INFINITY, sum = 0.0f;

    for (uint32_t t = 0; t < n; t++) {
        max = a[t] > max ? a[t] : max;
    }
    for (uint32_t t = 0; t < n; t++) {
        a[t] = expf(a[t] - max);
        sum += a[t];
    }
    return sum;
}

#ifdef MOON_X86
/* exp(x) for x in [-87, 88]: 2^n * p(r), r = x - n ln2, degree-6 polynomial
 * (Cephes expf coefficients; relative error ~2e-7). */
__attribute__((target("avx512f"))) static inline __m512 exp512(__m512 x)
{
    const __m512 hi = _mm512_set1_ps(88.0f), lo = _mm512_set1_ps(-87.0f);
    __m512       n, r, p;

    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

__attribute__((target("avx512f"))) static void swiglu_avx512(float *h, const float *h3, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 g   = _mm512_loadu_ps(h + i);
        __m512 e   = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 sig = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_storeu_ps(h + i, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_loadu_ps(h3 + i)));
    }
    swiglu_scalar(h + i, h3 + i, n - i);
}

/* softmax_exp_scalar with the vector exp, 16 scores at a time */
__attribute__((target("avx512f"))) static float softmax_exp_avx512(float *a, uint32_t n)
{
    __m512 mv = _mm512_set1_ps(-INFINITY), sv = _mm512_setzero_ps(), maxv;

    for (uint32_t t = 0; t < n; t += 16) {
        __mmask16 mk = (__mmask16)(n - t >= 16 ? 0xffffu : (1u << (n - t)) - 1);
        mv           = _mm512_mask_max_ps(mv, mk, mv, _mm512_maskz_loadu_ps(mk, a + t));
    }
    maxv = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
    for (uint32_t t = 0; t < n; t += 16) {
        __mmask16 mk = (__mmask16)(n - t >= 16 ? 0xffffu : (1u << (n - t)) - 1);
        __m512    e  = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, a + t), maxv));
        _mm512_mask_storeu_ps(a + t, mk, e);
        sv = _mm512_mask_add_ps(sv, mk, sv, e);
    }
    return _mm512_reduce_add_ps(sv);
}
#endif

/* Picks the widest kernels the CPU runs. isa (tuning cpu-isa, MOON_CPU_ISA)
 * avx2 or scalar caps the choice (tests run every path on one machine). */
static void pick_kernels(cpu_state_t *s, int isa)
{
    s->dot_f32             = dot_f32_scalar;
    s->dot[MOON_GGML_F32]  = dot_f32_scalar;
    s->dot[MOON_GGML_BF16] = dot_bf16_scalar;
    s->axpy                = axpy_scalar;
    s->swiglu              = swiglu_scalar;
    s->softmax_exp         = softmax_exp_scalar;
    s->nt_isa              = 0;
    if (isa == MOON_CPU_ISA_SCALAR) {
        return;
    }
#ifdef MOON_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && isa != MOON_CPU_ISA_AVX2) {
        s->dot_f32             = dot_f32_avx512;
        s->dot[MOON_GGML_F32]  = dot_f32_avx512;
        s->dot[MOON_GGML_BF16] = dot_bf16_avx512;
        s->axpy                = axpy_avx512;
        s->swiglu              = swiglu_avx512;
        s->softmax_exp         = softmax_exp_avx512;
        s->nt_isa              = 512;
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        s->dot_f32             = dot_f32_avx2;
        s->dot[MOON_GGML_F32]  = dot_f32_avx2;
        s->dot[MOON_GGML_BF16] = dot_bf16_avx2;
        s->axpy                = axpy_avx2;
        s->nt_isa              = 2;
    }
#endif
}

/* Batched NT matmul for decode batches: Y[bi][r] = W[r] . X[bi] for rows
 * [r0, r1) and all b batch rows, W rows read once from memory and reused from
 * L1 across the batch. Register blocking 4 weight rows x 6 batch rows (24
 * zmm accumulators); K % 16 and block edges fall back to the dot kernels. */
#define NT_MR 4
#define NT_NB 6
#define NT_KERNEL(_name, _load)                                                                    \
    __attribute__((target("avx512f"))) static void _name(                                          \
        const uint8_t *w, size_t row_bytes, const float *x, uint32_t K, float *y, uint32_t ldy)    \
    {                                                                                              \
        __m512   acc[NT_MR][NT_NB];                                                                \
        uint32_t k;                                                                                \
        for (int i = 0; i < NT_MR; i++) {                                                          \
            for (int j = 0; j < NT_NB; j++) {                                                      \
                acc[i][j] = _mm512_setzero_ps();                                                   \
            }                                                                                      \
        }                                                                                          \
        for (k = 0; k + 16 <= K; k += 16) {                                                        \
            __m512 wv[NT_MR];                                                                      \
            for (int i = 0; i < NT_MR; i++) {                                                      \
                wv[i] = _load(w + (size_t)i * row_bytes, k);                                       \
            }                                                                                      \
            for (int j = 0; j < NT_NB; j++) {                                                      \
                __m512 xv = _mm512_loadu_ps(x + (size_t)j * K + k);                                \
                for (int i = 0; i < NT_MR; i++) {                                                  \
                    acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);                             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int i = 0; i < NT_MR; i++) {                                                          \
            for (int j = 0; j < NT_NB; j++) {                                                      \
                y[(size_t)j * ldy + i] = _mm512_reduce_add_ps(acc[i][j]);                          \
            }                                                                                      \
        }                                                                                          \
    }

#ifdef MOON_X86
__attribute__((target("avx512f"))) static inline __m512 nt_load_f32(const uint8_t *row, uint32_t k)
{
    return _mm512_loadu_ps((const float *)row + k);
}
__attribute__((target("avx512f"))) static inline __m512 nt_load_bf16(const uint8_t *row, uint32_t k)
{
    return bf16x16((const uint16_t *)row + k);
}
NT_KERNEL(nt_4x6_f32, nt_load_f32)
NT_KERNEL(nt_4x6_bf16, nt_load_bf16)
#endif

typedef void (*nt_kernel_fn)(const uint8_t *w, size_t row_bytes, const float *x, uint32_t K,
                             float *y, uint32_t ldy);

/* A register-blocked NT kernel: mr weight rows x nb batch rows, K % kstep == 0. */
typedef struct {
    nt_kernel_fn fn;
    uint32_t     mr, nb, kstep;
} nt_kernel_t;

#ifdef MOON_X86
/* AVX2 twin: 3 weight rows x 4 batch rows (12 ymm accumulators). */
#define NT2_MR 3
#define NT2_NB 4
#define NT2_KERNEL(_name, _load)                                                                   \
    __attribute__((target("avx2,fma"))) static void _name(                                         \
        const uint8_t *w, size_t row_bytes, const float *x, uint32_t K, float *y, uint32_t ldy)    \
    {                                                                                              \
        __m256 acc[NT2_MR][NT2_NB];                                                                \
        for (int i = 0; i < NT2_MR; i++) {                                                         \
            for (int j = 0; j < NT2_NB; j++) {                                                     \
                acc[i][j] = _mm256_setzero_ps();                                                   \
            }                                                                                      \
        }                                                                                          \
        for (uint32_t k = 0; k + 8 <= K; k += 8) {                                                 \
            __m256 wv[NT2_MR];                                                                     \
            for (int i = 0; i < NT2_MR; i++) {                                                     \
                wv[i] = _load(w + (size_t)i * row_bytes, k);                                       \
            }                                                                                      \
            for (int j = 0; j < NT2_NB; j++) {                                                     \
                __m256 xv = _mm256_loadu_ps(x + (size_t)j * K + k);                                \
                for (int i = 0; i < NT2_MR; i++) {                                                 \
                    acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);                             \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int i = 0; i < NT2_MR; i++) {                                                         \
            for (int j = 0; j < NT2_NB; j++) {                                                     \
                y[(size_t)j * ldy + i] = hsum256(acc[i][j]);                                       \
            }                                                                                      \
        }                                                                                          \
    }

__attribute__((target("avx2,fma"))) static inline __m256 nt2_load_f32(const uint8_t *row,
                                                                      uint32_t       k)
{
    return _mm256_loadu_ps((const float *)row + k);
}
__attribute__((target("avx2,fma"))) static inline __m256 nt2_load_bf16(const uint8_t *row,
                                                                       uint32_t       k)
{
    __m256i v =
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
NT2_KERNEL(nt_3x4_f32_avx2, nt2_load_f32)
NT2_KERNEL(nt_3x4_bf16_avx2, nt2_load_bf16)
#endif

/* Batched matmul in outer-product form (AVX-512, batches of s->op_min_b rows or
 * more): each thread packs a panel of 16 or 32 weight rows, OP_KC columns at
 * a time, transposed into its L1-sized scratch (k-major: P[k][r], BF16 widened
 * to F32 once here), then every batch row block runs over it with a
 * broadcast of X[bi][k] times P[k][0..31] into 16-lane accumulators that hold
 * y[bi][r..r+31] (no horizontal sums; a k chunk's partial sums go through y).
 * The weight panel is read from memory once per step and reused by every
 * batch row from L1; the next panel is prefetched while this one is computed
 * (prefetcht0, spread over the kernel calls), so the weight stream overlaps
 * the FMAs. Each output is one sequential sum over k (the reference's order
 * within a row). */
#define OP_KC 128  /* k chunk: a packed 32-row F32 panel chunk is 16 KiB */
#define OP_NB 8    /* batch rows per register block (8 x 2 zmm accumulators) */
#define OP_PV 3    /* panel rows / 16 */
/* from s->op_min_b rows on (tuning cpu-op-min-b, 4: below, the NT kernels) */

#ifdef MOON_X86
/* Transposes a 16 x 16 block of floats in registers: r[i] lane k becomes
 * r[k] lane i. */
__attribute__((target("avx512f"))) static inline void tr16_regs(__m512 r[16])
{
    __m512 t[16];

    for (int i = 0; i < 8; i++) {
        t[2 * i]     = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i]     = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    /* r[4i + j], 128-bit lane L: column 4L + j of rows 4i..4i+3 */
    for (int j = 0; j < 4; j++) {
        t[j]      = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[4 + j]  = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        t[8 + j]  = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    }
    for (int j = 0; j < 4; j++) {
        r[j]      = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j]  = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
        r[4 + j]  = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

/* dst[k * ldd + r] = r[r] lane k (dst 64-byte aligned, ldd % 16 == 0). */
__attribute__((target("avx512f"))) static inline void op_tr16(__m512 r[16], float *dst, size_t ldd)
{
    tr16_regs(r);
    for (int k = 0; k < 16; k++) {
        _mm512_store_ps(dst + (size_t)k * ldd, r[k]);
    }
}

/* Packs rows [0, 16 * pv) x columns [k0, k0 + kc) of w (rows of row_bytes)
 * into P[k][r], r < 16 * pv; a last group of kc % 16 columns is padded with
 * zeros to 16 (P holds OP_KC rows of k). */
#define OP_PACK_FN(_name, _elem_t, _load)                                                          \
    __attribute__((target("avx512f"))) static void _name(                                          \
        const uint8_t *w, size_t row_bytes, uint32_t k0, uint32_t kc, uint32_t pv, float *P)       \
    {                                                                                              \
        uint32_t ldp = 16 * pv;                                                                    \
        for (uint32_t v = 0; v < pv; v++) {                                                        \
            const uint8_t *col = w + (size_t)16 * v * row_bytes + (size_t)k0 * sizeof(_elem_t);    \
            uint32_t       k   = 0;                                                                \
            for (; k + 16 <= kc; k += 16, col += 16 * sizeof(_elem_t)) {                           \
                __m512         r[16];                                                              \
                const uint8_t *p = col;                                                            \
                for (int i = 0; i < 16; i++, p += row_bytes) {                                     \
                    r[i] = _load((const _elem_t *)p);                                              \
                }                                                                                  \
                op_tr16(r, P + (size_t)k * ldp + 16 * v, ldp);                                     \
            }                                                                                      \
            if (k < kc) {                                                                          \
                __m512         r[16];                                                              \
                const uint8_t *p = col;                                                            \
                for (int i = 0; i < 16; i++, p += row_bytes) {                                     \
                    _elem_t tail[16] = {0};                                                        \
                    memcpy(tail, p, (kc - k) * sizeof(_elem_t));                                   \
                    r[i] = _load(tail);                                                            \
                }                                                                                  \
                op_tr16(r, P + (size_t)k * ldp + 16 * v, ldp);                                     \
            }                                                                                      \
        }                                                                                          \
    }
OP_PACK_FN(op_pack_f32, float, _mm512_loadu_ps)
OP_PACK_FN(op_pack_bf16, uint16_t, bf16x16)

/* y[j][0 .. 16 pv) (+)= sum over k < kc of x[j][k] * P[k][..], j < nb; first:
 * start from zero, else from y. Prefetches pf_lines lines from pf (the next
 * panel) spread over the loop. Inlined into one function per (pv, nb). */
__attribute__((target("avx512f"), always_inline)) static inline void
op_block(const float *P, uint32_t kc, const float *x, uint32_t ldx, float *y, uint32_t ldy,
         int first, const char *pf, uint32_t pf_lines, const int pv, const int nb)
{
    __m512   acc[OP_NB][OP_PV];
    uint32_t ppk = (pf_lines + kc - 1) / kc; /* lines per k step */

    for (int j = 0; j < nb; j++) {
        for (int v = 0; v < pv; v++) {
            acc[j][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)j * ldy + 16 * v);
        }
    }
    for (uint32_t k = 0; k < kc; k++) {
        __m512 wv[OP_PV];
        if (k * ppk < pf_lines) {
            for (uint32_t q = 0; q < ppk; q++) {
                _mm_prefetch(pf + (size_t)64 * (k * ppk + q), _MM_HINT_T0);
            }
        }
        for (int v = 0; v < pv; v++) {
            wv[v] = _mm512_load_ps(P + (size_t)k * 16 * pv + 16 * v);
        }
        for (int j = 0; j < nb; j++) {
            __m512 xb = _mm512_set1_ps(x[(size_t)j * ldx + k]);
            for (int v = 0; v < pv; v++) {
                acc[j][v] = _mm512_fmadd_ps(wv[v], xb, acc[j][v]);
            }
        }
    }
    for (int j = 0; j < nb; j++) {
        for (int v = 0; v < pv; v++) {
            _mm512_storeu_ps(y + (size_t)j * ldy + 16 * v, acc[j][v]);
        }
    }
}

typedef void (*op_block_fn)(const float *P, uint32_t kc, const float *x, uint32_t ldx, float *y,
                            uint32_t ldy, int first, const char *pf, uint32_t pf_lines);
#define OP_BLOCK_INST(_pv, _nb)                                                                    \
    __attribute__((target("avx512f"))) static void op_block_##_pv##_##_nb(                         \
        const float *P, uint32_t kc, const float *x, uint32_t ldx, float *y, uint32_t ldy,         \
        int first, const char *pf, uint32_t pf_lines)                                              \
    {                                                                                              \
        op_block(P, kc, x, ldx, y, ldy, first, pf, pf_lines, _pv, _nb);                            \
    }
OP_BLOCK_INST(1, 1)
OP_BLOCK_INST(1, 2)
OP_BLOCK_INST(1, 4)
OP_BLOCK_INST(1, 8)
OP_BLOCK_INST(2, 1)
OP_BLOCK_INST(2, 2)
OP_BLOCK_INST(2, 4)
OP_BLOCK_INST(2, 8)
OP_BLOCK_INST(3, 1)
OP_BLOCK_INST(3, 2)
OP_BLOCK_INST(3, 4)
OP_BLOCK_INST(3, 8)

/* [pv - 1][log2 nb] */
static const op_block_fn op_blocks[OP_PV][4] = {
    {op_block_1_1, op_block_1_2, op_block_1_4, op_block_1_8},
    {op_block_2_1, op_block_2_2, op_block_2_4, op_block_2_8},
    {op_block_3_1, op_block_3_2, op_block_3_4, op_block_3_8},
};
#endif

/* The batched NT kernel for this matmul, or fn NULL (then GEMM or dots). */
static nt_kernel_t nt_kernel_for(const cpu_state_t *s, const moon_tensor_t *w, uint32_t b)
{
    nt_kernel_t k = {NULL, 0, 0, 0};

    if (s->nt_isa == 0 || b < 2 || b > 64) {
        return k;
    }
#ifdef MOON_X86
    if (s->nt_isa == 512 && w->cols % 16 == 0) {
        k.mr    = NT_MR;
        k.nb    = NT_NB;
        k.kstep = 16;
        k.fn    = w->type == MOON_GGML_F32    ? nt_4x6_f32
                  : w->type == MOON_GGML_BF16 ? nt_4x6_bf16
                                              : NULL;
    } else if (s->nt_isa == 2 && w->cols % 8 == 0) {
        k.mr    = NT2_MR;
        k.nb    = NT2_NB;
        k.kstep = 8;
        k.fn    = w->type == MOON_GGML_F32    ? nt_3x4_f32_avx2
                  : w->type == MOON_GGML_BF16 ? nt_3x4_bf16_avx2
                                              : NULL;
    }
#endif
    return k;
}

static void matmul_nt(cpu_state_t *s, nt_kernel_t kern, const moon_tensor_t *w, float *y,
                      const float *x, uint32_t b, uint32_t r0, uint32_t r1)
{
    const uint8_t *base = (const uint8_t *)w->data;
    dot_fn         dot  = s->dot[w->type];
    uint32_t       K    = w->cols;
    uint32_t       r    = r0;

    for (; r + kern.mr <= r1; r += kern.mr) {
        const uint8_t *wr = base + (size_t)r * w->row_bytes;
        uint32_t       bi = 0;
        for (; bi + kern.nb <= b; bi += kern.nb) {
            kern.fn(wr, w->row_bytes, x + (size_t)bi * K, K, y + (size_t)bi * w->rows + r, w->rows);
        }
        for (; bi < b; bi++) {
            for (uint32_t i = 0; i < kern.mr; i++) {
                y[(size_t)bi * w->rows + r + i] =
                    dot(wr + (size_t)i * w->row_bytes, x + (size_t)bi * K, K);
            }
        }
    }
    for (; r < r1; r++) {
        for (uint32_t bi = 0; bi < b; bi++) {
            y[(size_t)bi * w->rows + r] =
                dot(base + (size_t)r * w->row_bytes, x + (size_t)bi * K, K);
        }
    }
}

#ifdef MOON_X86
/* Y[bi][r] = W[r] . X[bi] for rows [r0, r1) and all b batch rows by the
 * outer-product kernels (w F32 or BF16, any cols): panels of 32 (then
 * 16) rows, the last r1 - r0 < 16 rows by dots. */
static void matmul_op(cpu_state_t *s, uint32_t ith, const moon_tensor_t *w, float *y,
                      const float *x, uint32_t b, uint32_t r0, uint32_t r1)
{
    const uint8_t *base = (const uint8_t *)w->data;
    float         *P    = s->pack + (size_t)ith * OP_KC * 16 * OP_PV;
    uint32_t       K    = w->cols;
    uint32_t       ldy  = w->rows;
    void (*pack)(const uint8_t *, size_t, uint32_t, uint32_t, uint32_t, float *) =
        w->type == MOON_GGML_BF16 ? op_pack_bf16 : op_pack_f32;
    uint32_t n_blocks = b / OP_NB + (uint32_t)__builtin_popcount(b % OP_NB);
    uint32_t n_calls  = (K + OP_KC - 1) / OP_KC * n_blocks; /* kernel calls per panel */
    uint32_t r        = r0;

    while (r + 16 <= r1) {
        uint32_t    pv   = MOON_MIN(OP_PV, (r1 - r) / 16);
        uint32_t    rn   = r + 16 * pv;
        uint32_t    nxt  = MOON_MIN(16 * OP_PV, (r1 - rn) & ~15u); /* rows of the next panel */
        const char *pf   = (const char *)(base + (size_t)rn * w->row_bytes);
        uint32_t    pf_n = (uint32_t)((size_t)nxt * w->row_bytes / 64); /* its cache lines */
        uint32_t    per  = (pf_n + n_calls - 1) / n_calls;
        uint32_t    call = 0;

        for (uint32_t k0 = 0; k0 < K; k0 += OP_KC) {
            uint32_t kc = MOON_MIN(OP_KC, K - k0);
            pack(base + (size_t)r * w->row_bytes, w->row_bytes, k0, kc, pv, P);
            for (uint32_t bi = 0; bi < b; call++) {
                uint32_t left  = b - bi;
                uint32_t lg    = left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0;
                uint32_t done  = MOON_MIN(pf_n, per * call);
                uint32_t lines = MOON_MIN(per, pf_n - done);
                op_blocks[pv - 1][lg](P, kc, x + (size_t)bi * K + k0, K, y + (size_t)bi * ldy + r,
                                      ldy, k0 == 0, pf + (size_t)64 * done, lines);
                bi += 1u << lg;
            }
        }
        r = rn;
    }
    for (; r < r1; r++) {
        for (uint32_t bi = 0; bi < b; bi++) {
            y[(size_t)bi * ldy + r] =
                s->dot[w->type](base + (size_t)r * w->row_bytes, x + (size_t)bi * K, K);
        }
    }
}
#endif

#ifdef MOON_X86
/* Batched matmul with the batch in the vector lanes (AVX-512, batches of
 * BT_MIN_B..BT_MAX_B rows): X is transposed once per step into the thread's
 * xt (k-major, batch rows padded with zeros to 16 nvec), then BT_MR weight
 * rows at a time run down k: each weight W[r][k] is broadcast straight from
 * the row-major matrix (a BF16 pair widened with a shift and a mask) and
 * multiplies X^T[k][0..16 nvec) into accumulators holding y[0..b)[r]. Every
 * weight is read once, in row order, with no packing; each output is one
 * sequential sum over k (the reference's order). */
#define BT_MR 12
#define BT_MAX_B 32
/* BT_MIN_B is s->bt_min_b (tuning cpu-bt-min-b, 29: below, the padded lanes cost
 * more than the outer-product path's packing) */
#define BT_CHUNK 48 /* output rows gathered in the thread's yt before the transposed store */

/* xt[k * 16 nvec + j] = x[j][k] for j < b, 0 for b <= j < 16 nvec. */
__attribute__((target("avx512f"))) static void bt_transpose_x(const float *x, uint32_t b,
                                                              uint32_t K, uint32_t nvec, float *xt)
{
    uint32_t ldt = 16 * nvec;

    for (uint32_t v = 0; v < nvec; v++) {
        for (uint32_t k = 0; k < K; k += 16) {
            __m512 r[16];
            for (uint32_t i = 0; i < 16; i++) {
                uint32_t j = 16 * v + i;
                r[i]       = j < b ? _mm512_loadu_ps(x + (size_t)j * K + k) : _mm512_setzero_ps();
            }
            op_tr16(r, xt + (size_t)k * ldt + 16 * v, ldt);
        }
    }
}

/* Asks for the line at byte offset off of row i + mr into L2: the same column
 * of the next block of rows, so the block after this one finds its weights
 * there (one block ahead: 12 rows x K, tens of KiB). Past the last row it
 * names memory the loop never reads, which a prefetch may (it never faults);
 * the address is formed as an integer for that reason. */
__attribute__((always_inline)) static inline void bt_prefetch_next(const uint8_t *w,
                                                                   size_t row_bytes, int i,
                                                                   int mr, size_t off)
{
    _mm_prefetch((const char *)((uintptr_t)w + (size_t)(i + mr) * row_bytes + off), _MM_HINT_T1);
}

/* The accumulators of a block: mr rows of nvec vectors of batch lanes. */
__attribute__((target("avx512f"), always_inline)) static inline void
bt_acc_zero(__m512 acc[][2], const int mr, const int nvec)
{
    for (int i = 0; i < mr; i++) {
        for (int v = 0; v < nvec; v++) {
            acc[i][v] = _mm512_setzero_ps();
        }
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void
bt_acc_store(__m512 acc[][2], float *yt, size_t ldt, const int mr, const int nvec)
{
    for (int i = 0; i < mr; i++) {
        for (int v = 0; v < nvec; v++) {
            _mm512_store_ps(yt + (size_t)i * ldt + 16 * v, acc[i][v]);
        }
    }
}

/* yt[i][0 .. 16 nvec) = sum over k < K of W[i][k] * xt[k][..] for the mr
 * rows at w (F32 or BF16 rows of row_bytes). Inlined into one function per
 * (type, mr, nvec). */
__attribute__((target("avx512f"), always_inline)) static inline void
bt_block(const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K, float *yt, const int bf16,
         const int mr, const int nvec)
{
    __m512 acc[BT_MR][2];
    size_t ldt = 16 * (size_t)nvec;

    bt_acc_zero(acc, mr, nvec);
    for (uint32_t k0 = 0; k0 < K; k0 += 16) {
        for (int i = 0; i < mr; i++) { /* each row's next line (farther ahead measured slower) */
            _mm_prefetch((const char *)w + (size_t)i * row_bytes + (bf16 ? 2 : 4) * k0 + 64,
                         _MM_HINT_T0);
            bt_prefetch_next(w, row_bytes, i, mr, (bf16 ? 2 : 4) * (size_t)k0);
        }
        if (!bf16) {
            for (uint32_t k = k0; k < k0 + 16; k++) {
                __m512 xv[2];
                for (int v = 0; v < nvec; v++) {
                    xv[v] = _mm512_load_ps(xt + k * ldt + 16 * v);
                }
                for (int i = 0; i < mr; i++) {
                    __m512 wb = _mm512_set1_ps(((const float *)(w + (size_t)i * row_bytes))[k]);
                    for (int v = 0; v < nvec; v++) {
                        acc[i][v] = _mm512_fmadd_ps(wb, xv[v], acc[i][v]);
                    }
                }
            }
        } else {
            const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
            for (uint32_t k = k0; k < k0 + 16; k += 2) {
                __m512 x0[2], x1[2];
                for (int v = 0; v < nvec; v++) {
                    x0[v] = _mm512_load_ps(xt + k * ldt + 16 * v);
                    x1[v] = _mm512_load_ps(xt + (k + 1) * ldt + 16 * v);
                }
                for (int i = 0; i < mr; i++) {
                    uint32_t pair;
                    memcpy(&pair, w + (size_t)i * row_bytes + 2 * (size_t)k, sizeof(pair));
                    __m512i p  = _mm512_set1_epi32((int)pair);
                    __m512  w0 = _mm512_castsi512_ps(_mm512_slli_epi32(p, 16));
                    __m512  w1 = _mm512_castsi512_ps(_mm512_and_si512(p, hi));
                    for (int v = 0; v < nvec; v++) {
                        acc[i][v] = _mm512_fmadd_ps(w0, x0[v], acc[i][v]);
                        acc[i][v] = _mm512_fmadd_ps(w1, x1[v], acc[i][v]);
                    }
                }
            }
        }
    }
    bt_acc_store(acc, yt, ldt, mr, nvec);
}

/* The same with BF16 products (AVX512_BF16 vdpbf16ps): xt holds X^T with its
 * k pairs packed, lane j of pair p = (bf16 x[j][2p], bf16 x[j][2p + 1]), and
 * each weight pair, broadcast as it lies in the row, multiplies it in one
 * instruction that adds both products into the f32 accumulator. Twice the
 * products per instruction of the widening path, with no widening; the
 * activations are rounded to BF16 (see bt_pack_bf16). */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
bt_block_dp(const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K, float *yt,
            const int mr, const int nvec)
{
    __m512 acc[BT_MR][2];
    size_t ldt = 16 * (size_t)nvec;

    bt_acc_zero(acc, mr, nvec);
    for (uint32_t k0 = 0; k0 < K; k0 += 32) {
        for (int i = 0; i < mr; i++) {
            _mm_prefetch((const char *)w + (size_t)i * row_bytes + 2 * k0 + 64, _MM_HINT_T0);
            bt_prefetch_next(w, row_bytes, i, mr, 2 * (size_t)k0);
        }
        for (uint32_t k = k0; k < k0 + 32 && k < K; k += 2) {
            __m512bh xp[2];
            for (int v = 0; v < nvec; v++) {
                xp[v] = (__m512bh)_mm512_load_si512(xt + (k / 2) * ldt + 16 * v);
            }
            for (int i = 0; i < mr; i++) {
                uint32_t pair;
                memcpy(&pair, w + (size_t)i * row_bytes + 2 * (size_t)k, sizeof(pair));
                __m512bh wp = (__m512bh)_mm512_set1_epi32((int)pair);
                for (int v = 0; v < nvec; v++) {
                    acc[i][v] = _mm512_dpbf16_ps(acc[i][v], wp, xp[v]);
                }
            }
        }
    }
    bt_acc_store(acc, yt, ldt, mr, nvec);
}

/* xt (bt_transpose_x's f32 X^T, K even) rewritten in place as BF16 pairs for
 * bt_block_dp: pair p of lane j = (x[j][2p], x[j][2p + 1]) rounded to nearest
 * even; pair p lands where row 2p was read, before row 2p + 2 is. */
__attribute__((target("avx512f,avx512bf16"))) static void bt_pack_bf16(float *xt, uint32_t K,
                                                                       uint32_t nvec)
{
    size_t ldt = 16 * (size_t)nvec;

    for (uint32_t p = 0; p < K / 2; p++) {
        for (uint32_t v = 0; v < nvec; v++) {
            __m512  lo = _mm512_load_ps(xt + 2 * p * ldt + 16 * v);
            __m512  hi = _mm512_load_ps(xt + (2 * p + 1) * ldt + 16 * v);
            __m512i l  = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
            __m512i h  = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
            _mm512_store_si512(xt + p * ldt + 16 * v, _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
        }
    }
}

typedef void (*bt_block_fn)(const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K,
                            float *yt);
#define BT_BLOCK_INST(_bf16, _mr, _nvec)                                                           \
    __attribute__((target("avx512f"))) static void bt_block_##_bf16##_##_mr##_##_nvec(             \
        const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K, float *yt)                \
    {                                                                                              \
        bt_block(w, row_bytes, xt, K, yt, _bf16, _mr, _nvec);                                      \
    }
#define BT_BLOCK_INSTS(_bf16, _nvec)                                                               \
    BT_BLOCK_INST(_bf16, 12, _nvec)                                                                \
    BT_BLOCK_INST(_bf16, 4, _nvec)                                                                 \
    BT_BLOCK_INST(_bf16, 1, _nvec)
BT_BLOCK_INSTS(0, 1)
BT_BLOCK_INSTS(0, 2)
BT_BLOCK_INSTS(1, 1)
BT_BLOCK_INSTS(1, 2)
#define BT_DP_INST(_mr, _nvec)                                                                     \
    __attribute__((target("avx512f,avx512bf16"))) static void bt_block_2_##_mr##_##_nvec(           \
        const uint8_t *w, size_t row_bytes, const float *xt, uint32_t K, float *yt)                \
    {                                                                                              \
        bt_block_dp(w, row_bytes, xt, K, yt, _mr, _nvec);                                          \
    }
BT_DP_INST(12, 1)
BT_DP_INST(4, 1)
BT_DP_INST(1, 1)
BT_DP_INST(12, 2)
BT_DP_INST(4, 2)
BT_DP_INST(1, 2)

/* [F32, BF16 widened, BF16 products][nvec - 1][12 rows, 4 rows, 1 row] */
static const bt_block_fn bt_blocks[3][2][3] = {
    {{bt_block_0_12_1, bt_block_0_4_1, bt_block_0_1_1},
     {bt_block_0_12_2, bt_block_0_4_2, bt_block_0_1_2}},
    {{bt_block_1_12_1, bt_block_1_4_1, bt_block_1_1_1},
     {bt_block_1_12_2, bt_block_1_4_2, bt_block_1_1_2}},
    {{bt_block_2_12_1, bt_block_2_4_1, bt_block_2_1_1},
     {bt_block_2_12_2, bt_block_2_4_2, bt_block_2_1_2}},
};

/* y[j][0 .. rc) = yt[0 .. rc)[j] for j < b: yt (rc rows of 16 nvec outputs,
 * one per batch row) back into the row-major output, 16 x 16 at a time. */
__attribute__((target("avx512f"))) static void bt_store(const float *yt, uint32_t rc, uint32_t nvec,
                                                        float *y, uint32_t ldy, uint32_t b)
{
    uint32_t ldt = 16 * nvec, g = 0;

    for (; g + 16 <= rc; g += 16) {
        for (uint32_t v = 0; v < nvec; v++) {
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                r[i] = _mm512_load_ps(yt + (size_t)(g + i) * ldt + 16 * v);
            }
            tr16_regs(r);
            for (uint32_t j = 0; j < 16 && 16 * v + j < b; j++) {
                _mm512_storeu_ps(y + (size_t)(16 * v + j) * ldy + g, r[j]);
            }
        }
    }
    for (; g < rc; g++) {
        for (uint32_t j = 0; j < b; j++) {
            y[(size_t)j * ldy + g] = yt[(size_t)g * ldt + j];
        }
    }
}

/* Y[bi][r] = W[r] . X[bi] for rows [r0, r1), b <= BT_MAX_B batch rows; x is
 * already transposed into xt (bt_transpose_x); yt: BT_CHUNK x BT_MAX_B
 * scratch of the thread. */
static void matmul_bt(const moon_tensor_t *w, float *y, const float *xt, float *yt, uint32_t b,
                      uint32_t r0, uint32_t r1, int dp)
{
    const uint8_t *base = (const uint8_t *)w->data;
    uint32_t       nvec = (b + 15) / 16;
    int            bf16 = dp ? 2 : w->type == MOON_GGML_BF16;

    for (uint32_t c0 = r0; c0 < r1; c0 += BT_CHUNK) {
        uint32_t rc = MOON_MIN(BT_CHUNK, r1 - c0);
        for (uint32_t r = 0; r < rc;) {
            uint32_t left = rc - r;
            uint32_t sel  = left >= 12 ? 0 : left >= 4 ? 1 : 2;
            bt_blocks[bf16][nvec - 1][sel](base + (size_t)(c0 + r) * w->row_bytes, w->row_bytes, xt,
                                           w->cols, yt + (size_t)r * 16 * nvec);
            r += sel == 0 ? 12 : sel == 1 ? 4 : 1;
        }
        bt_store(yt, rc, nvec, y + c0, w->rows, b);
    }
}
#endif

/* ---- parallel steps -------------------------------------------------------------- */

/* y[bi][r] for rows [r0, r1) of w, all batch rows. */
static void matmul_slice(cpu_state_t *s, uint32_t ith, const moon_tensor_t *w, float *y,
                         const float *x, uint32_t b, uint32_t r0, uint32_t r1)
{
    dot_fn dot = s->dot[w->type];
    float *tile =
        s->wtile + (size_t)ith * TILE_ROWS * MOON_MAX(s->m->cfg.dim, s->m->cfg.hidden_dim);
    uint32_t cols = w->cols;

    if (r0 >= r1) {
        return;
    }
#ifdef MOON_X86
    if (s->nt_isa == 512 && b >= s->op_min_b &&
        (w->type == MOON_GGML_F32 || w->type == MOON_GGML_BF16)) {
        matmul_op(s, ith, w, y, x, b, r0, r1);
        return;
    }
#endif
    if (b > 1 && b <= 64) {
        nt_kernel_t kern = nt_kernel_for(s, w, b);
        if (kern.fn != NULL) {
            matmul_nt(s, kern, w, y, x, b, r0, r1);
            return;
        }
    }
    if (b == 1 && dot != NULL) {
        const uint8_t *base = (const uint8_t *)w->data;
        for (uint32_t r = r0; r < r1; r++) {
            y[r] = dot(base + (size_t)r * w->row_bytes, x, cols);
        }
        return;
    }
#ifdef MOON_HAVE_OPENBLAS
    if (b > 1 && w->type == MOON_GGML_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)(r1 - r0), (int)cols,
                    1.0f, x, (int)cols, (const float *)w->data + (size_t)r0 * cols, (int)cols, 0.0f,
                    y + r0, (int)w->rows);
        return;
    }
#endif
    for (uint32_t t0 = r0; t0 < r1; t0 += TILE_ROWS) {
        uint32_t nt = MOON_MIN(TILE_ROWS, r1 - t0);
        for (uint32_t r = 0; r < nt; r++) {
            moon_tensor_row(w, t0 + r, tile + (size_t)r * cols);
        }
#ifdef MOON_HAVE_OPENBLAS
        if (b > 1) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)nt, (int)cols, 1.0f,
                        x, (int)cols, tile, (int)cols, 0.0f, y + t0, (int)w->rows);
            continue;
        }
#endif
        for (uint32_t bi = 0; bi < b; bi++) {
            for (uint32_t r = 0; r < nt; r++) {
                y[(size_t)bi * w->rows + t0 + r] =
                    s->dot_f32(tile + (size_t)r * cols, x + (size_t)bi * cols, cols);
            }
        }
    }
}

#ifdef MOON_X86
/* Lane j of the result = the sum of the 16 lanes of d[idx(j)], idx = the
 * order in which the shuffles leave the rows (an involution): callers put row
 * j's vector at d[op_hsum_idx[j]]. */
static const uint8_t op_hsum_idx[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

__attribute__((target("avx512f"))) static inline __m512 hsum16x16(const __m512 d[16])
{
    __m512 e[8], f[4], g[2];

    for (int j = 0; j < 8; j++) {
        e[j] = _mm512_add_ps(_mm512_shuffle_f32x4(d[j], d[j + 8], 0x44),
                             _mm512_shuffle_f32x4(d[j], d[j + 8], 0xee));
    }
    for (int j = 0; j < 4; j++) {
        f[j] = _mm512_add_ps(_mm512_shuffle_f32x4(e[j], e[j + 4], 0x88),
                             _mm512_shuffle_f32x4(e[j], e[j + 4], 0xdd));
    }
    for (int j = 0; j < 2; j++) {
        g[j] = _mm512_add_ps(_mm512_shuffle_ps(f[j], f[j + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(f[j], f[j + 2], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* One (row, head) of decode attention over positions [0, n), head_dim <= 128
 * (a head_dim that is not a multiple of 16 ends in a masked vector): q in
 * registers, 16 positions' dot products reduced together, softmax with the
 * vector exp, the output accumulated in registers (the reference's order
 * over positions). K/V rows are walked block by block of the paged cache (no
 * division per position). */
/* Vector i of a head: the last (i == lv) masked by lm when tail is set. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
head_load(const float *p, uint32_t i, uint32_t lv, __mmask16 lm, const int tail)
{
    return tail && i == lv ? _mm512_maskz_loadu_ps(lm, p + 16 * i) : _mm512_loadu_ps(p + 16 * i);
}

/* Inlined twice: tail 0 (head_dim % 16 == 0, plain loads) and tail 1. */
__attribute__((target("avx512f"), always_inline)) static inline void
attn_head_body(const cpu_state_t *s, const moon_kv_seq_t *sq, uint32_t l, uint32_t off, uint32_t n,
               const float *q, float *o, float *att, float scale, const int tail)
{
    const moon_kv_cache_t *kv = s->kv;
    uint32_t               hs = s->m->cfg.head_dim, bt = kv->cfg.block_tokens;
    uint32_t               nv = (hs + 15) / 16, lv = nv - 1; /* lv: the last, maybe partial */
    __mmask16              lm = (__mmask16)(hs % 16 ? (1u << (hs % 16)) - 1 : 0xffffu);
    size_t                 ld = kv->kv_dim;
    __m512                 qv[8], ov[8];
    float                  inv;

    for (uint32_t i = 0; i < nv; i++) {
        qv[i] = head_load(q, i, lv, lm, tail);
        ov[i] = _mm512_setzero_ps();
    }
    {
        const float *k  = moon_kv_vec(kv, sq, l, 0, 0) + off; /* position t */
        uint32_t     tb = 0;                                  /* t % bt */
        for (uint32_t t0 = 0; t0 < n; t0 += 16) {
            uint32_t m = MOON_MIN(16, n - t0);
            __m512   d[16], sc;
            for (uint32_t j = 0; j < 16; j++) {
                d[op_hsum_idx[j]] = _mm512_setzero_ps();
            }
            for (uint32_t j = 0; j < m; j++) {
                __m512 acc = _mm512_mul_ps(head_load(k, 0, lv, lm, tail), qv[0]);
                for (uint32_t i = 1; i < nv; i++) {
                    acc = _mm512_fmadd_ps(head_load(k, i, lv, lm, tail), qv[i], acc);
                }
                d[op_hsum_idx[j]] = acc;
                if (++tb == bt) {
                    tb = 0;
                    k  = t0 + j + 1 < n ? moon_kv_vec(kv, sq, l, 0, t0 + j + 1) + off : k;
                } else {
                    k += ld;
                }
            }
            sc = _mm512_mul_ps(hsum16x16(d), _mm512_set1_ps(scale));
            _mm512_mask_storeu_ps(att + t0, (__mmask16)((1u << m) - 1), sc);
        }
    }
    inv = 1.0f / softmax_exp_avx512(att, n);
    if (nv == 1) {
        /* one vector per position: 4 accumulators, so the FMAs do not wait on
         * each other's latency (small heads; stories260K's are 8 floats) */
        __m512 o1 = _mm512_setzero_ps(), o2 = _mm512_setzero_ps(), o3 = _mm512_setzero_ps();
        for (uint32_t t0 = 0; t0 < n; t0 += bt) {
            const float *v  = moon_kv_vec(kv, sq, l, 1, t0) + off;
            uint32_t     t1 = MOON_MIN(n, t0 + bt), t = t0;
            for (; t + 4 <= t1; t += 4, v += 4 * ld) {
                ov[0] = _mm512_fmadd_ps(_mm512_set1_ps(att[t]), head_load(v, 0, 0, lm, tail), ov[0]);
                o1    = _mm512_fmadd_ps(_mm512_set1_ps(att[t + 1]), head_load(v + ld, 0, 0, lm, tail),
                                        o1);
                o2    = _mm512_fmadd_ps(_mm512_set1_ps(att[t + 2]),
                                        head_load(v + 2 * ld, 0, 0, lm, tail), o2);
                o3    = _mm512_fmadd_ps(_mm512_set1_ps(att[t + 3]),
                                        head_load(v + 3 * ld, 0, 0, lm, tail), o3);
            }
            for (; t < t1; t++, v += ld) {
                ov[0] = _mm512_fmadd_ps(_mm512_set1_ps(att[t]), head_load(v, 0, 0, lm, tail), ov[0]);
            }
        }
        ov[0] = _mm512_add_ps(_mm512_add_ps(ov[0], o1), _mm512_add_ps(o2, o3));
        _mm512_mask_storeu_ps(o, lm, _mm512_mul_ps(ov[0], _mm512_set1_ps(inv)));
        return;
    }
    for (uint32_t t0 = 0; t0 < n; t0 += bt) {
        const float *v = moon_kv_vec(kv, sq, l, 1, t0) + off;
        for (uint32_t t = t0; t < MOON_MIN(n, t0 + bt); t++, v += ld) {
            __m512 a = _mm512_set1_ps(att[t] * inv);
            for (uint32_t i = 0; i < nv; i++) {
                ov[i] = _mm512_fmadd_ps(a, head_load(v, i, lv, lm, tail), ov[i]);
            }
        }
    }
    for (uint32_t i = 0; i < nv; i++) {
        _mm512_mask_storeu_ps(o + 16 * i, tail && i == lv ? lm : 0xffff, ov[i]);
    }
}

__attribute__((target("avx512f"))) static void
attn_head_avx512(const cpu_state_t *s, const moon_kv_seq_t *sq, uint32_t l, uint32_t off,
                 uint32_t n, const float *q, float *o, float *att, float scale)
{
    if (s->m->cfg.head_dim % 16 == 0) {
        attn_head_body(s, sq, l, off, n, q, o, att, scale, 0);
    } else {
        attn_head_body(s, sq, l, off, n, q, o, att, scale, 1);
    }
}
#endif

static void attn_rows(cpu_state_t *s, uint32_t ith, uint32_t nth)
{
    const moon_model_config_t *c      = &s->m->cfg;
    uint32_t                   hs     = c->head_dim;
    uint32_t                   kv_mul = c->n_heads / c->n_kv_heads;
    uint32_t                   total  = s->job.b * c->n_heads;
    uint32_t                   p0 = total * ith / nth, p1 = total * (ith + 1) / nth;
    float                     *att   = s->att + (size_t)ith * c->seq_len;
    float                      scale = 1.0f / sqrtf((float)hs);
    uint32_t                   l     = s->job.layer;

    for (uint32_t p = p0; p < p1; p++) {
        uint32_t             bi = p / c->n_heads, h = p % c->n_heads;
        uint32_t             pos = s->pos[bi], kvh = h / kv_mul;
        const moon_kv_seq_t *sq  = s->seq[bi];
        const float         *q   = s->q + (size_t)bi * c->dim + h * hs;
        float               *o   = s->ao + (size_t)bi * c->dim + h * hs;
        float                sum;

#ifdef MOON_X86
        if (s->nt_isa == 512 && hs <= 128) {
            attn_head_avx512(s, sq, l, kvh * hs, pos + 1, q, o, att, scale);
            continue;
        }
#endif
        for (uint32_t t = 0; t <= pos; t++) {
            const float *k = moon_kv_vec(s->kv, sq, l, 0, t) + kvh * hs;
            att[t]         = s->dot_f32(k, q, hs) * scale;
        }
        sum = s->softmax_exp(att, pos + 1);
        memset(o, 0, hs * sizeof(float));
        for (uint32_t t = 0; t <= pos; t++) {
            s->axpy(o, att[t] / sum, moon_kv_vec(s->kv, sq, l, 1, t) + kvh * hs, hs);
        }
    }
}

#ifdef MOON_HAVE_OPENBLAS
/* Prefill attention as two GEMMs per head: rows 0..b of one sequence at
 * consecutive positions pos[0].., each head's K/V gathered from the paged
 * cache into a contiguous scratch. Heads are split across threads. */
static void attn_gemm_heads(cpu_state_t *s, uint32_t ith, uint32_t nth)
{
    const moon_model_config_t *c        = &s->m->cfg;
    uint32_t                   hs       = c->head_dim;
    uint32_t                   kv_mul   = c->n_heads / c->n_kv_heads;
    uint32_t                   b        = s->job.b;
    uint32_t                   p0       = s->pos[0];
    uint32_t                   ctx      = p0 + b; /* keys the last row sees */
    uint32_t                   l        = s->job.layer;
    const moon_kv_seq_t       *sq       = s->seq[0];
    float                     *kc       = s->kc + (size_t)ith * c->seq_len * hs;
    float                     *vc       = s->vc + (size_t)ith * c->seq_len * hs;
    float                     *sc       = s->sc + (size_t)ith * ATTN_QCHUNK * c->seq_len;
    uint32_t                   last_kvh = UINT32_MAX;

    for (uint32_t h = c->n_heads * ith / nth; h < c->n_heads * (ith + 1) / nth; h++) {
        uint32_t kvh = h / kv_mul;
        if (kvh != last_kvh) {
            for (uint32_t t = 0; t < ctx; t++) {
                memcpy(kc + (size_t)t * hs, moon_kv_vec(s->kv, sq, l, 0, t) + kvh * hs,
                       hs * sizeof(float));
                memcpy(vc + (size_t)t * hs, moon_kv_vec(s->kv, sq, l, 1, t) + kvh * hs,
                       hs * sizeof(float));
            }
            last_kvh = kvh;
        }
        /* query rows in chunks of ATTN_QCHUNK: each sees keys 0..p0 + its last row */
        for (uint32_t i0 = 0; i0 < b; i0 += ATTN_QCHUNK) {
            uint32_t nb = MOON_MIN(ATTN_QCHUNK, b - i0);
            uint32_t nk = p0 + i0 + nb;
            /* S (nb, nk) = Q_h K_h^T / sqrt(hs) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)nk, (int)hs,
                        1.0f / sqrtf((float)hs), s->q + (size_t)i0 * c->dim + h * hs, (int)c->dim,
                        kc, (int)hs, 0.0f, sc, (int)nk);
            /* causal softmax: row i sees positions 0..p0 + i */
            for (uint32_t r = 0; r < nb; r++) {
                float   *row = sc + (size_t)r * nk;
                uint32_t n   = p0 + i0 + r + 1;
                float    inv = 1.0f / s->softmax_exp(row, n);
                for (uint32_t t = 0; t < n; t++) {
                    row[t] *= inv;
                }
                memset(row + n, 0, (nk - n) * sizeof(float));
            }
            /* O_h (nb, hs) = P V_h */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nb, (int)hs, (int)nk, 1.0f,
                        sc, (int)nk, vc, (int)hs, 0.0f, s->ao + (size_t)i0 * c->dim + h * hs,
                        (int)c->dim);
        }
    }
}
#endif

#ifdef MOON_X86
/* Whether a matmul step runs on the batch-in-lanes kernels: AVX-512, a batch
 * of bt_min_b..BT_MAX_B rows, every matrix F32 or BF16 with cols % 16 == 0. */
static int bt_ok(const cpu_state_t *s, const job_t *j)
{
    if (s->nt_isa != 512 || j->b < s->bt_min_b || j->b > BT_MAX_B) {
        return 0;
    }
    for (uint32_t i = 0; i < j->n_mats; i++) {
        const moon_tensor_t *w = j->w[i];
        if (w->cols % 16 != 0 || (w->type != MOON_GGML_F32 && w->type != MOON_GGML_BF16)) {
            return 0;
        }
    }
    return 1;
}
#endif

#ifdef MOON_X86
/* Whether a batch-in-lanes step runs on BF16 products: enabled, and every
 * matrix BF16. */
static int bt_dp_ok(const cpu_state_t *s, const job_t *j)
{
    if (!s->bf16_dp) {
        return 0;
    }
    for (uint32_t i = 0; i < j->n_mats; i++) {
        if (j->w[i]->type != MOON_GGML_BF16) {
            return 0;
        }
    }
    return 1;
}
#endif

static void run_job(void *arg, uint32_t ith, uint32_t nth)
{
    cpu_state_t *s   = arg;
    job_t       *j   = &s->job;
    uint32_t     dim = s->m->cfg.dim;

    switch (j->kind) {
    case JOB_MATMUL:
#ifdef MOON_X86
        if (bt_ok(s, j)) {
            /* every matrix of the step shares x: transpose it once per thread */
            float *xt =
                s->xt + (size_t)ith * MOON_MAX(s->m->cfg.dim, s->m->cfg.hidden_dim) * BT_MAX_B;
            int dp = bt_dp_ok(s, j);
            bt_transpose_x(j->x, j->b, j->w[0]->cols, (j->b + 15) / 16, xt);
            if (dp) {
                bt_pack_bf16(xt, j->w[0]->cols, (j->b + 15) / 16);
            }
            for (uint32_t i = 0; i < j->n_mats; i++) {
                uint32_t rows = j->w[i]->rows;
                matmul_bt(j->w[i], j->y[i], xt, s->yt + (size_t)ith * BT_CHUNK * BT_MAX_B, j->b,
                          rows * ith / nth, rows * (ith + 1) / nth, dp);
            }
            break;
        }
#endif
        for (uint32_t i = 0; i < j->n_mats; i++) {
            /* slices start on 16-row boundaries (the outer-product panels) */
            uint32_t rows = j->w[i]->rows;
            uint32_t r0   = (rows * ith / nth) & ~15u;
            uint32_t r1   = ith + 1 == nth ? rows : (rows * (ith + 1) / nth) & ~15u;
            matmul_slice(s, ith, j->w[i], j->y[i], j->x, j->b, r0, r1);
        }
        break;
    case JOB_ATTN:
        attn_rows(s, ith, nth);
        break;
    case JOB_ATTN_GEMM:
#ifdef MOON_HAVE_OPENBLAS
        attn_gemm_heads(s, ith, nth);
#endif
        break;
    case JOB_RMSNORM:
        for (uint32_t bi = j->b * ith / nth; bi < j->b * (ith + 1) / nth; bi++) {
            const float *x  = j->in + (size_t)bi * dim;
            float       *o  = j->out + (size_t)bi * dim;
            float        ss = 0.0f;
            for (uint32_t i = 0; i < dim; i++) {
                ss += x[i] * x[i];
            }
            ss = 1.0f / sqrtf(ss / (float)dim + s->m->cfg.norm_eps);
            for (uint32_t i = 0; i < dim; i++) {
                o[i] = j->norm_w[i] * (ss * x[i]);
            }
        }
        break;
    case JOB_SWIGLU: {
        size_t n  = (size_t)j->b * s->m->cfg.hidden_dim;
        size_t i0 = n * ith / nth, i1 = n * (ith + 1) / nth;
        s->swiglu(s->hb + i0, s->hb2 + i0, i1 - i0);
        break;
    }
    }
}

/* Below s->par_min_macs multiply-adds (tuning cpu-par-min-macs, 2^19) a step
 * runs on the calling thread: waking the workers would cost more than the
 * work (tiny models, e.g. stories260K). */

/* A decode step whose largest matmul (all batch rows; the classifier, in
 * small models) is below s->split_max_macs multiply-adds (tuning
 * cpu-split-max-macs, 2^22) splits the batch across the
 * threads for the whole pass: one dispatch per step instead of one or more
 * per layer, attention and the serial steps (norms, RoPE, residuals) on every
 * thread, but each thread reads all the weights. Chosen from split vs unsplit
 * decode, 2 threads (Zen 5), largest step at batch 4/8/32: stories260K 0.13M/
 * 0.26M/1.0M: +1/+59/+59 %; dim 128 1M/2.1M/8.4M: +8/+16/-3 %; dim 256
 * 4.2M/8.4M/34M: -12/-1/-5 %; dim 512 from 17M: -4 to -26 %. */

static void run_maybe_par(cpu_state_t *s, uint64_t macs)
{
    if (macs < s->par_min_macs) {
        run_job(s, 0, 1);
    } else {
        moon_tp_run(s->tp, run_job, s);
    }
}

static void par_matmul(cpu_state_t *s, uint32_t b, const float *x, const moon_tensor_t *w0,
                       float *y0, const moon_tensor_t *w1, float *y1, const moon_tensor_t *w2,
                       float *y2)
{
    job_t *j  = &s->job;
    j->kind   = JOB_MATMUL;
    j->b      = b;
    j->x      = x;
    j->w[0]   = w0;
    j->y[0]   = y0;
    j->w[1]   = w1;
    j->y[1]   = y1;
    j->w[2]   = w2;
    j->y[2]   = y2;
    j->n_mats = w2 ? 3 : w1 ? 2 : 1;
    run_maybe_par(s, (uint64_t)b * w0->cols *
                         ((uint64_t)w0->rows + (w1 ? w1->rows : 0) + (w2 ? w2->rows : 0)));
}

static void par_rmsnorm(cpu_state_t *s, uint32_t b, float *out, const float *in, const float *w)
{
    s->job.kind   = JOB_RMSNORM;
    s->job.b      = b;
    s->job.out    = out;
    s->job.in     = in;
    s->job.norm_w = w;
    run_maybe_par(s, (uint64_t)b * s->m->cfg.dim * 4);
}

/* The whole forward pass for b batch rows whose tokens, sequences and
 * positions are set; logits of row i go to logits + i * vocab when
 * all_logits, else only the last row's to logits (NULL: none). */
static void forward_batch(cpu_state_t *s, const int32_t *tokens, uint32_t b, float *logits,
                          int all_logits, int one_seq)
{
    const moon_model_t        *m      = s->m;
    const moon_model_config_t *c      = &m->cfg;
    uint32_t                   dim    = c->dim;
    uint32_t                   hs     = c->head_dim;
    uint32_t                   kv_dim = c->n_kv_heads * hs;

    for (uint32_t bi = 0; bi < b; bi++) {
        moon_tensor_row(&m->tok_embd, (uint32_t)tokens[bi], s->x + (size_t)bi * dim);
    }
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const moon_layer_t *L = &m->layers[l];

        /* attention: norm, q/k/v projections as one GEMM step */
        par_rmsnorm(s, b, s->xb, s->x, L->attn_norm);
        par_matmul(s, b, s->xb, &L->wq, s->q, &L->wk, s->k, &L->wv, s->v);

        /* RoPE from the table, then K/V into each row's cache slot */
        for (uint32_t bi = 0; bi < b; bi++) {
            const float *cs = s->rope + (size_t)s->pos[bi] * hs;
            float       *q  = s->q + (size_t)bi * dim;
            float       *k  = s->k + (size_t)bi * kv_dim;
            for (uint32_t i = 0; i < dim; i += 2) {
                float fcr = cs[(i % hs)], fci = cs[(i % hs) + 1];
                float q0 = q[i], q1 = q[i + 1];
                q[i]     = q0 * fcr - q1 * fci;
                q[i + 1] = q0 * fci + q1 * fcr;
                if (i < kv_dim) {
                    float k0 = k[i], k1 = k[i + 1];
                    k[i]     = k0 * fcr - k1 * fci;
                    k[i + 1] = k0 * fci + k1 * fcr;
                }
            }
            memcpy(moon_kv_vec(s->kv, s->seq[bi], l, 0, s->pos[bi]), k, kv_dim * sizeof(float));
            memcpy(moon_kv_vec(s->kv, s->seq[bi], l, 1, s->pos[bi]), s->v + (size_t)bi * kv_dim,
                   kv_dim * sizeof(float));
        }
        s->job.kind = JOB_ATTN;
#ifdef MOON_HAVE_OPENBLAS
        if (one_seq && b >= 8) {
            s->job.kind = JOB_ATTN_GEMM;
        }
#endif
        s->job.b     = b;
        s->job.layer = l;
        run_maybe_par(s, (uint64_t)b * c->n_heads * hs * 2 * (s->pos[b - 1] + 1));

        /* output projection and residual */
        par_matmul(s, b, s->ao, &L->wo, s->xb, NULL, NULL, NULL, NULL);
        for (size_t i = 0; i < (size_t)b * dim; i++) {
            s->x[i] += s->xb[i];
        }

        /* SwiGLU feed-forward and residual */
        par_rmsnorm(s, b, s->xb, s->x, L->ffn_norm);
        par_matmul(s, b, s->xb, &L->w1, s->hb, &L->w3, s->hb2, NULL, NULL);
        s->job.kind = JOB_SWIGLU;
        s->job.b    = b;
        run_maybe_par(s, (uint64_t)b * c->hidden_dim * 16);
        par_matmul(s, b, s->hb, &L->w2, s->xb, NULL, NULL, NULL, NULL);
        for (size_t i = 0; i < (size_t)b * dim; i++) {
            s->x[i] += s->xb[i];
        }
    }
    if (logits == NULL) {
        return;
    }
    if (all_logits) {
        par_rmsnorm(s, b, s->xb, s->x, m->output_norm);
        par_matmul(s, b, s->xb, &m->output, logits, NULL, NULL, NULL, NULL);
    } else {
        par_rmsnorm(s, 1, s->xb, s->x + (size_t)(b - 1) * dim, m->output_norm);
        par_matmul(s, 1, s->xb, &m->output, logits, NULL, NULL, NULL, NULL);
    }
}

/* One thread's share of a split decode step: rows [b0, b1) of the batch go
 * through the whole forward pass on this thread alone, in a view of the state
 * whose row buffers start at row b0 and whose scratch is this thread's. Rows
 * of a decode batch are independent sequences, so the threads share nothing
 * writable but the KV cache, where each row writes its own slot. */
static void run_split(void *arg, uint32_t ith, uint32_t nth)
{
    const cpu_state_t         *s   = arg;
    const moon_model_config_t *c   = &s->m->cfg;
    cpu_state_t               *v   = (cpu_state_t *)((char *)s->views + ith * s->view_stride);
    uint32_t                   b0  = s->split_b * ith / nth, b1 = s->split_b * (ith + 1) / nth;
    uint32_t                   n   = b1 - b0, kv_dim = c->n_kv_heads * c->head_dim;
    size_t                     wc  = MOON_MAX(c->dim, c->hidden_dim);

    if (n == 0) {
        return;
    }
    *v = *s;
    v->x   = s->x + (size_t)b0 * c->dim;
    v->xb  = s->xb + (size_t)b0 * c->dim;
    v->q   = s->q + (size_t)b0 * c->dim;
    v->ao  = v->q;
    v->hb  = s->hb + (size_t)b0 * c->hidden_dim;
    v->hb2 = s->hb2 + (size_t)b0 * c->hidden_dim;
    if (s->kv_owned) {
        v->k = s->k + (size_t)b0 * kv_dim;
        v->v = s->v + (size_t)b0 * kv_dim;
    } else { /* inside this thread's rows of hb2, as cpu_create lays them out */
        v->k = v->hb2;
        v->v = v->hb2 + (size_t)n * kv_dim;
    }
    v->seq   = s->seq + b0;
    v->pos   = s->pos + b0;
    v->att   = s->att + (size_t)ith * c->seq_len;
    v->wtile = s->wtile + (size_t)ith * TILE_ROWS * wc;
    v->pack  = s->pack + (size_t)ith * OP_KC * 16 * OP_PV;
    v->xt    = s->xt + (size_t)ith * wc * BT_MAX_B;
    v->yt    = s->yt + (size_t)ith * BT_CHUNK * BT_MAX_B;
    v->nth   = 1;
    v->par_min_macs = UINT64_MAX; /* every step inline: no nested run on the pool */
    forward_batch(v, s->split_tokens + b0, n,
                  s->split_logits ? s->split_logits + (size_t)b0 * c->vocab_size : NULL, 1, 0);
}

/* ---- backend ops --------------------------------------------------------------- */

static void cpu_destroy(void *state)
{
    cpu_state_t *s = state;

    if (s == NULL) {
        return;
    }
    moon_tp_destroy(s->tp);
    moon_free(s->x);
    moon_free(s->xb);
    moon_free(s->q);
    if (s->kv_owned) {
        moon_free(s->k);
        moon_free(s->v);
    }
    moon_free(s->hb);
    moon_free(s->hb2);
    moon_free(s->att);
    moon_free(s->wtile);
    moon_free(s->pack);
    moon_free(s->xt);
    moon_free(s->yt);
    moon_free(s->rope);
    moon_free(s->kc);
    moon_free(s->vc);
    moon_free(s->sc);
    moon_free((void *)s->seq);
    moon_free(s->pos);
    moon_free(s->views);
    moon_free(s);
}

static moon_status_t cpu_create(const moon_model_t *m, const moon_engine_config_t *cfg,
                                void **state_p)
{
    const moon_model_config_t  *c      = &m->cfg;
    const moon_engine_tuning_t *t      = cfg->tuning; /* set by moon_engine_create */
    cpu_state_t                *s      = moon_calloc(1, sizeof(*s));
    uint32_t                   kv_dim = c->n_kv_heads * c->head_dim;
    size_t                     B;
    long                       ncpu;
    moon_status_t              status;

    if (s == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    ncpu     = sysconf(_SC_NPROCESSORS_ONLN);
    s->m     = m;
    s->nth   = cfg->n_threads ? cfg->n_threads : (uint32_t)(ncpu > 0 ? ncpu : 1);
    s->max_b = MOON_MAX(cfg->max_batch, cfg->max_chunk);
    B        = s->max_b;
    pick_kernels(s, t->cpu_isa);
    s->op_min_b       = t->cpu_op_min_b;
    s->bt_min_b       = t->cpu_bt_min_b;
    s->par_min_macs   = t->cpu_par_min_macs;
    s->split_max_macs = t->cpu_split_max_macs;
    /* the largest matmul step of one row: QKV, w1 + w3, w2 or the classifier */
    s->row_max_macs = MOON_MAX(MOON_MAX((uint64_t)c->dim * (c->dim + 2 * kv_dim),
                                        (uint64_t)c->dim * 2 * c->hidden_dim),
                               MOON_MAX((uint64_t)c->hidden_dim * c->dim,
                                        (uint64_t)c->dim * c->vocab_size));
#ifdef MOON_X86
    /* BF16 products in the batch-in-lanes steps unless cpu-bf16-dp is off
     * (exact mode: activations stay F32 there too) */
    s->bf16_dp = __builtin_cpu_supports("avx512bf16") && t->cpu_bf16_dp;
#endif
    if (!t->cpu_nt) {
        s->nt_isa = 0; /* A/B knob for benchmarks: batched matmuls through sgemm */
    }
#ifdef MOON_HAVE_OPENBLAS
    openblas_set_num_threads(1); /* parallelism comes from our own pool */
#endif
    status = moon_tp_create(s->nth, &s->tp);
    if (status != MOON_OK) {
        cpu_destroy(s);
        return status;
    }
    s->x   = moon_aligned_alloc(64, B * c->dim * sizeof(float));
    s->xb  = moon_aligned_alloc(64, B * c->dim * sizeof(float));
    s->q   = moon_aligned_alloc(64, B * c->dim * sizeof(float));
    s->hb  = moon_aligned_alloc(64, B * c->hidden_dim * sizeof(float));
    s->hb2 = moon_aligned_alloc(64, B * c->hidden_dim * sizeof(float));
    /* k and v live only from the QKV matmul to the cache write, hb2 only in
     * the FFN: share hb2's memory when both fit in it (2 kv_dim <= hidden) */
    if (2 * kv_dim <= c->hidden_dim && s->hb2 != NULL) {
        s->k = s->hb2;
        s->v = s->hb2 + B * kv_dim;
    } else {
        s->kv_owned = 1;
        s->k        = moon_aligned_alloc(64, B * kv_dim * sizeof(float));
        s->v        = moon_aligned_alloc(64, B * kv_dim * sizeof(float));
    }
    s->att   = moon_malloc((size_t)s->nth * c->seq_len * sizeof(float));
    s->wtile = moon_aligned_alloc(64, (size_t)s->nth * TILE_ROWS * MOON_MAX(c->dim, c->hidden_dim) *
                                          sizeof(float));
    s->pack  = moon_aligned_alloc(64, (size_t)s->nth * OP_KC * 16 * OP_PV * sizeof(float));
    s->xt    = moon_aligned_alloc(64, (size_t)s->nth * MOON_MAX(c->dim, c->hidden_dim) * BT_MAX_B *
                                          sizeof(float));
    s->yt    = moon_aligned_alloc(64, (size_t)s->nth * BT_CHUNK * BT_MAX_B * sizeof(float));
    s->rope  = moon_malloc((size_t)c->seq_len * c->head_dim * sizeof(float));
    s->max_chunk = cfg->max_chunk;
    s->kc        = moon_malloc((size_t)s->nth * c->seq_len * c->head_dim * sizeof(float));
    s->vc        = moon_malloc((size_t)s->nth * c->seq_len * c->head_dim * sizeof(float));
    s->sc        = moon_malloc((size_t)s->nth * ATTN_QCHUNK * c->seq_len * sizeof(float));
    s->seq       = moon_malloc(B * sizeof(*s->seq));
    s->pos       = moon_malloc(B * sizeof(*s->pos));
    s->ao        = s->q;
    s->view_stride = (sizeof(cpu_state_t) + MOON_CACHE_LINE - 1) / MOON_CACHE_LINE * MOON_CACHE_LINE;
    s->views       = moon_aligned_alloc(MOON_CACHE_LINE, s->nth * s->view_stride);
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->hb || !s->hb2 || !s->att || !s->wtile ||
        !s->pack || !s->rope || !s->kc || !s->vc || !s->sc || !s->seq || !s->pos ||
        !s->views) {
        cpu_destroy(s);
        return MOON_ERR_NO_MEMORY;
    }
    /* same float formula as the reference, so both rotate identically */
    for (uint32_t p = 0; p < c->seq_len; p++) {
        for (uint32_t i = 0; i < c->head_dim; i += 2) {
            float freq = 1.0f / powf(c->rope_theta, (float)i / (float)c->head_dim);
            float val  = (float)p * freq;
            s->rope[(size_t)p * c->head_dim + i]     = cosf(val);
            s->rope[(size_t)p * c->head_dim + i + 1] = sinf(val);
        }
    }
    *state_p = s;
    return MOON_OK;
}

static moon_status_t cpu_prefill(void *state, moon_kv_cache_t *kv, uint32_t seq,
                                 const int32_t *tokens, uint32_t n, float *logits,
                                 double *modeled_s_p)
{
    cpu_state_t         *s  = state;
    const moon_kv_seq_t *sq = &kv->seqs[seq];

    (void)modeled_s_p;
    if (n > s->max_b) {
        return MOON_ERR_INVALID_PARAM;
    }
    s->kv = kv;
    for (uint32_t i = 0; i < n; i++) {
        s->seq[i] = sq;
        s->pos[i] = sq->n_tokens + i;
    }
    forward_batch(s, tokens, n, logits, 0, 1);
    return MOON_OK;
}

static moon_status_t cpu_decode(void *state, moon_kv_cache_t *kv, const uint32_t *seqs,
                                const int32_t *tokens, uint32_t n_seqs, float *logits,
                                double *modeled_s_p)
{
    cpu_state_t *s = state;

    (void)modeled_s_p;
    if (n_seqs > s->max_b) {
        return MOON_ERR_INVALID_PARAM;
    }
    s->kv = kv;
    for (uint32_t i = 0; i < n_seqs; i++) {
        s->seq[i] = &kv->seqs[seqs[i]];
        s->pos[i] = kv->seqs[seqs[i]].n_tokens;
    }
    if (s->nth > 1 && n_seqs >= s->nth && (uint64_t)n_seqs * s->row_max_macs < s->split_max_macs) {
        /* small steps: one dispatch per decode step instead of one per matmul */
        s->split_tokens = tokens;
        s->split_logits = logits;
        s->split_b      = n_seqs;
        moon_tp_run(s->tp, run_split, s);
        return MOON_OK;
    }
    forward_batch(s, tokens, n_seqs, logits, 1, 0);
    return MOON_OK;
}

const moon_model_backend_ops_t moon_backend_cpu_ops = {
    .name    = "cpu",
    .create  = cpu_create,
    .destroy = cpu_destroy,
    .prefill = cpu_prefill,
    .decode  = cpu_decode,
};
