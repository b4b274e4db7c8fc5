/* launch/loadgen/loadgen_opts.h - the options of `moonlet bench`: a configuration
 * table (moonlet/config.h; flags only, no environment) plus vLLM's `bench
 * serve` spellings as aliases, and the workload positional. Strict: an
 * unknown flag, a missing value or a malformed or out-of-range number is an
 * error naming the flag. Single-threaded; the options struct owns nothing
 * (strings point into argv or into the table's defaults). */
#ifndef MOON_LAUNCH_BENCH_OPTS_H
#define MOON_LAUNCH_BENCH_OPTS_H

#include "moonlet/config.h"
#include "moonlet/status.h"

#include <stdint.h>
#include <stdio.h>

typedef enum {
    MOON_LOADGEN_WL_RANDOM = 0,    /* random prompts of given length ranges */
    MOON_LOADGEN_WL_SHARED_PREFIX, /* multi-turn chats over a few long system prompts */
    MOON_LOADGEN_WL_TRACE,         /* Mooncake JSONL trace replay */
} moon_loadgen_workload_kind_t;

typedef enum {
    MOON_LOADGEN_FMT_AUTO = 0, /* tokens for completions, words for chat */
    MOON_LOADGEN_FMT_TOKENS,   /* token-id arrays */
    MOON_LOADGEN_FMT_WORDS,    /* text of words from a fixed list */
} moon_loadgen_format_t;

typedef struct {
    /* positional: the workload and, for trace, its file */
    moon_loadgen_workload_kind_t workload;
    const char                  *trace_path;

    /* server */
    const char *base_url;  /* http://127.0.0.1:8000 */
    const char *endpoint;  /* "completions", "chat" or a path starting with '/' */
    const char *model;     /* NULL: the first id of GET /v1/models */
    const char *api_key;   /* NULL: no Authorization header */
    double      timeout_s; /* per request; 0: none */

    /* arrivals */
    uint32_t num_prompts;     /* 0 with trace: every record */
    double   rate;            /* requests/s; 0 = infinity: all at once */
    double   burstiness;      /* Gamma shape; 1 = Poisson */
    uint32_t max_concurrency; /* 0: unbounded */
    uint64_t seed;
    double   time_scale; /* trace: send at timestamp * time_scale */

    /* prompts */
    int      prompt_format; /* moon_loadgen_format_t */
    uint32_t vocab;         /* token ids drawn from 3..vocab-1 */
    uint32_t input_len, output_len;
    double   range_ratio; /* lengths uniform in len*(1-r) .. len*(1+r) */
    uint32_t num_prefixes, prefix_len, turns, question_len;
    uint32_t block_scale; /* trace: tokens per 512-token block */
    uint32_t max_context; /* input + output clamp; 0: none */
    int      ignore_eos;  /* ask for exactly max_tokens */
    double   temperature;

    /* service-level objectives; 0: not given */
    double slo_ttft_ms, slo_tpot_ms, slo_e2el_ms;

    /* output */
    const char *result_file; /* NULL: none */
    const char *plot_dir;    /* NULL: none */
    const char *label;       /* free text copied into the result */
    const char *goodput;     /* vLLM's --goodput "ttft:MS tpot:MS e2el:MS", into the slo_* */
    int         progress;    /* progress bar when stderr is a tty */
    int         help;        /* --help was given */
    int         details;     /* ask for "moonlet_details" (placement, server times): set by
                                `moonlet replay`, no flag */
} moon_loadgen_opts_t;

/* The options' tables (flags only): moonlet's names, and vLLM's `bench
 * serve` spellings writing the same fields. Parse over both (their defaults
 * agree), then call moon_loadgen_opts_finish. */
extern const moon_config_table_t moon_loadgen_config_table;
extern const moon_config_table_t moon_loadgen_vllm_table;

/* After a parse over both tables into opts (zeroed before the defaults went
 * in): takes the workload positional (and the trace FILE) from cfg, applies
 * vLLM's --goodput, checks values across options, and gives num_prompts its
 * default. MOON_ERR_INVALID_PARAM with one line naming the flag or
 * positional in err (NUL-terminated, at most err_len bytes). */
moon_status_t moon_loadgen_opts_finish(const moon_config_t *cfg, moon_loadgen_opts_t *opts,
                                       char *err, size_t err_len);

/* Parses `bench` arguments (argv[0] is the subcommand name) into *opts, which
 * it first fills with every default. On an error writes one line naming the
 * flag or positional into err (NUL-terminated, at most err_len bytes) and
 * returns MOON_ERR_INVALID_PARAM; *opts is then partly filled. --help sets
 * opts->help and skips the positional check. Borrowed: opts' strings point
 * into argv, which must outlive opts. */
moon_status_t moon_loadgen_opts_parse(int argc, char **argv, moon_loadgen_opts_t *opts, char *err,
                                      size_t err_len);

/* True when requests go to the chat completions API (endpoint "chat" or a
 * path containing "chat"). */
int moon_loadgen_opts_is_chat(const moon_loadgen_opts_t *opts);

/* True when prompts are token-id arrays (prompt_format, or its default). */
int moon_loadgen_opts_tokens(const moon_loadgen_opts_t *opts);

#endif /* MOON_LAUNCH_BENCH_OPTS_H */
