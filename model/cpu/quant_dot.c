/* model/cpu/quant_dot.c - dot products of quantised weight rows with
 * activations quantised to 8 bits, as llama.cpp does (ggml's q8_0 / q8_K):
 * the activation row is quantised once per matmul (blocks of 32 for Q8_0 and
 * Q4_0 weights, super-blocks of 256 with 16-value sums for the K-quants) and
 * each weight block then multiplies it in integers, scaled once per block. The
 * plain C kernels here are the ones the ISA kernels must match exactly in
 * their integer parts. */
#include "cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

static float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return moon_fp16_to_f32(h);
}

int moon_cpu_act_is_k(int wtype)
{
    return wtype == MOON_GGML_Q4_K || wtype == MOON_GGML_Q5_K || wtype == MOON_GGML_Q6_K;
}

size_t moon_cpu_act_row_bytes(int wtype, uint32_t n)
{
    return moon_cpu_act_is_k(wtype) ? (size_t)n / MOON_GGML_QK_K * sizeof(moon_q8k_t)
                                    : (size_t)n / MOON_GGML_QK * sizeof(moon_q8b_t);
}

/* d = max |x| / 127 and q = round(x / d), so q stays in [-127, 127]: the
 * AVX2 kernels' sign trick needs no -128 on the activation side. */
static float block_scale(const float *x, uint32_t n, float *id)
{
    float amax = 0.0f;
    for (uint32_t i = 0; i < n; i++) { /* not fmaxf: a libm call per value here */
        float a = fabsf(x[i]);
        amax    = a > amax ? a : amax;
    }
    *id = amax > 0.0f ? 127.0f / amax : 0.0f;
    return amax / 127.0f;
}

void moon_cpu_quantize_act(int wtype, const float *x, uint32_t n, void *out)
{
    if (moon_cpu_act_is_k(wtype)) {
        moon_q8k_t *b = out;
        for (uint32_t i = 0; i < n; i += MOON_GGML_QK_K, b++, x += MOON_GGML_QK_K) {
            float id;
            b->d = block_scale(x, MOON_GGML_QK_K, &id);
            for (int j = 0; j < MOON_GGML_QK_K; j++) {
                b->qs[j] = (int8_t)lrintf(x[j] * id);
            }
            for (int j = 0; j < MOON_GGML_QK_K / 16; j++) {
                int s = 0;
                for (int k = 0; k < 16; k++) {
                    s += b->qs[16 * j + k];
                }
                b->bsums[j] = (int16_t)s;
            }
        }
        return;
    }
    {
        moon_q8b_t *b = out;
        for (uint32_t i = 0; i < n; i += MOON_GGML_QK, b++, x += MOON_GGML_QK) {
            float id;
            b->d = block_scale(x, MOON_GGML_QK, &id);
            for (int j = 0; j < MOON_GGML_QK; j++) {
                b->qs[j] = (int8_t)lrintf(x[j] * id);
            }
        }
    }
}

float moon_cpu_qdot_q8_0_scalar(const void *w, const void *xq, uint32_t n)
{
    const uint8_t    *p   = w;
    const moon_q8b_t *y   = xq;
    float             sum = 0.0f;

    for (uint32_t i = 0; i < n / MOON_GGML_QK; i++, p += 34, y++) {
        const int8_t *q  = (const int8_t *)(p + 2);
        int           is = 0;
        for (int j = 0; j < MOON_GGML_QK; j++) {
            is += q[j] * y->qs[j];
        }
        sum += half_at(p) * y->d * (float)is;
    }
    return sum;
}

float moon_cpu_qdot_q4_0_scalar(const void *w, const void *xq, uint32_t n)
{
    const uint8_t    *p   = w;
    const moon_q8b_t *y   = xq;
    float             sum = 0.0f;

    for (uint32_t i = 0; i < n / MOON_GGML_QK; i++, p += 18, y++) {
        const uint8_t *q  = p + 2;
        int            is = 0;
        for (int j = 0; j < MOON_GGML_QK / 2; j++) {
            is += ((q[j] & 0xf) - 8) * y->qs[j] + ((q[j] >> 4) - 8) * y->qs[j + 16];
        }
        sum += half_at(p) * y->d * (float)is;
    }
    return sum;
}

/* Sub-block j's 6-bit scale and min of a Q4_K/Q5_K block (ggml's
 * get_scale_min_k4). */
void moon_cpu_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m  = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m  = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q4_K and Q5_K (fifth bits in qh): x = d sc q - dmin m per sub-block of 32,
 * so a block's dot is d sum(sc sum(q y)) - dmin sum(m sum(y)), the sums of y
 * from the activation's bsums. */
static float qdot_q45k(const void *w, const void *xq, uint32_t n, int five)
{
    const uint8_t    *p   = w;
    const moon_q8k_t *y   = xq;
    float             sum = 0.0f;
    size_t            bb  = five ? 176 : 144;

    for (uint32_t i = 0; i < n / MOON_GGML_QK_K; i++, p += bb, y++) {
        const uint8_t *qh   = p + 16;
        const uint8_t *q    = p + (five ? 48 : 16);
        int            isum = 0, msum = 0;
        for (int j = 0; j < 4; j++, q += 32) {
            for (int h = 0; h < 2; h++) {
                int     sub = 2 * j + h, s = 0;
                uint8_t sc, m;
                moon_cpu_scale_min_k4(sub, p + 4, &sc, &m);
                for (int l = 0; l < 32; l++) {
                    int v = h ? q[l] >> 4 : q[l] & 0xf;
                    v += five && (qh[l] >> sub & 1) ? 16 : 0;
                    s += v * y->qs[32 * sub + l];
                }
                isum += sc * s;
                msum += m * (y->bsums[2 * sub] + y->bsums[2 * sub + 1]);
            }
        }
        sum += y->d * (half_at(p) * (float)isum - half_at(p + 2) * (float)msum);
    }
    return sum;
}

float moon_cpu_qdot_q4_k_scalar(const void *w, const void *xq, uint32_t n)
{
    return qdot_q45k(w, xq, n, 0);
}

float moon_cpu_qdot_q5_k_scalar(const void *w, const void *xq, uint32_t n)
{
    return qdot_q45k(w, xq, n, 1);
}

/* Q6_K: x = d sc (q - 32) per sub-block of 16 (ggml's dequantize_row_q6_K
 * order: two halves of 128, four quarter-rows of 32 in each). */
float moon_cpu_qdot_q6_k_scalar(const void *w, const void *xq, uint32_t n)
{
    const uint8_t    *p   = w;
    const moon_q8k_t *y   = xq;
    float             sum = 0.0f;

    for (uint32_t i = 0; i < n / MOON_GGML_QK_K; i++, p += 210, y++) {
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t  *sc   = (const int8_t *)(p + 192);
        const int8_t  *q8   = y->qs;
        int            isum = 0;
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, q8 += 128) {
            int s[8] = {0};
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                s[is + 0] += (((ql[l] & 0xf) | ((qh[l] >> 0 & 3) << 4)) - 32) * q8[l];
                s[is + 2] += (((ql[l + 32] & 0xf) | ((qh[l] >> 2 & 3) << 4)) - 32) * q8[l + 32];
                s[is + 4] += (((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32) * q8[l + 64];
                s[is + 6] += (((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32) * q8[l + 96];
            }
            for (int k = 0; k < 8; k++) {
                isum += sc[k] * s[k];
            }
        }
        sum += half_at(p + 208) * y->d * (float)isum;
    }
    return sum;
}
