/* model/gguf/quant.c - the ggml tensor types (block sizes, bytes, names) and their
 * conversion to and from f32: F16, BF16, Q8_0, Q4_0 and the K-quants Q4_K, Q5_K,
 * Q6_K (ggml's layouts, so llama.cpp reads what we write) (moonlet/gguf.h). Pure
 * functions. */
#include "moonlet/gguf.h"

#include "moonlet/log.h"

#include <math.h>
#include <string.h>

uint32_t moon_ggml_block_size(moon_ggml_type_t type)
{
    switch (type) {
    case MOON_GGML_Q8_0:
    case MOON_GGML_Q4_0:
        return MOON_GGML_QK;
    case MOON_GGML_Q4_K:
    case MOON_GGML_Q5_K:
    case MOON_GGML_Q6_K:
        return MOON_GGML_QK_K;
    default:
        return 1;
    }
}

uint64_t moon_ggml_type_bytes(moon_ggml_type_t type, uint64_t n)
{
    switch (type) {
    case MOON_GGML_F32:
        return n * 4;
    case MOON_GGML_F16:
    case MOON_GGML_BF16:
        return n * 2;
    case MOON_GGML_Q8_0:
        return n / MOON_GGML_QK * 34;
    case MOON_GGML_Q4_0:
        return n / MOON_GGML_QK * 18;
    case MOON_GGML_Q4_K:
        return n / MOON_GGML_QK_K * 144;
    case MOON_GGML_Q5_K:
        return n / MOON_GGML_QK_K * 176;
    case MOON_GGML_Q6_K:
        return n / MOON_GGML_QK_K * 210;
    default:
        return 0;
    }
}

const char *moon_ggml_type_name(moon_ggml_type_t type)
{
    switch (type) {
    case MOON_GGML_F32:
        return "f32";
    case MOON_GGML_F16:
        return "f16";
    case MOON_GGML_BF16:
        return "bf16";
    case MOON_GGML_Q8_0:
        return "q8_0";
    case MOON_GGML_Q4_0:
        return "q4_0";
    case MOON_GGML_Q4_K:
        return "q4_k";
    case MOON_GGML_Q5_K:
        return "q5_k";
    case MOON_GGML_Q6_K:
        return "q6_k";
    default:
        return "unknown";
    }
}

/* ---- K-quants (ggml's block layouts) -------------------------------------- */

static float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return moon_fp16_to_f32(h);
}

/* Sub-block j's 6-bit scale and min of a Q4_K/Q5_K block (ggml's
 * get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m  = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m  = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* One super-block of 256 values. Q4_K/Q5_K: d, dmin (fp16), 12 bytes of
 * 6-bit scales and mins for 8 sub-blocks of 32, (Q5_K: 32 bytes of fifth
 * bits,) 128 bytes of nibbles; x = d sc q - dmin m. Q6_K: 128 bytes of low
 * nibbles, 64 of 2-bit highs, 16 int8 scales (sub-blocks of 16), d; x = d sc
 * (q - 32). */
