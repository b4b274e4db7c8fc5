/* actors/gateway.h - the OpenAI-compatible HTTP gateway, an actor on rank 0.
 *
 * Spawn it with moon_gateway_ops and a moon_gateway_args_t: its init opens the
 * model file (tokenizer, context length, chat template), starts the HTTP
 * server (libmicrohttpd, its own threads) and fails the spawn if the port
 * cannot be bound. Routes: POST /v1/completions, POST /v1/chat/completions
 * (stream or not), GET /v1/models[/{id}], GET /health, GET /metrics.
 *
 * Each request goes to the conductor as a SUBMIT with reply_to = the gateway;
 * TOKEN and DONE come back to the gateway, which streams them to the client
 * (gw_bridge.h). A client that disconnects cancels its request. The gateway
 * monitors the conductor: when it goes, requests in flight fail (503) and
 * every new one gets 503.
 *
 * Readiness (/health 200, generation routes served) comes from the registry's
 * `moonlet:instances_alive{role="..."}` gauges, which whoever knows the
 * instances (the conductor, from HELLO and DOWN) sets with
 * moon_gw_metrics_set_gauge: ready when every role of wait_roles has one alive.
 * The same registry takes the KV-block-per-tier gauges and store counters. */
#ifndef MOON_ACTORS_GATEWAY_H
#define MOON_ACTORS_GATEWAY_H

#include "gw_metrics.h"
#include "moonlet/actor.h"

#include <stddef.h>
#include <stdint.h>

/* HTTP options (defaults from moon_gateway_config_default). */
typedef struct {
    const char *host;               /* bind address: "127.0.0.1" (IPv4, IPv6 or a name) */
    uint16_t    port;               /* 8000; 0: any free port (see port_p) */
    const char *api_key;            /* NULL: no auth; else /v1/... need "Authorization: Bearer KEY" */
    size_t      body_limit_bytes;   /* 4 MiB: larger bodies get 413 */
    uint32_t    idle_timeout_s;     /* 30: a connection silent this long is closed (half-sent
                                       requests, idle keep-alive); 0: never */
    uint32_t    request_timeout_s;  /* 60: a body still arriving after this is dropped */
    uint32_t    http_threads;       /* 2: libmicrohttpd's thread pool */
    uint32_t    max_connections;    /* 1024 */
    uint32_t    max_inflight;       /* 4096: requests waiting for the gateway actor at once */
} moon_gateway_config_t;

void moon_gateway_config_default(moon_gateway_config_t *cfg);

typedef struct {
    moon_addr_t conductor;   /* where SUBMIT and CANCEL go */
    const char *model_path;  /* GGUF read at init: tokenizer (prompt lengths, chat prompts
                                tokenized here), llama.context_length, tokenizer.chat_template;
                                NULL: prompts go to the cluster as text, nothing checked */
    const char *model_name;  /* the id /v1/models lists and requests must name; NULL: the
                                file's stem ("stories260K"), or "moonlet" without a file */
    const char *fingerprint; /* system_fingerprint (model id + weight version); NULL:
                                "fp_" + a hash of the model name */
    moon_gateway_config_t config;
    moon_gw_metrics_t    *metrics;    /* borrowed registry (the conductor feeds its gauges);
                                         NULL: the gateway keeps its own */
    const char           *wait_roles; /* comma-separated roles that must have an instance
                                         alive, e.g. "prefill,decode"; NULL or "": ready at once */
    uint16_t             *port_p;     /* optional: the bound port, written by init */
} moon_gateway_args_t;

/* Spawn with args (borrowed for the call: strings are copied). init errors:
 * MOON_ERR_INVALID_PARAM (bad config), MOON_ERR_IO (port in use, bad host),
 * MOON_ERR_NOT_FOUND/CORRUPT (model file), MOON_ERR_NO_MEMORY. */
MOON_API extern const moon_actor_ops_t moon_gateway_ops;

#endif /* MOON_ACTORS_GATEWAY_H */
