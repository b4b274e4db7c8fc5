/* actors/gateway/gateway.c - the gateway actor (see gateway.h): owns the HTTP server,
 * the bridge and the model facts; turns TOKEN and DONE into metrics and hands
 * them to their connections. */
#include "gateway.h"

#include "gw_admin.h"
#include "gw_weights.h"

#include "gw_bridge.h"
#include "gw_http.h"
#include "gw_model.h"
#include "gw_template.h"
#include "moonlet/store_msgs.h"
#include "moonlet/alloc.h"
#include "moonlet/gguf.h"
#include "moonlet/log.h"
#include "moonlet/model.h"
#include "moonlet/tokenizer.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define GW_MAX_SHARDS 64u

typedef struct {
    moon_addr_t           conductor;
    moon_dist_t          *dist;
    moon_gateway_config_t cfg;
    char                 *host, *api_key, *model_name, *fingerprint, *wait_roles;
    char                 *allowed_origins;
    moon_tokenizer_t     *tok;
    moon_gw_template_t    tpl;
    uint32_t              n_ctx;
    uint32_t              dim; /* the model's embedding size (/v1/embeddings) */
    moon_gw_metrics_t    *metrics;
    int                   own_metrics;
    moon_gw_bridge_t     *bridge;
    moon_gw_http_t       *http;
    uint64_t              stats_timer;
    uint64_t              stats_sent, stats_seen; /* STATS asked, answered */
    /* store shards ("store/<i>", found by name and monitored) and their last STATS */
    moon_addr_t              shards[GW_MAX_SHARDS];
    uint32_t                 n_shards;
    uint8_t                  shard_down[GW_MAX_SHARDS];
    moon_store_stats_reply_t shard_stats[GW_MAX_SHARDS];
    int                      draining;
    atomic_int              *drained_p;
    uint64_t                 job_start_ns;     /* 0: no start-to-first-token gauge */
    uint64_t                 first_token_ns;   /* the first token served; 0: none yet */
    _Atomic uint64_t        *first_token_ns_p; /* the serving process's copy (optional) */
    char                    *admin_key;
    moon_gw_admin_t         *admin; /* NULL: no admin route */
    moon_gw_weights_t        weights;
} gw_state_t;

#define GW_SHARD_REF 1000u /* monitor refs of the shards: + shard index */

#define CFG(_f) MOON_CONFIG_AT(moon_gateway_config_t, _f)
static const moon_config_field_t gateway_fields[] = {
    {"host", MOON_CONFIG_STRING, CFG(host), .dflt = "127.0.0.1",
     .doc = "address the http server binds (ipv4, ipv6 or a name)"},
    {"port", MOON_CONFIG_U32, CFG(port), .dflt = "8000", .max = 65535,
     .doc = "http port (0: any free port)"},
    {"model-name", MOON_CONFIG_STRING, CFG(model_name), .dflt = NULL,
     .doc = "model id served and listed by /v1/models (default: the model file's stem)"},
    {"api-key", MOON_CONFIG_STRING, CFG(api_key), .dflt = NULL,
     .doc = "if set, /v1/ routes need the header 'authorization: bearer key'"},
    {"body-limit", MOON_CONFIG_SIZE, CFG(body_limit_bytes), .dflt = "4m", .min = 1,
     .doc = "largest request body (bigger: 413)"},
    {"header-timeout", MOON_CONFIG_U32, CFG(header_timeout_s), .dflt = "10",
     .doc = "seconds for a request line and headers, from the connection or its previous "
            "request (closes idle keep-alive connections too; 0: none)"},
    {"body-timeout", MOON_CONFIG_U32, CFG(body_timeout_s), .dflt = "60",
     .doc = "seconds a request body may take to arrive after its headers (0: none)"},
    {"idle-timeout", MOON_CONFIG_U32, CFG(idle_timeout_s), .dflt = "30",
     .doc = "seconds a silent connection stays open (read; 0: forever)"},
    {"write-timeout", MOON_CONFIG_U32, CFG(write_timeout_s), .dflt = "30",
     .doc = "seconds an answer may wait for a client that does not read (0: forever)"},
    {"http-threads", MOON_CONFIG_U32, CFG(http_threads), .dflt = "2", .min = 1, .max = 256,
     .doc = "http server threads"},
    {"max-connections", MOON_CONFIG_U32, CFG(max_connections), .dflt = "1024", .min = 1,
     .max = 1u << 20, .doc = "open http connections at most"},
    {"max-connections-per-ip", MOON_CONFIG_U32, CFG(max_connections_per_ip), .dflt = "256",
     .doc = "open http connections from one client address at most (0: no limit)"},
    {"max-requests", MOON_CONFIG_U32, CFG(max_requests), .dflt = "512",
     .doc = "requests served at once; more are answered 429 with retry-after at once (0: no "
            "limit)"},
    {"max-inflight", MOON_CONFIG_U32, CFG(max_inflight), .dflt = "4096", .min = 1, .max = 1u << 23,
     .doc = "requests on their way to the gateway actor at once (more: 429)"},
    {"stats-interval", MOON_CONFIG_U32, CFG(stats_interval_ms), .dflt = "500", .min = 10,
     .doc = "milliseconds between the gateway's polls of the conductor's counters"},
    {"request-deadline", MOON_CONFIG_U32, CFG(request_deadline_s), .dflt = "300",
     .doc = "seconds a request may run from its arrival; then it ends with an error and is "
            "cancelled (0: never)"},
    {"resumes", MOON_CONFIG_U32, CFG(max_resumes), .dflt = "3", .max = 100,
     .doc = "times a request whose instance was lost is submitted again with the tokens it "
            "got, its stream going on (0: it fails)"},
    {"admin-key", MOON_CONFIG_STRING, CFG(admin_key), .dflt = NULL,
     .doc = "if set, /v1/admin/weights (weight pushes) is on and needs 'authorization: bearer "
            "key'"},
    {"allowed-origins", MOON_CONFIG_STRING, CFG(allowed_origins), .dflt = NULL,
     .doc = "browser origins allowed by cors (comma-separated, e.g. http://localhost:3000, or "
            "*; default none): preflights answered, headers on every response"},
    MOON_CONFIG_END,
};
#undef CFG

