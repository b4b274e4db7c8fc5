/* actors/gateway/gw_http.h - the gateway's HTTP server (libmicrohttpd, an internal
 * polling thread or a pool of them): routes, API key, body limit and
 * timeouts, OpenAI parsing, and the per-connection state machine that
 * submits through the bridge, parks (suspends) the connection and writes the
 * answer or the SSE stream as events are resumed into it.
 *
 *   read body -> parse/prepare (400/404) -> submit -> park
 *   first event: TOKEN (or a normal DONE) -> 200 (JSON at DONE, or SSE as they come);
 *                DONE rejected/error -> 429/400/503/500 with the error object
 * A connection closed before its DONE was read cancels its request; one
 * whose client hangs up while it is parked (queued, or between tokens) is
 * resumed at once by the hang-up watcher (gw_hangup.h) and closes.
 * TTFT and end-to-end latency go to the metrics from here, when the text
 * leaves for the socket (the client's definitions).
 * Threading: the server's own threads and the watcher's; the actor only
 * wakes connections through the bridge. */
#ifndef MOON_ACTORS_GW_HTTP_H
#define MOON_ACTORS_GW_HTTP_H

#include "gateway.h"
#include "gw_admin.h"
#include "gw_batches.h"
#include "gw_bridge.h"
#include "gw_guard.h"
#include "gw_metrics.h"
#include "gw_openai.h"

typedef struct moon_gw_http moon_gw_http_t;

typedef struct {
    moon_gateway_config_t cfg; /* strings borrowed for the server's life */
    moon_runtime_t       *rt;  /* clock */
    moon_gw_bridge_t     *bridge;
    moon_gw_metrics_t    *metrics;
    moon_gw_model_info_t  model;       /* borrowed for the server's life */
    const char           *fingerprint; /* borrowed */
    moon_gw_admin_t      *admin;       /* /v1/admin/weights (borrowed); NULL: off (404) */
    moon_gw_batches_t    *batches;     /* /v1/files, /v1/batches (borrowed); NULL: off (404) */
} moon_gw_http_args_t;

/* Binds and starts serving. MOON_ERR_IO: cannot bind host:port;
 * MOON_ERR_INVALID_PARAM: bad host; MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_http_start(const moon_gw_http_args_t *args, moon_gw_http_t **http_p);
uint16_t      moon_gw_http_port(const moon_gw_http_t *http);
/* Readiness: why_not (static text, e.g. "no decode instance is up") makes
 * /health and generation routes answer 503 saying so; NULL: ready. A new
 * server is not ready ("waiting for the conductor's first report"). Any thread. */
void moon_gw_http_set_ready(moon_gw_http_t *http, const char *why_not);
/* The conductor is gone (1) or back (0): generation routes answer 503. Any thread. */
void moon_gw_http_set_down(moon_gw_http_t *http, int down);
/* The weight version the cluster serves (/v1/models shows it). Any thread. */
void moon_gw_http_set_weight_version(moon_gw_http_t *http, uint64_t version);
/* /health's body while ready (a JSON object, copied, truncated at 1 KiB;
 * NULL: empty). Any thread. */
void moon_gw_http_set_health(moon_gw_http_t *http, const char *json);
/* From now on new requests get 503 (stopping). Any thread. */
void moon_gw_http_quiesce(moon_gw_http_t *http);
/* Requests admitted (past the max_requests check) whose connection has not
 * finished yet. */
uint32_t moon_gw_http_n_busy(const moon_gw_http_t *http);
/* After quiesce: waits until n_busy is 0 (returns 1), a request was
 * submitted since *gen_p (0: *gen_p updated; end it, e.g. with
 * moon_gw_bridge_abort, and call again), or deadline_ns (CLOCK_MONOTONIC)
 * passed (-1). Blocks on a condition, no polling. Start with *gen_p 0. */
int moon_gw_http_wait_idle(moon_gw_http_t *http, uint64_t deadline_ns, uint64_t *gen_p);
/* The connection guard's counters (gw_guard.h). Any thread. */
void moon_gw_http_guard_stats(moon_gw_http_t *http, moon_gw_guard_stats_t *stats);
/* Stops the server (no parked connection may be left: abort the bridge and
 * wait for n_busy 0 first) and frees. NULL: no-op. */
void moon_gw_http_stop(moon_gw_http_t *http);

#endif /* MOON_ACTORS_GW_HTTP_H */
