/* runtime/dist/engine/engine_mpi.c - the MPI engine of the distributed runtime: the
 * slow, simple path used when UCX is absent (built without it, or
 * MOON_TRANSPORT=mpi). Frames are MPI_Isend/MPI_Iprobe+MPI_Recv on one tag
 * (MPI's non-overtaking rule keeps them in order per pair). Bulk slices are
 * two-sided under the hood: a get asks the owner's progress thread to send the
 * bytes; a put sends a header frame then the bytes, and the owner acknowledges
 * once they landed. Every MPI call runs on the progress thread (open/close on
 * the main thread before it starts / after it stopped), which needs
 * MPI_THREAD_MULTIPLE because the main thread may call MPI_Barrier meanwhile. */
#include "dist_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <mpi.h>

#include <string.h>

#define TAG_FRAME 17
#define TAG_BULK_BASE 1024
#define TAG_BULK_SPAN 16384

enum { EF_GET_REQ = DIST_FRAME_ENGINE, EF_PUT_REQ, EF_PUT_ACK };

typedef struct {
    uint64_t addr, n;
    uint32_t tag, pad;
} bulk_req_t;

enum { P_FRAME, P_GET_RECV, P_PUT_SEND, P_SERVE_SEND, P_SERVE_RECV };

typedef struct {
    MPI_Request req;
    int         kind;
    int         done;  /* MPI request completed */
    int         acked; /* put: owner acknowledged */
    int         tag;
    uint32_t    peer;
    dist_buf_t *buf;
    bulk_op_t  *op;
    size_t      n;
} pend_t;

typedef struct {
    MPI_Comm comm;
    pend_t  *pend;
    uint32_t n_pend, cap_pend;
    uint32_t next_tag;
    char    *rbuf;
    size_t   rbuf_cap;
} mpi_t;

static mpi_t *M(moon_dist_t *d)
{
    return moon_dist_engine_ctx(d);
}

static pend_t *pend_add(mpi_t *m)
{
    if (m->n_pend == m->cap_pend) {
        uint32_t cap = m->cap_pend ? m->cap_pend * 2 : 64;
        pend_t  *p   = moon_realloc(m->pend, cap * sizeof(*p));
        if (p == NULL) {
            return NULL;
        }
        m->pend     = p;
        m->cap_pend = cap;
    }
    memset(&m->pend[m->n_pend], 0, sizeof(pend_t));
    return &m->pend[m->n_pend++];
}

static moon_status_t mpi_open(moon_dist_t *d)
{
    mpi_t *m = moon_calloc(1, sizeof(*m));

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    MPI_Comm_dup(*(MPI_Comm *)dist_mpi_comm(d), &m->comm);
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    moon_dist_set_engine_ctx(d, m);
    return MOON_OK;
}

static void mpi_close(moon_dist_t *d)
{
    mpi_t *m = M(d);

    if (m == NULL) {
        return;
    }
    for (uint32_t i = 0; i < m->n_pend; i++) {
        if (!m->pend[i].done) {
            MPI_Cancel(&m->pend[i].req);
            MPI_Request_free(&m->pend[i].req);
        }
        if (m->pend[i].kind == P_FRAME) {
            dist_frame_done(d, m->pend[i].buf, MOON_OK); /* a frame still in flight */
        }
    }
    if (moon_dist_peer_alive(d, (moon_dist_rank_(d) + 1) % moon_dist_size_(d))) {
        MPI_Comm_free(&m->comm);
    }
    moon_free(m->pend);
    moon_free(m->rbuf);
    moon_free(m);
    moon_dist_set_engine_ctx(d, NULL);
}

