/* runtime/dist/dist_internal.h - what the distributed runtime (dist.c and the
 * dist_*.c beside it) shares with its engines (engine/engine_ucx.c,
 * engine/engine_mpi.c). Private to runtime/; the runtime's own state is in
 * dist_state.h, which engines do not include.
 *
 * dist.c owns everything above the wire: per-peer send queues, batching,
 * credits, heartbeats, names, monitors, bulk-op slicing. An engine only moves
 * frames (opaque byte strings, in order per peer) and bulk slices, and reports
 * completions; every engine entry point except mem_map/mem_unmap runs on the
 * progress thread. */
#ifndef MOON_RUNTIME_DIST_INTERNAL_H
#define MOON_RUNTIME_DIST_INTERNAL_H

#include "runtime_internal.h"

#include "moonlet/dist.h"

/* A frame buffer: built and freed by dist.c on the progress thread. */
typedef struct dist_buf {
    struct dist_buf *next;
    moon_dist_t     *d; /* the owner: lets an engine's completion find it */
    uint32_t         cap, len;
    uint32_t         peer;
    uint32_t         big; /* not from the pool */
    char             data[];
} dist_buf_t;

/* One bulk transfer, sliced. Engine fields are the engine's. */
typedef struct bulk_op {
    struct bulk_op *next;
    moon_dist_t    *d; /* the owner: lets an engine's completion find it */
    int             is_put;
    int             stream; /* the remote region is MOON_DIST_REGION_STREAM */
    uint32_t        peer;
    char           *local;
    void           *local_memh; /* engine memh of local_reg, or NULL */
    uint64_t        remote_addr;
    uint64_t        region_id;   /* the owner's id of the remote region */
    uint64_t        region_addr; /* the whole remote region (its descriptor) */
    size_t          region_len;
    size_t          len, issued;
    uint32_t        n_inflight;
    int             finished; /* completion message sent */
    uint64_t        lost_ns;  /* when its peer was lost (dist_bulk.c), or 0 */
    int             flushed;  /* put: remote completion requested */
    moon_status_t   status;
    moon_addr_t     reply_to;
    uint64_t        cookie;
    void           *eng_rkey; /* engine: unpacked remote key */
    uint64_t        eng_id;   /* engine: MPI tag space */
    uint32_t        rkey_len;
    char           *rkey; /* packed rkey copy, owned */
    struct bulk_group
        *group; /* getv/putv: the one completion of its entries (dist_bulk.c), or NULL */
} bulk_op_t;

