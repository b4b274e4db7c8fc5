/* actors/gateway.c - the gateway actor (see gateway.h): owns the HTTP server,
 * the bridge and the model facts; turns TOKEN and DONE into metrics and hands
 * them to their connections. */
#include "gateway.h"

#include "gw_bridge.h"
#include "gw_http.h"
#include "gw_template.h"
#include "moonlet/alloc.h"
#include "moonlet/gguf.h"
#include "moonlet/log.h"
#include "moonlet/model.h"
#include "moonlet/tokenizer.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct {
    moon_addr_t           conductor;
    moon_gateway_config_t cfg;
    char                 *host, *api_key, *model_name, *fingerprint, *wait_roles;
    moon_tokenizer_t     *tok;
    moon_gw_template_t    tpl;
    uint32_t              n_ctx;
    moon_gw_metrics_t    *metrics;
    int                   own_metrics;
    moon_gw_bridge_t     *bridge;
    moon_gw_http_t       *http;
    uint32_t              n_running; /* live requests past their first token */
} gw_state_t;

void moon_gateway_config_default(moon_gateway_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->host              = "127.0.0.1";
    cfg->port              = 8000;
    cfg->body_limit_bytes  = 4u << 20;
    cfg->idle_timeout_s    = 30;
    cfg->request_timeout_s = 60;
    cfg->http_threads      = 2;
    cfg->max_connections   = 1024;
    cfg->max_inflight      = 4096;
}

/* "models/stories260K.gguf" -> "stories260K" */
static char *stem_of(const char *path)
{
    const char *base = strrchr(path, '/');
    const char *dot;
    size_t      n;
    char       *s;

    base = base != NULL ? base + 1 : path;
    dot  = strrchr(base, '.');
    n    = dot != NULL && dot != base ? (size_t)(dot - base) : strlen(base);
    s    = moon_malloc(n + 1);
    if (s != NULL) {
        memcpy(s, base, n);
        s[n] = '\0';
    }
    return s;
}

typedef struct {
    const moon_gguf_t *gguf;
    uint64_t           n_vocab;
} special_arg_t;

/* A token id by its text, from the file's vocabulary. */
static int32_t find_special(void *arg, const char *text)
{
    special_arg_t *a = arg;
    size_t         n = strlen(text);

    for (uint64_t i = 0; i < a->n_vocab; i++) {
        const char *s   = NULL;
        uint64_t    len = 0;

        if (moon_gguf_get_arr_str(a->gguf, "tokenizer.ggml.tokens", i, &s, &len) == MOON_OK &&
            len == n && memcmp(s, text, n) == 0) {
            return (int32_t)i;
        }
    }
    return -1;
}

static moon_status_t load_model(gw_state_t *st, const char *path)
{
    moon_gguf_t        *gguf = NULL;
    moon_model_config_t mc;
    moon_status_t       status;
    const char         *jinja = NULL;
    uint64_t            len   = 0;
    special_arg_t       sa;

    status = moon_gguf_open(path, &gguf);
    if (status != MOON_OK) {
        MOON_ERROR("gateway: cannot open model %s: %s", path, moon_status_str(status));
        return status;
    }
    status = moon_tokenizer_create(gguf, &st->tok);
    if (status != MOON_OK) {
        MOON_ERROR("gateway: model %s has no usable tokenizer: %s", path, moon_status_str(status));
        goto out;
    }
    if (moon_model_config_from_gguf(gguf, &mc) == MOON_OK) {
        st->n_ctx = mc.seq_len;
    }
    if (moon_gguf_get_str(gguf, "tokenizer.chat_template", &jinja, &len) != MOON_OK) {
        jinja = NULL;
        len   = 0;
    }
    sa.gguf    = gguf;
    sa.n_vocab = moon_tokenizer_n_vocab(st->tok);
    moon_gw_template_init(&st->tpl, jinja, (size_t)len, moon_tokenizer_bos(st->tok),
                          moon_tokenizer_eos(st->tok), jinja != NULL ? find_special : NULL, &sa);
    if (!st->tpl.recognised) {
        MOON_WARN("gateway: the model's chat template is none of chatml, llama2, zephyr: chat "
                  "prompts use the plain template");
    }
out:
    moon_gguf_close(gguf);
    return status;
}

