/* launch/loadgen/loadgen_workload.h - the requests `moonlet bench` sends, generated in
 * full before the run from the options and the seed: prompts (token ids, or
 * indices into a fixed word list), output lengths and send times. The same
 * options give byte-identical workloads. Single-threaded; a workload owns all
 * its memory. */
#ifndef MOON_LAUNCH_BENCH_WORKLOAD_H
#define MOON_LAUNCH_BENCH_WORKLOAD_H

#include "loadgen_opts.h"

#include "moonlet/status.h"

#include <stdint.h>

typedef enum {
    MOON_LOADGEN_ROLE_SYSTEM = 0,
    MOON_LOADGEN_ROLE_USER,
    MOON_LOADGEN_ROLE_ASSISTANT,
} moon_loadgen_role_t;

typedef struct {
    uint32_t role;  /* moon_loadgen_role_t */
    uint32_t start; /* first id of this message in the request's ids */
    uint32_t n_ids;
} moon_loadgen_msg_t;

typedef struct {
    double              arrival_s;  /* send time, seconds after the run starts */
    uint32_t            max_tokens; /* output tokens asked for */
    uint32_t            n_ids;      /* prompt length in ids over every message */
    uint32_t            n_msgs;
    uint32_t           *ids;  /* n_ids token ids (3..vocab-1) or word indices, messages in order */
    moon_loadgen_msg_t *msgs; /* n_msgs; completions send their contents concatenated */
} moon_loadgen_req_t;

typedef struct {
    uint32_t            n_reqs;
    int                 words;        /* ids are word indices (moon_loadgen_word), else token ids */
    uint32_t            block_tokens; /* trace: tokens per block after scaling; else 0 */
    moon_loadgen_req_t *reqs;         /* n_reqs, in send order (arrival_s never decreases) */
} moon_loadgen_workload_t;

/* Builds the workload the options describe: random, shared-prefix, or the
 * trace at opts->trace_path (read here). On success *wl_p owns everything;
 * free it with moon_loadgen_workload_destroy. Errors: MOON_ERR_INVALID_PARAM
 * (options that cannot make a workload, e.g. shared-prefix chats longer than
 * --max-context; logged), MOON_ERR_NOT_FOUND / MOON_ERR_IO / MOON_ERR_CORRUPT
 * (trace file), MOON_ERR_NO_MEMORY. Nothing is left allocated on error. */
moon_status_t moon_loadgen_workload_create(const moon_loadgen_opts_t *opts,
                                           moon_loadgen_workload_t  **wl_p);

/* NULL: no-op. */
void moon_loadgen_workload_destroy(moon_loadgen_workload_t *wl);

/* Allocates an empty workload of n requests (all fields zero): the building
 * block of every generator. NULL when out of memory. */
moon_loadgen_workload_t *moon_loadgen_workload_alloc(uint32_t n_reqs);

/* Gives req room for n_ids ids and n_msgs messages (zeroed). MOON_ERR_NO_MEMORY
 * leaves req unchanged. */
moon_status_t moon_loadgen_req_alloc(moon_loadgen_req_t *req, uint32_t n_ids, uint32_t n_msgs);

/* Fills times[0..n) with send times: 0, then cumulative Gamma(burstiness,
 * 1/(rate*burstiness)) gaps (mean 1/rate); rate 0 sends everything at 0.
 * Deterministic in seed (its own stream, apart from the prompts'). */
void moon_loadgen_arrivals(double rate, double burstiness, uint64_t seed, uint32_t n,
                           double *times);

/* Clamps a request to a context: output to at most max_context - 1, then
 * input to at most max_context - output. max_context 0 leaves both. Output
 * is at least 1 and input at least 1. */
void moon_loadgen_clamp(uint32_t max_context, uint32_t *n_in, uint32_t *n_out);

/* The word list of the words prompt format: word i (i < moon_loadgen_n_words()). */
uint32_t    moon_loadgen_n_words(void);
const char *moon_loadgen_word(uint32_t i);

#endif /* MOON_LAUNCH_BENCH_WORKLOAD_H */
