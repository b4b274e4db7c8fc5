/* actors/gateway/gw_http.c - HTTP server and per-connection state machine (see
 * gw_http.h). */
#include "gw_http.h"

#include "gw_answer.h"
#include "gw_batches.h"
#include "gw_buf.h"
#include "gw_choices.h"
#include "gw_cors.h"
#include "gw_embed.h"
#include "gw_errors.h"
#include "gw_format.h"
#include "gw_guard.h"
#include "gw_hangup.h"
#include "gw_logprobs.h"
#include "gw_plugin.h"
#include "gw_tokenize.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <microhttpd.h>

#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#define SSE_BLOCK_BYTES (16u << 10)
/* Bytes/s a body must average to keep its connection when the slots run out
 * (4 MiB at this rate takes over an hour: no real upload is that slow). */
#define MIN_BODY_RATE 1024u

typedef enum {
    ROUTE_NONE,
    ROUTE_COMPLETIONS,
    ROUTE_CHAT,
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_ADMIN,   /* /v1/admin/weights (gw_admin.h) */
    ROUTE_BATCHES, /* /v1/files..., /v1/batches... (gw_batches.h) */
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_VERSION,
    ROUTE_EMBEDDINGS,
} route_t;

/* Routes answered to a POST (the others to GET and HEAD). */
#define ROUTE_IS_POST(_r)                                                                          \
    ((_r) == ROUTE_COMPLETIONS || (_r) == ROUTE_CHAT || (_r) == ROUTE_TOKENIZE ||                  \
     (_r) == ROUTE_DETOKENIZE || (_r) == ROUTE_EMBEDDINGS)

typedef enum {
    PH_BODY,   /* receiving the body */
    PH_WAIT,   /* submitted: waiting for the first event (or, not streaming, for DONE) */
    PH_STREAM, /* the SSE response is queued */
    PH_ANSWERED,
    PH_ADMIN, /* a weight push runs: suspended until its thread resumes it */
} phase_t;

struct moon_gw_http {
    moon_gw_http_args_t a;
    struct MHD_Daemon  *daemon;
    moon_gw_hangup_t   *hangup; /* clients that leave while parked */
    moon_gw_guard_t    *guard;  /* header and body deadlines */
    uint16_t            port;
    uint64_t            nonce; /* makes response ids unique across restarts */
    int64_t             created;
    atomic_int          down;
    atomic_int          closing;
    _Atomic uint64_t    weight_version;
    const char *_Atomic not_ready; /* why not (static text); NULL: ready */
    atomic_uint         n_busy;    /* requests past the admission check, not finished */
    pthread_mutex_t     health_mu;
    char                health[1024]; /* under health_mu: /health's body when ready */
    /* shutdown: moon_gw_http_wait_idle waits on idle_cv for n_busy 0 or a
     * submit that came after quiesce (idle_gen) */
    pthread_mutex_t idle_mu;
    pthread_cond_t  idle_cv;
    uint64_t        idle_gen;
};

typedef struct {
    moon_gw_http_t          *http;
    struct MHD_Connection   *mc;
    route_t                  route;
    phase_t                  phase;
    uint64_t                 t_start_ns;
    moon_gw_buf_t            body;
    int                      too_large, timed_out;
    int                      must_close; /* the answer closes the connection */
    int                      admitted;   /* counted in n_busy */
    moon_gw_request_t        req;
    moon_gw_embed_req_t      embed; /* ROUTE_EMBEDDINGS: its inputs, one choice each */
    moon_gw_req_t           *breq;  /* choice 0's: the leader (its id, the hang-up's poke) */
    moon_gw_choice_t        *ch;    /* (n_ch: best_of) the choices; NULL before the body */
    uint32_t                 n_ch;
    uint32_t                 n_done;  /* choices whose DONE was read */
    uint32_t                 rr;      /* the choice read first next time (round robin) */
    uint32_t                 first_k; /* the choice of first */
    uint32_t                 want_lp; /* the logprobs the client asked (best_of asks for 1) */
    uint32_t                 per;     /* choices per prompt (best_of) */
    uint32_t                 n_prompts;
    moon_gw_request_t       *more;       /* (n_prompts - 1) a list's prompts after the first */
    char                   **echos;      /* (n_prompts) echo: each prompt's text; NULL: none */
    int                      sub_failed; /* a choice could not be submitted: sub_err says why */
    _Atomic(moon_gw_req_t *) parked_on;  /* the choice the connection parks on (the watcher's) */
    moon_gw_error_t          sub_err;
    char session[128]; /* for plugins: copied into each SUBMIT (some go after on_body) */
    char id[64];
    moon_gw_resp_meta_t   meta;
    const moon_msg_hdr_t *first; /* the first event, kept for the stream */
    char                 *out;   /* stream: bytes to send */
    size_t                n_out, off_out;
    int                   finished;     /* stream: [DONE] formatted */
    int                   got_done;     /* every DONE read, or an error ended it */
    int                   ttft_seen;    /* the first text is out (TTFT observed) */
    uint64_t              last_text_ns; /* stream: when text last went out */
    int                   watched;      /* hangup_slot is ours */
    uint32_t              hangup_slot;
    atomic_int            gone; /* the client hung up (the watcher saw it) */

    char fp[96]; /* system_fingerprint: the gateway's and the answer's weight version */
    moon_gw_admin_job_t *job;        /* PH_ADMIN: the push */
    uint64_t             body_limit; /* the route's largest body */
} conn_t;

/* ---- responses --------------------------------------------------------------- */

static void count_response(moon_gw_http_t *h, unsigned code)
{
    char labels[32];

    snprintf(labels, sizeof(labels), "code=\"%u\"", code);
    moon_gw_metrics_add(h->a.metrics, MOON_GW_M_HTTP, labels, 1);
}

/* The answer is queued: from now on a client that does not read is given
 * write_timeout_s (libmicrohttpd's per-connection timeout) instead of the
 * idle (read) timeout. */
static void set_write_timeout(conn_t *c)
{
    const moon_gateway_config_t *cfg = &c->http->a.cfg;

    if (cfg->write_timeout_s != cfg->idle_timeout_s) {
        MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned int)cfg->write_timeout_s);
    }
}

/* The connection's guard id (gw_guard.h), 0 if not guarded. */
static uint32_t guard_id(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci != NULL ? (uint32_t)(uintptr_t)ci->socket_context : 0;
}

/* CORS: an allowed Origin gets its answer's headers (every response). */
static void add_cors(conn_t *c, struct MHD_Response *resp)
{
    const char *origin = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Origin");

    if (moon_gw_cors_allowed(c->http->a.cfg.allowed_origins, origin)) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(resp, "Vary", "Origin");
        MHD_add_response_header(resp, "Access-Control-Expose-Headers", "Retry-After");
    }
}

