/* actors/weights_recv.h - the receiving end of a weight push: one per
 * prefill or decode instance, on the instance's rank. It stages the new
 * weights in a registered region (copying the chunks it already holds,
 * getting the others from its predecessor in the broadcast chain and
 * passing each on at once), checks them (every XXH3, the GGUF parsed from
 * memory, architecture and tokenizer), and on COMMIT hands them to its
 * instance (weights_msgs.h). */
#ifndef MOON_ACTORS_WEIGHTS_RECV_H
#define MOON_ACTORS_WEIGHTS_RECV_H

#include "moonlet/actor.h"
#include "moonlet/dist.h"
#include "moonlet/model.h"

#include <stdatomic.h>

typedef struct {
    moon_dist_t        *dist;     /* borrowed: outlives the actor */
    moon_addr_t         bcast;    /* the broadcaster (HELLO at start) */
    moon_addr_t         instance; /* the instance it feeds */
    uint32_t            role;     /* MOON_SERVE_ROLE_* of the instance */
    uint32_t            index;    /* the instance's index within its role */
    const moon_model_t *model;    /* the deployment's weights (version 0); borrowed */
    /* when its instance last held requests (serve_instance.h's busy_ns;
     * NULL: never) and the share of the time the receiver copies while that
     * is recent (0 or >= 1: full speed always): see weights_pace.h */
    const _Atomic uint64_t *busy_ns;
    double                  busy_share;
} moon_weights_recv_args_t;

MOON_API extern const moon_actor_ops_t moon_weights_recv_ops;

#endif /* MOON_ACTORS_WEIGHTS_RECV_H */
