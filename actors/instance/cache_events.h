/* actors/instance/cache_events.h - an instance's prefix cache (block_cache.h) told
 * to the conductor as numbered events (CACHE_EVENTS), the way the store
 * shards tell their content: what enters or leaves the cache is queued by
 * the cache's listener and sent on flush; a snapshot of the whole cache
 * starts the stream and answers the conductor's CACHE_SYNC after a gap.
 * The conductor applies them to a moon_kv_index of the instance, so its
 * picture may lag: the instance never trusts it (it reuses what it holds).
 * Owned by the instance's actor. */
#ifndef MOON_ACTORS_CACHE_EVENTS_H
#define MOON_ACTORS_CACHE_EVENTS_H

#include "block_cache.h"
#include "moonlet/actor.h"

typedef struct {
    moon_kv_tag_t tag;      /* the deployment's: the index counts only its keys */
    uint32_t      instance; /* the sender's instance id */
    moon_addr_t   to;       /* the conductor */
    uint64_t      seq;      /* number of the next live event */
    uint64_t     *ev;       /* queued events, MOON_STORE_EVENT_U64S u64 each */
    uint32_t      n, cap;
} moon_cache_events_t;

/* Publishes cache's changes to `to`: sets itself as the cache's listener. */
MOON_API void moon_cache_events_init(moon_cache_events_t *ce, moon_block_cache_t *cache,
                                     uint32_t instance, const moon_kv_tag_t *tag, moon_addr_t to);
MOON_API void moon_cache_events_fini(moon_cache_events_t *ce); /* zeroed or initialised */
/* Sends the queued events (fire and forget; a message that cannot be made
 * still counts its events, so the conductor sees the gap and asks again). */
MOON_API void moon_cache_events_flush(moon_cache_events_t *ce, moon_actor_t *self);
/* Sends a snapshot of cache (parts, the first even when it is empty),
 * dropping what was queued: the snapshot holds it. */
MOON_API void moon_cache_events_snapshot(moon_cache_events_t *ce, moon_actor_t *self,
                                         const moon_block_cache_t *cache);

#endif /* MOON_ACTORS_CACHE_EVENTS_H */
