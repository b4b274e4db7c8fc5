/* launch/loadgen/loadgen_sse.h - incremental Server-Sent Events parser (WHATWG
 * "event stream" framing): bytes go in as they arrive, split anywhere, and
 * each complete event's data (its data: lines joined by '\n') comes out
 * through a callback. Comments and fields other than data are skipped; lines
 * end with LF, CRLF or CR. One parser per stream, single-threaded. */
#ifndef MOON_LAUNCH_BENCH_SSE_H
#define MOON_LAUNCH_BENCH_SSE_H

#include "moonlet/status.h"

#include <stddef.h>

/* One event's data, NUL-terminated (len excludes the NUL), borrowed for the
 * call. A non-zero return stops the stream: feed returns MOON_ERR_CANCELED. */
typedef int (*moon_loadgen_sse_fn)(void *arg, const char *data, size_t len);

typedef struct {
    /* private: */
    char               *line, *data;
    size_t              line_len, line_cap, data_len, data_cap, max_bytes;
    int                 has_data, after_cr;
    moon_loadgen_sse_fn fn;
    void               *arg;
} moon_loadgen_sse_t;

/* Starts a parser calling fn(arg, ...) per event. An event or line over
 * max_bytes (0: 16 MiB) is an error. Nothing is allocated until bytes come. */
void moon_loadgen_sse_init(moon_loadgen_sse_t *sse, size_t max_bytes, moon_loadgen_sse_fn fn,
                           void *arg);

/* Parses len more bytes. MOON_ERR_NO_MEMORY, MOON_ERR_INVALID_PARAM (a line
 * or event over max_bytes) or MOON_ERR_CANCELED (the callback said stop):
 * the stream is then unusable except for fini. */
moon_status_t moon_loadgen_sse_feed(moon_loadgen_sse_t *sse, const char *buf, size_t len);

/* End of stream: an event whose blank line never came is dispatched (servers
 * that close right after the last data line). Same errors as feed. */
moon_status_t moon_loadgen_sse_finish(moon_loadgen_sse_t *sse);

/* Frees the buffers; the parser can be init'ed again. */
void moon_loadgen_sse_fini(moon_loadgen_sse_t *sse);

#endif /* MOON_LAUNCH_BENCH_SSE_H */
