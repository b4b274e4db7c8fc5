/* moonlet/reader.h - a bounds-checked reader over a borrowed byte buffer, for
 * parsing untrusted input (files, wire frames): every read checks what is
 * left first, and a failed read moves nothing. The caller owns the buffer and
 * the reader; one thread at a time. Every function returns MOON_OK, or
 * MOON_ERR_INVALID_PARAM when the buffer ends first (the caller logs, naming
 * what it was reading). */
#ifndef MOONLET_READER_H
#define MOONLET_READER_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

#include <string.h>

MOON_EXTERN_C_BEGIN

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MOON_READER_BE16(_x) __builtin_bswap16(_x)
#define MOON_READER_BE32(_x) __builtin_bswap32(_x)
#define MOON_READER_BE64(_x) __builtin_bswap64(_x)
#else
#define MOON_READER_BE16(_x) (_x)
#define MOON_READER_BE32(_x) (_x)
#define MOON_READER_BE64(_x) (_x)
#endif

typedef struct {
    const uint8_t *p;   /* next byte */
    const uint8_t *end; /* one past the last */
} moon_reader_t;

/* Reads buf[0..n_bytes) (borrowed: it must outlive every pointer taken). */
static inline void moon_reader_init(moon_reader_t *r, const void *buf, size_t n_bytes)
{
    r->p   = (const uint8_t *)buf;
    r->end = r->p + n_bytes;
}

static inline size_t moon_reader_left(const moon_reader_t *r)
{
    return (size_t)(r->end - r->p);
}

/* The next n bytes, in place: *bytes_p points into the buffer. */
static inline moon_status_t moon_reader_take(moon_reader_t *r, uint64_t n, const uint8_t **bytes_p)
{
    if ((uint64_t)moon_reader_left(r) < n) {
        return MOON_ERR_INVALID_PARAM;
    }
    *bytes_p = r->p;
    r->p += n;
    return MOON_OK;
}

static inline moon_status_t moon_reader_skip(moon_reader_t *r, uint64_t n)
{
    const uint8_t *b;

    return moon_reader_take(r, n, &b);
}

/* Copies the next n bytes to dst (in the buffer's byte order). */
static inline moon_status_t moon_reader_copy(moon_reader_t *r, void *dst, size_t n)
{
    const uint8_t *b;

    if (moon_reader_take(r, n, &b) != MOON_OK) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(dst, b, n);
    return MOON_OK;
}

/* An unsigned big-endian integer of n = 1, 2, 4 or 8 bytes (msgpack's widths). */
static inline moon_status_t moon_reader_be(moon_reader_t *r, size_t n, uint64_t *v_p)
{
    const uint8_t *b;
    uint16_t       x16;
    uint32_t       x32;
    uint64_t       x64;

    if ((n != 1 && n != 2 && n != 4 && n != 8) || moon_reader_take(r, n, &b) != MOON_OK) {
        return MOON_ERR_INVALID_PARAM;
    }
    switch (n) {
    case 1:
        *v_p = b[0];
        break;
    case 2:
        memcpy(&x16, b, 2);
        *v_p = MOON_READER_BE16(x16);
        break;
    case 4:
        memcpy(&x32, b, 4);
        *v_p = MOON_READER_BE32(x32);
        break;
    default:
        memcpy(&x64, b, 8);
        *v_p = MOON_READER_BE64(x64);
        break;
    }
    return MOON_OK;
}

/* An unsigned little-endian integer of n = 1..8 bytes (GGUF's byte order). */
static inline moon_status_t moon_reader_le(moon_reader_t *r, size_t n, uint64_t *v_p)
{
    const uint8_t *b;
    uint64_t       v = 0;

    if (n == 0 || n > 8 || moon_reader_take(r, n, &b) != MOON_OK) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (size_t i = n; i-- > 0;) {
        v = (v << 8) | b[i];
    }
    *v_p = v;
    return MOON_OK;
}

MOON_EXTERN_C_END

#endif /* MOONLET_READER_H */
