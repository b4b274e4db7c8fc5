/* runtime/dist.c - the distributed runtime above the wire: MPI bootstrap, the
 * transport ops attached to the runtime, per-peer send queues with batching
 * and credit windows, the progress thread, heartbeats and peer loss, the name
 * registry (rank 0), remote monitors/links, bulk-op slicing and tracing.
 *
 * Threads: senders (any thread) push messages into a per-peer lock-free MPSC
 * queue (the mailbox type) and mark the peer ready; the one progress thread
 * drains ready peers into frames (up to batch_bytes of records each), hands
 * frames to the engine, drives the engine, decodes what arrives and delivers
 * it with moon_runtime_deliver_remote(). Everything named p->... without an
 * atomic is touched by the progress thread only.
 *
 * Credits: a sender may have `credits` messages of a peer not yet returned;
 * the receiver returns them (piggybacked on its frames or in a CREDIT frame)
 * once delivered, and withholds them while the target actor is overloaded, so
 * a flooding sender never grows the receiver beyond its mailbox bound plus one
 * window. Senders whose peer queue passes one window are muted (Pony-style)
 * on a per-peer gate until the queue drains to half a window. */
#define _GNU_SOURCE
#include "dist_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <mpi.h>

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

MOON_MSG_DEFINE(MOON_DIST_MSGS, moon_dist_msg_descs)

/* ---- wire format ---------------------------------------------------------- */
#define FRAME_MAGIC 0x4d44u /* "MD" */
enum {
    FRAME_BATCH     = 1, /* records */
    FRAME_CREDIT    = 2, /* credits only */
    FRAME_HEARTBEAT = 3,
    FRAME_GOODBYE   = 4,
};

typedef struct {
    uint16_t magic;
    uint8_t  kind;
    uint8_t  pad;
    uint32_t src_rank;
    uint32_t credits;   /* returned to the receiver of this frame */
    uint32_t n_records;
} frame_hdr_t;
_Static_assert(sizeof(frame_hdr_t) == 16, "frame header size changed");

typedef struct {
    uint64_t to, src, seq;
    uint32_t type, len;
} rec_hdr_t;
_Static_assert(sizeof(rec_hdr_t) == 32, "record header size changed");

enum { NAME_OP_REGISTER = 1, NAME_OP_QUERY = 2 };

#define DESC_MAGIC 0x4d524547u /* "MREG" */
typedef struct {
    uint32_t magic, rank;
    uint64_t addr, len;
    uint32_t rkey_len, pad;
} region_desc_t;
_Static_assert(sizeof(region_desc_t) == 32, "region descriptor size changed");

/* ---- state ---------------------------------------------------------------- */
#define SPIN_PASSES     256 /* idle passes (yielding after the first few) before sleeping */
#define TICK_NS         (5 * 1000 * 1000ull)
#define MAX_PER_PEER    512 /* messages per peer per pass: control stays interleaved */
#define SLICES_INFLIGHT 4
#define SLICES_PER_PASS 2
#define BUF_POOL_MAX    64

typedef struct {
    moon_mailbox_t   q;              /* outgoing messages (env->dst = address) */
    _Atomic uint32_t queued;         /* pushed, not yet framed */
    _Atomic int      down;
    moon_actor_t    *gate;           /* senders muted while the queue is long */
    uint32_t         credits;        /* sender side: messages we may still send */
    int              stalled;        /* queue non-empty, no credits */
    uint32_t         owed;           /* receiver side: credits to return */
    uint32_t         held;           /* withheld while held_addr is overloaded */
    moon_addr_t      held_addr;
    _Atomic int      goodbye;        /* peer said goodbye: silence is fine (read by stop) */
    uint64_t         last_rx_ns, last_tx_ns;
} dist_peer_t;

typedef struct monitor_rec {
    moon_addr_t watcher, target;
    uint64_t    ref;
    int         is_link;
} monitor_rec_t;

typedef struct name_rec {
    struct name_rec *next;
    moon_addr_t      addr;
    char             name[];
} name_rec_t;

typedef struct waiter {
    struct waiter *next;
    uint64_t       cookie;
    int            done;
    moon_status_t  status;
    moon_addr_t    addr;
} waiter_t;

struct moon_dist_region {
    uint32_t rank; /* the registering process */
    void  *addr;
    size_t len;
    void  *memh;
    void  *rkey;
    size_t rkey_len;
    int    heap; /* addr is ours, from the heap: freed with the region */
};

struct moon_dist {
    moon_dist_config_t       cfg;
    uint32_t                 rank, size;
    int                      mpi_ours;   /* we called MPI_Init_thread */
    int                      use_mpi;
    MPI_Comm                 comm;
    const dist_engine_ops_t *eng;
    void                    *eng_ctx;
    moon_runtime_t          *rt;
    dist_peer_t             *peers;
    int                      started;

    /* progress thread; idle workers run the same passes (worker_poll) */
    pthread_t        thread;
    _Atomic int      progress_busy; /* held for a pass: the progress state below */
    _Atomic int      worker_polled;  /* an idle worker ran a pass since the last look */
    _Atomic int      napping;        /* progress thread defers to polling workers */
    _Atomic int      stop_req;
    _Atomic int      sleeping;
    int              wake_fd;
    _Atomic uint64_t *ready;   /* one bit per peer */
    uint32_t         n_ready_words;
    dist_buf_t      *buf_pool;
    uint32_t         n_pool;
    uint64_t         next_tick_ns, last_tick_ns;
    _Atomic uint64_t hb_ns;          /* set by moon_dist_stop while progress runs */
    uint32_t         spin_passes; /* idle passes before sleeping (env MOON_DIST_SPIN) */
    _Atomic int      saying_goodbye;

    /* commands from other threads: bulk ops, raw frames */
    pthread_mutex_t  cmd_lock;
    bulk_op_t       *cmd_bulk;
    dist_buf_t      *cmd_raw;
    _Atomic int      cmd_pending;
    bulk_op_t       *active;   /* progress thread */
    uint32_t         n_held;   /* peers with withheld credits */
    moon_addr_t      tgt_addr; /* last target: deliveries (all peers) vs. its progress */
    uint64_t         tgt_base, tgt_delivered;
    uint32_t         n_open;   /* active ops not yet finished */
    uint64_t         next_op_id;

    /* remote monitors and links, name registry, waiters */
    pthread_mutex_t  lock;
    monitor_rec_t   *mons;
    uint32_t         n_mons, cap_mons;
    moon_addr_t     *watchers;
    uint32_t         n_watchers, cap_watchers;
    name_rec_t      *names;    /* rank 0: the registry */
    waiter_t        *waiters;
    uint64_t         next_cookie;
    pthread_cond_t   cond;
    _Atomic uint64_t any_down;

    FILE            *trace;
    _Atomic int      logged_bad_frame, logged_bad_msg, logged_stale;

    struct {
        _Atomic uint64_t sent, received, frames_sent, frames_received, bad_frames, bad_msgs, stale,
            credit_stalls, gate_mutes, peers_lost, bulk_done, bulk_bytes;
    } st;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The clock of heartbeats and peer timeouts: stamped on every frame sent and
 * received, so it must be cheap; the coarse clock (a few ms of resolution)
 * is plenty for a 2 s timeout and costs a plain load instead of a timer read. */
static uint64_t peer_clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- accessors for engines ------------------------------------------------ */
void *moon_dist_engine_ctx(moon_dist_t *d)
{
    return d->eng_ctx;
}
void moon_dist_set_engine_ctx(moon_dist_t *d, void *ctx)
{
    d->eng_ctx = ctx;
}
uint32_t moon_dist_rank_(const moon_dist_t *d)
{
    return d->rank;
}
uint32_t moon_dist_size_(const moon_dist_t *d)
{
    return d->size;
}
void *dist_mpi_comm(moon_dist_t *d)
{
    return &d->comm;
}

uint32_t moon_dist_rank(const moon_dist_t *d)
{
    return d->rank;
}
uint32_t moon_dist_size(const moon_dist_t *d)
{
    return d->size;
}
const char *moon_dist_engine(const moon_dist_t *d)
{
    return d->eng != NULL ? d->eng->name : "none";
}

int moon_dist_peer_alive(moon_dist_t *d, uint32_t r)
{
    if (r >= d->size) {
        return 0;
    }
    return r == d->rank || d->peers == NULL || !atomic_load(&d->peers[r].down);
}

void moon_dist_stats(moon_dist_t *d, moon_dist_stats_t *s)
{
    s->n_sent            = atomic_load(&d->st.sent);
    s->n_received        = atomic_load(&d->st.received);
    s->n_frames_sent     = atomic_load(&d->st.frames_sent);
    s->n_frames_received = atomic_load(&d->st.frames_received);
    s->n_bad_frames      = atomic_load(&d->st.bad_frames);
    s->n_bad_msgs        = atomic_load(&d->st.bad_msgs);
    s->n_stale           = atomic_load(&d->st.stale);
    s->n_credit_stalls   = atomic_load(&d->st.credit_stalls);
    s->n_gate_mutes      = atomic_load(&d->st.gate_mutes);
    s->n_peers_lost      = atomic_load(&d->st.peers_lost);
    s->n_bulk_done       = atomic_load(&d->st.bulk_done);
    s->bulk_bytes        = atomic_load(&d->st.bulk_bytes);
}

/* ---- config, init --------------------------------------------------------- */
void moon_dist_config_default(moon_dist_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->credits         = 1024;
    cfg->batch_bytes     = 16 << 10;
    cfg->peer_timeout_ns = 2000000000ull;
    cfg->slice_bytes     = 0; /* the engine's choice */
}

static int launched_by_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL ||
           getenv("PMIX_RANK") != NULL || getenv("MPI_LOCALNRANKS") != NULL;
}