/* Queues text (taken: moon_free'd by libmicrohttpd through the callback). */
static enum MHD_Result respond(conn_t *c, unsigned code, const char *type, char *text, size_t len,
                               const moon_gw_error_t *err)
{
    struct MHD_Response *resp;
    enum MHD_Result      ret;

    if (text == NULL) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":\"internal_error\"}}";
        code                    = 500;
        resp =
            MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    } else {
        resp = MHD_create_response_from_buffer_with_free_callback(len, text, moon_free);
    }
    if (resp == NULL) {
        moon_free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (err != NULL && err->retry_after_s > 0) {
        char v[16];
        snprintf(v, sizeof(v), "%u", err->retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (c->must_close) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    if (code == 405) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
                                c->route == ROUTE_BATCHES ? "GET, POST, DELETE"
                                : ROUTE_IS_POST(c->route) ? "POST"
                                                          : "GET");
    }
    add_cors(c, resp);
    if (code == 204) { /* the preflight's answer (only an allowed origin gets one) */
        const char *hdrs =
            MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                hdrs != NULL ? hdrs : "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    ret = MHD_queue_response(c->mc, code, resp);
    MHD_destroy_response(resp);
    count_response(c->http, code);
    set_write_timeout(c);
    c->phase = PH_ANSWERED;
    return ret;
}

static enum MHD_Result respond_json(conn_t *c, unsigned code, char *json, size_t len)
{
    return respond(c, code, "application/json", json, len, NULL);
}

static enum MHD_Result respond_error(conn_t *c, const moon_gw_error_t *err)
{
    char *json = moon_gw_error_json(err);

    MOON_DEBUG_LOG("gateway: %d %s", err->http, err->message);
    return respond(c, (unsigned)err->http, "application/json", json,
                   json != NULL ? strlen(json) : 0, err);
}

static enum MHD_Result fail(conn_t *c, int http, const char *code, const char *fmt, const char *s)
{
    moon_gw_error_t err;

    moon_gw_error_set(&err, http, code, NULL, fmt, s);
    return respond_error(c, &err);
}

/* ---- readiness ------------------------------------------------------------------ */

/* 1 when the cluster can serve; else err says why. */
static int ready(moon_gw_http_t *h, moon_gw_error_t *err)
{
    const char *why = atomic_load(&h->not_ready);

    if (atomic_load(&h->closing)) {
        moon_gw_error_set(err, 503, NULL, NULL, "the server is shutting down");
        return 0;
    }
    if (atomic_load(&h->down)) {
        moon_gw_error_set(err, 503, NULL, NULL, "the conductor is not reachable");
        return 0;
    }
    if (why != NULL) {
        moon_gw_error_set(err, 503, NULL, NULL, "not ready: %s", why);
        return 0;
    }
    return 1;
}

/* ---- routes ------------------------------------------------------------------------- */

static route_t route_of(const char *url)
{
    if (strcmp(url, "/v1/completions") == 0) {
        return ROUTE_COMPLETIONS;
    }
    if (strcmp(url, "/v1/chat/completions") == 0) {
        return ROUTE_CHAT;
    }
    if (strcmp(url, "/v1/embeddings") == 0) {
        return ROUTE_EMBEDDINGS;
    }
    if (strcmp(url, "/v1/models") == 0) {
        return ROUTE_MODELS;
    }
    if (strncmp(url, "/v1/models/", 11) == 0) {
        return ROUTE_MODEL;
    }
    if (strcmp(url, "/health") == 0) {
        return ROUTE_HEALTH;
    }
    if (strcmp(url, "/tokenize") == 0) {
        return ROUTE_TOKENIZE;
    }
    if (strcmp(url, "/detokenize") == 0) {
        return ROUTE_DETOKENIZE;
    }
    if (strcmp(url, "/version") == 0) {
        return ROUTE_VERSION;
    }
    if (strcmp(url, "/metrics") == 0) {
        return ROUTE_METRICS;
    }
    if (strcmp(url, MOON_GW_ADMIN_PATH) == 0) {
        return ROUTE_ADMIN;
    }
    if (moon_gw_batches_route(url)) {
        return ROUTE_BATCHES;
    }
    return ROUTE_NONE;
}

/* ---- the admin route: its own key, a push on a thread (gw_admin.h) --------------- */

static void admin_wake(void *arg)
{
    MHD_resume_connection(((conn_t *)arg)->mc);
}

static enum MHD_Result admin_start(conn_t *c, int get, int post)
{
    moon_gw_admin_t *admin = c->http->a.admin;
    moon_gw_error_t  err;
    char            *json;
    size_t           len = 0;
    int              http;

    if (admin == NULL) {
        return fail(c, 404, NULL, "%s", "the admin routes are off (start with --admin-key)");
    }
    if (!get && !post) {
        return fail(c, 405, NULL, "%s", "GET or POST");
    }
    if (!moon_gw_admin_authorised(
            admin,
            MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION))) {
        moon_gw_error_set(&err, 401, NULL, NULL, "%s",
                          "Incorrect admin key (send it as 'Authorization: Bearer KEY').");
        return respond_error(c, &err);
    }
    if (post) {
        c->phase = PH_BODY;
        return MHD_YES;
    }
    json = moon_gw_admin_get(admin, &http, &len);
    return respond_json(c, (unsigned)http, json, len);
}

static enum MHD_Result admin_body(conn_t *c)
{
    moon_gw_error_t err;

    if (c->too_large) {
        return fail(c, 413, NULL, "%s", "the body is larger than the limit");
    }
    /* suspended first: the push thread's wake-up cannot come before it */
    MHD_suspend_connection(c->mc);
    c->phase = PH_ADMIN;
    c->job   = moon_gw_admin_post(c->http->a.admin, c->body.data ? c->body.data : "", c->body.len,
                                  admin_wake, c, &err);
    if (c->job == NULL) {
        MHD_resume_connection(c->mc);
        return respond_error(c, &err);
    }
    return MHD_YES;
}

static enum MHD_Result admin_answer(conn_t *c)
{
    char  *json;
    size_t len = 0;
    int    http;

    if (c->job == NULL || !moon_gw_admin_job_ready(c->job)) {
        return MHD_YES;
    }
    json   = moon_gw_admin_job_take(c->job, &http, &len);
    c->job = NULL;
    return respond_json(c, (unsigned)http, json, len);
}

static int authorised(moon_gw_http_t *h, struct MHD_Connection *mc);

/* ---- the batch api: files and batches (gw_batches.h) ---------------------------- */

static enum MHD_Result batches_answer(conn_t *c, const char *url, const char *method)
{
    int         http = 500;
    const char *type = "application/json";
    size_t      len  = 0;
    char       *text;

    if (c->too_large) {
        moon_gw_error_t err;
        moon_gw_error_set(&err, 413, NULL, NULL, "the body is larger than the limit of %llu bytes",
                          (unsigned long long)c->body_limit);
        MOON_LOG_LIMITED(MOON_LOG_INFO, "gateway: 413: %s", err.message);
        return respond_error(c, &err);
    }
    text = moon_gw_batches_handle(
        c->http->a.batches, method, url,
        MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE),
        c->body.data, c->body.len, &http, &type, &len);
    return respond(c, (unsigned)http, type, text, len, NULL);
}

static enum MHD_Result batches_start(conn_t *c, const char *url, const char *method)
{
    moon_gw_http_t *h = c->http;
    moon_gw_error_t err;
    const char     *cl;

    if (h->a.batches == NULL) {
        return fail(c, 404, NULL, "%s", "the batch api is off (start with --data-dir DIR)");
    }
    if (!authorised(h, c->mc)) {
        moon_gw_error_set(&err, 401, NULL, NULL, "%s",
                          "Incorrect API key provided (send it as 'Authorization: Bearer KEY').");
        return respond_error(c, &err);
    }
    if (strcmp(method, MHD_HTTP_METHOD_POST) != 0) {
        return batches_answer(c, url, method);
    }
    c->body_limit = moon_gw_batches_body_limit(h->a.batches, url, h->a.cfg.body_limit_bytes);
    cl = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL && strtoull(cl, NULL, 10) > c->body_limit) {
        c->too_large = 1;
        return batches_answer(c, url, method);
    }
    c->must_close = 0;
    c->phase      = PH_BODY;
    return MHD_YES;
}

static int authorised(moon_gw_http_t *h, struct MHD_Connection *mc)
{
    const char *key = h->a.cfg.api_key;
    const char *got;
    size_t      n;
    unsigned    diff = 0;

    if (key == NULL || key[0] == '\0') {
        return 1;
    }
    got = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (got == NULL || strncmp(got, "Bearer ", 7) != 0) {
        return 0;
    }
    got += 7;
    n = strlen(key);
    if (strlen(got) != n) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        diff |= (unsigned)(got[i] ^ key[i]); /* the same time whatever matches */
    }
    return diff == 0;
}

static enum MHD_Result serve_get(conn_t *c, const char *url)
{
    moon_gw_http_t *h = c->http;
    moon_gw_error_t err;
    char           *text;
    size_t          len = 0;

    switch (c->route) {
    case ROUTE_HEALTH:
        if (!ready(h, &err)) {
            return respond_error(c, &err);
        }
        pthread_mutex_lock(&h->health_mu);
        len  = strlen(h->health);
        text = moon_malloc(len + 1);
        if (text != NULL) {
            memcpy(text, h->health, len + 1);
        }
        pthread_mutex_unlock(&h->health_mu);
        return respond(c, 200, "application/json", text, len, NULL);
    case ROUTE_METRICS:
        if (moon_gw_metrics_render(h->a.metrics, &text, &len) != MOON_OK) {
            text = NULL;
        }
        return respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, NULL);
    case ROUTE_VERSION:
        text = moon_gw_version_json(MOON_VERSION, &len);
        return respond_json(c, 200, text, len);
    case ROUTE_MODELS:
        text = moon_gw_format_models(h->a.model.model_name, h->created, h->a.model.n_ctx,
                                     (int64_t)atomic_load(&h->weight_version), 1, &len);
        return respond_json(c, 200, text, len);
    default: /* ROUTE_MODEL */
        if (strcmp(url + 11, h->a.model.model_name) != 0) {
            moon_gw_error_set(&err, 404, "model_not_found", "model",
                              "The model `%s` does not exist.", url + 11);
            return respond_error(c, &err);
        }
        text = moon_gw_format_models(h->a.model.model_name, h->created, h->a.model.n_ctx,
                                     (int64_t)atomic_load(&h->weight_version), 0, &len);
        return respond_json(c, 200, text, len);
    }
}

/* ---- the connection's wake-ups (called under the request's wake lock) -------- */

static void conn_park(void *arg)
{
    MHD_suspend_connection(((conn_t *)arg)->mc);
}

static void conn_wake(void *arg)
{
    MHD_resume_connection(((conn_t *)arg)->mc);
}

