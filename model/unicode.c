/* model/unicode.c - UTF-8 decoding and code point classes for the BPE
 * pre-tokenizers. Pure functions. */
#include "unicode.h"

static int in_class(const moon_unicode_class_t *c, uint32_t cp)
{
    size_t lo = 0, hi = c->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->ranges[mid][1] < cp) {
            lo = mid + 1;
        } else if (c->ranges[mid][0] > cp) {
            hi = mid;
        } else {
            return 1;
        }
    }
    return 0;
}

uint32_t moon_unicode_flags(uint32_t cp)
{
    uint32_t f = 0;

    if (cp < 0x80) { /* the common case, without a search */
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
            return MOON_UNICODE_F_LETTER;
        }
        if (cp >= '0' && cp <= '9') {
            return MOON_UNICODE_F_NUMBER;
        }
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d)) {
            return MOON_UNICODE_F_SPACE;
        }
        return 0;
    }
    if (cp >= 0x110000) {
        return 0;
    }
    for (uint32_t c = 0; c < MOON_UNICODE_N_CLASSES; c++) {
        if (in_class(&moon_unicode_classes[c], cp)) {
            f |= 1u << c;
        }
    }
    return f;
}

size_t moon_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp_p)
{
    uint8_t  b = s[0];
    size_t   need;
    uint32_t cp, min;

    if (b < 0x80) {
        *cp_p = b;
        return 1;
    }
    if (b >= 0xc2 && b <= 0xdf) {
        need = 2, cp = b & 0x1f, min = 0x80;
    } else if (b >= 0xe0 && b <= 0xef) {
        need = 3, cp = b & 0x0f, min = 0x800;
    } else if (b >= 0xf0 && b <= 0xf4) {
        need = 4, cp = b & 0x07, min = 0x10000;
    } else {
        goto invalid;
    }
    if (n < need) {
        goto invalid;
    }
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            goto invalid;
        }
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp >= 0x110000 || (cp >= 0xd800 && cp <= 0xdfff)) {
        goto invalid;
    }
    *cp_p = cp;
    return need;

invalid:
    *cp_p = 0xfffdu | (uint32_t)b << 24;
    return 1;
}

size_t moon_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}
