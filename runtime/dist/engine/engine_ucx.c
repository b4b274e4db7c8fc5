/* runtime/dist/engine/engine_ucx.c - the UCX engine of the distributed runtime: one
 * UCP context and worker per process (worker addresses allgathered over MPI),
 * endpoints created on first use with peer error handling (one for frames,
 * one for bulk), frames as eager active messages (to ranks of this host,
 * through shared-memory rings of our own instead: shm_rings.h), bulk slices as
 * ucp_put_nbx/ucp_get_nbx (or a streaming copy into a mapped peer) with rkeys
 * unpacked once per (peer, key) and cached (ucx_rkeys.h). The worker is
 * single-threaded: the progress thread of dist.c or an idle worker, under the
 * progress lock (open/close run before it starts and after it stopped);
 * mem_map/rkey_pack are context calls, made thread-safe by mt_workers_shared. */
#include "dist_internal.h"
#include "shm_rings.h"
#include "ucx_rkeys.h"

#include "moonlet/alloc.h"
#include "moonlet/copy.h"
#include "moonlet/log.h"

#include <mpi.h>
#include <ucp/api/ucp.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define AM_FRAME_ID 7
#define AM_WAKE_ID 8 /* no payload: wakes a receiver asleep over its frame rings */
#define RING_BYTES_DEFAULT ((size_t)256 << 10)
#define RKEY_CACHE 64          /* unpacked remote keys kept unused (a few regions per peer) */
#define STREAM_MIN (64u << 10) /* puts from this size stream into a mapped peer */
/* Gets from this size stream out of one: a few blocks this large in flight
 * outgrow the cache, and a plain copy then pays for reading each destination
 * line first (4 MiB gets of the kvstore suite: 44-47 GB/s streamed, 25-30
 * copied; bench_copy shows the plain copy ahead up to 2 MiB blocks). */
#define STREAM_GET_MIN ((size_t)4 << 20)

typedef struct {
    moon_dist_t *d;
    uint32_t     rank;
    ucp_ep_h     ep;      /* frames */
    ucp_ep_h     bulk_ep; /* bulk slices and their flushes */
    int          failed;
    int          err_peer;         /* ep has UCX peer error handling (not on shm in 1.13) */
    int          close_pending;    /* lost: close outside UCX callbacks */
    dist_buf_t  *pend, *pend_last; /* frames waiting for room in the ring to the peer */
    size_t       pend_off;         /* bytes of the first already in the ring */
    int          wake_pending;     /* a wake-up to the peer not yet gone out */
} ucx_peer_t;

typedef struct {
    ucp_context_h ctx;
    ucp_worker_h  worker;
    int           efd;
    char         *addrs; /* all ranks' worker addresses */
    int          *addr_len, *addr_off;
    ucx_peer_t   *peers;
    int           n_close_pending;
    uint32_t      ring_busy_passes; /* passes that delivered ring frames (UCX every 8th) */
    int           no_shm;           /* UCX_TLS rules shared memory out: peer error handling */
    ucx_rkeys_t  *rkeys;
    shm_rings_t  *rings;  /* frames to ranks of this host; NULL: all through UCX */
    uint32_t      n_pend; /* peers with frames waiting for ring room */
} ucx_t;

static void drop_pending(moon_dist_t *d, ucx_peer_t *p);

/* UCX 1.13's shared-memory transports have no peer failure handler, so an
 * endpoint asking for one cannot use them: peer error handling is requested
 * only when UCX_TLS rules shared memory out (e.g. tcp), or for ranks on
 * other hosts (peer_elsewhere). The failure detector (dist_liveness.c)
 * confirms a loss in every case. */
static int tls_without_shm(void)
{
    const char *tls = moon_config_foreign_env("UCX_TLS"); /* UCX's own variable */

    if (tls == NULL) {
        return 0;
    }
    return strstr(tls, "sysv") == NULL && strstr(tls, "posix") == NULL &&
           strstr(tls, "sm") == NULL && strstr(tls, "shm") == NULL && strstr(tls, "all") == NULL &&
           strstr(tls, "mm") == NULL;
}

static moon_status_t from_ucs(ucs_status_t s)
{
    switch (s) {
    case UCS_OK:
        return MOON_OK;
    case UCS_INPROGRESS:
        return MOON_INPROGRESS;
    case UCS_ERR_NO_MEMORY:
        return MOON_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM:
        return MOON_ERR_INVALID_PARAM;
    case UCS_ERR_NO_RESOURCE:
        return MOON_ERR_NO_RESOURCE;
    case UCS_ERR_TIMED_OUT:
        return MOON_ERR_TIMED_OUT;
    case UCS_ERR_CANCELED:
        return MOON_ERR_CANCELED;
    case UCS_ERR_UNSUPPORTED:
        return MOON_ERR_UNSUPPORTED;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
        return MOON_ERR_PEER_LOST;
    default:
        return MOON_ERR_IO;
    }
}

