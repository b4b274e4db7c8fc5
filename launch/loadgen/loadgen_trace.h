/* launch/loadgen/loadgen_trace.h - the trace workload of `moonlet bench`: a Mooncake
 * JSONL trace becomes requests whose prompts are built block by block, every
 * hash id naming one fixed block of ids, so equal hash ids give equal blocks
 * and the trace's prefix reuse is reuse on the server (the tokens are the
 * trace reader's, trace.h). --block-scale shrinks the trace's 512-token
 * blocks (and every length alike) for small contexts.
 * Single-threaded. */
#ifndef MOON_LAUNCH_BENCH_TRACE_H
#define MOON_LAUNCH_BENCH_TRACE_H

#include "loadgen_opts.h"
#include "loadgen_workload.h"

#include "moonlet/status.h"

#include <stdint.h>

#define MOON_LOADGEN_TRACE_BLOCK 512 /* tokens per hash id in Mooncake traces */

/* A trace length scaled to block_tokens per 512: ceil(len * bt / 512), at
 * least 1. */
uint32_t moon_loadgen_trace_scale(uint32_t len, uint32_t block_tokens);

/* Reads opts->trace_path with the trace reader (trace.h; its first
 * opts->num_prompts records, 0: all), shrinks it to opts->block_scale tokens
 * per block (moon_trace_shrink) and builds the workload: request i sends at
 * (timestamp_i - timestamp_0) / 1000 x opts->time_scale seconds; its output
 * length scales like the blocks (moon_loadgen_trace_scale); both are clamped
 * to --max-context (moon_loadgen_clamp, the prompt keeping its first ids); its
 * prompt is moon_trace_fill_tokens' (token ids 3..vocab-1, or word indices),
 * so equal hash ids give equal blocks. Errors (the reader logs them with the
 * line): MOON_ERR_NOT_FOUND / MOON_ERR_IO (file), MOON_ERR_CORRUPT (a bad
 * line), MOON_ERR_INVALID_PARAM (an empty trace), MOON_ERR_NO_MEMORY. */
moon_status_t moon_loadgen_trace_workload(const moon_loadgen_opts_t *opts,
                                          moon_loadgen_workload_t  **wl_p);

#endif /* MOON_LAUNCH_BENCH_TRACE_H */
