/* model/cpu/qgemm_unpack.h - the first half of packing a panel of the
 * integer GEMM (cpu/qgemm.c): QG_ROWS weight rows unpacked row by row into
 * unsigned values (w = s v + o per block), the scales and offsets into the
 * panel, the values into the panel's buffer after them, ready for the
 * interleave. Inline so each ISA's pack compiles it for its own vectors
 * (plain C loops the compiler vectorises). */
#ifndef MOON_MODEL_CPU_QGEMM_UNPACK_H
#define MOON_MODEL_CPU_QGEMM_UNPACK_H

#include "cpu/cpu_internal.h"
#include "moonlet/gguf.h"

#include <string.h>

/* where a panel buffer keeps the rows as unpacked, before the interleave */
static inline uint8_t *moon_cpu_qg_rows(void *buf, uint32_t K)
{
    return (uint8_t *)buf + moon_cpu_qg_panel_bytes(K) - (size_t)QG_ROWS * K;
}

static inline float moon_cpu_qg_half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return moon_fp16_to_f32(h);
}

/* One weight row's values v (unsigned), scales s and offsets o, per block of
 * the type's bs, over K values. */
static inline void moon_cpu_qg_unpack_row(int wtype, const uint8_t *restrict p, uint32_t K,
                                          uint8_t *restrict v, float *restrict s, float *restrict o)
{
    switch (wtype) {
    case MOON_GGML_Q8_0: /* v = q + 128 */
        for (uint32_t blk = 0; blk < K / 32; blk++, p += 34, v += 32) {
            float d = moon_cpu_qg_half(p);
            for (int i = 0; i < 32; i++) {
                v[i] = (uint8_t)(p[2 + i] ^ 0x80);
            }
            s[blk] = d;
            o[blk] = -128.0f * d;
        }
        return;
    case MOON_GGML_Q4_0: /* v = nibble, x = d (v - 8) */
        for (uint32_t blk = 0; blk < K / 32; blk++, p += 18, v += 32) {
            float d = moon_cpu_qg_half(p);
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
            float          d = moon_cpu_qg_half(p), dmin = moon_cpu_qg_half(p + 2);
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
            float          d  = moon_cpu_qg_half(p + 208);
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

static inline void moon_cpu_qg_unpack_rows(const moon_tensor_t *w, uint32_t r0, uint32_t nr,
                                           void *buf, moon_qg_panel_t *p)
{
    uint32_t K    = w->cols;
    uint32_t bs   = moon_cpu_qg_block((int)w->type);
    uint8_t *rows = moon_cpu_qg_rows(buf, K);
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
                moon_cpu_qg_unpack_row((int)w->type, row + moon_ggml_type_bytes(w->type, k0), n,
                                       v + k0, s, o);
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
}

#endif /* MOON_MODEL_CPU_QGEMM_UNPACK_H */