static void dequant_k(moon_ggml_type_t type, const uint8_t *blk, float *y)
{
    if (type == MOON_GGML_Q6_K) {
        const uint8_t *ql = blk, *qh = blk + 128;
        const int8_t  *sc = (const int8_t *)(blk + 192);
        float          d  = half_at(blk + 208);
        for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is    = l / 16;
                int q1    = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2    = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3    = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4    = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l]      = d * sc[is + 0] * (float)q1;
                y[l + 32] = d * sc[is + 2] * (float)q2;
                y[l + 64] = d * sc[is + 4] * (float)q3;
                y[l + 96] = d * sc[is + 6] * (float)q4;
            }
        }
        return;
    }
    {
        float          d = half_at(blk), dmin = half_at(blk + 2);
        const uint8_t *scales = blk + 4;
        const uint8_t *qh     = blk + 16; /* Q5_K only */
        const uint8_t *q      = blk + (type == MOON_GGML_Q5_K ? 48 : 16);
        for (int j = 0, is = 0; j < 256; j += 64, q += 32, is += 2) {
            uint8_t sc, m;
            float   d1, m1, d2, m2;
            scale_min_k4(is, scales, &sc, &m);
            d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) {
                int hi1       = type == MOON_GGML_Q5_K && (qh[l] >> is & 1) ? 16 : 0;
                int hi2       = type == MOON_GGML_Q5_K && (qh[l] >> (is + 1) & 1) ? 16 : 0;
                y[j + l]      = d1 * (float)((q[l] & 0xf) + hi1) - m1;
                y[j + 32 + l] = d2 * (float)((q[l] >> 4) + hi2) - m2;
            }
        }
    }
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Quantizes 256 values into one super-block (plain min/max fits per
 * sub-block, then 6- or 8-bit scales relative to the block's largest). */
static void quant_k(moon_ggml_type_t type, const float *x, uint8_t *blk)
{
    if (type == MOON_GGML_Q6_K) {
        float   s[16], smax = 0.0f, d, id;
        int8_t  sc[16];
        uint8_t Q[256];
        for (int j = 0; j < 16; j++) {
            float amax = 0.0f;
            for (int l = 0; l < 16; l++) {
                amax = fmaxf(amax, fabsf(x[16 * j + l]));
            }
            s[j] = amax / 31.0f;
            smax = fmaxf(smax, s[j]);
        }
        d  = smax / 127.0f;
        id = d > 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 16; j++) {
            sc[j] = (int8_t)clampi((int)lrintf(s[j] * id), -128, 127);
        }
        {
            uint16_t h = moon_f32_to_fp16(d);
            d          = moon_fp16_to_f32(h); /* quantize against the stored scale */
            memcpy(blk + 208, &h, 2);
        }
        memcpy(blk + 192, sc, 16);
        for (int i = 0; i < 256; i++) {
            float ds = d * sc[i / 16];
            int   q  = ds != 0.0f ? (int)lrintf(x[i] / ds) : 0;
            Q[i]     = (uint8_t)(clampi(q, -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            uint8_t       *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
            const uint8_t *P = Q + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l]      = (uint8_t)((P[l] & 0xf) | (P[l + 64] & 0xf) << 4);
                ql[l + 32] = (uint8_t)((P[l + 32] & 0xf) | (P[l + 96] & 0xf) << 4);
                qh[l]      = (uint8_t)((P[l] >> 4) | (P[l + 32] >> 4) << 2 | (P[l + 64] >> 4) << 4 |
                                  (P[l + 96] >> 4) << 6);
            }
        }
        return;
    }
    {
        int      qmax = type == MOON_GGML_Q5_K ? 31 : 15;
        float    s[8], mn[8], smax = 0.0f, mmax = 0.0f, d, dmin;
        uint8_t  sc[8], m[8], *scales = blk + 4, *qh = blk + 16;
        uint8_t *q = blk + (type == MOON_GGML_Q5_K ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            float lo = x[32 * j], hi = x[32 * j];
            for (int l = 1; l < 32; l++) {
                lo = fminf(lo, x[32 * j + l]);
                hi = fmaxf(hi, x[32 * j + l]);
            }
            lo    = fminf(lo, 0.0f); /* x = s q - mn with mn >= 0 */
            s[j]  = (hi - lo) / (float)qmax;
            mn[j] = -lo;
            smax  = fmaxf(smax, s[j]);
            mmax  = fmaxf(mmax, mn[j]);
        }
        d    = smax / 63.0f;
        dmin = mmax / 63.0f;
        {
            uint16_t hd = moon_f32_to_fp16(d), hm = moon_f32_to_fp16(dmin);
            memcpy(blk, &hd, 2);
            memcpy(blk + 2, &hm, 2);
            d    = moon_fp16_to_f32(hd);
            dmin = moon_fp16_to_f32(hm);
        }
        for (int j = 0; j < 8; j++) {
            /* round the scale up so the range still fits in qmax steps */
            sc[j] = (uint8_t)clampi(d > 0.0f ? (int)ceilf(s[j] / d) : 0, 0, 63);
            m[j]  = (uint8_t)clampi(dmin > 0.0f ? (int)lrintf(mn[j] / dmin) : 0, 0, 63);
        }
        memset(scales, 0, 12);
        for (int j = 0; j < 8; j++) {
            if (j < 4) {
                scales[j] |= sc[j] & 63;
                scales[j + 4] |= m[j] & 63;
            } else {
                scales[j + 4] = (uint8_t)((sc[j] & 0xf) | (m[j] & 0xf) << 4);
                scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
                scales[j] |= (uint8_t)((m[j] >> 4) << 6);
            }
        }
        if (type == MOON_GGML_Q5_K) {
            memset(qh, 0, 32);
        }
        for (int j = 0; j < 8; j++) {
            float ds = d * sc[j], dm = dmin * m[j];
            for (int l = 0; l < 32; l++) {
                int v = ds > 0.0f ? clampi((int)lrintf((x[32 * j + l] + dm) / ds), 0, qmax) : 0;
                int c = j / 2, hi = j % 2;
                if (hi == 0) {
                    q[32 * c + l] = (uint8_t)(v & 0xf);
                } else {
                    q[32 * c + l] |= (uint8_t)((v & 0xf) << 4);
                }
                if (type == MOON_GGML_Q5_K && v > 15) {
                    qh[l] |= (uint8_t)(1u << j);
                }
            }
        }
    }
}

