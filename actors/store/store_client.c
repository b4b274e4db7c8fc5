/* actors/store/store_client.c - the store client library (store_client.h). Every
 * operation takes a slot of a fixed table; requests carry the slot, its
 * generation and the replica index in `req` (and in bulk cookies), so a reply
 * to an operation that already finished is recognised and undone (a late grant
 * is revoked or released) rather than misapplied.
 *
 * Batching (moon_store_client_batch_begin/_end, and every handle() call):
 * the per-key requests (reserve, commit, get, release) queue instead of
 * leaving, and at the outermost end each (shard, verb) group leaves as one
 * vector message (a group of one as the singular message). The operations'
 * state machines are the same either way; a vector answer is taken apart
 * into its entries. */
#include "moonlet/store_client.h"

#include "moonlet/alloc.h"
#include "moonlet/kv_placement.h"
#include "moonlet/log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Ids (reqs, bulk cookies, monitor refs): tag (8 bits) | client instance (12) |
 * operation generation (12) | slot (24) | replica (8). The instance tells apart
 * several clients fed by one actor. */
#define ID_TAG 0xC5ull
#define ID_HI(_c) ((ID_TAG << 56) | ((uint64_t)(_c)->instance << 44))
/* The top bits of the slot field (slots stay below 2^22): the reply is to a
 * RENEW, or to the RELEASE of a get whose shard confirms its lease. The
 * client's renewal timer carries ID_HI | ID_TIMER (no slot). */
#define ID_RENEW (1ull << 31)
#define ID_CHECK (1ull << 30)
#define ID_MARKS (ID_RENEW | ID_CHECK)
#define ID_TIMER 0xffffffffull
#define MAX_OPS (1u << 22)
#define DEFAULT_RENEW_NS 2000000000ull
#define DEFAULT_MAX_OPS 256u
#define MAX_T MOON_STORE_CLIENT_MAX_SHARDS

typedef enum {
    R_IDLE = 0, /* not asked (get: not yet tried) */
    R_WAIT,     /* request sent, reply awaited */
    R_XFER,     /* bulk transfer in flight */
    R_COMMIT,   /* put: commit sent */
    R_CHECK,    /* get: bytes read, lease released, the shard's word on it awaited */
    R_DONE,     /* finished well */
    R_FAILED,   /* finished badly */
} rstate_t;

typedef struct {
    uint32_t            gen;
    uint64_t            t_start; /* moon_now at issue */
    uint8_t             in_use;
    uint8_t             op; /* moon_store_op_t */
    uint64_t            cookie;
    moon_kv_key_t       key;
    void               *buf; /* put: the bytes; get: the destination */
    size_t              len; /* put: n_bytes; get: cap */
    moon_dist_region_t *reg;
    uint64_t            checksum;
    uint32_t            n_targets, next, n_pending, n_ok;
    moon_status_t       status;
    uint32_t            targets[MAX_T]; /* shard ids */
    uint8_t             rstate[MAX_T];
    uint64_t            rid[MAX_T]; /* put: token; get: lease */
    uint64_t            got_bytes, got_checksum;
    uint64_t            got_lease_ttl; /* the grant's lease_timeout_ns: 0, leases never expire */
    uint32_t            got_shard;
    uint32_t            n_keys;
    /* not cleared by op_alloc: */
    uint8_t  key_target[MOON_STORE_CLIENT_MAX_KEYS];
    uint64_t rtouch[MAX_T]; /* R_XFER: grant received or last renewed (moon_now) */
    uint8_t  rlost[MAX_T];  /* R_XFER: the shard refused a renewal */
    uint8_t  present[MOON_STORE_CLIENT_MAX_KEYS];
} op_t;

/* The per-key requests that batch. */
typedef enum { V_NONE = 0, V_RESERVE, V_COMMIT, V_GET, V_RELEASE } verb_t;

/* One queued request: reserve (key lo, hi, n_bytes), commit (token,
 * n_bytes, checksum), get (key lo, hi), release (lease). */
typedef struct {
    uint8_t  verb; /* verb_t; V_NONE: taken */
    uint8_t  shard;
    uint64_t req;
    uint64_t a, b, c;
} vreq_t;

struct moon_store_client {
    moon_actor_t        *self;
    uint32_t             instance; /* 12 bits, in every id */
    moon_dist_t         *dist;
    moon_kv_placement_t *placement;
    moon_addr_t          shards[MAX_T];
    uint8_t              live[MAX_T];
    uint32_t             n_shards, n_replicas;
    moon_kv_tag_t        tag;
    int                  verify_get, skip_checksum;
    moon_store_done_fn   on_done;
    void                *arg;
    op_t                *ops; /* max_ops */
    uint32_t            *free_ops;
    uint32_t             n_free, max_ops;
    uint64_t             renew_ns; /* UINT64_MAX: never */
    uint64_t             timer;    /* the renewal timer, when has_timer */
    int                  has_timer;
    /* requests queued while batch_depth > 0 (see the file comment) */
    vreq_t  *vq, *vq_work; /* MOON_STORE_VEC_MAX each */
    uint32_t n_vq, batch_depth;
};

static _Atomic uint32_t next_instance;

/* ---- ids ------------------------------------------------------------------ */
static uint64_t make_id(const moon_store_client_t *c, const op_t *op, uint32_t t)
{
    return ID_HI(c) | ((uint64_t)(op->gen & 0xfffu) << 32) | ((uint64_t)(op - c->ops) << 8) | t;
}

/* The live operation and replica an id names, or NULL (stale or foreign). */
static op_t *op_of_id(moon_store_client_t *c, uint64_t id, uint32_t *t_p)
{
    uint32_t slot = (uint32_t)(id >> 8) & 0xffffffu, t = (uint32_t)id & 0xffu;
    op_t    *op;

    if ((id >> 44) != (ID_HI(c) >> 44) || slot >= c->max_ops) {
        return NULL;
    }
    op = &c->ops[slot];
    if (!op->in_use || (op->gen & 0xfffu) != ((id >> 32) & 0xfffu) || t >= op->n_targets) {
        return NULL;
    }
    *t_p = t;
    return op;
}

static int is_client_id(const moon_store_client_t *c, uint64_t id)
{
    return (id >> 44) == (ID_HI(c) >> 44) && ((uint32_t)(id >> 8) & 0xffffffu) < c->max_ops;
}

/* ---- sending -------------------------------------------------------------- */
static moon_status_t send_to_shard(moon_store_client_t *c, uint32_t shard, void *msg)
{
    moon_status_t status = moon_send(c->self, c->shards[shard], msg);

    if (status != MOON_OK) {
        moon_msg_release(msg);
    }
    return status;
}

/* The singular message of one request, sent now. MOON_ERR_NO_MEMORY, or
 * the send's failure. */
