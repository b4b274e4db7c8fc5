/* tests/unit/actors/store_driver.h - a test actor driving the store: it owns a
 * store client (or none: a "raw" actor speaking the protocol by hand, which
 * can die holding a reservation or a lease) and runs commands sent to it as
 * D_CMD messages; each command's outcome lands in d_res[slot] (atomic done
 * flag), readable from the test's main thread. Used by the single-rank tests
 * (deterministic executor) and the multi-rank ones (tests/kvstore_mpi). */
#ifndef MOON_TEST_STORE_DRIVER_H
#define MOON_TEST_STORE_DRIVER_H

#include "moonlet/alloc.h"
#include "moonlet/runtime.h"
#include "moonlet/store_client.h"
#include "store_shard.h"

#include <stdatomic.h>
#include <string.h>

enum {
    D_STATS = 100, /* STATS to `to` */
    D_SUB,         /* SUBSCRIBE to `to` */
    D_RAW_RESERVE, /* PUT_RESERVE of len bytes to `to`; aux 1: die after the grant */
    D_RAW_GET,     /* GET to `to`; aux 1: die after the grant */
    D_RAW_QUERY,   /* QUERY of aux (op) with len keys from buf to `to` */
    D_EXIT,        /* die (abnormal) */
    D_EXPIRE,      /* moon_store_client_expire(now, timeout aux); n_hit = how many ended */
    D_PUTV,        /* aux puts in one batch: key (lo + i, hi), buf + i * len, slot + i */
    D_GETV,        /* aux gets in one batch: key (lo + i, hi) into buf + i * len, slot + i */
};

#define D_CMD_FIELDS(F, T)                                                                         \
    F(T, u32, op)                                                                                  \
    F(T, u64, key_lo)                                                                              \
    F(T, u64, key_hi) F(T, u64, buf) F(T, u64, len) F(T, u64, slot) F(T, u64, aux) F(T, addr, to)
#define D_MSGS(X) X(D_MSG_CMD, d_cmd_t, D_CMD_FIELDS)
MOON_MSG_DECLARE(D_MSGS, 200, D_MSG_END)
MOON_MSG_DEFINE(D_MSGS, d_msg_descs)

#define D_MAX_RES 256

typedef struct {
    _Atomic int              done;
    moon_status_t            status;
    uint64_t                 n_bytes;
    uint32_t                 n_hit, shard_id, n_replicas;
    uint64_t                 token; /* raw grants: token or lease */
    moon_store_stats_reply_t stats;
} d_res_t;

static d_res_t          d_res[D_MAX_RES];
static _Atomic uint64_t d_events[8]; /* by moon_kv_event_kind_t */

typedef struct {
    moon_store_client_config_t cfg; /* n_shards 0: a raw actor without a client */
    moon_addr_t                shards[MOON_STORE_CLIENT_MAX_SHARDS];
    uint64_t second_version; /* non-zero: a second client under this weight version, used
                                by PUT/GET commands with aux 2 */
} d_args_t;

typedef struct {
    moon_store_client_t *client, *client2;
    uint64_t             die_after_grant[D_MAX_RES];
} d_state_t;

static void d_finish(uint64_t slot, moon_status_t status)
{
    if (slot < D_MAX_RES) {
        d_res[slot].status = status;
        atomic_store(&d_res[slot].done, 1);
    }
}

static void d_on_done(moon_actor_t *self, void *arg, const moon_store_done_t *done)
{
    d_res_t *r = &d_res[done->cookie % D_MAX_RES];

    (void)self;
    (void)arg;
    r->n_bytes    = done->n_bytes;
    r->n_hit      = done->n_hit;
    r->shard_id   = done->shard_id;
    r->n_replicas = done->n_replicas;
    d_finish(done->cookie, done->status);
}

static moon_status_t d_init(moon_actor_t *self, const void *args)
{
    const d_args_t            *a  = args;
    d_state_t                 *st = moon_actor_state(self);
    moon_store_client_config_t cfg;

    if (moon_msg_register(d_msg_descs) != MOON_OK || moon_store_msgs_register() != MOON_OK) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (a == NULL || a->cfg.n_shards == 0) {
        return MOON_OK;
    }
    cfg         = a->cfg;
    cfg.shards  = a->shards;
    cfg.on_done = d_on_done;
    if (a->second_version != 0) {
        moon_store_client_config_t cfg2 = cfg;
        moon_status_t              status;
        cfg2.tag.weight_version = a->second_version;
        status                  = moon_store_client_create(self, &cfg2, &st->client2);
        if (status != MOON_OK) {
            return status;
        }
    }
    return moon_store_client_create(self, &cfg, &st->client);
}

static void d_fini(moon_actor_t *self)
{
    d_state_t *st = moon_actor_state(self);

    moon_store_client_destroy(st->client);
    moon_store_client_destroy(st->client2);
}