moon_status_t moon_dist_init(int *argc, char ***argv, const moon_dist_config_t *cfg,
                             moon_dist_t **dist_p)
{
    moon_dist_t *d;
    int          inited = 0, provided = 0, rank = 0, size = 1;
    const char  *env;
    moon_status_t status;

    status = moon_msg_register(moon_dist_msg_descs);
    if (status != MOON_OK) {
        return status;
    }
    d = moon_calloc(1, sizeof(*d));
    if (d == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    if (cfg != NULL) {
        d->cfg = *cfg;
    } else {
        moon_dist_config_default(&d->cfg);
    }
    if (d->cfg.credits < 4) {
        d->cfg.credits = 4;
    }
    if (d->cfg.batch_bytes < 1024) {
        d->cfg.batch_bytes = 1024;
    }
    if ((env = getenv("MOON_SLICE_BYTES")) != NULL && atol(env) > 0) {
        d->cfg.slice_bytes = (uint64_t)atol(env);
    }
    if (d->cfg.slice_bytes != 0 && d->cfg.slice_bytes < 4096) {
        d->cfg.slice_bytes = 4096;
    }
    if ((env = getenv("MOON_PEER_TIMEOUT_MS")) != NULL && atol(env) > 0) {
        d->cfg.peer_timeout_ns = (uint64_t)atol(env) * 1000000ull;
    }
    if (d->cfg.peer_timeout_ns == 0) {
        d->cfg.peer_timeout_ns = 2000000000ull;
    }
    MPI_Initialized(&inited);
    if (inited || launched_by_mpi()) {
        if (!inited) {
            if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
                MOON_ERROR("MPI_Init_thread failed");
                moon_free(d);
                return MOON_ERR_IO;
            }
            d->mpi_ours = 1;
        } else {
            MPI_Query_thread(&provided);
        }
        if (provided < MPI_THREAD_SERIALIZED) {
            MOON_ERROR("MPI provides thread level %d, need at least SERIALIZED", provided);
            if (d->mpi_ours) {
                MPI_Finalize();
            }
            moon_free(d);
            return MOON_ERR_UNSUPPORTED;
        }
        MPI_Comm_dup(MPI_COMM_WORLD, &d->comm);
        MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(d->comm, &rank);
        MPI_Comm_size(d->comm, &size);
        d->use_mpi = 1;
        if (provided < MPI_THREAD_MULTIPLE) {
            d->use_mpi = 2; /* no MPI engine: it needs MULTIPLE */
        }
    }
    d->rank = (uint32_t)rank;
    d->size = (uint32_t)size;
    moon_log_set_rank(rank);
    *dist_p = d;
    return MOON_OK;
}

/* MPI_Barrier that sleeps instead of spinning: the main thread must not
 * take a core from the workers and the progress thread while it waits. */
static void sleepy_barrier(moon_dist_t *d)
{
    MPI_Request req;
    int         done = 0;

    if (!d->use_mpi) {
        return;
    }
    if (MPI_Ibarrier(d->comm, &req) != MPI_SUCCESS) {
        MPI_Barrier(d->comm);
        return;
    }
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
        usleep(100);
    }
}

/* 1 when everything this rank sent has been delivered at the peers (their
 * credits came back) or the peer is gone. */
static int all_delivered(moon_dist_t *d)
{
    for (uint32_t r = 0; d->peers != NULL && r < d->size; r++) {
        dist_peer_t *p = &d->peers[r];
        if (r != d->rank && !atomic_load(&p->down) &&
            (atomic_load(&p->queued) > 0 ||
             __atomic_load_n(&p->credits, __ATOMIC_RELAXED) < d->cfg.credits)) {
            return 0;
        }
    }
    return 1;
}

void moon_dist_barrier(moon_dist_t *d)
{
    uint64_t deadline = now_ns() + 10000000000ull;

    /* what was sent before the barrier is delivered before anyone leaves it */
    while (d->eng != NULL && !all_delivered(d) && now_ns() < deadline) {
        usleep(200);
    }
    sleepy_barrier(d);
}

/* ---- buffers -------------------------------------------------------------- */
static dist_buf_t *buf_get(moon_dist_t *d, uint32_t peer, size_t need)
{
    dist_buf_t *b;

    if (need <= d->cfg.batch_bytes && d->buf_pool != NULL) {
        b           = d->buf_pool;
        d->buf_pool = b->next;
        d->n_pool--;
    } else {
        size_t cap = MOON_MAX(need, (size_t)d->cfg.batch_bytes);
        b          = moon_malloc(sizeof(*b) + cap);
        if (b == NULL) {
            return NULL;
        }
        b->cap = (uint32_t)cap;
        b->big = cap > d->cfg.batch_bytes;
    }
    b->next = NULL;
    b->d    = d;
    b->len  = 0;
    b->peer = peer;
    return b;
}

static void buf_put(moon_dist_t *d, dist_buf_t *b)
{
    if (b->big || d->n_pool >= BUF_POOL_MAX) {
        moon_free(b);
        return;
    }
    b->next     = d->buf_pool;
    d->buf_pool = b;
    d->n_pool++;
}

void dist_frame_done(moon_dist_t *d, dist_buf_t *buf, moon_status_t status)
{
    if (status != MOON_OK && moon_status_is_peer(status)) {
        dist_peer_failed(d, buf->peer, status);
    }
    buf_put(d, buf);
}

static void frame_begin(moon_dist_t *d, dist_buf_t *b, uint32_t kind)
{
    frame_hdr_t h = {FRAME_MAGIC, (uint8_t)kind, 0, d->rank, 0, 0};

    memcpy(b->data, &h, sizeof(h));
    b->len = sizeof(h);
}

/* Sends b (header filled, records counted); piggybacks owed credits. */
static void frame_send(moon_dist_t *d, dist_buf_t *b, uint32_t n_records)
{
    dist_peer_t  *p = &d->peers[b->peer];
    frame_hdr_t  *h = (frame_hdr_t *)b->data;
    moon_status_t status;

    if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
        buf_put(d, b);
        return;
    }
    h->credits   = p->owed;
    h->n_records = n_records;
    p->owed      = 0;
    p->last_tx_ns = peer_clock_ns();
    atomic_fetch_add_explicit(&d->st.frames_sent, 1, memory_order_relaxed);
    status = d->eng->send_frame(d, b);
    if (status != MOON_OK) {
        /* the engine did not take it */
        if (moon_status_is_peer(status)) {
            dist_peer_failed(d, b->peer, status);
        }
        buf_put(d, b);
    }
}

static void send_small_frame(moon_dist_t *d, uint32_t r, uint32_t kind)
{
    dist_buf_t *b = buf_get(d, r, sizeof(frame_hdr_t));

    if (b == NULL) {
        return;
    }
    frame_begin(d, b, kind);
    frame_send(d, b, 0);
}

