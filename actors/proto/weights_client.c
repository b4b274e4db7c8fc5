/* actors/weights_client.c - the weight-push client (weights_client.h): a
 * forwarding actor (the broadcaster answers actors, not threads) and a
 * queue of outcomes under a mutex. */
#include "moonlet/weights_client.h"

#include "moonlet/alloc.h"
#include "moonlet/runtime.h"
#include "moonlet/weights_msgs.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define WC_QUEUE 64u

struct moon_weights_client {
    moon_runtime_t           *rt;
    moon_addr_t               bcast, addr;
    _Atomic uint64_t          next_req;
    pthread_mutex_t           lock;
    pthread_cond_t            cond;
    moon_weights_result_t     q[WC_QUEUE]; /* under lock */
    uint32_t                  q_head, q_n;
    moon_weights_state_info_t state; /* under lock */
    uint64_t                  state_seq;
};

typedef struct {
    moon_weights_client_t *c;
} wc_actor_t;

static moon_status_t wc_init(moon_actor_t *self, const void *args)
{
    ((wc_actor_t *)moon_actor_state(self))->c = (moon_weights_client_t *)args;
    return MOON_OK;
}

/* From the client's thread (src NONE): passed on with self as the sender. */
static moon_status_t wc_on_request(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    moon_weights_client_t *c = ((wc_actor_t *)moon_actor_state(self))->c;
    void                  *copy;

    if (msg->src != MOON_ADDR_NONE) {
        return MOON_OK;
    }
    copy = moon_msg_dup(msg);
    if (copy != NULL) {
        moon_tell(self, c->bcast, copy);
    }
    return MOON_OK;
}

static moon_status_t wc_on_reply(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    moon_weights_client_t           *c = ((wc_actor_t *)moon_actor_state(self))->c;
    const moon_weights_push_reply_t *m = (const void *)msg;
    moon_weights_result_t            r = {0};

    r.req           = m->req;
    r.status        = m->status;
    r.version       = m->version;
    r.old_version   = m->old_version;
    r.total_bytes   = m->total_bytes;
    r.moved_bytes   = m->moved_bytes;
    r.skipped_bytes = m->skipped_bytes;
    r.read_bytes    = m->read_bytes;
    r.n_chunks      = m->n_chunks;
    r.n_moved       = m->n_moved;
    r.n_instances   = m->n_instances;
    r.stage_s       = m->stage_s;
    r.switch_s      = m->switch_s;
    snprintf(r.message, sizeof(r.message), "%s",
             m->message.n ? (const char *)MOON_SPAN_PTR(m, m->message) : "");
    pthread_mutex_lock(&c->lock);
    if (c->q_n < WC_QUEUE) {
        c->q[(c->q_head + c->q_n++) % WC_QUEUE] = r;
    }
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return MOON_OK;
}

static moon_status_t wc_on_state(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    moon_weights_client_t            *c = ((wc_actor_t *)moon_actor_state(self))->c;
    const moon_weights_state_reply_t *m = (const void *)msg;
    const uint64_t                   *v = MOON_SPAN_PTR(m, m->inst);
    moon_weights_state_info_t         s = {0};

    s.version      = m->version;
    s.phase        = m->phase;
    s.push_version = m->push_version;
    s.n_pushes     = m->n_pushes;
    s.n_failed     = m->n_failed;
    s.n_inst       = MOON_MIN(m->inst.n / 3, MOON_WEIGHTS_STATE_MAX_INST);
    for (uint32_t i = 0; i < s.n_inst; i++) {
        s.inst[i].role    = (uint32_t)v[3 * i];
        s.inst[i].index   = (uint32_t)v[3 * i + 1];
        s.inst[i].version = v[3 * i + 2];
    }
    snprintf(s.last_error, sizeof(s.last_error), "%s",
             m->message.n ? (const char *)MOON_SPAN_PTR(m, m->message) : "");
    pthread_mutex_lock(&c->lock);
    c->state = s;
    c->state_seq++;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return MOON_OK;
}

static const moon_actor_ops_t wc_ops = {
    .name        = "weights_client",
    .state_bytes = sizeof(wc_actor_t),
    .init        = wc_init,
    .on_msg      = {[MOON_MSG_WEIGHTS_PUSH]        = wc_on_request,
                    [MOON_MSG_WEIGHTS_STATE]       = wc_on_request,
                    [MOON_MSG_WEIGHTS_PUSH_REPLY]  = wc_on_reply,
                    [MOON_MSG_WEIGHTS_STATE_REPLY] = wc_on_state},
};

