/* launch/loadgen/loadgen_http.h - the HTTP side of `moonlet bench`: one libcurl multi
 * handle drives every request of a workload from one thread, sending each at
 * its arrival time (and no more than --max-concurrency at once), parsing the
 * SSE stream as it arrives and stamping each chunk on the monotonic clock.
 * Single-threaded; libcurl's global init is done by the caller
 * (curl_global_init) before any of these. */
#ifndef MOON_LAUNCH_BENCH_HTTP_H
#define MOON_LAUNCH_BENCH_HTTP_H

#include "loadgen_opts.h"
#include "loadgen_stats.h"
#include "loadgen_workload.h"

#include "moonlet/status.h"

/* The URL of path (starting with '/', e.g. "/v1/models") on the server at
 * base_url: base_url without a trailing '/' or "/v1" (vLLM's --base-url is the
 * server root, OpenAI clients' ends in /v1: both work), then path. Writes at
 * most len bytes; MOON_ERR_INVALID_PARAM when it does not fit. */
moon_status_t moon_loadgen_http_url(const char *base_url, const char *path, char *url, size_t len);

/* Asks GET /v1/models for the first model id. *model_p is the caller's
 * (moon_free). Errors: MOON_ERR_PEER_LOST (no connection), MOON_ERR_PEER_REJECTED
 * (an HTTP error or a body without a model; logged), MOON_ERR_NO_MEMORY. */
moon_status_t moon_loadgen_http_first_model(const moon_loadgen_opts_t *opts, char **model_p);

/* Sends every request of wl to the endpoint opts names, with model as the
 * model id, and fills results[0..wl->n_reqs) (zeroed first; their ITL arrays
 * are the caller's: moon_loadgen_results_fini). *duration_p is the wall time
 * from the first send to the last completion. A failed request is a result
 * with ok = 0 and its error, not a failed run. Errors: MOON_ERR_NO_MEMORY,
 * MOON_ERR_IO (libcurl could not set up; logged). */
moon_status_t moon_loadgen_http_run(const moon_loadgen_opts_t *opts, const char *model,
                                    const moon_loadgen_workload_t *wl,
                                    moon_loadgen_result_t *results, double *duration_p);

#endif /* MOON_LAUNCH_BENCH_HTTP_H */