void moon_ggml_dequantize(moon_ggml_type_t type, const void *src, float *dst, uint64_t n)
{
    const uint8_t *s = src;

    switch (type) {
    case MOON_GGML_F32:
        memcpy(dst, src, n * 4);
        break;
    case MOON_GGML_F16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = moon_fp16_to_f32(h);
        }
        break;
    case MOON_GGML_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = moon_bf16_to_f32(h);
        }
        break;
    case MOON_GGML_Q8_0:
        for (uint64_t b = 0; b < n / MOON_GGML_QK; b++) {
            const uint8_t *blk = s + b * 34;
            uint16_t       h;
            float          d;
            memcpy(&h, blk, 2);
            d = moon_fp16_to_f32(h);
            for (int j = 0; j < MOON_GGML_QK; j++) {
                dst[b * MOON_GGML_QK + j] = d * (float)(int8_t)blk[2 + j];
            }
        }
        break;
    case MOON_GGML_Q4_0:
        for (uint64_t b = 0; b < n / MOON_GGML_QK; b++) {
            const uint8_t *blk = s + b * 18;
            uint16_t       h;
            float          d;
            memcpy(&h, blk, 2);
            d = moon_fp16_to_f32(h);
            for (int j = 0; j < MOON_GGML_QK / 2; j++) {
                dst[b * MOON_GGML_QK + j]      = d * (float)((blk[2 + j] & 0x0f) - 8);
                dst[b * MOON_GGML_QK + j + 16] = d * (float)((blk[2 + j] >> 4) - 8);
            }
        }
        break;
    case MOON_GGML_Q4_K:
    case MOON_GGML_Q5_K:
    case MOON_GGML_Q6_K:
        for (uint64_t b = 0; b < n / MOON_GGML_QK_K; b++) {
            dequant_k(type, s + b * moon_ggml_type_bytes(type, MOON_GGML_QK_K),
                      dst + b * MOON_GGML_QK_K);
        }
        break;
    default:
        MOON_CHECK(!"unsupported ggml type");
    }
}

void moon_ggml_quantize(moon_ggml_type_t type, const float *src, void *dst, uint64_t n)
{
    uint8_t *d = dst;

    switch (type) {
    case MOON_GGML_F32:
        memcpy(dst, src, n * 4);
        break;
    case MOON_GGML_F16:
    case MOON_GGML_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h =
                type == MOON_GGML_F16 ? moon_f32_to_fp16(src[i]) : moon_f32_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case MOON_GGML_Q8_0:
    case MOON_GGML_Q4_0:
        for (uint64_t b = 0; b < n / MOON_GGML_QK; b++) {
            const float *x    = src + b * MOON_GGML_QK;
            float        amax = 0.0f, maxv = 0.0f;
            for (int j = 0; j < MOON_GGML_QK; j++) {
                if (fabsf(x[j]) > amax) {
                    amax = fabsf(x[j]);
                    maxv = x[j];
                }
            }
            if (type == MOON_GGML_Q8_0) {
                uint8_t *blk = d + b * 34;
                float    sc  = amax / 127.0f;
                float    inv = sc != 0.0f ? 1.0f / sc : 0.0f;
                uint16_t h   = moon_f32_to_fp16(sc);
                memcpy(blk, &h, 2);
                for (int j = 0; j < MOON_GGML_QK; j++) {
                    blk[2 + j] = (uint8_t)(int8_t)lrintf(x[j] * inv);
                }
            } else {
                uint8_t *blk = d + b * 18;
                float    sc  = maxv / -8.0f;
                float    inv = sc != 0.0f ? 1.0f / sc : 0.0f;
                uint16_t h   = moon_f32_to_fp16(sc);
                memcpy(blk, &h, 2);
                for (int j = 0; j < MOON_GGML_QK / 2; j++) {
                    int q0     = (int)(x[j] * inv + 8.5f);
                    int q1     = (int)(x[j + 16] * inv + 8.5f);
                    q0         = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
                    q1         = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
                    blk[2 + j] = (uint8_t)(q0 | (q1 << 4));
                }
            }
        }
        break;
    case MOON_GGML_Q4_K:
    case MOON_GGML_Q5_K:
    case MOON_GGML_Q6_K:
        for (uint64_t b = 0; b < n / MOON_GGML_QK_K; b++) {
            quant_k(type, src + b * MOON_GGML_QK_K,
                    d + b * moon_ggml_type_bytes(type, MOON_GGML_QK_K));
        }
        break;
    default:
        MOON_CHECK(!"unsupported ggml type");
    }
}
