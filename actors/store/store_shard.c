/* actors/store/store_shard.c - the store shard actor (store_shard.h): thin glue
 * between the store protocol (store_msgs.h) and one moon_kv_shard. Every
 * handler is O(request) and never blocks; replies go to the request's sender.
 * Events raised inside a shard call are queued by the callback and published
 * to the subscribers after the call returns (kvstore/README.md). */
#include "store_shard.h"

#include "moonlet/alloc.h"
#include "moonlet/hash.h"
#include "moonlet/htab.h"
#include "moonlet/kv_shard.h"
#include "moonlet/log.h"
#include "moonlet/numa.h"
#include "moonlet/store_msgs.h"

#include <string.h>

#define DEFAULT_TICK_NS (100ull * 1000 * 1000)
#define DEFAULT_MAX_CLIENTS 1024u
#define EVENTS_PER_MSG 256u

_Static_assert(sizeof(moon_kv_key_t) == 2 * sizeof(uint64_t), "keys travel as u64 pairs");

typedef struct {
    moon_kv_shard_t    *kv;
    moon_dist_t        *dist;
    moon_dist_region_t *reg; /* the arena, registered; NULL without dist */
    char               *base;
    uint32_t            shard_id;
    uint64_t            lease_timeout_ns;
    uint64_t            timer;
    moon_addr_t         subs[MOON_STORE_MAX_SUBSCRIBERS];
    uint64_t            event_seq; /* number of the next live event */
    uint32_t            n_subs;
    /* raised by the current shard call: (n_alloc_events), grown up to
     * cap_events for a virtual shard (full-size at init for a real one) */
    moon_kv_event_t *events;
    uint32_t         n_events, n_alloc_events, cap_events;
    uint64_t         n_events_lost; /* more events in one call than cap_events */
    uint64_t         n_dropped;     /* reservations + leases dropped with dead clients */
    uint64_t         n_renewals;    /* RENEW requests served, granted or refused */
    /* Clients holding (or having held) a reservation or lease, each monitored
     * once: a set of moon_addr_t, fixed at max_clients. */
    moon_htab_t *clients;
    uint32_t     max_clients;
} shard_state_t;

/* ---- clients: monitored once, dropped when they end ---------------------- */
static uint64_t client_hash(const void *key, void *arg)
{
    moon_addr_t a;

    (void)arg;
    memcpy(&a, key, sizeof(a));
    return moon_hash_mix64(a);
}

static const moon_htab_type_t clients_type = {
    .elem_bytes = sizeof(moon_addr_t), .key_bytes = sizeof(moon_addr_t), .hash = client_hash};

/* Makes sure the sender of a reserve/get is monitored, so that whatever it
 * holds is dropped when it ends (its rank lost included: DOWN with
 * MOON_ERR_PEER_LOST). MOON_ERR_NO_RESOURCE: max_clients live clients already;
 * MOON_ERR_INVALID_PARAM: not sent by an actor. */
static moon_status_t clients_track(moon_actor_t *self, shard_state_t *st, moon_addr_t a)
{
    moon_status_t status;

    if (a == MOON_ADDR_NONE) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_htab_find(st->clients, &a) != NULL) {
        return MOON_OK;
    }
    if (moon_htab_count(st->clients) == st->max_clients) {
        MOON_WARN("store shard %u: %u clients already, refusing one more", st->shard_id,
                  st->max_clients);
        return MOON_ERR_NO_RESOURCE;
    }
    status = moon_monitor(self, a, 0);
    if (status != MOON_OK) {
        return status;
    }
    /* absent and under max_clients, in a table fixed at max_clients: cannot fail */
    MOON_CHECK(moon_htab_insert(st->clients, &a, &a, NULL) == MOON_OK);
    return MOON_OK;
}

static void on_kv_event(const moon_kv_event_t *event, void *arg)
{
    shard_state_t *st = arg;

    if (st->n_subs == 0) {
        return;
    }
    if (st->n_events == st->n_alloc_events) {
        if (st->n_events == st->cap_events ||
            moon_grow_tables(&MOON_GROW_TABLE(st->events), 1, st->n_events + 1, st->cap_events,
                             &st->n_alloc_events) != MOON_OK) {
            st->n_events_lost++;
            return;
        }
    }
    st->events[st->n_events++] = *event;
}

static void put_event(uint64_t *ev, uint64_t kind, moon_kv_key_t key, const moon_kv_tag_t *tag)
{
    ev[0] = kind;
    ev[1] = key.lo;
    ev[2] = key.hi;
    ev[3] = tag->model_id;
    ev[4] = tag->weight_version;
}