/* The watcher's hook (its thread): the client left; the resumed connection
 * sees gone and closes, which cancels the request. */
static void conn_hangup(void *arg)
{
    conn_t        *c = arg;
    moon_gw_req_t *on;

    atomic_store(&c->gone, 1);
    moon_gw_req_poke(c->breq);
    /* seq_cst: pairs with next_event's store of parked_on then load of gone */
    on = atomic_load(&c->parked_on);
    if (on != NULL && on != c->breq) {
        moon_gw_req_poke(on);
    }
}

/* Watches the submitted request's socket: a client that leaves while its
 * connection is parked is noticed at once (libmicrohttpd polls no suspended
 * socket). */
static void watch_hangup(conn_t *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);

    c->watched = ci != NULL && moon_gw_hangup_watch(c->http->hangup, ci->connect_fd, conn_hangup, c,
                                                    &c->hangup_slot) == MOON_OK;
    if (!c->watched) {
        MOON_WARN("gateway: request %llu is not watched: a client that leaves is noticed at "
                  "its next event",
                  (unsigned long long)moon_gw_req_id(c->breq));
    }
}

/* ---- events ------------------------------------------------------------------------ */

static void usage_of(const conn_t *c, const moon_serve_done_t *d, moon_gw_usage_t *u)
{
    moon_serve_event_t ev;

    moon_serve_event_of(&d->hdr, &ev);
    moon_gw_usage_of_done(&ev, c->req.details, u);
}

/* The weights that generate the answer (every event of it names the same
 * version): its fingerprint is the gateway's and that version. */
static void stamp_version(conn_t *c, const moon_msg_hdr_t *msg)
{
    if (msg->type != MOON_MSG_SERVE_TOKEN && msg->type != MOON_MSG_SERVE_DONE) {
        return; /* a prefill's rows: its DONE names the version */
    }
    uint64_t v = msg->type == MOON_MSG_SERVE_TOKEN
                     ? ((const moon_serve_token_t *)msg)->weight_version
                     : ((const moon_serve_done_t *)msg)->weight_version;

    snprintf(c->fp, sizeof(c->fp), "%s_v%llu", c->http->a.fingerprint, (unsigned long long)v);
    c->meta.fingerprint = c->fp;
}

static const char *str_of(const moon_msg_hdr_t *msg, moon_span_t span)
{
    return span.n > 0 ? (const char *)MOON_SPAN_PTR(msg, span) : "";
}

/* A DONE that is not an answer: its error (1), or 0. */
static int done_error(const moon_serve_done_t *d, moon_gw_error_t *err)
{
    int is_error = moon_gw_done_error(d->finish, d->status, str_of(&d->hdr, d->message), err);

    if (is_error && d->http_status >= 400 && d->http_status < 600) { /* a request filter's */
        moon_gw_error_set(err, (int)d->http_status, NULL, NULL, "%s", str_of(&d->hdr, d->message));
        if (d->retry_after_s > 0) {
            err->retry_after_s = d->retry_after_s;
        }
    }
    return is_error;
}

/* ---- latencies, as the client sees them ---------------------------------------- */
/* From the request's first byte to when its bytes leave this thread for the
 * socket, with the definitions of `vllm bench serve` and `moonlet bench`
 * (so each interval lies inside the one the client measures, less only the
 * loopback): TTFT at the first text, the end-to-end latency at the last
 * text of an answer that finished (stop or length; a whole answer: when it
 * goes). The actor's clock marks would leave out the hop to this thread,
 * which on a busy machine is most of the difference. */
static double since_start_s(const conn_t *c, uint64_t now_ns)
{
    return (double)(now_ns - c->t_start_ns) * 1e-9;
}

/* Text goes out now. */
static void observe_text(conn_t *c)
{
    c->last_text_ns = moon_now(c->http->a.rt);
    if (!c->ttft_seen) {
        c->ttft_seen = 1;
        moon_gw_metrics_observe(c->http->a.metrics, MOON_GW_M_TTFT, NULL,
                                since_start_s(c, c->last_text_ns));
    }
}

static void observe_end(conn_t *c, const moon_serve_done_t *d)
{
    uint64_t end = c->last_text_ns != 0 ? c->last_text_ns : moon_now(c->http->a.rt);

    if (d->finish == MOON_FINISH_STOP || d->finish == MOON_FINISH_LENGTH) {
        moon_gw_metrics_observe(c->http->a.metrics, MOON_GW_M_E2E, NULL, since_start_s(c, end));
    }
}

/* Appends a chunk (taken) to the stream's pending bytes. */
static void out_append(moon_gw_buf_t *b, char *chunk, size_t len)
{
    if (chunk == NULL) {
        b->failed = 1;
        return;
    }
    moon_gw_buf_append(b, chunk, len);
    moon_free(chunk);
}

/* A TOKEN's logprob into choice k's sum, and into its logprobs object when
 * the client asked for them. */
static void lp_add(conn_t *c, uint32_t k, const moon_msg_hdr_t *msg)
{
    const moon_serve_token_t *t = (const moon_serve_token_t *)msg;

    if (msg->type != MOON_MSG_SERVE_TOKEN || c->req.params.logprobs == 0) {
        return;
    }
    c->ch[k].sum_lp += t->logprob;
    if (c->want_lp > 0 && moon_gw_logprobs_add(&c->ch[k].lp, (int32_t)t->token, t->logprob,
                                               MOON_SPAN_PTR(t, t->top), t->top.n / 2) != MOON_OK) {
        MOON_ERROR("gateway: out of memory gathering logprobs");
    }
}

static moon_gw_request_t *req_of(conn_t *c, uint32_t k);

/* echo with logprobs: a PROMPT_LOGPROBS of choice k into its logprobs, in
 * position order; one a resumed request sends again is left out. */
static void prompt_lp_add(conn_t *c, uint32_t k, const moon_msg_hdr_t *msg)
{
    const moon_serve_prompt_logprobs_t *m  = (const void *)msg;
    const moon_gw_request_t            *r  = req_of(c, k);
    moon_gw_choice_t                   *ch = &c->ch[k];

    if (c->want_lp == 0 || ch->echo == NULL || r->tokens == NULL ||
        m->first != MOON_MAX(ch->prompt_next, 1u)) {
        return;
    }
    if (moon_gw_logprobs_add_prompt(&ch->lp, r->tokens, r->n_tokens, msg) != MOON_OK) {
        MOON_ERROR("gateway: the prompt logprobs of request %llu could not be gathered",
                   (unsigned long long)moon_gw_req_id(ch->breq));
    }
    ch->prompt_next = m->first + m->lp.n;
}

/* A chunk of choice k carrying the logprobs gathered since its last one. */
static char *chunk_lp(conn_t *c, uint32_t k, const char *text, const char *finish, size_t *len_p)
{
    char *lpj = moon_gw_logprobs_take(&c->ch[k].lp);
    char *chunk;

    c->meta.index    = k;
    c->meta.logprobs = lpj;
    chunk            = moon_gw_format_chunk(&c->meta, 0, text, finish, len_p);
    c->meta.logprobs = NULL;
    moon_free(lpj);
    return chunk;
}

/* Choice k's opening: chat's role delta, completions' echoed prompt. */
static void stream_open(conn_t *c, uint32_t k, moon_gw_buf_t *b)
{
    size_t len = 0;
    char  *chunk;

    if (c->ch[k].role_sent) {
        return;
    }
    c->ch[k].role_sent = 1;
    c->meta.index      = k;
    if (c->meta.chat) {
        chunk = moon_gw_format_chunk(&c->meta, 1, NULL, NULL, &len);
        out_append(b, chunk, len);
    } else if (c->ch[k].echo != NULL) { /* with the prompt's logprobs, asked */
        chunk = chunk_lp(c, k, c->ch[k].echo, NULL, &len);
        out_append(b, chunk, len);
    }
}

/* Choice k's DONE (not an error) in a stream: its last text, its finish; the
 * usage and [DONE] after the last choice's. */
static void stream_done(conn_t *c, uint32_t k, const moon_serve_done_t *d, moon_gw_buf_t *b)
{
    const char     *text = str_of(&d->hdr, d->text);
    moon_gw_usage_t u;
    size_t          len = 0;
    char           *chunk;

    if (text[0] != '\0') {
        observe_text(c);
    }
    if (c->n_done == c->n_ch) {
        observe_end(c, d);
    }
    c->meta.index = k;
    if (c->meta.chat && text[0] != '\0') {
        if (c->req.structured.tools) {
            moon_gw_structured_stream(&c->req.structured, &c->meta, text, b);
        } else {
            chunk = chunk_lp(c, k, text, NULL, &len);
            out_append(b, chunk, len);
        }
        text = NULL;
    }
    if (c->meta.chat && c->req.structured.tools) { /* held-back text, then the finish */
        moon_gw_structured_stream_end(&c->req.structured, &c->meta, moon_finish_str(d->finish), b);
    } else {
        chunk = chunk_lp(c, k, c->meta.chat ? NULL : text, moon_finish_str(d->finish), &len);
        out_append(b, chunk, len);
    }
    usage_of(c, d, &c->ch[k].u);
    if (c->n_done < c->n_ch) {
        return;
    }
    c->finished = 1;
    if (c->meta.include_usage) {
        moon_gw_choices_usage(c->ch, c->n_ch, c->per, &u);
        chunk = moon_gw_format_usage_chunk(&c->meta, &u, &len);
        out_append(b, chunk, len);
    }
    moon_gw_buf_puts(b, MOON_GW_SSE_DONE);
}

