/* actors/weights_bcast.h - the weight-sync broadcaster: takes a push of a
 * new checkpoint, streams it down a chain of its receivers (one per prefill
 * and decode instance), has them check and install it, and switches the
 * conductor to it (weights_msgs.h). One per cluster, beside the conductor;
 * registered as "weights". One push at a time. */
#ifndef MOON_ACTORS_WEIGHTS_BCAST_H
#define MOON_ACTORS_WEIGHTS_BCAST_H

#include "moonlet/actor.h"
#include "moonlet/dist.h"
#include "moonlet/model.h"

#include <stdatomic.h>

typedef struct {
    moon_dist_t        *dist;        /* borrowed: outlives the actor */
    moon_addr_t         conductor;   /* FLIP goes there */
    const moon_model_t *model;       /* the deployment's: what a push must match */
    uint32_t            n_receivers; /* receivers a push waits for (prefill + decode) */
    uint64_t            chunk_bytes; /* --weights-chunk-mib */
    uint64_t            timeout_ns;  /* a push not done by then is rolled back (0: 120 s) */
    /* when the last request reached the conductor (conductor.h's busy_ns;
     * NULL: never) and the share of the time reading a checkpoint takes
     * while that is recent (weights_pace.h) */
    const _Atomic uint64_t *busy_ns;
    double                  busy_share;
} moon_weights_bcast_args_t;

MOON_API extern const moon_actor_ops_t moon_weights_bcast_ops;

#endif /* MOON_ACTORS_WEIGHTS_BCAST_H */
