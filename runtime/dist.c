/* runtime/dist.c - the distributed runtime above the wire: MPI bootstrap, the
 * transport ops attached to the runtime, per-peer send queues with batching
 * and credit windows, frames in and out, the progress thread (heartbeats,
 * credits, peer timeouts), start/stop and tracing. The rest of the runtime
 * lives beside it, on the state in dist_state.h: remote monitors, links and
 * peer loss in dist_peers.c, the replicated name registry and placement in
 * dist_names.c, regions and bulk-op slicing in dist_bulk.c.
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
#include "dist_state.h"

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
/* Frames and records; name ops are in dist_names.c, region descriptors in
 * dist_bulk.c. */
#define FRAME_MAGIC 0x4d44u /* "MD" */
enum {
    FRAME_BATCH       = 1, /* records */
    FRAME_CREDIT      = 2, /* credits only */
    FRAME_HEARTBEAT   = 3,
    FRAME_GOODBYE     = 4,
    FRAME_REGION_GONE = 5, /* u64 region id: its owner deregistered it */
};

typedef struct {
    uint16_t magic;
    uint8_t  kind;
    uint8_t  pad;
    uint32_t src_rank;
    uint32_t credits; /* returned to the receiver of this frame */
    uint32_t n_records;
} frame_hdr_t;
_Static_assert(sizeof(frame_hdr_t) == 16, "frame header size changed");

/* A record: the destination and the length of the message that follows (its
 * type, source and sequence number are inside it). 12 bytes on the wire,
 * unaligned: with the frame header, a small message fits UCX's short active
 * message (under 100 bytes on shared memory), which costs half as many
 * instructions to send as a buffered one. The message is msgpack, or, to a
 * peer of this host (dist_peer_t.images), its image (msg_internal.h): the
 * length's top bit set, the payload its type's u32 layout, then the image. */
typedef struct {
    uint64_t to;
    uint32_t len;   /* of the payload */
    int      image; /* the payload is a layout and an image */
} rec_hdr_t;
#define REC_BYTES 12u
#define REC_IMAGE 0x80000000u /* in the length on the wire */

/* A record's bytes at most: a message as its image of `image` bytes, or
 * (image 0) as msgpack of encoded bound `bound`. */
static size_t record_need(size_t image, size_t bound)
{
    return REC_BYTES + (image > 0 ? 4 + image : bound);
}

static void rec_write(char *p, moon_addr_t to, uint32_t len, int image)
{
    len |= image ? REC_IMAGE : 0;
    memcpy(p, &to, 8);
    memcpy(p + 8, &len, 4);
}

static rec_hdr_t rec_read(const char *p)
{
    rec_hdr_t rec;

    memcpy(&rec.to, p, 8);
    memcpy(&rec.len, p + 8, 4);
    rec.image = (rec.len & REC_IMAGE) != 0;
    rec.len &= ~REC_IMAGE;
    return rec;
}

/* ---- state (the structs: dist_state.h) ----------------------------------- */
#define SPIN_PASSES 256 /* idle passes (yielding after the first few) before sleeping */
#define TICK_NS (5 * 1000 * 1000ull)
#define MAX_PER_PEER 512 /* messages per peer per pass: control stays interleaved */
#define BUF_POOL_MAX 64

/* Adds to a counter that only holders of the progress lock write: a plain
 * load and store, not a locked add, on the per-message path (readers of the
 * stats get a recent value either way). */
