/* model/gguf/fp16.c - conversions between f32 and the 16-bit float formats (IEEE
 * fp16, bf16) declared in moonlet/gguf.h. Pure functions. */
#include "moonlet/gguf.h"

#include <math.h>
#include <string.h>

float moon_fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp  = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    union {
        uint32_t u;
        float    f;
    } v;

    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 */
        float f = (float)mant * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) {
        v.u = sign | 0x7f800000u | (mant << 13);
        return v.f;
    }
    v.u = sign | ((exp + 112) << 23) | (mant << 13);
    return v.f;
}

uint16_t moon_f32_to_fp16(float f)
{
    union {
        float    f;
        uint32_t u;
    } v           = {.f = f};
    uint32_t sign = (v.u >> 16) & 0x8000u;
    float    a    = fabsf(f);

    if (isnan(f)) {
        return (uint16_t)(sign | 0x7e00u);
    }
    if (a >= 65520.0f) {
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a < 6.103515625e-05f) {
        /* subnormal: round(a / 2^-24) */
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
    }
    {
        union {
            float    f;
            uint32_t u;
        } w           = {.f = a};
        uint32_t e    = (w.u >> 23) - 112;
        uint32_t m    = w.u & 0x7fffffu;
        uint32_t r    = (e << 10) | (m >> 13);
        uint32_t rest = m & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) {
            r++;
        }
        return (uint16_t)(sign | r);
    }
}

uint16_t moon_f32_to_bf16(float f)
{
    union {
        float    f;
        uint32_t u;
    } v = {.f = f};

    if (isnan(f)) {
        return (uint16_t)((v.u >> 16) | 0x40u);
    }
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