/* Formats one event of choice k of the stream into c->out. */
static void stream_event(conn_t *c, uint32_t k, const moon_msg_hdr_t *msg)
{
    moon_gw_buf_t b;
    size_t        len = 0;
    char         *chunk;

    if (msg->type == MOON_MSG_SERVE_PROMPT_LOGPROBS) {
        prompt_lp_add(c, k, msg); /* they go out with the echo, at the first token */
        return;
    }
    moon_gw_buf_init(&b);
    stream_open(c, k, &b);
    if (msg->type == MOON_MSG_SERVE_TOKEN) {
        const moon_serve_token_t *t    = (const moon_serve_token_t *)msg;
        const char               *text = str_of(msg, t->text);

        lp_add(c, k, msg);
        if (text[0] != '\0') {
            c->meta.index = k;
            if (c->req.structured.tools) { /* tool calls are split out of the text */
                moon_gw_structured_stream(&c->req.structured, &c->meta, text, &b);
            } else {
                chunk = chunk_lp(c, k, text, NULL, &len);
                out_append(&b, chunk, len);
            }
            observe_text(c);
        }
    } else {
        const moon_serve_done_t *d = (const moon_serve_done_t *)msg;
        moon_gw_error_t          err;

        c->ch[k].got_done = 1;
        c->n_done++;
        if (done_error(d, &err)) {
            c->got_done = 1;
            c->finished = 1; /* the other choices are cancelled when it closes */
            chunk       = moon_gw_format_error_event(&err, &len);
            out_append(&b, chunk, len);
            moon_gw_buf_puts(&b, MOON_GW_SSE_DONE);
        } else {
            stream_done(c, k, d, &b);
            c->got_done = c->finished;
        }
    }
    moon_free(c->out);
    c->out     = NULL;
    c->n_out   = 0;
    c->off_out = 0;
    if (b.len > 0 && moon_gw_buf_take(&b, &c->out, &c->n_out) != MOON_OK) {
        MOON_ERROR("gateway: out of memory formatting a stream chunk");
        c->finished = 1;
    }
    moon_gw_buf_fini(&b);
}

static moon_gw_conn_t conn_of(conn_t *c, uint32_t k);

/* The request of choice k's prompt. */
static moon_gw_request_t *req_of(conn_t *c, uint32_t k)
{
    uint32_t g = k / c->per;

    return g == 0 ? &c->req : &c->more[g - 1];
}

/* 1 when the choices of choice k's prompt go one by one (gw_choices.h):
 * the prompt's own logprobs are asked, which each choice's prefill sends. */
static int fans_out(conn_t *c, uint32_t k)
{
    return c->per > 1 && (req_of(c, k)->params.flags & MOON_SERVE_F_PROMPT_LOGPROBS) != 0;
}

/* Submits choice k (index i in its prompt's group): its prompt's parameters
 * with its own seed. */
static moon_status_t submit_choice(conn_t *c, uint32_t k)
{
    moon_serve_params_t p    = req_of(c, k)->params;
    moon_gw_conn_t      conn = conn_of(c, k);

    p.seed = moon_serve_choice_seed(p.seed, k % c->per);
    return moon_gw_bridge_submit(c->http->a.bridge, &p, &conn, &c->ch[k].breq);
}

/* Prompt g's choices: one SUBMIT of them all (one prefill, the KV forked on
 * the decode instance), or when they fan out its first choice alone (the
 * others follow its first event: submit_rest). */
static moon_status_t submit_prompt(conn_t *c, uint32_t g)
{
    uint32_t       k = g * c->per;
    moon_gw_conn_t conns[MOON_GW_MAX_CHOICES];
    moon_gw_req_t *reqs[MOON_GW_MAX_CHOICES];
    moon_status_t  status;

    if (c->per == 1 || fans_out(c, k)) {
        return submit_choice(c, k);
    }
    for (uint32_t i = 0; i < c->per; i++) {
        conns[i] = conn_of(c, k + i);
    }
    status = moon_gw_bridge_submit_choices(c->http->a.bridge, &req_of(c, k)->params, conns, c->per,
                                           reqs);
    for (uint32_t i = 0; status == MOON_OK && i < c->per; i++) {
        c->ch[k + i].breq = reqs[i];
    }
    return status;
}

/* Fanning out, the choices of a prompt after its first go once that one's
 * first event has come: its prompt is prefilled and its full blocks are in
 * the prefix cache (gw_choices.h). One that cannot be submitted ends the
 * request. */
static void submit_rest(conn_t *c, uint32_t leader)
{
    for (uint32_t k = leader + 1; k < leader + c->per && !c->sub_failed; k++) {
        moon_status_t status = submit_choice(c, k);

        if (status != MOON_OK) {
            c->ch[k].breq = NULL;
            c->sub_failed = 1;
            moon_gw_error_set(&c->sub_err, status == MOON_ERR_NO_RESOURCE ? 429 : 500, NULL, NULL,
                              "choice %u could not be submitted: %s", k, moon_status_str(status));
        }
    }
}

/* An event of choice k came: a prompt's first choice that did not fail
 * starts the others. */
static void on_choice_event(conn_t *c, uint32_t k, const moon_msg_hdr_t *msg)
{
    moon_gw_error_t err;

    if (k % c->per != 0 || c->per == 1 || c->ch[k + 1].breq != NULL || c->sub_failed ||
        (msg->type == MOON_MSG_SERVE_DONE && done_error((const moon_serve_done_t *)msg, &err))) {
        return;
    }
    submit_rest(c, k);
}

/* The next event of any running choice (*k_p: its choice), round robin;
 * NULL when none is queued: *parked_p 1 if the connection parked (on the
 * first running choice: its next event wakes it, and the others' events are
 * read then; the hang-up watcher pokes it), 0 if the client left. */
