/* runtime/dist/engine/shm_rings.h - frames between ranks of one host over shared-memory
 * rings, one ring per (sender, receiver) pair.
 *
 * Why: UCX's shared-memory transports give each receiver one FIFO that every
 * sender of the host writes, read in order. A sender killed between taking a
 * slot and filling it leaves the slot unfinished forever, and the receiver
 * hears nobody on the host again (a false loss of every other rank). With a
 * ring per pair, a dead sender stalls only its own ring, which nobody needs.
 *
 * A ring is single-producer single-consumer: the sender appends records,
 * each published by a release store of its header's tag (its position in
 * the ring's stream); the receiver polls the tag where the next record goes,
 * reads records in place and gives the room back with a release store of
 * `tail`. A frame
 * larger than half a ring goes in fragments, reassembled by the receiver.
 * Each receiver's rings live in one segment it creates (POSIX shm, unlinked
 * as soon as every sender has mapped it, so nothing outlives the job).
 *
 * Sleep: a receiver about to sleep marks its segment asleep and looks at its
 * rings once more (shm_rings_arm); a sender that wrote into an asleep
 * receiver's ring must wake it by other means (the UCX engine sends a
 * wake-up active message, which UCX's own event fd delivers).
 *
 * Everything but open/close runs under the engine's lock (the dist progress
 * lock), like the rest of the engine. */
#ifndef MOON_RUNTIME_SHM_RINGS_H
#define MOON_RUNTIME_SHM_RINGS_H

#include "dist_internal.h"

#include <mpi.h>

#include <stddef.h>
#include <stdint.h>

typedef struct shm_rings shm_rings_t;

/* Receives one frame from rank `from`; the bytes are valid for the call. */
typedef void (*shm_deliver_fn)(void *ctx, uint32_t from, const void *frame, size_t len);

/* Collective over comm (every rank calls it): sets up a ring of ring_bytes
 * (a power of two, >= 64 KiB) for every pair of ranks on one host, from
 * procs (every rank's pid and host). NULL on every rank when any rank could
 * not set its rings up (logged), and on a rank alone on its host. */
shm_rings_t *shm_rings_open(MPI_Comm comm, uint32_t rank, uint32_t size, const dist_proc_t *procs,
                            size_t ring_bytes);
/* Unmaps everything. NULL: no-op. */
void shm_rings_close(shm_rings_t *s);
/* 1 if frames to peer go through a ring. */
int shm_rings_reaches(const shm_rings_t *s, uint32_t peer);
/* Appends frame[*off..len) to the ring to peer as far as there is room,
 * advancing *off (0 for a new frame); 1 once the whole frame is in. Frames
 * to one peer must be written whole, in order. */
int shm_rings_write(shm_rings_t *s, uint32_t peer, const void *frame, size_t len, size_t *off);
/* Room for a frame of at most max bytes to peer, to be written in place:
 * the frame's bytes, or NULL (no ring to peer, or no room now; then
 * shm_rings_write). shm_rings_commit publishes the frame's first len bytes
 * (len <= max); nothing else may be written to peer in between. */
void *shm_rings_reserve(shm_rings_t *s, uint32_t peer, size_t max);
void  shm_rings_commit(shm_rings_t *s, uint32_t peer, size_t len);
/* 1 if peer's segment says it sleeps (call after a write that returned 1). */
int shm_rings_peer_asleep(shm_rings_t *s, uint32_t peer);
/* Delivers up to budget frames from each ring to this rank; returns how
 * many in all. A ring whose bytes make no sense is logged and read no more. */
int shm_rings_poll(shm_rings_t *s, shm_deliver_fn fn, void *ctx, int budget);
/* Before this rank sleeps: marks it asleep; 0 (and not asleep) if a ring
 * holds something. shm_rings_awake clears the mark: the thread that armed,
 * once it is up again (another thread clearing it would lose the wake-up). */
int  shm_rings_arm(shm_rings_t *s);
void shm_rings_awake(shm_rings_t *s);
/* Rank `peer` is lost: its ring to us is not read again, and ours to it is
 * not written. */
void shm_rings_forget(shm_rings_t *s, uint32_t peer);

#endif /* MOON_RUNTIME_SHM_RINGS_H */
