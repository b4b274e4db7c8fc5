/* actors/gateway/gw_bridge.c - the HTTP threads <-> gateway actor bridge (see
 * gw_bridge.h). Queues: ck_ring (inbound, MPSC), ck_fifo_spsc per request
 * (outbound), ck_ht (the actor's table of requests by id). */
#include "gw_bridge.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <ck_fifo.h>
#include <ck_ht.h>
#include <ck_ring.h>

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

MOON_MSG_DEFINE(MOON_GW_MSGS, moon_gw_msg_descs)

/* Concurrency Kit orders its queues with its own fences and volatile
 * accesses, which ThreadSanitizer cannot see. In TSan builds every queue
 * operation also takes one mutex, so TSan checks this file's own protocol
 * (references, the wake lock, the kick flag) and not Concurrency Kit's. */
#if defined(__SANITIZE_THREAD__)
static pthread_mutex_t ck_tsan_mu = PTHREAD_MUTEX_INITIALIZER;
#define CK_TSAN_LOCK() pthread_mutex_lock(&ck_tsan_mu)
#define CK_TSAN_UNLOCK() pthread_mutex_unlock(&ck_tsan_mu)
#else
#define CK_TSAN_LOCK() ((void)0)
#define CK_TSAN_UNLOCK() ((void)0)
#endif

struct moon_gw_req {
    atomic_uint         refs;
    moon_gw_bridge_t   *bridge;
    uint64_t            id;
    moon_status_t       send_status; /* the SUBMIT's send failed: set before the fail item */
    struct ck_fifo_spsc fifo;        /* messages: the actor enqueues, the HTTP side dequeues */
    pthread_mutex_t     wake_mu;
    int                 parked; /* under wake_mu */
    int                 closed; /* under wake_mu: the HTTP side is gone */
    int                 poked;  /* under wake_mu: woken from outside; never parks again */
    moon_gw_conn_t      conn;
    uint64_t            woken_ns;    /* actor: when a TOKEN last woke the connection */
    int                 first_woken; /* actor: the first TOKEN woke it (first_token_wakes) */
    atomic_int          done;        /* the actor delivered DONE */
    moon_msg_hdr_t     *submit;      /* retained: its SUBMIT, read again to resume it */
    moon_gw_req_t      *group_next;  /* the next choice of its prompt's SUBMIT (fixed
                                        before the ring item: the actor reads it there) */
    /* actor-owned */
    moon_gw_req_times_t times;
    moon_gw_req_t      *prev, *next; /* live list */
    uint64_t            wire_id;     /* the id its messages carry now (a resumed request
                                        runs under a new one); the table's key */
    uint32_t          *toks;         /* (cap_toks) token ids received, by TOKEN index */
    uint32_t           n_toks, cap_toks;
    uint32_t           n_resumes;
    moon_serve_order_t order; /* its stream put in order; from n_toks after a resume */
};

struct moon_gw_bridge {
    moon_runtime_t        *rt;
    moon_addr_t            actor, conductor;
    struct ck_ring         ring;
    struct ck_ring_buffer *ring_buf;
    atomic_int             kicked; /* a WAKE is on its way; pairs with drain's reset */
    atomic_uint_fast64_t   next_id;
    /* actor-owned */
    ck_ht_t        table;
    moon_gw_req_t *live;
    uint32_t       n_live;
};

/* ---- ck_ht's allocator (one reader, the writer: frees need no deferral) ---- */
static void *ht_malloc(size_t n)
{
    return moon_malloc(n);
}

static void *ht_realloc(void *p, size_t old_bytes, size_t new_bytes, bool defer)
{
    (void)old_bytes;
    (void)defer;
    return moon_realloc(p, new_bytes);
}

static void ht_free(void *p, size_t bytes, bool defer)
{
    (void)bytes;
    (void)defer;
    moon_free(p);
}

static struct ck_malloc ht_allocator = {
    .malloc = ht_malloc, .realloc = ht_realloc, .free = ht_free};

