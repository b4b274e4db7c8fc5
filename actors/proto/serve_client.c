/* actors/proto/serve_client.c - the client API: SUBMIT/CANCEL builders for actors,
 * and for plain threads a small client actor whose events go to a callback or
 * to a queue under a mutex (the reader blocks on it with a timeout), each
 * request's stream put in order first (serve_order.h). */
#include "moonlet/serve_client.h"

#include "moonlet/alloc.h"
#include "moonlet/htab.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_order.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

void moon_serve_params_default(moon_serve_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->max_tokens = 16;
    p->top_p      = 1.0f;
    p->flags      = MOON_SERVE_F_ADD_BOS;
}

moon_status_t moon_serve_submit_build(moon_addr_t reply_to, uint64_t request_id,
                                      const moon_serve_params_t *p, moon_serve_submit_t **msg_p)
{
    size_t               plen = p->prompt ? strlen(p->prompt) : 0, slen = 0;
    moon_serve_submit_t *m;
    char                *stops;

    if (p == NULL || (p->prompt == NULL && p->n_tokens == 0) ||
        (p->n_tokens > 0 && p->tokens == NULL) || (p->n_stop_ids > 0 && p->stop_ids == NULL) ||
        (p->n_stop > 0 && p->stop == NULL) ||
        (p->n_bias > 0 && (p->bias_ids == NULL || p->bias == NULL)) ||
        p->n_bias > MOON_MSG_MAX_BYTES / 16 || plen > MOON_MSG_MAX_BYTES / 2 ||
        (p->grammar != NULL && p->grammar_len > MOON_MSG_MAX_BYTES / 4) ||
        p->n_tokens > MOON_MSG_MAX_BYTES / 8 || p->n_choices > MOON_SERVE_MAX_CHOICES) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < p->n_stop; i++) {
        if (p->stop[i] == NULL || p->stop[i][0] == '\0') {
            return MOON_ERR_INVALID_PARAM;
        }
        slen += strlen(p->stop[i]) + 1;
    }
    m = moon_msg_new(MOON_MSG_SERVE_SUBMIT, plen + 1 + (size_t)p->n_tokens * 4 +
                                                (size_t)p->n_stop_ids * 4 + (size_t)p->n_bias * 8 +
                                                slen + 40 +
                                                (p->key != NULL ? strlen(p->key) + 1 : 1) +
                                                (p->session != NULL ? strlen(p->session) + 1 : 1) +
                                                (p->grammar != NULL ? p->grammar_len : 0));
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->reply_to           = reply_to;
    m->request_id         = request_id;
    m->slo_class          = p->slo_class;
    m->max_tokens         = p->max_tokens;
    m->temperature        = p->temperature;
    m->top_p              = p->top_p;
    m->top_k              = p->top_k;
    m->seed               = p->seed;
    m->flags              = p->flags;
    m->presence_penalty   = p->presence_penalty;
    m->frequency_penalty  = p->frequency_penalty;
    m->repetition_penalty = p->repetition_penalty;
    m->min_p              = p->min_p;
    m->min_tokens         = p->min_tokens;
    m->logprobs           = p->logprobs;
    m->n_choices          = p->n_choices;
    moon_msg_set_str(m, &m->prompt, p->n_tokens > 0 ? "" : p->prompt);
    if (p->n_bias > 0) {
        uint32_t *b = moon_msg_span_alloc(m, &m->logit_bias, 2 * p->n_bias, 4, 0);
        for (uint32_t i = 0; i < p->n_bias; i++) {
            b[2 * i] = (uint32_t)p->bias_ids[i];
            memcpy(&b[2 * i + 1], &p->bias[i], 4);
        }
    }
    if (p->n_tokens > 0) {
        memcpy(moon_msg_span_alloc(m, &m->tokens, p->n_tokens, 4, 0), p->tokens,
               (size_t)p->n_tokens * 4);
    }
    if (p->n_stop_ids > 0) {
        memcpy(moon_msg_span_alloc(m, &m->stop_ids, p->n_stop_ids, 4, 0), p->stop_ids,
               (size_t)p->n_stop_ids * 4);
    }
    if (slen > 0) {
        stops = moon_msg_span_alloc(m, &m->stop_strs, (uint32_t)slen, 1, 0);
        for (uint32_t i = 0; i < p->n_stop; i++) {
            size_t n = strlen(p->stop[i]) + 1;
            memcpy(stops, p->stop[i], n);
            stops += n;
        }
    }
    moon_msg_set_str(m, &m->key, p->key != NULL ? p->key : "");
    moon_msg_set_str(m, &m->session, p->session != NULL ? p->session : "");
    if (p->grammar != NULL && p->grammar_len > 0) {
        memcpy(moon_msg_span_alloc(m, &m->grammar, p->grammar_len, 1, 0), p->grammar,
               p->grammar_len);
    }
    *msg_p = m;
    return MOON_OK;
}

