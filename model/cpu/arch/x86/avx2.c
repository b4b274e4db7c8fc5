/* model/cpu/arch/x86/avx2.c - AVX2 + FMA kernels: dot products (F32, BF16,
 * F16), axpy and the batched NT matmul kernel (3 weight rows x 4 batch rows). */
#include "cpu/arch/x86/x86.h"

#ifdef MOON_X86

__attribute__((target("avx2,fma"))) static float hsum256(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo        = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo        = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma"))) float moon_cpu_dot_f32_avx2(const void *w, const float *x,
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

/* 8 weights from element k of a row, as floats: F32, or BF16/F16 widened */
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
__attribute__((target("avx2,fma,f16c"))) static inline __m256 nt2_load_f16(const uint8_t *row,
                                                                           uint32_t       k)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
}

/* w . x for a row of 16-bit weights widened by _load, _elem one weight as a
 * float: two accumulators of 8 lanes */
#define DOT16_FN(_name, _load, _elem, _target)                                                     \
    __attribute__((target(_target))) float _name(const void *w, const float *x, uint32_t n)        \
    {                                                                                              \
        const uint16_t *a  = w;                                                                    \
        __m256          s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();                        \
        uint32_t        i = 0;                                                                     \
        float           r;                                                                         \
        for (; i + 16 <= n; i += 16) {                                                             \
            s0 = _mm256_fmadd_ps(_load(w, i), _mm256_loadu_ps(x + i), s0);                         \
            s1 = _mm256_fmadd_ps(_load(w, i + 8), _mm256_loadu_ps(x + i + 8), s1);                 \
        }                                                                                          \
        r = hsum256(_mm256_add_ps(s0, s1));                                                        \
        for (; i < n; i++) {                                                                       \
            r += _elem(a[i]) * x[i];                                                               \
        }                                                                                          \
        return r;                                                                                  \
    }

DOT16_FN(moon_cpu_dot_bf16_avx2, nt2_load_bf16, moon_bf16_to_f32, "avx2,fma")
DOT16_FN(moon_cpu_dot_f16_avx2, nt2_load_f16, moon_fp16_to_f32, "avx2,fma,f16c")

__attribute__((target("avx2,fma"))) void moon_cpu_axpy_avx2(float *y, float a, const float *x,
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

/* AVX2 twin: 3 weight rows x 4 batch rows (12 ymm accumulators). */
#define NT2_KERNEL(_name, _load, _target)                                                          \
    __attribute__((target(_target))) void _name(                                                   \
        const uint8_t *w, size_t row_bytes, const float *x, uint32_t K, float *y, uint32_t ldy)    \
        MOON_CPU_NT_BODY(__m256, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_fmadd_ps, hsum256,     \
                         _load, NT2_MR, NT2_NB, 8)

NT2_KERNEL(moon_cpu_nt_3x4_f32_avx2, nt2_load_f32, "avx2,fma")
NT2_KERNEL(moon_cpu_nt_3x4_bf16_avx2, nt2_load_bf16, "avx2,fma")
NT2_KERNEL(moon_cpu_nt_3x4_f16_avx2, nt2_load_f16, "avx2,fma,f16c")

#endif /* MOON_X86 */
