/* actors/gateway/gateway.h - the OpenAI-compatible HTTP gateway, an actor on rank 0.
 *
 * Spawn it with moon_gateway_ops and a moon_gateway_args_t: its init opens the
 * model file (tokenizer, context length, chat template), starts the HTTP
 * server (libmicrohttpd, its own threads) and fails the spawn if the port
 * cannot be bound. Routes: POST /v1/completions, POST /v1/chat/completions
 * (stream or not), GET /v1/models[/{id}], GET /health, GET /metrics,
 * with an admin key GET and POST /v1/admin/weights (gw_admin.h), and with a
 * batch service (args.batches) /v1/files and /v1/batches (gw_batches.h).
 *
 * Each request goes to the conductor as a SUBMIT with reply_to = the gateway;
 * TOKEN and DONE come back to the gateway, which streams them to the client
 * (gw_bridge.h). A client that disconnects cancels its request. The gateway
 * monitors the conductor: when it goes, requests in flight fail (503) and
 * every new one gets 503.
 *
 * Every stats_interval_ms the gateway asks the conductor for its STATS and
 * sets the gauges of instances up per role and the readiness (/health 200
 * and requests served once the roles of wait_roles have one), requests running
 * and waiting, and KV blocks used per pool. Gauges it cannot see (store
 * DRAM and SSD tiers) take moon_gw_metrics_set_gauge on a registry passed in
 * args.metrics. */
#ifndef MOON_ACTORS_GATEWAY_H
#define MOON_ACTORS_GATEWAY_H

#include "gw_batches.h"
#include "gw_metrics.h"
#include "moonlet/actor.h"
#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/weights_client.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The gateway's options: one row each in moon_gateway_config_table
 * (flags --host ..., variables MOON_GATEWAY_HOST ...). Strings are borrowed. */
typedef struct {
    const char *host;          /* --host 127.0.0.1: bind address (IPv4, IPv6 or a name) */
    uint32_t    port;          /* --port 8000; 0: any free port (see port_p) */
    const char *model_name;    /* --model-name: the id /v1/models lists and requests
                                  must name; NULL: the model file's stem */
    const char *api_key;       /* --api-key: /v1/... need "Authorization: Bearer KEY";
                                  NULL: no auth */
    uint64_t body_limit_bytes; /* --body-limit 4m: larger bodies get 413 */
    /* deadlines (0: none) */
    uint32_t header_timeout_s;       /* --header-timeout 10: the request line and headers must
                                        arrive within this of the connection opening or its
                                        previous request ending (an idle keep-alive connection
                                        is closed after it too) */
    uint32_t body_timeout_s;         /* --body-timeout 60: the body must arrive within this of
                                        the headers */
    uint32_t idle_timeout_s;         /* --idle-timeout 30: read: a connection silent this long
                                        (a half-sent request) is closed */
    uint32_t write_timeout_s;        /* --write-timeout 30: an answer the client does not read
                                        for this long is dropped */
    uint32_t http_threads;           /* --http-threads 2: libmicrohttpd's thread pool */
    uint32_t max_connections;        /* --max-connections 1024 */
    uint32_t max_connections_per_ip; /* --max-connections-per-ip 256; 0: no limit */
    uint32_t max_requests;           /* --max-requests 512: requests served at once (read,
                                        submitted, not answered); more get 429 + Retry-After;
                                        0: no limit */
    uint32_t max_inflight;           /* --max-inflight 4096: requests on their way to the
                                        gateway actor at once (more: 429) */
    uint32_t stats_interval_ms;      /* --stats-interval 500: how often the gateway asks the
                                        conductor for its counters (gauges, readiness) */
    uint32_t request_deadline_s;     /* --request-deadline 300: a request still running this
                                        long after its arrival ends with an error and is
                                        cancelled (its slot and gauges freed); 0: never */
    uint32_t max_resumes;            /* --resumes 3: times a request whose instance was lost
                                        is submitted again with the tokens it got (its
                                        stream goes on); 0: it fails with the loss */
    const char *admin_key;           /* --admin-key: /v1/admin/weights needs "Authorization:
                                        Bearer KEY"; NULL: the admin route is off */
    const char *allowed_origins;     /* --allowed-origins: browser origins answered with CORS
                                        headers (comma-separated exact origins, or "*");
                                        NULL: none (gw_cors.h) */
} moon_gateway_config_t;

MOON_API extern const moon_config_table_t moon_gateway_config_table;

/* The table's defaults, then MOON_GATEWAY_* variables for fields still at
 * their default. MOON_ERR_INVALID_PARAM: a malformed variable (logged). */
MOON_API moon_status_t moon_gateway_config_default(moon_gateway_config_t *cfg);

typedef struct {
    moon_addr_t conductor;   /* where SUBMIT, CANCEL and STATS go */
    const char *model_path;  /* GGUF read at init: tokenizer (prompt lengths; prompts are
                                tokenized here), llama.context_length, tokenizer.chat_template;
                                NULL: prompts go to the cluster as text, nothing checked */
    const char *fingerprint; /* system_fingerprint's stem (the model id; each answer's
                                is it + "_v" + its weight version); NULL: "fp_" + a
                                hash of the model name */
    moon_gateway_config_t config;
    moon_dist_t          *dist;     /* optional: names ("store/<i>") resolve through it
                                       (borrowed; outlives the gateway); NULL: local names */
    moon_gw_metrics_t *metrics;     /* optional borrowed registry (to feed gauges the
                                       gateway cannot see: store tiers); NULL: its own */
    const char *wait_roles;         /* comma-separated roles ("prefill", "decode",
                                       "colocated") that need an instance up (from the
                                       conductor's STATS) before /health says 200 and
                                       requests are served; NULL: a decode instance, and a
                                       prefill one if the deployment has any; "": at once */
    uint16_t   *port_p;             /* optional: the bound port, written by init */
    atomic_int *drained_p;          /* optional: set to 1 (release) once a drain
                                       (moon_gateway_drain) has no request left in flight;
                                       must outlive the gateway */
    moon_weights_client_t *weights; /* weight pushes of the admin route (borrowed; outlives
                                       the gateway); NULL: the admin route is off */
    moon_gw_batches_t *batches;     /* /v1/files and /v1/batches (gw_batches.h; borrowed,
                                       outlives the gateway); NULL: those routes are off */

    /* A job's start-up figure: the first token served sets the gauge
     * moonlet:job_start_to_first_token_seconds when job_start_ns (the job's
     * start on moon_now's clock) is not 0, and *first_token_ns_p (optional;
     * outlives the gateway) to its moon_now time, once, with release. */
    uint64_t          job_start_ns;
    _Atomic uint64_t *first_token_ns_p;
} moon_gateway_args_t;

/* Starts draining the gateway at addr (from any thread): new requests get
 * 503, those in flight run to their end; then *args.drained_p becomes 1.
 * MOON_ERR_NO_MEMORY or the send's status. */
MOON_API moon_status_t moon_gateway_drain(moon_runtime_t *rt, moon_addr_t gateway);

/* Spawn with args (borrowed for the call: strings are copied). init errors:
 * MOON_ERR_INVALID_PARAM (bad config), MOON_ERR_IO (port in use, bad host),
 * MOON_ERR_NOT_FOUND/CORRUPT (model file), MOON_ERR_NO_MEMORY. */
MOON_API extern const moon_actor_ops_t moon_gateway_ops;

#endif /* MOON_ACTORS_GATEWAY_H */
