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
#include "cpu/cpu_internal.h"
#include "moonlet/gguf.h"

#include <math.h>
#include <string.h>

static float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return moon_fp16_to_f32(h);
}

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

/* One weight row's values v (unsigned), scales s and offsets o, per block of
 * the type's bs, over K values. */
static void unpack_row(int wtype, const uint8_t *restrict p, uint32_t K, uint8_t *restrict v,
                       float *restrict s, float *restrict o)
{
    switch (wtype) {
    case MOON_GGML_Q8_0: /* v = q + 128 */
        for (uint32_t blk = 0; blk < K / 32; blk++, p += 34, v += 32) {
            float d = half_at(p);
            for (int i = 0; i < 32; i++) {
                v[i] = (uint8_t)(p[2 + i] ^ 0x80);
            }
            s[blk] = d;
            o[blk] = -128.0f * d;
        }
        return;
    case MOON_GGML_Q4_0: /* v = nibble, x = d (v - 8) */
        for (uint32_t blk = 0; blk < K / 32; blk++, p += 18, v += 32) {
            float d = half_at(p);
            for (int i = 0; i < 16; i++) {
                v[i]      = p[2 + i] & 0xf;
                v[i + 16] = p[2 + i] >> 4;
            }
            s[blk] = d;
            o[blk] = -8.0f * d;
        }
        return;
    case MOON_GGML_Q4_K:
    case MOON_GGML_Q5_K: { /* x = d sc v - dmin m per sub-block of 32 */
        int    five = wtype == MOON_GGML_Q5_K;
        size_t bb   = five ? 176 : 144;
        for (uint32_t sb = 0; sb < K / 256; sb++, p += bb, v += 256, s += 8, o += 8) {
            const uint8_t *qh = p + 16, *q = p + (five ? 48 : 16);
            float          d = half_at(p), dmin = half_at(p + 2);
            for (int j = 0; j < 4; j++, q += 32) {
                for (int l = 0; l < 32; l++) {
                    v[64 * j + l]      = q[l] & 0xf;
                    v[64 * j + 32 + l] = q[l] >> 4;
                }
            }
            for (int sub = 0; sub < 8; sub++) {
                uint8_t sc, m;
                moon_cpu_scale_min_k4(sub, p + 4, &sc, &m);
                s[sub] = d * (float)sc;
                o[sub] = -dmin * (float)m;
                if (five) {
                    for (int l = 0; l < 32; l++) {
                        v[32 * sub + l] |= (uint8_t)((qh[l] >> sub & 1) << 4);
                    }
                }
            }
        }
        return;
    }
    case MOON_GGML_Q6_K: /* x = d sc (v - 32) per sub-block of 16 */
        for (uint32_t sb = 0; sb < K / 256; sb++, p += 210, s += 16, o += 16) {
            const uint8_t *ql = p, *qh = p + 128;
            const int8_t  *sc = (const int8_t *)(p + 192);
            float          d  = half_at(p + 208);
            for (int half = 0; half < 2; half++, ql += 64, qh += 32, v += 128) {
                for (int l = 0; l < 32; l++) {
                    v[l]      = (uint8_t)((ql[l] & 0xf) | ((qh[l] >> 0 & 3) << 4));
                    v[l + 32] = (uint8_t)((ql[l + 32] & 0xf) | ((qh[l] >> 2 & 3) << 4));
                    v[l + 64] = (uint8_t)((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4));
                    v[l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4));
                }
            }
            for (int i = 0; i < 16; i++) {
                s[i] = d * (float)sc[i];
                o[i] = -32.0f * s[i];
            }
        }
        return;
    default:
        return;
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
                      moon_qg_panel_t *p, qg_interleave_fn interleave)
{
    uint32_t K    = w->cols;
    uint32_t bs   = moon_cpu_qg_block((int)w->type);
    uint8_t *rows = (uint8_t *)buf + moon_cpu_qg_panel_bytes(K) - (size_t)QG_ROWS * K;
    float    s[MOON_GGML_QK_K / 16], o[MOON_GGML_QK_K / 16];

    p->bs   = bs;
    p->nblk = K / bs;
    p->q    = buf;
    p->s    = (float *)((uint8_t *)buf + (size_t)QG_ROWS * K);
    p->o    = p->s + (size_t)p->nblk * QG_ROWS;
    for (uint32_t r = 0; r < QG_ROWS; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes;
        uint8_t       *v   = rows + (size_t)r * K;
        /* a super-block of 256 at a time: every type's row is whole ones, or
         * whole blocks of 32 for Q8_0 / Q4_0 (then K % 256 may be 32..224) */
        for (uint32_t k0 = 0; k0 < K; k0 += MOON_GGML_QK_K) {
            uint32_t n  = MOON_MIN(MOON_GGML_QK_K, K - k0);
            uint32_t b0 = k0 / bs;
            if (r < nr) {
                unpack_row((int)w->type, row + moon_ggml_type_bytes(w->type, k0), n, v + k0, s, o);
            } else { /* padding rows: zero weights */
                memset(v + k0, 0, n);
                memset(s, 0, sizeof(s));
                memset(o, 0, sizeof(o));
            }
            for (uint32_t i = 0; i < n / bs; i++) {
                p->s[(size_t)(b0 + i) * QG_ROWS + r] = s[i];
                p->o[(size_t)(b0 + i) * QG_ROWS + r] = o[i];
            }
        }
    }
    /* value k of row r goes to lane r of the 4-byte group k / 4 */
    interleave(rows, K, 0, p->q);
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