const moon_config_table_t moon_gateway_config_table = {"gateway", "openai http gateway",
                                                       "MOON_GATEWAY_", gateway_fields};

moon_status_t moon_gateway_config_default(moon_gateway_config_t *cfg)
{
    moon_status_t status = moon_config_defaults(&moon_gateway_config_table, cfg);

    return status != MOON_OK ? status : moon_config_load_env(&moon_gateway_config_table, cfg);
}

/* The model's tokenizer, context and chat template (gw_model.h). */
static moon_status_t load_model(gw_state_t *st, const char *path)
{
    return moon_gw_model_load(path, &st->tok, &st->tpl, &st->n_ctx, &st->dim);
}

/* Frees what init made (the HTTP server stopped, or never started). */
static void free_state(gw_state_t *st)
{
    moon_gw_bridge_destroy(st->bridge);
    if (st->own_metrics) {
        moon_gw_metrics_destroy(st->metrics);
    }
    moon_tokenizer_destroy(st->tok);
    moon_gw_template_fini(&st->tpl);
    moon_free(st->host);
    moon_free(st->api_key);
    moon_free(st->allowed_origins);
    moon_free(st->wait_roles);
    moon_free(st->model_name);
    moon_free(st->fingerprint);
    moon_gw_admin_destroy(st->admin);
    moon_free(st->admin_key);
}