moon_status_t moon_gw_bridge_create(moon_runtime_t *rt, moon_addr_t actor, moon_addr_t conductor,
                                    uint32_t capacity, moon_gw_bridge_t **bridge_p)
{
    moon_status_t     status = moon_msg_register(moon_gw_msg_descs);
    moon_gw_bridge_t *b;
    uint32_t          size = 2;

    if (status != MOON_OK) {
        MOON_ERROR("gateway: cannot register its message (id 120): %s", moon_status_str(status));
        return status;
    }
    while (size < capacity + 1 && size < (1u << 24)) {
        size *= 2;
    }
    b = moon_calloc(1, sizeof(*b));
    if (b == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    b->ring_buf = moon_calloc(size, sizeof(*b->ring_buf));
    if (b->ring_buf == NULL ||
        !ck_ht_init(&b->table, CK_HT_MODE_DIRECT, NULL, &ht_allocator, 64, 0x6d6f6f6eull)) {
        moon_free(b->ring_buf);
        moon_free(b);
        return MOON_ERR_NO_MEMORY;
    }
    ck_ring_init(&b->ring, size);
    b->rt        = rt;
    b->actor     = actor;
    b->conductor = conductor;
    atomic_init(&b->kicked, 0);
    atomic_init(&b->next_id, 1);
    *bridge_p = b;
    return MOON_OK;
}

/* ---- the queues (Concurrency Kit) --------------------------------------------- */
static bool ring_push(moon_gw_bridge_t *b, void *item)
{
    bool ok;

    CK_TSAN_LOCK();
    ok = ck_ring_enqueue_mpsc(&b->ring, b->ring_buf, item);
    CK_TSAN_UNLOCK();
    return ok;
}

static bool ring_pop(moon_gw_bridge_t *b, void **item_p)
{
    bool ok;

    CK_TSAN_LOCK();
    ok = ck_ring_dequeue_mpsc(&b->ring, b->ring_buf, item_p);
    CK_TSAN_UNLOCK();
    return ok;
}

static bool fifo_pop(moon_gw_req_t *req, void **value_p)
{
    bool ok;

    CK_TSAN_LOCK();
    ok = ck_fifo_spsc_dequeue(&req->fifo, value_p);
    CK_TSAN_UNLOCK();
    return ok;
}

static bool fifo_empty(moon_gw_req_t *req)
{
    bool empty;

    CK_TSAN_LOCK();
    empty = ck_fifo_spsc_isempty(&req->fifo);
    CK_TSAN_UNLOCK();
    return empty;
}

/* Producer side: an entry recycled from those the consumer is done with, else new. */
static struct ck_fifo_spsc_entry *fifo_entry(moon_gw_req_t *req)
{
    struct ck_fifo_spsc_entry *entry;

    CK_TSAN_LOCK();
    entry = ck_fifo_spsc_recycle(&req->fifo);
    CK_TSAN_UNLOCK();
    return entry != NULL ? entry : moon_malloc(sizeof(*entry));
}

static void fifo_push(moon_gw_req_t *req, struct ck_fifo_spsc_entry *entry, void *value)
{
    CK_TSAN_LOCK();
    ck_fifo_spsc_enqueue(&req->fifo, entry, value);
    CK_TSAN_UNLOCK();
}

static void req_unref(moon_gw_req_t *req)
{
    struct ck_fifo_spsc_entry *garbage = NULL;
    void                      *msg;

    /* acq_rel: the last owner sees every other owner's writes before freeing. */
    if (atomic_fetch_sub_explicit(&req->refs, 1, memory_order_acq_rel) != 1) {
        return;
    }
    while (fifo_pop(req, &msg)) {
        moon_msg_release(msg);
    }
    ck_fifo_spsc_deinit(&req->fifo, &garbage);
    moon_msg_release(req->submit);
    moon_free(req->toks);
    moon_serve_order_fini(&req->order);
    while (garbage != NULL) {
        struct ck_fifo_spsc_entry *next = garbage->next;
        moon_free(garbage);
        garbage = next;
    }
    pthread_mutex_destroy(&req->wake_mu);
    moon_free(req);
}

/* Makes sure the actor will drain the ring after the caller's push. */
static void kick(moon_gw_bridge_t *b)
{
    moon_gw_wake_t *wake;
    moon_status_t   status;

    /* seq_cst fence: the ring push above is ordered before the read of kicked;
     * pairs with the fence in moon_gw_bridge_drain (store kicked = 0, fence,
     * read the ring): one of the two sides sees the other's write. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_exchange(&b->kicked, 1) != 0) {
        return;
    }
    wake = moon_msg_new(MOON_MSG_GW_WAKE, 0);
    if (wake == NULL) {
        atomic_store(&b->kicked, 0);
        MOON_ERROR("gateway: out of memory for a wake-up");
        return;
    }
    status = moon_runtime_send(b->rt, b->actor, &wake->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&wake->hdr);
        atomic_store(&b->kicked, 0);
        MOON_ERROR("gateway: wake-up of the gateway actor failed: %s", moon_status_str(status));
    }
}

/* Ring items: the request's pointer, its low bits say what for. */
#define ITEM_SUBMIT 0u /* register it (its SUBMIT is on its way) */
#define ITEM_CANCEL 1u /* the HTTP side left: CANCEL it */
#define ITEM_FAIL 2u   /* its SUBMIT could not be sent: end it with send_status */
#define ITEM_TAGS 3u

static bool push_item(moon_gw_bridge_t *b, moon_gw_req_t *req, uintptr_t tag)
{
    return ring_push(b, (void *)((uintptr_t)req | tag));
}

/* A request of id answering conn, its two references taken (the HTTP
 * side's and the actor's); NULL without memory. */
static moon_gw_req_t *req_new(moon_gw_bridge_t *b, uint64_t id, const moon_gw_conn_t *conn)
{
    moon_gw_req_t             *req  = moon_calloc(1, sizeof(*req));
    struct ck_fifo_spsc_entry *stub = req != NULL ? moon_malloc(sizeof(*stub)) : NULL;

    if (stub == NULL) {
        moon_free(req);
        return NULL;
    }
    req->id      = id;
    req->wire_id = id;
    ck_fifo_spsc_init(&req->fifo, stub);
    pthread_mutex_init(&req->wake_mu, NULL);
    moon_serve_order_init(&req->order, 0);
    req->bridge           = b;
    req->conn             = *conn;
    req->times.arrival_ns = conn->arrival_ns != 0 ? conn->arrival_ns : moon_now(b->rt);
    atomic_init(&req->done, 0);
    atomic_init(&req->refs, 2); /* the HTTP side and the actor */
    return req;
}

/* Frees the requests of a group not handed to the actor yet. */
static void drop_group(moon_gw_req_t **reqs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (reqs[i] != NULL) {
            atomic_store(&reqs[i]->refs, 1);
            req_unref(reqs[i]);
            reqs[i] = NULL;
        }
    }
}

/* Choice i's own SUBMIT, to resume it alone: the group's with its seed
 * and one choice. NULL without memory (then it cannot be resumed). */
static moon_msg_hdr_t *choice_submit(const moon_serve_submit_t *group, uint32_t i)
{
    moon_serve_submit_t *m = (moon_serve_submit_t *)moon_msg_dup(&group->hdr);

    if (m != NULL && group->n_choices > 1) {
        m->request_id += i;
        m->seed      = moon_serve_choice_seed(group->seed, i);
        m->n_choices = 0;
    }
    return m != NULL ? &m->hdr : NULL;
}

moon_status_t moon_gw_bridge_submit(moon_gw_bridge_t *b, const moon_serve_params_t *params,
                                    const moon_gw_conn_t *conn, moon_gw_req_t **req_p)
{
    return moon_gw_bridge_submit_choices(b, params, conn, 1, req_p);
}

moon_status_t moon_gw_bridge_submit_choices(moon_gw_bridge_t *b, const moon_serve_params_t *params,
                                            const moon_gw_conn_t *conns, uint32_t n,
                                            moon_gw_req_t **reqs)
{
    moon_serve_params_t  p      = *params;
    moon_serve_submit_t *submit = NULL;
    moon_status_t        status;
    uint64_t             id;

    if (n == 0 || n > MOON_SERVE_MAX_CHOICES) {
        return MOON_ERR_INVALID_PARAM;
    }
    p.n_choices = n > 1 ? n : 0;
    id          = atomic_fetch_add(&b->next_id, n); /* choice i: id + i */
    status      = moon_serve_submit_build(b->actor, id, &p, &submit);
    if (status != MOON_OK) {
        return status;
    }
    memset(reqs, 0, (size_t)n * sizeof(*reqs));
    for (uint32_t i = 0; i < n; i++) {
        reqs[i] = req_new(b, id + i, &conns[i]);
        if (reqs[i] == NULL) {
            drop_group(reqs, n);
            moon_msg_release(&submit->hdr);
            return MOON_ERR_NO_MEMORY;
        }
        reqs[i]->submit = choice_submit(submit, i);
        if (i > 0) {
            reqs[i - 1]->group_next = reqs[i];
        }
    }
    if (!push_item(b, reqs[0], ITEM_SUBMIT)) { /* the whole group in one item */
        moon_msg_release(&submit->hdr);
        drop_group(reqs, n);
        return MOON_ERR_NO_RESOURCE;
    }
    /* The SUBMIT goes to the conductor from this thread, one hop shorter than
     * through the actor. Pushed first: the actor meets the request in the
     * ring before any event of it (moon_gw_bridge_find drains it). */
    status = moon_runtime_send(b->rt, b->conductor, &submit->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&submit->hdr);
        MOON_WARN("gateway: submit of request %llu to the conductor failed: %s",
                  (unsigned long long)id, moon_status_str(status));
        for (uint32_t i = 0; i < n; i++) {
            reqs[i]->send_status = status;
            atomic_fetch_add(&reqs[i]->refs, 1); /* the fail item's */
        }
        if (!push_item(b, reqs[0], ITEM_FAIL)) {
            for (uint32_t i = 0; i < n; i++) {
                atomic_fetch_sub(&reqs[i]->refs, 1);
            }
            MOON_ERROR("gateway: inbound ring full: request %llu waits for its timeout",
                       (unsigned long long)id);
        }
    }
    kick(b); /* registers it soon, events or not (the ring stays short) */
    return MOON_OK;
}

