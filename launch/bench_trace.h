/* launch/bench_trace.h - the trace workload of `moonlet bench`: a Mooncake
 * JSONL trace becomes requests whose prompts are built block by block, every
 * hash id naming one fixed block of ids, so equal hash ids give equal blocks
 * and the trace's prefix reuse is reuse on the server. --block-scale shrinks
 * the trace's 512-token blocks (and every length alike) for small contexts.
 * Single-threaded. */
#ifndef MOON_LAUNCH_BENCH_TRACE_H
#define MOON_LAUNCH_BENCH_TRACE_H

#include "bench_opts.h"
#include "bench_workload.h"

#include "moonlet/status.h"

#include <stdint.h>

#define MOON_BENCH_TRACE_BLOCK 512 /* tokens per hash id in Mooncake traces */

/* A trace length scaled to block_tokens per 512: ceil(len * bt / 512), at
 * least 1. */
uint32_t moon_bench_trace_scale(uint32_t len, uint32_t block_tokens);

/* Id j (0 <= j) of the block named by hash_id: a pure function of (seed,
 * hash_id, j), in lo .. lo+span-1 (span >= 1). */
uint32_t moon_bench_block_id(uint64_t seed, uint64_t hash_id, uint32_t j, uint32_t lo,
                             uint32_t span);

/* Reads opts->trace_path (its first opts->num_prompts records; 0: all) and
 * builds the workload: request i sends at (timestamp_i - timestamp_0) / 1000
 * x opts->time_scale seconds, with scaled lengths clamped to --max-context
 * (moon_bench_clamp) and prompt ids from its hash ids' blocks (positions past
 * the hash ids get ids of the request's own). Errors: MOON_ERR_NOT_FOUND /
 * MOON_ERR_IO (file), MOON_ERR_CORRUPT (a malformed line, logged with its
 * number), MOON_ERR_INVALID_PARAM (an empty trace), MOON_ERR_NO_MEMORY. */
moon_status_t moon_bench_trace_workload(const moon_bench_opts_t *opts,
                                        moon_bench_workload_t  **wl_p);

#endif /* MOON_LAUNCH_BENCH_TRACE_H */