static moon_status_t gw_init(moon_actor_t *self, const void *arg)
{
    const moon_gateway_args_t *args = arg;
    gw_state_t                *st   = moon_actor_state(self);
    moon_runtime_t            *rt   = moon_actor_runtime(self);
    moon_gw_http_args_t        ha;
    moon_status_t              status = MOON_ERR_NO_MEMORY;
    char                       labels[160];
    uint32_t                   h = 2166136261u;

    if (args == NULL || args->conductor == MOON_ADDR_NONE || args->config.host == NULL ||
        args->config.port > 65535 || args->config.body_limit_bytes == 0 ||
        args->config.stats_interval_ms == 0) {
        MOON_ERROR("gateway: needs a conductor address, a host, a port, a body limit and a "
                   "stats interval");
        return MOON_ERR_INVALID_PARAM;
    }
    st->conductor  = args->conductor;
    st->drained_p  = args->drained_p;
    st->dist       = args->dist;
    st->cfg        = args->config;
    st->host       = moon_strdup(args->config.host);
    st->api_key    = args->config.api_key != NULL ? moon_strdup(args->config.api_key) : NULL;
    st->wait_roles = args->wait_roles != NULL ? moon_strdup(args->wait_roles) : NULL;

    st->job_start_ns     = args->job_start_ns;
    st->first_token_ns_p = args->first_token_ns_p;
    st->allowed_origins =
        args->config.allowed_origins != NULL ? moon_strdup(args->config.allowed_origins) : NULL;
    if (st->host == NULL || (args->wait_roles != NULL && st->wait_roles == NULL) ||
        (args->config.api_key != NULL && st->api_key == NULL) ||
        (args->config.allowed_origins != NULL && st->allowed_origins == NULL)) {
        goto err;
    }
    st->cfg.host            = st->host;
    st->cfg.api_key         = st->api_key;
    st->cfg.allowed_origins = st->allowed_origins;
    if (args->model_path != NULL) {
        status = load_model(st, args->model_path);
        if (status != MOON_OK) {
            goto err;
        }
    } else {
        moon_gw_template_init(&st->tpl, NULL, 0, -1, -1, NULL, NULL);
    }
    status         = MOON_ERR_NO_MEMORY;
    st->model_name = args->config.model_name != NULL ? moon_strdup(args->config.model_name)
                     : args->model_path != NULL      ? moon_gw_model_stem(args->model_path)
                                                     : moon_strdup("moonlet");
    if (st->model_name == NULL) {
        goto err;
    }
    for (const char *c = st->model_name; *c; c++) {
        h = (h ^ (uint8_t)*c) * 16777619u;
    }
    if (args->fingerprint != NULL) {
        st->fingerprint = moon_strdup(args->fingerprint);
    } else {
        char fp[16];
        snprintf(fp, sizeof(fp), "fp_%08x", h);
        st->fingerprint = moon_strdup(fp);
    }
    if (st->fingerprint == NULL) {
        goto err;
    }
    st->metrics = args->metrics;
    if (st->metrics == NULL) {
        snprintf(labels, sizeof(labels), "model_name=\"%.128s\"", st->model_name);
        status = moon_gw_metrics_create(labels, &st->metrics);
        if (status != MOON_OK) {
            goto err;
        }
        st->own_metrics = 1;
    }
    status = moon_gw_metrics_declare_serving(st->metrics);
    if (status != MOON_OK) {
        goto err;
    }
    status = moon_store_msgs_register();
    if (status == MOON_OK) {
        status = moon_gw_weights_init(&st->weights, st->dist, st->metrics);
    }
    if (status != MOON_OK) {
        goto err;
    }
    status = moon_gw_bridge_create(rt, moon_actor_addr(self), st->conductor, st->cfg.max_inflight,
                                   &st->bridge);
    if (status != MOON_OK) {
        goto err;
    }
    memset(&ha, 0, sizeof(ha));
    ha.cfg              = st->cfg;
    ha.rt               = rt;
    ha.bridge           = st->bridge;
    ha.metrics          = st->metrics;
    ha.model.model_name = st->model_name;
    ha.model.tpl        = &st->tpl;
    ha.model.tok        = st->tok;
    ha.model.n_ctx      = st->n_ctx;
    ha.model.dim        = st->dim;
    ha.model.n_vocab    = st->tok != NULL ? moon_tokenizer_n_vocab(st->tok) : 0;
    ha.fingerprint      = st->fingerprint;
    ha.batches          = args->batches;
    if (args->config.admin_key != NULL && args->config.admin_key[0] != '\0' &&
        args->weights != NULL) {
        st->admin_key = moon_strdup(args->config.admin_key);
        status        = st->admin_key != NULL
                            ? moon_gw_admin_create(st->admin_key, args->weights, &st->admin)
                            : MOON_ERR_NO_MEMORY;
        if (status != MOON_OK) {
            goto err;
        }
        ha.admin = st->admin;
    }
    status = moon_gw_http_start(&ha, &st->http);
    if (status != MOON_OK) {
        goto err;
    }
    if (st->wait_roles != NULL && st->wait_roles[0] == '\0') {
        moon_gw_http_set_ready(st->http, NULL);
    }
    status = moon_monitor(self, st->conductor, 0);
    if (status != MOON_OK) {
        MOON_WARN("gateway: cannot monitor the conductor: %s", moon_status_str(status));
    }
    status = moon_timer_start(self, 0, (uint64_t)st->cfg.stats_interval_ms * 1000000ull, 0,
                              &st->stats_timer);
    if (status != MOON_OK) {
        moon_gw_http_stop(st->http);
        goto err;
    }
    if (args->port_p != NULL) {
        *args->port_p = moon_gw_http_port(st->http);
    }
    MOON_INFO("gateway: listening on http://%s:%u (model %s, context %u, chat template %s)",
              st->host, moon_gw_http_port(st->http), st->model_name, st->n_ctx,
              moon_gw_template_name(st->tpl.kind));
    return MOON_OK;

err:
    free_state(st);
    return status;
}