static moon_status_t mpi_send_frame(moon_dist_t *d, dist_buf_t *buf)
{
    mpi_t  *m = M(d);
    pend_t *p = pend_add(m);

    if (p == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    p->kind = P_FRAME;
    p->buf  = buf;
    p->peer = buf->peer;
    if (MPI_Isend(buf->data, (int)buf->len, MPI_BYTE, (int)buf->peer, TAG_FRAME, m->comm,
                  &p->req) != MPI_SUCCESS) {
        m->n_pend--;
        return MOON_ERR_PEER_LOST;
    }
    return MOON_OK;
}

static int next_tag(mpi_t *m)
{
    m->next_tag = (m->next_tag + 1) % TAG_BULK_SPAN;
    return TAG_BULK_BASE + (int)m->next_tag;
}

/* Completes finished requests; a put slice completes once both its send and
 * the owner's acknowledgement are in. */
static int reap(moon_dist_t *d)
{
    mpi_t *m = M(d);
    int    n = 0;

    for (uint32_t i = 0; i < m->n_pend;) {
        pend_t *p    = &m->pend[i];
        int     flag = p->done;

        if (!flag && MPI_Test(&p->req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            flag = 1; /* the peer is gone: dist notices through heartbeats */
        }
        if (flag) {
            p->done = 1;
        }
        if (!p->done || (p->kind == P_PUT_SEND && !p->acked)) {
            i++;
            continue;
        }
        switch (p->kind) {
        case P_FRAME:
            dist_frame_done(d, p->buf, MOON_OK);
            break;
        case P_GET_RECV:
        case P_PUT_SEND:
            dist_bulk_slice_done(d, p->op, p->n, MOON_OK);
            break;
        case P_SERVE_RECV: {
            bulk_req_t ack  = {0, 0, (uint32_t)p->tag, 0};
            uint32_t   peer = p->peer;
            /* drop the entry first: sending the ack may grow the table */
            m->pend[i] = m->pend[--m->n_pend];
            (void)dist_send_engine_frame(d, peer, EF_PUT_ACK, &ack, sizeof(ack));
            n++;
            continue;
        }
        default:
            break;
        }
        m->pend[i] = m->pend[--m->n_pend];
        n++;
    }
    return n;
}

static int mpi_progress(moon_dist_t *d)
{
    mpi_t     *m = M(d);
    int        n = 0;
    MPI_Status st;

    for (int i = 0; i < 16; i++) {
        int flag = 0, count = 0;

        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_FRAME, m->comm, &flag, &st) != MPI_SUCCESS || !flag) {
            break;
        }
        MPI_Get_count(&st, MPI_BYTE, &count);
        if ((size_t)count > m->rbuf_cap) {
            char *b = moon_realloc(m->rbuf, (size_t)count);
            if (b == NULL) {
                MOON_ERROR("no memory for a %d-byte frame", count);
                break;
            }
            m->rbuf     = b;
            m->rbuf_cap = (size_t)count;
        }
        MPI_Recv(m->rbuf, count, MPI_BYTE, st.MPI_SOURCE, TAG_FRAME, m->comm, MPI_STATUS_IGNORE);
        dist_on_frame(d, m->rbuf, (size_t)count);
        n++;
    }
    return n + reap(d);
}

static int mpi_event_fd(moon_dist_t *d)
{
    (void)d;
    return -1;
}

static int mpi_arm(moon_dist_t *d)
{
    return M(d)->n_pend == 0;
}

static moon_status_t mpi_mem_map(moon_dist_t *d, void *addr, size_t len, void **memh_p,
                                 void **rkey_p, size_t *rkey_len_p)
{
    (void)d;
    (void)addr;
    (void)len;
    *memh_p     = NULL;
    *rkey_p     = NULL;
    *rkey_len_p = 0;
    return MOON_OK;
}

static void mpi_mem_unmap(moon_dist_t *d, void *memh, void *rkey)
{
    (void)d;
    (void)memh;
    (void)rkey;
}

