/* launch/trace/trace.h - Mooncake request traces (FAST'25 format) read into memory.
 *
 * A trace is JSON Lines, one request per line:
 *   {"timestamp": <ms>, "input_length": <n>, "output_length": <m>, "hash_ids": [<id>, ...]}
 * timestamp: arrival in milliseconds from the trace's start (integer, >= 0);
 * input_length: prompt tokens (>= 1); output_length: tokens to generate (>= 1);
 * hash_ids: one id per block of the trace's block size (512 tokens upstream),
 * ceil(input_length / block) of them; each id names its block and every block
 * before it, so equal ids at the same position are a reusable prefix. Unknown
 * keys are ignored; blank lines are skipped; anything else that is off is an
 * error naming the line (1-based). Requests are kept in file order; a
 * timestamp smaller than the previous line's is an error (replay sends in
 * order).
 *
 * Helpers turn a trace request into what a deployment needs: arrival times
 * under a time scale, the request's block keys at the deployment's block
 * size, deterministic prompt tokens (equal ids give equal tokens, so real
 * prefix reuse), and a shrunk trace for small models.
 *
 * Pure C (cJSON); no actors. A loaded trace is immutable and may be read by
 * any number of threads. */
#ifndef MOON_LAUNCH_TRACE_H
#define MOON_LAUNCH_TRACE_H

#include "moonlet/status.h"

#include <stddef.h>
#include <stdint.h>

#define MOON_TRACE_BLOCK_TOKENS 512 /* the block size of the Mooncake traces */

typedef struct {
    uint64_t        timestamp_ms;  /* as in the file */
    uint32_t        input_length;  /* prompt tokens */
    uint32_t        output_length; /* tokens to generate */
    uint32_t        n_hash_ids;
    const uint64_t *hash_ids; /* (n_hash_ids), owned by the trace */
    uint32_t        line;     /* 1-based line of the file it came from */
} moon_trace_req_t;

typedef struct {
    moon_trace_req_t *reqs; /* (n_reqs) in file order */
    size_t            n_reqs;
    uint32_t          block_tokens; /* tokens per hash id (512 unless shrunk) */
    /* private: */
    uint64_t *ids; /* every request's hash ids, back to back */
    size_t    n_ids;
} moon_trace_t;

typedef struct {
    uint32_t block_tokens; /* tokens per hash id in the file; 0: 512 */
    size_t   max_reqs;     /* stop after this many requests; 0: all */
} moon_trace_opts_t;

/* Where and why a load failed (line 0: not about one line, e.g. I/O). */
typedef struct {
    uint32_t line;
    char     msg[200];
} moon_trace_error_t;

/* Reads a trace file (opts may be NULL: defaults). err_p (may be NULL) gets
 * the first error; it is also logged once. *trace_p is set on success only;
 * the caller frees it with moon_trace_destroy.
 * MOON_ERR_NOT_FOUND / MOON_ERR_IO: the file; MOON_ERR_CORRUPT: a bad line;
 * MOON_ERR_INVALID_PARAM: bad arguments or an empty trace;
 * MOON_ERR_NO_MEMORY. */
moon_status_t moon_trace_load(const char *path, const moon_trace_opts_t *opts,
                              moon_trace_t **trace_p, moon_trace_error_t *err_p);
/* The same from text in memory (text[0..len), need not end in a NUL). */
moon_status_t moon_trace_parse(const char *text, size_t len, const moon_trace_opts_t *opts,
                               moon_trace_t **trace_p, moon_trace_error_t *err_p);
void          moon_trace_destroy(moon_trace_t *trace); /* NULL: no-op */

/* Arrival of a request in nanoseconds: timestamp_ms * time_scale (a scale of
 * 0.5 replays twice as fast, 2 half as fast). Rounded to the nearest ns;
 * time_scale must be > 0. */
uint64_t moon_trace_arrival_ns(const moon_trace_req_t *req, double time_scale);
/* Requests per second of the trace at a time scale (0 for one request or a
 * zero span). */
double moon_trace_rate_rps(const moon_trace_t *trace, double time_scale);

/* Number of full blocks of block_tokens in the request's prompt. */
uint32_t moon_trace_n_blocks(const moon_trace_req_t *req, uint32_t block_tokens);
/* The request's block keys at a deployment block size (any size >= 1): key k
 * names the prompt's first (k + 1) * block_tokens tokens, computed from the
 * trace id of the block holding its last token and the offset in it, so two
 * requests get equal key k exactly when their trace ids say the prefixes are
 * equal. Writes min(n_blocks, max_keys) keys, *n_keys_p gets that count.
 * trace_block_tokens is the trace's block size (trace->block_tokens). */
void moon_trace_block_keys(const moon_trace_req_t *req, uint32_t trace_block_tokens,
                           uint32_t block_tokens, uint64_t *keys, uint32_t max_keys,
                           uint32_t *n_keys_p);
/* Fills tokens[0..input_length) with deterministic prompt token ids in
 * [first_id, vocab_size): token j of trace block i depends only on
 * hash_ids[i] and j, so equal prefixes give equal tokens. seed mixes in (0 is
 * fine). MOON_ERR_INVALID_PARAM if first_id >= vocab_size. */
moon_status_t moon_trace_fill_tokens(const moon_trace_req_t *req, uint32_t trace_block_tokens,
                                     uint32_t first_id, uint32_t vocab_size, uint64_t seed,
                                     int32_t *tokens);

/* Shrinks a trace for a small model: every trace block becomes new_block
 * tokens (lengths scale by new_block / trace->block_tokens, rounded up, the
 * last block keeping its share), input lengths are capped at max_input (0:
 * no cap, dropping the ids past it) and output lengths at max_output (0: no
 * cap); arrivals unchanged. Makes a new trace (*out_p, on success only).
 * MOON_ERR_INVALID_PARAM: new_block 0 or larger than the trace's block. */
moon_status_t moon_trace_shrink(const moon_trace_t *trace, uint32_t new_block, uint32_t max_input,
                                uint32_t max_output, moon_trace_t **out_p);

/* The bench client's scaling (moonlet bench trace --block-scale N
 * --max-context C), so a replay in the simulator and one against a real
 * cluster send the same lengths: every length (input and output) becomes
 * ceil(len * N / trace->block_tokens), at least 1, the trace's blocks N
 * tokens; then, when max_context >= 2, output <= max_context - 1 and input
 * <= max_context - output (dropping the ids past the input). Arrivals
 * unchanged. MOON_ERR_INVALID_PARAM: N 0 or larger than the trace's block. */
moon_status_t moon_trace_scale(const moon_trace_t *trace, uint32_t block_scale,
                               uint32_t max_context, moon_trace_t **out_p);

#endif /* MOON_LAUNCH_TRACE_H */
