/* actors/gateway/gw_metrics.h - the gateway's Prometheus registry: counters, gauges
 * and histograms by name and label set, rendered in the text exposition
 * format (version 0.0.4) for GET /metrics.
 *
 * Names follow vLLM's under the `moonlet:` prefix (moon_gw_metrics_declare_serving
 * lists them). The gateway feeds what it sees of each request (TOKEN and DONE
 * events); the rest (KV blocks per tier, live instances per role, store
 * operations) is fed by whoever holds the cluster's load view - the conductor -
 * through moon_gw_metrics_set_gauge, on the same registry the gateway renders.
 *
 * Thread-safe: one mutex guards the registry (updates come from the gateway
 * actor, HTTP threads and the conductor; scrapes from an HTTP thread). Labels
 * are passed preformatted: `finished_reason="stop"` or `tier="decode_pool",x="y"`
 * ("" or NULL for none); the registry's constant labels come first. */
#ifndef MOON_ACTORS_GW_METRICS_H
#define MOON_ACTORS_GW_METRICS_H

#include "moonlet/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct moon_gw_metrics moon_gw_metrics_t;

typedef enum {
    MOON_GW_COUNTER   = 1,
    MOON_GW_GAUGE     = 2,
    MOON_GW_HISTOGRAM = 3,
} moon_gw_metric_kind_t;

/* Metric names the gateway and the conductor share. */
#define MOON_GW_M_TTFT "moonlet:time_to_first_token_seconds"
#define MOON_GW_M_TPOT "moonlet:time_per_output_token_seconds"
#define MOON_GW_M_ITL "moonlet:inter_token_latency_seconds"
#define MOON_GW_M_E2E "moonlet:e2e_request_latency_seconds"
#define MOON_GW_M_QUEUE "moonlet:request_queue_time_seconds"
#define MOON_GW_M_PREFILL "moonlet:request_prefill_time_seconds"
#define MOON_GW_M_TRANSFER "moonlet:kv_transfer_time_seconds"
#define MOON_GW_M_PROMPT_LEN "moonlet:request_prompt_tokens"
#define MOON_GW_M_GEN_LEN "moonlet:request_generation_tokens"
#define MOON_GW_M_RUNNING "moonlet:num_requests_running"
#define MOON_GW_M_WAITING "moonlet:num_requests_waiting"
#define MOON_GW_M_PROMPT_TOKENS "moonlet:prompt_tokens_total"
#define MOON_GW_M_GEN_TOKENS "moonlet:generation_tokens_total"
#define MOON_GW_M_CACHE_QUERIES "moonlet:prefix_cache_queries_total"
#define MOON_GW_M_CACHE_HITS "moonlet:prefix_cache_hits_total"
#define MOON_GW_M_SUCCESS "moonlet:request_success_total"
#define MOON_GW_M_REJECTED "moonlet:early_rejections_total"
#define MOON_GW_M_HTTP "moonlet:http_responses_total"
/* KV blocks and instances: pools and roles from the conductor's STATS, the
 * DRAM tier and store counters from the shards' STATS; the SSD tier must be
 * fed by whoever sees it. Labels: tier="decode_pool|prefill_pool|store_dram|
 * store_ssd", role="prefill|decode|colocated|store", op="put|get|get_miss";
 * the store counters are absolute totals (set, not added). */
#define MOON_GW_M_KV_USED "moonlet:kv_blocks_used"
#define MOON_GW_M_KV_TOTAL "moonlet:kv_blocks_capacity" /* a gauge: no _total suffix */
#define MOON_GW_M_ALIVE "moonlet:instances_alive"
#define MOON_GW_M_STORE_OPS "moonlet:store_operations_total"
#define MOON_GW_M_STORE_EVICT "moonlet:store_evictions_total"
/* From the conductor's STATS: requests placed and not released; prompt
 * tokens whose KV came from the store. */
#define MOON_GW_M_IN_FLIGHT "moonlet:num_requests_in_flight"
#define MOON_GW_M_STORE_HITS "moonlet:prefix_cache_store_hits_total"
/* Declared once it is known (the first token served of a job with a start):
 * seconds from the job's start to that token. */
#define MOON_GW_M_JOB_FIRST_TOKEN "moonlet:job_start_to_first_token_seconds"

/* Creates an empty registry. const_labels (copied; NULL or "" for none), e.g.
 * `model_name="stories260K"`, prefix every series. MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_metrics_create(const char *const_labels, moon_gw_metrics_t **m_p);
void          moon_gw_metrics_destroy(moon_gw_metrics_t *m); /* NULL: no-op */

/* Declares a family (name and help copied). Histograms take their n_bounds
 * upper bounds in increasing order (copied; +Inf is implicit); others pass
 * NULL, 0. Declaring the same name again with the same kind is a no-op;
 * MOON_ERR_EXISTS if it exists with another kind; MOON_ERR_INVALID_PARAM for
 * a bad name, kind or bounds. Families render in declaration order. */
moon_status_t moon_gw_metrics_declare(moon_gw_metrics_t *m, const char *name,
                                      moon_gw_metric_kind_t kind, const char *help,
                                      const double *bounds, uint32_t n_bounds);
/* Declares every family named above, with their help and buckets, and the
 * label sets known in advance at 0 (finish reasons, tiers, roles). */
moon_status_t moon_gw_metrics_declare_serving(moon_gw_metrics_t *m);

/* Counter += delta (delta >= 0) or gauge += delta. Creates the series on first
 * use. MOON_ERR_NOT_FOUND: no such family; MOON_ERR_INVALID_PARAM: a histogram,
 * a negative counter delta or bad labels; MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_metrics_add(moon_gw_metrics_t *m, const char *name, const char *labels,
                                  double delta);
/* Gauge = value. Also accepted for counters that aggregate another rank's
 * running total (the value then replaces the total: feed it only totals that
 * never decrease). The hook the conductor feeds from its load view. Statuses
 * as for add. */
moon_status_t moon_gw_metrics_set_gauge(moon_gw_metrics_t *m, const char *name, const char *labels,
                                        double value);
/* Histogram observation. Statuses as for add (INVALID_PARAM for a non-histogram). */
moon_status_t moon_gw_metrics_observe(moon_gw_metrics_t *m, const char *name, const char *labels,
                                      double value);
/* Current value of a counter or gauge series (a histogram: its count). *v_p
 * gets 0 for a declared family without that series. MOON_ERR_NOT_FOUND: no
 * such family. */
moon_status_t moon_gw_metrics_get(moon_gw_metrics_t *m, const char *name, const char *labels,
                                  double *v_p);

/* Renders everything: `# HELP`, `# TYPE`, then each series (histograms as
 * _bucket{le=...} cumulative, _sum, _count; a family without series shows one
 * zero series). *text_p is NUL-terminated, moon_malloc'd, the caller frees it
 * with moon_free. MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_metrics_render(moon_gw_metrics_t *m, char **text_p, size_t *len_p);

#endif /* MOON_ACTORS_GW_METRICS_H */