uint64_t moon_gw_req_id(const moon_gw_req_t *req)
{
    return req->id;
}

const moon_msg_hdr_t *moon_gw_req_next(moon_gw_req_t *req)
{
    void *msg;

    return fifo_pop(req, &msg) ? msg : NULL;
}

int moon_gw_req_park(moon_gw_req_t *req)
{
    int parked = 0;

    pthread_mutex_lock(&req->wake_mu);
    /* Under the lock: a deliver that queued before we took it is seen here;
     * one after sees parked and wakes. */
    if (fifo_empty(req) && !req->poked) {
        req->parked = 1;
        req->conn.park(req->conn.arg);
        parked = 1;
    }
    pthread_mutex_unlock(&req->wake_mu);
    return parked;
}

void moon_gw_req_poke(moon_gw_req_t *req)
{
    pthread_mutex_lock(&req->wake_mu);
    req->poked = 1;
    if (req->parked && !req->closed) {
        req->parked = 0;
        req->conn.wake(req->conn.arg);
    }
    pthread_mutex_unlock(&req->wake_mu);
}

void moon_gw_req_close(moon_gw_req_t *req, int cancel)
{
    moon_gw_bridge_t *b = req->bridge;

    pthread_mutex_lock(&req->wake_mu);
    req->closed = 1;
    req->parked = 0;
    pthread_mutex_unlock(&req->wake_mu);
    if (cancel && !atomic_load(&req->done)) {
        /* The cancel item holds a reference until the actor has read it. */
        atomic_fetch_add(&req->refs, 1);
        if (push_item(b, req, ITEM_CANCEL)) {
            kick(b);
        } else {
            atomic_fetch_sub(&req->refs, 1);
            MOON_WARN("gateway: inbound ring full: request %llu runs to its end uncancelled",
                      (unsigned long long)req->id);
        }
    }
    req_unref(req);
}

