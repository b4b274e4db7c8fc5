/* launch/loadgen/loadgen_stats.h - per-request timelines of a `moonlet bench` run and
 * the serving metrics computed from them with `vllm bench serve`'s
 * definitions (MOONCAKE.md, "Serving metrics"): TTFT = first streamed token
 * - send; E2EL = last - send; TPOT = (E2EL - TTFT) / (N_out - 1) over
 * requests with N_out > 1; ITL = every gap between streamed chunks; request,
 * output and total token throughput per second of wall time; goodput =
 * requests meeting every given SLO per second; SLO attainment = their share
 * of completed requests. Percentiles interpolate linearly between order
 * statistics (numpy's default); std is the population deviation. Pure
 * functions; single-threaded. */
#ifndef MOON_LAUNCH_BENCH_STATS_H
#define MOON_LAUNCH_BENCH_STATS_H

#include "moonlet/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int      ok;          /* completed: HTTP 200, stream ended, no error chunk */
    double   send_s;      /* when it was sent, seconds after the run start */
    double   ttft_s;      /* first chunk with text - send */
    double   e2el_s;      /* last chunk (or end of stream) - send */
    uint32_t n_in;        /* prompt tokens: the server's usage, else ids sent */
    uint32_t n_out;       /* output tokens: usage.completion_tokens, else text chunks */
    uint32_t n_cached;    /* prompt tokens the server's prefix cache served (usage), or 0 */
    int      has_details; /* the server said where it ran (below) */
    int32_t  prefill_instance, decode_instance; /* usage.moonlet_details; -1: not placed */
    double   queue_s;                           /* the server's queue time */
    uint32_t n_chunks;                          /* chunks with text */
    uint32_t n_itl;                             /* n_chunks - 1 gaps in itl_s */
    double  *itl_s;                             /* gaps between text chunks; owned (moon_free) */
    int      http_status;
    char     error[192]; /* why it failed; "" when ok */
} moon_loadgen_result_t;

/* Frees the results' ITL arrays (not the array itself). */
void moon_loadgen_results_fini(moon_loadgen_result_t *results, uint32_t n);

typedef struct {
    uint32_t n;
    double   mean, median, p90, p99, std, min, max; /* milliseconds; 0 when n == 0 */
} moon_loadgen_dist_t;

typedef struct {
    double slo_ttft_ms, slo_tpot_ms, slo_e2el_ms; /* 0: not given */
} moon_loadgen_slo_t;

typedef struct {
    uint32_t            completed, failed;
    uint64_t            total_input, total_output;
    uint64_t            total_cached; /* prompt tokens served from the prefix cache (usage) */
    double              duration_s;
    double              request_throughput, output_throughput, total_token_throughput;
    int                 has_slo;                /* some SLO given: the next three mean something */
    uint32_t            good;                   /* completed requests within every SLO */
    double              request_goodput;        /* good / duration */
    double              slo_attainment;         /* good / completed (0 when none completed) */
    double              peak_output_throughput; /* tokens/s of the busiest 1 s bucket */
    uint32_t            peak_concurrency;       /* most requests in flight at once */
    moon_loadgen_dist_t ttft, tpot, itl, e2el;
} moon_loadgen_stats_t;

/* The linear-interpolation percentile p (0..100) of sorted[0..n); 0 if n = 0. */
double moon_loadgen_percentile(const double *sorted, size_t n, double p);

/* Summary of x[0..n) in seconds, reported in milliseconds. Sorts x in place. */
void moon_loadgen_dist(double *x, size_t n, moon_loadgen_dist_t *dist);

/* The TPOT of one completed request, in seconds: (e2el - ttft) / (n_out - 1),
 * 0 when n_out <= 1 (vLLM's value for its goodput check). */
double moon_loadgen_tpot(const moon_loadgen_result_t *r);

/* Computes every metric of n results over duration_s seconds of wall time.
 * MOON_ERR_NO_MEMORY leaves *stats zeroed. */
moon_status_t moon_loadgen_stats_compute(const moon_loadgen_result_t *results, uint32_t n,
                                         double duration_s, const moon_loadgen_slo_t *slo,
                                         moon_loadgen_stats_t *stats);

/* Output tokens/s over time in buckets of bucket_s seconds from the run
 * start: fills rate[0..n_buckets) (tokens of completed requests, spread over
 * their text chunks at the chunks' times). */
void moon_loadgen_throughput_series(const moon_loadgen_result_t *results, uint32_t n,
                                    double bucket_s, double *rate, uint32_t n_buckets);

#endif /* MOON_LAUNCH_BENCH_STATS_H */