static inline void count_locked(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

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
const dist_proc_t *dist_procs(const moon_dist_t *d)
{
    return d->procs;
}

void *dist_mpi_comm(moon_dist_t *d)
{
    return &d->comm;
}

const moon_dist_config_t *dist_config(const moon_dist_t *d)
{
    return &d->cfg;
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
    s->n_sent                   = atomic_load(&d->st.sent);
    s->n_received               = atomic_load(&d->st.received);
    s->n_frames_sent            = atomic_load(&d->st.frames_sent);
    s->n_frames_received        = atomic_load(&d->st.frames_received);
    s->n_bad_frames             = atomic_load(&d->st.bad_frames);
    s->n_bad_msgs               = atomic_load(&d->st.bad_msgs);
    s->n_stale                  = atomic_load(&d->st.stale);
    s->n_credit_stalls          = atomic_load(&d->st.credit_stalls);
    s->n_gate_mutes             = atomic_load(&d->st.gate_mutes);
    s->n_peers_lost             = atomic_load(&d->st.peers_lost);
    s->n_bulk_done              = atomic_load(&d->st.bulk_done);
    s->bulk_bytes               = atomic_load(&d->st.bulk_bytes);
    s->n_peer_regions_forgotten = atomic_load(&d->st.regions_forgotten);
}

void dist_send_region_gone(moon_dist_t *d, uint64_t region_id)
{
    char        f[sizeof(frame_hdr_t) + sizeof(region_id)];
    frame_hdr_t h = {FRAME_MAGIC, FRAME_REGION_GONE, 0, d->rank, 0, 0};

    memcpy(f, &h, sizeof(h));
    memcpy(f + sizeof(h), &region_id, sizeof(region_id));
    for (uint32_t r = 0; r < d->size; r++) {
        if (r != d->rank && !atomic_load(&d->peers[r].down)) {
            (void)moon_dist_send_raw(d, r, f, sizeof(f)); /* best effort */
        }
    }
}

/* ---- init ------------------------------------------------------------------- */
static int launched_by_mpi(void)
{
    return moon_config_foreign_env("OMPI_COMM_WORLD_SIZE") != NULL ||
           moon_config_foreign_env("PMI_SIZE") != NULL ||
           moon_config_foreign_env("PMIX_RANK") != NULL ||
           moon_config_foreign_env("MPI_LOCALNRANKS") != NULL;
}

moon_status_t moon_dist_init(int *argc, char ***argv, const moon_dist_config_t *cfg,
                             moon_dist_t **dist_p)
{
    moon_dist_t  *d;
    int           inited = 0, provided = 0, rank = 0, size = 1;
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
        d->cfg = *cfg; /* the caller's: the environment was read by its _default() */
    } else {
        status = moon_dist_config_default(&d->cfg);
        if (status != MOON_OK) {
            moon_free(d);
            return status;
        }
    }
    /* a caller's struct may hold what the table's ranges refuse */
    if (d->cfg.credits < 4) {
        d->cfg.credits = 4;
    }
    if (d->cfg.batch_bytes < 1024) {
        d->cfg.batch_bytes = 1024;
    }
    if (d->cfg.slice_bytes != 0 && d->cfg.slice_bytes < 4096) {
        d->cfg.slice_bytes = 4096;
    }
    d->peer_timeout_ns = (d->cfg.peer_timeout_ms != 0 ? d->cfg.peer_timeout_ms : 2000) * 1000000ull;
    d->spin_passes     = d->cfg.spin_passes != 0 ? d->cfg.spin_passes : SPIN_PASSES;
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
    dist_procs_gather(d);
    *dist_p = d;
    return MOON_OK;
}

/* The barrier's waits back off from 50 us to 16 ms: the waiting thread
 * shares its core with the workers (mpirun binds a rank to one), and each
 * wake-up takes it from them for microseconds; a long wait wakes ~60 times
 * a second, and ends at most its own length late. */
static void backoff_nap(useconds_t *nap_us)
{
    usleep(*nap_us);
    *nap_us = MOON_MIN(*nap_us * 2, 16000);
}

/* MPI_Barrier that sleeps instead of spinning: the main thread must not
 * take a core from the workers and the progress thread while it waits. */