const moon_gw_req_times_t *moon_gw_req_times(const moon_gw_req_t *req)
{
    return &req->times;
}

moon_gw_req_times_t *moon_gw_req_times_mut(moon_gw_req_t *req)
{
    return &req->times;
}

/* ---- actor side -------------------------------------------------------------- */

static void table_put(moon_gw_bridge_t *b, moon_gw_req_t *req)
{
    ck_ht_entry_t e;
    ck_ht_hash_t  h;

    ck_ht_hash_direct(&h, &b->table, (uintptr_t)req->wire_id);
    ck_ht_entry_set_direct(&e, h, (uintptr_t)req->wire_id, (uintptr_t)req);
    if (!ck_ht_put_spmc(&b->table, h, &e)) {
        MOON_ERROR("gateway: request table full or out of memory (request %llu)",
                   (unsigned long long)req->id);
    }
    req->next = b->live;
    req->prev = NULL;
    if (b->live != NULL) {
        b->live->prev = req;
    }
    b->live = req;
    b->n_live++;
}

static void table_remove(moon_gw_bridge_t *b, moon_gw_req_t *req)
{
    ck_ht_entry_t e;
    ck_ht_hash_t  h;

    ck_ht_hash_direct(&h, &b->table, (uintptr_t)req->wire_id);
    ck_ht_entry_key_set_direct(&e, (uintptr_t)req->wire_id);
    ck_ht_remove_spmc(&b->table, h, &e);
    if (req->prev != NULL) {
        req->prev->next = req->next;
    } else {
        b->live = req->next;
    }
    if (req->next != NULL) {
        req->next->prev = req->prev;
    }
    b->n_live--;
}

