/* model/cpu/arch/x86/x86.h - inline helpers the x86 kernels share: BF16
 * and F16 widening and in-register 16 x 16 transposes (AVX-512). */
#ifndef MOON_MODEL_CPU_X86_H
#define MOON_MODEL_CPU_X86_H

#include "cpu/cpu_internal.h"

#ifdef MOON_X86
#include <immintrin.h>

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
__attribute__((target("avx512f"))) static inline void moon_cpu_tr16_regs(__m512 r[16])
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
