/* model/cpu/arch/x86/avx512_quant.c - AVX-512 (BW) dot products of Q4_K
 * and Q6_K weight rows with Q8_K activations, the batch-1 decode of Q4_K_M
 * files (Q6_K: the classifier and half of ffn_down / attn_v). Q4_K is
 * avx2_quant.c's kernel on two 32-byte quarter-rows of a block per 512-bit
 * step (half the instructions). Same integer sums as the plain C kernels. */
#include "cpu/arch/x86/x86.h"

#ifdef MOON_X86

#define AVX512_Q __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))

AVX512_Q static inline float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 32 bytes at a in the low half, 32 at b in the high */
AVX512_Q static inline __m512i load2x32(const void *a, const void *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* byte-shuffle control that broadcasts 16-bit word s to the low 256 bits
 * and word t to the high ones (of a vector holding the words in each lane) */
AVX512_Q static inline __m512i word_pick(int s, int t)
{
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set1_epi16((short)(0x0100 + 0x0202 * s))),
        _mm256_set1_epi16((short)(0x0100 + 0x0202 * t)), 1);
}

AVX512_Q float moon_cpu_qdot_q4_k_avx512(const void *w, const void *xq, uint32_t n)
{
    const uint8_t    *p    = w;
    const moon_q8k_t *y    = xq;
    const __m512i     m4   = _mm512_set1_epi8(0xf);
    __m512            acc  = _mm512_setzero_ps();
    __m128            accm = _mm_setzero_ps(); /* the mins' part */

    for (uint32_t i = 0; i < n / MOON_GGML_QK_K; i++, p += 144, y++) {
        const uint8_t *q  = p + 16;
        const int8_t  *q8 = y->qs;
        uint32_t       u[4];
        __m512i        sumi = _mm512_setzero_si512(), sc16;
        moon_cpu_unpack_k4(p + 4, u);
        sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[1], (int)u[0])));
        accm = _mm_fmadd_ps(_mm_set1_ps(y->d * half_at(p + 2)),
                            _mm_cvtepi32_ps(moon_cpu_k4_min_prod(
                                _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[3], (int)u[2])), y)),
                            accm);
        /* quarter-rows j and j + 1: low nibbles are sub-blocks 2j, 2j + 2
         * (values 64j.., 64j + 64..), high nibbles 2j + 1, 2j + 3 */
        for (int j = 0; j < 4; j += 2, q += 64, q8 += 128) {
            __m512i bits = _mm512_loadu_si512((const void *)q);
            __m512i lo   = _mm512_and_si512(bits, m4);
            __m512i hi   = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
            __m512i pl   = _mm512_maddubs_epi16(lo, load2x32(q8, q8 + 64));
            __m512i ph   = _mm512_maddubs_epi16(hi, load2x32(q8 + 32, q8 + 96));
            pl = _mm512_madd_epi16(_mm512_shuffle_epi8(sc16, word_pick(2 * j, 2 * j + 2)), pl);
            ph = _mm512_madd_epi16(_mm512_shuffle_epi8(sc16, word_pick(2 * j + 1, 2 * j + 3)), ph);
            sumi = _mm512_add_epi32(sumi, _mm512_add_epi32(pl, ph));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y->d * half_at(p)), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc) - moon_cpu_hsum4(accm);
}

/* Q6_K: a half-block of 128 values in two vectors, values 0-63 and 64-127
 * (ggml's order: quarter-rows of 32 from the low and high nibbles of ql,
 * the high two bits from qh at shifts 0, 2, 4, 6). Each 16-bit product
 * pair of maddubs covers 2 values, so words 8s..8s+7 of a vector are
 * sub-block s of its 64 values; vpermw puts each sub-block's scale there.
 * The -32 of every value is the scales times the activation's bsums, as in
 * the AVX2 kernel. */
AVX512_Q float moon_cpu_qdot_q6_k_avx512(const void *w, const void *xq, uint32_t n)
{
    const uint8_t    *p  = w;
    const moon_q8k_t *y  = xq;
    const __m512i     m4 = _mm512_set1_epi8(0xf);
    const __m512i     m2 = _mm512_set1_epi8(3);
    /* qh's shift for values 0-31 (low half) and 32-63 (high half) */
    const __m512i hshift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    __m512        acc    = _mm512_setzero_ps();
    __m512i       pick[4]; /* word w of part k: scale 4k + w / 8 */

    for (int k = 0; k < 4; k++) {
        int16_t idx[32];
        for (int i = 0; i < 32; i++) {
            idx[i] = (int16_t)(4 * k + i / 8);
        }
        pick[k] = _mm512_loadu_si512((const void *)idx);
    }
    for (uint32_t i = 0; i < n / MOON_GGML_QK_K; i++, p += 210, y++) {
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t  *q8   = y->qs;
        __m512i        sc16 = _mm512_castsi256_si512(
                   _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192))));
        __m256i sum8 = _mm256_madd_epi16(_mm512_castsi512_si256(sc16),
                                         _mm256_loadu_si256((const __m256i *)y->bsums));
        __m512i sumi = _mm512_zextsi256_si512(
            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum8, 5)));
        for (int j = 0; j < 2; j++, ql += 64, qh += 32, q8 += 128) {
            __m512i l  = _mm512_loadu_si512((const void *)ql);
            __m512i hb = _mm512_srlv_epi16(
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh)), hshift);
            __m512i q01 = _mm512_or_si512(_mm512_and_si512(l, m4),
                                          _mm512_slli_epi16(_mm512_and_si512(hb, m2), 4));
            __m512i q23 = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 4), m2), 4));
            __m512i p01 = _mm512_maddubs_epi16(q01, _mm512_loadu_si512((const void *)q8));
            __m512i p23 = _mm512_maddubs_epi16(q23, _mm512_loadu_si512((const void *)(q8 + 64)));
            p01         = _mm512_madd_epi16(_mm512_permutexvar_epi16(pick[2 * j], sc16), p01);
            p23         = _mm512_madd_epi16(_mm512_permutexvar_epi16(pick[2 * j + 1], sc16), p23);
            sumi        = _mm512_add_epi32(sumi, _mm512_add_epi32(p01, p23));
        }
        acc =
            _mm512_fmadd_ps(_mm512_set1_ps(y->d * half_at(p + 208)), _mm512_cvtepi32_ps(sumi), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

#endif /* MOON_X86 */