static void gw_fini(moon_actor_t *self)
{
    gw_state_t     *st  = moon_actor_state(self);
    uint64_t        gen = 0;
    uint64_t        deadline_ns;
    struct timespec ts;
    int             idle;

    moon_gw_http_quiesce(st->http);
    moon_gw_bridge_cancel_all(st->bridge, self);
    /* No connection may stay parked when the server stops: end every request
     * and wait (on a condition, up to 5 s) for the connections to finish;
     * one submitted while stopping wakes the wait and is ended too. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    deadline_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + 5000000000ull;
    do {
        moon_gw_bridge_abort(st->bridge, MOON_ERR_CANCELED, "the gateway is stopping");
        idle = moon_gw_http_wait_idle(st->http, deadline_ns, &gen);
    } while (idle == 0);
    if (idle < 0) {
        MOON_WARN("gateway: %u request(s) still busy after 5 s: stopping the server anyway",
                  moon_gw_http_n_busy(st->http));
    }
    moon_gw_admin_destroy(st->admin); /* a push's connection answered before the server goes */
    st->admin = NULL;
    moon_gw_http_stop(st->http);
    free_state(st);
}

static moon_status_t gw_on_wake(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t *st = moon_actor_state(self);

    (void)msg;
    moon_gw_bridge_drain(st->bridge, self);
    return MOON_OK;
}

/* Draining and nothing in flight: tells the main thread. */
static void check_drained(gw_state_t *st)
{
    if (st->draining && st->drained_p != NULL && moon_gw_bridge_n_live(st->bridge) == 0 &&
        moon_gw_http_n_busy(st->http) == 0) {
        /* release: pairs with the main thread's acquire load */
        atomic_store_explicit(st->drained_p, 1, memory_order_release);
    }
}

static moon_status_t gw_on_drain(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t *st = moon_actor_state(self);

    (void)msg;
    if (!st->draining) {
        MOON_INFO("gateway: draining: new requests get 503, %u in flight run to their end",
                  moon_gw_bridge_n_live(st->bridge));
    }
    st->draining = 1;
    moon_gw_http_quiesce(st->http);
    moon_gw_bridge_drain(st->bridge, self);
    check_drained(st);
    return MOON_OK;
}

moon_status_t moon_gateway_drain(moon_runtime_t *rt, moon_addr_t gateway)
{
    moon_gw_drain_t *m = moon_msg_new(MOON_MSG_GW_DRAIN, 0);
    moon_status_t    status;

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = moon_runtime_send(rt, gateway, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return status;
}

static double secs(uint64_t ns)
{
    return (double)ns * 1e-9;
}

/* The live request a TOKEN or DONE names, NULL (logged) if unknown. */
static moon_gw_req_t *event_req(moon_actor_t *self, gw_state_t *st, uint64_t request_id,
                                const char *what)
{
    moon_gw_req_t *req = moon_gw_bridge_find(st->bridge, self, request_id);

    if (req == NULL) {
        MOON_DEBUG_LOG("gateway: %s of unknown request %llu dropped", what,
                       (unsigned long long)request_id);
    }
    return req;
}

/* The first token this gateway serves: how long the job took to serve one
 * (model load, start-up and the first request), for whoever runs it as a
 * job (gauge and *first_token_ns_p: `moonlet serve` logs it). */
static void note_first_served(gw_state_t *st, uint64_t now)
{
    st->first_token_ns = now;
    if (st->first_token_ns_p != NULL) {
        atomic_store_explicit(st->first_token_ns_p, now, memory_order_release);
    }
    if (st->job_start_ns != 0 && now >= st->job_start_ns &&
        moon_gw_metrics_declare(st->metrics, MOON_GW_M_JOB_FIRST_TOKEN, MOON_GW_GAUGE,
                                "Seconds from the job's start to the first token served.", NULL,
                                0) == MOON_OK) {
        moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_JOB_FIRST_TOKEN, NULL,
                                  secs(now - st->job_start_ns));
    }
}

/* TTFT and end-to-end latency are observed by the HTTP side, when the
 * client's bytes leave (what the client measures); the actor keeps the
 * token times for ITL and TPOT. */
static void gw_token_in_order(moon_actor_t *self, moon_gw_req_t *req, const moon_msg_hdr_t *msg)
{
    gw_state_t               *st  = moon_actor_state(self);
    const moon_serve_token_t *tok = (const moon_serve_token_t *)msg;
    moon_gw_req_times_t      *t;
    uint64_t                  now = moon_now(moon_actor_runtime(self));

    if (!moon_gw_bridge_note_token(req, tok->index, tok->token)) {
        return;
    }
    if (MOON_UNLIKELY(st->first_token_ns == 0)) {
        note_first_served(st, now);
    }
    t = moon_gw_req_times_mut(req);
    if (t->first_token_ns == 0) {
        t->first_token_ns = now;
    } else {
        moon_gw_metrics_observe(st->metrics, MOON_GW_M_ITL, NULL, secs(now - t->last_token_ns));
    }
    t->last_token_ns = now;
    t->n_tokens++;
    moon_gw_bridge_deliver(st->bridge, req, msg);
}

