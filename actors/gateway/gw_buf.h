/* actors/gateway/gw_buf.h - a growable byte buffer for the gateway's text output
 * (metrics, JSON bodies, SSE frames). Always NUL-terminated. A buffer that
 * failed to grow stays failed (later appends do nothing) so callers check
 * once at the end. One owner, no locking. */
#ifndef MOON_ACTORS_GW_BUF_H
#define MOON_ACTORS_GW_BUF_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

#include <stddef.h>

typedef struct {
    char  *data; /* moon_malloc'd, NUL-terminated once anything was appended */
    size_t len;
    size_t cap;
    int    failed; /* an allocation failed: contents incomplete */
} moon_gw_buf_t;

void moon_gw_buf_init(moon_gw_buf_t *b);
void moon_gw_buf_fini(moon_gw_buf_t *b); /* frees data */
void moon_gw_buf_append(moon_gw_buf_t *b, const char *s, size_t n);
void moon_gw_buf_puts(moon_gw_buf_t *b, const char *s);
void moon_gw_buf_printf(moon_gw_buf_t *b, const char *fmt, ...) MOON_PRINTF(2, 3);
/* A number as Prometheus and JSON read it: integers without a fraction,
 * others with up to 15 significant digits; +Inf, -Inf, NaN spelled out. */
void moon_gw_buf_number(moon_gw_buf_t *b, double v);
/* Moves the text out: *text_p (moon_free it) and *len_p; the buffer is empty
 * after. MOON_ERR_NO_MEMORY if an append had failed (nothing moved, data freed). */
moon_status_t moon_gw_buf_take(moon_gw_buf_t *b, char **text_p, size_t *len_p);

#endif /* MOON_ACTORS_GW_BUF_H */