moon_status_t dist_send_engine_frame(moon_dist_t *d, uint32_t r, uint32_t kind, const void *body,
                                     size_t len)
{
    dist_buf_t *b = buf_get(d, r, sizeof(frame_hdr_t) + len);

    if (b == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    frame_begin(d, b, kind);
    memcpy(b->data + b->len, body, len);
    b->len += (uint32_t)len;
    frame_send(d, b, 0);
    return MOON_OK;
}

/* ---- wake-ups ------------------------------------------------------------- */
static void wake(moon_dist_t *d)
{
    uint64_t one = 1;

    /* seq_cst: pairs with the store of `sleeping` and the re-check of the
     * queues before the progress thread sleeps (Dekker). */
    if (atomic_load(&d->sleeping)) {
        ssize_t ret = write(d->wake_fd, &one, sizeof(one));
        (void)ret;
    }
}

static void mark_ready(moon_dist_t *d, uint32_t r)
{
    atomic_fetch_or(&d->ready[r / 64], 1ull << (r % 64));
}

/* ---- trace ---------------------------------------------------------------- */
static void trace_msg(moon_dist_t *d, const char *dir, moon_addr_t to, const moon_msg_hdr_t *m,
                      uint64_t src, uint64_t seq, uint32_t type)
{
    (void)m;
    fprintf(d->trace, "%s %llu %llx %llx %s %llu\n", dir, (unsigned long long)seq,
            (unsigned long long)src, (unsigned long long)to, moon_msg_name(type),
            (unsigned long long)now_ns());
}

/* ---- remote monitors and links -------------------------------------------- */
static void mons_add(moon_dist_t *d, moon_addr_t watcher, moon_addr_t target, uint64_t ref,
                     int is_link)
{
    pthread_mutex_lock(&d->lock);
    if (d->n_mons == d->cap_mons) {
        uint32_t       cap = d->cap_mons ? d->cap_mons * 2 : 16;
        monitor_rec_t *m   = moon_realloc(d->mons, cap * sizeof(*m));
        if (m == NULL) {
            pthread_mutex_unlock(&d->lock);
            MOON_ERROR("no memory to track a remote monitor");
            return;
        }
        d->mons     = m;
        d->cap_mons = cap;
    }
    d->mons[d->n_mons++] = (monitor_rec_t){watcher, target, ref, is_link};
    pthread_mutex_unlock(&d->lock);
}

static void mons_remove(moon_dist_t *d, moon_addr_t watcher, moon_addr_t target, int is_link)
{
    pthread_mutex_lock(&d->lock);
    for (uint32_t i = 0; i < d->n_mons; i++) {
        if (d->mons[i].watcher == watcher && d->mons[i].target == target &&
            d->mons[i].is_link == is_link) {
            d->mons[i] = d->mons[--d->n_mons];
            i--;
        }
    }
    pthread_mutex_unlock(&d->lock);
}

/* Outgoing system messages that set up a remote watch. */
static void note_sys_tx(moon_dist_t *d, moon_addr_t to, const moon_msg_hdr_t *msg)
{
    if (msg->src == MOON_ADDR_NONE) {
        return;
    }
    if (msg->type == MOON_MSG_SYS_MONITOR) {
        mons_add(d, msg->src, to, ((const moon_sys_monitor_t *)msg)->ref, 0);
    } else if (msg->type == MOON_MSG_SYS_LINK) {
        if (((const moon_sys_link_t *)msg)->unlink) {
            mons_remove(d, msg->src, to, 1);
        } else {
            mons_add(d, msg->src, to, 0, 1);
        }
    }
}

/* Incoming system messages that set up or end a remote watch. */
static void note_sys_rx(moon_dist_t *d, moon_addr_t to, const moon_msg_hdr_t *msg)
{
    switch (msg->type) {
    case MOON_MSG_SYS_LINK:
        if (((const moon_sys_link_t *)msg)->unlink) {
            mons_remove(d, to, msg->src, 1);
        } else {
            mons_add(d, to, msg->src, 0, 1);
        }
        break;
    case MOON_MSG_SYS_DOWN:
        mons_remove(d, to, ((const moon_sys_down_t *)msg)->actor, 0);
        break;
    case MOON_MSG_SYS_EXIT:
        mons_remove(d, to, ((const moon_sys_exit_t *)msg)->actor, 1);
        break;
    default:
        break;
    }
}

/* ---- the transport seam ---------------------------------------------------- */
/* Mutes the sending actor (the one whose turn is running this send) on the
 * peer's gate, as actor.c does for an overloaded local receiver. */
static void gate_close(moon_dist_t *d, dist_peer_t *p, const moon_msg_hdr_t *msg)
{
    moon_actor_t *s;

    if (msg->src == MOON_ADDR_NONE || (msg->flags & MOON_MSG_F_SYSTEM) ||
        moon_addr_rank(msg->src) != d->rank) {
        return;
    }
    s = moon_rt_lookup(d->rt, msg->src);
    if (s == NULL || (s->flags & MOON_SPAWN_CONTROL) ||
        atomic_load_explicit(&s->overloaded, memory_order_relaxed) || s->mute_on != NULL) {
        return;
    }
    atomic_store_explicit(&p->gate->overloaded, 1, memory_order_relaxed);
    s->mute_on = p->gate;
    atomic_fetch_add_explicit(&d->st.gate_mutes, 1, memory_order_relaxed);
}

/* Reopens a gate: the senders muted on it run again (actor.c unmute_all). */
static void gate_open(dist_peer_t *p)
{
    moon_actor_t *g = p->gate, *list;

    pthread_mutex_lock(&g->mute_lock);
    atomic_store_explicit(&g->overloaded, 0, memory_order_relaxed);
    list          = g->muted_head;
    g->muted_head = NULL;
    pthread_mutex_unlock(&g->mute_lock);
    while (list != NULL) {
        moon_actor_t *s = list;
        list            = s->mute_next;
        s->mute_next    = NULL;
        g->rt->exec->schedule(g->rt, s);
    }
}

/* Queues msg for rank r; ownership moves to the queue. */
static void enqueue(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_msg_hdr_t *msg)
{
    dist_peer_t *p = &d->peers[r];

    moon_msg_env(msg)->dst = to;
    atomic_fetch_add_explicit(&p->queued, 1, memory_order_relaxed);
    if (moon_mailbox_push(&p->q, moon_msg_env(msg))) {
        mark_ready(d, r);
        wake(d);
    }
}

static moon_status_t dist_send(void *ctx, moon_addr_t to, moon_msg_hdr_t *msg)
{
    moon_dist_t *d = ctx;
    uint32_t     r = moon_addr_rank(to);
    dist_peer_t *p;

    if (MOON_UNLIKELY(r >= d->size || r == d->rank)) {
        return MOON_ERR_NO_ACTOR;
    }
    p = &d->peers[r];
    if (MOON_UNLIKELY(atomic_load_explicit(&p->down, memory_order_relaxed))) {
        return MOON_ERR_PEER_LOST;
    }
    if (MOON_UNLIKELY(msg->type < MOON_MSG_SYS_END)) {
        note_sys_tx(d, to, msg);
    }
    enqueue(d, r, to, msg);
    if (MOON_UNLIKELY(atomic_load_explicit(&p->queued, memory_order_relaxed) >
                      d->cfg.credits)) {
        gate_close(d, p, msg);
    }
    return MOON_OK;
}

static const moon_transport_ops_t dist_transport_ops = {"dist", dist_send};

/* A runtime message from the transport itself (src NONE or given). */
static void send_error_reply(moon_dist_t *d, uint32_t r, const rec_hdr_t *rec,
                             moon_status_t status)
{
    moon_sys_error_t *e;

    if (rec->src == MOON_ADDR_NONE || moon_addr_rank(rec->src) != r ||
        rec->type == MOON_MSG_SYS_ERROR || atomic_load(&d->peers[r].down)) {
        return;
    }
    e = moon_msg_new(MOON_MSG_SYS_ERROR, 0);
    if (e == NULL) {
        return;
    }
    e->orig_type = rec->type;
    e->status    = status;
    e->orig_seq  = rec->seq;
    e->hdr.src   = rec->to;
    e->hdr.flags = MOON_MSG_F_SYSTEM;
    enqueue(d, r, rec->src, &e->hdr);
}

/* ---- sending: drain ready peers into frames ------------------------------- */
static int drain_peer(moon_dist_t *d, uint32_t r)
{
    dist_peer_t *p     = &d->peers[r];
    dist_buf_t  *b     = NULL;
    uint32_t     n_rec = 0, n = 0;
    int          empty = 0;

    if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
        return 0;
    }
    while (n < MAX_PER_PEER) {
        moon_msg_env_t *env;
        moon_msg_hdr_t *msg;
        size_t          need, len = 0;
        rec_hdr_t       rec;

        if (p->credits == 0) {
            if (!p->stalled) {
                p->stalled = 1;
                atomic_fetch_add_explicit(&d->st.credit_stalls, 1, memory_order_relaxed);
            }
            break;
        }
        env = moon_mailbox_pop(&p->q);
        if (env == NULL) {
            empty = 1;
            break;
        }
        msg  = moon_env_msg(env);
        need = sizeof(rec) + moon_msg_encoded_bound(msg);
        if (b != NULL && need > b->cap - b->len) {
            frame_send(d, b, n_rec);
            b     = NULL;
            n_rec = 0;
        }
        if (b == NULL) {
            b = buf_get(d, r, sizeof(frame_hdr_t) + need);
            if (b == NULL) {
                MOON_ERROR("no memory for a frame to rank %u: message %s dropped", r,
                           moon_msg_name(msg->type));
                continue;
            }
            frame_begin(d, b, FRAME_BATCH);
        }
        if (moon_msg_encode(msg, b->data + b->len + sizeof(rec), b->cap - b->len - sizeof(rec),
                            &len) != MOON_OK) {
            continue; /* logged by the codec */
        }
        rec = (rec_hdr_t){env->dst, msg->src, msg->seq, msg->type, (uint32_t)len};
        memcpy(b->data + b->len, &rec, sizeof(rec));
        b->len += (uint32_t)(sizeof(rec) + len);
        if (MOON_UNLIKELY(d->trace != NULL)) {
            trace_msg(d, "tx", env->dst, msg, msg->src, msg->seq, msg->type);
        }
        n_rec++;
        n++;
        __atomic_store_n(&p->credits, p->credits - 1, __ATOMIC_RELAXED);
        atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
        /* the popped message is released by the next pop (the queue's stub) */
    }
    if (b != NULL) {
        if (n_rec > 0) {
            frame_send(d, b, n_rec);
        } else {
            buf_put(d, b);
        }
    }
    atomic_fetch_add_explicit(&d->st.sent, n, memory_order_relaxed);
    if (atomic_load_explicit(&p->gate->overloaded, memory_order_relaxed) &&
        atomic_load_explicit(&p->queued, memory_order_relaxed) <= d->cfg.credits / 2) {
        gate_open(p);
    }
    if (empty) {
        if (!moon_mailbox_mark_empty(&p->q)) {
            mark_ready(d, r); /* a push raced in */
        }
    } else if (!p->stalled) {
        mark_ready(d, r); /* budget used up: come back next pass */
    }
    return (int)n;
}