static moon_status_t mpi_rma(moon_dist_t *d, bulk_op_t *op, size_t off, size_t n)
{
    mpi_t     *m = M(d);
    bulk_req_t r = {op->remote_addr + off, n, (uint32_t)next_tag(m), 0};
    pend_t    *p;
    int        ret;

    /* the request frame first: sending it may grow the pending table */
    if (dist_send_engine_frame(d, op->peer, op->is_put ? EF_PUT_REQ : EF_GET_REQ, &r, sizeof(r)) !=
            MOON_OK ||
        (p = pend_add(m)) == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    p->kind = op->is_put ? P_PUT_SEND : P_GET_RECV;
    p->op   = op;
    p->n    = n;
    p->tag  = (int)r.tag;
    p->peer = op->peer;
    if (op->is_put) {
        ret = MPI_Isend(op->local + off, (int)n, MPI_BYTE, (int)op->peer, p->tag, m->comm, &p->req);
    } else {
        ret = MPI_Irecv(op->local + off, (int)n, MPI_BYTE, (int)op->peer, p->tag, m->comm, &p->req);
    }
    if (ret != MPI_SUCCESS) {
        m->n_pend--;
        return MOON_ERR_PEER_LOST;
    }
    return MOON_OK;
}

/* The owner's side of a slice: addresses come from a descriptor this rank
 * handed out; a bad one is a peer bug, answered by not serving it. */
static int mpi_on_engine_frame(moon_dist_t *d, uint32_t src, uint32_t kind, const void *body,
                               size_t len)
{
    mpi_t     *m = M(d);
    bulk_req_t r;
    pend_t    *p;

    if (len != sizeof(r) || kind < EF_GET_REQ || kind > EF_PUT_ACK) {
        return 0; /* counted and logged by dist.c */
    }
    memcpy(&r, body, sizeof(r));
    if (kind == EF_PUT_ACK) {
        for (uint32_t i = 0; i < m->n_pend; i++) {
            if (m->pend[i].kind == P_PUT_SEND && m->pend[i].peer == src &&
                m->pend[i].tag == (int)r.tag) {
                m->pend[i].acked = 1;
                break;
            }
        }
        return 1;
    }
    if (r.n > (uint64_t)INT32_MAX || (kind != EF_GET_REQ && kind != EF_PUT_REQ) ||
        (p = pend_add(m)) == NULL) {
        MOON_WARN("bulk frame from rank %u not served", src);
        return 1;
    }
    p->peer = src;
    p->tag  = (int)r.tag;
    if (kind == EF_GET_REQ) {
        p->kind = P_SERVE_SEND;
        MPI_Isend((void *)(uintptr_t)r.addr, (int)r.n, MPI_BYTE, (int)src, p->tag, m->comm,
                  &p->req);
    } else {
        p->kind = P_SERVE_RECV;
        MPI_Irecv((void *)(uintptr_t)r.addr, (int)r.n, MPI_BYTE, (int)src, p->tag, m->comm,
                  &p->req);
    }
    return 1;
}

static void mpi_bulk_release(moon_dist_t *d, bulk_op_t *op)
{
    (void)d;
    (void)op;
}

static void mpi_peer_lost(moon_dist_t *d, uint32_t r)
{
    mpi_t *m = M(d);

    /* requests to a dead rank never complete: forget them */
    for (uint32_t i = 0; i < m->n_pend;) {
        if (m->pend[i].peer == r) {
            if (m->pend[i].kind == P_FRAME) {
                dist_frame_done(d, m->pend[i].buf, MOON_OK);
            } else if (m->pend[i].op != NULL) {
                dist_bulk_slice_done(d, m->pend[i].op, 0, MOON_ERR_PEER_LOST);
            }
            m->pend[i] = m->pend[--m->n_pend];
        } else {
            i++;
        }
    }
}

const dist_engine_ops_t moon_dist_engine_mpi = {
    .name            = "mpi",
    .open            = mpi_open,
    .close           = mpi_close,
    .send_frame      = mpi_send_frame,
    .progress        = mpi_progress,
    .event_fd        = mpi_event_fd,
    .arm             = mpi_arm,
    .mem_map         = mpi_mem_map,
    .mem_unmap       = mpi_mem_unmap,
    .rma             = mpi_rma,
    .bulk_release    = mpi_bulk_release,
    .peer_lost       = mpi_peer_lost,
    .on_engine_frame = mpi_on_engine_frame,
};