moon_status_t moon_weights_client_create(moon_runtime_t *rt, moon_addr_t bcast,
                                         moon_weights_client_t **client_p)
{
    moon_weights_client_t *c;
    moon_spawn_opts_t      opts = {.flags = MOON_SPAWN_CONTROL};
    moon_status_t          status;

    if (rt == NULL || bcast == MOON_ADDR_NONE || client_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_weights_msgs_register();
    if (status != MOON_OK) {
        return status;
    }
    c = moon_calloc(1, sizeof(*c));
    if (c == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    c->rt    = rt;
    c->bcast = bcast;
    atomic_init(&c->next_req, 1);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    status = moon_spawn(rt, &wc_ops, c, &opts, &c->addr);
    if (status != MOON_OK) {
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        moon_free(c);
        return status;
    }
    *client_p = c;
    return MOON_OK;
}

void moon_weights_client_destroy(moon_weights_client_t *c)
{
    if (c == NULL) {
        return;
    }
    moon_stop(c->rt, c->addr, MOON_OK);
    (void)moon_actor_wait_gone(c->rt, c->addr, 2000); /* its handlers use c */
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    moon_free(c);
}

moon_status_t moon_weights_push_file(moon_weights_client_t *c, const char *path, uint64_t version,
                                     uint32_t flags, uint64_t *req_p)
{
    moon_weights_push_t *m;
    uint64_t             req;

    if (c == NULL || path == NULL || path[0] == '\0') {
        return MOON_ERR_INVALID_PARAM;
    }
    m = moon_msg_new(MOON_MSG_WEIGHTS_PUSH, strlen(path) + 2);
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    req        = atomic_fetch_add(&c->next_req, 1);
    m->req     = req;
    m->version = version;
    m->flags   = flags;
    moon_msg_set_str(m, &m->path, path);
    if (moon_runtime_send(c->rt, c->addr, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
        return MOON_ERR_NO_ACTOR;
    }
    if (req_p != NULL) {
        *req_p = req;
    }
    return MOON_OK;
}

moon_status_t moon_weights_push_region(moon_weights_client_t *c, const moon_dist_region_t *reg,
                                       uint64_t bytes, uint64_t version, uint32_t flags,
                                       uint64_t *req_p)
{
    return moon_weights_push_region_changed(c, reg, bytes, version, flags, NULL, req_p);
}

moon_status_t moon_weights_push_region_changed(moon_weights_client_t    *c,
                                               const moon_dist_region_t *reg, uint64_t bytes,
                                               uint64_t version, uint32_t flags,
                                               const moon_weights_changes_t *changes,
                                               uint64_t                     *req_p)
{
    moon_weights_push_t *m;
    uint64_t             req;
    uint32_t             n = changes != NULL ? changes->n : 0;

    if (c == NULL || reg == NULL || bytes == 0 || (n > 0 && changes->ranges == NULL)) {
        return MOON_ERR_INVALID_PARAM;
    }
    m = moon_msg_new(MOON_MSG_WEIGHTS_PUSH, moon_dist_region_desc_bytes(reg) + (size_t)n * 16 + 32);
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    req          = atomic_fetch_add(&c->next_req, 1);
    m->req       = req;
    m->version   = version;
    m->flags     = flags;
    m->src_bytes = bytes;
    if (changes != NULL) {
        m->image = changes->image;
        m->gen   = changes->gen;
        m->base  = changes->base;
        if (n > 0) {
            memcpy(moon_msg_span_alloc(m, &m->dirty, 2 * n, 8, 0), changes->ranges, (size_t)n * 16);
        }
    }
    if (moon_dist_region_desc(reg, m, &m->src) != MOON_OK ||
        moon_runtime_send(c->rt, c->addr, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
        return MOON_ERR_NO_ACTOR;
    }
    if (req_p != NULL) {
        *req_p = req;
    }
    return MOON_OK;
}

moon_status_t moon_weights_client_wait(moon_weights_client_t *c, uint64_t req, uint64_t timeout_ns,
                                       moon_weights_result_t *res_p)
{
    moon_status_t status = MOON_OK;

    while (status == MOON_OK) {
        status = moon_weights_client_next(c, timeout_ns, res_p);
        if (status == MOON_OK && res_p->req == req) {
            return MOON_OK;
        }
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

moon_status_t moon_weights_client_next(moon_weights_client_t *c, uint64_t timeout_ns,
                                       moon_weights_result_t *res_p)
{
    struct timespec ts     = deadline_after(timeout_ns);
    int             ret    = 0;
    moon_status_t   status = MOON_ERR_TIMED_OUT;

    pthread_mutex_lock(&c->lock);
    while (c->q_n == 0 && ret != ETIMEDOUT) {
        ret = pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    if (c->q_n > 0) {
        *res_p    = c->q[c->q_head];
        c->q_head = (c->q_head + 1) % WC_QUEUE;
        c->q_n--;
        status = MOON_OK;
    }
    pthread_mutex_unlock(&c->lock);
    return status;
}

moon_status_t moon_weights_push_file_sync(moon_weights_client_t *c, const char *path,
                                          uint64_t version, uint32_t flags, uint64_t timeout_ns,
                                          moon_weights_result_t *res_p)
{
    uint64_t      req;
    moon_status_t status = moon_weights_push_file(c, path, version, flags, &req);

    return status == MOON_OK ? moon_weights_client_wait(c, req, timeout_ns, res_p) : status;
}

moon_status_t moon_weights_client_state(moon_weights_client_t *c, uint64_t timeout_ns,
                                        moon_weights_state_info_t *st_p)
{
    struct timespec       ts = deadline_after(timeout_ns);
    moon_weights_state_t *q  = moon_msg_new(MOON_MSG_WEIGHTS_STATE, 0);
    uint64_t              seq;
    int                   ret    = 0;
    moon_status_t         status = MOON_ERR_TIMED_OUT;

    if (q == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&c->lock);
    seq = c->state_seq;
    pthread_mutex_unlock(&c->lock);
    if (moon_runtime_send(c->rt, c->addr, &q->hdr) != MOON_OK) {
        moon_msg_release(&q->hdr);
        return MOON_ERR_NO_ACTOR;
    }
    pthread_mutex_lock(&c->lock);
    while (c->state_seq == seq && ret != ETIMEDOUT) {
        ret = pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    if (c->state_seq != seq) {
        *st_p  = c->state;
        status = MOON_OK;
    }
    pthread_mutex_unlock(&c->lock);
    return status;
}
