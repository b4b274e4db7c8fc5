/* launch/loadgen/loadgen_sse.c - the incremental event-stream parser (loadgen_sse.h). */
#include "loadgen_sse.h"

#include "moonlet/alloc.h"

#include <string.h>

#define SSE_DEFAULT_MAX (16u << 20)

void moon_loadgen_sse_init(moon_loadgen_sse_t *sse, size_t max_bytes, moon_loadgen_sse_fn fn,
                           void *arg)
{
    memset(sse, 0, sizeof(*sse));
    sse->max_bytes = max_bytes ? max_bytes : SSE_DEFAULT_MAX;
    sse->fn        = fn;
    sse->arg       = arg;
}

void moon_loadgen_sse_fini(moon_loadgen_sse_t *sse)
{
    moon_free(sse->line);
    moon_free(sse->data);
    memset(sse, 0, sizeof(*sse));
}

/* Appends n bytes to *buf (keeping room for a NUL). */
static moon_status_t append(char **buf, size_t *len, size_t *cap, const char *src, size_t n,
                            size_t max)
{
    if (*len + n + 1 > max + 1) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (*len + n + 1 > *cap) {
        size_t grown = *cap ? *cap : 256;
        char  *bigger;
        while (grown < *len + n + 1) {
            grown *= 2;
        }
        bigger = moon_realloc(*buf, grown);
        if (bigger == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        *buf = bigger;
        *cap = grown;
    }
    memcpy(*buf + *len, src, n);
    *len += n;
    (*buf)[*len] = '\0';
    return MOON_OK;
}

static moon_status_t dispatch(moon_loadgen_sse_t *sse)
{
    int stop;

    if (!sse->has_data) {
        return MOON_OK;
    }
    stop          = sse->fn(sse->arg, sse->data != NULL ? sse->data : "", sse->data_len);
    sse->data_len = 0;
    sse->has_data = 0;
    if (sse->data != NULL) {
        sse->data[0] = '\0';
    }
    return stop ? MOON_ERR_CANCELED : MOON_OK;
}

/* One complete line (without its end). */
static moon_status_t on_line(moon_loadgen_sse_t *sse, const char *line, size_t len)
{
    const char   *colon;
    const char   *value;
    size_t        name_len, value_len;
    moon_status_t status;

    if (len == 0) {
        return dispatch(sse);
    }
    if (line[0] == ':') {
        return MOON_OK; /* comment (keep-alive) */
    }
    colon     = memchr(line, ':', len);
    name_len  = colon != NULL ? (size_t)(colon - line) : len;
    value     = colon != NULL ? colon + 1 : line + len;
    value_len = len - (size_t)(value - line);
    if (value_len > 0 && value[0] == ' ') {
        value++;
        value_len--;
    }
    if (name_len != 4 || memcmp(line, "data", 4) != 0) {
        return MOON_OK; /* event, id, retry and unknown fields */
    }
    if (sse->has_data) {
        status = append(&sse->data, &sse->data_len, &sse->data_cap, "\n", 1, sse->max_bytes);
        if (status != MOON_OK) {
            return status;
        }
    }
    sse->has_data = 1;
    return append(&sse->data, &sse->data_len, &sse->data_cap, value, value_len, sse->max_bytes);
}

moon_status_t moon_loadgen_sse_feed(moon_loadgen_sse_t *sse, const char *buf, size_t len)
{
    size_t        i = 0;
    moon_status_t status;

    while (i < len) {
        const char *end;
        size_t      n;

        if (sse->after_cr && buf[i] == '\n') { /* the LF of a CRLF split across reads */
            sse->after_cr = 0;
            i++;
            continue;
        }
        sse->after_cr = 0;
        /* the next line end, CR or LF */
        end = NULL;
        for (size_t j = i; j < len; j++) {
            if (buf[j] == '\n' || buf[j] == '\r') {
                end = buf + j;
                break;
            }
        }
        n = end != NULL ? (size_t)(end - (buf + i)) : len - i;
        if (sse->line_len > 0 || end == NULL) {
            status = append(&sse->line, &sse->line_len, &sse->line_cap, buf + i, n, sse->max_bytes);
            if (status != MOON_OK) {
                return status;
            }
        }
        if (end == NULL) {
            return MOON_OK;
        }
        if (sse->line_len > 0) {
            status        = on_line(sse, sse->line, sse->line_len);
            sse->line_len = 0;
        } else {
            status = on_line(sse, buf + i, n);
        }
        if (status != MOON_OK) {
            return status;
        }
        if (*end == '\r') {
            if (end + 1 < buf + len) {
                if (end[1] == '\n') {
                    end++;
                }
            } else {
                sse->after_cr = 1;
            }
        }
        i = (size_t)(end - buf) + 1;
    }
    return MOON_OK;
}

moon_status_t moon_loadgen_sse_finish(moon_loadgen_sse_t *sse)
{
    moon_status_t status = MOON_OK;

    if (sse->line_len > 0) {
        status        = on_line(sse, sse->line, sse->line_len);
        sse->line_len = 0;
    }
    if (status == MOON_OK) {
        status = dispatch(sse);
    }
    return status;
}