static moon_status_t d_on_cmd(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    d_state_t     *st     = moon_actor_state(self);
    const d_cmd_t *c      = (const d_cmd_t *)msg;
    moon_kv_key_t  key    = {c->key_lo, c->key_hi};
    moon_status_t  status = MOON_OK;

    switch (c->op) {
    case MOON_STORE_OP_PUT:
        status = moon_store_client_put(c->aux == 2 ? st->client2 : st->client, key,
                                       (const void *)(uintptr_t)c->buf, c->len, NULL, c->slot);
        break;
    case MOON_STORE_OP_GET:
        status = moon_store_client_get(c->aux == 2 ? st->client2 : st->client, key,
                                       (void *)(uintptr_t)c->buf, c->len, NULL, c->slot);
        break;
    case MOON_STORE_OP_EXISTS:
    case MOON_STORE_OP_PREFIX:
        status = moon_store_client_query(
            st->client, c->op, (const moon_kv_key_t *)(uintptr_t)c->buf, (uint32_t)c->len, c->slot);
        break;
    case MOON_STORE_OP_REMOVE:
    case MOON_STORE_OP_PIN:
    case MOON_STORE_OP_UNPIN:
        status = moon_store_client_apply(st->client, c->op, key, c->slot);
        break;
    case D_STATS: {
        moon_store_stats_t *m = moon_msg_new(MOON_MSG_STORE_STATS, 0);
        m->req                = c->slot;
        status                = moon_tell(self, c->to, &m->hdr);
        break;
    }
    case D_SUB: {
        moon_store_subscribe_t *m = moon_msg_new(MOON_MSG_STORE_SUBSCRIBE, 0);
        m->req                    = c->slot;
        status                    = moon_tell(self, c->to, &m->hdr);
        break;
    }
    case D_RAW_RESERVE: {
        moon_store_put_reserve_t *m              = moon_msg_new(MOON_MSG_STORE_PUT_RESERVE, 0);
        m->req                                   = c->slot;
        m->model_id                              = 1;
        m->weight_version                        = 1;
        m->key_lo                                = c->key_lo;
        m->key_hi                                = c->key_hi;
        m->n_bytes                               = c->len;
        st->die_after_grant[c->slot % D_MAX_RES] = c->aux;
        status                                   = moon_tell(self, c->to, &m->hdr);
        break;
    }
    case D_RAW_GET: {
        moon_store_get_t *m                      = moon_msg_new(MOON_MSG_STORE_GET, 0);
        m->req                                   = c->slot;
        m->model_id                              = 1;
        m->weight_version                        = 1;
        m->key_lo                                = c->key_lo;
        m->key_hi                                = c->key_hi;
        st->die_after_grant[c->slot % D_MAX_RES] = c->aux;
        status                                   = moon_tell(self, c->to, &m->hdr);
        break;
    }
    case D_RAW_QUERY: {
        moon_store_query_t *m = moon_msg_new(MOON_MSG_STORE_QUERY, c->len * 8 + 8);
        m->req                = c->slot;
        m->op                 = (uint32_t)c->aux;
        m->model_id           = 1;
        m->weight_version     = 1;
        memcpy(moon_msg_span_alloc(m, &m->keys, (uint32_t)c->len, 8, 0),
               (const void *)(uintptr_t)c->buf, c->len * 8);
        status = moon_tell(self, c->to, &m->hdr);
        break;
    }
    case D_EXPIRE:
        d_res[c->slot % D_MAX_RES].n_hit =
            moon_store_client_expire(st->client, moon_now(moon_actor_runtime(self)), c->aux);
        break;
    case D_PUTV:
    case D_GETV:
        moon_store_client_batch_begin(st->client);
        for (uint64_t i = 0; i < c->aux; i++) {
            moon_kv_key_t k = {c->key_lo + i, c->key_hi};
            char         *b = (char *)(uintptr_t)c->buf + i * c->len;
            moon_status_t one =
                c->op == D_PUTV
                    ? moon_store_client_put(st->client, k, b, c->len, NULL, c->slot + i)
                    : moon_store_client_get(st->client, k, b, c->len, NULL, c->slot + i);
            if (one != MOON_OK) {
                d_finish(c->slot + i, one);
            }
        }
        moon_store_client_batch_end(st->client);
        return MOON_OK;
    case D_EXIT:
        d_finish(c->slot, MOON_OK);
        moon_actor_exit(self, MOON_ERR_IO);
        return MOON_OK;
    default:
        status = MOON_ERR_INVALID_PARAM;
    }
    if (status != MOON_OK || c->op == D_EXPIRE) {
        d_finish(c->slot, status); /* refused at the call: no on_done follows */
    }
    return MOON_OK;
}

