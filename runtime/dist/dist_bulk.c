/* runtime/dist/dist_bulk.c - the bulk lane of the distributed runtime: registered
 * regions and their descriptors, one-sided get/put sliced over the engine's
 * rma/flush, and raw frames (moon_dist_send_raw). Both arrive from any thread
 * as commands under d->cmd_lock; the progress thread takes them in
 * dist_bulk_pump, issues a bounded number of slices per pass, so frames of
 * small messages go out between the slices of a large transfer, and sends
 * each completion as a DIST_BULK_DONE message. Bulk data never travels in
 * frames (STYLE section 6). A vectored transfer (getv/putv) is one op per
 * entry sharing a bulk_group: the entries go out like single transfers, and
 * the group sends the one completion when its last entry ends. */
#include "dist_state.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* ---- wire format ---------------------------------------------------------- */
#define DESC_MAGIC 0x4d524547u /* "MREG" */
typedef struct {
    uint32_t magic, rank;
    uint64_t addr, len;
    uint32_t rkey_len, flags; /* MOON_DIST_REGION_* */
    uint64_t id;              /* unique in the owner's process: names one allocation */
} region_desc_t;
_Static_assert(sizeof(region_desc_t) == 40, "region descriptor size changed");

static _Atomic uint64_t next_region_id = 1;

#define LOST_GRACE_NS 1000000000ull /* see dist_bulk_peer_lost */

static uint64_t lost_clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) | 1; /* never 0 */
}

/* ---- state ---------------------------------------------------------------- */
#define SLICES_INFLIGHT 4
#define SLICES_PER_PASS 2

struct moon_dist_region {
    uint32_t rank; /* the registering process */
    void    *addr;
    size_t   len;
    void    *memh;
    void    *rkey;
    size_t   rkey_len;
    uint64_t id;        /* next_region_id: a peer's cache tells allocations apart by it */
    int      heap;      /* addr is ours, from the heap: freed with the region */
    int      allocated; /* by the engine (mem_alloc): dies with the region */
    uint32_t flags;     /* MOON_DIST_REGION_*, carried by its descriptors */
    /* on d->regions while the engine holds it (memh, rkey); under d->lock */
    struct moon_dist_region *next, *prev;
    int                      mapped;
};

static void region_link(moon_dist_t *d, moon_dist_region_t *reg)
{
    pthread_mutex_lock(&d->lock);
    reg->mapped = 1;
    reg->prev   = NULL;
    reg->next   = d->regions;
    if (d->regions != NULL) {
        d->regions->prev = reg;
    }
    d->regions = reg;
    pthread_mutex_unlock(&d->lock);
}

/* Unlinks reg (d->lock held); 1 if the engine still held it. */
static int region_unlink(moon_dist_t *d, moon_dist_region_t *reg)
{
    if (!reg->mapped) {
        return 0;
    }
    if (reg->prev != NULL) {
        reg->prev->next = reg->next;
    } else {
        d->regions = reg->next;
    }
    if (reg->next != NULL) {
        reg->next->prev = reg->prev;
    }
    reg->mapped = 0;
    return 1;
}

void dist_regions_release(moon_dist_t *d)
{
    uint32_t n = 0;

    pthread_mutex_lock(&d->lock);
    while (d->regions != NULL) {
        moon_dist_region_t *reg = d->regions;
        region_unlink(d, reg);
        d->eng->mem_unmap(d, reg->memh, reg->rkey);
        reg->memh = reg->rkey = NULL;
        n++;
    }
    pthread_mutex_unlock(&d->lock);
    if (n > 0) {
        MOON_WARN("moon_dist_stop: %u region(s) still registered were released (deregister "
                  "before stopping; memory from moon_dist_region_alloc is gone)",
                  n);
    }
}