/* Publishes the queued events to every subscriber (fire and forget). */
static void publish_events(moon_actor_t *self, shard_state_t *st)
{
    uint32_t done = 0;

    while (done < st->n_events) {
        uint32_t n = MOON_MIN(st->n_events - done, EVENTS_PER_MSG);

        for (uint32_t s = 0; s < st->n_subs; s++) {
            moon_status_t        status;
            moon_store_events_t *m =
                moon_msg_new(MOON_MSG_STORE_EVENTS, (size_t)n * MOON_STORE_EVENT_U64S * 8);
            uint64_t *ev;

            if (m == NULL) {
                MOON_WARN("store shard %u: no memory for events", st->shard_id);
                continue;
            }
            m->shard_id = st->shard_id;
            m->seq      = st->event_seq;
            ev          = moon_msg_span_alloc(m, &m->ev, n * MOON_STORE_EVENT_U64S, 8, 0);
            for (uint32_t i = 0; i < n; i++) {
                const moon_kv_event_t *e = &st->events[done + i];
                put_event(ev + (size_t)i * MOON_STORE_EVENT_U64S, e->kind, e->key, &e->tag);
            }
            status = moon_tell(self, st->subs[s], &m->hdr);
            if (status == MOON_ERR_NO_ACTOR || moon_status_is_peer(status)) {
                MOON_INFO("store shard %u: subscriber %llx gone, dropped", st->shard_id,
                          (unsigned long long)st->subs[s]);
                st->subs[s--] = st->subs[--st->n_subs];
            }
        }
        done += n;
        st->event_seq += n; /* counted even when a message was lost: the gap shows */
    }
    st->n_events = 0;
}

static uint64_t client_of(const moon_msg_hdr_t *msg)
{
    return msg->src; /* the actor: dropped on its DOWN */
}

static uint64_t now_of(moon_actor_t *self)
{
    return moon_now(moon_actor_runtime(self));
}

static moon_status_t reply(moon_actor_t *self, const moon_msg_hdr_t *msg, uint64_t req,
                           moon_status_t status)
{
    shard_state_t      *st = moon_actor_state(self);
    moon_store_reply_t *r  = moon_msg_new(MOON_MSG_STORE_REPLY, 0);

    if (r == NULL) {
        MOON_WARN("store shard %u: no memory for a reply", st->shard_id);
        return MOON_OK;
    }
    r->req      = req;
    r->status   = status;
    r->shard_id = st->shard_id;
    r->op       = msg->type;
    (void)moon_tell(self, msg->src, &r->hdr);
    return MOON_OK;
}

/* Fills a grant's descriptor (or base address without dist). */
static moon_status_t fill_desc(shard_state_t *st, void *msg, moon_span_t *desc, uint64_t *base_p)
{
    if (st->reg == NULL) {
        *base_p = (uint64_t)(uintptr_t)st->base;
        return MOON_OK;
    }
    return moon_dist_region_desc(st->reg, msg, desc);
}

static size_t desc_bytes(const shard_state_t *st)
{
    return st->reg != NULL ? moon_dist_region_desc_bytes(st->reg) : 0;
}

/* ---- handlers ------------------------------------------------------------- */
static moon_status_t shard_on_query(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t            *st   = moon_actor_state(self);
    const moon_store_query_t *q    = (const moon_store_query_t *)msg;
    moon_kv_tag_t             tag  = {q->model_id, q->weight_version};
    const moon_kv_key_t      *keys = MOON_SPAN_PTR(q, q->keys);
    size_t                    n    = q->keys.n / 2;
    moon_store_query_reply_t *r;
    moon_status_t             status = MOON_OK;

    if ((q->keys.n & 1) != 0 || n > MOON_STORE_QUERY_MAX_KEYS ||
        (q->op != MOON_STORE_QUERY_EXISTS && q->op != MOON_STORE_QUERY_PREFIX)) {
        return reply(self, msg, q->req, MOON_ERR_INVALID_PARAM);
    }
    r = moon_msg_new(MOON_MSG_STORE_QUERY_REPLY, q->op == MOON_STORE_QUERY_EXISTS ? n + 8 : 0);
    if (r == NULL) {
        return reply(self, msg, q->req, MOON_ERR_NO_MEMORY);
    }
    r->req      = q->req;
    r->shard_id = st->shard_id;
    r->op       = q->op;
    if (q->op == MOON_STORE_QUERY_EXISTS) {
        uint8_t *present = moon_msg_span_alloc(r, &r->present, (uint32_t)n, 1, 0);
        status           = moon_kv_shard_exists(st->kv, &tag, keys, n, present);
        for (size_t i = 0; status == MOON_OK && i < n; i++) {
            r->n_hit += present[i];
        }
    } else {
        size_t n_hit = 0;
        status       = moon_kv_shard_longest_prefix(st->kv, &tag, keys, n, &n_hit);
        r->n_hit     = (uint32_t)n_hit;
    }
    r->status = status;
    (void)moon_tell(self, msg->src, &r->hdr);
    return MOON_OK;
}

/* The fields PUT_GRANT and GET_GRANT share, so that one function fills
 * either: GRANT_OF(g) of a moon_store_put_grant_t or _get_grant_t. */
typedef struct {
    moon_msg_hdr_t *hdr;
    uint64_t       *req;
    int32_t        *status;
    uint32_t       *shard_id;
    moon_span_t    *desc;
    uint64_t       *base;
} grant_t;
#define GRANT_OF(g)                                                                                \
    ((grant_t){&(g)->hdr, &(g)->req, &(g)->status, &(g)->shard_id, &(g)->desc, &(g)->base})

/* Finishes grant g, the answer to request msg, and sends it to msg's sender:
 * status is its shard call's (a reserve or a get, whose token or lease is
 * handle); on MOON_OK the grant also describes the arena. undo (revoke or
 * release) gives the handle back when the grant cannot say MOON_OK or cannot
 * be sent (the requester is gone). Events the call raised (evictions by a
 * reserve or a promote, a corrupt block removed) are published before it
 * leaves. */
