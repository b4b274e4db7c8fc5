/* model/cpu/arch/x86/x86.h - inline helpers the x86 kernels share: BF16
 * widening and in-register 16 x 16 transposes (AVX-512). */
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

#endif /* MOON_X86 */

#endif /* MOON_MODEL_CPU_X86_H */
