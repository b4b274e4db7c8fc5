/* moonlet/transport.h - the seam between a runtime and the ranks beyond it.
 * A transport (MPI, UCX) attaches an ops table; the runtime hands it every
 * message addressed to another rank, and the transport hands received
 * messages back with moon_runtime_deliver_remote(). */
#ifndef MOONLET_TRANSPORT_H
#define MOONLET_TRANSPORT_H

#include "moonlet/actor.h"

MOON_EXTERN_C_BEGIN

typedef struct {
    const char *name; /* "ucx", "mpi" */
    /* Sends msg (header src/seq already set) to an actor on another rank.
     * MOON_OK moves ownership of msg to the transport, which releases it when
     * done; on error the caller keeps it. A full credit window is not an
     * error: the message is queued and the sending actor is muted until the
     * peer's queue drains (back-pressure through scheduling, as for a local
     * overloaded mailbox), so a transport never returns MOON_ERR_NO_RESOURCE
     * for it. MOON_ERR_PEER_LOST: that rank is gone; MOON_ERR_NO_ACTOR: no
     * such rank; MOON_ERR_INVALID_PARAM: msg cannot be encoded. Any thread. */
    moon_status_t (*send)(void *ctx, moon_addr_t to, moon_msg_hdr_t *msg);
} moon_transport_ops_t;

/* Attaches a transport before moon_runtime_start (ops and ctx are borrowed
 * until the runtime is destroyed or another is attached). */
MOON_API void moon_runtime_attach_transport(moon_runtime_t *rt, const moon_transport_ops_t *ops,
                                            void *ctx);

/* Delivers a message that arrived from another rank to local actor `to`,
 * keeping its src and seq. Ownership moves to the runtime on MOON_OK; on
 * error (MOON_ERR_NO_ACTOR: stale or unknown address) the caller keeps it and
 * should answer the sender with a SYS_ERROR. Any thread (the progress thread). */
MOON_API moon_status_t moon_runtime_deliver_remote(moon_runtime_t *rt, moon_addr_t to,
                                                   moon_msg_hdr_t *msg);

/* Called by an idle worker thread between looks at its run queues (parking
 * = 0), and once more just before it parks (parking = 1). A transport uses
 * it to let idle workers drive network progress themselves, so a message
 * that arrives is delivered and handled on the same thread, without a
 * hand-off from a progress thread (which costs a context switch when
 * mpirun binds the rank to one core). Returns how much work it did (> 0
 * resets the idle count), or < 0 when another thread of the transport is
 * busy with that work (a worker sharing its core with it then yields rather
 * than spin). Must be thread-safe; NULL detaches. */
typedef int (*moon_idle_fn)(void *ctx, int parking);
MOON_API void moon_runtime_set_idle_hook(moon_runtime_t *rt, moon_idle_fn fn, void *ctx);

/* This runtime's rank (the rank part of its actors' addresses). */
MOON_API uint32_t moon_runtime_rank(const moon_runtime_t *rt);

MOON_EXTERN_C_END

#endif /* MOONLET_TRANSPORT_H */