static int pump_sends(moon_dist_t *d)
{
    int n = 0;

    for (uint32_t w = 0; w < d->n_ready_words; w++) {
        uint64_t bits;

        if (atomic_load_explicit(&d->ready[w], memory_order_relaxed) == 0) {
            continue;
        }
        bits = atomic_exchange(&d->ready[w], 0);
        while (bits != 0) {
            uint32_t r = w * 64 + (uint32_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            n += drain_peer(d, r);
        }
    }
    return n;
}

/* ---- receiving ------------------------------------------------------------ */
static void log_once(_Atomic int *flag, const char *what, uint32_t r, moon_status_t status)
{
    if (atomic_exchange(flag, 1) == 0) {
        MOON_WARN("dropped %s from rank %u: %s (counted; logged once)", what, r,
                  moon_status_str(status));
    }
}

static void names_handle(moon_dist_t *d, uint32_t r, const moon_msg_hdr_t *msg);

static void wake_waiter(moon_dist_t *d, uint64_t cookie, moon_status_t status, moon_addr_t addr)
{
    pthread_mutex_lock(&d->lock);
    for (waiter_t *w = d->waiters; w != NULL; w = w->next) {
        if (w->cookie == cookie) {
            w->done   = 1;
            w->status = status;
            w->addr   = addr;
        }
    }
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

/* Counts a delivery to `to` and says whether it is under pressure: flagged
 * overloaded, or what was delivered to it (from any peer) and it has not
 * processed yet reaches its mailbox bound. Only the last target is tracked. */
static int target_pressed(moon_dist_t *d, moon_addr_t to)
{
    moon_actor_t *a = moon_rt_lookup(d->rt, to);
    uint64_t      processed;

    if (a == NULL) {
        return 0;
    }
    processed = atomic_load_explicit(&a->n_processed, memory_order_relaxed);
    if (d->tgt_addr != to) {
        d->tgt_addr      = to;
        d->tgt_base      = processed;
        d->tgt_delivered = 0;
    }
    d->tgt_delivered++;
    /* processed also counts messages from elsewhere: below zero means no backlog */
    return atomic_load_explicit(&a->overloaded, memory_order_relaxed) ||
           (int64_t)(d->tgt_delivered - (processed - d->tgt_base)) >=
               (int64_t)d->rt->cfg.mailbox_bound;
}

/* 1 once a held target has drained below half its bound. */
static int target_relieved(moon_dist_t *d, dist_peer_t *p)
{
    moon_actor_t *a = moon_rt_lookup(d->rt, p->held_addr);
    uint64_t      processed;

    if (a == NULL || d->tgt_addr != p->held_addr) {
        return 1;
    }
    processed = atomic_load_explicit(&a->n_processed, memory_order_relaxed);
    return !atomic_load_explicit(&a->overloaded, memory_order_relaxed) &&
           (int64_t)(d->tgt_delivered - (processed - d->tgt_base)) <
               (int64_t)d->rt->cfg.mailbox_bound / 2;
}

static void deliver_record(moon_dist_t *d, uint32_t r, const rec_hdr_t *rec, const char *payload)
{
    dist_peer_t    *p   = &d->peers[r];
    moon_msg_hdr_t *msg = NULL;
    moon_status_t   status;

    status = moon_msg_decode(payload, rec->len, &msg);
    if (status != MOON_OK) {
        atomic_fetch_add_explicit(&d->st.bad_msgs, 1, memory_order_relaxed);
        log_once(&d->logged_bad_msg, "a message that failed to decode", r, status);
        send_error_reply(d, r, rec, MOON_ERR_PEER_REJECTED);
        p->owed++;
        return;
    }
    if (MOON_UNLIKELY(d->trace != NULL)) {
        trace_msg(d, "rx", rec->to, msg, msg->src, msg->seq, msg->type);
    }
    atomic_fetch_add_explicit(&d->st.received, 1, memory_order_relaxed);
    if (rec->to == MOON_ADDR_NONE) { /* for the transport itself */
        if (msg->type == MOON_MSG_DIST_NAME_OP) {
            names_handle(d, r, msg);
        } else if (msg->type == MOON_MSG_DIST_NAME_REPLY) {
            const moon_dist_name_reply_t *m = (const moon_dist_name_reply_t *)msg;
            wake_waiter(d, m->cookie, m->status, m->addr);
        }
        moon_msg_release(msg);
        p->owed++;
        return;
    }
    if (MOON_UNLIKELY(msg->type < MOON_MSG_SYS_END)) {
        note_sys_rx(d, rec->to, msg);
    }
    status = moon_runtime_deliver_remote(d->rt, rec->to, msg);
    if (status != MOON_OK) {
        atomic_fetch_add_explicit(&d->st.stale, 1, memory_order_relaxed);
        if (msg->type == MOON_MSG_SYS_MONITOR || msg->type == MOON_MSG_SYS_LINK) {
            /* the runtime answers these for ended actors; do the same here */
            if (msg->type == MOON_MSG_SYS_MONITOR) {
                moon_sys_down_t *m = moon_msg_new(MOON_MSG_SYS_DOWN, 0);
                if (m != NULL) {
                    m->actor     = rec->to;
                    m->reason    = MOON_ERR_NO_ACTOR;
                    m->ref       = ((const moon_sys_monitor_t *)msg)->ref;
                    m->hdr.src   = rec->to;
                    m->hdr.flags = MOON_MSG_F_SYSTEM;
                    enqueue(d, r, rec->src, &m->hdr);
                }
            } else if (!((const moon_sys_link_t *)msg)->unlink) {
                moon_sys_exit_t *m = moon_msg_new(MOON_MSG_SYS_EXIT, 0);
                if (m != NULL) {
                    m->actor     = rec->to;
                    m->reason    = MOON_ERR_NO_ACTOR;
                    m->hdr.src   = rec->to;
                    m->hdr.flags = MOON_MSG_F_SYSTEM;
                    enqueue(d, r, rec->src, &m->hdr);
                }
            }
        } else {
            log_once(&d->logged_stale, "a message for a stale address", r, status);
            send_error_reply(d, r, rec, status);
        }
        moon_msg_release(msg);
        p->owed++;
        return;
    }
    /* withhold the credit while the target is overloaded, or while what this
     * peer delivered to it and it has not processed reaches its mailbox bound
     * (the overloaded flag is set by the target's own turns, which may not
     * run for a while on a loaded machine) */
    if (target_pressed(d, rec->to) || p->held > 0) {
        if (p->held++ == 0) {
            p->held_addr = rec->to;
            d->n_held++;
        }
    } else {
        p->owed++;
    }
}

void dist_on_frame(moon_dist_t *d, const void *data, size_t len)
{
    frame_hdr_t  h;
    const char  *cur = (const char *)data + sizeof(h), *end = (const char *)data + len;
    dist_peer_t *p;

    if (len < sizeof(h)) {
        goto bad;
    }
    memcpy(&h, data, sizeof(h));
    if (h.magic != FRAME_MAGIC || h.src_rank >= d->size || h.src_rank == d->rank) {
        goto bad;
    }
    p = &d->peers[h.src_rank];
    atomic_fetch_add_explicit(&d->st.frames_received, 1, memory_order_relaxed);
    p->last_rx_ns = peer_clock_ns();
    if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
        return; /* declared lost: late frames are ignored */
    }
    if (h.credits > 0) {
        uint32_t c = MOON_MIN(p->credits + h.credits, d->cfg.credits); /* a lying peer gains nothing */
        __atomic_store_n(&p->credits, c, __ATOMIC_RELAXED);
        if (p->stalled) {
            p->stalled = 0;
            mark_ready(d, h.src_rank);
        }
    }
    switch (h.kind) {
    case FRAME_BATCH:
        for (uint32_t i = 0; i < h.n_records; i++) {
            rec_hdr_t rec;

            if ((size_t)(end - cur) < sizeof(rec)) {
                goto bad;
            }
            memcpy(&rec, cur, sizeof(rec));
            cur += sizeof(rec);
            if (rec.len > (size_t)(end - cur)) {
                goto bad;
            }
            deliver_record(d, h.src_rank, &rec, cur);
            cur += rec.len;
        }
        if (p->owed >= d->cfg.credits / 4) {
            send_small_frame(d, h.src_rank, FRAME_CREDIT);
        }
        return;
    case FRAME_CREDIT:
    case FRAME_HEARTBEAT:
        return;
    case FRAME_GOODBYE:
        p->goodbye = 1;
        return;
    default:
        if (h.kind >= DIST_FRAME_ENGINE && d->eng->on_engine_frame != NULL &&
            d->eng->on_engine_frame(d, h.src_rank, h.kind, cur, (size_t)(end - cur))) {
            return;
        }
        goto bad;
    }
bad:
    atomic_fetch_add_explicit(&d->st.bad_frames, 1, memory_order_relaxed);
    log_once(&d->logged_bad_frame, "a malformed frame", len >= sizeof(h) ? h.src_rank : 0,
             MOON_ERR_INVALID_PARAM);
}

/* ---- names ---------------------------------------------------------------- */
/* Sends an internal message (to == NONE: the transport of rank r). */
static moon_status_t send_internal(moon_dist_t *d, uint32_t r, moon_addr_t to,
                                   moon_msg_hdr_t *msg)
{
    msg->src = addr_make(d->rank, 0, 0);
    msg->seq = 0;
    if (r == d->rank) {
        if (to == MOON_ADDR_NONE) {
            return MOON_ERR_INVALID_PARAM;
        }
        return moon_runtime_deliver_remote(d->rt, to, msg);
    }
    if (atomic_load(&d->peers[r].down)) {
        return MOON_ERR_PEER_LOST;
    }
    enqueue(d, r, to, msg);
    return MOON_OK;
}

static moon_status_t registry_lookup(moon_dist_t *d, const char *name, moon_addr_t *addr_p)
{
    moon_status_t status = MOON_ERR_NOT_FOUND;

    pthread_mutex_lock(&d->lock);
    for (name_rec_t *n = d->names; n != NULL; n = n->next) {
        if (strcmp(n->name, name) == 0) {
            *addr_p = n->addr;
            status  = MOON_OK;
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return status;
}

static void registry_add(moon_dist_t *d, const char *name, moon_addr_t addr)
{
    size_t      len = strlen(name);
    name_rec_t *n;

    pthread_mutex_lock(&d->lock);
    for (n = d->names; n != NULL; n = n->next) {
        if (strcmp(n->name, name) == 0) {
            n->addr = addr; /* the latest registration wins */
            pthread_mutex_unlock(&d->lock);
            return;
        }
    }
    n = moon_malloc(sizeof(*n) + len + 1);
    if (n != NULL) {
        n->addr = addr;
        memcpy(n->name, name, len + 1);
        n->next  = d->names;
        d->names = n;
    }
    pthread_mutex_unlock(&d->lock);
}

static void reply_name(moon_dist_t *d, uint32_t r, moon_addr_t reply_to, uint64_t cookie,
                       moon_status_t status, moon_addr_t addr)
{
    moon_dist_name_reply_t *m = moon_msg_new(MOON_MSG_DIST_NAME_REPLY, 0);

    if (m == NULL) {
        return;
    }
    m->cookie = cookie;
    m->status = status;
    m->addr   = addr;
    if (reply_to == MOON_ADDR_NONE && r == d->rank) {
        wake_waiter(d, cookie, status, addr);
        moon_msg_release(&m->hdr);
        return;
    }
    if (send_internal(d, reply_to != MOON_ADDR_NONE ? moon_addr_rank(reply_to) : r, reply_to,
                      &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
}

/* Rank 0 (or a local call there): register or query. */
static void names_handle(moon_dist_t *d, uint32_t r, const moon_msg_hdr_t *msg)
{
    const moon_dist_name_op_t *op   = (const moon_dist_name_op_t *)msg;
    const char                *name = MOON_SPAN_PTR(op, op->name);
    moon_addr_t                addr = MOON_ADDR_NONE;
    moon_status_t              status;

    if (op->name.n == 0) {
        return;
    }
    if (op->op == NAME_OP_REGISTER) {
        registry_add(d, name, op->addr);
    } else if (op->op == NAME_OP_QUERY) {
        status = registry_lookup(d, name, &addr);
        reply_name(d, r, op->reply_to, op->cookie, status, addr);
    }
}

static moon_status_t name_op(moon_dist_t *d, uint32_t op, const char *name, moon_addr_t addr,
                             moon_addr_t reply_to, uint64_t cookie)
{
    moon_dist_name_op_t *m = moon_msg_new(MOON_MSG_DIST_NAME_OP, strlen(name) + 1);
    moon_status_t        status;

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->op       = op;
    m->cookie   = cookie;
    m->addr     = addr;
    m->reply_to = reply_to;
    moon_msg_set_str(m, &m->name, name);
    if (d->rank == 0 || d->rt == NULL) {
        names_handle(d, d->rank, &m->hdr);
        moon_msg_release(&m->hdr);
        return MOON_OK;
    }
    status = send_internal(d, 0, MOON_ADDR_NONE, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return status;
}

moon_status_t moon_dist_register(moon_dist_t *d, const char *name, moon_addr_t addr)
{
    moon_status_t status;

    if (d == NULL || d->rt == NULL || name == NULL || name[0] == '\0') {
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_register(d->rt, name, addr);
    if (status != MOON_OK) {
        return status;
    }
    return name_op(d, NAME_OP_REGISTER, name, addr, MOON_ADDR_NONE, 0);
}

moon_status_t moon_dist_whereis_async(moon_dist_t *d, const char *name, moon_addr_t reply_to,
                                      uint64_t cookie)
{
    moon_addr_t addr;

    if (d == NULL || d->rt == NULL || name == NULL || reply_to == MOON_ADDR_NONE) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_whereis(d->rt, name, &addr) == MOON_OK) {
        reply_name(d, d->rank, reply_to, cookie, MOON_OK, addr);
        return MOON_OK;
    }
    return name_op(d, NAME_OP_QUERY, name, MOON_ADDR_NONE, reply_to, cookie);
}

moon_status_t moon_dist_whereis(moon_dist_t *d, const char *name, uint64_t timeout_ns,
                                moon_addr_t *addr_p)
{
    waiter_t        w = {0};
    moon_status_t   status;
    struct timespec dl;
    uint64_t        t;

    if (d == NULL || d->rt == NULL || name == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_whereis(d->rt, name, addr_p) == MOON_OK) {
        return MOON_OK;
    }
    if (d->rank == 0) {
        return registry_lookup(d, name, addr_p);
    }
    pthread_mutex_lock(&d->lock);
    w.cookie   = ++d->next_cookie;
    w.next     = d->waiters;
    d->waiters = &w;
    pthread_mutex_unlock(&d->lock);
    status = name_op(d, NAME_OP_QUERY, name, MOON_ADDR_NONE, MOON_ADDR_NONE, w.cookie);
    clock_gettime(CLOCK_REALTIME, &dl);
    t        = (uint64_t)dl.tv_nsec + (timeout_ns ? timeout_ns : 5000000000ull);
    dl.tv_sec += (time_t)(t / 1000000000ull);
    dl.tv_nsec = (long)(t % 1000000000ull);
    pthread_mutex_lock(&d->lock);
    while (status == MOON_OK && !w.done) {
        if (pthread_cond_timedwait(&d->cond, &d->lock, &dl) == ETIMEDOUT) {
            status = MOON_ERR_TIMED_OUT;
        }
    }
    for (waiter_t **pw = &d->waiters; *pw != NULL; pw = &(*pw)->next) {
        if (*pw == &w) {
            *pw = w.next;
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (status == MOON_OK) {
        status = w.status;
        if (status == MOON_OK) {
            *addr_p = w.addr;
        }
    }
    return status;
}

/* ---- placement ------------------------------------------------------------ */
/* Parses "a,b-c,..." into ranks (at most cap); returns the count or -1. */
static int parse_ranks(const char *s, const char *end, uint32_t n_ranks, uint32_t *out,
                       uint32_t cap)
{
    int n = 0;

    while (s < end) {
        char         *next;
        unsigned long a, b;

        while (s < end && (*s == ' ' || *s == ',')) {
            s++;
        }
        if (s == end) {
            break;
        }
        a = strtoul(s, &next, 10);
        if (next == s || next > end) {
            return -1;
        }
        b = a;
        s = next;
        if (s < end && *s == '-') {
            b = strtoul(s + 1, &next, 10);
            if (next == s + 1 || next > end || b < a) {
                return -1;
            }
            s = next;
        }
        for (unsigned long r = a; r <= b; r++) {
            if (r >= n_ranks || (uint32_t)n >= cap) {
                return -1;
            }
            out[n++] = (uint32_t)r;
        }
        while (s < end && *s == ' ') {
            s++;
        }
        if (s < end && *s != ',') {
            return -1;
        }
    }
    return n;
}

moon_status_t moon_dist_place(const char *spec, const char *name, uint32_t n_ranks,
                              uint32_t *rank_p)
{
    const char *cur = spec, *slash;
    int         best = -1; /* 2: exact, 1 + prefix length: prefix */
    size_t      best_len = 0;
    uint32_t    best_rank = 0, ranks[256];
    uint64_t    index = 0;

    if (spec == NULL || name == NULL || rank_p == NULL || n_ranks == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    slash = strrchr(name, '/');
    if (slash != NULL && slash[1] != '\0') {
        char *end;
        index = strtoull(slash + 1, &end, 10);
        if (*end != '\0') {
            index = 0;
        }
    }
    while (*cur != '\0') {
        const char *end = cur + strcspn(cur, ";\n"), *eq;
        const char *p0 = cur, *p1;
        int         n;

        while (p0 < end && *p0 == ' ') {
            p0++;
        }
        eq = memchr(p0, '=', (size_t)(end - p0));
        if (eq == NULL) {
            for (const char *c = p0; c < end; c++) {
                if (*c != ' ' && *c != '\r' && *c != '\t') {
                    return MOON_ERR_INVALID_PARAM;
                }
            }
        } else {
            p1 = eq;
            while (p1 > p0 && p1[-1] == ' ') {
                p1--;
            }
            n = parse_ranks(eq + 1, end, n_ranks, ranks, MOON_ARRAY_SIZE(ranks));
            if (n <= 0) {
                return MOON_ERR_INVALID_PARAM;
            }
            if ((size_t)(p1 - p0) == strlen(name) && memcmp(p0, name, (size_t)(p1 - p0)) == 0) {
                *rank_p = ranks[index % (uint64_t)n];
                return MOON_OK; /* exact match wins */
            }
            if (p1 > p0 && p1[-1] == '*' && (size_t)(p1 - p0 - 1) <= strlen(name) &&
                memcmp(p0, name, (size_t)(p1 - p0 - 1)) == 0 &&
                (best < 0 || (size_t)(p1 - p0 - 1) > best_len)) {
                best      = 1;
                best_len  = (size_t)(p1 - p0 - 1);
                best_rank = ranks[index % (uint64_t)n];
            }
        }
        cur = *end != '\0' ? end + 1 : end;
    }
    if (best < 0) {
        return MOON_ERR_NOT_FOUND;
    }
    *rank_p = best_rank;
    return MOON_OK;
}

/* ---- peer loss ------------------------------------------------------------ */
static void deliver_sys(moon_dist_t *d, moon_addr_t to, moon_addr_t src, moon_msg_hdr_t *m)
{
    m->src   = src;
    m->flags = MOON_MSG_F_SYSTEM;
    if (moon_runtime_deliver_remote(d->rt, to, m) != MOON_OK) {
        moon_msg_release(m);
    }
}

static void send_peer_down(moon_dist_t *d, moon_addr_t to, uint32_t r, moon_status_t reason)
{
    moon_sys_peer_down_t *m = moon_msg_new(MOON_MSG_SYS_PEER_DOWN, 0);

    if (m != NULL) {
        m->rank   = r;
        m->reason = reason;
        deliver_sys(d, to, MOON_ADDR_NONE, &m->hdr);
    }
}

static void fail_queue(moon_dist_t *d, uint32_t r)
{
    dist_peer_t    *p = &d->peers[r];
    moon_msg_env_t *env;

    /* own the queue: claim it if idle (else it is already scheduled, i.e. ours) */
    (void)moon_mailbox_claim(&p->q);
    do {
        while ((env = moon_mailbox_pop(&p->q)) != NULL) {
            moon_msg_hdr_t *msg = moon_env_msg(env);
            atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
            if (msg->src != MOON_ADDR_NONE && moon_addr_rank(msg->src) == d->rank &&
                msg->type != MOON_MSG_SYS_ERROR && !(msg->flags & MOON_MSG_F_SYSTEM)) {
                moon_sys_error_t *e = moon_msg_new(MOON_MSG_SYS_ERROR, 0);
                if (e != NULL) {
                    e->orig_type = msg->type;
                    e->status    = MOON_ERR_PEER_LOST;
                    e->orig_seq  = msg->seq;
                    deliver_sys(d, msg->src, env->dst, &e->hdr);
                }
            }
        }
    } while (!moon_mailbox_mark_empty(&p->q));
    if (atomic_load_explicit(&p->gate->overloaded, memory_order_relaxed)) {
        gate_open(p);
    }
}

static void finish_op(moon_dist_t *d, bulk_op_t *op);

void dist_peer_failed(moon_dist_t *d, uint32_t r, moon_status_t reason)
{
    dist_peer_t   *p = &d->peers[r];
    monitor_rec_t *lost = NULL;
    moon_addr_t   *notify = NULL;
    uint32_t       n_lost = 0, n_notify = 0;

    if (r >= d->size || r == d->rank || atomic_exchange(&p->down, 1)) {
        return;
    }
    if (p->goodbye) {
        /* it said goodbye: its connection closing is no loss */
        d->eng->peer_lost(d, r);
        return;
    }
    atomic_fetch_add(&d->st.peers_lost, 1);
    atomic_fetch_add(&d->any_down, 1);
    MOON_WARN("rank %u lost: %s", r, moon_status_str(reason));
    d->eng->peer_lost(d, r);
    fail_queue(d, r);
    for (bulk_op_t *op = d->active; op != NULL; op = op->next) {
        if (op->peer == r && !op->finished) {
            op->status = MOON_ERR_PEER_LOST;
            finish_op(d, op);
        }
    }
    /* monitors and links of actors on r, and every watcher */
    pthread_mutex_lock(&d->lock);
    lost   = moon_malloc(sizeof(*lost) * (d->n_mons + 1));
    notify = moon_malloc(sizeof(*notify) * (d->n_mons + d->n_watchers + 1));
    if (lost != NULL && notify != NULL) {
        for (uint32_t i = 0; i < d->n_mons; i++) {
            if (moon_addr_rank(d->mons[i].target) == r) {
                lost[n_lost++] = d->mons[i];
                d->mons[i]     = d->mons[--d->n_mons];
                i--;
            }
        }
        for (uint32_t i = 0; i < d->n_watchers; i++) {
            notify[n_notify++] = d->watchers[i];
        }
    }
    for (waiter_t *w = d->waiters; w != NULL && r == 0; w = w->next) {
        w->done   = 1;
        w->status = MOON_ERR_PEER_LOST;
    }
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    if (lost == NULL || notify == NULL) {
        MOON_ERROR("no memory to notify monitors of rank %u", r);
    }
    for (uint32_t i = 0; i < n_lost; i++) {
        int seen = 0;
        if (lost[i].is_link) {
            moon_sys_exit_t *m = moon_msg_new(MOON_MSG_SYS_EXIT, 0);
            if (m != NULL) {
                m->actor  = lost[i].target;
                m->reason = MOON_ERR_PEER_LOST;
                deliver_sys(d, lost[i].watcher, lost[i].target, &m->hdr);
            }
        } else {
            moon_sys_down_t *m = moon_msg_new(MOON_MSG_SYS_DOWN, 0);
            if (m != NULL) {
                m->actor  = lost[i].target;
                m->reason = MOON_ERR_PEER_LOST;
                m->ref    = lost[i].ref;
                deliver_sys(d, lost[i].watcher, lost[i].target, &m->hdr);
            }
        }
        for (uint32_t j = 0; j < n_notify; j++) {
            seen |= notify[j] == lost[i].watcher;
        }
        if (!seen) {
            notify[n_notify++] = lost[i].watcher;
        }
    }
    for (uint32_t i = 0; i < n_notify; i++) {
        send_peer_down(d, notify[i], r, reason);
    }
    moon_free(lost);
    moon_free(notify);
}

moon_status_t moon_dist_watch_peers(moon_dist_t *d, moon_addr_t watcher)
{
    moon_status_t status = MOON_OK;

    pthread_mutex_lock(&d->lock);
    if (d->n_watchers == d->cap_watchers) {
        uint32_t     cap = d->cap_watchers ? d->cap_watchers * 2 : 8;
        moon_addr_t *w   = moon_realloc(d->watchers, cap * sizeof(*w));
        if (w == NULL) {
            status = MOON_ERR_NO_MEMORY;
        } else {
            d->watchers     = w;
            d->cap_watchers = cap;
        }
    }
    if (status == MOON_OK) {
        d->watchers[d->n_watchers++] = watcher;
    }
    pthread_mutex_unlock(&d->lock);
    /* Ranks already lost are reported too, so a late watcher misses none. A
     * loss racing with this call may be reported twice, never not at all:
     * dist_peer_failed marks the rank down before it reads the watchers. */
    for (uint32_t r = 0; status == MOON_OK && d->peers != NULL && r < d->size; r++) {
        if (r != d->rank && atomic_load(&d->peers[r].down)) {
            send_peer_down(d, watcher, r, MOON_ERR_PEER_LOST);
        }
    }
    return status;
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
    reg->addr = addr;
    reg->len  = len;
    if (d->eng != NULL) {
        status = d->eng->mem_map(d, addr, len, &reg->memh, &reg->rkey, &reg->rkey_len);
        if (status != MOON_OK) {
            moon_free(reg);
            return status;
        }
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
    reg->rank = d->rank;
    reg->len  = len;
    *addr_p   = reg->addr;
    *reg_p    = reg;
    return MOON_OK;
}

void moon_dist_region_deregister(moon_dist_t *d, moon_dist_region_t *reg)
{
    if (reg == NULL) {
        return;
    }
    if (d->eng != NULL) {
        d->eng->mem_unmap(d, reg->memh, reg->rkey);
    }
    if (reg->heap) {
        moon_free(reg->addr);
    }
    moon_free(reg);
}

size_t moon_dist_region_desc_bytes(const moon_dist_region_t *reg)
{
    return sizeof(region_desc_t) + reg->rkey_len;
}

/* A region descriptor is only meaningful inside one job. */
moon_status_t moon_dist_region_desc(const moon_dist_region_t *reg, void *msg, moon_span_t *span)
{
    region_desc_t h = {DESC_MAGIC, reg->rank, (uint64_t)(uintptr_t)reg->addr, reg->len,
                       (uint32_t)reg->rkey_len, 0};
    char         *out = moon_msg_span_alloc(msg, span, (uint32_t)moon_dist_region_desc_bytes(reg),
                                            1, 0);

    if (out == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    memcpy(out, &h, sizeof(h));
    if (reg->rkey_len > 0) {
        memcpy(out + sizeof(h), reg->rkey, reg->rkey_len);
    }
    return MOON_OK;
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

static moon_status_t bulk_submit(moon_dist_t *d, int is_put, void *local,
                                 moon_dist_region_t *local_reg, const void *desc, size_t desc_len,
                                 uint64_t remote_off, size_t len, moon_addr_t reply_to,
                                 uint64_t cookie)
{
    region_desc_t h;
    bulk_op_t    *op;

    if (d == NULL || d->rt == NULL || desc == NULL || desc_len < sizeof(h) ||
        (local == NULL && len > 0)) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(&h, desc, sizeof(h));
    if (h.magic != DESC_MAGIC || desc_len != sizeof(h) + h.rkey_len || h.rank >= d->size ||
        remote_off > h.len || len > h.len - remote_off) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (local_reg != NULL && ((char *)local < (char *)local_reg->addr ||
                              (char *)local + len > (char *)local_reg->addr + local_reg->len)) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (h.rank == d->rank || len == 0) { /* same process: a plain copy */
        char *remote = (char *)(uintptr_t)h.addr + remote_off;
        if (len > 0) {
            memmove(is_put ? remote : local, is_put ? (const char *)local : remote, len);
        }
        atomic_fetch_add(&d->st.bulk_done, 1);
        atomic_fetch_add(&d->st.bulk_bytes, len);
        send_bulk_done(d, reply_to, cookie, MOON_OK, len);
        return MOON_OK;
    }
    if (atomic_load(&d->peers[h.rank].down)) {
        return MOON_ERR_PEER_LOST;
    }
    op = moon_calloc(1, sizeof(*op) + h.rkey_len);
    if (op == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    op->is_put      = is_put;
    op->peer        = h.rank;
    op->local       = local;
    op->local_memh  = local_reg != NULL ? local_reg->memh : NULL;
    op->remote_addr = h.addr + remote_off;
    op->len         = len;
    op->reply_to    = reply_to;
    op->cookie      = cookie;
    op->status      = MOON_OK;
    op->rkey_len    = h.rkey_len;
    op->rkey        = (char *)(op + 1);
    memcpy(op->rkey, (const char *)desc + sizeof(h), h.rkey_len);
    pthread_mutex_lock(&d->cmd_lock);
    op->next    = d->cmd_bulk;
    d->cmd_bulk = op;
    pthread_mutex_unlock(&d->cmd_lock);
    atomic_store(&d->cmd_pending, 1);
    wake(d);
    return MOON_OK;
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
    op->finished = 1;
    if (op->status == MOON_OK) {
        atomic_fetch_add(&d->st.bulk_done, 1);
        atomic_fetch_add(&d->st.bulk_bytes, op->len);
    }
    send_bulk_done(d, op->reply_to, op->cookie, op->status,
                   op->status == MOON_OK ? op->len : 0);
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
static int pump_bulk(moon_dist_t *d)
{
    int        n = 0, issued_now;
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
                buf_put(d, b);
            }
            n++;
        }
    }
    d->n_open = 0;
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
    pthread_mutex_lock(&d->cmd_lock);
    b->next    = d->cmd_raw;
    d->cmd_raw = b;
    pthread_mutex_unlock(&d->cmd_lock);
    atomic_store(&d->cmd_pending, 1);
    wake(d);
    return MOON_OK;
}

/* ---- the progress thread -------------------------------------------------- */
static void tick(moon_dist_t *d, uint64_t now)
{
    /* If this thread itself got no CPU for a while, the silence of the peers
     * says nothing about them: restart their clocks instead of losing them. */
    if (d->last_tick_ns != 0 && now - d->last_tick_ns > d->cfg.peer_timeout_ns / 4) {
        MOON_WARN("progress thread stalled for %llu ms: peer clocks restarted",
                  (unsigned long long)((now - d->last_tick_ns) / 1000000));
        for (uint32_t r = 0; r < d->size; r++) {
            d->peers[r].last_rx_ns = now;
        }
    }
    d->last_tick_ns = now;
    for (uint32_t r = 0; r < d->size; r++) {
        dist_peer_t *p = &d->peers[r];

        if (r == d->rank) {
            continue;
        }
        if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
            if (atomic_load_explicit(&p->queued, memory_order_relaxed) > 0) {
                fail_queue(d, r); /* sends that raced with the loss */
            }
            continue;
        }
        if (p->owed > 0) {
            send_small_frame(d, r, FRAME_CREDIT);
        }
        if (now - p->last_tx_ns >= atomic_load_explicit(&d->hb_ns, memory_order_relaxed)) {
            send_small_frame(d, r, atomic_load(&d->saying_goodbye) ? FRAME_GOODBYE
                                                                   : FRAME_HEARTBEAT);
        }
        if (!p->goodbye && now - p->last_rx_ns > d->cfg.peer_timeout_ns) {
            dist_peer_failed(d, r, MOON_ERR_PEER_LOST);
        }
    }
}

static int release_held(moon_dist_t *d)
{
    int n = 0;

    for (uint32_t r = 0; r < d->size; r++) {
        dist_peer_t *p = &d->peers[r];

        if (p->held > 0 && target_relieved(d, p)) {
            /* the target caught up: restart the count from here */
            p->owed += p->held;
            p->held = 0;
            d->n_held--;
            send_small_frame(d, r, FRAME_CREDIT);
            n++;
        }
    }
    return n;
}

static int work_pending(moon_dist_t *d)
{
    for (uint32_t w = 0; w < d->n_ready_words; w++) {
        if (atomic_load(&d->ready[w]) != 0) {
            return 1;
        }
    }
    return atomic_load(&d->cmd_pending) || d->n_open > 0 || d->n_held > 0;
}

/* The progress lock: a flag, not a mutex, because idle workers try it on
 * every idle pass. acquire pairs with the release in progress_unlock(), so
 * each holder sees the progress state its predecessor left. */
static int progress_trylock(moon_dist_t *d)
{
    return atomic_load_explicit(&d->progress_busy, memory_order_relaxed) == 0 &&
           atomic_exchange_explicit(&d->progress_busy, 1, memory_order_acquire) == 0;
}

static void progress_lock(moon_dist_t *d)
{
    while (!progress_trylock(d)) {
        sched_yield(); /* held for one short pass by a worker */
    }
}

static void progress_unlock(moon_dist_t *d)
{
    atomic_store_explicit(&d->progress_busy, 0, memory_order_release);
}

static int sends_ready(moon_dist_t *d)
{
    for (uint32_t w = 0; w < d->n_ready_words; w++) {
        if (atomic_load_explicit(&d->ready[w], memory_order_relaxed) != 0) {
            return 1;
        }
    }
    return 0;
}

enum {
    PASS_CLOCK  = 1, /* also the clock-driven work (heartbeats, timeouts) */
    PASS_WORKER = 2, /* run by an idle worker (else by the progress thread) */
};

/* One pass over the engine and the queues, under the progress lock (the
 * progress thread or an idle worker). The clock is read under the lock,
 * after the pass's own work: a `now` older than a peer's last_rx_ns would
 * make the peer look silent for 2^64 ns. */
static int progress_pass(moon_dist_t *d, unsigned flags, int *busy_p)
{
    int      n = 0, with_clock = (flags & PASS_CLOCK) != 0;
    uint64_t now;

    /* sends first: what a turn just queued leaves before anything else */
    n += pump_sends(d);
    /* One engine call from a worker: what it delivered runs on this worker
     * only after the pass. The progress thread drives the engine a few times
     * but stops for queued sends. One call may take milliseconds (over tcp,
     * answering a peer's bulk get fills a socket); sixteen in a row held a
     * reply back for tens of them. */
    for (int i = 0; i < ((flags & PASS_WORKER) ? 1 : 16); i++) {
        int k = d->eng->progress(d);
        n += k;
        if (k == 0 || sends_ready(d)) {
            break;
        }
    }
    if (d->n_held > 0) {
        n += release_held(d);
    }
    n += pump_bulk(d);
    /* The clock after the work above, which stamps last_rx_ns/last_tx_ns. */
    now = with_clock ? peer_clock_ns() : 0;
    if (with_clock && now >= d->next_tick_ns) {
        tick(d, now);
        d->next_tick_ns = now + TICK_NS;
    }
    *busy_p = d->n_open > 0 || d->n_held > 0;
    return n;
}

/* The runtime's idle hook: an idle worker runs a pass itself, so what
 * arrives is handled on that worker without a thread hand-off. */
static int worker_poll(void *ctx, int parking)
{
    moon_dist_t *d = ctx;
    int          n = 0, busy;

    if (parking) {
        atomic_store(&d->worker_polled, 0);
        if (atomic_load(&d->napping)) { /* the progress thread takes over now */
            uint64_t one = 1;
            ssize_t  ret = write(d->wake_fd, &one, sizeof(one));
            (void)ret;
        }
        return 0;
    }
    atomic_store_explicit(&d->worker_polled, 1, memory_order_relaxed); /* no clock: hot */
    if (!progress_trylock(d)) {
        return -1; /* the progress thread is in a pass */
    }
    n = progress_pass(d, PASS_WORKER, &busy);
    progress_unlock(d);
    return n;
}

/* An idle worker ran a pass since the last look (the progress thread looks
 * about once per nap, 1 ms): the workers drive progress. */
static int worker_polling(moon_dist_t *d)
{
    return atomic_exchange_explicit(&d->worker_polled, 0, memory_order_relaxed);
}

static void drain_wake_fd(moon_dist_t *d)
{
    uint64_t v;
    ssize_t  rr = read(d->wake_fd, &v, sizeof(v));

    (void)rr;
}

/* Sleeps up to 1 ms, or until woken: a parking worker hands progress back
 * through the wake fd while `napping` is set. */
static void nap(moon_dist_t *d, struct pollfd *wake_pfd)
{
    atomic_store(&d->napping, 1);
    (void)poll(wake_pfd, 1, 1);
    if (wake_pfd->revents & POLLIN) {
        drain_wake_fd(d);
    }
    atomic_store(&d->napping, 0);
}

static void *progress_main(void *arg)
{
    moon_dist_t  *d    = arg;
    uint32_t      idle = 0, missed = 0;
    struct pollfd fds[2];
    int           n_fds = 0;

    moon_log_set_thread_actor("dist-progress", 0);
    fds[n_fds++] = (struct pollfd){d->wake_fd, POLLIN, 0};
    if (d->eng->event_fd(d) >= 0) {
        fds[n_fds++] = (struct pollfd){d->eng->event_fd(d), POLLIN, 0};
    }
    while (!atomic_load_explicit(&d->stop_req, memory_order_relaxed)) {
        int with_clock = (idle & 15) == 0; /* the clock every 16th pass */
        int n, busy, armed = 0;

        if (!progress_trylock(d)) {
            /* A worker holds it, maybe for a long pass (a bulk slice is a
             * copy of up to slice_bytes): nap instead of yielding to it, a
             * few times; then wait for it, as heartbeats and timeouts are ours. */
            if (++missed < 4) {
                nap(d, fds);
                idle = 0;
                continue;
            }
            progress_lock(d);
            with_clock = 1;
        }
        missed = 0;
        n = progress_pass(d, with_clock ? PASS_CLOCK : 0, &busy);
        progress_unlock(d);
        if (n > 0 || busy) {
            idle = 0;
            continue;
        }
        if (with_clock && worker_polling(d)) {
            /* An idle worker is driving progress: stay out of its core, wake
             * for the clock-driven work, or when it parks. */
            nap(d, fds);
            idle = 0;
            continue;
        }
        if (++idle < d->spin_passes) {
            if (idle > 32) {
                /* mpirun binds a rank to one core by default: let the worker
                 * that may share it run the message just delivered */
                sched_yield();
            }
            continue;
        }
        progress_lock(d);
        for (uint32_t r = 0; r < d->size; r++) { /* return credits before sleeping */
            if (r != d->rank && d->peers[r].owed > 0 && !atomic_load(&d->peers[r].down)) {
                send_small_frame(d, r, FRAME_CREDIT);
            }
        }
        /* seq_cst store, then re-check: pairs with wake() (Dekker). */
        atomic_store(&d->sleeping, 1);
        armed = !work_pending(d) && d->eng->arm(d);
        progress_unlock(d);
        if (armed) {
            /* 1 ms: a peer's RMA may need us without an event */
            int ret = poll(fds, (nfds_t)n_fds, 1);
            if (ret > 0 && (fds[0].revents & POLLIN)) {
                drain_wake_fd(d);
            }
        }
        atomic_store(&d->sleeping, 0);
        idle = 0;
    }
    moon_msg_cache_flush();
    return NULL;
}

/* ---- start/stop ----------------------------------------------------------- */
static const dist_engine_ops_t *pick_engine(moon_dist_t *d)
{
    const char *want = d->cfg.engine != NULL ? d->cfg.engine : getenv("MOON_TRANSPORT");

#ifdef MOON_WITH_UCX
    if (want == NULL || strcmp(want, "ucx") == 0) {
        return &moon_dist_engine_ucx;
    }
#endif
    if (want != NULL && strcmp(want, "mpi") != 0 && strcmp(want, "ucx") != 0) {
        MOON_WARN("unknown transport '%s', using mpi", want);
    }
    if (want != NULL && strcmp(want, "ucx") == 0) {
        MOON_WARN("built without UCX: using the MPI transport");
    }
    return &moon_dist_engine_mpi;
}

moon_status_t moon_dist_start(moon_dist_t *d, moon_runtime_t *rt)
{
    moon_status_t status;
    uint64_t      now;

    if (d == NULL || rt == NULL || moon_runtime_rank(rt) != d->rank || d->started) {
        return MOON_ERR_INVALID_PARAM;
    }
    d->rt = rt;
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->cmd_lock, NULL);
    pthread_cond_init(&d->cond, NULL);
    d->started = 1;
    if (d->size == 1) {
        return MOON_OK; /* single rank: nothing to attach */
    }
    d->eng = pick_engine(d);
    if (d->eng == &moon_dist_engine_mpi && d->use_mpi == 2) {
        MOON_ERROR("the MPI transport needs MPI_THREAD_MULTIPLE");
        return MOON_ERR_UNSUPPORTED;
    }
    d->peers = moon_calloc(d->size, sizeof(*d->peers));
    d->n_ready_words = (d->size + 63) / 64;
    d->ready = moon_calloc(d->n_ready_words, sizeof(*d->ready));
    if (d->peers == NULL || d->ready == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto err;
    }
    d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (d->wake_fd < 0) {
        MOON_ERROR("eventfd: %s", strerror(errno));
        status = MOON_ERR_IO;
        goto err;
    }
    now = peer_clock_ns();
    for (uint32_t r = 0; r < d->size; r++) {
        dist_peer_t *p = &d->peers[r];
        moon_mailbox_init(&p->q);
        p->credits    = d->cfg.credits;
        p->last_rx_ns = now;
        p->last_tx_ns = now;
        p->gate       = moon_aligned_alloc(MOON_CACHE_LINE, sizeof(*p->gate));
        if (p->gate == NULL) {
            status = MOON_ERR_NO_MEMORY;
            goto err;
        }
        memset(p->gate, 0, sizeof(*p->gate));
        pthread_mutex_init(&p->gate->mute_lock, NULL);
        atomic_store(&p->gate->alive, 1);
        p->gate->rt = rt;
    }
    d->hb_ns       = d->cfg.peer_timeout_ns / 8;
    d->spin_passes = SPIN_PASSES;
    if (getenv("MOON_DIST_SPIN") != NULL && atol(getenv("MOON_DIST_SPIN")) > 0) {
        d->spin_passes = (uint32_t)atol(getenv("MOON_DIST_SPIN"));
    }
    if (d->cfg.trace_dir == NULL) {
        d->cfg.trace_dir = getenv("MOON_DIST_TRACE");
    }
    if (d->cfg.trace_dir != NULL && d->cfg.trace_dir[0] != '\0') {
        char path[4096];
        snprintf(path, sizeof(path), "%s/trace.%u.log", d->cfg.trace_dir, d->rank);
        d->trace = fopen(path, "w");
        if (d->trace == NULL) {
            MOON_WARN("cannot open trace %s: %s", path, strerror(errno));
        }
    }
    status = d->eng->open(d);
    if (status != MOON_OK) {
        goto err;
    }
    if (d->cfg.slice_bytes == 0) {
        d->cfg.slice_bytes = d->eng->slice_bytes != NULL ? d->eng->slice_bytes(d) : 1u << 20;
    }
    if (d->use_mpi) {
        MPI_Barrier(d->comm); /* every engine is open before anyone sends */
    }
    now = peer_clock_ns();
    for (uint32_t r = 0; r < d->size; r++) {
        d->peers[r].last_rx_ns = now;
    }
    d->next_tick_ns = now + TICK_NS;
    if (pthread_create(&d->thread, NULL, progress_main, d) != 0) {
        d->eng->close(d);
        status = MOON_ERR_NO_RESOURCE;
        goto err;
    }
    moon_runtime_attach_transport(rt, &dist_transport_ops, d);
    if (getenv("MOON_DIST_NO_WORKER_POLL") == NULL) {
        moon_runtime_set_idle_hook(rt, worker_poll, d);
    }
    MOON_INFO("distributed runtime up: rank %u of %u, engine %s", d->rank, d->size,
              d->eng->name);
    return MOON_OK;

err:
    d->eng = NULL; /* stop() has nothing to undo beyond memory */
    return status;
}

void moon_dist_stop(moon_dist_t *d)
{
    uint64_t deadline;

    if (d == NULL || !d->started) {
        return;
    }
    d->started = 0;
    if (d->eng == NULL || d->peers == NULL) {
        return;
    }
    /* flush, then goodbye: the heartbeat turns into GOODBYE frames */
    deadline = now_ns() + 5000000000ull;
    for (;;) {
        int busy = 0;
        for (uint32_t r = 0; r < d->size; r++) {
            busy |= r != d->rank && !atomic_load(&d->peers[r].down) &&
                    atomic_load(&d->peers[r].queued) > 0;
        }
        if (!busy || now_ns() > deadline) {
            break;
        }
        usleep(1000);
    }
    d->hb_ns          = 0; /* a goodbye per tick to every live peer */
    d->saying_goodbye = 1;
    deadline          = now_ns() + 5000000000ull;
    for (;;) {
        int waiting = 0;
        for (uint32_t r = 0; r < d->size; r++) {
            waiting |= r != d->rank && !atomic_load(&d->peers[r].down) && !d->peers[r].goodbye;
        }
        if (!waiting || now_ns() > deadline) {
            break;
        }
        usleep(1000);
    }
    usleep(3 * TICK_NS / 1000); /* let our last goodbyes go out */
    if (d->use_mpi && atomic_load(&d->any_down) == 0) {
        /* nobody stops progressing before every rank has its goodbyes */
        sleepy_barrier(d);
    }
    /* No worker may run a pass once we close: detach, then wait out any pass
     * in flight. */
    moon_runtime_set_idle_hook(d->rt, NULL, NULL);
    progress_lock(d);
    progress_unlock(d);
    atomic_store(&d->stop_req, 1);
    wake(d);
    {
        uint64_t one = 1;
        ssize_t  ret = write(d->wake_fd, &one, sizeof(one));
        (void)ret;
    }
    pthread_join(d->thread, NULL);
    moon_runtime_attach_transport(d->rt, NULL, NULL);
    /* what is left: queued messages, active ops, pooled buffers */
    for (uint32_t r = 0; r < d->size; r++) {
        moon_mailbox_drain(&d->peers[r].q);
    }
    d->eng->close(d);
    while (d->active != NULL) {
        bulk_op_t *op = d->active;
        d->active     = op->next;
        moon_free(op);
    }
    while (d->buf_pool != NULL) {
        dist_buf_t *b = d->buf_pool;
        d->buf_pool   = b->next;
        moon_free(b);
    }
    if (d->trace != NULL) {
        fclose(d->trace);
        d->trace = NULL;
    }
    close(d->wake_fd);
}

void moon_dist_finalize(moon_dist_t *d)
{
    if (d == NULL) {
        return;
    }
    if (d->started) {
        moon_dist_stop(d);
    }
    if (d->peers != NULL) {
        for (uint32_t r = 0; r < d->size; r++) {
            if (d->peers[r].gate != NULL) {
                pthread_mutex_destroy(&d->peers[r].gate->mute_lock);
                moon_free(d->peers[r].gate);
            }
        }
    }
    if (d->use_mpi) {
        if (atomic_load(&d->any_down) == 0) {
            MPI_Comm_free(&d->comm);
            if (d->mpi_ours) {
                MPI_Finalize();
            }
        }
    }
    while (d->names != NULL) {
        name_rec_t *n = d->names;
        d->names      = n->next;
        moon_free(n);
    }
    moon_free(d->mons);
    moon_free(d->watchers);
    moon_free(d->peers);
    moon_free((void *)d->ready);
    moon_free(d);
}
