/* model/cpu/qgemm.c - quantised weights times a batch of activation rows as
 * an integer GEMM (prefill, decode batches): the one-row dots of
 * quant_dot.c unpack every weight block once per activation row, which at
 * 512 rows is most of the work. Here a panel of QG_ROWS weight rows is
 * unpacked once per matmul into unsigned bytes laid out for the ISA
 * kernel (4 consecutive values of each row in one 32-bit lane), and every
 * activation row then reuses it. Each weight type becomes w = s v + o per
 * block of bs values (v unsigned, s and o floats per row and block); the
 * activations are quantised to Q8 per block of the same bs, with d and
 * d sum(q) beside them, so a block's product is
 *   s d sum(v q) + o (d sum(q)).
 * The plain C tile here is the reference the ISA tile must equal bit for
 * bit (the same integer sums, then the same float operations in the same
 * order). */
#include "cpu/qgemm_unpack.h"

#include <math.h>
#include <string.h>

uint32_t moon_cpu_qg_block(int wtype)
{
    switch (wtype) {
    case MOON_GGML_Q8_0:
    case MOON_GGML_Q4_0:
    case MOON_GGML_Q4_K:
    case MOON_GGML_Q5_K:
        return 32;
    case MOON_GGML_Q6_K: /* its scales are per 16 values */
        return 16;
    default:
        return 0;
    }
}

size_t moon_cpu_qg_act_bytes(uint32_t b, uint32_t K)
{
    /* the smallest block (16) has the most scales */
    return (size_t)b * K + (size_t)b * (K / 16) * 2 * sizeof(float);
}

size_t moon_cpu_qg_panel_bytes(uint32_t K)
{
    /* the interleaved values, the scales and offsets (blocks of 16 have the
     * most), then the rows as unpacked, before the interleave */
    return (size_t)QG_ROWS * K + (size_t)(K / 16) * QG_ROWS * 2 * sizeof(float) +
           (size_t)QG_ROWS * K;
}

void moon_cpu_qg_quantize(const float *x, uint32_t b, uint32_t K, uint32_t bs, void *buf,
                          moon_qg_act_t *a)
{
    a->bs   = bs;
    a->nblk = K / bs;
    a->K    = K;
    a->q    = buf;
    a->ds   = (float *)((int8_t *)buf + (size_t)b * K);
    for (uint32_t r = 0; r < b; r++) {
        for (uint32_t blk = 0; blk < a->nblk; blk++) {
            const float *xb   = x + (size_t)r * K + (size_t)blk * bs;
            int8_t      *q    = a->q + (size_t)r * K + (size_t)blk * bs;
            float       *ds   = a->ds + ((size_t)r * a->nblk + blk) * 2;
            float        amax = 0.0f, id;
            int          sum  = 0;
            for (uint32_t i = 0; i < bs; i++) { /* not fmaxf: a libm call per value */
                float v = fabsf(xb[i]);
                amax    = v > amax ? v : amax;
            }
            id = amax > 0.0f ? 127.0f / amax : 0.0f;
            for (uint32_t i = 0; i < bs; i++) {
                q[i] = (int8_t)lrintf(xb[i] * id);
                sum += q[i];
            }
            ds[0] = amax / 127.0f;
            ds[1] = ds[0] * (float)sum;
        }
    }
}

void moon_cpu_qg_interleave(const uint8_t *rows, uint32_t K, uint32_t k0, uint8_t *q)
{
    for (uint32_t g = k0 / 4; g < K / 4; g++) {
        for (uint32_t r = 0; r < QG_ROWS; r++) {
            memcpy(q + ((size_t)g * QG_ROWS + r) * 4, rows + (size_t)r * K + 4 * g, 4);
        }
    }
}

void moon_cpu_qg_pack(const moon_tensor_t *w, uint32_t r0, uint32_t nr, void *buf,
                      moon_qg_panel_t *p)
{
    moon_cpu_qg_unpack_rows(w, r0, nr, buf, p);
    moon_cpu_qg_interleave(moon_cpu_qg_rows(buf, w->cols), w->cols, 0, p->q);
}

void moon_cpu_qg_tile_scalar(const moon_qg_panel_t *p, const moon_qg_act_t *a, uint32_t x0,
                             uint32_t nx, float *y, uint32_t ldy, uint32_t nr)
{
    for (uint32_t j = 0; j < nx; j++) {
        const int8_t *xq = a->q + (size_t)(x0 + j) * a->K;
        const float  *ds = a->ds + (size_t)(x0 + j) * a->nblk * 2;
        for (uint32_t r = 0; r < nr; r++) {
            float acc = 0.0f;
            for (uint32_t blk = 0; blk < p->nblk; blk++) {
                const uint8_t *wq   = p->q + (size_t)blk * p->bs * QG_ROWS;
                int32_t        isum = 0;
                for (uint32_t k = 0; k < p->bs; k++) {
                    isum += wq[(k / 4 * QG_ROWS + r) * 4 + k % 4] * xq[blk * p->bs + k];
                }
                acc = fmaf((float)isum, p->s[blk * QG_ROWS + r] * ds[2 * blk], acc);
                acc = fmaf(p->o[blk * QG_ROWS + r], ds[2 * blk + 1], acc);
            }
            y[(size_t)j * ldy + r] = acc;
        }
    }
}
