/* actors/conductor.h - the conductor actor (see conductor.c): the entry of
 * every request. Spawn with moon_spawn(rt, &moon_conductor_ops, &args, opts
 * with flags MOON_SPAWN_CONTROL). Instances make themselves known by their
 * LOAD reports. */
#ifndef MOON_ACTORS_CONDUCTOR_H
#define MOON_ACTORS_CONDUCTOR_H

#include "moonlet/actor.h"
#include "moonlet/kv_key.h"
#include "moonlet/model.h"
#include "serve_client.h"

typedef struct {
    const moon_model_t *model;        /* borrowed (tokenizer, context): outlives the actor */
    moon_kv_tag_t       tag;          /* the deployment's store tag (moon_serve_model_tag) */
    uint32_t            block_tokens; /* the deployment's block size */
    uint32_t            max_requests; /* in flight at once (0: 4096); more are rejected */
    /* private: placement cursors */
    uint32_t rr_prefill, rr_decode;
} moon_conductor_args_t;

MOON_API extern const moon_actor_ops_t moon_conductor_ops;

#endif /* MOON_ACTORS_CONDUCTOR_H */