moon_status_t moon_serve_submit(moon_actor_t *self, moon_addr_t conductor, uint64_t request_id,
                                const moon_serve_params_t *params)
{
    moon_serve_submit_t *m;
    moon_status_t status = moon_serve_submit_build(moon_actor_addr(self), request_id, params, &m);

    if (status != MOON_OK) {
        return status;
    }
    status = moon_send(self, conductor, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return status;
}

static moon_serve_cancel_t *cancel_build(moon_addr_t reply_to, uint64_t request_id)
{
    moon_serve_cancel_t *m = moon_msg_new(MOON_MSG_SERVE_CANCEL, 0);

    if (m != NULL) {
        m->reply_to   = reply_to;
        m->request_id = request_id;
    }
    return m;
}

moon_status_t moon_serve_cancel(moon_actor_t *self, moon_addr_t conductor, uint64_t request_id)
{
    moon_serve_cancel_t *m = cancel_build(moon_actor_addr(self), request_id);

    return m != NULL ? moon_tell(self, conductor, &m->hdr) : MOON_ERR_NO_MEMORY;
}

moon_status_t moon_serve_event_of(const moon_msg_hdr_t *msg, moon_serve_event_t *ev)
{
    memset(ev, 0, sizeof(*ev));
    if (msg->type == MOON_MSG_SERVE_TOKEN) {
        const moon_serve_token_t *t = (const void *)msg;
        ev->kind                    = MOON_SERVE_EV_TOKEN;
        ev->request_id              = t->request_id;
        ev->index                   = t->index;
        ev->token                   = (int32_t)t->token;
        ev->logprob                 = t->logprob;
        ev->text                    = t->text.n ? MOON_SPAN_PTR(t, t->text) : "";
        ev->weight_version          = t->weight_version;
        return MOON_OK;
    }
    if (msg->type == MOON_MSG_SERVE_DONE) {
        const moon_serve_done_t *d = (const void *)msg;
        ev->kind                   = MOON_SERVE_EV_DONE;
        ev->request_id             = d->request_id;
        ev->finish                 = d->finish;
        ev->status                 = d->status;
        ev->n_prompt               = d->n_prompt;
        ev->n_completion           = d->n_completion;
        ev->n_cached               = d->n_cached;
        ev->prefill_instance       = d->prefill_instance;
        ev->decode_instance        = d->decode_instance;
        ev->queue_ns               = d->queue_ns;
        ev->prefill_ns             = d->prefill_ns;
        ev->transfer_ns            = d->transfer_ns;
        ev->ttft_ns                = d->ttft_ns;
        ev->weight_version         = d->weight_version;
        ev->http_status            = d->http_status;
        ev->retry_after_s          = d->retry_after_s;
        ev->text                   = d->text.n ? MOON_SPAN_PTR(d, d->text) : "";
        ev->message                = d->message.n ? MOON_SPAN_PTR(d, d->message) : "";
        return MOON_OK;
    }
    if (msg->type == MOON_MSG_SERVE_EMBEDDING) {
        const moon_serve_embedding_t *e = (const void *)msg;
        ev->kind                        = MOON_SERVE_EV_EMBEDDING;
        ev->request_id                  = e->request_id;
        ev->n_prompt                    = e->n_prompt;
        ev->n_embedding                 = e->vec.n;
        ev->embedding_bits              = e->vec.n ? MOON_SPAN_PTR(e, e->vec) : NULL;
        return MOON_OK;
    }
    return MOON_ERR_INVALID_PARAM;
}

uint32_t moon_serve_event_embedding(const moon_serve_event_t *ev, float *out, uint32_t cap)
{
    if (ev == NULL || ev->kind != MOON_SERVE_EV_EMBEDDING) {
        return 0;
    }
    if (out != NULL && ev->embedding_bits != NULL) {
        /* the wire holds the bits as u32s: copied, not cast */
        memcpy(out, ev->embedding_bits, (size_t)MOON_MIN(cap, ev->n_embedding) * sizeof(float));
    }
    return ev->n_embedding;
}

uint32_t moon_serve_tokens_count(const moon_msg_hdr_t *msg)
{
    const moon_serve_tokens_t *m = (const void *)msg;
    const uint32_t            *end;
    const char                *text;
    uint32_t                   n, prev = 0;

    if (msg->type != MOON_MSG_SERVE_TOKENS) {
        return 0;
    }
    n = m->request_id.n;
    if (m->index.n != n || m->token.n != n || m->text_end.n != n || m->weight_version.n != n) {
        goto bad;
    }
    end  = MOON_SPAN_PTR(m, m->text_end);
    text = MOON_SPAN_PTR(m, m->text);
    for (uint32_t i = 0; i < n; i++) {
        if (end[i] <= prev || end[i] > m->text.n || text[end[i] - 1] != '\0') {
            goto bad;
        }
        prev = end[i];
    }
    return n;
bad:
    MOON_WARN("serve: malformed TOKENS from %llx dropped", (unsigned long long)msg->src);
    return 0;
}

moon_status_t moon_serve_tokens_event(const moon_msg_hdr_t *msg, uint32_t i, moon_serve_event_t *ev)
{
    const moon_serve_tokens_t *m = (const void *)msg;
    const uint32_t            *end;

    memset(ev, 0, sizeof(*ev));
    if (i >= moon_serve_tokens_count(msg)) {
        return MOON_ERR_INVALID_PARAM;
    }
    end                = MOON_SPAN_PTR(m, m->text_end);
    ev->kind           = MOON_SERVE_EV_TOKEN;
    ev->request_id     = ((const uint64_t *)MOON_SPAN_PTR(m, m->request_id))[i];
    ev->index          = ((const uint32_t *)MOON_SPAN_PTR(m, m->index))[i];
    ev->token          = (int32_t)((const uint32_t *)MOON_SPAN_PTR(m, m->token))[i];
    ev->text           = (const char *)MOON_SPAN_PTR(m, m->text) + (i > 0 ? end[i - 1] : 0);
    ev->weight_version = ((const uint64_t *)MOON_SPAN_PTR(m, m->weight_version))[i];
    return MOON_OK;
}

moon_serve_token_t *moon_serve_tokens_split(const moon_msg_hdr_t *msg, uint32_t i)
{
    moon_serve_event_t  ev;
    moon_serve_token_t *t;

    if (moon_serve_tokens_event(msg, i, &ev) != MOON_OK) {
        return NULL;
    }
    t = moon_msg_new(MOON_MSG_SERVE_TOKEN, strlen(ev.text) + 1);
    if (t == NULL) {
        return NULL;
    }
    t->hdr.src    = msg->src;
    t->request_id = ev.request_id;
    t->index      = ev.index;
    t->token      = (uint32_t)ev.token;
    moon_msg_set_str(t, &t->text, ev.text);
    t->weight_version = ev.weight_version;
    return t;
}

void moon_serve_stats_of(const moon_serve_stats_reply_t *m, moon_serve_stats_t *s)
{
    const uint64_t *fin   = MOON_SPAN_PTR(m, m->finished);
    const uint32_t *used  = MOON_SPAN_PTR(m, m->blocks_used);
    const uint32_t *total = MOON_SPAN_PTR(m, m->blocks_total);
    uint32_t        split = m->n_prefill;

    memset(s, 0, sizeof(*s));
    s->n_submitted = m->n_submitted;
    s->n_placed    = m->n_placed;
    s->n_rejected  = m->n_rejected;
    s->n_errors    = m->n_errors;
    s->in_flight   = m->in_flight;
    for (uint32_t i = 0; i < MOON_MIN(m->finished.n, 5u); i++) {
        s->n_finished[i] = fin[i];
    }
    s->n_prefill_up     = m->n_prefill_up;
    s->n_decode_up      = m->n_decode_up;
    s->running          = m->running;
    s->waiting          = m->waiting;
    s->store_hit_tokens = m->store_hit_tokens;
    s->computed_tokens  = m->computed_tokens;
    for (uint32_t i = 0; i < m->blocks_used.n && i < m->blocks_total.n; i++) {
        if (i < split) {
            s->blocks_used_prefill += used[i];
            s->blocks_total_prefill += total[i];
        } else {
            s->blocks_used_decode += used[i];
            s->blocks_total_decode += total[i];
        }
    }
}

/* ---- the thread client ------------------------------------------------------ */

typedef struct qnode {
    struct qnode   *next;
    moon_msg_hdr_t *msg;
} qnode_t;

struct moon_serve_client {
    moon_runtime_t            *rt;
    moon_serve_client_config_t cfg;
    moon_addr_t                addr;
    _Atomic uint64_t           next_id;
    pthread_mutex_t            lock;
    pthread_cond_t             cond;
    qnode_t                   *head, *tail; /* under lock */
    moon_serve_stats_t         stats;       /* under lock */
    uint64_t                   stats_seq;   /* replies received (under lock) */
};

/* A request's stream on its way to the user: put in order (its first token
 * may come after later ones, serve_msgs.h). ended_ns: when it ended (its
 * DONE went out); the entry stays a while so that a straggler (a first
 * token after a DONE that did not count it) is dropped, not taken for a
 * new stream. */
typedef struct {
    uint64_t           request_id;
    moon_serve_order_t order;
    uint64_t           ended_ns;
} client_stream_t;

/* A stream's entry outlives its end by this much. */
#define CLIENT_STREAM_LINGER_NS (5 * MOON_SERVE_ORDER_WAIT_NS)
/* How often waits and lingering entries are looked at. */
#define CLIENT_SWEEP_NS 250000000ull

static void stream_free(void *elem, void *arg)
{
    (void)arg;
    moon_serve_order_fini(&((client_stream_t *)elem)->order);
}

static const moon_htab_type_t stream_type = {
    .elem_bytes = sizeof(client_stream_t),
    .key_bytes  = sizeof(uint64_t),
    .elem_free  = stream_free,
};

typedef struct {
    moon_serve_client_t *c;
    moon_htab_t         *streams; /* request id -> client_stream_t (the actor's thread only) */
    uint64_t             sweep_timer;
} client_actor_t;

static moon_status_t client_init(moon_actor_t *self, const void *args)
{
    client_actor_t *a = moon_actor_state(self);
    moon_status_t   status;

    a->c   = (moon_serve_client_t *)args;
    status = moon_htab_create(&stream_type, NULL, 0, 0, &a->streams);
    if (status == MOON_OK) {
        status = moon_timer_start(self, CLIENT_SWEEP_NS, CLIENT_SWEEP_NS, 0, &a->sweep_timer);
    }
    return status;
}

static void client_fini(moon_actor_t *self)
{
    moon_htab_destroy(((client_actor_t *)moon_actor_state(self))->streams);
}

/* One message in order (TOKEN, DONE, EMBEDDING) to the user. */
static void client_deliver(void *arg, const moon_msg_hdr_t *msg)
{
    moon_serve_client_t *c = arg;
    qnode_t             *q;

    if (c->cfg.on_event != NULL) {
        moon_serve_event_t ev;
        moon_serve_event_of(msg, &ev);
        c->cfg.on_event(c->cfg.arg, &ev);
        return;
    }
    q = moon_malloc(sizeof(*q));
    if (q == NULL) {
        MOON_ERROR("serve_client: no memory to queue an event: dropped");
        return;
    }
    moon_msg_retain(msg);
    q->msg  = (moon_msg_hdr_t *)msg;
    q->next = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->tail != NULL) {
        c->tail->next = q;
    } else {
        c->head = q;
    }
    c->tail = q;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

/* Feeds a TOKEN or DONE of request id to its stream (made at its first
 * message: a thread client's streams start at index 0). */
static void client_feed(moon_actor_t *self, uint64_t id, const moon_msg_hdr_t *msg)
{
    client_actor_t  *a   = moon_actor_state(self);
    uint64_t         now = moon_now(moon_actor_runtime(self));
    client_stream_t *s   = moon_htab_find(a->streams, &id);
    client_stream_t  fresh;

    if (s == NULL) {
        fresh.request_id = id;
        fresh.ended_ns   = 0;
        moon_serve_order_init(&fresh.order, 0);
        if (moon_htab_insert(a->streams, &id, &fresh, (void **)&s) != MOON_OK) {
            MOON_WARN("serve_client: no memory to order request %llu: passed on as it comes",
                      (unsigned long long)id);
            client_deliver(a->c, msg);
            return;
        }
    }
    if (s->ended_ns == 0 && moon_serve_order_feed(&s->order, msg, now, client_deliver, a->c)) {
        s->ended_ns = now;
    }
}

static moon_status_t client_on_event(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    client_actor_t *a = moon_actor_state(self);

    switch (msg->type) {
    case MOON_MSG_SERVE_TOKENS: /* entries of several requests: each its own TOKEN */
        for (uint32_t i = 0, n = moon_serve_tokens_count(msg); i < n; i++) {
            moon_serve_token_t *t = moon_serve_tokens_split(msg, i);
            if (t == NULL) {
                MOON_WARN("serve_client: no memory for a token of a step's batch");
                continue; /* its stream's deadline ends it */
            }
            client_feed(self, t->request_id, &t->hdr);
            moon_msg_release(&t->hdr);
        }
        break;
    case MOON_MSG_SERVE_TOKEN:
        client_feed(self, ((const moon_serve_token_t *)(const void *)msg)->request_id, msg);
        break;
    case MOON_MSG_SERVE_DONE:
        client_feed(self, ((const moon_serve_done_t *)(const void *)msg)->request_id, msg);
        break;
    default:
        client_deliver(a->c, msg); /* EMBEDDING: before its DONE, from the same sender */
        break;
    }
    return MOON_OK;
}

/* The periodic sweep: waits past their deadline end their streams (one
 * that never had its DONE is cancelled: it may still run), and ended
 * streams' entries go once they lingered. */
static moon_status_t client_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    client_actor_t  *a   = moon_actor_state(self);
    uint64_t         now = moon_now(moon_actor_runtime(self));
    size_t           pos = 0;
    client_stream_t *s;

    (void)msg;
    while ((s = moon_htab_next(a->streams, &pos)) != NULL) {
        if (s->ended_ns != 0) {
            if (now - s->ended_ns > CLIENT_STREAM_LINGER_NS) {
                moon_htab_remove_at(a->streams, s);
                pos = 0; /* removal shifts entries back: start over (few) */
            }
            continue;
        }
        int r =
            moon_serve_order_expire(&s->order, now, MOON_SERVE_ORDER_WAIT_NS, client_deliver, a->c);
        if (r == 2) {
            moon_serve_cancel(self, a->c->cfg.conductor, s->request_id);
        }
        s->ended_ns = r != 0 ? now : 0;
    }
    return MOON_OK;
}

