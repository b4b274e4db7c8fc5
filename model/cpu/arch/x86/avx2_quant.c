/* model/cpu/arch/x86/avx2_quant.c - AVX2 dot products of quantised weight
 * rows (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) with Q8-quantised activations
 * (cpu/quant_dot.c): integer products in maddubs/madd, one float scale per
 * block (ggml-cpu's x86 quants, 256-bit). F16C converts the block scales. */
#include "cpu/arch/x86/x86.h"

#include <string.h>

#ifdef MOON_X86

#define AVX2_Q __attribute__((target("avx2,fma,f16c")))

AVX2_Q static inline float hsum8(__m256 v)
{
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo        = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo        = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

AVX2_Q static inline float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* sum of x * y over pairs of signed bytes, as 8 int32 (x any int8, y in
 * [-127, 127]) */
AVX2_Q static inline __m256i dot_i8(__m256i x, __m256i y)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

AVX2_Q float moon_cpu_qdot_q8_0_avx2(const void *w, const void *xq, uint32_t n)
{
    const uint8_t    *p   = w;
    const moon_q8b_t *y   = xq;
    __m256            acc = _mm256_setzero_ps();

    for (uint32_t i = 0; i < n / MOON_GGML_QK; i++, p += 34, y++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)(p + 2));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(p) * y->d), _mm256_cvtepi32_ps(dot_i8(qx, qy)),
                              acc);
    }
    return hsum8(acc);
}

AVX2_Q float moon_cpu_qdot_q4_0_avx2(const void *w, const void *xq, uint32_t n)
{
    const uint8_t    *p   = w;
    const moon_q8b_t *y   = xq;
    const __m256i     m4  = _mm256_set1_epi8(0xf);
    __m256            acc = _mm256_setzero_ps();

    for (uint32_t i = 0; i < n / MOON_GGML_QK; i++, p += 18, y++) {
        __m128i t  = _mm_loadu_si128((const __m128i *)(p + 2));
        __m256i qx = _mm256_and_si256(
            _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1), m4);
        qx         = _mm256_sub_epi8(qx, _mm256_set1_epi8(8));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(p) * y->d), _mm256_cvtepi32_ps(dot_i8(qx, qy)),
                              acc);
    }
    return hsum8(acc);
}

/* Q4_K (five 0) and Q5_K (five 1). */
AVX2_Q static inline float qdot_q45k_avx2(const void *w, const void *xq, uint32_t n, int five)
{
    const uint8_t    *p    = w;
    const moon_q8k_t *y    = xq;
    const __m256i     m4   = _mm256_set1_epi8(0xf);
    const size_t      bb   = five ? 176 : 144;
    __m256            acc  = _mm256_setzero_ps();
    __m128            accm = _mm_setzero_ps(); /* the mins' part */

    for (uint32_t i = 0; i < n / MOON_GGML_QK_K; i++, p += bb, y++) {
        const uint8_t *q  = p + (five ? 48 : 16);
        const int8_t  *q8 = y->qs;
        uint32_t       u[4];
        __m256i        sumi = _mm256_setzero_si256();
        __m256i        hbits =
            five ? _mm256_loadu_si256((const __m256i *)(p + 16)) : _mm256_setzero_si256();
        moon_cpu_unpack_k4(p + 4, u);
        /* 16-bit scales, each broadcast to its 16-bit lanes by a shuffle */
        __m256i sc16 = _mm256_broadcastsi128_si256(
            _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[1], (int)u[0])));
        accm = _mm_fmadd_ps(_mm_set1_ps(y->d * half_at(p + 2)),
                            _mm_cvtepi32_ps(moon_cpu_k4_min_prod(
                                _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[3], (int)u[2])), y)),
                            accm);
        for (int j = 0; j < 4; j++, q += 32, q8 += 64) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)q);
            __m256i lo   = _mm256_and_si256(bits, m4);
            __m256i hi   = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            if (five) {
                __m256i one = _mm256_set1_epi8(1);
                __m256i b0  = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one);
                __m256i b1  = _mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one);
                lo          = _mm256_add_epi8(lo, _mm256_slli_epi16(b0, 4));
                hi          = _mm256_add_epi8(hi, _mm256_slli_epi16(b1, 4));
            }
            __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8));
            __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            pl         = _mm256_madd_epi16(
                        _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0100 + 0x0404 * j))), pl);
            ph = _mm256_madd_epi16(
                _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(0x0302 + 0x0404 * j))), ph);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y->d * half_at(p)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum8(acc) - moon_cpu_hsum4(accm);
}

AVX2_Q float moon_cpu_qdot_q4_k_avx2(const void *w, const void *xq, uint32_t n)
{
    return qdot_q45k_avx2(w, xq, n, 0);
}

AVX2_Q float moon_cpu_qdot_q5_k_avx2(const void *w, const void *xq, uint32_t n)
{
    return qdot_q45k_avx2(w, xq, n, 1);
}

/* Q6_K: the unsigned 6-bit q times y by maddubs, each 16-value half-lane
 * scaled by its sub-block's int8 scale; the -32 offset once per block from
 * the activation's sums over the same 16 values (32 sum(sc bsums)). */
AVX2_Q float moon_cpu_qdot_q6_k_avx2(const void *w, const void *xq, uint32_t n)
{
    const uint8_t    *p   = w;
    const moon_q8k_t *y   = xq;
    const __m256i     m4  = _mm256_set1_epi8(0xf);
    const __m256i     m2  = _mm256_set1_epi8(3);
    __m256            acc = _mm256_setzero_ps();

    for (uint32_t i = 0; i < n / MOON_GGML_QK_K; i++, p += 210, y++) {
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t  *sc = (const int8_t *)(p + 192);
        const int8_t  *q8 = y->qs;
        /* the 16 scales as 16-bit words: lane h holds sub-blocks 8h..8h+7 */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        __m256i sumi = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(
                _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums)), 5));
        /* each half's 8 scales in both lanes */
        __m256i sch[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                          _mm256_permute2x128_si256(sc16, sc16, 0x11)};
        for (int j = 0; j < 2; j++, ql += 64, qh += 32, q8 += 128) {
            __m256i scj = sch[j];
            __m256i hb  = _mm256_loadu_si256((const __m256i *)qh);
            __m256i l1  = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l2  = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
            q[1] = _mm256_or_si256(
                _mm256_and_si256(l2, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
            q[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
            q[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l2, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                __m256i y8  = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
                __m256i p16 = _mm256_maddubs_epi16(q[k], y8);
                /* lane 0 the scale of values 0-15, lane 1 of 16-31 */
                __m256i s = _mm256_shuffle_epi8(
                    scj, _mm256_setr_m128i(_mm_set1_epi16((short)(0x0100 + 0x0404 * k)),
                                           _mm_set1_epi16((short)(0x0302 + 0x0404 * k))));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s, p16));
            }
        }
        acc =
            _mm256_fmadd_ps(_mm256_set1_ps(y->d * half_at(p + 208)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum8(acc);
}

#endif /* MOON_X86 */