static void grant_send(moon_actor_t *self, shard_state_t *st, const moon_msg_hdr_t *msg,
                       uint64_t req, grant_t g, moon_status_t status, uint64_t handle,
                       moon_status_t (*undo)(moon_kv_shard_t *kv, uint64_t handle))
{
    *g.req      = req;
    *g.shard_id = st->shard_id;
    if (status == MOON_OK) {
        status = fill_desc(st, g.hdr, g.desc, g.base);
        if (status != MOON_OK) {
            (void)undo(st->kv, handle);
        }
    }
    *g.status = status;
    publish_events(self, st);
    if (moon_tell(self, msg->src, g.hdr) != MOON_OK && status == MOON_OK) {
        (void)undo(st->kv, handle);
    }
}

/* A grant (PUT_GRANT or GET_GRANT) for request req, with room for the
 * arena's descriptor; NULL without memory, and the requester is told so. */
static void *grant_new(moon_actor_t *self, const moon_msg_hdr_t *msg, uint32_t type, uint64_t req)
{
    void *g = moon_msg_new(type, desc_bytes(moon_actor_state(self)) + 8);

    if (g == NULL) {
        (void)reply(self, msg, req, MOON_ERR_NO_MEMORY);
    }
    return g;
}

static moon_status_t shard_on_reserve(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t                  *st  = moon_actor_state(self);
    const moon_store_put_reserve_t *q   = (const moon_store_put_reserve_t *)msg;
    moon_kv_tag_t                   tag = {q->model_id, q->weight_version};
    moon_kv_key_t                   key = {q->key_lo, q->key_hi};
    moon_store_put_grant_t         *g;
    moon_kv_put_t                   put = {0};
    moon_status_t                   status;

    if ((g = grant_new(self, msg, MOON_MSG_STORE_PUT_GRANT, q->req)) == NULL) {
        return MOON_OK;
    }
    status = q->n_bytes > SIZE_MAX ? MOON_ERR_INVALID_PARAM : clients_track(self, st, msg->src);
    if (status == MOON_OK) {
        status = moon_kv_shard_reserve(st->kv, &tag, key, (size_t)q->n_bytes, client_of(msg),
                                       now_of(self), &put);
    }
    if (status == MOON_OK) {
        g->token     = put.token;
        g->offset    = put.offset;
        g->max_bytes = put.max_bytes;
    }
    grant_send(self, st, msg, q->req, GRANT_OF(g), status, put.token, moon_kv_shard_revoke);
    return MOON_OK;
}

static moon_status_t shard_on_commit(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t                 *st = moon_actor_state(self);
    const moon_store_put_commit_t *q  = (const moon_store_put_commit_t *)msg;
    moon_status_t                  status;

    status = q->n_bytes > SIZE_MAX
                 ? MOON_ERR_INVALID_PARAM
                 : moon_kv_shard_commit(st->kv, q->token, (size_t)q->n_bytes, q->checksum);
    publish_events(self, st);
    return reply(self, msg, q->req, status);
}

static moon_status_t shard_on_revoke(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t                 *st     = moon_actor_state(self);
    const moon_store_put_revoke_t *q      = (const moon_store_put_revoke_t *)msg;
    moon_status_t                  status = moon_kv_shard_revoke(st->kv, q->token);

    return q->req != 0 ? reply(self, msg, q->req, status) : MOON_OK;
}

static moon_status_t shard_on_get(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t          *st  = moon_actor_state(self);
    const moon_store_get_t *q   = (const moon_store_get_t *)msg;
    moon_kv_tag_t           tag = {q->model_id, q->weight_version};
    moon_kv_key_t           key = {q->key_lo, q->key_hi};
    moon_store_get_grant_t *g;
    moon_kv_get_t           get = {0};
    moon_status_t           status;

    if ((g = grant_new(self, msg, MOON_MSG_STORE_GET_GRANT, q->req)) == NULL) {
        return MOON_OK;
    }
    status = clients_track(self, st, msg->src);
    if (status == MOON_OK) {
        status = moon_kv_shard_get(st->kv, &tag, key, client_of(msg), now_of(self), &get);
    }
    if (status == MOON_OK) {
        g->lease            = get.lease;
        g->offset           = get.offset;
        g->n_bytes          = get.n_bytes;
        g->checksum         = get.checksum;
        g->lease_timeout_ns = st->lease_timeout_ns; /* > 0: the reader has the release confirmed */
    }
    grant_send(self, st, msg, q->req, GRANT_OF(g), status, get.lease, moon_kv_shard_release);
    return MOON_OK;
}

static moon_status_t shard_on_release(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t              *st     = moon_actor_state(self);
    const moon_store_release_t *q      = (const moon_store_release_t *)msg;
    moon_status_t               status = moon_kv_shard_release(st->kv, q->lease);

    return q->req != 0 ? reply(self, msg, q->req, status) : MOON_OK;
}

/* ---- vectors: the singular handlers' work per entry, one answer ---------- */
/* A vector request's n (every span n long, keys 2n), or 0 when malformed. */
static uint32_t vec_n(const moon_span_t *reqs, const moon_span_t *const *more, uint32_t n_more,
                      const moon_span_t *keys)
{
    uint32_t n = reqs->n;

    if (n == 0 || n > MOON_STORE_VEC_MAX || (keys != NULL && keys->n != 2 * n)) {
        return 0;
    }
    for (uint32_t i = 0; i < n_more; i++) {
        if (more[i]->n != n) {
            return 0;
        }
    }
    return n;
}