static ucx_t *U(moon_dist_t *d)
{
    return moon_dist_engine_ctx(d);
}

/* Over shared memory a slice is a copy inside the call: 1 MiB keeps the
 * calls few. Over tcp UCX moves the data of every slice in flight inside
 * progress calls (a get is answered by the peer's progress), so a slice
 * holds frames back for its time on the wire: 128 KiB (about 0.1 ms on
 * loopback) lets frames through while a transfer runs at full speed. */
static size_t ucx_slice_bytes(moon_dist_t *d)
{
    return U(d)->no_shm ? 128u << 10 : 1u << 20;
}

/* ---- receive -------------------------------------------------------------- */
typedef struct {
    moon_dist_t *d;
    void        *buf;
    size_t       len;
} rndv_ctx_t;

static void rndv_done(void *req, ucs_status_t status, size_t length, void *user_data)
{
    rndv_ctx_t *r = user_data;

    if (status == UCS_OK) {
        dist_on_frame(r->d, r->buf, length);
    }
    moon_free(r->buf);
    moon_free(r);
    if (req != NULL) {
        ucp_request_free(req);
    }
}

static ucs_status_t am_frame_cb(void *arg, const void *header, size_t header_length, void *data,
                                size_t length, const ucp_am_recv_param_t *param)
{
    moon_dist_t *d = arg;

    (void)header;
    (void)header_length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        /* frames go eager; a rendezvous one is still read whole */
        ucp_request_param_t rp  = {0};
        rndv_ctx_t         *r   = moon_malloc(sizeof(*r));
        void               *buf = moon_malloc(length ? length : 1);
        ucs_status_ptr_t    sp;

        if (r == NULL || buf == NULL) {
            moon_free(r);
            moon_free(buf);
            MOON_ERROR("no memory for a %zu-byte frame: dropped", length);
            return UCS_OK;
        }
        *r              = (rndv_ctx_t){d, buf, length};
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        rp.cb.recv_am   = rndv_done;
        rp.user_data    = r;
        sp              = ucp_am_recv_data_nbx(U(d)->worker, data, buf, length, &rp);
        if (sp == NULL) {
            rndv_done(NULL, UCS_OK, length, r);
        } else if (UCS_PTR_IS_ERR(sp)) {
            rndv_done(NULL, UCS_PTR_STATUS(sp), 0, r);
        }
        return UCS_OK;
    }
    dist_on_frame(d, data, length);
    return UCS_OK;
}

/* A wake-up: its arrival has woken the worker, nothing more to do. */
static ucs_status_t am_wake_cb(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg;
    (void)header;
    (void)header_length;
    (void)data;
    (void)length;
    (void)param;
    return UCS_OK;
}

/* ---- endpoints ------------------------------------------------------------ */
static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_peer_t *p = arg;

    (void)ep;
    p->failed = 1;
    dist_peer_failed(p->d, p->rank,
                     from_ucs(status) == MOON_ERR_IO ? MOON_ERR_PEER_LOST : from_ucs(status));
}

/* 1 if rank r runs on another host (not a pseudo host of MOON_SPLIT_HOSTS):
 * no shared memory reaches it, so its endpoints can have UCX's peer error
 * handling, which reports its death (a reset connection) at once instead
 * of after the failure detector's dead deadline (dist_liveness.c). */
static int peer_elsewhere(moon_dist_t *d, uint32_t r)
{
    const dist_proc_t *procs = dist_procs(d);

    return procs != NULL && dist_config(d)->split_hosts <= 1 &&
           procs[r].host != procs[moon_dist_rank_(d)].host;
}