static void set_gauges(gw_state_t *st)
{
    uint32_t live = moon_gw_bridge_n_live(st->bridge);

    moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_RUNNING, NULL, st->n_running);
    moon_gw_metrics_set_gauge(st->metrics, MOON_GW_M_WAITING, NULL,
                              live > st->n_running ? live - st->n_running : 0);
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

    if (args == NULL || args->conductor == MOON_ADDR_NONE || args->config.host == NULL) {
        MOON_ERROR("gateway: needs a conductor address and a host");
        return MOON_ERR_INVALID_PARAM;
    }
    st->conductor = args->conductor;
    st->cfg       = args->config;
    st->host      = moon_strdup(args->config.host);
    st->api_key   = args->config.api_key != NULL ? moon_strdup(args->config.api_key) : NULL;
    st->wait_roles = moon_strdup(args->wait_roles != NULL ? args->wait_roles : "");
    if (st->host == NULL || st->wait_roles == NULL ||
        (args->config.api_key != NULL && st->api_key == NULL)) {
        goto err;
    }
    st->cfg.host    = st->host;
    st->cfg.api_key = st->api_key;
    if (args->model_path != NULL) {
        status = load_model(st, args->model_path);
        if (status != MOON_OK) {
            goto err;
        }
    } else {
        moon_gw_template_init(&st->tpl, NULL, 0, -1, -1, NULL, NULL);
    }
    status = MOON_ERR_NO_MEMORY;
    st->model_name = args->model_name != NULL   ? moon_strdup(args->model_name)
                     : args->model_path != NULL ? stem_of(args->model_path)
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
    status = moon_gw_bridge_create(rt, moon_actor_addr(self), st->cfg.max_inflight, &st->bridge);
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
    ha.model.n_vocab    = st->tok != NULL ? moon_tokenizer_n_vocab(st->tok) : 0;
    ha.fingerprint      = st->fingerprint;
    ha.wait_roles       = st->wait_roles;
    status              = moon_gw_http_start(&ha, &st->http);
    if (status != MOON_OK) {
        goto err;
    }
    status = moon_monitor(self, st->conductor, 0);
    if (status != MOON_OK) {
        MOON_WARN("gateway: cannot monitor the conductor: %s", moon_status_str(status));
    }
    if (args->port_p != NULL) {
        *args->port_p = moon_gw_http_port(st->http);
    }
    MOON_INFO("gateway: listening on http://%s:%u (model %s, context %u, chat template %s)",
              st->host, moon_gw_http_port(st->http), st->model_name, st->n_ctx,
              moon_gw_template_name(st->tpl.kind));
    set_gauges(st);
    return MOON_OK;

err:
    moon_gw_bridge_destroy(st->bridge);
    if (st->own_metrics) {
        moon_gw_metrics_destroy(st->metrics);
    }
    moon_tokenizer_destroy(st->tok);
    moon_free(st->host);
    moon_free(st->api_key);
    moon_free(st->wait_roles);
    moon_free(st->model_name);
    moon_free(st->fingerprint);
    return status;
}

static void gw_fini(moon_actor_t *self)
{
    gw_state_t     *st   = moon_actor_state(self);
    struct timespec nap  = {0, 10 * 1000 * 1000};

    moon_gw_http_quiesce(st->http);
    moon_gw_bridge_cancel_all(st->bridge, self, st->conductor);
    /* No connection may stay parked when the server stops: end every request
     * and let the connections finish (bounded: 5 s). */
    for (int i = 0; i < 500; i++) {
        moon_gw_bridge_abort(st->bridge, MOON_ERR_CANCELED, "the gateway is stopping");
        if (moon_gw_http_n_busy(st->http) == 0) {
            break;
        }
        nanosleep(&nap, NULL);
    }
    moon_gw_http_stop(st->http);
    moon_gw_bridge_destroy(st->bridge);
    if (st->own_metrics) {
        moon_gw_metrics_destroy(st->metrics);
    }
    moon_tokenizer_destroy(st->tok);
    moon_free(st->host);
    moon_free(st->api_key);
    moon_free(st->wait_roles);
    moon_free(st->model_name);
    moon_free(st->fingerprint);
}