static void gw_done_in_order(moon_actor_t *self, moon_gw_req_t *req, const moon_msg_hdr_t *msg);

/* A request's TOKEN or DONE, in order (moon_gw_bridge_order). */
static void gw_in_order(void *arg, moon_gw_req_t *req, const moon_msg_hdr_t *msg)
{
    if (msg->type == MOON_MSG_SERVE_TOKEN) {
        gw_token_in_order(arg, req, msg);
    } else {
        gw_done_in_order(arg, req, msg);
    }
}

static moon_status_t gw_on_token(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t    *st = moon_actor_state(self);
    moon_gw_req_t *req =
        event_req(self, st, ((const moon_serve_token_t *)msg)->request_id, "token");

    if (req != NULL) {
        moon_gw_bridge_order(req, msg, moon_now(moon_actor_runtime(self)), gw_in_order, self);
    }
    return MOON_OK;
}

/* A decode step's tokens for this gateway: each as its own TOKEN. */
static moon_status_t gw_on_tokens(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    uint32_t n = moon_serve_tokens_count(msg);

    for (uint32_t i = 0; i < n; i++) {
        moon_serve_token_t *t = moon_serve_tokens_split(msg, i);
        if (t == NULL) {
            MOON_WARN("gateway: no memory for a token of a step's batch");
            continue;
        }
        gw_on_token(self, &t->hdr);
        moon_msg_release(&t->hdr);
    }
    return MOON_OK;
}

/* A prefill's answer for every prompt position (PROMPT_LOGPROBS, EMBEDDING:
 * both begin with the request's id): queued for the connection like a token. */
static moon_status_t gw_on_rows(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t    *st  = moon_actor_state(self);
    uint64_t       id  = msg->type == MOON_MSG_SERVE_EMBEDDING
                             ? ((const moon_serve_embedding_t *)msg)->request_id
                             : ((const moon_serve_prompt_logprobs_t *)msg)->request_id;
    moon_gw_req_t *req = event_req(self, st, id, "prompt rows");

    if (req != NULL) {
        moon_gw_bridge_deliver(st->bridge, req, msg);
    }
    return MOON_OK;
}

static moon_status_t gw_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t    *st  = moon_actor_state(self);
    moon_gw_req_t *req = event_req(self, st, ((const moon_serve_done_t *)msg)->request_id, "done");

    if (req != NULL) {
        moon_gw_bridge_order(req, msg, moon_now(moon_actor_runtime(self)), gw_in_order, self);
    }
    return MOON_OK;
}

static void gw_done_in_order(moon_actor_t *self, moon_gw_req_t *req, const moon_msg_hdr_t *msg)
{
    gw_state_t                *st = moon_actor_state(self);
    const moon_serve_done_t   *d  = (const moon_serve_done_t *)msg;
    moon_gw_metrics_t         *m  = st->metrics;
    const moon_gw_req_times_t *t;
    char                       labels[48];

    if (MOON_SERVE_RESUMABLE(d->finish, d->status) &&
        moon_gw_bridge_resume(st->bridge, self, req, st->cfg.max_resumes) == MOON_OK) {
        moon_gw_metrics_add(m, MOON_GW_M_SUCCESS, "finished_reason=\"resumed\"", 1);
        return; /* its stream goes on under the new id */
    }
    t = moon_gw_req_times_mut(req);
    snprintf(labels, sizeof(labels), "finished_reason=\"%s\"", moon_finish_str(d->finish));
    moon_gw_metrics_add(m, MOON_GW_M_SUCCESS, labels, 1);
    if (d->finish == MOON_FINISH_REJECTED) {
        moon_gw_metrics_add(m, MOON_GW_M_REJECTED, NULL, 1);
    }
    if (d->finish == MOON_FINISH_STOP || d->finish == MOON_FINISH_LENGTH) {
        moon_gw_metrics_observe(m, MOON_GW_M_QUEUE, NULL, secs(d->queue_ns));
        moon_gw_metrics_observe(m, MOON_GW_M_PREFILL, NULL, secs(d->prefill_ns));
        moon_gw_metrics_observe(m, MOON_GW_M_TRANSFER, NULL, secs(d->transfer_ns));
        moon_gw_metrics_observe(m, MOON_GW_M_PROMPT_LEN, NULL, d->n_prompt);
        moon_gw_metrics_observe(m, MOON_GW_M_GEN_LEN, NULL, d->n_completion);
        if (t->n_tokens > 1) {
            moon_gw_metrics_observe(m, MOON_GW_M_TPOT, NULL,
                                    secs(t->last_token_ns - t->first_token_ns) /
                                        (double)(t->n_tokens - 1));
        }
    }
    moon_gw_metrics_add(m, MOON_GW_M_PROMPT_TOKENS, NULL, d->n_prompt);
    moon_gw_metrics_add(m, MOON_GW_M_GEN_TOKENS, NULL, d->n_completion);
    moon_gw_metrics_add(m, MOON_GW_M_CACHE_QUERIES, NULL, d->n_prompt);
    moon_gw_metrics_add(m, MOON_GW_M_CACHE_HITS, NULL, d->n_cached);
    moon_gw_bridge_deliver(st->bridge, req, msg);
    check_drained(st);
}