/* ---- bulk ----------------------------------------------------------------- */
moon_status_t moon_dist_region_register(moon_dist_t *d, void *addr, size_t len,
                                        moon_dist_region_t **reg_p)
{
    moon_dist_region_t *reg;
    moon_status_t       status;

    if (d == NULL || addr == NULL || len == 0 || reg_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    reg = moon_calloc(1, sizeof(*reg));
    if (reg == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    reg->rank = d->rank;
    reg->id   = atomic_fetch_add(&next_region_id, 1);
    reg->addr = addr;
    reg->len  = len;
    if (d->eng != NULL) {
        status = d->eng->mem_map(d, addr, len, &reg->memh, &reg->rkey, &reg->rkey_len);
        if (status != MOON_OK) {
            moon_free(reg);
            return status;
        }
        region_link(d, reg);
    }
    *reg_p = reg;
    return MOON_OK;
}

moon_status_t moon_dist_region_alloc(moon_dist_t *d, size_t len, void **addr_p,
                                     moon_dist_region_t **reg_p)
{
    moon_dist_region_t *reg;
    moon_status_t       status;

    if (d == NULL || len == 0 || addr_p == NULL || reg_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (d->eng == NULL || d->eng->mem_alloc == NULL) {
        void *addr = moon_aligned_alloc(4096, (len + 4095) & ~(size_t)4095);

        if (addr == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        status = moon_dist_region_register(d, addr, len, reg_p);
        if (status != MOON_OK) {
            moon_free(addr);
            return status;
        }
        (*reg_p)->heap = 1;
        *addr_p        = addr;
        return MOON_OK;
    }
    reg = moon_calloc(1, sizeof(*reg));
    if (reg == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = d->eng->mem_alloc(d, len, &reg->addr, &reg->memh, &reg->rkey, &reg->rkey_len);
    if (status != MOON_OK) {
        moon_free(reg);
        return status;
    }
    reg->allocated = 1;
    reg->rank      = d->rank;
    reg->id        = atomic_fetch_add(&next_region_id, 1);
    reg->len       = len;
    region_link(d, reg);
    *addr_p = reg->addr;
    *reg_p  = reg;
    return MOON_OK;
}

void moon_dist_region_deregister(moon_dist_t *d, moon_dist_region_t *reg)
{
    int mapped;

    if (reg == NULL) {
        return;
    }
    pthread_mutex_lock(&d->lock);
    mapped = region_unlink(d, reg);
    pthread_mutex_unlock(&d->lock);
    if (mapped) { /* else never mapped, or released by moon_dist_stop */
        dist_send_region_gone(d, reg->id);
        d->eng->mem_unmap(d, reg->memh, reg->rkey);
    }
    if (reg->heap) {
        moon_free(reg->addr);
    }
    moon_free(reg);
}

void moon_dist_region_set_flags(moon_dist_region_t *reg, uint32_t flags)
{
    if (reg != NULL) {
        reg->flags = flags & MOON_DIST_REGION_STREAM;
    }
}

size_t moon_dist_region_desc_bytes(const moon_dist_region_t *reg)
{
    return sizeof(region_desc_t) + reg->rkey_len;
}

/* A region descriptor is only meaningful inside one job. */
moon_status_t moon_dist_region_desc(const moon_dist_region_t *reg, void *msg, moon_span_t *span)
{
    region_desc_t h = {
        DESC_MAGIC, reg->rank, (uint64_t)(uintptr_t)reg->addr, reg->len, (uint32_t)reg->rkey_len,
        reg->flags, reg->id};
    char *out = moon_msg_span_alloc(msg, span, (uint32_t)moon_dist_region_desc_bytes(reg), 1, 0);

    if (out == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    memcpy(out, &h, sizeof(h));
    if (reg->rkey_len > 0) {
        memcpy(out + sizeof(h), reg->rkey, reg->rkey_len);
    }
    return MOON_OK;
}

/* Hands a bulk op or a raw frame (either may be NULL) from any thread to the
 * progress thread, which takes both lists in dist_bulk_pump. */
static void cmd_push(moon_dist_t *d, bulk_op_t *op, dist_buf_t *raw)
{
    pthread_mutex_lock(&d->cmd_lock);
    if (op != NULL) {
        op->next    = d->cmd_bulk;
        d->cmd_bulk = op;
    }
    if (raw != NULL) {
        raw->next  = d->cmd_raw;
        d->cmd_raw = raw;
    }
    pthread_mutex_unlock(&d->cmd_lock);
    atomic_store(&d->cmd_pending, 1);
    dist_wake(d);
}

static void send_bulk_done(moon_dist_t *d, moon_addr_t to, uint64_t cookie, moon_status_t status,
                           uint64_t bytes)
{
    moon_dist_bulk_done_t *m = moon_msg_new(MOON_MSG_DIST_BULK_DONE, 0);

    if (m == NULL) {
        MOON_ERROR("no memory for a bulk completion to %llx", (unsigned long long)to);
        return;
    }
    m->cookie = cookie;
    m->status = status;
    m->bytes  = bytes;
    if (moon_runtime_send(d->rt, to, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
}

/* The one completion of a vectored transfer: its entries' ops point here;
 * touched by the progress thread only (finish_op). */
typedef struct bulk_group {
    uint32_t      n_left; /* entries not finished */
    moon_status_t status; /* the first failure */
    uint64_t      bytes;
    moon_addr_t   reply_to;
    uint64_t      cookie;
} bulk_group_t;

/* Checks a descriptor and one entry against it and local_reg; fills *h. */
static moon_status_t bulk_check(moon_dist_t *d, const void *local, moon_dist_region_t *local_reg,
                                const void *desc, size_t desc_len, uint64_t remote_off, size_t len,
                                region_desc_t *h)
{
    if (d == NULL || d->rt == NULL || desc == NULL || desc_len < sizeof(*h) ||
        (local == NULL && len > 0)) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(h, desc, sizeof(*h));
    if (h->magic != DESC_MAGIC || desc_len != sizeof(*h) + h->rkey_len || h->rank >= d->size ||
        remote_off > h->len || len > h->len - remote_off) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (local_reg != NULL &&
        ((const char *)local < (char *)local_reg->addr ||
         (const char *)local + len > (char *)local_reg->addr + local_reg->len)) {
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_OK;
}

/* Same process: a plain copy, counted like a transfer. */
static void bulk_copy(moon_dist_t *d, int is_put, void *local, const region_desc_t *h,
                      uint64_t remote_off, size_t len)
{
    char *remote = (char *)(uintptr_t)h->addr + remote_off;

    if (len > 0) {
        memmove(is_put ? remote : local, is_put ? (const char *)local : remote, len);
    }
    atomic_fetch_add(&d->st.bulk_done, 1);
    atomic_fetch_add(&d->st.bulk_bytes, len);
}

/* A new op for one checked entry (not yet handed to the progress thread). */
static bulk_op_t *bulk_op_new(moon_dist_t *d, int is_put, void *local,
                              moon_dist_region_t *local_reg, const void *desc,
                              const region_desc_t *h, uint64_t remote_off, size_t len,
                              moon_addr_t reply_to, uint64_t cookie)
{
    bulk_op_t *op = moon_calloc(1, sizeof(*op) + h->rkey_len);

    if (op == NULL) {
        return NULL;
    }
    op->d           = d;
    op->is_put      = is_put;
    op->stream      = (h->flags & MOON_DIST_REGION_STREAM) != 0;
    op->peer        = h->rank;
    op->local       = local;
    op->local_memh  = local_reg != NULL ? local_reg->memh : NULL;
    op->remote_addr = h->addr + remote_off;
    op->region_id   = h->id;
    op->region_addr = h->addr;
    op->region_len  = h->len;
    op->len         = len;
    op->reply_to    = reply_to;
    op->cookie      = cookie;
    op->status      = MOON_OK;
    op->rkey_len    = h->rkey_len;
    op->rkey        = (char *)(op + 1);
    memcpy(op->rkey, (const char *)desc + sizeof(*h), h->rkey_len);
    return op;
}

static moon_status_t bulk_submit(moon_dist_t *d, int is_put, void *local,
                                 moon_dist_region_t *local_reg, const void *desc, size_t desc_len,
                                 uint64_t remote_off, size_t len, moon_addr_t reply_to,
                                 uint64_t cookie)
{
    region_desc_t h;
    bulk_op_t    *op;
    moon_status_t status = bulk_check(d, local, local_reg, desc, desc_len, remote_off, len, &h);

    if (status != MOON_OK) {
        return status;
    }
    if (h.rank == d->rank || len == 0) { /* same process: a plain copy */
        bulk_copy(d, is_put, local, &h, remote_off, len);
        send_bulk_done(d, reply_to, cookie, MOON_OK, len);
        return MOON_OK;
    }
    if (atomic_load(&d->peers[h.rank].down)) {
        return MOON_ERR_PEER_LOST;
    }
    op = bulk_op_new(d, is_put, local, local_reg, desc, &h, remote_off, len, reply_to, cookie);
    if (op == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    cmd_push(d, op, NULL);
    return MOON_OK;
}

/* Hands a list of ops to the progress thread under one lock (their order kept). */
static void cmd_push_list(moon_dist_t *d, bulk_op_t **ops, uint32_t n)
{
    pthread_mutex_lock(&d->cmd_lock);
    for (uint32_t i = 0; i < n; i++) {
        ops[i]->next = d->cmd_bulk;
        d->cmd_bulk  = ops[i];
    }
    pthread_mutex_unlock(&d->cmd_lock);
    atomic_store(&d->cmd_pending, 1);
    dist_wake(d);
}

static moon_status_t bulk_submitv(moon_dist_t *d, int is_put, const moon_dist_iov_t *iov,
                                  uint32_t n, moon_dist_region_t *local_reg, const void *desc,
                                  size_t desc_len, moon_addr_t reply_to, uint64_t cookie)
{
    region_desc_t h = {0};
    bulk_group_t *g;
    bulk_op_t   **ops;
    uint64_t      total = 0;
    moon_status_t status;

    if (iov == NULL || n == 0 || n > MOON_DIST_IOV_MAX) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < n; i++) {
        status = bulk_check(d, iov[i].local, local_reg, desc, desc_len, iov[i].remote_off,
                            iov[i].len, &h);
        if (status != MOON_OK) {
            return status;
        }
        total += iov[i].len;
    }
    if (h.rank == d->rank) { /* same process: plain copies */
        for (uint32_t i = 0; i < n; i++) {
            bulk_copy(d, is_put, iov[i].local, &h, iov[i].remote_off, iov[i].len);
        }
        send_bulk_done(d, reply_to, cookie, MOON_OK, total);
        return MOON_OK;
    }
    if (atomic_load(&d->peers[h.rank].down)) {
        return MOON_ERR_PEER_LOST;
    }
    g   = moon_calloc(1, sizeof(*g));
    ops = moon_calloc(n, sizeof(*ops));
    if (g == NULL || ops == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto err_free;
    }
    g->n_left   = n;
    g->status   = MOON_OK;
    g->reply_to = reply_to;
    g->cookie   = cookie;
    for (uint32_t i = 0; i < n; i++) {
        ops[i] = bulk_op_new(d, is_put, iov[i].local, local_reg, desc, &h, iov[i].remote_off,
                             iov[i].len, reply_to, cookie);
        if (ops[i] == NULL) {
            status = MOON_ERR_NO_MEMORY;
            goto err_free;
        }
        ops[i]->group = g;
    }
    cmd_push_list(d, ops, n);
    moon_free(ops);
    return MOON_OK;

err_free:
    for (uint32_t i = 0; ops != NULL && i < n; i++) {
        moon_free(ops[i]);
    }
    moon_free(ops);
    moon_free(g);
    return status;
}

moon_status_t moon_dist_getv(moon_dist_t *d, const moon_dist_iov_t *iov, uint32_t n,
                             moon_dist_region_t *local_reg, const void *desc, size_t desc_len,
                             moon_addr_t reply_to, uint64_t cookie)
{
    return bulk_submitv(d, 0, iov, n, local_reg, desc, desc_len, reply_to, cookie);
}

moon_status_t moon_dist_putv(moon_dist_t *d, const moon_dist_iov_t *iov, uint32_t n,
                             moon_dist_region_t *local_reg, const void *desc, size_t desc_len,
                             moon_addr_t reply_to, uint64_t cookie)
{
    return bulk_submitv(d, 1, iov, n, local_reg, desc, desc_len, reply_to, cookie);
}

moon_status_t moon_dist_get(moon_dist_t *d, void *local, moon_dist_region_t *local_reg,
                            const void *desc, size_t desc_len, uint64_t remote_off, size_t len,
                            moon_addr_t reply_to, uint64_t cookie)
{
    return bulk_submit(d, 0, local, local_reg, desc, desc_len, remote_off, len, reply_to, cookie);
}

moon_status_t moon_dist_put(moon_dist_t *d, const void *local, moon_dist_region_t *local_reg,
                            const void *desc, size_t desc_len, uint64_t remote_off, size_t len,
                            moon_addr_t reply_to, uint64_t cookie)
{
    return bulk_submit(d, 1, (void *)(uintptr_t)local, local_reg, desc, desc_len, remote_off, len,
                       reply_to, cookie);
}

static void finish_op(moon_dist_t *d, bulk_op_t *op)
{
    bulk_group_t *g = op->group;

    op->finished = 1;
    if (op->status == MOON_OK) {
        atomic_fetch_add(&d->st.bulk_done, 1);
        atomic_fetch_add(&d->st.bulk_bytes, op->len);
    }
    if (g == NULL) {
        send_bulk_done(d, op->reply_to, op->cookie, op->status,
                       op->status == MOON_OK ? op->len : 0);
        return;
    }
    /* a vectored transfer: one completion, when its last entry ends */
    op->group = NULL;
    if (op->status != MOON_OK && g->status == MOON_OK) {
        g->status = op->status;
    }
    g->bytes += op->status == MOON_OK ? op->len : 0;
    if (--g->n_left == 0) {
        send_bulk_done(d, g->reply_to, g->cookie, g->status, g->status == MOON_OK ? g->bytes : 0);
        moon_free(g);
    }
}

/* The op fails, but its caller hears of it only once no slice is in flight
 * (a get's data could otherwise still land in a buffer the caller has freed):
 * the engine completes what it had in flight when it closes the peer's
 * endpoints. An engine that cannot (shared memory without peer error
 * handling, MPI) gets LOST_GRACE_NS, and then the caller is told anyway. */
void dist_bulk_peer_lost(moon_dist_t *d, uint32_t r)
{
    for (bulk_op_t *op = d->active; op != NULL; op = op->next) {
        if (op->peer == r && !op->finished) {
            op->status  = MOON_ERR_PEER_LOST;
            op->lost_ns = lost_clock_ns();
            if (op->n_inflight == 0) {
                finish_op(d, op);
            }
        }
    }
}

void dist_bulk_slice_done(moon_dist_t *d, bulk_op_t *op, size_t n, moon_status_t status)
{
    (void)n;
    op->n_inflight--;
    if (status != MOON_OK && op->status == MOON_OK) {
        op->status = moon_status_is_peer(status) ? status : MOON_ERR_IO;
    }
    (void)d;
}

bulk_op_t *dist_bulk_find(moon_dist_t *d, uint64_t id)
{
    for (bulk_op_t *op = d->active; op != NULL; op = op->next) {
        if (op->eng_id == id) {
            return op;
        }
    }
    return NULL;
}

/* Issues a bounded number of slices per pass, so frames of small messages go
 * out between the slices of a large transfer. */
int dist_bulk_pump(moon_dist_t *d)
{
    int         n = 0, issued_now;
    bulk_op_t **pp;

    if (atomic_load_explicit(&d->cmd_pending, memory_order_relaxed)) {
        bulk_op_t  *list;
        dist_buf_t *raw;
        atomic_store(&d->cmd_pending, 0);
        pthread_mutex_lock(&d->cmd_lock);
        list        = d->cmd_bulk;
        raw         = d->cmd_raw;
        d->cmd_bulk = NULL;
        d->cmd_raw  = NULL;
        pthread_mutex_unlock(&d->cmd_lock);
        while (list != NULL) { /* reversed: keep submission order */
            bulk_op_t *op = list;
            list          = op->next;
            op->eng_id    = ++d->next_op_id;
            op->next      = d->active;
            d->active     = op;
            n++;
        }
        while (raw != NULL) {
            dist_buf_t *b = raw;
            raw           = b->next;
            b->next       = NULL;
            atomic_fetch_add(&d->st.frames_sent, 1);
            if (atomic_load(&d->peers[b->peer].down) || d->eng->send_frame(d, b) != MOON_OK) {
                dist_buf_put(d, b);
            }
            n++;
        }
    }
    d->n_open  = 0;
    issued_now = 0;
    for (pp = &d->active; *pp != NULL;) {
        bulk_op_t *op = *pp;

        if (!op->finished && op->status == MOON_OK) {
            /* a bounded number of slices per pass over all transfers: some
             * engines (CMA) copy a slice inside the call, and the frames of
             * small messages go out between passes */
            while (op->issued < op->len && op->n_inflight < SLICES_INFLIGHT &&
                   issued_now < SLICES_PER_PASS) {
                issued_now++;
                size_t        sl = MOON_MIN((size_t)d->cfg.slice_bytes, op->len - op->issued);
                moon_status_t status;

                op->n_inflight++;
                status = d->eng->rma(d, op, op->issued, sl);
                if (status != MOON_OK) {
                    op->n_inflight--;
                    op->status = status;
                    break;
                }
                op->issued += sl;
                n++;
            }
        }
        if (!op->finished && op->is_put && !op->flushed && op->n_inflight == 0 &&
            op->issued == op->len && op->status == MOON_OK && d->eng->flush != NULL) {
            /* put slices complete locally; the flush makes them land remotely */
            moon_status_t status;
            op->flushed = 1;
            op->n_inflight++;
            status = d->eng->flush(d, op);
            if (status != MOON_OK) {
                op->n_inflight--;
                op->status = status;
            }
            n++;
        }
        if (!op->finished && op->n_inflight == 0 &&
            (op->issued == op->len || op->status != MOON_OK)) {
            finish_op(d, op);
        } else if (MOON_UNLIKELY(!op->finished && op->lost_ns != 0) &&
                   lost_clock_ns() - op->lost_ns > LOST_GRACE_NS) {
            MOON_WARN("bulk transfer to lost rank %u: %u slice(s) never completed; reported "
                      "failed anyway",
                      op->peer, op->n_inflight);
            finish_op(d, op);
        }
        d->n_open += !op->finished;
        if (op->finished && op->n_inflight == 0) {
            *pp = op->next;
            d->eng->bulk_release(d, op);
            moon_free(op);
            n++;
        } else {
            pp = &op->next;
        }
    }
    return n;
}

moon_status_t moon_dist_send_raw(moon_dist_t *d, uint32_t r, const void *bytes, size_t len)
{
    dist_buf_t *b;

    if (d == NULL || d->eng == NULL || r >= d->size || r == d->rank) {
        return MOON_ERR_INVALID_PARAM;
    }
    b = moon_malloc(sizeof(*b) + len + 1);
    if (b == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    b->d    = d;
    b->cap  = (uint32_t)len + 1;
    b->len  = (uint32_t)len;
    b->big  = 1;
    b->peer = r;
    memcpy(b->data, bytes, len);
    cmd_push(d, NULL, b);
    return MOON_OK;
}