/* Creates *ep_p to rank r on first use; NULL once the peer failed. */
static MOON_NOINLINE ucp_ep_h ep_create(moon_dist_t *d, ucx_peer_t *p, ucp_ep_h *ep_p)
{
    ucx_t          *u  = U(d);
    ucp_ep_params_t ep = {0};
    ucs_status_t    s;

    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address    = (const ucp_address_t *)(u->addrs + u->addr_off[p->rank]);
    ep.err_mode   = UCP_ERR_HANDLING_MODE_NONE;
    p->err_peer   = u->no_shm || peer_elsewhere(d, p->rank);
    if (p->err_peer) {
        ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.err_mode        = UCP_ERR_HANDLING_MODE_PEER;
        ep.err_handler.cb  = ep_error_cb;
        ep.err_handler.arg = p;
    }
    s = ucp_ep_create(u->worker, &ep, ep_p);
    if (s != UCS_OK && p->err_peer && !u->no_shm) {
        /* no transport to it handles peer failure: its silence will tell */
        ep.field_mask &= ~(uint64_t)UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        p->err_peer = 0;
        s           = ucp_ep_create(u->worker, &ep, ep_p);
    }
    if (s != UCS_OK) {
        MOON_ERROR("ucp_ep_create to rank %u failed: %s", p->rank, ucs_status_string(s));
        *ep_p     = NULL;
        p->failed = 1;
    }
    return *ep_p;
}

/* The endpoint to p (*ep_p: its control or its bulk endpoint), created on
 * first use; NULL once creating it failed. Per frame: the check stays inline,
 * the parameters are built only in ep_create. */
static inline ucp_ep_h ep_of(moon_dist_t *d, ucx_peer_t *p, ucp_ep_h *ep_p)
{
    return *ep_p != NULL || p->failed ? *ep_p : ep_create(d, p, ep_p);
}

/* Frames go on one endpoint, bulk slices on another: over tcp each is a
 * connection of its own, so a frame never queues behind megabytes of slices
 * in one socket (with shared memory the two cost nothing). */
static ucp_ep_h get_ep(moon_dist_t *d, uint32_t r)
{
    ucx_peer_t *p = &U(d)->peers[r];

    return ep_of(d, p, &p->ep);
}

static ucp_ep_h get_bulk_ep(moon_dist_t *d, uint32_t r)
{
    ucx_peer_t *p = &U(d)->peers[r];

    return ep_of(d, p, &p->bulk_ep);
}

static void close_one(moon_dist_t *d, ucx_peer_t *p, ucp_ep_h *ep_p)
{
    ucp_request_param_t rp = {0};
    ucs_status_ptr_t    sp;

    if (*ep_p == NULL) {
        return;
    }
    if (p->failed && !p->err_peer) {
        /* without error handling neither a flush nor a force close returns
         * for a dead peer: leave the endpoint to ucp_worker_destroy */
        *ep_p = NULL;
        return;
    }
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags        = p->err_peer ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    sp              = ucp_ep_close_nbx(*ep_p, &rp);
    if (UCS_PTR_IS_PTR(sp)) {
        for (int i = 0; i < 100000 && ucp_request_check_status(sp) == UCS_INPROGRESS; i++) {
            ucp_worker_progress(U(d)->worker);
        }
        ucp_request_free(sp);
    }
    *ep_p = NULL;
}

static void close_ep(moon_dist_t *d, ucx_peer_t *p)
{
    ucx_rkeys_drop_peer(U(d)->rkeys, p->rank); /* unpacked on bulk_ep */
    close_one(d, p, &p->bulk_ep);
    close_one(d, p, &p->ep);
}

/* ---- engine ops ----------------------------------------------------------- */
/* Frames to ranks of this host go through rings of our own (shm_rings.h:
 * a rank killed mid-send cannot stall the others' frames), unless UCX_TLS
 * rules shared memory out or cfg.shm_rings is off (MOON_SHM_RINGS=0).
 * Collective. */
static shm_rings_t *rings_open(moon_dist_t *d, MPI_Comm comm, int no_shm)
{
    const moon_dist_config_t *cfg   = dist_config(d);
    size_t                    bytes = RING_BYTES_DEFAULT;
    int                       want  = !no_shm && cfg->shm_rings;
    int                       all   = 0;

    if (cfg->shm_ring_kib > 0) {
        bytes = (size_t)cfg->shm_ring_kib << 10;
    }
    shm_rings_t *rings = NULL;
    uint32_t     n     = 0;

    /* every rank must take the same road: the collective only if all want it */
    MPI_Allreduce(&want, &all, 1, MPI_INT, MPI_MIN, comm);
    if (all) {
        rings = shm_rings_open(comm, moon_dist_rank_(d), moon_dist_size_(d), dist_procs(d), bytes);
    }
    for (uint32_t r = 0; r < moon_dist_size_(d); r++) {
        n += (uint32_t)shm_rings_reaches(rings, r);
    }
    MOON_INFO("frames to %u of %u peers through shared-memory rings of %zu KiB", n,
              moon_dist_size_(d) - 1, bytes >> 10);
    return rings;
}