static const moon_msg_hdr_t *next_event(conn_t *c, uint32_t *k_p, int *parked_p)
{
    *parked_p = 0;
    for (;;) {
        uint32_t k;

        if (atomic_load(&c->gone)) {
            return NULL;
        }
        for (uint32_t j = 0; j < c->n_ch; j++) {
            const moon_msg_hdr_t *msg;

            k = (c->rr + j) % c->n_ch;
            if (c->ch[k].breq == NULL || c->ch[k].got_done) {
                continue;
            }
            msg = moon_gw_req_next(c->ch[k].breq);
            if (msg != NULL) {
                c->rr = (k + 1) % c->n_ch;
                *k_p  = k;
                on_choice_event(c, k, msg);
                return msg;
            }
        }
        for (k = 0; k < c->n_ch && (c->ch[k].breq == NULL || c->ch[k].got_done); k++) {
        }
        if (k == c->n_ch) {
            return NULL; /* nothing runs (not reached: the last DONE ends the answer) */
        }
        /* the watcher pokes the one parked on: it sees this store, or this
         * load sees its gone (both seq_cst) */
        atomic_store(&c->parked_on, c->ch[k].breq);
        if (atomic_load(&c->gone)) {
            return NULL;
        }
        if (moon_gw_req_park(c->ch[k].breq)) {
            *parked_p = 1;
            return NULL;
        }
    }
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    conn_t *c = cls;

    (void)pos;
    for (;;) {
        const moon_msg_hdr_t *msg;
        uint32_t              k      = 0;
        int                   parked = 0;

        if (c->off_out < c->n_out) {
            size_t n = MOON_MIN(max, c->n_out - c->off_out);
            memcpy(buf, c->out + c->off_out, n);
            c->off_out += n;
            return (ssize_t)n;
        }
        if (c->finished) {
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (atomic_load(&c->gone)) {
            return MHD_CONTENT_READER_END_WITH_ERROR; /* closes: cancels */
        }
        msg      = c->first;
        k        = c->first_k;
        c->first = NULL;
        if (msg == NULL) {
            msg = next_event(c, &k, &parked);
        }
        if (msg == NULL) {
            if (parked) {
                return 0; /* suspended: resumed by the next event */
            }
            continue;
        }
        stream_event(c, k, msg);
        moon_msg_release(msg);
        if (c->sub_failed && !c->finished) {
            size_t len = 0;
            moon_free(c->out);
            c->out      = moon_gw_format_error_event(&c->sub_err, &len);
            c->n_out    = c->out != NULL ? len : 0;
            c->off_out  = 0;
            c->finished = 1; /* the choices that run are cancelled when it closes */
        }
    }
}

static enum MHD_Result start_stream(conn_t *c)
{
    struct MHD_Response *resp;
    enum MHD_Result      ret;

    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK_BYTES, stream_reader, c,
                                             NULL);
    if (resp == NULL) {
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    add_cors(c, resp);
    ret = MHD_queue_response(c->mc, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    count_response(c->http, 200);
    set_write_timeout(c);
    c->phase = PH_STREAM;
    return ret;
}

/* Choice k's body of a whole answer, as choice `index` of the response. */
static char *choice_body(conn_t *c, uint32_t k, uint32_t index, const moon_gw_usage_t *u,
                         size_t *len_p)
{
    moon_gw_choice_t *ch = &c->ch[k];
    moon_gw_buf_t     text;
    char             *body;

    moon_gw_buf_init(&text);
    moon_gw_buf_puts(&text, ch->echo != NULL ? ch->echo : "");
    moon_gw_buf_puts(&text, ch->acc.failed ? "" : ch->acc.data);
    c->meta.index    = index;
    c->meta.logprobs = c->want_lp > 0 ? moon_gw_logprobs_take(&ch->lp) : NULL;
    body = moon_gw_structured_response(&c->req.structured, &c->meta, text.failed ? "" : text.data,
                                       ch->finish, u, len_p);
    moon_free((char *)c->meta.logprobs);
    c->meta.logprobs = NULL;
    moon_gw_buf_fini(&text);
    return body;
}

/* Every choice is done: the whole answer, per prompt the n best of its
 * best_of, as choice prompt_index * n + i (OpenAI's order). */
static enum MHD_Result answer_whole(conn_t *c)
{
    uint32_t        n     = c->req.n;
    uint32_t        n_out = c->n_prompts * n;
    char          **bodies;
    moon_gw_usage_t u;
    size_t          len  = 0;
    char           *text = NULL;

    moon_gw_choices_usage(c->ch, c->n_ch, c->per, &u);
    if (n_out == 1) {
        text = choice_body(c, 0, 0, &u, &len);
        return respond_json(c, 200, text, len);
    }
    bodies = moon_calloc(n_out, sizeof(char *));
    if (bodies == NULL) {
        return respond_json(c, 200, NULL, 0);
    }
    for (uint32_t g = 0; g < c->n_prompts; g++) {
        uint32_t order[MOON_GW_MAX_CHOICES];

        moon_gw_choices_rank(c->ch + g * c->per, c->per, n, order);
        for (uint32_t i = 0; i < n; i++) {
            /* best_of == n: no ranking, the choices in their order */
            uint32_t k        = g * c->per + (c->per == n ? i : order[i]);
            bodies[g * n + i] = choice_body(c, k, g * n + i, &u, &len);
        }
    }
    text = moon_gw_choices_merge(bodies, n_out, &len);
    for (uint32_t i = 0; i < n_out; i++) {
        moon_free(bodies[i]);
    }
    moon_free(bodies);
    return respond_json(c, 200, text, len);
}

/* Every input's EMBEDDING and DONE came: the list, in input order. */
static enum MHD_Result answer_embed(conn_t *c)
{
    const uint32_t **vecs = moon_calloc(c->n_ch, sizeof(*vecs));
    uint32_t         dim  = 0;
    size_t           len  = 0;
    char            *text;

    for (uint32_t k = 0; vecs != NULL && k < c->n_ch; k++) {
        const moon_serve_embedding_t *e = (const void *)c->ch[k].rows;
        if (e == NULL || e->vec.n == 0 || (k > 0 && e->vec.n != dim)) {
            moon_free(vecs);
            MOON_WARN("gateway: input %u of an embeddings request got no embedding", k);
            return fail(c, 500, NULL, "%s", "an input got no embedding back");
        }
        dim     = e->vec.n;
        vecs[k] = MOON_SPAN_PTR(e, e->vec);
    }
    if (vecs == NULL) {
        return respond_json(c, 200, NULL, 0);
    }
    text = moon_gw_embed_response(&c->embed, c->http->a.model.model_name, vecs, dim, &len);
    moon_free(vecs);
    return respond_json(c, 200, text, len);
}

/* Resumed (or right after submit): reads what has come. */
static enum MHD_Result on_events(conn_t *c)
{
    for (;;) {
        const moon_msg_hdr_t    *msg;
        const moon_serve_done_t *d;
        moon_gw_error_t          err;
        uint32_t                 k      = 0;
        int                      parked = 0;

        msg = next_event(c, &k, &parked);
        if (msg == NULL) {
            if (parked) {
                return MHD_YES;
            }
            if (atomic_load(&c->gone)) {
                return MHD_NO; /* closes the connection: on_completed cancels */
            }
            continue;
        }
        stamp_version(c, msg);
        if (c->sub_failed) {
            moon_msg_release(msg);
            return respond_error(c, &c->sub_err);
        }
        if (msg->type == MOON_MSG_SERVE_EMBEDDING) {
            moon_msg_release(c->ch[k].rows); /* one sent before a loss */
            c->ch[k].rows = msg;
            continue;
        }
        if (msg->type == MOON_MSG_SERVE_PROMPT_LOGPROBS) {
            prompt_lp_add(c, k, msg);
            moon_msg_release(msg);
            continue;
        }
        if (msg->type == MOON_MSG_SERVE_TOKEN) {
            if (c->req.stream) {
                c->first   = msg;
                c->first_k = k;
                return start_stream(c);
            }
            moon_gw_buf_puts(&c->ch[k].acc, str_of(msg, ((const moon_serve_token_t *)msg)->text));
            lp_add(c, k, msg);
            moon_msg_release(msg);
            continue;
        }
        d = (const moon_serve_done_t *)msg;
        if (done_error(d, &err)) {
            c->ch[k].got_done = 1;
            c->got_done       = 1; /* the other choices are cancelled when it closes */
            moon_msg_release(msg);
            return respond_error(c, &err);
        }
        if (c->req.stream) {
            c->first   = msg;
            c->first_k = k;
            return start_stream(c);
        }
        c->ch[k].got_done = 1;
        c->n_done++;
        moon_gw_buf_puts(&c->ch[k].acc, str_of(msg, d->text));
        c->ch[k].finish = moon_finish_str(d->finish);
        usage_of(c, d, &c->ch[k].u);
        if (c->n_done == c->n_ch) {
            observe_end(c, d);
        }
        moon_msg_release(msg);
        if (c->n_done < c->n_ch) {
            continue;
        }
        c->got_done = 1;
        /* a whole answer: its first token's time is the actor's */
        if (moon_gw_req_times(c->breq)->first_token_ns != 0) {
            c->ttft_seen = 1;
            moon_gw_metrics_observe(c->http->a.metrics, MOON_GW_M_TTFT, NULL,
                                    since_start_s(c, moon_gw_req_times(c->breq)->first_token_ns));
        }
        return c->route == ROUTE_EMBEDDINGS ? answer_embed(c) : answer_whole(c);
    }
}

/* Wakes moon_gw_http_wait_idle (shutdown): a request finished with none left,
 * or one was submitted after quiesce. */
static void idle_notify(moon_gw_http_t *h, int submitted)
{
    pthread_mutex_lock(&h->idle_mu);
    h->idle_gen += (uint64_t)submitted;
    pthread_cond_broadcast(&h->idle_cv);
    pthread_mutex_unlock(&h->idle_mu);
}

static void unadmit(moon_gw_http_t *h)
{
    if (atomic_fetch_sub(&h->n_busy, 1) == 1 && atomic_load(&h->closing)) {
        idle_notify(h, 0);
    }
}

/* Admission: at most max_requests at once; past that a 429 with Retry-After
 * right away (nothing queues without bound). Counted before the readiness
 * check, so a shutdown (quiesce, then wait_idle) sees every request that may
 * still be submitted. */
static int admit(conn_t *c, moon_gw_error_t *err)
{
    moon_gw_http_t *h = c->http;
    uint32_t        n = atomic_fetch_add(&h->n_busy, 1);

    if (h->a.cfg.max_requests > 0 && n >= h->a.cfg.max_requests) {
        unadmit(h);
        MOON_LOG_LIMITED(MOON_LOG_INFO, "gateway: %u requests being served, the limit: 429",
                         h->a.cfg.max_requests);
        moon_gw_error_set(err, 429, NULL, NULL,
                          "the server is serving its limit of %u requests at once; retry later",
                          h->a.cfg.max_requests);
        return 0;
    }
    c->admitted = 1;
    return 1;
}

/* Choice k's connection hooks: a stream wakes at every event; a whole
 * answer at its DONE (the watcher notices a client that leaves before),
 * except the leader of choices that fan out, whose first token also wakes
 * it (the others are submitted then). */
static moon_gw_conn_t conn_of(conn_t *c, uint32_t k)
{
    moon_gw_conn_t conn = {.park = conn_park, .wake = conn_wake, .arg = c};

    conn.token_wake_ns     = c->req.stream ? 0 : UINT64_MAX;
    conn.first_token_wakes = !c->req.stream && k % c->per == 0 && fans_out(c, k);
    conn.arrival_ns        = c->t_start_ns; /* latencies count from the request's first byte */
    return conn;
}

/* The other prompts of a completion's list: each parsed (its prompt picked
 * from the list) and prepared as its own request, with the first's seed. */
static moon_status_t prepare_more(conn_t *c, moon_gw_error_t *err)
{
    moon_gw_http_t *h = c->http;
    moon_status_t   status;

    c->n_prompts = MOON_MAX(c->req.n_prompts, 1u);
    if (c->n_prompts == 1) {
        return MOON_OK;
    }
    c->more = moon_calloc(c->n_prompts - 1, sizeof(*c->more));
    if (c->more == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t g = 1; g < c->n_prompts; g++) {
        moon_gw_request_t *r = &c->more[g - 1];

        status = moon_gw_openai_parse_at(c->body.data, c->body.len, 0, g, r, err);
        if (status == MOON_OK) {
            status = moon_gw_openai_prepare(r, &h->a.model, c->req.params.seed, err);
        }
        if (status != MOON_OK) {
            return status;
        }
        r->params.seed = c->req.params.seed;
    }
    return MOON_OK;
}

/* The request's choices (best_of per prompt), their texts and logprobs;
 * best_of beyond n ranks by logprob, so the cluster sends logprobs then. */
static moon_status_t make_choices(conn_t *c)
{
    const moon_tokenizer_t *tok = c->http->a.model.tok;

    c->per     = MOON_MAX(c->req.best_of, 1u);
    c->n_ch    = c->per * c->n_prompts;
    c->want_lp = c->req.params.logprobs;
    c->ch      = moon_calloc(c->n_ch, sizeof(*c->ch));
    c->echos   = c->req.echo ? moon_calloc(c->n_prompts, sizeof(char *)) : NULL;
    if (c->ch == NULL || (c->req.echo && c->echos == NULL)) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t g = 0; g < c->n_prompts; g++) {
        moon_gw_request_t *r = g == 0 ? &c->req : &c->more[g - 1];

        if (c->per > c->req.n && r->params.logprobs == 0) {
            r->params.logprobs = 1;
        }
        if (c->echos != NULL && (c->echos[g] = moon_gw_echo_text(r, tok)) == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
    }
    for (uint32_t k = 0; k < c->n_ch; k++) {
        moon_gw_request_t *r = req_of(c, k);

        moon_gw_buf_init(&c->ch[k].acc);
        moon_gw_buf_puts(&c->ch[k].acc, "");
        moon_gw_logprobs_init(&c->ch[k].lp, c->req.chat, tok,
                              r->n_tokens > 0 ? r->tokens[r->n_tokens - 1] : -1);
        c->ch[k].echo = c->echos != NULL ? c->echos[k / c->per] : NULL;
    }
    return MOON_OK;
}

/* A choice could not be submitted: the answer says why. */
static enum MHD_Result submit_failed(conn_t *c, moon_status_t status)
{
    if (status == MOON_ERR_NO_RESOURCE) {
        MOON_LOG_LIMITED(MOON_LOG_INFO, "gateway: %u requests on their way to the actor: 429",
                         c->http->a.cfg.max_inflight);
        return fail(c, 429, NULL, "%s", "too many requests in flight, retry later");
    }
    if (status == MOON_ERR_INVALID_PARAM) {
        return fail(c, 400, NULL, "%s", "the request's parameters were refused");
    }
    return fail(c, 500, NULL, "the request could not be submitted: %s", moon_status_str(status));
}

/* The request's choices are submitted: its id (prefix-...), the hang-up watch. */
static void submitted(conn_t *c, const char *prefix)
{
    moon_gw_http_t *h = c->http;

    if (atomic_load(&h->closing)) {
        idle_notify(h, 1); /* submitted after quiesce: the shutdown aborts it */
    }
    watch_hangup(c);
    snprintf(c->id, sizeof(c->id), "%s-%llx%08llx", prefix,
             (unsigned long long)(h->nonce & 0xffffffffull),
             (unsigned long long)moon_gw_req_id(c->breq));
}

/* /v1/embeddings: each input its own request (gw_embed.h), one choice each,
 * answered by a prefill instance; the whole list once every DONE came. */
static enum MHD_Result embed_body(conn_t *c)
{
    moon_gw_http_t     *h = c->http;
    moon_gw_error_t     err;
    moon_serve_params_t p0;
    moon_status_t       status;

    if (!admit(c, &err) || !ready(h, &err)) {
        return respond_error(c, &err);
    }
    status = moon_gw_embed_parse(c->body.data != NULL ? c->body.data : "", c->body.len, &h->a.model,
                                 &c->embed, &err);
    if (status == MOON_ERR_INVALID_PARAM) {
        return respond_error(c, &err);
    }
    c->per       = 1;
    c->n_prompts = c->n_ch = c->embed.n_inputs;
    c->ch                  = status == MOON_OK ? moon_calloc(c->n_ch, sizeof(*c->ch)) : NULL;
    if (c->ch == NULL) {
        return fail(c, 500, NULL, "the request could not be prepared: %s",
                    moon_status_str(status != MOON_OK ? status : MOON_ERR_NO_MEMORY));
    }
    moon_serve_params_default(&p0);
    moon_gw_plugin_params(c->mc, c->body.data, c->body.len, c->session, sizeof(c->session), &p0);
    for (uint32_t k = 0; k < c->n_ch && status == MOON_OK; k++) {
        moon_serve_params_t p;
        moon_gw_conn_t      conn = conn_of(c, k);

        moon_gw_buf_init(&c->ch[k].acc);
        moon_gw_embed_params(&c->embed, k, &p);
        p.key     = p0.key;
        p.session = p0.session;
        status    = moon_gw_bridge_submit(h->a.bridge, &p, &conn, &c->ch[k].breq);
    }
    c->breq = c->ch[0].breq;
    if (status != MOON_OK) {
        return submit_failed(c, status);
    }
    submitted(c, "embd");
    c->meta.id          = c->id;
    c->meta.model       = h->a.model.model_name;
    c->meta.fingerprint = h->a.fingerprint;
    c->phase            = PH_WAIT;
    return on_events(c);
}

/* The body is in: parse, prepare, submit. */
static enum MHD_Result on_body(conn_t *c)
{
    moon_gw_http_t *h = c->http;
    moon_gw_error_t err;
    moon_status_t   status;

    if (c->too_large) {
        moon_gw_error_set(&err, 413, NULL, NULL, "the body is larger than the limit of %zu bytes",
                          h->a.cfg.body_limit_bytes);
        return respond_error(c, &err);
    }
    if (c->route == ROUTE_TOKENIZE || c->route == ROUTE_DETOKENIZE) {
        char  *json = NULL;
        size_t len  = 0;

        status =
            moon_gw_tokenize_answer(c->body.data != NULL ? c->body.data : "", c->body.len,
                                    c->route == ROUTE_DETOKENIZE, &h->a.model, &json, &len, &err);
        if (status == MOON_ERR_INVALID_PARAM) {
            return respond_error(c, &err);
        }
        return respond_json(c, 200, status == MOON_OK ? json : NULL, len);
    }
    if (c->route == ROUTE_EMBEDDINGS) {
        return embed_body(c);
    }
    if (!admit(c, &err) || !ready(h, &err)) {
        return respond_error(c, &err);
    }
    status = moon_gw_openai_parse(c->body.data != NULL ? c->body.data : "", c->body.len,
                                  c->route == ROUTE_CHAT, &c->req, &err);
    if (status == MOON_OK) {
        status = moon_gw_openai_prepare(&c->req, &h->a.model,
                                        h->nonce ^ (c->t_start_ns * 0x9e3779b97f4a7c15ull), &err);
    }
    if (status == MOON_OK) {
        status = prepare_more(c, &err);
    }
    if (status == MOON_ERR_INVALID_PARAM) {
        return respond_error(c, &err);
    }
    if (status != MOON_OK) {
        return fail(c, 500, NULL, "the request could not be prepared: %s", moon_status_str(status));
    }
    moon_gw_plugin_params(c->mc, c->body.data, c->body.len, c->session, sizeof(c->session),
                          &c->req.params);
    status = make_choices(c);
    if (status != MOON_OK) {
        return fail(c, 500, NULL, "the request could not be prepared: %s", moon_status_str(status));
    }
    for (uint32_t g = 1; g < c->n_prompts; g++) { /* the same request's: parsed once */
        c->more[g - 1].params.key     = c->req.params.key;
        c->more[g - 1].params.session = c->req.params.session;
    }
    /* every prompt's choices now (or its first, fanning out: submit_rest) */
    status  = submit_prompt(c, 0);
    c->breq = c->ch[0].breq;
    for (uint32_t g = 1; g < c->n_prompts && status == MOON_OK; g++) {
        status = submit_prompt(c, g);
    }
    if (status != MOON_OK) {
        return submit_failed(c, status);
    }
    submitted(c, c->req.chat ? "chatcmpl" : "cmpl");
    c->meta.id            = c->id;
    c->meta.model         = h->a.model.model_name;
    c->meta.fingerprint   = h->a.fingerprint;
    c->meta.created       = (int64_t)time(NULL);
    c->meta.chat          = c->req.chat;
    c->meta.include_usage = c->req.include_usage;
    c->phase              = PH_WAIT;
    return on_events(c);
}

/* ---- framing ----------------------------------------------------------------------- */

typedef struct {
    unsigned    n_cl, n_te;
    const char *cl, *te;
} framing_t;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    framing_t *f = cls;

    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        f->n_cl++;
        f->cl = value != NULL ? value : "";
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->n_te++;
        f->te = value != NULL ? value : "";
    }
    return MHD_YES;
}

