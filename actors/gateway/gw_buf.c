/* actors/gateway/gw_buf.c - growable text buffer (see gw_buf.h). */
#include "gw_buf.h"

#include "moonlet/alloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void moon_gw_buf_init(moon_gw_buf_t *b)
{
    memset(b, 0, sizeof(*b));
}

void moon_gw_buf_fini(moon_gw_buf_t *b)
{
    moon_free(b->data);
    memset(b, 0, sizeof(*b));
}

static int reserve(moon_gw_buf_t *b, size_t n)
{
    size_t need = b->len + n + 1;
    size_t cap  = b->cap ? b->cap : 256;
    char  *data;

    if (b->failed) {
        return 0;
    }
    if (need <= b->cap) {
        return 1;
    }
    while (cap < need) {
        cap *= 2;
    }
    data = moon_realloc(b->data, cap);
    if (data == NULL) {
        b->failed = 1;
        return 0;
    }
    b->data = data;
    b->cap  = cap;
    return 1;
}

void moon_gw_buf_append(moon_gw_buf_t *b, const char *s, size_t n)
{
    if (!reserve(b, n)) {
        return;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void moon_gw_buf_puts(moon_gw_buf_t *b, const char *s)
{
    moon_gw_buf_append(b, s, strlen(s));
}

void moon_gw_buf_printf(moon_gw_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    int     n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n)) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void moon_gw_buf_number(moon_gw_buf_t *b, double v)
{
    if (isnan(v)) {
        moon_gw_buf_puts(b, "NaN");
    } else if (isinf(v)) {
        moon_gw_buf_puts(b, v > 0 ? "+Inf" : "-Inf");
    } else if (fabs(v) < 1e15 && v == (double)(long long)v) {
        moon_gw_buf_printf(b, "%lld", (long long)v);
    } else {
        moon_gw_buf_printf(b, "%.15g", v);
    }
}

moon_status_t moon_gw_buf_take(moon_gw_buf_t *b, char **text_p, size_t *len_p)
{
    if (b->failed || !reserve(b, 0)) {
        moon_gw_buf_fini(b);
        return MOON_ERR_NO_MEMORY;
    }
    b->data[b->len] = '\0';
    *text_p         = b->data;
    if (len_p != NULL) {
        *len_p = b->len;
    }
    memset(b, 0, sizeof(*b));
    return MOON_OK;
}
