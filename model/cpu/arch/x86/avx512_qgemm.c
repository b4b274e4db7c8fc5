/* model/cpu/arch/x86/avx512_qgemm.c - the integer GEMM tile of
 * cpu/qgemm.c with AVX-512 VNNI: QG_ROWS weight rows in the 16 int32 lanes
 * times QG_NB activation rows. Each step loads 4 values of every weight row
 * once (one vector) and multiplies it by 4 values of each activation row,
 * broadcast (vpdpbusd: unsigned weight bytes times signed activation
 * bytes, summed in fours); at each block's end the integer sums turn into
 * floats with the block's scales. The weight vector is reused QG_NB times
 * and each activation word QG_ROWS times, where the one-row dots use each
 * byte once. Equals moon_cpu_qg_tile_scalar bit for bit. */
#include "cpu/arch/x86/x86.h"
#include "cpu/qgemm_unpack.h"

#ifdef MOON_X86

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,fma")))
/* the accumulators stay in registers only when the loops over them unroll */
#define UNROLL _Pragma("GCC unroll 8")

VNNI static inline __attribute__((always_inline)) void tile(const moon_qg_panel_t *p,
                                                            const moon_qg_act_t *a, uint32_t x0,
                                                            uint32_t nx, float *y, uint32_t ldy,
                                                            uint32_t nr, const uint32_t bs)
{
    const int8_t *xq[QG_NB];
    const float  *ds[QG_NB];
    __m512        acc[QG_NB];

    /* rows past nx repeat the last one (computed, not stored) */
    UNROLL for (uint32_t j = 0; j < QG_NB; j++)
    {
        uint32_t xr = x0 + (j < nx ? j : nx - 1);
        xq[j]       = a->q + (size_t)xr * a->K;
        ds[j]       = a->ds + (size_t)xr * a->nblk * 2;
        acc[j]      = _mm512_setzero_ps();
    }
    for (uint32_t blk = 0; blk < p->nblk; blk++) {
        const uint8_t *wq = p->q + (size_t)blk * bs * QG_ROWS;
        __m512i        isum[QG_NB];
        __m512         s = _mm512_loadu_ps(p->s + (size_t)blk * QG_ROWS);
        __m512         o = _mm512_loadu_ps(p->o + (size_t)blk * QG_ROWS);
        UNROLL for (uint32_t j = 0; j < QG_NB; j++)
        {
            isum[j] = _mm512_setzero_si512();
        }
        for (uint32_t g = 0; g < bs / 4; g++) {
            __m512i w = _mm512_loadu_si512((const void *)(wq + (size_t)g * 4 * QG_ROWS));
            UNROLL for (uint32_t j = 0; j < QG_NB; j++)
            {
                int32_t x4;
                memcpy(&x4, xq[j] + (size_t)blk * bs + 4 * g, 4);
                isum[j] = _mm512_dpbusd_epi32(isum[j], w, _mm512_set1_epi32(x4));
            }
        }
        UNROLL for (uint32_t j = 0; j < QG_NB; j++)
        {
            __m512 sd = _mm512_mul_ps(s, _mm512_set1_ps(ds[j][2 * blk]));
            acc[j]    = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), sd, acc[j]);
            acc[j]    = _mm512_fmadd_ps(o, _mm512_set1_ps(ds[j][2 * blk + 1]), acc[j]);
        }
    }
    UNROLL for (uint32_t j = 0; j < QG_NB; j++)
    {
        if (j >= nx) {
            break;
        }
        _mm512_mask_storeu_ps(y + (size_t)j * ldy, (__mmask16)((1u << nr) - 1), acc[j]);
    }
}

/* moon_cpu_qg_quantize's blocks, a vector at a time: the same float
 * operations, and vcvtps2dq rounds to nearest even as lrintf does. */
VNNI void moon_cpu_qg_quantize_avx512(const float *x, uint32_t b, uint32_t K, uint32_t bs,
                                      void *buf, moon_qg_act_t *a)
{
    a->bs   = bs;
    a->nblk = K / bs;
    a->K    = K;
    a->q    = buf;
    a->ds   = (float *)((int8_t *)buf + (size_t)b * K);
    for (size_t blk = 0; blk < (size_t)b * a->nblk; blk++) {
        const float *xb = x + blk * bs; /* rows are whole blocks: K % bs == 0 */
        __m512       v0 = _mm512_loadu_ps(xb);
        __m512       v1 = bs == 32 ? _mm512_loadu_ps(xb + 16) : _mm512_setzero_ps();
        float   amax    = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        float   id      = amax > 0.0f ? 127.0f / amax : 0.0f;
        __m512i q0      = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
        __m512i q1      = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
        _mm_storeu_si128((__m128i *)(a->q + blk * bs), _mm512_cvtepi32_epi8(q0));
        if (bs == 32) {
            _mm_storeu_si128((__m128i *)(a->q + blk * bs + 16), _mm512_cvtepi32_epi8(q1));
        }
        a->ds[2 * blk] = amax / 127.0f;
        a->ds[2 * blk + 1] =
            a->ds[2 * blk] * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
}

/* moon_cpu_qg_interleave, 16 four-byte groups of the 16 rows at a time: a
 * 16 x 16 transpose of 32-bit words in registers. */
VNNI static void interleave(const uint8_t *rows, uint32_t K, uint8_t *q)
{
    uint32_t k = 0;

    for (; k + 64 <= K; k += 64) {
        __m512 r[QG_ROWS];
        for (uint32_t i = 0; i < QG_ROWS; i++) {
            r[i] = _mm512_loadu_ps((const float *)(rows + (size_t)i * K + k));
        }
        moon_cpu_tr16_regs(r);
        for (uint32_t g = 0; g < 16; g++) {
            _mm512_storeu_ps((float *)(q + ((size_t)k / 4 + g) * QG_ROWS * 4), r[g]);
        }
    }
    moon_cpu_qg_interleave(rows, K, k, q);
    /* the last values, under 64 */ /* the last values, under 64 */
}

/* moon_cpu_qg_pack with the unpack loops vectorised for AVX-512 */
VNNI void moon_cpu_qg_pack_avx512(const moon_tensor_t *w, uint32_t r0, uint32_t nr, void *buf,
                                  moon_qg_panel_t *p)
{
    moon_cpu_qg_unpack_rows(w, r0, nr, buf, p);
    interleave(moon_cpu_qg_rows(buf, w->cols), w->cols, p->q);
}

VNNI void moon_cpu_qg_tile_vnni(const moon_qg_panel_t *p, const moon_qg_act_t *a, uint32_t x0,
                                uint32_t nx, float *y, uint32_t ldy, uint32_t nr)
{
    if (p->bs == 32) {
        tile(p, a, x0, nx, y, ldy, nr, 32);
    } else {
        tile(p, a, x0, nx, y, ldy, nr, 16);
    }
}

#endif /* MOON_X86 */
