/* actors/plugin/plugin_hooks.c - the conductor's gate and the event emission
 * (plugin_hooks.h), and the hooks' messages (plugin.h). A request waiting for
 * filters holds a slot: its SUBMIT (a reference), its tokens, the filter it
 * is at and that filter's deadline timer. The gate also remembers, for the
 * requests it saw admitted, the key and arrival the FINISHED event reports. */
#include "plugin_hooks.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/sys_msgs.h"

#include <stdio.h>
#include <string.h>

MOON_MSG_DEFINE(MOON_PLUGIN_MSGS, moon_plugin_msg_descs)

#define GATE_SLOTS_MAX 4096u
#define GATE_INFO_MAX (1u << 16)
#define GATE_KEY_MAX 48u

typedef struct {
    uint32_t                   gen; /* 0: free */
    const moon_serve_submit_t *m;
    int32_t                   *ids;
    uint32_t                   n;
    uint32_t                   filter; /* the filter it waits for */
    uint64_t                   timer;
    moon_serve_submit_t       *changed; /* a copy once a verdict changed a parameter */
} slot_t;

typedef struct {
    moon_addr_t client; /* MOON_ADDR_NONE: free */
    uint64_t    request_id;
    uint64_t    arrival_ns;
    uint32_t    n_prompt;
    char        key[GATE_KEY_MAX];
} info_t;

struct moon_plugin_gate {
    slot_t   *slots;
    uint32_t  n_slots;
    uint32_t *free; /* (n_slots) indices of free slots, a stack of n_free */
    uint32_t  n_free;
    uint32_t  next_gen;
    info_t   *info; /* open addressing, n_info a power of two; NULL without FINISHED observers */
    uint32_t  n_info;
};

const char *moon_plugin_ev_str(uint32_t kind)
{
    switch (kind) {
    case MOON_PLUGIN_EV_ADMITTED:
        return "admitted";
    case MOON_PLUGIN_EV_FIRST_TOKEN:
        return "first_token";
    case MOON_PLUGIN_EV_TOKEN:
        return "token";
    case MOON_PLUGIN_EV_FINISHED:
        return "finished";
    case MOON_PLUGIN_EV_REJECTED:
        return "rejected";
    case MOON_PLUGIN_EV_STORED:
        return "stored";
    case MOON_PLUGIN_EV_EVICTED:
        return "evicted";
    default:
        return "?";
    }
}