/* Where a request's body ends must be beyond doubt (RFC 9112 6.3), or a
 * proxy in front and this server could split the bytes into requests
 * differently (request smuggling): Content-Length with Transfer-Encoding,
 * two Content-Lengths, or one that is not a number are 400s, a
 * Transfer-Encoding other than chunked a 501; each closes the connection
 * (the rest of its bytes is never read as a request). 1: fine. */
static int framing_ok(conn_t *c, framing_t *f, moon_gw_error_t *err)
{
    MHD_get_connection_values(c->mc, MHD_HEADER_KIND, count_framing, f);
    if (f->n_te > 0 && f->n_cl > 0) {
        moon_gw_error_set(err, 400, NULL, NULL, "%s",
                          "a request with both Content-Length and Transfer-Encoding is refused "
                          "(ambiguous framing)");
    } else if (f->n_te > 1 || (f->n_te == 1 && strcasecmp(f->te, "chunked") != 0)) {
        moon_gw_error_set(err, 501, NULL, NULL,
                          "Transfer-Encoding '%.64s' is not supported (only chunked, once)",
                          f->n_te > 1 ? "(twice)" : f->te);
    } else if (f->n_cl > 1) {
        moon_gw_error_set(err, 400, NULL, NULL, "%s",
                          "a request with more than one Content-Length is refused (ambiguous "
                          "framing)");
    } else if (f->n_cl == 1 && (f->cl[0] == '\0' || strspn(f->cl, "0123456789") != strlen(f->cl) ||
                                strlen(f->cl) > 19)) {
        moon_gw_error_set(err, 400, NULL, NULL, "%s", "Content-Length must be a decimal number");
    } else {
        return 1;
    }
    MOON_LOG_LIMITED(MOON_LOG_INFO, "gateway: %d: %s", err->http, err->message);
    c->must_close = 1;
    return 0;
}