/* A REPLYV to msg's sender of n entries (status per entry); reqs of 0 are
 * left out. */
static void replyv_send(moon_actor_t *self, shard_state_t *st, const moon_msg_hdr_t *msg,
                        const uint64_t *reqs, const int32_t *status, uint32_t n)
{
    uint32_t             k = 0, m = 0;
    moon_store_replyv_t *r;
    uint64_t            *rr;
    uint32_t            *rs;

    for (uint32_t i = 0; i < n; i++) {
        m += reqs[i] != 0;
    }
    if (m == 0) {
        return;
    }
    if ((r = moon_msg_new(MOON_MSG_STORE_REPLYV, (size_t)m * 12 + 16)) == NULL) {
        MOON_WARN("store shard %u: no memory for a vector reply", st->shard_id);
        return;
    }
    r->shard_id = st->shard_id;
    r->op       = msg->type;
    rr          = moon_msg_span_alloc(r, &r->reqs, m, 8, 0);
    rs          = moon_msg_span_alloc(r, &r->status, m, 4, 0);
    for (uint32_t i = 0; i < n; i++) {
        if (reqs[i] != 0) {
            rr[k]   = reqs[i];
            rs[k++] = (uint32_t)status[i];
        }
    }
    (void)moon_tell(self, msg->src, &r->hdr);
}

/* Between a vector's entries: publishes the events queued so far once they
 * near the per-call bound, so a long vector loses none. */
static void vec_events(moon_actor_t *self, shard_state_t *st)
{
    if (st->n_events > 0 && st->n_events + 64 >= st->cap_events) {
        publish_events(self, st);
    }
}

/* A malformed vector request: logged, answered with nothing (its reqs are not
 * to be trusted); the client's deadline ends what waited on it. */
static moon_status_t vec_bad(shard_state_t *st, const moon_msg_hdr_t *msg)
{
    MOON_WARN("store shard %u: malformed %s from %llx dropped", st->shard_id,
              moon_msg_name(msg->type), (unsigned long long)msg->src);
    return MOON_OK;
}

static moon_status_t shard_on_reservev(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t                   *st      = moon_actor_state(self);
    const moon_store_put_reservev_t *q       = (const moon_store_put_reservev_t *)msg;
    const moon_span_t               *more[1] = {&q->n_bytes};
    uint32_t                         n       = vec_n(&q->reqs, more, 1, &q->keys);
    moon_kv_tag_t                    tag     = {q->model_id, q->weight_version};
    const uint64_t          *reqs = MOON_SPAN_PTR(q, q->reqs), *keys = MOON_SPAN_PTR(q, q->keys);
    const uint64_t          *nb = MOON_SPAN_PTR(q, q->n_bytes);
    moon_store_put_grantv_t *g;
    uint64_t                *gr, *tok, *off, *maxb;
    uint32_t                *gs;
    moon_status_t            status;

    if (n == 0) {
        return vec_bad(st, msg);
    }
    g = moon_msg_new(MOON_MSG_STORE_PUT_GRANTV, (size_t)n * 36 + desc_bytes(st) + 48);
    if (g == NULL) {
        MOON_WARN("store shard %u: no memory for a vector grant", st->shard_id);
        return MOON_OK;
    }
    g->shard_id = st->shard_id;
    gr          = moon_msg_span_alloc(g, &g->reqs, n, 8, 0);
    gs          = moon_msg_span_alloc(g, &g->status, n, 4, 0);
    tok         = moon_msg_span_alloc(g, &g->token, n, 8, 0);
    off         = moon_msg_span_alloc(g, &g->offset, n, 8, 0);
    maxb        = moon_msg_span_alloc(g, &g->max_bytes, n, 8, 0);
    status      = clients_track(self, st, msg->src);
    if (status == MOON_OK) {
        status = fill_desc(st, g, &g->desc, &g->base);
    }
    for (uint32_t i = 0; i < n; i++) {
        moon_kv_key_t key = {keys[2 * i], keys[2 * i + 1]};
        moon_kv_put_t put = {0};
        moon_status_t s   = status;

        vec_events(self, st);
        if (s == MOON_OK) {
            s = nb[i] > SIZE_MAX ? MOON_ERR_INVALID_PARAM
                                 : moon_kv_shard_reserve(st->kv, &tag, key, (size_t)nb[i],
                                                         client_of(msg), now_of(self), &put);
        }
        gr[i]   = reqs[i];
        gs[i]   = (uint32_t)s;
        tok[i]  = s == MOON_OK ? put.token : 0;
        off[i]  = put.offset;
        maxb[i] = put.max_bytes;
    }
    publish_events(self, st);
    /* moon_send, not moon_tell: an undelivered grant is still ours to read */
    if (moon_send(self, msg->src, &g->hdr) != MOON_OK) {
        for (uint32_t i = 0; i < n; i++) {
            if ((int32_t)gs[i] == MOON_OK) {
                (void)moon_kv_shard_revoke(st->kv, tok[i]);
            }
        }
        moon_msg_release(&g->hdr);
    }
    return MOON_OK;
}