static void fail(moon_gw_bridge_t *b, moon_gw_req_t *req, moon_status_t status,
                 const char *message);

static moon_gw_req_t *table_get(moon_gw_bridge_t *b, uint64_t request_id)
{
    ck_ht_entry_t e;
    ck_ht_hash_t  h;

    ck_ht_hash_direct(&h, &b->table, (uintptr_t)request_id);
    ck_ht_entry_key_set_direct(&e, (uintptr_t)request_id);
    if (!ck_ht_get_spmc(&b->table, h, &e)) {
        return NULL;
    }
    return (moon_gw_req_t *)ck_ht_entry_value_direct(&e);
}

moon_gw_req_t *moon_gw_bridge_find(moon_gw_bridge_t *b, moon_actor_t *self, uint64_t request_id)
{
    moon_gw_req_t *req;

    if (request_id == 0 || request_id == UINT64_MAX) {
        return NULL;
    }
    req = table_get(b, request_id);
    if (req == NULL) { /* its event outran the wake-up: the ring holds it */
        moon_gw_bridge_drain(b, self);
        req = table_get(b, request_id);
    }
    return req;
}

void moon_gw_bridge_deliver(moon_gw_bridge_t *b, moon_gw_req_t *req, const moon_msg_hdr_t *msg)
{
    struct ck_fifo_spsc_entry *entry = fifo_entry(req);
    int                        done  = msg->type == MOON_MSG_SERVE_DONE;

    if (entry == NULL) {
        MOON_ERROR("gateway: out of memory queueing an event of request %llu",
                   (unsigned long long)req->id);
    } else {
        moon_msg_retain(msg);
        fifo_push(req, entry, (void *)msg);
        if (!done && req->conn.first_token_wakes && !req->first_woken) {
            req->first_woken = 1; /* wakes now, whatever token_wake_ns says */
        } else if (!done && req->conn.token_wake_ns > 0) {
            uint64_t now = moon_now(b->rt);
            if (now - req->woken_ns < req->conn.token_wake_ns) {
                return; /* queued; the next wake-up (or DONE) takes it along */
            }
            req->woken_ns = now;
        }
        pthread_mutex_lock(&req->wake_mu);
        if (req->parked && !req->closed) {
            req->parked = 0;
            req->conn.wake(req->conn.arg);
        }
        pthread_mutex_unlock(&req->wake_mu);
    }
    if (done) {
        atomic_store(&req->done, 1);
        table_remove(b, req);
        req_unref(req);
    }
}

