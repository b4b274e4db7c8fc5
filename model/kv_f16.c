/* model/kv_f16.c - the fp16 KV cache's row conversions (kv_internal.h): F16C
 * eight lanes at a time where the CPU has it, moon_fp16's scalar functions
 * for the rest and elsewhere. Both round to nearest even and agree bit for
 * bit on every finite float (tests/unit/model/test_kv_cache.c checks it), so
 * the reference and fast CPU backends fill a shared cache alike. */
#include "kv_internal.h"
#include "moonlet/gguf.h"

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx,f16c"))) static size_t to_f16_f16c(uint16_t *dst, const float *src,
                                                              size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    }
    return i;
}

__attribute__((target("avx,f16c"))) static size_t to_f32_f16c(float *dst, const uint16_t *src,
                                                              size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    }
    return i;
}

static int have_f16c(void)
{
    return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
}
#else
static size_t to_f16_f16c(uint16_t *dst, const float *src, size_t n)
{
    (void)dst, (void)src, (void)n;
    return 0;
}
static size_t to_f32_f16c(float *dst, const uint16_t *src, size_t n)
{
    (void)dst, (void)src, (void)n;
    return 0;
}
static int have_f16c(void)
{
    return 0;
}
#endif

void moon_kv_f16_from_f32(uint16_t *dst, const float *src, size_t n)
{
    size_t i = have_f16c() ? to_f16_f16c(dst, src, n) : 0;
    for (; i < n; i++) {
        dst[i] = moon_f32_to_fp16(src[i]);
    }
}

void moon_kv_f16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    size_t i = have_f16c() ? to_f32_f16c(dst, src, n) : 0;
    for (; i < n; i++) {
        dst[i] = moon_fp16_to_f32(src[i]);
    }
}