/* Store messages that are not the client's: raw replies, stats, events. */
static moon_status_t d_on_store(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    d_state_t *st = moon_actor_state(self);

    if (st->client != NULL && moon_store_client_handle(st->client, msg)) {
        return MOON_OK;
    }
    if (st->client2 != NULL && moon_store_client_handle(st->client2, msg)) {
        return MOON_OK;
    }
    switch (msg->type) {
    case MOON_MSG_STORE_EVENTS: {
        const moon_store_events_t *e  = (const moon_store_events_t *)msg;
        const uint64_t            *ev = MOON_SPAN_PTR(e, e->ev);
        for (uint32_t i = 0; i + MOON_STORE_EVENT_U64S <= e->ev.n; i += MOON_STORE_EVENT_U64S) {
            atomic_fetch_add(&d_events[ev[i] & 7], 1);
        }
        break;
    }
    case MOON_MSG_STORE_STATS_REPLY: {
        const moon_store_stats_reply_t *r = (const moon_store_stats_reply_t *)msg;
        if (r->req < D_MAX_RES) {
            d_res[r->req].stats = *r;
            d_finish(r->req, MOON_OK);
        }
        break;
    }
    case MOON_MSG_STORE_REPLY: {
        const moon_store_reply_t *r = (const moon_store_reply_t *)msg;
        d_finish(r->req, (moon_status_t)r->status);
        break;
    }
    case MOON_MSG_STORE_QUERY_REPLY: {
        const moon_store_query_reply_t *r = (const moon_store_query_reply_t *)msg;
        if (r->req < D_MAX_RES) {
            d_res[r->req].n_hit = r->n_hit;
            d_finish(r->req, (moon_status_t)r->status);
        }
        break;
    }
    case MOON_MSG_STORE_PUT_GRANT:
    case MOON_MSG_STORE_GET_GRANT: {
        int      put = msg->type == MOON_MSG_STORE_PUT_GRANT;
        uint64_t req = put ? ((const moon_store_put_grant_t *)msg)->req
                           : ((const moon_store_get_grant_t *)msg)->req;
        if (req < D_MAX_RES) {
            d_res[req].token   = put ? ((const moon_store_put_grant_t *)msg)->token
                                     : ((const moon_store_get_grant_t *)msg)->lease;
            d_res[req].n_bytes = put ? 0 : ((const moon_store_get_grant_t *)msg)->n_bytes;
            d_finish(req, (moon_status_t)(put ? ((const moon_store_put_grant_t *)msg)->status
                                              : ((const moon_store_get_grant_t *)msg)->status));
            if (st->die_after_grant[req]) {
                moon_actor_exit(self, MOON_ERR_IO); /* dies holding what it was granted */
            }
        }
        break;
    }
    default:
        break;
    }
    return MOON_OK;
}

static const moon_actor_ops_t d_ops = {
    .name        = "store-driver",
    .state_bytes = sizeof(d_state_t),
    .init        = d_init,
    .fini        = d_fini,
    .on_msg      = {MOON_STORE_CLIENT_ON_MSG(d_on_store), [MOON_MSG_SYS_DOWN] = d_on_store,
                    [MOON_MSG_STORE_EVENTS] = d_on_store, [MOON_MSG_STORE_STATS_REPLY] = d_on_store,
                    [D_MSG_CMD] = d_on_cmd},
};

/* Builds a command (the test sends it with moon_runtime_send). */
static inline d_cmd_t *d_cmd(uint32_t op, uint64_t slot, moon_kv_key_t key, const void *buf,
                             uint64_t len, uint64_t aux, moon_addr_t to)
{
    d_cmd_t *c = moon_msg_new(D_MSG_CMD, 0);

    c->op     = op;
    c->slot   = slot;
    c->key_lo = key.lo;
    c->key_hi = key.hi;
    c->buf    = (uint64_t)(uintptr_t)buf;
    c->len    = len;
    c->aux    = aux;
    c->to     = to;
    memset(&d_res[slot % D_MAX_RES], 0, sizeof(d_res[0]));
    return c;
}

static inline unsigned char d_byte(size_t i, uint64_t seed)
{
    return (unsigned char)((i * 131u + seed * 7u + (i >> 8)) & 0xff);
}

static inline void d_fill(void *buf, size_t n, uint64_t seed)
{
    unsigned char *p = buf;

    for (size_t i = 0; i < n; i++) {
        p[i] = d_byte(i, seed);
    }
}

/* 1 if buf holds what d_fill(buf, n, seed) wrote. */
static inline int d_check(const void *buf, size_t n, uint64_t seed)
{
    const unsigned char *p = buf;

    for (size_t i = 0; i < n; i++) {
        if (p[i] != d_byte(i, seed)) {
            return 0;
        }
    }
    return 1;
}

#endif /* MOON_TEST_STORE_DRIVER_H */