static moon_status_t gw_on_down(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t            *st   = moon_actor_state(self);
    const moon_sys_down_t *down = (const moon_sys_down_t *)msg;
    uint32_t               n;

    if (down->ref >= GW_SHARD_REF && down->ref < GW_SHARD_REF + st->n_shards &&
        st->shards[down->ref - GW_SHARD_REF] == down->actor) {
        uint32_t i = (uint32_t)(down->ref - GW_SHARD_REF), up = 0;
        MOON_WARN("gateway: store shard %u is down (%s)", i, moon_status_str(down->reason));
        st->shard_down[i] = 1;
        for (uint32_t k = 0; k < st->n_shards; k++) {
            up += !st->shard_down[k] && st->shard_stats[k].n_slots > 0;
        }
        moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_ALIVE, "role=\"store\"", up);
        return MOON_OK;
    }
    if (down->actor != st->conductor) {
        return MOON_OK;
    }
    moon_gw_http_set_down(st->http, 1);
    moon_gw_bridge_drain(st->bridge, self); /* those on the ring fail too */
    n = moon_gw_bridge_fail_all(st->bridge, MOON_ERR_PEER_LOST, "the conductor is gone");
    moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_ALIVE, "role=\"prefill\"", 0);
    moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_ALIVE, "role=\"decode\"", 0);
    if (down->reason == MOON_OK && n == 0) {
        MOON_INFO("gateway: the conductor stopped: new requests get 503");
    } else {
        MOON_ERROR("gateway: the conductor ended (%s): %u requests failed, new ones get 503",
                   moon_status_str(down->reason), n);
    }
    return MOON_OK;
}

/* Finds shards registered since the last tick and asks each for its STATS. */
static void poll_store(moon_actor_t *self, gw_state_t *st)
{
    moon_runtime_t *rt = moon_actor_runtime(self);
    char            name[32];

    while (st->n_shards < GW_MAX_SHARDS) {
        snprintf(name, sizeof(name), "store/%u", st->n_shards);
        moon_addr_t *a = &st->shards[st->n_shards];

        if ((st->dist != NULL ? moon_dist_whereis(st->dist, name, 0, a)
                              : moon_whereis(rt, name, a)) != MOON_OK) {
            break;
        }
        if (moon_monitor(self, *a, GW_SHARD_REF + st->n_shards) != MOON_OK) {
            st->shard_down[st->n_shards] = 1; /* gone already */
        }
        st->n_shards++;
    }
    for (uint32_t i = 0; i < st->n_shards; i++) {
        moon_store_stats_t *q;

        if (st->shard_down[i]) {
            continue;
        }
        q = moon_msg_new(MOON_MSG_STORE_STATS, 0);

        if (q != NULL) {
            q->req = i;
            moon_tell(self, st->shards[i], &q->hdr);
        }
    }
}

/* The stats timer: ask the conductor (one question at a time) and the shards. */
static moon_status_t gw_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t             *st = moon_actor_state(self);
    moon_serve_stats_req_t *q;
    uint32_t                n;

    (void)msg;
    poll_store(self, st);
    moon_gw_weights_poll(&st->weights, self);
    n = moon_gw_bridge_order_expire(st->bridge, self, moon_now(moon_actor_runtime(self)),
                                    gw_in_order, self);
    if (n > 0) {
        MOON_WARN("gateway: %u streams waited past %.1f s for a token: they end resumable", n,
                  MOON_SERVE_ORDER_WAIT_NS * 1e-9);
    }
    n = moon_gw_bridge_expire(st->bridge, self, moon_now(moon_actor_runtime(self)),
                              (uint64_t)st->cfg.request_deadline_s * 1000000000ull);
    if (n > 0) {
        MOON_WARN("gateway: %u requests ran past their deadline (%u s): ended and cancelled", n,
                  st->cfg.request_deadline_s);
    }
    check_drained(st);
    if (st->stats_sent != st->stats_seen && st->stats_sent - st->stats_seen < 20) {
        return MOON_OK; /* the last one is unanswered: the conductor is busy */
    }
    q = moon_msg_new(MOON_MSG_SERVE_STATS, 0);
    if (q == NULL) {
        return MOON_OK;
    }
    q->req = ++st->stats_sent;
    moon_tell(self, st->conductor, &q->hdr);
    return MOON_OK;
}

