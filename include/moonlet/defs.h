/* moonlet/defs.h - compiler helpers shared by every Moonlet module: symbol
 * visibility, branch hints, cache-line alignment. No state, no threads. */
#ifndef MOONLET_DEFS_H
#define MOONLET_DEFS_H

#ifndef __cplusplus
#include <stdalign.h>
#endif
#include <stddef.h>
#include <stdint.h>

#define MOON_API __attribute__((visibility("default")))
#define MOON_LIKELY(_x) __builtin_expect(!!(_x), 1)
#define MOON_UNLIKELY(_x) __builtin_expect(!!(_x), 0)
#define MOON_NOINLINE __attribute__((noinline))
#define MOON_PRINTF(_f, _a) __attribute__((format(printf, _f, _a)))
#define MOON_CACHE_LINE 64
#define MOON_ARRAY_SIZE(_a) (sizeof(_a) / sizeof((_a)[0]))
/* A macro's value as a string literal (MOON_XSTR(0.3) is "0.3"). */
#define MOON_STR_(_x) #_x
#define MOON_XSTR(_x) MOON_STR_(_x)
#define MOON_MIN(_a, _b) ((_a) < (_b) ? (_a) : (_b))
#define MOON_MAX(_a, _b) ((_a) > (_b) ? (_a) : (_b))
#define MOON_NORETURN __attribute__((noreturn))

/* Public headers are usable from C++ (CUDA translation units). */
#ifdef __cplusplus
#define MOON_EXTERN_C_BEGIN extern "C" {
#define MOON_EXTERN_C_END }
#define MOON_STATIC_ASSERT(_e, _msg) static_assert(_e, _msg)
#else
#define MOON_EXTERN_C_BEGIN
#define MOON_EXTERN_C_END
#define MOON_STATIC_ASSERT(_e, _msg) _Static_assert(_e, _msg)
#endif

#define MOON_CONTAINER_OF(_ptr, _type, _member) ((_type *)((char *)(_ptr)-offsetof(_type, _member)))

#endif /* MOONLET_DEFS_H */