moon_status_t moon_plugin_answer(moon_actor_t *self, const moon_plugin_filter_req_t *q,
                                 uint32_t verdict, uint32_t http_status, uint32_t retry_after_s,
                                 const char *message)
{
    moon_plugin_verdict_t *v;
    moon_status_t          status;

    if (self == NULL || q == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    v = moon_msg_new(MOON_MSG_PLUGIN_VERDICT, (message != NULL ? strlen(message) : 0) + 2);
    if (v == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    v->token         = q->token;
    v->verdict       = verdict;
    v->http_status   = http_status;
    v->retry_after_s = retry_after_s;
    v->temperature   = -1.0f;
    moon_msg_set_str(v, &v->message, message != NULL ? message : "");
    status = moon_send(self, q->hdr.src, &v->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&v->hdr);
    }
    return status;
}

/* ---- events -------------------------------------------------------------------- */

void moon_plugin_emit(moon_actor_t *self, const moon_plugin_event_t *ev, const char *key,
                      const char *message)
{
    uint32_t n = moon_plugin_n_observers();

    key     = key != NULL ? key : "";
    message = message != NULL ? message : "";
    for (uint32_t i = 0; i < n; i++) {
        const moon_plugin_observer_rec_t *o = moon_plugin_observer_at(i);
        moon_plugin_event_t              *m;
        moon_addr_t                       to;

        if ((o->events & ev->kind) == 0) {
            continue;
        }
        if (moon_plugin_resolve(self, o->actor, &to) != MOON_OK) {
            MOON_LOG_LIMITED(MOON_LOG_WARN, "plugin observer %s is not running: %s event dropped",
                             o->actor, moon_plugin_ev_str(ev->kind));
            continue;
        }
        m = moon_msg_new(MOON_MSG_PLUGIN_EVENT, strlen(key) + strlen(message) + 16);
        if (m == NULL) {
            continue;
        }
        memcpy((char *)m + sizeof(m->hdr), (const char *)ev + sizeof(ev->hdr),
               sizeof(*m) - sizeof(m->hdr));
        moon_msg_set_str(m, &m->key, key);
        moon_msg_set_str(m, &m->message, message);
        if (moon_send(self, to, &m->hdr) != MOON_OK) {
            moon_msg_release(&m->hdr);
        }
    }
}

/* The TOKEN events not sent yet, per thread: a decode instance queues a
 * step's tokens and flushes them in the same handler, on its thread. */
#define TOK_Q_CAP 256u
static _Thread_local struct {
    uint32_t    n;
    moon_addr_t client[TOK_Q_CAP];
    uint64_t    request_id[TOK_Q_CAP];
    uint32_t    index[TOK_Q_CAP], token[TOK_Q_CAP];
} tok_q;

void moon_plugin_tokens_flush_slow(moon_actor_t *self);

void moon_plugin_token_slow(moon_actor_t *self, moon_addr_t client, uint64_t request_id,
                            uint32_t index, uint32_t token, uint64_t ttft_ns)
{
    moon_plugin_event_t ev;

    memset(&ev, 0, sizeof(ev));
    ev.client     = client;
    ev.request_id = request_id;
    ev.index      = index;
    ev.token      = token;
    ev.ttft_ns    = ttft_ns;
    ev.at_ns      = moon_now(moon_actor_runtime(self));
    if (index == 0 && moon_plugin_observes(MOON_PLUGIN_EV_FIRST_TOKEN)) {
        ev.kind = MOON_PLUGIN_EV_FIRST_TOKEN;
        moon_plugin_emit(self, &ev, NULL, NULL);
    }
    if (moon_plugin_observes(MOON_PLUGIN_EV_TOKEN)) {
        if (tok_q.n == TOK_Q_CAP) {
            moon_plugin_tokens_flush_slow(self);
        }
        tok_q.client[tok_q.n]     = client;
        tok_q.request_id[tok_q.n] = request_id;
        tok_q.index[tok_q.n]      = index;
        tok_q.token[tok_q.n++]    = token;
    }
}

/* One TOKENS of the queue to observer o's actor; best effort. */
static void tokens_send(moon_actor_t *self, const moon_plugin_observer_rec_t *o, uint64_t at_ns)
{
    moon_plugin_tokens_t *m;
    moon_addr_t           to;
    uint64_t             *cl, *id;
    uint32_t             *ix, *tk, n = tok_q.n;

    if (moon_plugin_resolve(self, o->actor, &to) != MOON_OK) {
        MOON_LOG_LIMITED(MOON_LOG_WARN, "plugin observer %s is not running: %u tokens dropped",
                         o->actor, n);
        return;
    }
    m = moon_msg_new(MOON_MSG_PLUGIN_TOKENS, (size_t)n * 24 + 32);
    if (m == NULL) {
        return;
    }
    m->at_ns = at_ns;
    cl       = moon_msg_span_alloc(m, &m->client, n, 8, 0);
    id       = moon_msg_span_alloc(m, &m->request_id, n, 8, 0);
    ix       = moon_msg_span_alloc(m, &m->index, n, 4, 0);
    tk       = moon_msg_span_alloc(m, &m->token, n, 4, 0);
    if (cl == NULL || id == NULL || ix == NULL || tk == NULL) {
        moon_msg_release(&m->hdr);
        return;
    }
    memcpy(cl, tok_q.client, (size_t)n * 8);
    memcpy(id, tok_q.request_id, (size_t)n * 8);
    memcpy(ix, tok_q.index, (size_t)n * 4);
    memcpy(tk, tok_q.token, (size_t)n * 4);
    if (moon_send(self, to, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
}

void moon_plugin_tokens_flush_slow(moon_actor_t *self)
{
    uint32_t n_obs = moon_plugin_n_observers();
    uint64_t at_ns;

    if (tok_q.n == 0) {
        return;
    }
    at_ns = moon_now(moon_actor_runtime(self));
    for (uint32_t i = 0; i < n_obs; i++) {
        const moon_plugin_observer_rec_t *o = moon_plugin_observer_at(i);
        if ((o->events & MOON_PLUGIN_EV_TOKEN) != 0) {
            tokens_send(self, o, at_ns);
        }
    }
    tok_q.n = 0;
}

/* ---- per-request info for FINISHED ------------------------------------------------ */

static uint32_t info_hash(const moon_plugin_gate_t *g, moon_addr_t client, uint64_t id)
{
    uint64_t h = (client ^ (id * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
    return (uint32_t)(h >> 32) & (g->n_info - 1);
}

static info_t *info_find(moon_plugin_gate_t *g, moon_addr_t client, uint64_t id)
{
    for (uint32_t i = info_hash(g, client, id), k = 0; k < g->n_info;
         i = (i + 1) & (g->n_info - 1), k++) {
        if (g->info[i].client == MOON_ADDR_NONE) {
            return NULL;
        }
        if (g->info[i].client == client && g->info[i].request_id == id) {
            return &g->info[i];
        }
    }
    return NULL;
}

static void info_put(moon_plugin_gate_t *g, moon_addr_t client, uint64_t id, uint64_t arrival_ns,
                     uint32_t n_prompt, const char *key)
{
    for (uint32_t i = info_hash(g, client, id), k = 0; k < g->n_info;
         i = (i + 1) & (g->n_info - 1), k++) {
        info_t *e = &g->info[i];
        if (e->client == MOON_ADDR_NONE || (e->client == client && e->request_id == id)) {
            e->client     = client;
            e->request_id = id;
            e->arrival_ns = arrival_ns;
            e->n_prompt   = n_prompt;
            snprintf(e->key, sizeof(e->key), "%s", key);
            return;
        }
    }
    MOON_LOG_LIMITED(MOON_LOG_WARN, "plugin: %u requests tracked for observers: no key in events",
                     g->n_info);
}

/* Backward-shift deletion keeps every probe chain unbroken. */
static void info_del(moon_plugin_gate_t *g, info_t *e)
{
    uint32_t mask = g->n_info - 1, i = (uint32_t)(e - g->info), j = i;

    for (;;) {
        uint32_t home;
        j = (j + 1) & mask;
        if (g->info[j].client == MOON_ADDR_NONE) {
            break;
        }
        home = info_hash(g, g->info[j].client, g->info[j].request_id);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            g->info[i] = g->info[j];
            i          = j;
        }
    }
    g->info[i].client = MOON_ADDR_NONE;
}

/* ---- the gate ---------------------------------------------------------------------- */

moon_status_t moon_plugin_gate_create(uint32_t max_requests, moon_plugin_gate_t **gate_p)
{
    moon_plugin_gate_t *g;

    *gate_p = NULL;
    if (moon_plugin_n_filters() == 0 && moon_plugin_n_observers() == 0) {
        return MOON_OK;
    }
    g = moon_calloc(1, sizeof(*g));
    if (g == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    g->n_slots = MOON_MAX(1u, MOON_MIN(max_requests, GATE_SLOTS_MAX));
    g->slots   = moon_calloc(g->n_slots, sizeof(*g->slots));
    g->free    = moon_calloc(g->n_slots, sizeof(*g->free));
    for (uint32_t i = 0; g->free != NULL && i < g->n_slots; i++) {
        g->free[g->n_free++] = g->n_slots - 1 - i;
    }
    if (moon_plugin_observes(MOON_PLUGIN_EV_FINISHED)) {
        g->n_info = 64;
        while (g->n_info < GATE_INFO_MAX && g->n_info < 2ull * max_requests) {
            g->n_info *= 2;
        }
        g->info = moon_calloc(g->n_info, sizeof(*g->info));
    }
    if (g->slots == NULL || g->free == NULL || (g->n_info > 0 && g->info == NULL)) {
        moon_plugin_gate_destroy(g);
        return MOON_ERR_NO_MEMORY;
    }
    *gate_p = g;
    return MOON_OK;
}

static void slot_free(moon_plugin_gate_t *g, slot_t *s)
{
    moon_msg_release(&s->m->hdr);
    moon_msg_release(s->changed != NULL ? &s->changed->hdr : NULL);
    moon_free(s->ids);
    memset(s, 0, sizeof(*s));
    g->free[g->n_free++] = (uint32_t)(s - g->slots);
}

void moon_plugin_gate_destroy(moon_plugin_gate_t *gate)
{
    if (gate == NULL) {
        return;
    }
    for (uint32_t i = 0; gate->slots != NULL && i < gate->n_slots; i++) {
        if (gate->slots[i].gen != 0) {
            slot_free(gate, &gate->slots[i]);
        }
    }
    moon_free(gate->slots);
    moon_free(gate->free);
    moon_free(gate->info);
    moon_free(gate);
}

void moon_plugin_outcome_fini(moon_plugin_outcome_t *out)
{
    moon_msg_release(out->m != NULL ? &out->m->hdr : NULL);
    moon_free(out->ids);
    memset(out, 0, sizeof(*out));
}

static const char *str_of(const moon_msg_hdr_t *m, moon_span_t s)
{
    return s.n > 0 ? MOON_SPAN_PTR(m, s) : "";
}

/* Sends slot s's request to filter s->filter with its deadline. */
static moon_status_t send_filter(moon_plugin_gate_t *g, moon_actor_t *self, slot_t *s)
{
    const moon_plugin_filter_rec_t *f   = moon_plugin_filter_at(s->filter);
    const moon_serve_submit_t      *m   = s->changed != NULL ? s->changed : s->m;
    const char                     *key = str_of(&m->hdr, m->key);
    const char                     *ses = str_of(&m->hdr, m->session);
    uint64_t                        token =
        ((uint64_t)s->gen << 32) | (uint64_t)(s - g->slots); /* slot index in the low half */
    moon_plugin_filter_req_t *q;
    moon_addr_t               to;
    moon_status_t             status;

    status = moon_timer_start(self, (uint64_t)f->deadline_ms * 1000000ull, 0, token, &s->timer);
    if (status != MOON_OK) {
        return status;
    }
    if (moon_plugin_resolve(self, f->actor, &to) != MOON_OK) {
        /* not running (restarting, or gone): its deadline decides */
        MOON_LOG_LIMITED(MOON_LOG_WARN, "plugin filter %s is not running: its deadline decides",
                         f->actor);
        return MOON_OK;
    }
    q = moon_msg_new(MOON_MSG_PLUGIN_FILTER, strlen(key) + strlen(ses) + 16);
    if (q == NULL) {
        return MOON_OK; /* the deadline decides */
    }
    q->token       = token;
    q->client      = m->reply_to;
    q->request_id  = m->request_id;
    q->n_prompt    = s->n;
    q->max_tokens  = m->max_tokens;
    q->temperature = m->temperature;
    q->slo_class   = m->slo_class;
    q->now_ns      = moon_now(moon_actor_runtime(self));
    moon_msg_set_str(q, &q->key, key);
    moon_msg_set_str(q, &q->session, ses);
    if (moon_send(self, to, &q->hdr) != MOON_OK) {
        moon_msg_release(&q->hdr);
    }
    return MOON_OK;
}

moon_status_t moon_plugin_gate_filter(moon_plugin_gate_t *g, moon_actor_t *self,
                                      const moon_serve_submit_t *m, int32_t *ids, uint32_t n)
{
    slot_t       *s = NULL;
    moon_status_t status;

    if (g == NULL || moon_plugin_n_filters() == 0) {
        return MOON_OK;
    }
    if (g->n_free == 0) {
        return MOON_ERR_NO_RESOURCE;
    }
    s           = &g->slots[g->free[--g->n_free]];
    g->next_gen = g->next_gen + 1 != 0 ? g->next_gen + 1 : 1;
    moon_msg_retain(&m->hdr);
    *s     = (slot_t){.gen = g->next_gen, .m = m, .ids = ids, .n = n};
    status = send_filter(g, self, s);
    if (status != MOON_OK) {
        s->ids = NULL; /* still the caller's */
        slot_free(g, s);
        return status;
    }
    return MOON_INPROGRESS;
}

static slot_t *slot_of(moon_plugin_gate_t *g, uint64_t token)
{
    uint32_t i = (uint32_t)token, gen = (uint32_t)(token >> 32);

    return g != NULL && i < g->n_slots && gen != 0 && g->slots[i].gen == gen ? &g->slots[i] : NULL;
}

/* The slot's request is decided: its outcome moves to out. */
static void decide(moon_plugin_gate_t *g, slot_t *s, int rejected, uint32_t http, uint32_t retry,
                   const char *why, moon_plugin_outcome_t *out)
{
    memset(out, 0, sizeof(*out));
    out->m = s->changed != NULL ? s->changed : s->m;
    moon_msg_retain(&out->m->hdr);
    out->ids           = s->ids;
    out->n             = s->n;
    out->rejected      = rejected;
    out->http_status   = http;
    out->retry_after_s = retry;
    snprintf(out->message, sizeof(out->message), "%s", why != NULL ? why : "");
    s->ids = NULL;
    slot_free(g, s);
}

/* The filter the slot waited for accepted: the next one, or done. */
static moon_status_t next_filter(moon_plugin_gate_t *g, moon_actor_t *self, slot_t *s,
                                 moon_plugin_outcome_t *out)
{
    if (++s->filter < moon_plugin_n_filters() && send_filter(g, self, s) == MOON_OK) {
        return MOON_INPROGRESS;
    }
    if (s->filter < moon_plugin_n_filters()) { /* no timer for the next one */
        decide(g, s, 1, 503, 1, "a request filter could not be reached", out);
        return MOON_OK;
    }
    decide(g, s, 0, 0, 0, NULL, out);
    return MOON_OK;
}

moon_status_t moon_plugin_gate_on_verdict(moon_plugin_gate_t *g, moon_actor_t *self,
                                          const moon_msg_hdr_t *msg, moon_plugin_outcome_t *out)
{
    const moon_plugin_verdict_t *v = (const void *)msg;
    slot_t                      *s = slot_of(g, v->token);

    if (s == NULL) {
        MOON_LOG(MOON_LOG_DEBUG, "plugin: verdict %llx after its deadline: ignored",
                 (unsigned long long)v->token);
        return MOON_ERR_NOT_FOUND;
    }
    moon_timer_cancel(self, s->timer);
    if (v->verdict == MOON_PLUGIN_REJECT) {
        const char *why = str_of(msg, v->message);
        decide(g, s, 1, v->http_status ? v->http_status : 429, v->retry_after_s,
               why[0] ? why : "refused by a request filter", out);
        return MOON_OK;
    }
    if (v->max_tokens > 0 || v->temperature >= 0.0f) {
        if (s->changed == NULL) {
            s->changed = moon_msg_dup(&s->m->hdr);
        }
        if (s->changed != NULL) {
            s->changed->max_tokens = v->max_tokens > 0 ? v->max_tokens : s->changed->max_tokens;
            s->changed->temperature =
                v->temperature >= 0.0f ? v->temperature : s->changed->temperature;
        }
    }
    return next_filter(g, self, s, out);
}

moon_status_t moon_plugin_gate_on_timer(moon_plugin_gate_t *g, moon_actor_t *self,
                                        const moon_msg_hdr_t *msg, moon_plugin_outcome_t *out)
{
    const moon_sys_timer_t         *t = (const void *)msg;
    slot_t                         *s = slot_of(g, t->cookie);
    const moon_plugin_filter_rec_t *f;

    if (s == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    f = moon_plugin_filter_at(s->filter);
    MOON_LOG_LIMITED(MOON_LOG_WARN, "plugin filter %s gave no verdict within %u ms: fails %s",
                     f->actor, f->deadline_ms, f->fail_open ? "open (accepted)" : "closed (503)");
    if (!f->fail_open) {
        decide(g, s, 1, 503, 1, "a request filter did not answer in time", out);
        return MOON_OK;
    }
    return next_filter(g, self, s, out);
}

moon_status_t moon_plugin_gate_cancel(moon_plugin_gate_t *g, moon_actor_t *self, moon_addr_t client,
                                      uint64_t request_id, uint32_t *n_prompt_p)
{
    if (g == NULL || g->n_free == g->n_slots) {
        return MOON_ERR_NOT_FOUND; /* nothing waits for a filter: no scan */
    }
    for (uint32_t i = 0; i < g->n_slots; i++) {
        slot_t *s = &g->slots[i];
        if (s->gen != 0 && s->m->reply_to == client && s->m->request_id == request_id) {
            moon_timer_cancel(self, s->timer);
            *n_prompt_p = s->n;
            slot_free(g, s); /* a late verdict finds no slot: ignored */
            return MOON_OK;
        }
    }
    return MOON_ERR_NOT_FOUND;
}

/* ---- the conductor's events ---------------------------------------------------------- */

static void ev_init(moon_plugin_event_t *ev, moon_actor_t *self, uint32_t kind,
                    const moon_serve_submit_t *m, uint32_t n_prompt)
{
    memset(ev, 0, sizeof(*ev));
    ev->kind             = kind;
    ev->client           = m != NULL ? m->reply_to : MOON_ADDR_NONE;
    ev->request_id       = m != NULL ? m->request_id : 0;
    ev->n_prompt         = n_prompt;
    ev->at_ns            = moon_now(moon_actor_runtime(self));
    ev->arrival_ns       = ev->at_ns;
    ev->prefill_instance = -1;
    ev->decode_instance  = -1;
}

void moon_plugin_gate_admitted(moon_plugin_gate_t *g, moon_actor_t *self,
                               const moon_serve_submit_t *m, uint32_t n_prompt, int32_t prefill,
                               int32_t decode)
{
    const char         *key = str_of(&m->hdr, m->key);
    moon_plugin_event_t ev;

    if (g == NULL) {
        return;
    }
    ev_init(&ev, self, MOON_PLUGIN_EV_ADMITTED, m, n_prompt);
    if (g->info != NULL) {
        info_put(g, m->reply_to, m->request_id, ev.at_ns, n_prompt, key);
    }
    if (moon_plugin_observes(MOON_PLUGIN_EV_ADMITTED)) {
        ev.prefill_instance = prefill;
        ev.decode_instance  = decode;
        moon_plugin_emit(self, &ev, key, NULL);
    }
}

void moon_plugin_gate_rejected(moon_plugin_gate_t *g, moon_actor_t *self,
                               const moon_serve_submit_t *m, uint32_t n_prompt,
                               moon_status_t status, uint32_t http_status, const char *why)
{
    moon_plugin_event_t ev;

    if (g == NULL || !moon_plugin_observes(MOON_PLUGIN_EV_REJECTED)) {
        return;
    }
    ev_init(&ev, self, MOON_PLUGIN_EV_REJECTED, m, n_prompt);
    ev.status      = status;
    ev.http_status = http_status;
    ev.finish      = MOON_FINISH_REJECTED;
    moon_plugin_emit(self, &ev, str_of(&m->hdr, m->key), why);
}

void moon_plugin_gate_finished(moon_plugin_gate_t *g, moon_actor_t *self, moon_addr_t client,
                               uint64_t request_id, uint32_t finish, uint32_t n_completion)
{
    moon_plugin_event_t ev;
    info_t             *e;

    if (g == NULL || g->info == NULL) {
        return;
    }
    ev_init(&ev, self, MOON_PLUGIN_EV_FINISHED, NULL, 0);
    ev.client       = client;
    ev.request_id   = request_id;
    ev.finish       = finish;
    ev.n_completion = n_completion;
    e               = info_find(g, client, request_id);
    if (e != NULL) {
        ev.arrival_ns = e->arrival_ns;
        ev.n_prompt   = e->n_prompt;
    }
    moon_plugin_emit(self, &ev, e != NULL ? e->key : NULL, moon_finish_str(finish));
    if (e != NULL) {
        info_del(g, e);
    }
}

void moon_plugin_gate_store(moon_plugin_gate_t *g, moon_actor_t *self, const uint64_t *ev,
                            uint32_t n_events, uint32_t u64s_per_event)
{
    moon_plugin_event_t e;

    if (g == NULL || !moon_plugin_observes(MOON_PLUGIN_EV_STORED | MOON_PLUGIN_EV_EVICTED)) {
        return;
    }
    for (uint32_t i = 0; i < n_events; i++) {
        const uint64_t *x = ev + (size_t)i * u64s_per_event;
        uint32_t kind = x[0] == 1 ? MOON_PLUGIN_EV_STORED : x[0] == 2 ? MOON_PLUGIN_EV_EVICTED : 0;
        if (kind == 0 || !moon_plugin_observes(kind)) {
            continue;
        }
        ev_init(&e, self, kind, NULL, 0);
        e.key_lo = x[1];
        e.key_hi = x[2];
        moon_plugin_emit(self, &e, NULL, NULL);
    }
}