static moon_status_t gw_on_weights_state(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t *st = moon_actor_state(self);

    moon_gw_http_set_weight_version(
        st->http, moon_gw_weights_on_state(&st->weights, (const moon_weights_state_reply_t *)msg));
    return MOON_OK;
}

static void set_pool_gauges(gw_state_t *st, const moon_serve_stats_reply_t *r)
{
    const uint32_t *used  = MOON_SPAN_PTR(r, r->blocks_used);
    const uint32_t *total = MOON_SPAN_PTR(r, r->blocks_total);
    double          u[2] = {0, 0}, t[2] = {0, 0};

    for (uint32_t i = 0; i < r->blocks_used.n && i < r->blocks_total.n; i++) {
        u[i >= r->n_prefill] += used[i];
        t[i >= r->n_prefill] += total[i];
    }
    moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_KV_USED, "tier=\"prefill_pool\"", u[0]);
    moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_KV_USED, "tier=\"decode_pool\"", u[1]);
    moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_KV_TOTAL, "tier=\"prefill_pool\"", t[0]);
    moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_KV_TOTAL, "tier=\"decode_pool\"", t[1]);
}

/* Why the cluster cannot serve yet (static text), NULL when it can. Roles
 * named in wait_roles need an instance up ("colocated" instances count as
 * decode ones); without wait_roles: a decode instance, and a prefill one
 * when the deployment has prefill instances. */
static const char *why_not_ready(const gw_state_t *st, const moon_serve_stats_reply_t *r)
{
    const char *w = st->wait_roles;

    if (w == NULL) {
        if (r->n_prefill > 0 && r->n_prefill_up == 0) {
            return "no prefill instance is up";
        }
        return r->n_decode_up == 0 ? "no decode instance is up" : NULL;
    }
    while (*w) {
        size_t n = strcspn(w, ",");
        if (n == 7 && strncmp(w, "prefill", 7) == 0 && r->n_prefill_up == 0) {
            return "no prefill instance is up";
        }
        if (((n == 6 && strncmp(w, "decode", 6) == 0) ||
             (n == 9 && strncmp(w, "colocated", 9) == 0)) &&
            r->n_decode_up == 0) {
            return "no decode instance is up";
        }
        w += n + (w[n] == ',');
    }
    return NULL;
}

/* "[1,3]": the instances of [from, to) the conductor has not (or no more) up. */
static size_t list_down(char *out, size_t cap, const uint32_t *up, uint32_t from, uint32_t to,
                        uint32_t *n_down)
{
    size_t len = (size_t)snprintf(out, cap, "[");

    *n_down = 0;
    for (uint32_t i = from; i < to && len < cap; i++) {
        if (!up[i]) {
            len += (size_t)snprintf(out + len, cap - len, "%s%u", *n_down ? "," : "", i - from);
            (*n_down)++;
        }
    }
    if (len < cap) {
        len += (size_t)snprintf(out + len, cap - len, "]");
    }
    return len;
}

/* /health's body: per role, instances up, of how many, and which are down. */
static void set_health(gw_state_t *st, const moon_serve_stats_reply_t *r)
{
    const uint32_t *up = MOON_SPAN_PTR(r, r->inst_up);
    uint32_t        n = r->inst_up.n, np = MOON_MIN(r->n_prefill, n), nd = 0, ns = 0, ns_down = 0;
    char            pd[200], dd[200], sd[200], body[1024];
    size_t          len = (size_t)snprintf(sd, sizeof(sd), "[");

    list_down(pd, sizeof(pd), up, 0, np, &nd);
    list_down(dd, sizeof(dd), up, np, n, &nd);
    for (uint32_t i = 0; i < st->n_shards && len < sizeof(sd); i++) {
        ns++;
        if (st->shard_down[i]) {
            len += (size_t)snprintf(sd + len, sizeof(sd) - len, "%s%u", ns_down ? "," : "", i);
            ns_down++;
        }
    }
    if (len < sizeof(sd)) {
        snprintf(sd + len, sizeof(sd) - len, "]");
    }
    snprintf(body, sizeof(body),
             "{\"status\":\"%s\",\"prefill\":{\"up\":%u,\"of\":%u,\"down\":%s},"
             "\"decode\":{\"up\":%u,\"of\":%u,\"down\":%s},"
             "\"store\":{\"up\":%u,\"of\":%u,\"down\":%s}}",
             r->n_prefill_up == np && r->n_decode_up == n - np && ns_down == 0 ? "ok" : "degraded",
             r->n_prefill_up, np, pd, r->n_decode_up, n - np, dd, ns - ns_down, ns, sd);
    moon_gw_http_set_health(st->http, body);
}

