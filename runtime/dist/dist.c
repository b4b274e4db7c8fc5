/* runtime/dist/dist.c - the distributed runtime above the wire: MPI bootstrap,
 * accessors, the barrier, tracing, start/stop. Its core is split by job
 * (dist_core.h): the wire format (dist_wire.h), frame buffers (dist_bufs.c),
 * credit windows and muting (dist_credit.c), the send path (dist_send.c), the
 * receive path (dist_recv.c) and the progress thread (dist_progress.c). The
 * rest of the runtime lives beside it, on the state in dist_state.h: remote
 * monitors, links and peer loss in dist_peers.c, the replicated name registry
 * and placement in dist_names.c, regions and bulk-op slicing in dist_bulk.c.
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
#include "dist_core.h"

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

/* ---- clocks ---- */
uint64_t dist_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The clock of heartbeats and peer timeouts: stamped on every frame sent and
 * received, so it must be cheap; the coarse clock (a few ms of resolution)
 * is plenty for a 2 s timeout and costs a plain load instead of a timer read. */
uint64_t dist_peer_clock_ns(void)
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

int moon_dist_peer_suspected(moon_dist_t *d, uint32_t r)
{
    return r < d->size && r != d->rank && d->peers != NULL && !atomic_load(&d->peers[r].down) &&
           atomic_load(&d->peers[r].suspected);
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
    s->n_peers_suspected        = atomic_load(&d->st.peers_suspected);
    s->n_peers_back             = atomic_load(&d->st.peers_back);
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
    d->peer_dead_ns    = (d->cfg.peer_dead_ms != 0 ? d->cfg.peer_dead_ms : 10000) * 1000000ull;
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

/* Waits for a nonblocking collective, sleeping instead of spinning: the main
 * thread must not take a core from the workers and the progress thread. */
static void sleepy_wait(MPI_Request *req)
{
    int        done   = 0;
    useconds_t nap_us = 50;

    while (MPI_Test(req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
        backoff_nap(&nap_us);
    }
}

static void sleepy_barrier(moon_dist_t *d)
{
    MPI_Request req;

    if (!d->use_mpi) {
        return;
    }
    if (MPI_Ibarrier(d->comm, &req) != MPI_SUCCESS) {
        MPI_Barrier(d->comm);
        return;
    }
    sleepy_wait(&req);
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

static void wait_delivered(moon_dist_t *d)
{
    uint64_t   deadline = dist_now_ns() + 10000000000ull;
    useconds_t nap_us   = 50;

    /* what was sent before the barrier is delivered before anyone leaves it */
    while (d->eng != NULL && !all_delivered(d) && dist_now_ns() < deadline) {
        backoff_nap(&nap_us);
    }
}

void moon_dist_barrier(moon_dist_t *d)
{
    wait_delivered(d);
    sleepy_barrier(d);
}

moon_status_t moon_dist_agree(moon_dist_t *d, moon_status_t status)
{
    int         mine = (int)status, worst = (int)status;
    MPI_Request req;

    if (d == NULL) {
        return status;
    }
    wait_delivered(d);
    if (!d->use_mpi) {
        return status;
    }
    /* statuses are negative errors, MOON_OK is 0: the minimum is a failure
     * when any rank failed */
    if (MPI_Iallreduce(&mine, &worst, 1, MPI_INT, MPI_MIN, d->comm, &req) == MPI_SUCCESS) {
        sleepy_wait(&req);
    } else if (MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MIN, d->comm) != MPI_SUCCESS) {
        return status != MOON_OK ? status : MOON_ERR_PEER_LOST;
    }
    return (moon_status_t)worst;
}

/* ---- trace ---------------------------------------------------------------- */
void dist_trace_msg(moon_dist_t *d, const char *dir, moon_addr_t to, const moon_msg_hdr_t *m,
                    uint64_t src, uint64_t seq, uint32_t type)
{
    (void)m;
    fprintf(d->trace, "%s %llu %llx %llx %s %llu\n", dir, (unsigned long long)seq,
            (unsigned long long)src, (unsigned long long)to, moon_msg_name(type),
            (unsigned long long)dist_now_ns());
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
    uint64_t now = dist_peer_clock_ns();

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
    now = dist_peer_clock_ns();
    /* images off (--dist-images 0): msgpack to every peer (to compare, or for
     * a job whose ranks on one host run builds of different schemas: their
     * images would be refused) */
    for (uint32_t r = 0; r < d->size; r++) {
        d->peers[r].last_rx_ns = now;
        d->peers[r].images =
            d->cfg.images && d->procs != NULL && d->procs[r].host == d->procs[d->rank].host;
    }
    dist_liveness_start(d);
    d->next_tick_ns = now + TICK_NS;
    if (pthread_create(&d->thread, NULL, dist_progress_main, d) != 0) {
        status = MOON_ERR_NO_RESOURCE;
        goto err_close_engine;
    }
    atomic_store(&d->direct, d->cfg.direct != 0); /* 0: every send queues (to compare) */
    moon_runtime_attach_transport(rt, &dist_transport_ops, d);
    if (d->cfg.worker_poll) {
        moon_runtime_set_idle_hook(rt, dist_worker_poll, d);
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
    deadline = dist_now_ns() + 5000000000ull;
    for (;;) {
        int busy = 0;
        for (uint32_t r = 0; r < d->size; r++) {
            busy |= r != d->rank && !atomic_load(&d->peers[r].down) &&
                    atomic_load(&d->peers[r].queued) > 0;
        }
        if (!busy || dist_now_ns() > deadline) {
            break;
        }
        usleep(1000);
    }
    d->hb_ns          = 0; /* a goodbye per tick to every live peer */
    d->saying_goodbye = 1;
    deadline          = dist_now_ns() + 5000000000ull;
    for (;;) {
        int waiting = 0;
        for (uint32_t r = 0; r < d->size; r++) {
            waiting |= r != d->rank && !atomic_load(&d->peers[r].down) && !d->peers[r].goodbye;
        }
        if (!waiting || dist_now_ns() > deadline) {
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
    dist_progress_lock(d);
    dist_progress_unlock(d);
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
