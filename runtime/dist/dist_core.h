/* runtime/dist/dist_core.h - what the files of the distributed runtime's core
 * share (see dist.c for the threads and credits):
 *   dist.c           bootstrap (MPI), accessors, barrier, tracing, start/stop
 *   dist_bufs.c      the frame buffer pool and frames out
 *   dist_credit.c    credit windows: muting senders on a peer's gate,
 *                    withholding credits from a pressed target, returning them
 *   dist_send.c      the transport seam and the send path: queues, frames,
 *                    direct sends from a handler's thread
 *   dist_recv.c      the receive path: frames in, records decoded and delivered
 *   dist_progress.c  the progress thread and its handshakes with senders and
 *                    polling workers (wake fd, ready bits, the progress lock)
 * Everything named p->... without an atomic is touched under the progress
 * lock only. */
#ifndef MOON_RUNTIME_DIST_CORE_H
#define MOON_RUNTIME_DIST_CORE_H

#include "dist_state.h"
#include "dist_wire.h"

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

/* ---- dist.c ---- */
/* CLOCK_MONOTONIC now; the coarse clock of heartbeats and peer timeouts. */
uint64_t dist_now_ns(void);
uint64_t dist_peer_clock_ns(void);
void     dist_trace_msg(moon_dist_t *d, const char *dir, moon_addr_t to, const moon_msg_hdr_t *m,
                        uint64_t src, uint64_t seq, uint32_t type);

/* ---- dist_bufs.c ---- */
/* A buffer for a frame to peer of need bytes at least (pooled up to
 * batch_bytes); NULL: no memory. */
dist_buf_t *dist_buf_get(moon_dist_t *d, uint32_t peer, size_t need);
/* Starts b as a frame of kind (FRAME_*) from this rank. */
void dist_frame_begin(moon_dist_t *d, dist_buf_t *b, uint32_t kind);
/* Hands b (n_records records) to the engine with the credits owed; takes b. */
void dist_frame_send(moon_dist_t *d, dist_buf_t *b, uint32_t n_records);
/* A frame without records (credit, heartbeat, goodbye) to rank r. */
void dist_send_small_frame(moon_dist_t *d, uint32_t r, uint32_t kind);

/* ---- dist_credit.c ---- */
/* All the credits owed to p, for a frame leaving for it (counts the frame). */
uint32_t dist_frame_carry_credits(moon_dist_t *d, dist_peer_t *p);
/* Mutes msg's sender (the actor whose turn sends it) on p's gate. */
void dist_gate_close(moon_dist_t *d, dist_peer_t *p, const moon_msg_hdr_t *msg);
/* Counts a delivery to `to`; 1 if it is under pressure (credits are held). */
int dist_target_pressed(moon_dist_t *d, moon_addr_t to);
/* Returns the credits held for targets that caught up; how many peers. */
int dist_release_held(moon_dist_t *d);

/* ---- dist_send.c ---- */
extern const moon_transport_ops_t dist_transport_ops; /* attached to the runtime at start */
/* SYS_ERROR back to src (an actor of rank r) for a message to `to` that failed. */
void dist_send_error_reply(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_addr_t src,
                           uint32_t type, uint64_t seq, moon_status_t status);
/* Drains the ready peers into frames; how many messages went. */
int dist_pump_sends(moon_dist_t *d);

/* ---- dist_progress.c ---- */
/* Marks rank r's queue as having work (any thread). */
void dist_mark_ready(moon_dist_t *d, uint32_t r);
/* The progress lock: try (1: taken), take, release. */
int  dist_progress_trylock(moon_dist_t *d);
void dist_progress_lock(moon_dist_t *d);
void dist_progress_unlock(moon_dist_t *d);
/* The runtime's idle hook (moon_runtime_set_idle_hook): a pass from a worker. */
int dist_worker_poll(void *ctx, int parking);
/* The progress thread (pthread_create's start routine; arg: the moon_dist_t). */
void *dist_progress_main(void *arg);

#endif /* MOON_RUNTIME_DIST_CORE_H */
