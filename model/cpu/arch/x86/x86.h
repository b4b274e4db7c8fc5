/* model/cpu/arch/x86/x86.h - inline helpers the x86 kernels share: BF16
 * and F16 widening and in-register 16 x 16 transposes (AVX-512). */
#ifndef MOON_MODEL_CPU_X86_H
#define MOON_MODEL_CPU_X86_H

#include "cpu/cpu_internal.h"

#ifdef MOON_X86
#include <immintrin.h>
#include <string.h>

__attribute__((target("avx512f"))) static inline __m512 moon_cpu_bf16x16(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

/* 16 F16 weights widened to floats (vcvtph2ps, exact). */
__attribute__((target("avx512f"))) static inline __m512 moon_cpu_f16x16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* Transposes a 16 x 16 block of floats in registers: r[i] lane k becomes
 * r[k] lane i. */
__attribute__((target("avx512f"), always_inline)) static inline void
moon_cpu_tr16_regs(__m512 r[16])
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
__attribute__((target("avx512f"))) static inline void moon_cpu_op_tr16(__m512 r[16], float *dst,
                                                                       size_t ldd)
{
    moon_cpu_tr16_regs(r);
    for (int k = 0; k < 16; k++) {
        _mm512_store_ps(dst + (size_t)k * ldd, r[k]);
    }
}

static inline float moon_cpu_hsum4(__m128 v)
{
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
    return _mm_cvtss_f32(v);
}

/* The 8 scales and 8 mins of a Q4_K/Q5_K block (12 bytes of 6-bit fields,
 * moon_cpu_scale_min_k4's layout) as bytes, in word arithmetic (ggml's
 * utmp): u[0..1] the scales, u[2..3] the mins. */
static inline void moon_cpu_unpack_k4(const uint8_t *scales, uint32_t u[4])
{
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    uint32_t       lo;

    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
    lo   = u[1] & m6;
    u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);
    u[2] = lo;
    u[0] &= m6;
}

/* m[j] * (sum of y in sub-block j of 32) over the 8 sub-blocks, in 4 int32
 * partial sums (m the 8 mins widened to 16 bits): the kernels accumulate
 * them in floats and reduce once per row */
__attribute__((target("avx2"))) static inline __m128i moon_cpu_k4_min_prod(__m128i           mm,
                                                                           const moon_q8k_t *y)
{
    __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
    __m128i s32 =
        _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)); /* 8 sums */
    return _mm_madd_epi16(mm, s32);
}

/* The batched NT kernel body (see avx512_vec.c): Y[j][i] = W[i] . X[j] for
 * _mr weight rows of w and _nb batch rows of x, K % _kstep == 0, in _mr x _nb
 * vector accumulators of type _vec (_zero, _fma, _hsum its ISA's setzero,
 * fmadd and horizontal sum); _load reads _kstep weights of a row at k. One
 * body for every ISA, instantiated inside a function of that ISA's target. */
#define MOON_CPU_NT_BODY(_vec, _zero, _loadx, _fma, _hsum, _load, _mr, _nb, _kstep)                \
    {                                                                                              \
        _vec acc[_mr][_nb];                                                                        \
        for (int i = 0; i < (_mr); i++) {                                                          \
            for (int j = 0; j < (_nb); j++) {                                                      \
                acc[i][j] = _zero();                                                               \
            }                                                                                      \
        }                                                                                          \
        for (uint32_t k = 0; k + (_kstep) <= K; k += (_kstep)) {                                   \
            _vec wv[_mr];                                                                          \
            for (int i = 0; i < (_mr); i++) {                                                      \
                wv[i] = _load(w + (size_t)i * row_bytes, k);                                       \
            }                                                                                      \
            for (int j = 0; j < (_nb); j++) {                                                      \
                _vec xv = _loadx(x + (size_t)j * K + k);                                           \
                for (int i = 0; i < (_mr); i++) {                                                  \
                    acc[i][j] = _fma(wv[i], xv, acc[i][j]);                                        \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int i = 0; i < (_mr); i++) {                                                          \
            for (int j = 0; j < (_nb); j++) {                                                      \
                y[(size_t)j * ldy + i] = _hsum(acc[i][j]);                                         \
            }                                                                                      \
        }                                                                                          \
    }

#endif /* MOON_X86 */

#endif /* MOON_MODEL_CPU_X86_H */