static moon_status_t gw_on_stats(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t                     *st = moon_actor_state(self);
    const moon_serve_stats_reply_t *r  = (const moon_serve_stats_reply_t *)msg;
    moon_gw_metrics_t              *m  = st->metrics;

    if (r->req > st->stats_seen) {
        st->stats_seen = r->req;
    }
    moon_gw_metrics_set_gauge(m, MOON_GW_M_ALIVE, "role=\"prefill\"", r->n_prefill_up);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_ALIVE, "role=\"decode\"", r->n_decode_up);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_RUNNING, NULL, (double)r->running);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_WAITING, NULL, (double)r->waiting);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_IN_FLIGHT, NULL, r->in_flight);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_STORE_HITS, NULL, (double)r->store_hit_tokens);
    set_pool_gauges(st, r);
    set_health(st, r);
    if (st->wait_roles == NULL || st->wait_roles[0] != '\0') {
        moon_gw_http_set_ready(st->http, why_not_ready(st, r));
    }
    return MOON_OK;
}

/* A shard's counters: the store tier's gauges and counters are the sums. */
static moon_status_t gw_on_store_stats(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t                     *st = moon_actor_state(self);
    const moon_store_stats_reply_t *r  = (const moon_store_stats_reply_t *)msg;
    moon_gw_metrics_t              *m  = st->metrics;
    double used = 0, total = 0, puts = 0, gets = 0, misses = 0, evicted = 0, up = 0;

    if (r->req >= st->n_shards || msg->src != st->shards[r->req]) {
        return MOON_OK;
    }
    st->shard_stats[r->req] = *r;
    for (uint32_t i = 0; i < st->n_shards; i++) {
        const moon_store_stats_reply_t *s = &st->shard_stats[i];
        used += s->used_slots;
        total += s->n_slots;
        puts += (double)s->n_puts;
        gets += (double)s->n_gets;
        misses += (double)s->n_get_misses;
        evicted += (double)s->n_evicted;
        up += s->n_slots > 0 && !st->shard_down[i]; /* has answered, not lost since */
    }
    moon_gw_metrics_set_gauge(m, MOON_GW_M_ALIVE, "role=\"store\"", up);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_KV_USED, "tier=\"store_dram\"", used);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_KV_TOTAL, "tier=\"store_dram\"", total);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_STORE_OPS, "op=\"put\"", puts);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_STORE_OPS, "op=\"get\"", gets);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_STORE_OPS, "op=\"get_miss\"", misses);
    moon_gw_metrics_set_gauge(m, MOON_GW_M_STORE_EVICT, NULL, evicted);
    return MOON_OK;
}

const moon_actor_ops_t moon_gateway_ops = {
    .name        = "gateway",
    .state_bytes = sizeof(gw_state_t),
    .init        = gw_init,
    .fini        = gw_fini,
    .on_msg =
        {
            [MOON_MSG_GW_WAKE]               = gw_on_wake,
            [MOON_MSG_GW_DRAIN]              = gw_on_drain,
            [MOON_MSG_SERVE_TOKEN]           = gw_on_token,
            [MOON_MSG_SERVE_TOKENS]          = gw_on_tokens,
            [MOON_MSG_SERVE_DONE]            = gw_on_done,
            [MOON_MSG_SERVE_EMBEDDING]       = gw_on_rows,
            [MOON_MSG_SERVE_PROMPT_LOGPROBS] = gw_on_rows,
            [MOON_MSG_SYS_DOWN]              = gw_on_down,
            [MOON_MSG_SYS_TIMER]             = gw_on_timer,
            [MOON_MSG_SERVE_STATS_REPLY]     = gw_on_stats,
            [MOON_MSG_STORE_STATS_REPLY]     = gw_on_store_stats,
            [MOON_MSG_WEIGHTS_STATE_REPLY]   = gw_on_weights_state,
        },
};