typedef struct {
    const char *name;
    /* main thread, collective, before the progress thread starts */
    moon_status_t (*open)(moon_dist_t *d);
    /* main thread, after the progress thread stopped */
    void (*close)(moon_dist_t *d);
    /* Sends buf (buf->len bytes) to buf->peer in order. The engine calls
     * dist_frame_done(d, buf, status) once buf may be reused (maybe inline). */
    moon_status_t (*send_frame)(moon_dist_t *d, dist_buf_t *buf);
    /* Optional: room for a frame of at most max bytes to peer, written in
     * place (no frame buffer, no copy), or NULL (then send_frame). Called
     * only when nothing else waits for peer; frame_commit(d, peer, len)
     * sends the first len bytes, in order after everything sent before. */
    void *(*frame_reserve)(moon_dist_t *d, uint32_t peer, size_t max);
    void (*frame_commit)(moon_dist_t *d, uint32_t peer, size_t len);
    /* Drives the engine; returns the number of events seen. */
    int (*progress)(moon_dist_t *d);
    /* Fd that becomes readable on engine activity, or -1 (then the progress
     * thread naps briefly instead of sleeping on it). */
    int (*event_fd)(moon_dist_t *d);
    /* 1 if sleeping on event_fd is safe now (nothing pending). */
    int (*arm)(moon_dist_t *d);
    /* The thread that armed is up again (NULL: nothing to do). */
    void (*disarm)(moon_dist_t *d);
    /* Any thread: registers memory; *rkey_p (packed, engine-owned) travels. */
    moon_status_t (*mem_map)(moon_dist_t *d, void *addr, size_t len, void **memh_p, void **rkey_p,
                             size_t *rkey_len_p);
    void (*mem_unmap)(moon_dist_t *d, void *memh, void *rkey);
    /* Optional, any thread: allocates len bytes where peers reach them fastest
     * and registers them as mem_map does; mem_unmap frees them. NULL: dist.c
     * allocates from the heap and calls mem_map. */
    moon_status_t (*mem_alloc)(moon_dist_t *d, size_t len, void **addr_p, void **memh_p,
                               void **rkey_p, size_t *rkey_len_p);
    /* Optional: the bulk slice size that suits the engine's transports
     * (default 1 MiB). A slice bounds how long control frames may wait
     * behind bulk data inside one progress call. */
    size_t (*slice_bytes)(moon_dist_t *d);
    /* Issues [off, off + n) of op; completion: dist_bulk_slice_done(). */
    moon_status_t (*rma)(moon_dist_t *d, bulk_op_t *op, size_t off, size_t n);
    /* Put: makes the issued slices visible at the target; completion (inline
     * or later) through dist_bulk_slice_done(). NULL: puts complete remotely. */
    moon_status_t (*flush)(moon_dist_t *d, bulk_op_t *op);
    /* Frees engine state of op (rkey). */
    void (*bulk_release)(moon_dist_t *d, bulk_op_t *op);
    /* Optional: peer's region region_id was deregistered by its owner: drop
     * what is cached for it (a mapping keeps the owner's memory alive);
     * returns how many cached keys were dropped. */
    int (*region_gone)(moon_dist_t *d, uint32_t peer, uint64_t region_id);
    /* Peer r is lost: drop its endpoint without waiting for it. */
    void (*peer_lost)(moon_dist_t *d, uint32_t r);
    /* Optional: frames of kinds >= DIST_FRAME_ENGINE go here; returns 0 for
     * a malformed one (dist.c counts it). */
    int (*on_engine_frame)(moon_dist_t *d, uint32_t src, uint32_t kind, const void *body,
                           size_t len);
} dist_engine_ops_t;

#define DIST_FRAME_ENGINE 16 /* first frame kind reserved for engines */

extern const dist_engine_ops_t moon_dist_engine_mpi;
#ifdef MOON_WITH_UCX
extern const dist_engine_ops_t moon_dist_engine_ucx;
#endif

/* dist*.c, for engines (progress thread unless noted) */
void    *moon_dist_engine_ctx(moon_dist_t *d);
void     moon_dist_set_engine_ctx(moon_dist_t *d, void *ctx);
uint32_t moon_dist_rank_(const moon_dist_t *d);
/* Where a rank's process runs: to tell a dead peer from a silent live one,
 * and which ranks share a host. */
typedef struct {
    int64_t  pid;
    uint64_t host;  /* hash of the host name */
    uint64_t start; /* start time (clock ticks since boot; 0: unknown): pid reuse */
} dist_proc_t;
/* Every rank's, gathered at init; NULL without MPI. */
const dist_proc_t *dist_procs(const moon_dist_t *d);
uint32_t           moon_dist_size_(const moon_dist_t *d);
void               dist_frame_done(moon_dist_t *d, dist_buf_t *buf, moon_status_t status);
void               dist_on_frame(moon_dist_t *d, const void *data, size_t len);
void               dist_peer_failed(moon_dist_t *d, uint32_t r, moon_status_t reason);
void dist_bulk_slice_done(moon_dist_t *d, bulk_op_t *op, size_t n, moon_status_t status);
/* Sends an engine frame (kind >= DIST_FRAME_ENGINE) with body to peer r. */
moon_status_t dist_send_engine_frame(moon_dist_t *d, uint32_t r, uint32_t kind, const void *body,
                                     size_t len);
/* Active bulk op with this id toward/from peer r, or NULL. */
bulk_op_t *dist_bulk_find(moon_dist_t *d, uint64_t id);
/* The communicator engines may use (MPI_Comm as a pointer-sized handle). */
void *dist_mpi_comm(moon_dist_t *d);
/* The runtime's options (moonlet/dist.h), as moon_dist_init settled them. */
const moon_dist_config_t *dist_config(const moon_dist_t *d);

#endif /* MOON_RUNTIME_DIST_INTERNAL_H */
