/* actors/serve/conductor.h - the conductor actor (see conductor.c): the entry of
 * every request. Spawn with moon_spawn(rt, &moon_conductor_ops, &args, opts
 * with flags MOON_SPAWN_CONTROL). Instances make themselves known by their
 * LOAD reports. */
#ifndef MOON_ACTORS_CONDUCTOR_H
#define MOON_ACTORS_CONDUCTOR_H

#include "moonlet/actor.h"
#include "moonlet/kv_key.h"
#include "moonlet/model.h"
#include "moonlet/serve_client.h"

#include <stdatomic.h>

typedef struct {
    const moon_model_t *model;               /* borrowed (tokenizer, context): outlives the actor */
    moon_kv_tag_t       tag;                 /* the deployment's store tag (moon_serve_model_tag) */
    uint32_t            block_tokens;        /* the deployment's block size */
    uint32_t            max_requests;        /* in flight at once (0: 4096); more are rejected */
    uint32_t            n_prefill, n_decode; /* instances of each role (ids 0..n-1) */
    int                 colocated;           /* n_decode colocated instances (n_prefill 0) */
    const moon_addr_t  *shards;              /* store shards whose events feed the prefix index
                                                (copied); n_shards 0: no store */
    uint32_t    n_shards;
    const char *policy;                 /* scheduler policy name (NULL: the default) */
    double      ttft_slo_s;             /* 0: none */
    double      tbt_slo_s;              /* 0: none */
    double      balance_threshold;      /* mooncake's pull threshold (0: default) */
    double      shed_after, shed_share; /* moonlet's shedding by cost (0: defaults) */
    double      kv_link_bytes_per_s;    /* prefill <- store / decode <- prefill (0: 10 GB/s) */
    uint64_t    kv_block_bytes;         /* KV bytes a block moves (0: the model's in fp32; a
                                           cluster gives its cache type's, a simulation its
                                           modeled model's) */
    uint64_t seed;
    /* where the conductor publishes when the last request arrived (moon_now),
     * for the weight broadcaster beside it, which slows its reading of a
     * checkpoint while that is recent (NULL: not published) */
    _Atomic uint64_t *busy_ns;
} moon_conductor_args_t;

MOON_API extern const moon_actor_ops_t moon_conductor_ops;

#endif /* MOON_ACTORS_CONDUCTOR_H */