static moon_status_t ucx_open(moon_dist_t *d)
{
    uint32_t               size = moon_dist_size_(d);
    MPI_Comm               comm = *(MPI_Comm *)dist_mpi_comm(d);
    ucp_config_t          *config;
    ucp_params_t           params = {0};
    ucp_worker_params_t    wp     = {0};
    ucp_am_handler_param_t ap     = {0};
    ucp_address_t         *addr;
    size_t                 addr_len;
    int                    my_len, total = 0;
    ucs_status_t           s;
    ucx_t                 *u = moon_calloc(1, sizeof(*u));

    if (u == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    u->peers    = moon_calloc(size, sizeof(*u->peers));
    u->addr_len = moon_calloc(size, sizeof(int));
    u->addr_off = moon_calloc(size, sizeof(int));
    u->rkeys    = ucx_rkeys_create(RKEY_CACHE);
    if (u->peers == NULL || u->addr_len == NULL || u->addr_off == NULL || u->rkeys == NULL) {
        goto err_mem;
    }
    if ((s = ucp_config_read(NULL, NULL, &config)) != UCS_OK) {
        MOON_ERROR("ucp_config_read: %s", ucs_status_string(s));
        goto err_ucs;
    }
    params.field_mask        = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features          = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 1;
    s                        = ucp_init(&params, config, &u->ctx);
    ucp_config_release(config);
    if (s != UCS_OK) {
        MOON_ERROR("ucp_init: %s", ucs_status_string(s));
        goto err_ucs;
    }
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode =
        UCS_THREAD_MODE_SERIALIZED; /* the progress thread or an idle worker, under progress_lock */
    if ((s = ucp_worker_create(u->ctx, &wp, &u->worker)) != UCS_OK) {
        MOON_ERROR("ucp_worker_create: %s", ucs_status_string(s));
        goto err_ctx;
    }
    if ((s = ucp_worker_get_efd(u->worker, &u->efd)) != UCS_OK) {
        MOON_ERROR("ucp_worker_get_efd: %s", ucs_status_string(s));
        goto err_worker;
    }
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    ap.id    = AM_FRAME_ID;
    ap.cb    = am_frame_cb;
    ap.arg   = d;
    ap.flags = UCP_AM_FLAG_WHOLE_MSG;
    if ((s = ucp_worker_set_am_recv_handler(u->worker, &ap)) != UCS_OK) {
        MOON_ERROR("ucp_worker_set_am_recv_handler: %s", ucs_status_string(s));
        goto err_worker;
    }
    ap.id = AM_WAKE_ID;
    ap.cb = am_wake_cb;
    if ((s = ucp_worker_set_am_recv_handler(u->worker, &ap)) != UCS_OK) {
        MOON_ERROR("ucp_worker_set_am_recv_handler: %s", ucs_status_string(s));
        goto err_worker;
    }
    if ((s = ucp_worker_get_address(u->worker, &addr, &addr_len)) != UCS_OK) {
        MOON_ERROR("ucp_worker_get_address: %s", ucs_status_string(s));
        goto err_worker;
    }
    my_len = (int)addr_len;
    MPI_Allgather(&my_len, 1, MPI_INT, u->addr_len, 1, MPI_INT, comm);
    for (uint32_t r = 0; r < size; r++) {
        u->addr_off[r] = total;
        total += u->addr_len[r];
        u->peers[r] = (ucx_peer_t){.d = d, .rank = r};
    }
    u->addrs = moon_malloc((size_t)total);
    if (u->addrs == NULL) {
        ucp_worker_release_address(u->worker, addr);
        goto err_worker;
    }
    MPI_Allgatherv(addr, my_len, MPI_BYTE, u->addrs, u->addr_len, u->addr_off, MPI_BYTE, comm);
    ucp_worker_release_address(u->worker, addr);
    u->no_shm = tls_without_shm();
    u->rings  = rings_open(d, comm, u->no_shm);
    moon_dist_set_engine_ctx(d, u);
    return MOON_OK;

err_worker:
    ucp_worker_destroy(u->worker);
err_ctx:
    ucp_cleanup(u->ctx);
err_ucs:
err_mem:
    ucx_rkeys_destroy(u->rkeys);
    moon_free(u->addrs);
    moon_free(u->peers);
    moon_free(u->addr_len);
    moon_free(u->addr_off);
    moon_free(u);
    return MOON_ERR_IO;
}

static void ucx_close(moon_dist_t *d)
{
    ucx_t *u = U(d);

    if (u == NULL) {
        return;
    }
    ucx_rkeys_destroy(u->rkeys);
    u->rkeys = NULL;
    for (uint32_t r = 0; r < moon_dist_size_(d); r++) {
        drop_pending(d, &u->peers[r]);
        close_ep(d, &u->peers[r]);
    }
    shm_rings_close(u->rings);
    ucp_worker_destroy(u->worker);
    ucp_cleanup(u->ctx);
    moon_free(u->addrs);
    moon_free(u->peers);
    moon_free(u->addr_len);
    moon_free(u->addr_off);
    moon_free(u);
    moon_dist_set_engine_ctx(d, NULL);
}

static void ring_deliver(void *ctx, uint32_t from, const void *frame, size_t len)
{
    (void)from; /* the frame says who sent it */
    dist_on_frame(ctx, frame, len);
}

static int flush_pending(moon_dist_t *d);

static int ucx_progress(moon_dist_t *d)
{
    ucx_t *u = U(d);
    int    n = 0;

    if (u->rings != NULL) {
        int r;
        n += u->n_pend > 0 ? flush_pending(d) : 0;
        r = shm_rings_poll(u->rings, ring_deliver, d, 64);
        n += r;
        /* frames came in: hand them on first (their actors wait on this
         * pass); UCX's turn comes on the next pass, or the 8th busy one */
        if (r > 0 && (++u->ring_busy_passes & 7) != 0) {
            return n;
        }
    }
    n += (int)ucp_worker_progress(u->worker);

    n += ucx_rkeys_reap(u->rkeys); /* one forgotten key per call: see ucx_rkeys.h */
    if (MOON_UNLIKELY(u->n_close_pending > 0)) {
        for (uint32_t r = 0; r < moon_dist_size_(d); r++) {
            if (u->peers[r].close_pending) {
                u->peers[r].close_pending = 0;
                close_ep(d, &u->peers[r]);
            }
        }
        u->n_close_pending = 0;
    }
    return n;
}

static int ucx_event_fd(moon_dist_t *d)
{
    return U(d)->efd;
}

static int ucx_arm(moon_dist_t *d)
{
    ucx_t *u = U(d);

    if (u->n_pend > 0 || ucx_rkeys_reaping(u->rkeys) || ucp_worker_arm(u->worker) != UCS_OK) {
        return 0;
    }
    /* after the worker: a sender that finds us asleep wakes us through it */
    return u->rings == NULL || shm_rings_arm(u->rings);
}

static void ucx_disarm(moon_dist_t *d)
{
    if (U(d)->rings != NULL) {
        shm_rings_awake(U(d)->rings);
    }
}

static moon_status_t ucx_mem_map(moon_dist_t *d, void *addr, size_t len, void **memh_p,
                                 void **rkey_p, size_t *rkey_len_p)
{
    ucx_t               *u  = U(d);
    ucp_mem_map_params_t mp = {0};
    ucp_mem_h            memh;
    void                *rkey;
    size_t               rkey_len;
    ucs_status_t         s;

    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address    = addr;
    mp.length     = len;
    if ((s = ucp_mem_map(u->ctx, &mp, &memh)) != UCS_OK) {
        MOON_ERROR("ucp_mem_map of %zu bytes failed: %s", len, ucs_status_string(s));
        return from_ucs(s);
    }
    if ((s = ucp_rkey_pack(u->ctx, memh, &rkey, &rkey_len)) != UCS_OK) {
        MOON_ERROR("ucp_rkey_pack failed: %s", ucs_status_string(s));
        ucp_mem_unmap(u->ctx, memh);
        return from_ucs(s);
    }
    *memh_p     = memh;
    *rkey_p     = rkey;
    *rkey_len_p = rkey_len;
    return MOON_OK;
}

/* UCX allocates (UCP_MEM_MAP_ALLOCATE): with shared-memory transports the
 * memory is a sysv/posix segment that a peer on the same host maps, so its
 * puts and gets are plain copies into and out of the mapping. Registered heap
 * memory is reached through CMA only by UCX's rendezvous protocols: in UCX
 * 1.13 a ucp_put_nbx/ucp_get_nbx to it is emulated with active messages that
 * the target's progress has to copy, at a fraction of the bandwidth. */
static moon_status_t ucx_mem_alloc(moon_dist_t *d, size_t len, void **addr_p, void **memh_p,
                                   void **rkey_p, size_t *rkey_len_p)
{
    ucx_t               *u    = U(d);
    ucp_mem_map_params_t mp   = {0};
    ucp_mem_attr_t       attr = {0};
    ucp_mem_h            memh;
    ucs_status_t         s;

    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = NULL;
    mp.length  = len;
    mp.flags   = UCP_MEM_MAP_ALLOCATE;
    if ((s = ucp_mem_map(u->ctx, &mp, &memh)) != UCS_OK) {
        MOON_ERROR("ucp_mem_map (allocate) of %zu bytes failed: %s", len, ucs_status_string(s));
        return from_ucs(s);
    }
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    if ((s = ucp_mem_query(memh, &attr)) != UCS_OK ||
        (s = ucp_rkey_pack(u->ctx, memh, rkey_p, rkey_len_p)) != UCS_OK) {
        MOON_ERROR("registering %zu allocated bytes failed: %s", len, ucs_status_string(s));
        ucp_mem_unmap(u->ctx, memh);
        return from_ucs(s);
    }
    *addr_p = attr.address;
    *memh_p = memh;
    return MOON_OK;
}

static void ucx_mem_unmap(moon_dist_t *d, void *memh, void *rkey)
{
    ucx_t *u = U(d);

    if (rkey != NULL) {
        ucp_rkey_buffer_release(rkey);
    }
    if (memh != NULL) {
        ucp_mem_unmap(u->ctx, memh);
    }
}

/* Slices and flushes complete into their op (which knows its dist). */
static void rma_done(void *req, ucs_status_t status, void *user_data)
{
    bulk_op_t *op = user_data;

    dist_bulk_slice_done(op->d, op, 0, from_ucs(status));
    ucp_request_free(req);
}

static ucp_request_param_t rma_param(bulk_op_t *op)
{
    ucp_request_param_t rp = {0};

    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.send      = rma_done;
    rp.user_data    = op;
    return rp;
}

/* What the engine says of a request just posted: done at once, failed, or
 * in flight (then rma_done comes later). */
static void rma_posted(moon_dist_t *d, bulk_op_t *op, size_t n, ucs_status_ptr_t sp)
{
    if (sp == NULL) {
        dist_bulk_slice_done(d, op, n, MOON_OK);
    } else if (UCS_PTR_IS_ERR(sp)) {
        dist_bulk_slice_done(d, op, n, from_ucs(UCS_PTR_STATUS(sp)));
    }
}

static moon_status_t ucx_rma(moon_dist_t *d, bulk_op_t *op, size_t off, size_t n)
{
    ucp_ep_h            ep = get_bulk_ep(d, op->peer);
    ucp_request_param_t rp;
    ucs_status_ptr_t    sp;

    if (ep == NULL) {
        return MOON_ERR_PEER_LOST;
    }
    if (op->eng_rkey == NULL) {
        int          fresh;
        ucs_status_t s = ucx_rkeys_acquire(U(d)->rkeys, ep, op->peer, op->region_id, op->rkey,
                                           op->rkey_len, (ucx_rkey_ref_t **)&op->eng_rkey, &fresh);
        if (s != UCS_OK) {
            MOON_ERROR("ucp_ep_rkey_unpack from rank %u failed: %s", op->peer,
                       ucs_status_string(s));
            op->eng_rkey = NULL;
            return MOON_ERR_INVALID_PARAM;
        }
        if (fresh) {
            void *base;
            /* the peer's memory is mapped here (shared memory): a large
             * mapping leaves off the lock when the key goes */
            if (ucp_rkey_ptr(ucx_rkeys_handle(op->eng_rkey), op->region_addr, &base) == UCS_OK) {
                ucx_rkeys_set_mapping(op->eng_rkey, base, op->region_len);
                if (op->stream) { /* a streaming region (an arena) is touched all over: map it in
                                     now */
                    ucx_rkeys_populate(op->eng_rkey, base, op->region_len);
                }
            }
        }
    }
    if (op->stream && n >= STREAM_MIN && (op->is_put || op->len >= STREAM_GET_MIN)) {
        /* the peer's memory is mapped here (shared memory) and the region's
         * owner asked for streaming writes: copy it ourselves with streaming
         * stores, which UCX's own copy does not use; a get that large streams
         * into the local buffer too (it would not stay in cache anyway) */
        void *rem;
        if (ucp_rkey_ptr(ucx_rkeys_handle(op->eng_rkey), op->remote_addr + off, &rem) == UCS_OK) {
            if (op->is_put) {
                moon_copy_stream(rem, op->local + off, n);
            } else {
                moon_copy_stream(op->local + off, rem, n);
            }
            dist_bulk_slice_done(d, op, n, MOON_OK);
            return MOON_OK;
        }
    }
    rp = rma_param(op);
    if (op->local_memh != NULL) {
        rp.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        rp.memh = op->local_memh;
    }
    if (op->is_put) {
        sp = ucp_put_nbx(ep, op->local + off, n, op->remote_addr + off,
                         ucx_rkeys_handle(op->eng_rkey), &rp);
    } else {
        sp = ucp_get_nbx(ep, op->local + off, n, op->remote_addr + off,
                         ucx_rkeys_handle(op->eng_rkey), &rp);
    }
    rma_posted(d, op, n, sp);
    return MOON_OK;
}

static moon_status_t ucx_flush(moon_dist_t *d, bulk_op_t *op)
{
    ucp_ep_h            ep = get_bulk_ep(d, op->peer);
    ucp_request_param_t rp = rma_param(op);

    if (ep == NULL) {
        return MOON_ERR_PEER_LOST;
    }
    rma_posted(d, op, 0, ucp_ep_flush_nbx(ep, &rp));
    return MOON_OK;
}

static void ucx_bulk_release(moon_dist_t *d, bulk_op_t *op)
{
    if (op->eng_rkey != NULL) {
        ucx_rkeys_release(U(d)->rkeys, op->eng_rkey);
        op->eng_rkey = NULL;
    }
}

static int ucx_region_gone(moon_dist_t *d, uint32_t peer, uint64_t region_id)
{
    return ucx_rkeys_forget(U(d)->rkeys, peer, region_id);
}

static void ucx_peer_lost(moon_dist_t *d, uint32_t r)
{
    ucx_t *u = U(d);

    /* may run inside a UCX error callback: no UCX calls here */
    u->peers[r].failed = 1;
    shm_rings_forget(u->rings, r);
    drop_pending(d, &u->peers[r]);
    if ((u->peers[r].ep != NULL || u->peers[r].bulk_ep != NULL) && !u->peers[r].close_pending) {
        u->peers[r].close_pending = 1;
        u->n_close_pending++;
    }
}

/* Frame sends: the buffer (which knows its dist) is the callback's argument. */
static void frame_sent(void *req, ucs_status_t status, void *user_data)
{
    dist_buf_t *buf = user_data;

    dist_frame_done(buf->d, buf, from_ucs(status));
    ucp_request_free(req);
}

/* ---- frames through the rings ------------------------------------------- */
static void wake_sent(void *req, ucs_status_t status, void *user_data)
{
    (void)status;
    ((ucx_peer_t *)user_data)->wake_pending = 0;
    ucp_request_free(req);
}

/* Bytes went into the ring to p: wake p if it sleeps. One wake-up at a time
 * per peer: they ride UCX's shared FIFO, which a rank killed mid-send can
 * leave stuck, and must not pile up behind it (a receiver not woken still
 * looks at its rings every millisecond). No endpoint is created for a peer
 * that failed. */
static void ring_written(moon_dist_t *d, ucx_peer_t *p)
{
    ucp_request_param_t rp = {0};
    ucs_status_ptr_t    sp;
    ucp_ep_h            ep;

    if (p->wake_pending || p->failed || !shm_rings_peer_asleep(U(d)->rings, p->rank) ||
        (ep = get_ep(d, p->rank)) == NULL) {
        return;
    }
    rp.op_attr_mask =
        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.flags        = UCP_AM_SEND_FLAG_EAGER;
    rp.cb.send      = wake_sent;
    rp.user_data    = p;
    sp              = ucp_am_send_nbx(ep, AM_WAKE_ID, NULL, 0, NULL, 0, &rp);
    p->wake_pending = UCS_PTR_IS_PTR(sp); /* wake_sent clears it */
}

/* Writes what waits for p while there is room, in order; frames done. */
static int flush_peer(moon_dist_t *d, ucx_peer_t *p)
{
    int n = 0;

    while (p->pend != NULL) {
        dist_buf_t *b    = p->pend;
        size_t      from = p->pend_off;

        if (!shm_rings_write(U(d)->rings, p->rank, b->data, b->len, &p->pend_off)) {
            if (p->pend_off != from) {
                ring_written(d, p); /* a part of a big frame: the reader makes room */
            }
            break;
        }
        p->pend     = b->next;
        p->pend_off = 0;
        dist_frame_done(d, b, MOON_OK);
        ring_written(d, p);
        n++;
    }
    if (p->pend == NULL) {
        p->pend_last = NULL;
        U(d)->n_pend--;
    }
    return n;
}

static int flush_pending(moon_dist_t *d)
{
    ucx_t *u = U(d);
    int    n = 0;

    for (uint32_t r = 0; r < moon_dist_size_(d) && u->n_pend > 0; r++) {
        if (u->peers[r].pend != NULL) {
            n += flush_peer(d, &u->peers[r]);
        }
    }
    return n;
}

/* The peer is gone (or the engine closes): what waited for it is dropped. */
static void drop_pending(moon_dist_t *d, ucx_peer_t *p)
{
    if (p->pend == NULL) {
        return;
    }
    while (p->pend != NULL) {
        dist_buf_t *b = p->pend;
        p->pend       = b->next;
        dist_frame_done(d, b, MOON_ERR_CANCELED); /* not a peer status: nobody declared lost */
    }
    p->pend_last = NULL;
    p->pend_off  = 0;
    U(d)->n_pend--;
}

/* Into the ring to b's peer, or behind what already waits for room there. */
static moon_status_t ring_send(moon_dist_t *d, dist_buf_t *b)
{
    ucx_t      *u   = U(d);
    ucx_peer_t *p   = &u->peers[b->peer];
    size_t      off = 0;

    /* not p->failed: an endpoint made only for wake-ups is no frame path,
     * and a dead peer is found by its silence */
    if (p->pend == NULL && shm_rings_write(u->rings, b->peer, b->data, b->len, &off)) {
        dist_frame_done(d, b, MOON_OK);
        ring_written(d, p);
        return MOON_OK;
    }
    if (off > 0) {
        ring_written(d, p); /* a part of a big frame: the reader makes room */
    }
    b->next = NULL;
    if (p->pend == NULL) {
        p->pend     = b;
        p->pend_off = off; /* a big frame may be partly in */
        u->n_pend++;
    } else {
        p->pend_last->next = b;
    }
    p->pend_last = b;
    return MOON_OK;
}

/* In place in the ring to peer, when nothing waits for room there. */
static void *ucx_frame_reserve(moon_dist_t *d, uint32_t peer, size_t max)
{
    ucx_t *u = U(d);

    return u->rings != NULL && u->peers[peer].pend == NULL ? shm_rings_reserve(u->rings, peer, max)
                                                           : NULL;
}

static void ucx_frame_commit(moon_dist_t *d, uint32_t peer, size_t len)
{
    shm_rings_commit(U(d)->rings, peer, len);
    ring_written(d, &U(d)->peers[peer]);
}

static moon_status_t ucx_send_frame(moon_dist_t *d, dist_buf_t *buf)
{
    if (U(d)->rings != NULL && shm_rings_reaches(U(d)->rings, buf->peer)) {
        return ring_send(d, buf);
    }

    ucp_ep_h            ep = get_ep(d, buf->peer);
    ucp_request_param_t rp = {0};
    ucs_status_ptr_t    sp;

    if (ep == NULL) {
        return MOON_ERR_PEER_LOST;
    }
    rp.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    rp.cb.send   = frame_sent;
    rp.user_data = buf;
    rp.flags     = UCP_AM_SEND_FLAG_EAGER;
    sp           = ucp_am_send_nbx(ep, AM_FRAME_ID, NULL, 0, buf->data, buf->len, &rp);
    if (sp == NULL) {
        dist_frame_done(d, buf, MOON_OK);
    } else if (UCS_PTR_IS_ERR(sp)) {
        dist_frame_done(d, buf, from_ucs(UCS_PTR_STATUS(sp)));
    }
    return MOON_OK;
}

const dist_engine_ops_t moon_dist_engine_ucx = {
    .name          = "ucx",
    .open          = ucx_open,
    .close         = ucx_close,
    .send_frame    = ucx_send_frame,
    .frame_reserve = ucx_frame_reserve,
    .frame_commit  = ucx_frame_commit,
    .progress      = ucx_progress,
    .event_fd      = ucx_event_fd,
    .arm           = ucx_arm,
    .disarm        = ucx_disarm,
    .mem_map       = ucx_mem_map,
    .mem_unmap     = ucx_mem_unmap,
    .mem_alloc     = ucx_mem_alloc,
    .slice_bytes   = ucx_slice_bytes,
    .region_gone   = ucx_region_gone,
    .rma           = ucx_rma,
    .flush         = ucx_flush,
    .bulk_release  = ucx_bulk_release,
    .peer_lost     = ucx_peer_lost,
};
