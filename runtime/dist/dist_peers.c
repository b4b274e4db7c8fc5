/* runtime/dist/dist_peers.c - remote monitors and links, and peer loss, for the
 * distributed runtime. Monitors and links that cross ranks are recorded here
 * as their system messages pass through the transport (both directions), so
 * that when a rank is lost every watcher of an actor there gets its DOWN or
 * EXIT, and every peer watcher a PEER_DOWN, even though the rank itself can
 * send nothing more. Loss also fails what is queued for the rank and its bulk
 * ops (dist_bulk.c) and drops its names (dist_names.c).
 *
 * Threads: the records and watchers are under d->lock (senders add them on
 * any thread); dist_peer_failed and dist_fail_queue run under the progress
 * lock (the progress thread, an idle worker's pass, or a handler's direct
 * send whose frame the engine refused). Heartbeats stay in the progress
 * thread's tick (dist_progress.c), as they share its pass with credit
 * returns; the failure detector that turns silence into suspicion and loss
 * is dist_liveness.c. */
#include "dist_state.h"

#include "moonlet/alloc.h"
#include "moonlet/hash.h"
#include "moonlet/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- remote monitors and links -------------------------------------------- */
typedef struct monitor_rec {
    moon_addr_t watcher, target;
    uint64_t    ref;
    int         is_link;
} monitor_rec_t;

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
void dist_note_sys_tx(moon_dist_t *d, moon_addr_t to, const moon_msg_hdr_t *msg)
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
void dist_note_sys_rx(moon_dist_t *d, moon_addr_t to, const moon_msg_hdr_t *msg)
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

void dist_fail_queue(moon_dist_t *d, uint32_t r)
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
        dist_gate_open(p);
    }
}

/* ---- processes: a dead peer or a silent live one ------------------------------ */
static uint64_t host_hash(void)
{
    char name[256] = {0};

    (void)gethostname(name, sizeof(name) - 1);
    return moon_hash_str(name);
}

/* cfg.split_hosts = N > 1 (MOON_SPLIT_HOSTS): ranks count as N hosts (rank %
 * N) wherever they run, so one machine can run what several would (frames
 * between "hosts" then take the network path; the tests use it for a job that
 * mixes both). */
void dist_procs_gather(moon_dist_t *d)
{
    uint32_t    split = d->cfg.split_hosts;
    dist_proc_t me    = {(int64_t)getpid(), host_hash(), dist_proc_start_ticks(getpid())};
    int         ok, all = 0;

    if (!d->use_mpi) {
        return;
    }
    if (split > 1) {
        me.host += 0x9e3779b97f4a7c15ull * (d->rank % split + 1);
    }
    /* all ranks allocate, or none gathers: a rank that skipped the
     * collective would hang the others */
    d->procs = moon_calloc(d->size, sizeof(*d->procs));
    ok       = d->procs != NULL;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, d->comm);
    if (!all) {
        moon_free(d->procs);
        d->procs = NULL;
        return;
    }
    MPI_Allgather(&me, (int)sizeof(me), MPI_BYTE, d->procs, (int)sizeof(me), MPI_BYTE, d->comm);
}

void dist_peer_failed(moon_dist_t *d, uint32_t r, moon_status_t reason)
{
    dist_peer_t   *p      = &d->peers[r];
    monitor_rec_t *lost   = NULL;
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
    atomic_store(&p->suspected, 0);
    MOON_WARN("rank %u lost: %s", r, moon_status_str(reason));
    if (dist_proc_state(d, r, 1) == DIST_PROC_ALIVE) {
        /* A rank silent past the dead deadline (dist_liveness.c), or (frames
         * through UCX's shared memory, MOON_SHM_RINGS=0) a rank killed
         * between taking a slot of this rank's receive FIFO, which every
         * sender of the host shares, and filling it. */
        MOON_ERROR("rank %u was declared lost but its process %lld on this host is alive: it "
                   "stayed silent here past the dead deadline (wedged, or this rank's UCX "
                   "receive FIFO stuck by a rank killed mid-send)",
                   r, (long long)d->procs[r].pid);
    }
    d->eng->peer_lost(d, r);
    dist_fail_queue(d, r);
    dist_bulk_peer_lost(d, r);
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
    pthread_mutex_unlock(&d->lock);
    dist_names_peer_lost(d, r);
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