/* The first call for a request: route, method, key, declared length. */
static enum MHD_Result on_start(conn_t *c, const char *url, const char *method)
{
    moon_gw_http_t *h    = c->http;
    int             post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    int get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    const char     *cl;
    moon_gw_error_t err;
    framing_t       f = {0};

    if (!framing_ok(c, &f, &err)) {
        return respond_error(c, &err);
    }
    /* an answer before the body is read closes the connection */
    c->must_close = f.n_te > 0 || (f.n_cl > 0 && strtoull(f.cl, NULL, 10) > 0);
    c->route      = route_of(url);
    if (c->route == ROUTE_NONE) {
        return fail(c, 404, NULL, "no route %s", url);
    }
    if (strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0) {
        /* a CORS preflight: carries no credentials; only an allowed origin is answered */
        const char *origin = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Origin");
        if (!moon_gw_cors_allowed(h->a.cfg.allowed_origins, origin)) {
            MOON_LOG_LIMITED(MOON_LOG_INFO, "gateway: preflight from origin '%s' refused",
                             origin != NULL ? origin : "");
            moon_gw_error_set(&err, 403, NULL, NULL,
                              "origin '%.200s' is not allowed (see --allowed-origins)",
                              origin != NULL ? origin : "");
            return respond_error(c, &err);
        }
        return respond(c, 204, "text/plain", moon_strdup(""), 0, NULL);
    }
    if (c->route == ROUTE_ADMIN) {
        return admin_start(c, get, post);
    }
    if (c->route == ROUTE_BATCHES) {
        return batches_start(c, url, method);
    }
    if (ROUTE_IS_POST(c->route) ? !post : !get) {
        return fail(c, 405, NULL, "method %s is not allowed here", method);
    }
    if ((strncmp(url, "/v1/", 4) == 0 || c->route == ROUTE_TOKENIZE ||
         c->route == ROUTE_DETOKENIZE) &&
        !authorised(h, c->mc)) {
        moon_gw_error_set(&err, 401, NULL, NULL, "%s",
                          "Incorrect API key provided (send it as 'Authorization: Bearer KEY').");
        return respond_error(c, &err);
    }
    if (get) {
        return serve_get(c, url);
    }
    cl = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL && strtoull(cl, NULL, 10) > h->a.cfg.body_limit_bytes) {
        moon_gw_error_set(&err, 413, NULL, NULL, "the body is larger than the limit of %zu bytes",
                          h->a.cfg.body_limit_bytes);
        return respond_error(c, &err);
    }
    c->must_close = 0;
    c->phase      = PH_BODY;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    moon_gw_http_t *h = cls;
    conn_t         *c = *con_cls;
    enum MHD_Result ret;

    (void)version;
    if (c == NULL) {
        c = moon_calloc(1, sizeof(*c));
        if (c == NULL) {
            return MHD_NO;
        }
        c->http       = h;
        c->mc         = mc;
        c->t_start_ns = moon_now(h->a.rt);
        c->body_limit = h->a.cfg.body_limit_bytes;
        moon_gw_buf_init(&c->body);
        atomic_init(&c->gone, 0);
        atomic_init(&c->parked_on, NULL);
        *con_cls = c;
        ret      = on_start(c, url, method);
        moon_gw_guard_set(h->guard, guard_id(mc),
                          c->phase == PH_BODY ? MOON_GW_GUARD_BODY : MOON_GW_GUARD_BUSY);
        return ret;
    }
    switch (c->phase) {
    case PH_BODY:
        if (*upload_data_size > 0) {
            uint64_t limit_ns = (uint64_t)h->a.cfg.body_timeout_s * 1000000000ull;
            if (limit_ns > 0 && moon_now(h->a.rt) - c->t_start_ns > limit_ns) {
                MOON_LOG_LIMITED(MOON_LOG_INFO,
                                 "gateway: a request body took over %u s: connection dropped",
                                 h->a.cfg.body_timeout_s);
                return MHD_NO;
            }
            moon_gw_guard_progress(h->guard, guard_id(mc), *upload_data_size);
            if (c->body.len + *upload_data_size > c->body_limit) {
                c->too_large = 1;
            } else {
                moon_gw_buf_append(&c->body, upload_data, *upload_data_size);
            }
            *upload_data_size = 0;
            return MHD_YES;
        }
        moon_gw_guard_set(h->guard, guard_id(mc), MOON_GW_GUARD_BUSY);
        if (c->body.failed) {
            return fail(c, 500, NULL, "%s", "out of memory reading the body");
        }
        return c->route == ROUTE_ADMIN     ? admin_body(c)
               : c->route == ROUTE_BATCHES ? batches_answer(c, url, method)
                                           : on_body(c);
    case PH_WAIT:
        return on_events(c);
    case PH_ADMIN:
        return admin_answer(c);
    default:
        /* A call after the response is queued (it should not come): nothing to do. */
        *upload_data_size = 0;
        return MHD_YES;
    }
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    moon_gw_http_t *h = cls;
    conn_t         *c = *con_cls;

    /* keep-alive: the next request's head has its deadline from now */
    moon_gw_guard_set(h->guard, guard_id(mc), MOON_GW_GUARD_HEADERS);
    if (c == NULL) {
        return;
    }
    if (c->watched) {
        moon_gw_hangup_unwatch(h->hangup, c->hangup_slot);
    }
    if (c->breq != NULL && !c->got_done) {
        MOON_DEBUG_LOG("gateway: client of request %llu left (%d): cancelling",
                       (unsigned long long)moon_gw_req_id(c->breq), (int)toe);
    }
    for (uint32_t k = 0; k < c->n_ch; k++) {
        if (c->ch[k].breq != NULL) {
            moon_gw_req_close(c->ch[k].breq, !c->ch[k].got_done);
        }
        moon_gw_logprobs_fini(&c->ch[k].lp);
        moon_gw_buf_fini(&c->ch[k].acc);
        moon_msg_release(c->ch[k].rows);
    }
    moon_free(c->ch);
    moon_gw_embed_fini(&c->embed);
    for (uint32_t g = 0; g < c->n_prompts; g++) {
        if (c->echos != NULL) {
            moon_free(c->echos[g]);
        }
        if (g > 0 && c->more != NULL) {
            moon_gw_request_fini(&c->more[g - 1]);
        }
    }
    moon_free(c->echos);
    moon_free(c->more);
    if (c->admitted) {
        unadmit(h);
    }
    if (c->job != NULL) {
        int    http;
        size_t len;
        moon_free(moon_gw_admin_job_take(c->job, &http, &len));
    }
    moon_msg_release(c->first);
    moon_gw_request_fini(&c->req);
    moon_gw_buf_fini(&c->body);
    moon_free(c->out);
    moon_free(c);
    *con_cls = NULL;
    /* libmicrohttpd's threads end without telling us: give the messages this
     * thread cached back to the shared pool now (else they leak at its exit). */
    moon_msg_cache_flush();
}