/* Ends req with a DONE error made here. */
static void fail(moon_gw_bridge_t *b, moon_gw_req_t *req, moon_status_t status, const char *message)
{
    moon_serve_done_t *done = moon_msg_new(MOON_MSG_SERVE_DONE, strlen(message) + 16);

    if (done == NULL) {
        /* Without a DONE the connection would wait for its timeout. */
        MOON_ERROR("gateway: out of memory ending request %llu", (unsigned long long)req->id);
        atomic_store(&req->done, 1);
        table_remove(b, req);
        req_unref(req);
        return;
    }
    done->request_id       = req->wire_id;
    done->finish           = MOON_FINISH_ERROR;
    done->status           = status;
    done->prefill_instance = -1;
    done->decode_instance  = -1;
    moon_msg_set_str(done, &done->text, "");
    moon_msg_set_str(done, &done->message, message);
    moon_gw_bridge_deliver(b, req, &done->hdr);
    moon_msg_release(&done->hdr);
}

/* An ITEM_SUBMIT: every choice of the group into the table. */
static void put_group(moon_gw_bridge_t *b, moon_gw_req_t *req)
{
    for (; req != NULL; req = req->group_next) {
        table_put(b, req);
    }
}

void moon_gw_bridge_drain(moon_gw_bridge_t *b, moon_actor_t *self)
{
    void *item;

    /* Reset before reading: a push after this read of the ring sends a new WAKE. */
    atomic_store(&b->kicked, 0);
    /* seq_cst fence: pairs with the fence in kick(). */
    atomic_thread_fence(memory_order_seq_cst);
    while (ring_pop(b, &item)) {
        moon_gw_req_t *req = (moon_gw_req_t *)((uintptr_t)item & ~(uintptr_t)ITEM_TAGS);
        moon_status_t  status;

        switch ((uintptr_t)item & ITEM_TAGS) {
        case ITEM_SUBMIT:
            put_group(b, req);
            break;
        case ITEM_CANCEL: /* the request may have ended meanwhile */
            if (!atomic_load(&req->done)) {
                status = moon_serve_cancel(self, b->conductor, req->wire_id);
                if (status != MOON_OK) {
                    MOON_WARN("gateway: cancel of request %llu not sent: %s",
                              (unsigned long long)req->id, moon_status_str(status));
                }
            }
            req_unref(req);
            break;
        default: /* ITEM_FAIL: after its ITEM_SUBMIT; each choice holds a reference */
            for (moon_gw_req_t *r = req, *next; r != NULL; r = next) {
                next = r->group_next;
                if (!atomic_load(&r->done)) {
                    fail(b, r, r->send_status, "the conductor cannot be reached");
                }
                req_unref(r);
            }
            break;
        }
    }
}

void moon_gw_bridge_abort(moon_gw_bridge_t *b, moon_status_t status, const char *message)
{
    void *item;

    atomic_store(&b->kicked, 0);
    atomic_thread_fence(memory_order_seq_cst);
    while (ring_pop(b, &item)) {
        moon_gw_req_t *req = (moon_gw_req_t *)((uintptr_t)item & ~(uintptr_t)ITEM_TAGS);

        if (((uintptr_t)item & ITEM_TAGS) == ITEM_SUBMIT) {
            put_group(b, req);
        } else if (((uintptr_t)item & ITEM_TAGS) == ITEM_FAIL) {
            for (moon_gw_req_t *r = req, *next; r != NULL; r = next) {
                next = r->group_next;
                req_unref(r);
            }
        } else {
            req_unref(req);
        }
    }
    moon_gw_bridge_fail_all(b, status, message);
}

uint32_t moon_gw_bridge_fail_all(moon_gw_bridge_t *b, moon_status_t status, const char *message)
{
    uint32_t n = 0;

    while (b->live != NULL) {
        fail(b, b->live, status, message);
        n++;
    }
    return n;
}