static moon_status_t send_one(moon_store_client_t *c, const vreq_t *e)
{
    switch (e->verb) {
    case V_RESERVE: {
        moon_store_put_reserve_t *m = moon_msg_new(MOON_MSG_STORE_PUT_RESERVE, 0);
        if (m == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        m->req            = e->req;
        m->model_id       = c->tag.model_id;
        m->weight_version = c->tag.weight_version;
        m->key_lo         = e->a;
        m->key_hi         = e->b;
        m->n_bytes        = e->c;
        return send_to_shard(c, e->shard, m);
    }
    case V_COMMIT: {
        moon_store_put_commit_t *m = moon_msg_new(MOON_MSG_STORE_PUT_COMMIT, 0);
        if (m == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        m->req      = e->req;
        m->token    = e->a;
        m->n_bytes  = e->b;
        m->checksum = e->c;
        return send_to_shard(c, e->shard, m);
    }
    case V_GET: {
        moon_store_get_t *m = moon_msg_new(MOON_MSG_STORE_GET, 0);
        if (m == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        m->req            = e->req;
        m->model_id       = c->tag.model_id;
        m->weight_version = c->tag.weight_version;
        m->key_lo         = e->a;
        m->key_hi         = e->b;
        return send_to_shard(c, e->shard, m);
    }
    default: {
        moon_store_release_t *m = moon_msg_new(MOON_MSG_STORE_RELEASE, 0);
        if (m == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        m->req   = e->req; /* 0: no reply */
        m->lease = e->a;
        return send_to_shard(c, e->shard, m);
    }
    }
}

/* One vector message of the n requests es[] (same verb, same shard). */
static moon_status_t send_vec(moon_store_client_t *c, vreq_t *const *es, uint32_t n)
{
    uint32_t  verb = es[0]->verb, shard = es[0]->shard;
    uint64_t *reqs, *x, *y, *z;
    void     *msg;

    switch (verb) {
    case V_RESERVE: {
        moon_store_put_reservev_t *m =
            moon_msg_new(MOON_MSG_STORE_PUT_RESERVEV, (size_t)n * 32 + 32);
        if (m == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        m->model_id       = c->tag.model_id;
        m->weight_version = c->tag.weight_version;
        reqs              = moon_msg_span_alloc(m, &m->reqs, n, 8, 0);
        x                 = moon_msg_span_alloc(m, &m->keys, 2 * n, 8, 0);
        z                 = moon_msg_span_alloc(m, &m->n_bytes, n, 8, 0);
        for (uint32_t i = 0; i < n; i++) {
            reqs[i]      = es[i]->req;
            x[2 * i]     = es[i]->a;
            x[2 * i + 1] = es[i]->b;
            z[i]         = es[i]->c;
        }
        msg = m;
        break;
    }
    case V_COMMIT: {
        moon_store_put_commitv_t *m = moon_msg_new(MOON_MSG_STORE_PUT_COMMITV, (size_t)n * 32 + 32);
        if (m == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        reqs = moon_msg_span_alloc(m, &m->reqs, n, 8, 0);
        x    = moon_msg_span_alloc(m, &m->token, n, 8, 0);
        y    = moon_msg_span_alloc(m, &m->n_bytes, n, 8, 0);
        z    = moon_msg_span_alloc(m, &m->checksum, n, 8, 0);
        for (uint32_t i = 0; i < n; i++) {
            reqs[i] = es[i]->req;
            x[i]    = es[i]->a;
            y[i]    = es[i]->b;
            z[i]    = es[i]->c;
        }
        msg = m;
        break;
    }
    case V_GET: {
        moon_store_getv_t *m = moon_msg_new(MOON_MSG_STORE_GETV, (size_t)n * 24 + 24);
        if (m == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        m->model_id       = c->tag.model_id;
        m->weight_version = c->tag.weight_version;
        reqs              = moon_msg_span_alloc(m, &m->reqs, n, 8, 0);
        x                 = moon_msg_span_alloc(m, &m->keys, 2 * n, 8, 0);
        for (uint32_t i = 0; i < n; i++) {
            reqs[i]      = es[i]->req;
            x[2 * i]     = es[i]->a;
            x[2 * i + 1] = es[i]->b;
        }
        msg = m;
        break;
    }
    default: {
        moon_store_releasev_t *m = moon_msg_new(MOON_MSG_STORE_RELEASEV, (size_t)n * 16 + 16);
        if (m == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        reqs = moon_msg_span_alloc(m, &m->reqs, n, 8, 0);
        x    = moon_msg_span_alloc(m, &m->lease, n, 8, 0);
        for (uint32_t i = 0; i < n; i++) {
            reqs[i] = es[i]->req;
            x[i]    = es[i]->a;
        }
        msg = m;
        break;
    }
    }
    return send_to_shard(c, shard, msg);
}

static void entry_failed(moon_store_client_t *c, const vreq_t *e, moon_status_t status);

/* Sends (or queues, while batching) one request. A failure to send now is
 * returned (nothing changed); a failure at the batch's end goes to
 * entry_failed. */
static moon_status_t req_send(moon_store_client_t *c, uint32_t verb, uint32_t shard, uint64_t req,
                              uint64_t a, uint64_t b, uint64_t x)
{
    vreq_t e = {(uint8_t)verb, (uint8_t)shard, req, a, b, x};

    if (c->batch_depth == 0 || c->n_vq == MOON_STORE_VEC_MAX) {
        return send_one(c, &e);
    }
    c->vq[c->n_vq++] = e;
    return MOON_OK;
}

/* Sends what is queued, one message per (shard, verb) group. Requests whose
 * message could not leave fail (entry_failed: their operations move on, and
 * may queue more, sent by the next round). */
static void vq_flush(moon_store_client_t *c)
{
    vreq_t *group[MOON_STORE_VEC_MAX];

    c->batch_depth++;
    while (c->n_vq > 0) {
        uint32_t n = c->n_vq;
        vreq_t  *w = c->vq_work;

        memcpy(w, c->vq, (size_t)n * sizeof(*w));
        c->n_vq = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t      m = 0;
            moon_status_t status;

            if (w[i].verb == V_NONE) {
                continue;
            }
            for (uint32_t j = i; j < n; j++) {
                if (w[j].verb == w[i].verb && w[j].shard == w[i].shard) {
                    group[m++] = &w[j];
                }
            }
            status = m == 1 ? send_one(c, group[0]) : send_vec(c, group, m);
            for (uint32_t k = 0; k < m; k++) {
                vreq_t e       = *group[k];
                group[k]->verb = V_NONE;
                if (status != MOON_OK) {
                    entry_failed(c, &e, status);
                }
            }
        }
    }
    c->batch_depth--;
}

static void send_release(moon_store_client_t *c, uint32_t shard, uint64_t lease)
{
    (void)req_send(c, V_RELEASE, shard, 0, lease, 0, 0); /* req 0: no reply */
}

static void send_revoke(moon_store_client_t *c, uint32_t shard, uint64_t token)
{
    moon_store_put_revoke_t *m = moon_msg_new(MOON_MSG_STORE_PUT_REVOKE, 0);

    if (m != NULL) {
        m->token = token; /* req 0: no reply */
        (void)send_to_shard(c, shard, m);
    }
}

/* ---- operation slots -------------------------------------------------------- */
static op_t *op_alloc(moon_store_client_t *c, uint32_t kind, uint64_t cookie)
{
    op_t    *op;
    uint32_t gen;

    if (c->n_free == 0) {
        return NULL;
    }
    op  = &c->ops[c->free_ops[--c->n_free]];
    gen = op->gen;
    memset(op, 0, offsetof(op_t, key_target));
    op->gen     = gen;
    op->in_use  = 1;
    op->op      = (uint8_t)kind;
    op->cookie  = cookie;
    op->status  = MOON_OK;
    op->t_start = moon_now(moon_actor_runtime(c->self));
    return op;
}

static void op_free(moon_store_client_t *c, op_t *op)
{
    op->in_use = 0;
    op->gen++;
    c->free_ops[c->n_free++] = (uint32_t)(op - c->ops);
}

/* Ends op: frees its slot first (on_done may start new operations), then reports. */
static void op_finish(moon_store_client_t *c, op_t *op)
{
    moon_store_done_t d = {0};
    uint8_t           present[MOON_STORE_CLIENT_MAX_KEYS];

    d.cookie     = op->cookie;
    d.op         = op->op;
    d.status     = op->status;
    d.n_replicas = op->n_ok;
    if (op->op == MOON_STORE_OP_GET) {
        d.shard_id = op->got_shard;
        d.n_bytes  = op->got_bytes;
    } else if (op->op == MOON_STORE_OP_PUT) {
        d.n_bytes = op->len;
    } else if (op->op == MOON_STORE_OP_EXISTS || op->op == MOON_STORE_OP_PREFIX) {
        d.n_keys  = op->n_keys;
        d.present = present;
        memcpy(present, op->present, op->n_keys);
        for (uint32_t i = 0; i < op->n_keys; i++) {
            if (op->op == MOON_STORE_OP_EXISTS) {
                d.n_hit += op->present[i];
            } else if (op->present[i] && d.n_hit == i) {
                d.n_hit++;
            }
        }
    }
    op_free(c, op);
    c->on_done(c->self, c->arg, &d);
}

/* Keeps the most telling failure: a definite answer beats a lost shard. */
static void op_note(op_t *op, moon_status_t status)
{
    if (status == MOON_OK) {
        return;
    }
    if (op->status == MOON_OK || op->status == MOON_ERR_PEER_LOST ||
        (op->status == MOON_ERR_NOT_FOUND && status == MOON_ERR_CORRUPT)) {
        op->status = status;
    }
}

/* A replica of a multi-target operation (put, query, apply) ended. */
static void replica_end(moon_store_client_t *c, op_t *op, uint32_t t, moon_status_t status)
{
    op->rstate[t] = status == MOON_OK ? R_DONE : R_FAILED;
    if (status == MOON_OK) {
        op->n_ok++;
    } else {
        op_note(op, status);
    }
    if (--op->n_pending == 0) {
        if ((op->op == MOON_STORE_OP_REMOVE || op->op == MOON_STORE_OP_PIN ||
             op->op == MOON_STORE_OP_UNPIN) &&
            op->n_ok > 0) {
            op->status = MOON_OK;
        }
        op_finish(c, op);
    }
}

/* Replica t's bulk transfer starts: its grant is renewed from now on (see
 * renew_sweep) and a refused renewal fails it when it ends. */
static void xfer_begin(moon_store_client_t *c, op_t *op, uint32_t t)
{
    op->rstate[t] = R_XFER;
    op->rtouch[t] = moon_now(moon_actor_runtime(c->self));
    op->rlost[t]  = 0;
}

/* ---- get: try the read set in order ---------------------------------------- */
/* Asks the next candidate shard; when none is left, finishes op - unless
 * from_call (inside moon_store_client_get: on_done is never called from a
 * request call), where it returns the failure and the caller frees op. */
static moon_status_t get_try_next(moon_store_client_t *c, op_t *op, int from_call)
{
    while (op->next < op->n_targets) {
        uint32_t      t     = op->next++;
        uint32_t      shard = op->targets[t];
        moon_status_t status;

        if (!c->live[shard]) {
            MOON_DEBUG_LOG("store client: get skips dead shard %u", shard);
            op_note(op, MOON_ERR_PEER_LOST);
            continue;
        }
        status = req_send(c, V_GET, shard, make_id(c, op, t), op->key.lo, op->key.hi, 0);
        if (status != MOON_OK) {
            op_note(op, status == MOON_ERR_NO_MEMORY ? status : MOON_ERR_PEER_LOST);
            continue;
        }
        op->rstate[t] = R_WAIT;
        return MOON_OK;
    }
    if (op->status == MOON_OK) {
        op->status = MOON_ERR_NOT_FOUND;
    }
    if (from_call) {
        return op->status;
    }
    op_finish(c, op);
    return MOON_OK;
}

/* Replica t's get is over and its lease given back: done, or on to the next. */
static void get_end(moon_store_client_t *c, op_t *op, uint32_t t, moon_status_t status)
{
    op->rstate[t] = status == MOON_OK ? R_DONE : R_FAILED;
    if (status == MOON_OK) {
        op->status    = MOON_OK;
        op->got_shard = op->targets[t];
        op->n_ok      = 1;
        op_finish(c, op);
        return;
    }
    op_note(op, status);
    (void)get_try_next(c, op, 0);
}

/* Replica t's transfer ended. Where the shard expires leases by time, the
 * lease may have gone under the transfer (and the slot with it): the release
 * then asks the shard whether it still held it, and the get ends on its word
 * (R_CHECK). */
static void get_done(moon_store_client_t *c, op_t *op, uint32_t t, moon_status_t status)
{
    uint32_t      shard = op->targets[t];
    moon_status_t sent;

    MOON_DEBUG_LOG("store client: get transfer from shard %u: %s", shard, moon_status_str(status));
    if (status == MOON_OK && c->verify_get && op->buf != NULL &&
        moon_kv_checksum(op->buf, (size_t)op->got_bytes) != op->got_checksum) {
        MOON_WARN("store client: block from shard %u failed its checksum", shard);
        status = MOON_ERR_CORRUPT;
    }
    if (status != MOON_OK || op->got_lease_ttl == 0) {
        send_release(c, shard, op->rid[t]);
        get_end(c, op, t, status);
        return;
    }
    sent = req_send(c, V_RELEASE, shard, make_id(c, op, t) | ID_CHECK, op->rid[t], 0, 0);
    if (sent == MOON_ERR_NO_MEMORY) {
        send_release(c, shard, op->rid[t]); /* without its word: this replica failed */
        get_end(c, op, t, MOON_ERR_NO_MEMORY);
        return;
    }
    if (sent != MOON_OK) {
        get_end(c, op, t, MOON_ERR_PEER_LOST);
        return;
    }
    op->rstate[t] = R_CHECK;
}

/* The op (of kind `op_kind`) and target *t_p a grant answers, if that target
 * still waits for it; else NULL, and a late grant that holds something (a
 * lease, a token: handle) is given back to its shard by give_back. */
static op_t *grant_op(moon_store_client_t *c, uint64_t req, uint32_t op_kind, int32_t status,
                      uint32_t shard_id, uint64_t handle,
                      void (*give_back)(moon_store_client_t *, uint32_t, uint64_t), uint32_t *t_p)
{
    op_t *op = op_of_id(c, req, t_p);

    if (op == NULL || op->op != op_kind || op->rstate[*t_p] != R_WAIT) {
        if (status == MOON_OK && shard_id < c->n_shards) {
            give_back(c, shard_id, handle);
        }
        return NULL;
    }
    return op;
}

/* One get grant (of a GET_GRANT or an entry of a GET_GRANTV): the fields of
 * moon_store_get_grant_t; desc borrowed. */
typedef struct {
    uint64_t    req;
    int32_t     status;
    uint32_t    shard_id;
    uint64_t    lease, offset, n_bytes, checksum, base, lease_timeout_ns;
    const void *desc;
    uint32_t    desc_len;
} get_grant_t;

static void on_get_grant(moon_store_client_t *c, const get_grant_t *g)
{
    uint32_t t;
    op_t    *op =
        grant_op(c, g->req, MOON_STORE_OP_GET, g->status, g->shard_id, g->lease, send_release, &t);

    if (op == NULL) {
        return;
    }
    if (g->status != MOON_OK) {
        MOON_DEBUG_LOG("store client: get from shard %u: %s", op->targets[t],
                       moon_status_str((moon_status_t)g->status));
        op->rstate[t] = R_FAILED;
        op_note(op, (moon_status_t)g->status);
        (void)get_try_next(c, op, 0);
        return;
    }
    op->rid[t]        = g->lease;
    op->got_bytes     = g->n_bytes;
    op->got_checksum  = g->checksum;
    op->got_lease_ttl = g->lease_timeout_ns;
    if (g->n_bytes > op->len) {
        send_release(c, op->targets[t], g->lease);
        op->status = MOON_ERR_INVALID_PARAM; /* the caller's buffer is too small */
        op_finish(c, op);
        return;
    }
    if (c->dist == NULL) {
        if (op->buf != NULL) { /* NULL: a virtual block */
            memcpy(op->buf, (const char *)(uintptr_t)g->base + g->offset, (size_t)g->n_bytes);
        }
        get_done(c, op, t, MOON_OK);
        return;
    }
    xfer_begin(c, op, t);
    if (moon_dist_get(c->dist, op->buf, op->reg, g->desc, g->desc_len, g->offset,
                      (size_t)g->n_bytes, moon_actor_addr(c->self), make_id(c, op, t)) != MOON_OK) {
        get_done(c, op, t, MOON_ERR_PEER_LOST);
    }
}

/* ---- put: reserve -> transfer -> commit on every replica -------------------- */
static void put_commit(moon_store_client_t *c, op_t *op, uint32_t t)
{
    moon_status_t sent =
        req_send(c, V_COMMIT, op->targets[t], make_id(c, op, t), op->rid[t], op->len, op->checksum);

    if (sent == MOON_ERR_NO_MEMORY) {
        send_revoke(c, op->targets[t], op->rid[t]);
        replica_end(c, op, t, MOON_ERR_NO_MEMORY);
        return;
    }
    if (sent != MOON_OK) {
        replica_end(c, op, t, MOON_ERR_PEER_LOST);
        return;
    }
    op->rstate[t] = R_COMMIT;
}

/* One put grant (of a PUT_GRANT or an entry of a PUT_GRANTV); desc borrowed. */
typedef struct {
    uint64_t    req;
    int32_t     status;
    uint32_t    shard_id;
    uint64_t    token, offset, base;
    const void *desc;
    uint32_t    desc_len;
} put_grant_t;

static void on_put_grant(moon_store_client_t *c, const put_grant_t *g)
{
    uint32_t t;
    op_t    *op =
        grant_op(c, g->req, MOON_STORE_OP_PUT, g->status, g->shard_id, g->token, send_revoke, &t);

    if (op == NULL) {
        return;
    }
    if (g->status != MOON_OK) {
        replica_end(c, op, t, (moon_status_t)g->status);
        return;
    }
    op->rid[t] = g->token;
    if (c->dist == NULL) {
        if (op->buf != NULL) { /* NULL: a virtual block */
            memcpy((char *)(uintptr_t)g->base + g->offset, op->buf, op->len);
        }
        put_commit(c, op, t);
        return;
    }
    xfer_begin(c, op, t);
    if (moon_dist_put(c->dist, op->buf, op->reg, g->desc, g->desc_len, g->offset, op->len,
                      moon_actor_addr(c->self), make_id(c, op, t)) != MOON_OK) {
        send_revoke(c, op->targets[t], g->token);
        replica_end(c, op, t, MOON_ERR_PEER_LOST);
    }
}

static void on_bulk_done(moon_store_client_t *c, const moon_dist_bulk_done_t *b)
{
    uint32_t      t;
    op_t         *op     = op_of_id(c, b->cookie, &t);
    moon_status_t status = (moon_status_t)b->status;

    if (op == NULL || op->rstate[t] != R_XFER) {
        return;
    }
    if (status == MOON_OK && op->rlost[t]) {
        /* the grant expired under the transfer: a get may have read a slot
         * reused meanwhile, a put may have written one */
        MOON_WARN("store client: shard %u let the grant of a transfer in flight expire",
                  op->targets[t]);
        status = MOON_ERR_TIMED_OUT;
    }
    if (op->op == MOON_STORE_OP_GET) {
        get_done(c, op, t, status);
    } else if (status == MOON_OK) {
        put_commit(c, op, t);
    } else {
        send_revoke(c, op->targets[t], op->rid[t]);
        replica_end(c, op, t, status);
    }
}

/* ---- renewing the grants of transfers in flight ---------------------------- */
/* The client's timer: renews the reservation (put) or lease (get) of every
 * transfer in flight not renewed for half of renew_ns, so a shard that
 * expires grants by time never expires one while its transfer runs. */
static void renew_sweep(moon_store_client_t *c)
{
    uint64_t now = moon_now(moon_actor_runtime(c->self));

    for (uint32_t i = 0; i < c->max_ops; i++) {
        op_t *op = &c->ops[i];

        for (uint32_t t = 0; op->in_use && t < op->n_targets; t++) {
            moon_store_renew_t *m;

            if (op->rstate[t] != R_XFER || op->rlost[t] || now - op->rtouch[t] < c->renew_ns / 2 ||
                (m = moon_msg_new(MOON_MSG_STORE_RENEW, 0)) == NULL) {
                continue;
            }
            m->req = make_id(c, op, t) | ID_RENEW;
            m->what =
                op->op == MOON_STORE_OP_GET ? MOON_STORE_RENEW_LEASE : MOON_STORE_RENEW_RESERVATION;
            m->id = op->rid[t];
            if (send_to_shard(c, op->targets[t], m) == MOON_OK) {
                op->rtouch[t] = now;
            }
        }
    }
}

/* A reply to a RENEW (refused: the transfer fails when it ends) or to a get's
 * checked RELEASE (refused: the lease had expired, the bytes read may be
 * another block's). FIFO per pair: a renewal's reply comes before the
 * release's. */
static void on_marked_reply(moon_store_client_t *c, uint64_t req, int32_t status)
{
    uint32_t t;
    op_t    *op = op_of_id(c, req & ~ID_MARKS, &t);

    if (op == NULL) {
        return;
    }
    if ((req & ID_RENEW) && op->rstate[t] == R_XFER && status != MOON_OK) {
        op->rlost[t] = 1;
    } else if ((req & ID_CHECK) && op->rstate[t] == R_CHECK) {
        if (status != MOON_OK) {
            MOON_WARN("store client: shard %u let the lease of a get expire under its transfer",
                      op->targets[t]);
        }
        get_end(c, op, t, status == MOON_OK ? MOON_OK : MOON_ERR_TIMED_OUT);
    }
}

/* ---- generic replies: commit, remove, pin ------------------------------------ */
static void on_reply(moon_store_client_t *c, uint64_t req, int32_t status)
{
    uint32_t t;
    op_t    *op;

    if (req & ID_MARKS) {
        on_marked_reply(c, req, status);
        return;
    }
    op = op_of_id(c, req, &t);
    if (op == NULL || (op->rstate[t] != R_COMMIT && op->rstate[t] != R_WAIT)) {
        return;
    }
    if (op->op == MOON_STORE_OP_PUT && status != MOON_OK) {
        send_revoke(c, op->targets[t], op->rid[t]); /* e.g. CORRUPT keeps the reservation */
        if (status == MOON_ERR_NOT_FOUND && op->rstate[t] == R_COMMIT) {
            /* the shard no longer held the reservation: it expired */
            replica_end(c, op, t, MOON_ERR_TIMED_OUT);
            return;
        }
    }
    replica_end(c, op, t, (moon_status_t)status);
}

/* A queued request whose message could not leave (vq_flush): its operation
 * moves on as if the send had failed at once. */
static void entry_failed(moon_store_client_t *c, const vreq_t *e, moon_status_t status)
{
    uint32_t t;
    op_t    *op = op_of_id(c, e->req & ~ID_MARKS, &t);

    status = status == MOON_ERR_NO_MEMORY ? status : MOON_ERR_PEER_LOST;
    if (op == NULL || e->req == 0) {
        return; /* a release that wanted no word */
    }
    switch (e->verb) {
    case V_RESERVE:
        if (op->rstate[t] == R_WAIT) {
            replica_end(c, op, t, status);
        }
        break;
    case V_COMMIT:
        if (op->rstate[t] == R_COMMIT) {
            if (status == MOON_ERR_NO_MEMORY) {
                send_revoke(c, op->targets[t], op->rid[t]);
            }
            replica_end(c, op, t, status);
        }
        break;
    case V_GET:
        if (op->rstate[t] == R_WAIT) {
            op->rstate[t] = R_FAILED;
            op_note(op, status);
            (void)get_try_next(c, op, 0);
        }
        break;
    default:
        if ((e->req & ID_CHECK) && op->rstate[t] == R_CHECK) {
            get_end(c, op, t, status);
        }
        break;
    }
}

static void on_query_reply(moon_store_client_t *c, const moon_store_query_reply_t *r)
{
    uint32_t       t, j = 0;
    op_t          *op = op_of_id(c, r->req, &t);
    const uint8_t *present;

    if (op == NULL || op->rstate[t] != R_WAIT) {
        return;
    }
    present = MOON_SPAN_PTR(r, r->present);
    if (r->status == MOON_OK) {
        for (uint32_t i = 0; i < op->n_keys && j < r->present.n; i++) {
            if (op->key_target[i] == t) {
                op->present[i] = present[j++] != 0;
            }
        }
    }
    replica_end(c, op, t, (moon_status_t)r->status);
}

/* A shard ended: gone from the placement; what waited on it fails over. */
static void on_shard_down(moon_store_client_t *c, uint32_t shard, moon_status_t reason)
{
    if (!c->live[shard]) {
        return;
    }
    if (reason == MOON_OK) {
        MOON_INFO("store client: shard %u stopped", shard);
    } else {
        MOON_WARN("store client: shard %u gone (%s)", shard, moon_status_str(reason));
    }
    c->live[shard] = 0;
    (void)moon_kv_placement_set_live(c->placement, shard, 0);
    for (uint32_t i = 0; i < c->max_ops; i++) {
        op_t *op = &c->ops[i];

        for (uint32_t t = 0; op->in_use && t < op->n_targets; t++) {
            if (op->targets[t] != shard || (op->rstate[t] != R_WAIT && op->rstate[t] != R_COMMIT &&
                                            op->rstate[t] != R_CHECK)) {
                continue; /* R_XFER: the bulk lane reports PEER_LOST itself */
            }
            if (op->op == MOON_STORE_OP_GET) {
                op->rstate[t] = R_FAILED;
                op_note(op, MOON_ERR_PEER_LOST);
                (void)get_try_next(c, op, 0);
            } else {
                replica_end(c, op, t, MOON_ERR_PEER_LOST);
            }
        }
    }
}

/* ---- public ------------------------------------------------------------------ */
moon_status_t moon_store_client_create(moon_actor_t *self, const moon_store_client_config_t *cfg,
                                       moon_store_client_t **client_p)
{
    moon_store_client_t *c;
    uint32_t             ids[MAX_T];
    moon_status_t        status;

    if (self == NULL || cfg == NULL || client_p == NULL || cfg->shards == NULL ||
        cfg->n_shards == 0 || cfg->n_shards > MAX_T || cfg->n_replicas == 0 ||
        cfg->n_replicas > cfg->n_shards || cfg->on_done == NULL || cfg->max_ops >= MAX_OPS) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_store_msgs_register();
    if (status != MOON_OK) {
        return status;
    }
    c = moon_calloc(1, sizeof(*c));
    if (c == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    c->self          = self;
    c->instance      = (atomic_fetch_add(&next_instance, 1) & 0xfffu);
    c->dist          = cfg->dist;
    c->n_shards      = cfg->n_shards;
    c->n_replicas    = cfg->n_replicas;
    c->tag           = cfg->tag;
    c->verify_get    = cfg->verify_get;
    c->skip_checksum = cfg->skip_checksum;
    c->on_done       = cfg->on_done;
    c->arg           = cfg->arg;
    c->max_ops       = cfg->max_ops ? cfg->max_ops : DEFAULT_MAX_OPS;
    c->renew_ns      = cfg->renew_ns ? cfg->renew_ns : DEFAULT_RENEW_NS;
    c->ops           = moon_calloc(c->max_ops, sizeof(*c->ops));
    c->free_ops      = moon_calloc(c->max_ops, sizeof(*c->free_ops));
    c->vq            = moon_calloc(MOON_STORE_VEC_MAX, sizeof(*c->vq));
    c->vq_work       = moon_calloc(MOON_STORE_VEC_MAX, sizeof(*c->vq_work));
    if (c->ops == NULL || c->free_ops == NULL || c->vq == NULL || c->vq_work == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto err_free;
    }
    for (uint32_t i = 0; i < c->max_ops; i++) {
        c->free_ops[c->n_free++] = c->max_ops - 1 - i;
    }
    for (uint32_t i = 0; i < c->n_shards; i++) {
        ids[i]       = i;
        c->shards[i] = cfg->shards[i];
        c->live[i]   = 1;
    }
    status = moon_kv_placement_create(ids, c->n_shards, c->n_replicas, &c->placement);
    if (status != MOON_OK) {
        goto err_free;
    }
    /* the timer before the monitors: it can be undone, a monitor cannot */
    if (c->dist != NULL && c->renew_ns != UINT64_MAX) { /* without: no transfer is ever in flight */
        uint64_t half = MOON_MAX(c->renew_ns / 2, 1);

        status = moon_timer_start(self, half, half, ID_HI(c) | ID_TIMER, &c->timer);
        if (status != MOON_OK) {
            goto err_placement;
        }
        c->has_timer = 1;
    }
    for (uint32_t i = 0; i < c->n_shards; i++) {
        status = moon_monitor(self, c->shards[i], ID_HI(c) | i);
        if (status != MOON_OK) {
            goto err_timer;
        }
    }
    *client_p = c;
    return MOON_OK;

err_timer:
    if (c->has_timer) {
        (void)moon_timer_cancel(self, c->timer);
    }
err_placement:
    moon_kv_placement_destroy(c->placement);
err_free:
    moon_free(c->vq_work);
    moon_free(c->vq);
    moon_free(c->free_ops);
    moon_free(c->ops);
    moon_free(c);
    return status;
}

void moon_store_client_destroy(moon_store_client_t *client)
{
    if (client == NULL) {
        return;
    }
    if (client->has_timer) {
        (void)moon_timer_cancel(client->self, client->timer); /* NOT_FOUND once the actor ended */
    }
    moon_kv_placement_destroy(client->placement);
    moon_free(client->vq_work);
    moon_free(client->vq);
    moon_free(client->free_ops);
    moon_free(client->ops);
    moon_free(client);
}

/* One request of a fan-out operation to replica t on `shard` (m consumed). */
static void fan_out_send(moon_store_client_t *c, op_t *op, uint32_t t, uint32_t shard, void *m)
{
    if (send_to_shard(c, shard, m) != MOON_OK) {
        op->rstate[t] = R_FAILED;
        op_note(op, MOON_ERR_PEER_LOST);
        return;
    }
    op->rstate[t] = R_WAIT;
    op->n_pending++;
}

/* After a fan-out: MOON_OK if replies are awaited; else the operation is over
 * and its status is returned (the slot is freed). */
static moon_status_t op_started(moon_store_client_t *c, op_t *op)
{
    moon_status_t status = op->status;

    if (op->n_pending > 0) {
        return MOON_OK;
    }
    op_free(c, op);
    return status;
}

moon_status_t moon_store_client_put(moon_store_client_t *c, moon_kv_key_t key, const void *bytes,
                                    size_t n_bytes, moon_dist_region_t *local_reg, uint64_t cookie)
{
    uint32_t ws[MAX_T], n;
    op_t    *op;

    if (c == NULL || (bytes == NULL && c->dist != NULL) || n_bytes == 0 || n_bytes > UINT32_MAX) {
        return MOON_ERR_INVALID_PARAM;
    }
    n = moon_kv_placement_write_set(c->placement, key, ws);
    if (n == 0) {
        return MOON_ERR_PEER_LOST;
    }
    op = op_alloc(c, MOON_STORE_OP_PUT, cookie);
    if (op == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    op->key      = key;
    op->buf      = (void *)(uintptr_t)bytes;
    op->len      = n_bytes;
    op->reg      = local_reg;
    op->checksum = c->skip_checksum || bytes == NULL ? 0 : moon_kv_checksum(bytes, n_bytes);
    for (uint32_t t = 0; t < n; t++) {
        moon_status_t sent =
            req_send(c, V_RESERVE, ws[t], make_id(c, op, t), key.lo, key.hi, n_bytes);

        op->targets[op->n_targets++] = ws[t];
        if (sent != MOON_OK) {
            op->rstate[t] = R_FAILED;
            op_note(op, sent == MOON_ERR_NO_MEMORY ? sent : MOON_ERR_PEER_LOST);
            continue;
        }
        op->rstate[t] = R_WAIT;
        op->n_pending++;
    }
    return op_started(c, op);
}

moon_status_t moon_store_client_get(moon_store_client_t *c, moon_kv_key_t key, void *buf,
                                    size_t cap, moon_dist_region_t *local_reg, uint64_t cookie)
{
    uint32_t      n_dead, n_try;
    op_t         *op;
    moon_status_t status;

    if (c == NULL || (buf == NULL && c->dist != NULL) || cap == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    op = op_alloc(c, MOON_STORE_OP_GET, cookie);
    if (op == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    /* the surviving home replicas, then the shards that took over the writes
     * of the dead ones */
    n_dead        = c->n_shards - moon_kv_placement_n_live(c->placement);
    n_try         = MOON_MIN(c->n_shards, c->n_replicas + n_dead);
    op->key       = key;
    op->buf       = buf;
    op->len       = cap;
    op->reg       = local_reg;
    op->n_targets = moon_kv_placement_read_set(c->placement, key, op->targets, n_try);
    if (op->n_targets == 0) {
        op_free(c, op);
        return MOON_ERR_PEER_LOST;
    }
    status = get_try_next(c, op, 1);
    if (status != MOON_OK) {
        op_free(c, op);
    }
    return status;
}

moon_status_t moon_store_client_query(moon_store_client_t *c, uint32_t qop,
                                      const moon_kv_key_t *keys, uint32_t n, uint64_t cookie)
{
    uint32_t            first[MOON_STORE_CLIENT_MAX_KEYS], count[MAX_T] = {0};
    int32_t             t_of_shard[MAX_T];
    moon_store_query_t *msgs[MAX_T] = {0};
    uint64_t           *kbuf[MAX_T] = {0};
    uint32_t            fill[MAX_T] = {0};
    op_t               *op;

    if (c == NULL || (keys == NULL && n > 0) || n == 0 || n > MOON_STORE_CLIENT_MAX_KEYS ||
        (qop != MOON_STORE_OP_EXISTS && qop != MOON_STORE_OP_PREFIX)) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_kv_placement_n_live(c->placement) == 0) {
        return MOON_ERR_PEER_LOST;
    }
    op = op_alloc(c, qop, cookie);
    if (op == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    op->n_keys = n;
    memset(op->present, 0, n);
    for (uint32_t s = 0; s < MAX_T; s++) {
        t_of_shard[s] = -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        (void)moon_kv_placement_read_set(c->placement, keys[i], &first[i], 1);
        if (t_of_shard[first[i]] < 0) {
            t_of_shard[first[i]]         = (int32_t)op->n_targets;
            op->targets[op->n_targets++] = first[i];
        }
        op->key_target[i] = (uint8_t)t_of_shard[first[i]];
        count[op->key_target[i]]++;
    }
    for (uint32_t t = 0; t < op->n_targets; t++) {
        msgs[t] = moon_msg_new(MOON_MSG_STORE_QUERY, (size_t)count[t] * 16 + 8);
        if (msgs[t] != NULL) {
            msgs[t]->req            = make_id(c, op, t);
            msgs[t]->op             = MOON_STORE_QUERY_EXISTS;
            msgs[t]->model_id       = c->tag.model_id;
            msgs[t]->weight_version = c->tag.weight_version;
            kbuf[t] = moon_msg_span_alloc(msgs[t], &msgs[t]->keys, count[t] * 2, 8, 0);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = op->key_target[i];
        if (kbuf[t] != NULL) {
            kbuf[t][fill[t] * 2]     = keys[i].lo;
            kbuf[t][fill[t] * 2 + 1] = keys[i].hi;
            fill[t]++;
        }
    }
    for (uint32_t t = 0; t < op->n_targets; t++) {
        if (msgs[t] == NULL || kbuf[t] == NULL) {
            moon_msg_release(msgs[t] != NULL ? &msgs[t]->hdr : NULL);
            op->rstate[t] = R_FAILED;
            op_note(op, MOON_ERR_NO_MEMORY);
            continue;
        }
        fan_out_send(c, op, t, op->targets[t], msgs[t]);
    }
    return op_started(c, op);
}

moon_status_t moon_store_client_apply(moon_store_client_t *c, uint32_t aop, moon_kv_key_t key,
                                      uint64_t cookie)
{
    uint32_t ws[MAX_T], n;
    op_t    *op;

    if (c == NULL ||
        (aop != MOON_STORE_OP_REMOVE && aop != MOON_STORE_OP_PIN && aop != MOON_STORE_OP_UNPIN)) {
        return MOON_ERR_INVALID_PARAM;
    }
    n = moon_kv_placement_write_set(c->placement, key, ws);
    if (n == 0) {
        return MOON_ERR_PEER_LOST;
    }
    op = op_alloc(c, aop, cookie);
    if (op == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    op->key = key;
    for (uint32_t t = 0; t < n; t++) {
        moon_msg_hdr_t *m;

        op->targets[op->n_targets++] = ws[t];
        if (aop == MOON_STORE_OP_REMOVE) {
            moon_store_remove_t *r = moon_msg_new(MOON_MSG_STORE_REMOVE, 0);
            if (r != NULL) {
                r->req    = make_id(c, op, t);
                r->key_lo = key.lo;
                r->key_hi = key.hi;
            }
            m = r != NULL ? &r->hdr : NULL;
        } else {
            moon_store_pin_t *p = moon_msg_new(MOON_MSG_STORE_PIN, 0);
            if (p != NULL) {
                p->req    = make_id(c, op, t);
                p->key_lo = key.lo;
                p->key_hi = key.hi;
                p->unpin  = aop == MOON_STORE_OP_UNPIN;
            }
            m = p != NULL ? &p->hdr : NULL;
        }
        if (m == NULL) {
            op->rstate[t] = R_FAILED;
            op_note(op, MOON_ERR_NO_MEMORY);
            continue;
        }
        fan_out_send(c, op, t, ws[t], m);
    }
    return op_started(c, op);
}

/* The entries of a vector answer, in order (spans checked against n). */
static int on_put_grantv(moon_store_client_t *c, const moon_store_put_grantv_t *g)
{
    uint32_t        n    = g->reqs.n;
    const uint64_t *reqs = MOON_SPAN_PTR(g, g->reqs), *tok = MOON_SPAN_PTR(g, g->token);
    const uint64_t *off = MOON_SPAN_PTR(g, g->offset);
    const uint32_t *st  = MOON_SPAN_PTR(g, g->status);

    if (n == 0 || !is_client_id(c, reqs[0])) {
        return 0;
    }
    if (g->status.n != n || g->token.n != n || g->offset.n != n) {
        MOON_WARN("store client: malformed vector grant from shard %u dropped", g->shard_id);
        return 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        put_grant_t e = {reqs[i],
                         (int32_t)st[i],
                         g->shard_id,
                         tok[i],
                         off[i],
                         g->base,
                         MOON_SPAN_PTR(g, g->desc),
                         g->desc.n};
        on_put_grant(c, &e);
    }
    return 1;
}

static int on_get_grantv(moon_store_client_t *c, const moon_store_get_grantv_t *g)
{
    uint32_t        n    = g->reqs.n;
    const uint64_t *reqs = MOON_SPAN_PTR(g, g->reqs), *lease = MOON_SPAN_PTR(g, g->lease);
    const uint64_t *off = MOON_SPAN_PTR(g, g->offset), *nb = MOON_SPAN_PTR(g, g->n_bytes);
    const uint64_t *sum = MOON_SPAN_PTR(g, g->checksum);
    const uint32_t *st  = MOON_SPAN_PTR(g, g->status);

    if (n == 0 || !is_client_id(c, reqs[0])) {
        return 0;
    }
    if (g->status.n != n || g->lease.n != n || g->offset.n != n || g->n_bytes.n != n ||
        g->checksum.n != n) {
        MOON_WARN("store client: malformed vector grant from shard %u dropped", g->shard_id);
        return 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        get_grant_t e = {reqs[i],
                         (int32_t)st[i],
                         g->shard_id,
                         lease[i],
                         off[i],
                         nb[i],
                         sum[i],
                         g->base,
                         g->lease_timeout_ns,
                         MOON_SPAN_PTR(g, g->desc),
                         g->desc.n};
        on_get_grant(c, &e);
    }
    return 1;
}

static int on_replyv(moon_store_client_t *c, const moon_store_replyv_t *r)
{
    uint32_t        n    = r->reqs.n;
    const uint64_t *reqs = MOON_SPAN_PTR(r, r->reqs);
    const uint32_t *st   = MOON_SPAN_PTR(r, r->status);

    if (n == 0 || !is_client_id(c, reqs[0] & ~ID_MARKS)) {
        return 0;
    }
    if (r->status.n != n) {
        MOON_WARN("store client: malformed vector reply from shard %u dropped", r->shard_id);
        return 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        on_reply(c, reqs[i], (int32_t)st[i]);
    }
    return 1;
}

static int handle_one(moon_store_client_t *c, const moon_msg_hdr_t *msg)
{
    switch (msg->type) {
    case MOON_MSG_STORE_PUT_GRANT: {
        const moon_store_put_grant_t *g = (const moon_store_put_grant_t *)msg;
        put_grant_t                   e = {g->req,
                                           g->status,
                                           g->shard_id,
                                           g->token,
                                           g->offset,
                                           g->base,
                                           MOON_SPAN_PTR(g, g->desc),
                                           g->desc.n};
        if (!is_client_id(c, g->req)) {
            return 0;
        }
        on_put_grant(c, &e);
        return 1;
    }
    case MOON_MSG_STORE_GET_GRANT: {
        const moon_store_get_grant_t *g = (const moon_store_get_grant_t *)msg;
        get_grant_t                   e = {g->req,
                                           g->status,
                                           g->shard_id,
                                           g->lease,
                                           g->offset,
                                           g->n_bytes,
                                           g->checksum,
                                           g->base,
                                           g->lease_timeout_ns,
                                           MOON_SPAN_PTR(g, g->desc),
                                           g->desc.n};
        if (!is_client_id(c, g->req)) {
            return 0;
        }
        on_get_grant(c, &e);
        return 1;
    }
    case MOON_MSG_STORE_PUT_GRANTV:
        return on_put_grantv(c, (const moon_store_put_grantv_t *)msg);
    case MOON_MSG_STORE_GET_GRANTV:
        return on_get_grantv(c, (const moon_store_get_grantv_t *)msg);
    case MOON_MSG_STORE_REPLYV:
        return on_replyv(c, (const moon_store_replyv_t *)msg);
    case MOON_MSG_STORE_REPLY: {
        const moon_store_reply_t *r = (const moon_store_reply_t *)msg;
        if (!is_client_id(c, r->req & ~ID_MARKS)) {
            return 0;
        }
        on_reply(c, r->req, r->status);
        return 1;
    }
    case MOON_MSG_SYS_TIMER:
        if (((const moon_sys_timer_t *)msg)->cookie != (ID_HI(c) | ID_TIMER)) {
            return 0;
        }
        renew_sweep(c);
        return 1;
    case MOON_MSG_STORE_QUERY_REPLY:
        if (!is_client_id(c, ((const moon_store_query_reply_t *)msg)->req)) {
            return 0;
        }
        on_query_reply(c, (const moon_store_query_reply_t *)msg);
        return 1;
    case MOON_MSG_DIST_BULK_DONE:
        if (!is_client_id(c, ((const moon_dist_bulk_done_t *)msg)->cookie)) {
            return 0;
        }
        on_bulk_done(c, (const moon_dist_bulk_done_t *)msg);
        return 1;
    case MOON_MSG_SYS_DOWN: {
        const moon_sys_down_t *d     = (const moon_sys_down_t *)msg;
        uint32_t               shard = (uint32_t)(d->ref & 0xffu);
        if ((d->ref >> 44) != (ID_HI(c) >> 44) || shard >= c->n_shards ||
            c->shards[shard] != d->actor) {
            return 0;
        }
        on_shard_down(c, shard, (moon_status_t)d->reason);
        return 1;
    }
    default:
        return 0;
    }
}

void moon_store_client_batch_begin(moon_store_client_t *c)
{
    c->batch_depth++;
}

void moon_store_client_batch_end(moon_store_client_t *c)
{
    if (c->batch_depth > 0 && --c->batch_depth == 0) {
        vq_flush(c);
    }
}

int moon_store_client_handle(moon_store_client_t *c, const moon_msg_hdr_t *msg)
{
    int mine;

    moon_store_client_batch_begin(c);
    mine = handle_one(c, msg);
    moon_store_client_batch_end(c);
    return mine;
}

uint32_t moon_store_client_expire(moon_store_client_t *c, uint64_t now_ns, uint64_t timeout_ns)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < c->max_ops; i++) {
        op_t *op   = &c->ops[i];
        int   xfer = 0;

        if (!op->in_use || now_ns - op->t_start <= timeout_ns) {
            continue;
        }
        for (uint32_t t = 0; t < op->n_targets; t++) {
            xfer |= op->rstate[t] == R_XFER; /* the caller's buffer is still in use */
        }
        if (xfer) {
            continue;
        }
        MOON_WARN("store client: operation %u on key %016llx%016llx timed out", op->op,
                  (unsigned long long)op->key.hi, (unsigned long long)op->key.lo);
        op->status = MOON_ERR_TIMED_OUT;
        op_finish(c, op);
        n++;
    }
    return n;
}

void moon_store_client_log_pending(const moon_store_client_t *c)
{
    static const char *const names[] = {"idle",  "wait", "xfer",  "commit",
                                        "check", "done", "failed"};

    for (uint32_t i = 0; i < c->max_ops; i++) {
        const op_t *op = &c->ops[i];
        char        line[256];
        int         len = 0;

        if (!op->in_use) {
            continue;
        }
        for (uint32_t t = 0; t < op->n_targets && len < (int)sizeof(line) - 32; t++) {
            len += snprintf(line + len, sizeof(line) - (size_t)len, " shard %u:%s", op->targets[t],
                            names[op->rstate[t] % MOON_ARRAY_SIZE(names)]);
        }
        MOON_WARN(
            "store client: op %u (slot %u, age %llu us) pending:%s", op->op, i,
            (unsigned long long)((moon_now(moon_actor_runtime(c->self)) - op->t_start) / 1000),
            len > 0 ? line : " no target");
    }
}

uint32_t moon_store_client_pending(const moon_store_client_t *c)
{
    return c->max_ops - c->n_free;
}

uint32_t moon_store_client_n_live(const moon_store_client_t *c)
{
    return moon_kv_placement_n_live(c->placement);
}
