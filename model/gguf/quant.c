/* model/gguf/quant.c - the ggml tensor types (block sizes, bytes, names) and their
 * conversion to and from f32: F16, BF16, Q8_0 and Q4_0 (moonlet/gguf.h). Pure
 * functions. */
#include "moonlet/gguf.h"

#include "moonlet/log.h"

#include <math.h>
#include <string.h>

uint32_t moon_ggml_block_size(moon_ggml_type_t type)
{
    return (type == MOON_GGML_Q8_0 || type == MOON_GGML_Q4_0) ? MOON_GGML_QK : 1;
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
    default:
        return "unknown";
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
    default:
        MOON_CHECK(!"unsupported ggml type");
    }
}