void moon_gw_bridge_cancel_all(moon_gw_bridge_t *b, moon_actor_t *self)
{
    moon_gw_bridge_drain(b, self);
    for (moon_gw_req_t *req = b->live; req != NULL; req = req->next) {
        moon_serve_cancel(self, b->conductor, req->wire_id);
    }
}

int moon_gw_bridge_note_token(moon_gw_req_t *req, uint32_t index, uint32_t token)
{
    if (index < req->n_toks) {
        return 0; /* sent before a loss, and again by the resumed request */
    }
    if (req->n_toks == req->cap_toks) {
        uint32_t  cap = req->cap_toks ? 2 * req->cap_toks : 16;
        uint32_t *t   = moon_realloc(req->toks, (size_t)cap * sizeof(*t));
        if (t == NULL) {
            req->n_resumes = UINT32_MAX; /* cannot be resumed without its tokens */
            return 1;
        }
        req->toks     = t;
        req->cap_toks = cap;
    }
    req->toks[req->n_toks++] = token;
    return 1;
}

/* Copies span sp of src (elements of elem bytes; text: a str span) into the
 * same span of dst, whose tail has room. */
static moon_status_t copy_span(void *dst, moon_span_t *dp, const void *src, moon_span_t sp,
                               uint32_t elem, int text)
{
    void *out;

    if (sp.n == 0) {
        return text ? moon_msg_set_str(dst, dp, "") : MOON_OK;
    }
    out = moon_msg_span_alloc(dst, dp, sp.n, elem, text);
    if (out == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    memcpy(out, MOON_SPAN_PTR(src, sp), (size_t)sp.n * elem);
    return MOON_OK;
}

moon_status_t moon_gw_bridge_resume(moon_gw_bridge_t *b, moon_actor_t *self, moon_gw_req_t *req,
                                    uint32_t max_resumes)
{
    const moon_serve_submit_t *o = (const void *)req->submit;
    moon_serve_submit_t       *m;
    moon_status_t              status;
    int                        closed;
    uint32_t                  *t;

    pthread_mutex_lock(&req->wake_mu);
    closed = req->closed;
    pthread_mutex_unlock(&req->wake_mu);
    if (o == NULL || closed || req->n_resumes >= max_resumes) {
        return MOON_ERR_INVALID_PARAM; /* its client left, or it was tried enough */
    }
    m = moon_msg_new(MOON_MSG_SERVE_SUBMIT,
                     o->prompt.n + 1 + (size_t)o->tokens.n * 4 + (size_t)o->stop_ids.n * 4 +
                         o->stop_strs.n + (size_t)o->logit_bias.n * 4 + (size_t)req->n_toks * 4 +
                         o->key.n + o->session.n + o->grammar.n + 64);
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->reply_to           = o->reply_to;
    m->request_id         = atomic_fetch_add(&b->next_id, 1);
    m->slo_class          = o->slo_class;
    m->max_tokens         = o->max_tokens;
    m->temperature        = o->temperature;
    m->top_p              = o->top_p;
    m->top_k              = o->top_k;
    m->seed               = o->seed;
    m->flags              = o->flags;
    m->presence_penalty   = o->presence_penalty;
    m->frequency_penalty  = o->frequency_penalty;
    m->repetition_penalty = o->repetition_penalty;
    m->min_p              = o->min_p;
    m->min_tokens         = o->min_tokens;
    m->logprobs           = o->logprobs;
    status                = copy_span(m, &m->prompt, o, o->prompt, 1, 1);
    if (status == MOON_OK) {
        status = copy_span(m, &m->logit_bias, o, o->logit_bias, 4, 0);
    }
    if (status == MOON_OK) {
        status = copy_span(m, &m->tokens, o, o->tokens, 4, 0);
    }
    if (status == MOON_OK) {
        status = copy_span(m, &m->stop_ids, o, o->stop_ids, 4, 0);
    }
    if (status == MOON_OK) {
        status = copy_span(m, &m->stop_strs, o, o->stop_strs, 1, 0);
    }
    if (status == MOON_OK) { /* what request filters read (plugin.h) */
        status = copy_span(m, &m->key, o, o->key, 1, 1);
    }
    if (status == MOON_OK) {
        status = copy_span(m, &m->session, o, o->session, 1, 1);
    }
    if (status == MOON_OK) {
        status = copy_span(m, &m->grammar, o, o->grammar, 1, 0);
    }
    if (status == MOON_OK && req->n_toks > 0) {
        t = moon_msg_span_alloc(m, &m->resume, req->n_toks, 4, 0);
        if (t == NULL) {
            status = MOON_ERR_NO_MEMORY;
        } else {
            memcpy(t, req->toks, (size_t)req->n_toks * 4);
        }
    }
    if (status == MOON_OK) {
        status = moon_send(self, b->conductor, &m->hdr);
    }
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
        return status;
    }
    MOON_INFO("gateway: request %llu resumed as %llu after %u tokens", (unsigned long long)req->id,
              (unsigned long long)m->request_id, req->n_toks);
    table_remove(b, req);
    req->wire_id = m->request_id;
    req->n_resumes++;
    table_put(b, req);
    moon_serve_order_fini(&req->order); /* the new stream goes on at index n_toks */
    moon_serve_order_init(&req->order, req->n_toks);
    return MOON_OK;
}

