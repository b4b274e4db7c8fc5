/* model/cpu/arch/x86/avx512_vec.c - AVX-512 vector kernels: dot products
 * (F32, BF16, F16), axpy, SwiGLU and softmax with a vector exp, and the batched NT
 * matmul kernel (4 weight rows x 6 batch rows). */
#include "cpu/arch/x86/x86.h"

#include <math.h>

#ifdef MOON_X86

enum { W_F32, W_BF16, W_F16 }; /* the weight types of the float kernels */

/* 16 weights from element i of a row, as floats: F32, or BF16/F16 widened. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
load16(const void *w, uint32_t i, const int wt)
{
    return wt == W_BF16  ? moon_cpu_bf16x16((const uint16_t *)w + i)
           : wt == W_F16 ? moon_cpu_f16x16((const uint16_t *)w + i)
                         : _mm512_loadu_ps((const float *)w + i);
}

__attribute__((always_inline)) static inline float elem(const void *w, uint32_t i, const int wt)
{
    return wt == W_BF16  ? moon_bf16_to_f32(((const uint16_t *)w)[i])
           : wt == W_F16 ? moon_fp16_to_f32(((const uint16_t *)w)[i])
                         : ((const float *)w)[i];
}

/* w . x over n elements, 4 accumulators of 16 lanes; inlined once per type. */
__attribute__((target("avx512f"), always_inline)) static inline float
dot_avx512(const void *w, const float *x, uint32_t n, const int wt)
{
    __m512   s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    __m512   s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    uint32_t i = 0;
    float    r;

    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(load16(w, i, wt), _mm512_loadu_ps(x + i), s0);
        s1 = _mm512_fmadd_ps(load16(w, i + 16, wt), _mm512_loadu_ps(x + i + 16), s1);
        s2 = _mm512_fmadd_ps(load16(w, i + 32, wt), _mm512_loadu_ps(x + i + 32), s2);
        s3 = _mm512_fmadd_ps(load16(w, i + 48, wt), _mm512_loadu_ps(x + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) {
        s0 = _mm512_fmadd_ps(load16(w, i, wt), _mm512_loadu_ps(x + i), s0);
    }
    r = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    for (; i < n; i++) {
        r += elem(w, i, wt) * x[i];
    }
    return r;
}

__attribute__((target("avx512f"))) float moon_cpu_dot_f32_avx512(const void *w, const float *x,
                                                                 uint32_t n)
{
    return dot_avx512(w, x, n, W_F32);
}

__attribute__((target("avx512f"))) float moon_cpu_dot_bf16_avx512(const void *w, const float *x,
                                                                  uint32_t n)
{
    return dot_avx512(w, x, n, W_BF16);
}

__attribute__((target("avx512f"))) float moon_cpu_dot_f16_avx512(const void *w, const float *x,
                                                                 uint32_t n)
{
    return dot_avx512(w, x, n, W_F16);
}

__attribute__((target("avx512f"))) void moon_cpu_axpy_avx512(float *y, float a, const float *x,
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

__attribute__((target("avx512f"))) void moon_cpu_swiglu_avx512(float *h, const float *h3, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 g   = _mm512_loadu_ps(h + i);
        __m512 e   = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 sig = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_storeu_ps(h + i, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_loadu_ps(h3 + i)));
    }
    moon_cpu_swiglu_scalar(h + i, h3 + i, n - i);
}

/* moon_cpu_softmax_exp_scalar with the vector exp, 16 scores at a time */
__attribute__((target("avx512f"))) float moon_cpu_softmax_exp_avx512(float *a, uint32_t n)
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

/* Batched NT matmul for decode batches: Y[bi][r] = W[r] . X[bi] for rows
 * [r0, r1) and all b batch rows, W rows read once from memory and reused from
 * L1 across the batch. Register blocking 4 weight rows x 6 batch rows (24
 * zmm accumulators); K % 16 and block edges fall back to the dot kernels. */
#define NT_KERNEL(_name, _load)                                                                    \
    __attribute__((target("avx512f"))) void _name(                                                 \
        const uint8_t *w, size_t row_bytes, const float *x, uint32_t K, float *y, uint32_t ldy)    \
        MOON_CPU_NT_BODY(__m512, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_fmadd_ps,              \
                         _mm512_reduce_add_ps, _load, NT_MR, NT_NB, 16)

__attribute__((target("avx512f"))) static inline __m512 nt_load_f32(const uint8_t *row, uint32_t k)
{
    return _mm512_loadu_ps((const float *)row + k);
}
__attribute__((target("avx512f"))) static inline __m512 nt_load_bf16(const uint8_t *row, uint32_t k)
{
    return moon_cpu_bf16x16((const uint16_t *)row + k);
}
NT_KERNEL(moon_cpu_nt_4x6_f32, nt_load_f32)
__attribute__((target("avx512f"))) static inline __m512 nt_load_f16(const uint8_t *row, uint32_t k)
{
    return moon_cpu_f16x16((const uint16_t *)row + k);
}
NT_KERNEL(moon_cpu_nt_4x6_bf16, nt_load_bf16)
NT_KERNEL(moon_cpu_nt_4x6_f16, nt_load_f16)

#endif /* MOON_X86 */