static moon_status_t gw_on_wake(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t *st = moon_actor_state(self);

    (void)msg;
    moon_gw_bridge_drain(st->bridge, self, st->conductor);
    set_gauges(st);
    return MOON_OK;
}

static double secs(uint64_t ns)
{
    return (double)ns * 1e-9;
}

static moon_status_t gw_on_token(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t               *st  = moon_actor_state(self);
    const moon_serve_token_t *tok = (const moon_serve_token_t *)msg;
    moon_gw_req_t            *req = moon_gw_bridge_find(st->bridge, tok->request_id);
    moon_gw_req_times_t      *t;
    uint64_t                  now = moon_now(moon_actor_runtime(self));

    if (req == NULL) {
        MOON_DEBUG_LOG("gateway: token of unknown request %llu dropped",
                       (unsigned long long)tok->request_id);
        return MOON_OK;
    }
    t = moon_gw_req_times_mut(req);
    if (t->first_token_ns == 0) {
        t->first_token_ns = now;
        moon_gw_metrics_observe(st->metrics, MOON_GW_M_TTFT, NULL, secs(now - t->arrival_ns));
        st->n_running++;
        set_gauges(st);
    } else {
        moon_gw_metrics_observe(st->metrics, MOON_GW_M_ITL, NULL, secs(now - t->last_token_ns));
    }
    t->last_token_ns = now;
    t->n_tokens++;
    moon_gw_bridge_deliver(st->bridge, req, msg);
    return MOON_OK;
}

static moon_status_t gw_on_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t              *st  = moon_actor_state(self);
    const moon_serve_done_t *d   = (const moon_serve_done_t *)msg;
    moon_gw_req_t           *req = moon_gw_bridge_find(st->bridge, d->request_id);
    moon_gw_metrics_t       *m   = st->metrics;
    moon_gw_req_times_t     *t;
    uint64_t                 now = moon_now(moon_actor_runtime(self));
    char                     labels[48];

    if (req == NULL) {
        MOON_DEBUG_LOG("gateway: done of unknown request %llu dropped",
                       (unsigned long long)d->request_id);
        return MOON_OK;
    }
    t = moon_gw_req_times_mut(req);
    snprintf(labels, sizeof(labels), "finished_reason=\"%s\"", moon_finish_str(d->finish));
    moon_gw_metrics_add(m, MOON_GW_M_SUCCESS, labels, 1);
    if (d->finish == MOON_FINISH_REJECTED) {
        moon_gw_metrics_add(m, MOON_GW_M_REJECTED, NULL, 1);
    }
    if (d->finish == MOON_FINISH_STOP || d->finish == MOON_FINISH_LENGTH) {
        moon_gw_metrics_observe(m, MOON_GW_M_E2E, NULL, secs(now - t->arrival_ns));
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
    if (t->first_token_ns != 0 && st->n_running > 0) {
        st->n_running--;
    }
    moon_gw_bridge_deliver(st->bridge, req, msg);
    set_gauges(st);
    return MOON_OK;
}

static moon_status_t gw_on_down(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    gw_state_t            *st   = moon_actor_state(self);
    const moon_sys_down_t *down = (const moon_sys_down_t *)msg;
    uint32_t               n;

    if (down->actor != st->conductor) {
        return MOON_OK;
    }
    moon_gw_http_set_down(st->http, 1);
    n = moon_gw_bridge_fail_all(st->bridge, MOON_ERR_PEER_LOST, "the conductor is gone");
    st->n_running = 0;
    set_gauges(st);
    MOON_ERROR("gateway: the conductor ended (%s): %u requests failed, new ones get 503",
               moon_status_str(down->reason), n);
    return MOON_OK;
}

const moon_actor_ops_t moon_gateway_ops = {
    .name        = "gateway",
    .state_bytes = sizeof(gw_state_t),
    .init        = gw_init,
    .fini        = gw_fini,
    .on_msg =
        {
            [MOON_MSG_GW_WAKE]    = gw_on_wake,
            [MOON_MSG_SERVE_TOKEN] = gw_on_token,
            [MOON_MSG_SERVE_DONE]  = gw_on_done,
            [MOON_MSG_SYS_DOWN]    = gw_on_down,
        },
};
