/* launch/loadgen/loadgen_report.h - what `moonlet bench` hands back: the human summary
 * in `vllm bench serve`'s layout, and the JSON result file (vLLM's keys, plus
 * p90, SLO attainment and the run's parameters). Single-threaded. */
#ifndef MOON_LAUNCH_BENCH_REPORT_H
#define MOON_LAUNCH_BENCH_REPORT_H

#include "loadgen_opts.h"
#include "loadgen_stats.h"

#include "moonlet/status.h"

#include <stdio.h>

/* Prints the summary of stats to f. */
void moon_loadgen_report_print(FILE *f, const moon_loadgen_opts_t *opts, const char *model,
                               const moon_loadgen_stats_t *stats);

/* The JSON result: one object, vLLM's `bench serve --save-result` keys where
 * they exist (times in ms unless named _s or per-request seconds):
 *   date, backend ("openai"), model_id, workload, trace (path|null), base_url,
 *   endpoint, label (|null), num_prompts, request_rate (number|"inf"),
 *   burstiness, max_concurrency (|null), seed, duration (s), completed,
 *   failed, total_input_tokens, total_output_tokens, total_cached_tokens
 *   (usage.prompt_tokens_details.cached_tokens summed), request_throughput,
 *   request_goodput, good_completed, slo_attainment (null without an SLO),
 *   slo_ttft_ms, slo_tpot_ms, slo_e2el_ms (0: none), output_throughput,
 *   total_token_throughput, max_output_tokens_per_s, max_concurrent_requests,
 *   {mean,median,std,p90,p99,min,max}_{ttft,tpot,itl,e2el}_ms,
 *   per request (arrays in send order): input_lens, output_lens, ttfts (s),
 *   itls (array of s per request), e2els (s), send_times (s), errors ("" ok).
 * Returned as a NUL-terminated string (caller frees with moon_free):
 * the parameters, every metric of stats, and per-request arrays of the n
 * results. MOON_ERR_NO_MEMORY. */
moon_status_t moon_loadgen_report_json(const moon_loadgen_opts_t *opts, const char *model,
                                       const moon_loadgen_stats_t  *stats,
                                       const moon_loadgen_result_t *results, uint32_t n,
                                       char **json_p);

/* Writes moon_loadgen_report_json's text to path. MOON_ERR_IO (logged). */
moon_status_t moon_loadgen_report_write(const char *path, const moon_loadgen_opts_t *opts,
                                        const char *model, const moon_loadgen_stats_t *stats,
                                        const moon_loadgen_result_t *results, uint32_t n);

#endif /* MOON_LAUNCH_BENCH_REPORT_H */