/* A connection opens (its head's deadline starts) or closes (before its
 * socket does). */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    moon_gw_http_t *h = cls;

    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        uint32_t id = ci != NULL ? moon_gw_guard_open(h->guard, ci->connect_fd) : 0;

        *socket_context = (void *)(uintptr_t)id;
    } else {
        moon_gw_guard_close(h->guard, (uint32_t)(uintptr_t)*socket_context);
        *socket_context = NULL;
    }
}

/* libmicrohttpd's messages are mostly about clients (one that hung up
 * mid-stream, a malformed request): debug level, so a busy server does not
 * flood the log; a bind failure is reported by moon_gw_http_start. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[256];

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    MOON_DEBUG_LOG("gateway: http: %s", line);
}

/* ---- start / stop --------------------------------------------------------------------- */

moon_status_t moon_gw_http_start(const moon_gw_http_args_t *args, moon_gw_http_t **http_p)
{
    moon_gw_http_t             *h;
    struct addrinfo             hints = {0};
    struct addrinfo            *ai    = NULL;
    char                        port[8];
    unsigned                    flags;
    int                         ret;
    const union MHD_DaemonInfo *info;
    moon_gw_guard_config_t      gcfg;
    uint32_t                    cap = MOON_MAX(args->cfg.max_connections, 1u);
    pthread_condattr_t          ca;

    if (args->cfg.host == NULL || args->cfg.body_limit_bytes == 0 || args->bridge == NULL ||
        args->metrics == NULL || args->model.model_name == NULL) {
        MOON_ERROR("gateway: bad http configuration");
        return MOON_ERR_INVALID_PARAM;
    }
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags    = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(port, sizeof(port), "%u", args->cfg.port);
    ret = getaddrinfo(args->cfg.host, port, &hints, &ai);
    if (ret != 0 || ai == NULL) {
        MOON_ERROR("gateway: cannot resolve host %s: %s", args->cfg.host, gai_strerror(ret));
        return MOON_ERR_INVALID_PARAM;
    }
    h = moon_calloc(1, sizeof(*h));
    if (h == NULL) {
        freeaddrinfo(ai);
        return MOON_ERR_NO_MEMORY;
    }
    if (moon_gw_hangup_create(cap, &h->hangup) != MOON_OK) {
        freeaddrinfo(ai);
        moon_free(h);
        return MOON_ERR_IO;
    }
    /* under pressure (7/8 of the slots taken) a connection still sending its
     * head after a second (or its whole header timeout, if shorter), or a body
     * slower than MIN_BODY_RATE, makes room */
    gcfg = (moon_gw_guard_config_t){
        .capacity      = cap,
        .header_ns     = (uint64_t)args->cfg.header_timeout_s * 1000000000ull,
        .body_ns       = (uint64_t)args->cfg.body_timeout_s * 1000000000ull,
        .pressure      = cap - cap / 8,
        .evict_age_ns  = 1000000000ull,
        .min_body_rate = MIN_BODY_RATE,
    };
    if (gcfg.header_ns > 0) {
        gcfg.evict_age_ns = MOON_MIN(gcfg.evict_age_ns, gcfg.header_ns);
    }
    if (moon_gw_guard_create(&gcfg, &h->guard) != MOON_OK) {
        freeaddrinfo(ai);
        moon_gw_hangup_destroy(h->hangup);
        moon_free(h);
        return MOON_ERR_IO;
    }
    pthread_mutex_init(&h->idle_mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->idle_cv, &ca);
    pthread_condattr_destroy(&ca);
    h->a       = *args;
    h->created = (int64_t)time(NULL);
    h->nonce   = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ moon_now(args->rt);
    atomic_init(&h->down, 0);
    atomic_init(&h->closing, 0);
    atomic_init(&h->not_ready, "waiting for the conductor's first report");
    atomic_init(&h->n_busy, 0);
    pthread_mutex_init(&h->health_mu, NULL);
    flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) {
        flags |= MHD_USE_IPv6;
    }
    h->daemon = MHD_start_daemon(
        flags, (uint16_t)args->cfg.port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)args->cfg.idle_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)args->cfg.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned int)args->cfg.max_connections_per_ip, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        h, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned int)MOON_MAX(args->cfg.http_threads, 1u), MHD_OPTION_END);
    freeaddrinfo(ai);
    if (h->daemon == NULL) {
        MOON_ERROR("gateway: cannot listen on %s:%u (in use, or not an address of this host)",
                   args->cfg.host, args->cfg.port);
        moon_gw_guard_destroy(h->guard);
        moon_gw_hangup_destroy(h->hangup);
        pthread_cond_destroy(&h->idle_cv);
        pthread_mutex_destroy(&h->idle_mu);
        moon_free(h);
        return MOON_ERR_IO;
    }
    info    = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info != NULL ? info->port : args->cfg.port;
    *http_p = h;
    return MOON_OK;
}

uint16_t moon_gw_http_port(const moon_gw_http_t *h)
{
    return h->port;
}

void moon_gw_http_set_down(moon_gw_http_t *h, int down)
{
    atomic_store(&h->down, down);
}

void moon_gw_http_set_weight_version(moon_gw_http_t *h, uint64_t version)
{
    atomic_store(&h->weight_version, version);
}

void moon_gw_http_set_ready(moon_gw_http_t *h, const char *why_not)
{
    atomic_store(&h->not_ready, why_not);
}

void moon_gw_http_set_health(moon_gw_http_t *h, const char *json)
{
    pthread_mutex_lock(&h->health_mu);
    snprintf(h->health, sizeof(h->health), "%s", json != NULL ? json : "");
    pthread_mutex_unlock(&h->health_mu);
}

void moon_gw_http_quiesce(moon_gw_http_t *h)
{
    atomic_store(&h->closing, 1);
}

uint32_t moon_gw_http_n_busy(const moon_gw_http_t *h)
{
    return atomic_load(&((moon_gw_http_t *)h)->n_busy);
}

int moon_gw_http_wait_idle(moon_gw_http_t *h, uint64_t deadline_ns, uint64_t *gen_p)
{
    struct timespec ts  = {(time_t)(deadline_ns / 1000000000ull),
                           (long)(deadline_ns % 1000000000ull)};
    int             ret = 0;

    pthread_mutex_lock(&h->idle_mu);
    for (;;) {
        if (atomic_load(&h->n_busy) == 0) {
            ret = 1;
            break;
        }
        if (h->idle_gen != *gen_p) {
            *gen_p = h->idle_gen;
            ret    = 0;
            break;
        }
        if (pthread_cond_timedwait(&h->idle_cv, &h->idle_mu, &ts) != 0) {
            ret = atomic_load(&h->n_busy) == 0 ? 1 : -1; /* ETIMEDOUT */
            break;
        }
    }
    pthread_mutex_unlock(&h->idle_mu);
    return ret;
}

void moon_gw_http_guard_stats(moon_gw_http_t *h, moon_gw_guard_stats_t *stats)
{
    moon_gw_guard_stats(h->guard, stats);
}

void moon_gw_http_stop(moon_gw_http_t *h)
{
    if (h == NULL) {
        return;
    }
    MHD_stop_daemon(h->daemon);
    moon_gw_hangup_destroy(h->hangup); /* after the daemon: no unwatch can come */
    pthread_mutex_destroy(&h->health_mu);
    moon_gw_guard_destroy(h->guard);
    pthread_cond_destroy(&h->idle_cv);
    pthread_mutex_destroy(&h->idle_mu);
    moon_free(h);
}
