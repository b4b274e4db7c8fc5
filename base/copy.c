/* base/copy.c - see moonlet/copy.h. */
#include "moonlet/copy.h"

#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>

void moon_copy_stream(void *dst, const void *src, size_t n)
{
    char       *d    = dst;
    const char *s    = src;
    size_t      head = (64 - ((uintptr_t)d & 63)) & 63; /* whole lines: full write combining */

    if (n < 4096) { /* not worth the fence: a small copy stays in cache anyway */
        memcpy(d, s, n);
        return;
    }
    memcpy(d, s, head); /* to a line boundary of the destination */
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, n);
    _mm_sfence(); /* streaming stores are weakly ordered: done before we say so */
}
#else
void moon_copy_stream(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}
#endif