/* The order's callback takes one pointer: the request and the gateway's own. */
typedef struct {
    moon_gw_event_fn fn;
    void            *arg;
    moon_gw_req_t   *req;
} order_call_t;

static void order_out(void *arg, const moon_msg_hdr_t *msg)
{
    order_call_t *c = arg;

    c->fn(c->arg, c->req, msg);
}

void moon_gw_bridge_order(moon_gw_req_t *req, const moon_msg_hdr_t *msg, uint64_t now_ns,
                          moon_gw_event_fn fn, void *arg)
{
    order_call_t c = {fn, arg, req};

    moon_serve_order_feed(&req->order, msg, now_ns, order_out, &c);
}

uint32_t moon_gw_bridge_order_expire(moon_gw_bridge_t *b, moon_actor_t *self, uint64_t now_ns,
                                     moon_gw_event_fn fn, void *arg)
{
    moon_gw_req_t *req = b->live, *next;
    uint32_t       n   = 0;

    for (; req != NULL; req = next) {
        order_call_t c       = {fn, arg, req};
        uint64_t     wire_id = req->wire_id; /* a resume in fn changes it */
        int          r;

        next = req->next; /* fn may end it (off the list) */
        if (!moon_serve_order_waiting(&req->order)) {
            continue;
        }
        r = moon_serve_order_expire(&req->order, now_ns, MOON_SERVE_ORDER_WAIT_NS, order_out, &c);
        if (r == 2) {
            moon_serve_cancel(self, b->conductor, wire_id);
        }
        n += r != 0;
    }
    return n;
}

uint32_t moon_gw_bridge_expire(moon_gw_bridge_t *b, moon_actor_t *self, uint64_t now_ns,
                               uint64_t deadline_ns)
{
    moon_gw_req_t *req = b->live, *next;
    uint32_t       n   = 0;

    for (; deadline_ns > 0 && req != NULL; req = next) {
        next = req->next; /* fail() takes req off the list */
        if (now_ns - req->times.arrival_ns < deadline_ns || now_ns < req->times.arrival_ns) {
            continue;
        }
        moon_serve_cancel(self, b->conductor, req->wire_id);
        fail(b, req, MOON_ERR_TIMED_OUT, "the request ran past its deadline (--request-deadline)");
        n++;
    }
    return n;
}

uint32_t moon_gw_bridge_n_live(const moon_gw_bridge_t *b)
{
    return b->n_live;
}

void moon_gw_bridge_destroy(moon_gw_bridge_t *b)
{
    if (b == NULL) {
        return;
    }
    moon_gw_bridge_abort(b, MOON_ERR_CANCELED, "the gateway is stopping");
    ck_ht_destroy(&b->table);
    moon_free(b->ring_buf);
    moon_free(b);
}