/* From the client's own thread (src NONE): ask the conductor; its reply
 * comes back here (src the conductor). */
static moon_status_t client_on_stats(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    moon_serve_client_t *c = ((client_actor_t *)moon_actor_state(self))->c;

    if (msg->type == MOON_MSG_SERVE_STATS) {
        moon_serve_stats_req_t *q = moon_msg_new(MOON_MSG_SERVE_STATS, 0);
        if (q != NULL) {
            q->req = ((const moon_serve_stats_req_t *)msg)->req;
            moon_tell(self, c->cfg.conductor, &q->hdr);
        }
        return MOON_OK;
    }
    pthread_mutex_lock(&c->lock);
    moon_serve_stats_of((const void *)msg, &c->stats);
    c->stats_seq++;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return MOON_OK;
}

static const moon_actor_ops_t client_ops = {
    .name        = "serve_client",
    .state_bytes = sizeof(client_actor_t),
    .init        = client_init,
    .fini        = client_fini,
    .on_msg      = {[MOON_MSG_SYS_TIMER]         = client_on_timer,
                    [MOON_MSG_SERVE_TOKEN]       = client_on_event,
                    [MOON_MSG_SERVE_TOKENS]      = client_on_event,
                    [MOON_MSG_SERVE_DONE]        = client_on_event,
                    [MOON_MSG_SERVE_EMBEDDING]   = client_on_event,
                    [MOON_MSG_SERVE_STATS]       = client_on_stats,
                    [MOON_MSG_SERVE_STATS_REPLY] = client_on_stats},
};