static moon_status_t shard_on_commitv(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t                  *st      = moon_actor_state(self);
    const moon_store_put_commitv_t *q       = (const moon_store_put_commitv_t *)msg;
    const moon_span_t              *more[3] = {&q->token, &q->n_bytes, &q->checksum};
    uint32_t                        n       = vec_n(&q->reqs, more, 3, NULL);
    const uint64_t *reqs = MOON_SPAN_PTR(q, q->reqs), *tok = MOON_SPAN_PTR(q, q->token);
    const uint64_t *nb = MOON_SPAN_PTR(q, q->n_bytes), *sum = MOON_SPAN_PTR(q, q->checksum);
    int32_t         status[MOON_STORE_VEC_MAX];

    if (n == 0) {
        return vec_bad(st, msg);
    }
    for (uint32_t i = 0; i < n; i++) {
        vec_events(self, st);
        status[i] = nb[i] > SIZE_MAX ? MOON_ERR_INVALID_PARAM
                                     : moon_kv_shard_commit(st->kv, tok[i], (size_t)nb[i], sum[i]);
    }
    publish_events(self, st);
    replyv_send(self, st, msg, reqs, status, n);
    return MOON_OK;
}

static moon_status_t shard_on_getv(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t           *st   = moon_actor_state(self);
    const moon_store_getv_t *q    = (const moon_store_getv_t *)msg;
    uint32_t                 n    = vec_n(&q->reqs, NULL, 0, &q->keys);
    moon_kv_tag_t            tag  = {q->model_id, q->weight_version};
    const uint64_t          *reqs = MOON_SPAN_PTR(q, q->reqs), *keys = MOON_SPAN_PTR(q, q->keys);
    moon_store_get_grantv_t *g;
    uint64_t                *gr, *lease, *off, *nb, *sum;
    uint32_t                *gs;
    moon_status_t            status;

    if (n == 0) {
        return vec_bad(st, msg);
    }
    g = moon_msg_new(MOON_MSG_STORE_GET_GRANTV, (size_t)n * 44 + desc_bytes(st) + 56);
    if (g == NULL) {
        MOON_WARN("store shard %u: no memory for a vector grant", st->shard_id);
        return MOON_OK;
    }
    g->shard_id         = st->shard_id;
    g->lease_timeout_ns = st->lease_timeout_ns;
    gr                  = moon_msg_span_alloc(g, &g->reqs, n, 8, 0);
    gs                  = moon_msg_span_alloc(g, &g->status, n, 4, 0);
    lease               = moon_msg_span_alloc(g, &g->lease, n, 8, 0);
    off                 = moon_msg_span_alloc(g, &g->offset, n, 8, 0);
    nb                  = moon_msg_span_alloc(g, &g->n_bytes, n, 8, 0);
    sum                 = moon_msg_span_alloc(g, &g->checksum, n, 8, 0);
    status              = clients_track(self, st, msg->src);
    if (status == MOON_OK) {
        status = fill_desc(st, g, &g->desc, &g->base);
    }
    for (uint32_t i = 0; i < n; i++) {
        moon_kv_key_t key = {keys[2 * i], keys[2 * i + 1]};
        moon_kv_get_t get = {0};
        moon_status_t s   = status;

        vec_events(self, st);
        if (s == MOON_OK) {
            s = moon_kv_shard_get(st->kv, &tag, key, client_of(msg), now_of(self), &get);
        }
        gr[i]    = reqs[i];
        gs[i]    = (uint32_t)s;
        lease[i] = s == MOON_OK ? get.lease : 0;
        off[i]   = get.offset;
        nb[i]    = get.n_bytes;
        sum[i]   = get.checksum;
    }
    publish_events(self, st);
    /* moon_send, not moon_tell: an undelivered grant is still ours to read */
    if (moon_send(self, msg->src, &g->hdr) != MOON_OK) {
        for (uint32_t i = 0; i < n; i++) {
            if ((int32_t)gs[i] == MOON_OK) {
                (void)moon_kv_shard_release(st->kv, lease[i]);
            }
        }
        moon_msg_release(&g->hdr);
    }
    return MOON_OK;
}

static moon_status_t shard_on_releasev(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t               *st      = moon_actor_state(self);
    const moon_store_releasev_t *q       = (const moon_store_releasev_t *)msg;
    const moon_span_t           *more[1] = {&q->lease};
    uint32_t                     n       = vec_n(&q->reqs, more, 1, NULL);
    const uint64_t *reqs = MOON_SPAN_PTR(q, q->reqs), *lease = MOON_SPAN_PTR(q, q->lease);
    int32_t         status[MOON_STORE_VEC_MAX];

    if (n == 0) {
        return vec_bad(st, msg);
    }
    for (uint32_t i = 0; i < n; i++) {
        status[i] = moon_kv_shard_release(st->kv, lease[i]);
    }
    replyv_send(self, st, msg, reqs, status, n);
    return MOON_OK;
}

static moon_status_t shard_on_remove(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t             *st  = moon_actor_state(self);
    const moon_store_remove_t *q   = (const moon_store_remove_t *)msg;
    moon_kv_key_t              key = {q->key_lo, q->key_hi};
    moon_status_t              status;

    status = moon_kv_shard_remove(st->kv, key);
    publish_events(self, st);
    return reply(self, msg, q->req, status);
}