static void sleepy_barrier(moon_dist_t *d)
{
    MPI_Request req;
    int         done   = 0;
    useconds_t  nap_us = 50;

    if (!d->use_mpi) {
        return;
    }
    if (MPI_Ibarrier(d->comm, &req) != MPI_SUCCESS) {
        MPI_Barrier(d->comm);
        return;
    }
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
        backoff_nap(&nap_us);
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
    uint64_t   deadline = now_ns() + 10000000000ull;
    useconds_t nap_us   = 50;

    /* what was sent before the barrier is delivered before anyone leaves it */
    while (d->eng != NULL && !all_delivered(d) && now_ns() < deadline) {
        backoff_nap(&nap_us);
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

void dist_buf_put(moon_dist_t *d, dist_buf_t *b)
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
    dist_buf_put(d, buf);
}

static void frame_begin(moon_dist_t *d, dist_buf_t *b, uint32_t kind)
{
    frame_hdr_t h = {FRAME_MAGIC, (uint8_t)kind, 0, d->rank, 0, 0};

    memcpy(b->data, &h, sizeof(h));
    b->len = sizeof(h);
}

/* The credits a frame about to leave for p carries back: all this rank
 * owes p. Counts the frame. */
static uint32_t frame_carry_credits(moon_dist_t *d, dist_peer_t *p)
{
    uint32_t owed = p->owed;

    p->owed = 0;
    p->tx_frames++;
    count_locked(&d->st.frames_sent, 1);
    return owed;
}

/* Sends b (header filled, records counted); piggybacks owed credits. */
static void frame_send(moon_dist_t *d, dist_buf_t *b, uint32_t n_records)
{
    dist_peer_t  *p = &d->peers[b->peer];
    frame_hdr_t  *h = (frame_hdr_t *)b->data;
    moon_status_t status;

    if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
        dist_buf_put(d, b);
        return;
    }
    h->credits   = frame_carry_credits(d, p);
    h->n_records = n_records;
    status       = d->eng->send_frame(d, b);
    if (status != MOON_OK) {
        /* the engine did not take it */
        if (moon_status_is_peer(status)) {
            dist_peer_failed(d, b->peer, status);
        }
        dist_buf_put(d, b);
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
void dist_wake(moon_dist_t *d)
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
void dist_gate_open(dist_peer_t *p)
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
void dist_enqueue(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_msg_hdr_t *msg)
{
    dist_peer_t *p = &d->peers[r];

    moon_msg_env(msg)->dst = to;
    atomic_fetch_add_explicit(&p->queued, 1, memory_order_relaxed);
    if (moon_mailbox_push(&p->q, moon_msg_env(msg))) {
        mark_ready(d, r);
        dist_wake(d);
    }
}

static int send_direct(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_msg_hdr_t *msg,
                       size_t rec_need, size_t image);

static moon_status_t dist_send(void *ctx, moon_addr_t to, moon_msg_hdr_t *msg)
{
    moon_dist_t *d = ctx;
    uint32_t     r = moon_addr_rank(to);
    dist_peer_t *p;
    size_t       bound, image = 0;

    if (MOON_UNLIKELY(r >= d->size || r == d->rank)) {
        return MOON_ERR_NO_ACTOR;
    }
    p = &d->peers[r];
    if (MOON_UNLIKELY(atomic_load_explicit(&p->down, memory_order_relaxed))) {
        return MOON_ERR_PEER_LOST;
    }
    if (MOON_UNLIKELY((bound = moon_msg_checked_bound(msg, p->images ? &image : NULL)) == 0)) {
        return MOON_ERR_INVALID_PARAM; /* logged; the message stays the sender's */
    }
    if (MOON_UNLIKELY(msg->type < MOON_MSG_SYS_END)) {
        dist_note_sys_tx(d, to, msg);
    }
    if (send_direct(d, r, to, msg, record_need(image, bound), image)) {
        return MOON_OK;
    }
    dist_enqueue(d, r, to, msg);
    if (MOON_UNLIKELY(atomic_load_explicit(&p->queued, memory_order_relaxed) > d->cfg.credits)) {
        gate_close(d, p, msg);
    }
    return MOON_OK;
}

static const moon_transport_ops_t dist_transport_ops = {"dist", dist_send};

/* SYS_ERROR {type, seq, status} from `to` back to the sender `src` of a
 * message that could not be delivered, when the sender is an actor of rank r. */
static void send_error_reply(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_addr_t src,
                             uint32_t type, uint64_t seq, moon_status_t status)
{
    moon_sys_error_t *e;

    if (src == MOON_ADDR_NONE || moon_addr_rank(src) != r || type == MOON_MSG_SYS_ERROR ||
        atomic_load(&d->peers[r].down)) {
        return;
    }
    e = moon_msg_new(MOON_MSG_SYS_ERROR, 0);
    if (e == NULL) {
        return;
    }
    e->orig_type = type;
    e->status    = status;
    e->orig_seq  = seq;
    e->hdr.src   = to;
    e->hdr.flags = MOON_MSG_F_SYSTEM;
    dist_enqueue(d, r, src, &e->hdr);
}

/* ---- sending: drain ready peers into frames ------------------------------- */

/* Encodes msg for `to` as a record at rec, in room bytes (>= record_need):
 * its image of `image` bytes, or (image 0) msgpack. The record's bytes, or
 * 0 (logged by the codec) if it does not encode. */
static size_t record_put(moon_dist_t *d, char *rec, size_t room, moon_addr_t to,
                         const moon_msg_hdr_t *msg, size_t image)
{
    size_t len = 0;

    if (image > 0) {
        uint32_t layout = moon_msg_layout(msg->type);

        memcpy(rec + REC_BYTES, &layout, 4);
        memcpy(rec + REC_BYTES + 4, msg, image);
        len = 4 + image;
    } else if (moon_msg_encode(msg, rec + REC_BYTES, room - REC_BYTES, &len) != MOON_OK) {
        return 0;
    }
    rec_write(rec, to, (uint32_t)len, image > 0);
    if (MOON_UNLIKELY(d->trace != NULL)) {
        trace_msg(d, "tx", to, msg, msg->src, msg->seq, msg->type);
    }
    return REC_BYTES + len;
}

/* One more record of frame b (see record_put); -1 (logged by the codec) if
 * msg does not encode into the room left. */
static int frame_add(moon_dist_t *d, dist_buf_t *b, moon_addr_t to, const moon_msg_hdr_t *msg,
                     size_t image)
{
    size_t n = record_put(d, b->data + b->len, b->cap - b->len, to, msg, image);

    b->len += (uint32_t)n;
    return n > 0 ? 0 : -1;
}

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
        size_t          need, image;

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
        msg   = moon_env_msg(env);
        image = p->images ? moon_msg_image_bytes(msg) : 0;
        need  = record_need(image, image > 0 ? 0 : moon_msg_encoded_bound(msg));
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
                atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
                continue;
            }
            frame_begin(d, b, FRAME_BATCH);
        }
        atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
        if (frame_add(d, b, env->dst, msg, image) != 0) {
            continue; /* dropped, logged by the codec */
        }
        n_rec++;
        n++;
        __atomic_store_n(&p->credits, p->credits - 1, __ATOMIC_RELAXED);
        /* the popped message is released by the next pop (the queue's stub) */
    }
    if (b != NULL) {
        if (n_rec > 0) {
            frame_send(d, b, n_rec);
        } else {
            dist_buf_put(d, b);
        }
    }
    count_locked(&d->st.sent, n);
    if (atomic_load_explicit(&p->gate->overloaded, memory_order_relaxed) &&
        atomic_load_explicit(&p->queued, memory_order_relaxed) <= d->cfg.credits / 2) {
        dist_gate_open(p);
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

static int  progress_trylock(moon_dist_t *d);
static void progress_unlock(moon_dist_t *d);

/* send_direct's frame of one record (see record_put), encoded straight into
 * the engine's memory (a shared-memory ring): no frame buffer, no copy. 1
 * sent, -1 the message did not encode (logged by the codec; nothing sent), 0
 * no room in place (then a frame buffer). */
static int send_in_place(moon_dist_t *d, uint32_t r, moon_addr_t to, const moon_msg_hdr_t *msg,
                         size_t need, size_t image)
{
    char       *f = d->eng->frame_reserve != NULL ? d->eng->frame_reserve(d, r, need) : NULL;
    frame_hdr_t h = {FRAME_MAGIC, FRAME_BATCH, 0, d->rank, 0, 1};
    size_t      n;

    if (f == NULL) {
        return 0;
    }
    if ((n = record_put(d, f + sizeof(h), need - sizeof(h), to, msg, image)) == 0) {
        return -1; /* the room was not committed: it stays free */
    }
    h.credits = frame_carry_credits(d, &d->peers[r]);
    memcpy(f, &h, sizeof(h));
    d->eng->frame_commit(d, r, sizeof(h) + n);
    return 1;
}

/* The first remote message a handler sends, to a peer whose queue is empty,
 * leaves at once from the handler's thread as a frame of its own: a request
 * or a reply does not wait for the worker to finish its turn, come back idle
 * and drain the queue. The handler's later messages (to any peer) queue up
 * and leave batched. FIFO per pair holds: an empty queue, checked under the progress
 * lock, means everything sent before is already with the engine. rec_need:
 * msg's record_need, as its image of `image` bytes or (0) msgpack. Returns 1
 * if msg was consumed. */
static int send_direct(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_msg_hdr_t *msg,
                       size_t rec_need, size_t image)
{
    static _Thread_local uint64_t last_seq;
    dist_peer_t                  *p   = &d->peers[r];
    uint64_t                      seq = moon_rt_dispatch_seq();
    dist_buf_t                   *b   = NULL;
    size_t                        need;
    int                           sent;

    if (seq == 0 || seq == last_seq || !atomic_load_explicit(&d->direct, memory_order_relaxed) ||
        atomic_load_explicit(&p->queued, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&d->progress_wanted, memory_order_relaxed) || !progress_trylock(d)) {
        return 0;
    }
    need = sizeof(frame_hdr_t) + rec_need;
    if (atomic_load(&d->closing) || p->credits == 0 ||
        atomic_load_explicit(&p->queued, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&p->down, memory_order_relaxed) ||
        ((sent = send_in_place(d, r, to, msg, need, image)) == 0 &&
         (b = buf_get(d, r, need)) == NULL)) {
        progress_unlock(d);
        return 0;
    }
    last_seq = seq;
    if (b != NULL) {
        frame_begin(d, b, FRAME_BATCH);
        sent = frame_add(d, b, to, msg, image) == 0 ? 1 : -1;
        if (sent > 0) {
            frame_send(d, b, 1);
        } else {
            dist_buf_put(d, b);
        }
    }
    if (sent > 0) {
        __atomic_store_n(&p->credits, p->credits - 1, __ATOMIC_RELAXED);
        count_locked(&d->st.sent, 1);
    }
    progress_unlock(d);
    moon_msg_release(msg); /* sent, or dropped (logged by the codec) */
    return 1;
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
void dist_log_once(_Atomic int *flag, const char *what, uint32_t r, moon_status_t status)
{
    if (atomic_exchange(flag, 1) == 0) {
        MOON_WARN("dropped %s from rank %u: %s (counted; logged once)", what, r,
                  moon_status_str(status));
    }
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

/* The message of a record: msgpack, or a layout and an image. */
static moon_status_t decode_record(const rec_hdr_t *rec, const char *payload,
                                   moon_msg_hdr_t **msg_p)
{
    uint32_t layout;

    if (!rec->image) {
        return moon_msg_decode(payload, rec->len, msg_p);
    }
    if (rec->len < 4) {
        return MOON_ERR_INVALID_PARAM;
    }
    memcpy(&layout, payload, 4);
    return moon_msg_image_decode(payload + 4, rec->len - 4, layout, msg_p);
}

/* The header of a record's message that did not decode, if it reads. */
static moon_status_t peek_record(const rec_hdr_t *rec, const char *payload, uint32_t *type_p,
                                 moon_addr_t *src_p, uint64_t *seq_p)
{
    if (!rec->image) {
        return moon_msg_peek(payload, rec->len, type_p, src_p, seq_p);
    }
    return rec->len < 4 ? MOON_ERR_INVALID_PARAM
                        : moon_msg_image_peek(payload + 4, rec->len - 4, type_p, src_p, seq_p);
}

static void deliver_record(moon_dist_t *d, uint32_t r, const rec_hdr_t *rec, const char *payload)
{
    dist_peer_t    *p   = &d->peers[r];
    moon_msg_hdr_t *msg = NULL;
    moon_status_t   status;

    status = decode_record(rec, payload, &msg);
    if (status != MOON_OK) {
        uint32_t    type;
        moon_addr_t src;
        uint64_t    seq;

        atomic_fetch_add_explicit(&d->st.bad_msgs, 1, memory_order_relaxed);
        dist_log_once(&d->logged_bad_msg, "a message that failed to decode", r, status);
        /* a reply needs the sender, which only a readable header names */
        if (peek_record(rec, payload, &type, &src, &seq) == MOON_OK) {
            send_error_reply(d, r, rec->to, src, type, seq, MOON_ERR_PEER_REJECTED);
        }
        p->owed++;
        return;
    }
    if (MOON_UNLIKELY(d->trace != NULL)) {
        trace_msg(d, "rx", rec->to, msg, msg->src, msg->seq, msg->type);
    }
    count_locked(&d->st.received, 1);
    if (rec->to == MOON_ADDR_NONE) { /* for the transport itself */
        dist_names_on_msg(d, r, msg);
        moon_msg_release(msg);
        p->owed++;
        return;
    }
    if (MOON_UNLIKELY(msg->type < MOON_MSG_SYS_END)) {
        dist_note_sys_rx(d, rec->to, msg);
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
                    dist_enqueue(d, r, msg->src, &m->hdr);
                }
            } else if (!((const moon_sys_link_t *)msg)->unlink) {
                moon_sys_exit_t *m = moon_msg_new(MOON_MSG_SYS_EXIT, 0);
                if (m != NULL) {
                    m->actor     = rec->to;
                    m->reason    = MOON_ERR_NO_ACTOR;
                    m->hdr.src   = rec->to;
                    m->hdr.flags = MOON_MSG_F_SYSTEM;
                    dist_enqueue(d, r, msg->src, &m->hdr);
                }
            }
        } else {
            dist_log_once(&d->logged_stale, "a message for a stale address", r, status);
            send_error_reply(d, r, rec->to, msg->src, msg->type, msg->seq, status);
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
    count_locked(&d->st.frames_received, 1);
    p->rx_frames++;
    if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
        return; /* declared lost: late frames are ignored */
    }
    if (h.credits > 0) {
        uint32_t c =
            MOON_MIN(p->credits + h.credits, d->cfg.credits); /* a lying peer gains nothing */
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

            if ((size_t)(end - cur) < REC_BYTES) {
                goto bad;
            }
            rec = rec_read(cur);
            cur += REC_BYTES;
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
    case FRAME_REGION_GONE: {
        uint64_t id;
        if ((size_t)(end - cur) != sizeof(id)) {
            goto bad;
        }
        memcpy(&id, cur, sizeof(id));
        if (d->eng->region_gone != NULL) {
            atomic_fetch_add(&d->st.regions_forgotten, d->eng->region_gone(d, h.src_rank, id));
        }
        return;
    }
    default:
        if (h.kind >= DIST_FRAME_ENGINE && d->eng->on_engine_frame != NULL &&
            d->eng->on_engine_frame(d, h.src_rank, h.kind, cur, (size_t)(end - cur))) {
            return;
        }
        goto bad;
    }
bad:
    atomic_fetch_add_explicit(&d->st.bad_frames, 1, memory_order_relaxed);
    dist_log_once(&d->logged_bad_frame, "a malformed frame", len >= sizeof(h) ? h.src_rank : 0,
                  MOON_ERR_INVALID_PARAM);
}

/* ---- the progress thread -------------------------------------------------- */
static void tick(moon_dist_t *d, uint64_t now)
{
    /* If this thread itself got no CPU for a while, the silence of the peers
     * says nothing about them: restart their clocks instead of losing them. */
    if (d->last_tick_ns != 0 && now - d->last_tick_ns > d->peer_timeout_ns / 4) {
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
                dist_fail_queue(d, r); /* sends that raced with the loss */
            }
            continue;
        }
        if (p->rx_frames != p->rx_seen) { /* heard from since the last tick */
            p->rx_seen    = p->rx_frames;
            p->last_rx_ns = now;
        }
        if (p->owed > 0) {
            send_small_frame(d, r, FRAME_CREDIT);
        }
        if (p->tx_frames != p->tx_seen) {
            p->tx_seen    = p->tx_frames;
            p->last_tx_ns = now;
        }
        if (now - p->last_tx_ns >= atomic_load_explicit(&d->hb_ns, memory_order_relaxed)) {
            send_small_frame(d, r,
                             atomic_load(&d->saying_goodbye) ? FRAME_GOODBYE : FRAME_HEARTBEAT);
        }
        if (!p->goodbye && now - p->last_rx_ns > d->peer_timeout_ns) {
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

/* Blocking, for the progress thread and stop: workers that poll take the lock
 * again right after each pass, so the waiter announces itself and they stay
 * off it until it is through (a progress thread starved for a second missed
 * its heartbeats while a worker drove a tcp transfer). */
static void progress_lock(moon_dist_t *d)
{
    if (progress_trylock(d)) {
        return;
    }
    atomic_fetch_add(&d->progress_wanted, 1);
    while (!progress_trylock(d)) {
        sched_yield(); /* held for one pass by a worker */
    }
    atomic_fetch_sub(&d->progress_wanted, 1);
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
    n += dist_bulk_pump(d);
    /* The clock after the work above (tick() stamps what it counted with it). */
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
        /* the progress thread takes over now (unless stop closes its fd):
         * the count, then napping; nap() sets napping, then reads the count */
        atomic_fetch_add(&d->parks, 1);
        if (atomic_load(&d->napping) && !atomic_load(&d->closing)) {
            uint64_t one = 1;
            ssize_t  ret = write(d->wake_fd, &one, sizeof(one));
            (void)ret;
        }
        return 0;
    }
    atomic_store_explicit(&d->worker_polled, 1, memory_order_relaxed); /* no clock: hot */
    if (atomic_load_explicit(&d->progress_wanted, memory_order_relaxed) || !progress_trylock(d)) {
        return -1; /* the progress thread is in a pass, or waits for one */
    }
    if (atomic_load(&d->closing)) {
        progress_unlock(d);
        return 0;
    }
    n = progress_pass(d, PASS_WORKER, &busy);
    progress_unlock(d);
    return n;
}

/* An idle worker ran a pass since the last look (the progress thread looks
 * once per nap, 1-4 ms): the workers drive progress. */
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

/* Sleeps up to ms milliseconds, or until woken: a parking worker hands
 * progress back through the wake fd while `napping` is set. parks: d->parks
 * as read before the caller saw the worker polling; a worker that parked
 * since, before `napping` was set, wrote no wake-up (Dekker with
 * worker_poll: each side stores, then loads the other's), so no sleep. */
static void nap(moon_dist_t *d, struct pollfd *wake_pfd, int ms, uint32_t parks)
{
    atomic_store(&d->napping, 1);
    if (atomic_load(&d->parks) == parks) {
        (void)poll(wake_pfd, 1, ms);
        if (wake_pfd->revents & POLLIN) {
            drain_wake_fd(d);
        }
    }
    atomic_store(&d->napping, 0);
}

/* The longest nap while workers poll. Each wake takes the core from a
 * worker for ~10 us on these VMs: with the waits of the main threads, a wake
 * each millisecond cost a shared-memory round trip a quarter of its mean.
 * Clock-driven work (heartbeats, every peer_timeout / 8) needs a pass now and
 * then only, and a parking worker wakes us at once. What the cap bounds is
 * how long frames wait (the pass after each nap still takes them in) when the
 * polling worker goes into a long turn instead of parking: up to two naps,
 * as the worker's last poll, from before the turn, counts once more. */
#define NAP_MAX_MS 4

static void *progress_main(void *arg)
{
    moon_dist_t  *d    = arg;
    uint32_t      idle = 0, missed = 0;
    int           nap_ms = 1; /* doubles while workers keep polling */
    uint32_t      parks;
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
            /* A polling worker holds it, maybe for a long pass (a bulk slice
             * is a copy of up to slice_bytes): nap instead of yielding to it,
             * a few times. A handler's direct send holds it for microseconds:
             * yield and try again. Then wait for it, as heartbeats and
             * timeouts are ours. */
            if (++missed < 4) {
                parks = atomic_load(&d->parks);
                if (atomic_load_explicit(&d->worker_polled, memory_order_relaxed)) {
                    nap(d, fds, nap_ms, parks);
                } else {
                    sched_yield();
                }
                idle = 0;
                continue;
            }
            progress_lock(d);
            with_clock = 1;
        }
        missed = 0;
        n      = progress_pass(d, with_clock ? PASS_CLOCK : 0, &busy);
        progress_unlock(d);
        parks = atomic_load(&d->parks);
        if (worker_polling(d)) {
            /* An idle worker is driving progress: stay out of its core (a
             * pass of ours that found work does not change that: competing
             * for the lock on one core costs both of us a context switch),
             * wake for the clock-driven work (the pass after a nap has the
             * clock), or when it parks. */
            nap(d, fds, nap_ms, parks);
            nap_ms = MOON_MIN(nap_ms * 2, NAP_MAX_MS);
            idle   = 0;
            continue;
        }
        nap_ms = 1;
        if (n > 0 || busy) {
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
        /* seq_cst store, then re-check: pairs with dist_wake() (Dekker). */
        atomic_store(&d->sleeping, 1);
        armed = !work_pending(d) && d->eng->arm(d);
        progress_unlock(d);
        if (armed) {
            /* 1 ms: a peer's RMA may need us without an event */
            int ret = poll(fds, (nfds_t)n_fds, 1);
            if (ret > 0 && (fds[0].revents & POLLIN)) {
                drain_wake_fd(d);
            }
            if (d->eng->disarm != NULL) {
                d->eng->disarm(d);
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
#ifdef MOON_WITH_UCX
    if (d->cfg.transport != MOON_DIST_TRANSPORT_MPI) {
        return &moon_dist_engine_ucx;
    }
#else
    if (d->cfg.transport == MOON_DIST_TRANSPORT_UCX) {
        MOON_WARN("built without UCX: using the MPI transport");
    }
#endif
    return &moon_dist_engine_mpi;
}

/* Opens the trace file of this rank, if asked for; a failure only warns. */
static void trace_open(moon_dist_t *d)
{
    char path[4096];

    if (d->cfg.trace_dir == NULL || d->cfg.trace_dir[0] == '\0') {
        return;
    }
    snprintf(path, sizeof(path), "%s/trace.%u.log", d->cfg.trace_dir, d->rank);
    d->trace = fopen(path, "w");
    if (d->trace == NULL) {
        MOON_WARN("cannot open trace %s: %s", path, strerror(errno));
    }
}

/* Every peer's queue and gate; on failure the gates made so far stay for
 * free_gates(). */
static moon_status_t peers_init(moon_dist_t *d, moon_runtime_t *rt)
{
    uint64_t now = peer_clock_ns();

    for (uint32_t r = 0; r < d->size; r++) {
        dist_peer_t *p = &d->peers[r];
        moon_mailbox_init(&p->q);
        p->credits    = d->cfg.credits;
        p->last_rx_ns = now;
        p->last_tx_ns = now;
        p->gate       = moon_aligned_alloc(MOON_CACHE_LINE, sizeof(*p->gate));
        if (p->gate == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        memset(p->gate, 0, sizeof(*p->gate));
        pthread_mutex_init(&p->gate->mute_lock, NULL);
        atomic_store(&p->gate->alive, 1);
        p->gate->rt = rt;
    }
    return MOON_OK;
}

static void free_gates(moon_dist_t *d)
{
    for (uint32_t r = 0; r < d->size; r++) {
        if (d->peers[r].gate != NULL) {
            pthread_mutex_destroy(&d->peers[r].gate->mute_lock);
            moon_free(d->peers[r].gate);
            d->peers[r].gate = NULL;
        }
    }
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
    if (d->size == 1) {
        d->started = 1;
        return MOON_OK; /* single rank: nothing to attach */
    }
    d->eng = pick_engine(d);
    if (d->eng == &moon_dist_engine_mpi && d->use_mpi == 2) {
        MOON_ERROR("the MPI transport needs MPI_THREAD_MULTIPLE");
        status = MOON_ERR_UNSUPPORTED;
        goto err_fini_locks;
    }
    d->peers         = moon_calloc(d->size, sizeof(*d->peers));
    d->n_ready_words = (d->size + 63) / 64;
    d->ready         = moon_calloc(d->n_ready_words, sizeof(*d->ready));
    if (d->peers == NULL || d->ready == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto err_free_peers;
    }
    d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (d->wake_fd < 0) {
        MOON_ERROR("eventfd: %s", strerror(errno));
        status = MOON_ERR_IO;
        goto err_free_peers;
    }
    trace_open(d);
    status = peers_init(d, rt);
    if (status != MOON_OK) {
        goto err_free_gates;
    }
    d->hb_ns = d->peer_timeout_ns / 8;
    status   = d->eng->open(d);
    if (status != MOON_OK) {
        goto err_free_gates;
    }
    if (d->cfg.slice_bytes == 0) {
        d->cfg.slice_bytes = d->eng->slice_bytes != NULL ? d->eng->slice_bytes(d) : 1u << 20;
    }
    if (d->use_mpi) {
        MPI_Barrier(d->comm); /* every engine is open before anyone sends */
    }
    now = peer_clock_ns();
    /* images off (--dist-images 0): msgpack to every peer (to compare, or for
     * a job whose ranks on one host run builds of different schemas: their
     * images would be refused) */
    for (uint32_t r = 0; r < d->size; r++) {
        d->peers[r].last_rx_ns = now;
        d->peers[r].images     = d->cfg.images && d->procs != NULL &&
                             d->procs[r].host == d->procs[d->rank].host;
    }
    d->next_tick_ns = now + TICK_NS;
    if (pthread_create(&d->thread, NULL, progress_main, d) != 0) {
        status = MOON_ERR_NO_RESOURCE;
        goto err_close_engine;
    }
    atomic_store(&d->direct, d->cfg.direct != 0); /* 0: every send queues (to compare) */
    moon_runtime_attach_transport(rt, &dist_transport_ops, d);
    if (d->cfg.worker_poll) {
        moon_runtime_set_idle_hook(rt, worker_poll, d);
    }
    d->started = 1;
    MOON_INFO("distributed runtime up: rank %u of %u, engine %s", d->rank, d->size, d->eng->name);
    return MOON_OK;

err_close_engine:
    d->eng->close(d);
err_free_gates:
    free_gates(d);
    if (d->trace != NULL) {
        fclose(d->trace);
        d->trace = NULL;
    }
    close(d->wake_fd);
    d->wake_fd = -1;
err_free_peers:
    moon_free(d->peers);
    moon_free((void *)d->ready);
    d->peers = NULL;
    d->ready = NULL;
err_fini_locks:
    d->eng = NULL;
    d->rt  = NULL;
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->cmd_lock);
    pthread_mutex_destroy(&d->lock);
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
    /* No worker may run a pass or send directly once we close: `closing` is
     * checked under the lock by both, so after one lock/unlock nobody does
     * (a worker that loaded the hook before the detach still finds ctx = d). */
    atomic_store(&d->closing, 1);
    moon_runtime_set_idle_hook(d->rt, NULL, d);
    atomic_store(&d->direct, 0);
    progress_lock(d);
    progress_unlock(d);
    atomic_store(&d->stop_req, 1);
    dist_wake(d);
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
    dist_regions_release(d);
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
    dist_names_fini(d);
    moon_free(d->procs);
    moon_free(d->mons);
    moon_free(d->watchers);
    moon_free(d->peers);
    moon_free((void *)d->ready);
    moon_free(d);
}