moon_status_t moon_serve_client_create(moon_runtime_t *rt, const moon_serve_client_config_t *cfg,
                                       moon_serve_client_t **client_p)
{
    moon_serve_client_t *c;
    moon_spawn_opts_t    opts = {.flags = MOON_SPAWN_CONTROL};
    moon_status_t        status;

    if (rt == NULL || cfg == NULL || cfg->conductor == MOON_ADDR_NONE || client_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_serve_msgs_register();
    if (status != MOON_OK) {
        return status;
    }
    c = moon_calloc(1, sizeof(*c));
    if (c == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    c->rt  = rt;
    c->cfg = *cfg;
    atomic_init(&c->next_id, 1);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    status = moon_spawn(rt, &client_ops, c, &opts, &c->addr);
    if (status != MOON_OK) {
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        moon_free(c);
        return status;
    }
    *client_p = c;
    return MOON_OK;
}

void moon_serve_client_destroy(moon_serve_client_t *c)
{
    if (c == NULL) {
        return;
    }
    moon_stop(c->rt, c->addr, MOON_OK);
    (void)moon_actor_wait_gone(c->rt, c->addr, 2000); /* its handlers use c */
    while (c->head != NULL) {
        qnode_t *q = c->head;
        c->head    = q->next;
        moon_msg_release(q->msg);
        moon_free(q);
    }
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    moon_free(c);
}

moon_status_t moon_serve_client_submit(moon_serve_client_t *c, const moon_serve_params_t *params,
                                       uint64_t *request_id_p)
{
    /* choice i's events carry id + i */
    uint64_t id = atomic_fetch_add(&c->next_id, params->n_choices > 1 ? params->n_choices : 1);
    moon_serve_submit_t *m;
    moon_status_t        status = moon_serve_submit_build(c->addr, id, params, &m);

    if (status != MOON_OK) {
        return status;
    }
    status = moon_runtime_send(c->rt, c->cfg.conductor, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
        return status;
    }
    if (request_id_p != NULL) {
        *request_id_p = id;
    }
    return MOON_OK;
}

moon_status_t moon_serve_client_cancel(moon_serve_client_t *c, uint64_t request_id)
{
    moon_serve_cancel_t *m = cancel_build(c->addr, request_id);
    moon_status_t        status;

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = moon_runtime_send(c->rt, c->cfg.conductor, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return status;
}

static struct timespec deadline_after(uint64_t timeout_ns)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    timeout_ns += (uint64_t)ts.tv_nsec;
    ts.tv_sec += (time_t)(timeout_ns / 1000000000ull);
    ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
    return ts;
}

moon_status_t moon_serve_client_next(moon_serve_client_t *c, uint64_t timeout_ns,
                                     moon_serve_event_t *ev)
{
    struct timespec ts = deadline_after(timeout_ns);
    qnode_t        *q;
    int             ret = 0;

    pthread_mutex_lock(&c->lock);
    while (c->head == NULL && ret != ETIMEDOUT) {
        ret = pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    q = c->head;
    if (q != NULL) {
        c->head = q->next;
        if (c->head == NULL) {
            c->tail = NULL;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (q == NULL) {
        return MOON_ERR_TIMED_OUT;
    }
    moon_serve_event_of(q->msg, ev);
    ev->msg_ = q->msg;
    moon_free(q);
    return MOON_OK;
}

void moon_serve_event_fini(moon_serve_event_t *ev)
{
    if (ev != NULL) {
        moon_msg_release(ev->msg_);
        ev->msg_ = NULL;
    }
}

moon_status_t moon_serve_client_stats(moon_serve_client_t *c, uint64_t timeout_ns,
                                      moon_serve_stats_t *stats_p)
{
    struct timespec         ts = deadline_after(timeout_ns);
    moon_serve_stats_req_t *q  = moon_msg_new(MOON_MSG_SERVE_STATS, 0);
    uint64_t                seq;
    int                     ret = 0;

    if (q == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&c->lock);
    seq = c->stats_seq;
    pthread_mutex_unlock(&c->lock);
    if (moon_runtime_send(c->rt, c->addr, &q->hdr) != MOON_OK) {
        moon_msg_release(&q->hdr);
        return MOON_ERR_NO_ACTOR;
    }
    pthread_mutex_lock(&c->lock);
    while (c->stats_seq == seq && ret != ETIMEDOUT) {
        ret = pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    if (c->stats_seq != seq) {
        *stats_p = c->stats;
    }
    pthread_mutex_unlock(&c->lock);
    return ret == ETIMEDOUT && c->stats_seq == seq ? MOON_ERR_TIMED_OUT : MOON_OK;
}

moon_status_t moon_serve_client_wait_ready(moon_serve_client_t *c, uint32_t n_prefill,
                                           uint32_t n_decode, uint64_t timeout_ns)
{
    struct timespec t0, t;
    uint64_t        waited = 0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (waited < timeout_ns) {
        moon_serve_stats_t s;
        if (moon_serve_client_stats(c, timeout_ns - waited, &s) == MOON_OK &&
            s.n_prefill_up >= n_prefill && s.n_decode_up >= n_decode) {
            return MOON_OK;
        }
        nanosleep(&(struct timespec){0, 5000000}, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t);
        waited = (uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t.tv_nsec -
                 (uint64_t)t0.tv_nsec;
    }
    return MOON_ERR_TIMED_OUT;
}