/* A weight version retired: its blocks go (and the index hears of it). */
static moon_status_t shard_on_retire(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t             *st = moon_actor_state(self);
    const moon_store_retire_t *q  = (const moon_store_retire_t *)msg;
    uint64_t                   n  = 0;

    moon_kv_shard_remove_older(st->kv, q->model_id, q->version, &n);
    MOON_INFO("store shard %u: %llu blocks of weight versions below %llu removed", st->shard_id,
              (unsigned long long)n, (unsigned long long)q->version);
    publish_events(self, st);
    return MOON_OK;
}

static moon_status_t shard_on_pin(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t          *st  = moon_actor_state(self);
    const moon_store_pin_t *q   = (const moon_store_pin_t *)msg;
    moon_kv_key_t           key = {q->key_lo, q->key_hi};
    moon_status_t           status;

    status = q->unpin ? moon_kv_shard_unpin(st->kv, key) : moon_kv_shard_pin(st->kv, key);
    publish_events(self, st);
    return reply(self, msg, q->req, status);
}

static moon_status_t shard_on_renew(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t            *st = moon_actor_state(self);
    const moon_store_renew_t *q  = (const moon_store_renew_t *)msg;
    moon_status_t             status;

    st->n_renewals++;
    if (q->what == MOON_STORE_RENEW_RESERVATION) {
        status = moon_kv_shard_reserve_renew(st->kv, q->id, now_of(self));
    } else if (q->what == MOON_STORE_RENEW_LEASE) {
        status = moon_kv_shard_lease_renew(st->kv, q->id, now_of(self));
    } else {
        status = MOON_ERR_INVALID_PARAM;
    }
    return reply(self, msg, q->req, status);
}

typedef struct {
    uint64_t *ev; /* NULL: count only */
    uint32_t  n;
} snapshot_t;

static void snapshot_add(void *arg, moon_kv_key_t key, const moon_kv_tag_t *tag)
{
    snapshot_t *s = arg;

    if (s->ev != NULL) {
        put_event(s->ev + (size_t)s->n * MOON_STORE_EVENT_U64S, MOON_KV_EVENT_STORED, key, tag);
    }
    s->n++;
}

/* Every readable block, as STORED events flagged as a snapshot; the first
 * part goes even when the shard is empty (it resets the subscriber's view).
 * A part that cannot be sent leaves a gap the subscriber sees at the next
 * live event (it then subscribes again). */
static void send_snapshot(moon_actor_t *self, shard_state_t *st, moon_addr_t to)
{
    snapshot_t count = {NULL, 0}, all;
    uint32_t   done  = 0;

    moon_kv_shard_foreach(st->kv, snapshot_add, &count);
    all.ev = moon_malloc(((size_t)count.n + 1) * MOON_STORE_EVENT_U64S * 8);
    all.n  = 0;
    if (all.ev == NULL) {
        MOON_WARN("store shard %u: no memory for a snapshot of %u blocks", st->shard_id, count.n);
        return;
    }
    moon_kv_shard_foreach(st->kv, snapshot_add, &all);
    do {
        uint32_t             n = MOON_MIN(all.n - done, EVENTS_PER_MSG);
        moon_store_events_t *m =
            moon_msg_new(MOON_MSG_STORE_EVENTS, (size_t)n * MOON_STORE_EVENT_U64S * 8);
        if (m == NULL) {
            break;
        }
        m->shard_id = st->shard_id;
        m->seq      = st->event_seq;
        m->snapshot = done == 0 ? 1 : 2;
        if (n > 0) {
            memcpy(moon_msg_span_alloc(m, &m->ev, n * MOON_STORE_EVENT_U64S, 8, 0),
                   all.ev + (size_t)done * MOON_STORE_EVENT_U64S,
                   (size_t)n * MOON_STORE_EVENT_U64S * 8);
        }
        moon_tell(self, to, &m->hdr);
        done += n;
    } while (done < all.n);
    moon_free(all.ev);
}

static moon_status_t shard_on_subscribe(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t                *st = moon_actor_state(self);
    const moon_store_subscribe_t *q  = (const moon_store_subscribe_t *)msg;
    uint32_t                      i;
    moon_status_t                 status;

    for (i = 0; i < st->n_subs && st->subs[i] != msg->src; i++) {
    }
    if (q->unsubscribe) {
        if (i == st->n_subs) {
            return reply(self, msg, q->req, MOON_ERR_NOT_FOUND);
        }
        st->subs[i] = st->subs[--st->n_subs];
        return reply(self, msg, q->req, MOON_OK);
    }
    if (i < st->n_subs) {
        return reply(self, msg, q->req, MOON_ERR_EXISTS);
    }
    if (st->n_subs == MOON_STORE_MAX_SUBSCRIBERS || msg->src == MOON_ADDR_NONE) {
        return reply(self, msg, q->req, MOON_ERR_NO_RESOURCE);
    }
    st->subs[st->n_subs++] = msg->src;
    status                 = reply(self, msg, q->req, MOON_OK);
    send_snapshot(self, st, msg->src);
    return status;
}

