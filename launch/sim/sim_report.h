/* launch/sim/sim_report.h - per-request records of a replay and what is made of
 * them: the per-request CSV, summary.json, and the series the plots draw
 * (sim_plot.h). Used by the simulator's driver and by a replay against a real
 * cluster alike: times are nanoseconds on one clock (virtual or wall), from
 * the trace's start.
 *
 * Definitions (as Mooncake's paper and vLLM's benchmark use them):
 *   TTFT   first token - arrival;
 *   TBT    the mean of the slowest 10 % of the request's inter-token gaps
 *          (the ceil(n_gaps / 10) largest; 0 for a single-token answer);
 *   queue  prefill start - arrival;
 *   a request meets the SLO when it completed with TTFT <= ttft_slo and
 *          TBT <= tbt_slo;
 *   slo_attainment  met / requests (rejected and failed requests count as
 *          missed, so rejecting is never rewarded);
 *   goodput_rps     met / makespan (first arrival to last finish, seconds);
 *   cache_hit_ratio prefix-hit tokens / prompt tokens over placed requests;
 *   percentiles     nearest rank over completed requests: the
 *          ceil(p / 100 * n)-th smallest.
 * SLO checks compare integer nanoseconds (the SLOs rounded to the ns).
 * Single-threaded. */
#ifndef MOON_LAUNCH_SIM_REPORT_H
#define MOON_LAUNCH_SIM_REPORT_H

#include "moonlet/status.h"

#include <stdint.h>
#include <stdio.h>

typedef enum {
    MOON_SIM_REQ_PENDING  = 0, /* not finished (yet) */
    MOON_SIM_REQ_OK       = 1, /* completed */
    MOON_SIM_REQ_REJECTED = 2, /* rejected early (SLO) */
    MOON_SIM_REQ_ERROR    = 3, /* failed */
} moon_sim_req_status_t;

typedef struct {
    uint64_t              arrival_ns;
    int32_t               prefill; /* instance index; -1: not placed */
    int32_t               decode;  /* instance index (colocated: = prefill); -1 */
    uint32_t              input_tokens;
    uint32_t              output_tokens;     /* tokens streamed */
    uint32_t              prefix_hit_tokens; /* prompt tokens reused from a cache */
    uint64_t              prefill_start_ns;  /* UINT64_MAX: not started */
    uint64_t              first_token_ns;    /* 0: none */
    uint64_t              finish_ns;         /* 0: not finished */
    uint64_t              tbt_ns;            /* set when it finishes (mean rounded to the ns) */
    moon_sim_req_status_t status;
    /* the instances' own account, from DONE (not in the CSV; the in-service
     * calibration reads it): arrival at the conductor to the decode taking
     * the first token (0: none) */
    uint64_t decode_ttft_ns;
    /* private: the request's token times while it streams */
    uint64_t  last_token_ns;
    uint64_t *gaps_ns;
    uint32_t  n_gaps, cap_gaps;
} moon_sim_record_t;

typedef struct {
    moon_sim_record_t *recs; /* (n) indexed by request id = trace index */
    uint32_t           n;
    uint32_t           n_after_end; /* events for a request that had already ended */
} moon_sim_records_t;

typedef struct {
    double   ttft_slo_s, tbt_slo_s;
    uint64_t requests, completed, rejected, errors, met;
    double   slo_attainment, goodput_rps, cache_hit_ratio, makespan_s;
    double   ttft_mean_s, ttft_p50_s, ttft_p90_s, ttft_p99_s;
    double   tbt_mean_s, tbt_p50_s, tbt_p90_s, tbt_p99_s;
} moon_sim_summary_t;

/* n records, every one pending and unplaced. MOON_ERR_NO_MEMORY. */
moon_status_t moon_sim_records_init(moon_sim_records_t *r, uint32_t n);
void          moon_sim_records_fini(moon_sim_records_t *r);

/* Events, in time order per request (out-of-range ids and events after the
 * finish return MOON_ERR_INVALID_PARAM and change nothing). */
moon_status_t moon_sim_records_arrive(moon_sim_records_t *r, uint32_t id, uint64_t t_ns,
                                      uint32_t input_tokens);
moon_status_t moon_sim_records_place(moon_sim_records_t *r, uint32_t id, int32_t prefill,
                                     int32_t decode, uint32_t prefix_hit_tokens);
moon_status_t moon_sim_records_prefill_start(moon_sim_records_t *r, uint32_t id, uint64_t t_ns);
/* The instances' account of the request (DONE's ttft_ns). */
moon_status_t moon_sim_records_service(moon_sim_records_t *r, uint32_t id, uint64_t decode_ttft_ns);
/* One streamed token at t_ns (MOON_ERR_NO_MEMORY: no room for its gap). */
moon_status_t moon_sim_records_token(moon_sim_records_t *r, uint32_t id, uint64_t t_ns);
/* The end: status OK, REJECTED or ERROR; computes TBT and frees the gaps. */
moon_status_t moon_sim_records_finish(moon_sim_records_t *r, uint32_t id, uint64_t t_ns,
                                      moon_sim_req_status_t status);

/* TBT of one request's gaps in ns (the mean rounded to the nearest ns;
 * gaps reordered in place). */
uint64_t moon_sim_tbt_ns(uint64_t *gaps_ns, uint32_t n_gaps);

/* The CSV, one header line and one line per request in id order:
 *   id,arrival_s,prefill,decode,input_tokens,output_tokens,prefix_hit_tokens,
 *   queue_s,ttft_s,tbt_s,finish_s,status
 * times in seconds with 9 decimals (exact from ns), an empty
 * field where there is none (queue_s of an unplaced request...). Equal
 * records give equal bytes. MOON_ERR_IO. */
moon_status_t moon_sim_records_write_csv(const moon_sim_records_t *r, FILE *f);

moon_status_t moon_sim_summarize(const moon_sim_records_t *r, double ttft_slo_s, double tbt_slo_s,
                                 moon_sim_summary_t *s_p);
/* summary.json: the summary's fields (slo_attainment, goodput_rps,
 * cache_hit_ratio, ttft_mean_s, ttft_p90_s, ttft_p99_s, tbt_mean_s,
 * tbt_p90_s, tbt_p99_s, requests, rejected and the rest) plus label (e.g.
 * the policy; may be NULL). Deterministic text. MOON_ERR_IO. */
moon_status_t moon_sim_summary_write_json(const moon_sim_summary_t *s, const char *label, FILE *f);

/* Series for plots (sorted values of completed requests, nearest rank):
 * the CDF points "value fraction" per line; the share of all requests meeting
 * TTFT <= ttft_slo_s and TBT <= x for x in tbt_from_s..tbt_to_s by step
 * ("x_ms share"); the cache hit ratio per arrival window of window_s
 * ("window_end_s ratio", windows without placed requests skipped). */
typedef enum { MOON_SIM_SERIES_TTFT = 0, MOON_SIM_SERIES_TBT = 1 } moon_sim_series_t;
moon_status_t moon_sim_write_cdf(const moon_sim_records_t *r, moon_sim_series_t which, FILE *f);
moon_status_t moon_sim_write_slo_curve(const moon_sim_records_t *r, double ttft_slo_s,
                                       double tbt_from_s, double tbt_to_s, double step_s, FILE *f);
moon_status_t moon_sim_write_hit_series(const moon_sim_records_t *r, double window_s, FILE *f);

#endif /* MOON_LAUNCH_SIM_REPORT_H */