static moon_status_t shard_on_stats(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t            *st = moon_actor_state(self);
    moon_store_stats_reply_t *r  = moon_msg_new(MOON_MSG_STORE_STATS_REPLY, 0);
    moon_kv_shard_stats_t     s;

    if (r == NULL) {
        return MOON_OK;
    }
    moon_kv_shard_stats(st->kv, &s);
    r->req                    = ((const moon_store_stats_t *)msg)->req;
    r->shard_id               = st->shard_id;
    r->n_slots                = s.n_slots;
    r->used_slots             = s.used_slots;
    r->n_reserved             = s.n_reserved;
    r->n_committed            = s.n_committed;
    r->n_pinned               = s.n_pinned;
    r->n_leases               = s.n_leases;
    r->n_subscribers          = st->n_subs;
    r->n_puts                 = s.n_puts;
    r->n_gets                 = s.n_gets;
    r->n_get_misses           = s.n_get_misses;
    r->n_evicted              = s.n_evicted;
    r->n_expired_reservations = s.n_expired_reservations;
    r->n_expired_leases       = s.n_expired_leases;
    r->n_dropped              = st->n_dropped;
    r->n_corrupt              = s.n_corrupt;
    r->n_tag_mismatch         = s.n_tag_mismatch;
    r->n_renewals             = st->n_renewals;
    (void)moon_tell(self, msg->src, &r->hdr);
    return MOON_OK;
}

static moon_status_t shard_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t *st = moon_actor_state(self);
    uint64_t       n  = 0;

    (void)msg;
    moon_kv_shard_expire(st->kv, now_of(self), st->lease_timeout_ns, &n);
    if (n > 0) {
        MOON_DEBUG_LOG("store shard %u: %llu reservations/leases expired", st->shard_id,
                       (unsigned long long)n);
    }
    publish_events(self, st);
    return MOON_OK;
}

/* A client ended (or its rank was lost): its reservations are revoked and its
 * leases ended, so a client dying mid-put or mid-get leaks nothing. */
static moon_status_t shard_on_down(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t         *st = moon_actor_state(self);
    const moon_sys_down_t *m  = (const moon_sys_down_t *)msg;
    uint64_t               n;

    if (moon_htab_remove(st->clients, &m->actor) != MOON_OK) {
        return MOON_OK; /* not a client */
    }
    n = moon_kv_shard_drop_client(st->kv, m->actor);
    st->n_dropped += n;
    if (n > 0) {
        MOON_INFO("store shard %u: client %llx ended (%s), %llu reservations/leases dropped",
                  st->shard_id, (unsigned long long)m->actor,
                  moon_status_str((moon_status_t)m->reason), (unsigned long long)n);
    }
    return MOON_OK;
}

/* A rank was lost: its clients come as DOWNs; forget its subscribers here. */
static moon_status_t shard_on_peer_down(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    shard_state_t              *st = moon_actor_state(self);
    const moon_sys_peer_down_t *m  = (const moon_sys_peer_down_t *)msg;

    for (uint32_t i = 0; i < st->n_subs; i++) {
        if (moon_addr_rank(st->subs[i]) == m->rank) {
            st->subs[i--] = st->subs[--st->n_subs];
        }
    }
    return MOON_OK;
}

/* ---- lifecycle ------------------------------------------------------------ */
static moon_status_t shard_init(moon_actor_t *self, const void *args)
{
    const moon_store_shard_args_t *a  = args;
    shard_state_t                 *st = moon_actor_state(self);
    moon_kv_shard_config_t         cfg;
    size_t                         arena_bytes = 0;
    moon_status_t                  status;

    if (a == NULL || a->slot_bytes == 0 || a->n_slots == 0 || a->max_clients > (1u << 24) ||
        (a->virtual_payload && a->dist != NULL)) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_store_msgs_register();
    if (status != MOON_OK) {
        return status;
    }
    st->dist             = a->dist;
    st->shard_id         = a->shard_id;
    st->lease_timeout_ns = a->lease_timeout_ns;
    st->cap_events       = a->n_slots + 64; /* one call evicts at most the arena */
    st->n_alloc_events   = a->virtual_payload ? MOON_MIN(st->cap_events, 64) : st->cap_events;
    st->events           = moon_calloc(st->n_alloc_events, sizeof(*st->events));
    st->max_clients      = a->max_clients ? a->max_clients : DEFAULT_MAX_CLIENTS;
    if (st->events == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto err_free_events;
    }
    status = moon_htab_create(&clients_type, NULL, st->max_clients, MOON_HTAB_FIXED, &st->clients);
    if (status != MOON_OK) {
        goto err_free_events;
    }
    moon_kv_shard_config_init(&cfg);
    cfg.shard_id         = a->shard_id;
    cfg.slot_bytes       = a->slot_bytes;
    cfg.n_slots          = a->n_slots;
    cfg.verify_on_commit = a->verify_on_commit;
    cfg.verify_on_get    = a->verify_on_get;
    cfg.ssd_path         = a->ssd_path;
    cfg.ssd_bytes        = a->ssd_path != NULL ? a->ssd_bytes : 0;
    cfg.virtual_payload  = a->virtual_payload;
    cfg.on_event         = on_kv_event;
    cfg.event_arg        = st;
    if (a->reserve_timeout_ns != 0) {
        cfg.reserve_timeout_ns = a->reserve_timeout_ns;
    }
    if (st->dist != NULL) {
        /* The arena comes from the transport (a shared-memory segment that
         * same-host peers map): a client's put or get is then a plain copy
         * on its side. Registered heap memory would need this rank's progress
         * for every transfer (emulated RMA), a round trip to a napping
         * progress thread when ranks outnumber cores. */
        if (a->slot_bytes == 0 || a->n_slots == 0 || a->slot_bytes > SIZE_MAX / a->n_slots) {
            status = MOON_ERR_INVALID_PARAM;
            goto err_free_events;
        }
        cfg.arena_bytes = a->slot_bytes * a->n_slots;
        status          = moon_dist_region_alloc(st->dist, cfg.arena_bytes, &cfg.arena, &st->reg);
        if (status != MOON_OK) {
            MOON_ERROR("store shard %u: allocating its %zu-byte arena failed: %s", st->shard_id,
                       cfg.arena_bytes, moon_status_str(status));
            goto err_free_events;
        }
        /* blocks are written by a client and read later by another */
        moon_dist_region_set_flags(st->reg, MOON_DIST_REGION_STREAM);
    }
    status = moon_kv_shard_create(&cfg, &st->kv);
    if (status != MOON_OK) {
        goto err_deregister;
    }
    st->base = moon_kv_shard_arena(st->kv, &arena_bytes);
    /* Fault the arena in now: a remote write into an untouched page costs a
     * page fault in this process per 4 KiB (with CMA, in the writer's call),
     * which would make the first fill of the store several times slower.
     * Bound first, the pages are first touched on this rank's node. */
    if (st->base != NULL) {
        int32_t node = -1;
        if (a->numa && moon_numa_bind(st->base, arena_bytes, -1, &node) == MOON_OK) {
            MOON_INFO(
                "store shard %u: %zu MiB arena bound to NUMA node %d (that of the rank's cores)",
                st->shard_id, arena_bytes >> 20, node);
        }
        memset(st->base, 0, arena_bytes);
    }
    if (st->dist != NULL) {
        status = moon_dist_watch_peers(st->dist, moon_actor_addr(self));
        if (status != MOON_OK) {
            goto err_destroy_kv;
        }
    }
    status = moon_timer_start(self, a->tick_ns ? a->tick_ns : DEFAULT_TICK_NS,
                              a->tick_ns ? a->tick_ns : DEFAULT_TICK_NS, 0, &st->timer);
    if (status != MOON_OK) {
        goto err_destroy_kv;
    }
    if (a->name != NULL) {
        status = st->dist != NULL
                     ? moon_dist_register(st->dist, a->name, moon_actor_addr(self))
                     : moon_register(moon_actor_runtime(self), a->name, moon_actor_addr(self));
        if (status != MOON_OK) {
            goto err_cancel_timer;
        }
    }
    MOON_INFO("store shard %u: %u slots of %zu bytes", st->shard_id, a->n_slots, a->slot_bytes);
    return MOON_OK;

err_cancel_timer:
    (void)moon_timer_cancel(self, st->timer);
err_destroy_kv:
    moon_kv_shard_destroy(st->kv);
    st->kv = NULL;
err_deregister:
    moon_dist_region_deregister(st->dist, st->reg); /* frees the arena; NULL: no-op */
    st->reg = NULL;
err_free_events:
    moon_htab_destroy(st->clients);
    moon_free(st->events);
    st->clients = NULL;
    st->events  = NULL;
    return status;
}

static void shard_fini(moon_actor_t *self)
{
    shard_state_t *st = moon_actor_state(self);

    moon_kv_shard_destroy(st->kv); /* borrows the arena: before the region goes */
    if (st->reg != NULL) {
        moon_dist_region_deregister(st->dist, st->reg);
    }
    moon_htab_destroy(st->clients);
    moon_free(st->events);
}

const moon_actor_ops_t moon_store_shard_ops = {
    .name        = "store_shard",
    .state_bytes = sizeof(shard_state_t),
    .init        = shard_init,
    .fini        = shard_fini,
    .on_msg =
        {
            [MOON_MSG_STORE_QUERY]        = shard_on_query,
            [MOON_MSG_STORE_PUT_RESERVE]  = shard_on_reserve,
            [MOON_MSG_STORE_PUT_COMMIT]   = shard_on_commit,
            [MOON_MSG_STORE_PUT_REVOKE]   = shard_on_revoke,
            [MOON_MSG_STORE_GET]          = shard_on_get,
            [MOON_MSG_STORE_RELEASE]      = shard_on_release,
            [MOON_MSG_STORE_REMOVE]       = shard_on_remove,
            [MOON_MSG_STORE_RETIRE]       = shard_on_retire,
            [MOON_MSG_STORE_PIN]          = shard_on_pin,
            [MOON_MSG_STORE_RENEW]        = shard_on_renew,
            [MOON_MSG_STORE_SUBSCRIBE]    = shard_on_subscribe,
            [MOON_MSG_STORE_STATS]        = shard_on_stats,
            [MOON_MSG_STORE_PUT_RESERVEV] = shard_on_reservev,
            [MOON_MSG_STORE_PUT_COMMITV]  = shard_on_commitv,
            [MOON_MSG_STORE_GETV]         = shard_on_getv,
            [MOON_MSG_STORE_RELEASEV]     = shard_on_releasev,
            [MOON_MSG_SYS_TIMER]          = shard_on_timer,
            [MOON_MSG_SYS_DOWN]           = shard_on_down,
            [MOON_MSG_SYS_PEER_DOWN]      = shard_on_peer_down,
        },
};
