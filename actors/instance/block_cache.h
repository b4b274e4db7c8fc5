/* actors/instance/block_cache.h - an instance's own prefix cache: full KV blocks of
 * finished prompts kept in its pool under their block keys, so a later
 * request sharing the prefix appends them instead of computing them (what
 * vLLM's automatic prefix caching does per instance). The cache holds one
 * reference on each block; least recently used blocks go first when the
 * pool needs room. Owned by one actor. */
#ifndef MOON_ACTORS_BLOCK_CACHE_H
#define MOON_ACTORS_BLOCK_CACHE_H

#include "moonlet/htab.h"
#include "moonlet/kv_cache.h"
#include "moonlet/kv_key.h"

typedef struct moon_block_cache moon_block_cache_t;

/* A cache over kv (borrowed) of at most max_blocks blocks. */
MOON_API moon_status_t moon_block_cache_create(moon_kv_cache_t *kv, uint32_t max_blocks,
                                               moon_block_cache_t **cache_p);
/* Drops every reference and frees. NULL: no-op. */
MOON_API void moon_block_cache_destroy(moon_block_cache_t *cache);
/* The leading keys cached: appends their blocks to seq (empty, block-aligned)
 * and returns how many (at most n). Touches them (most recently used). */
MOON_API uint32_t moon_block_cache_take(moon_block_cache_t *cache, const moon_kv_key_t *keys,
                                        uint32_t n, uint32_t seq);
/* How many leading keys are cached (no change). */
MOON_API uint32_t moon_block_cache_prefix(const moon_block_cache_t *cache,
                                          const moon_kv_key_t *keys, uint32_t n);
/* Keeps block under key (takes a reference); a key already cached is only
 * touched. May evict the least recently used. */
MOON_API void moon_block_cache_put(moon_block_cache_t *cache, moon_kv_key_t key, uint32_t block);
/* Drops least recently used blocks until the pool has want free blocks or
 * the cache is empty; returns the pool's free blocks. */
MOON_API uint32_t moon_block_cache_make_room(moon_block_cache_t *cache, uint32_t want);
/* Told of every key that enters (stored 1) or leaves (evicted 0) the
 * cache, e.g. to publish the cache's content to the conductor. */
typedef void (*moon_block_cache_listener_t)(void *arg, int stored, moon_kv_key_t key);
/* Sets (fn NULL: clears) the listener. */
MOON_API void moon_block_cache_listen(moon_block_cache_t *cache, moon_block_cache_listener_t fn,
                                      void *arg);
/* Calls fn(arg, 1, key) for every cached key (a snapshot for the listener). */
MOON_API void moon_block_cache_foreach(const moon_block_cache_t   *cache,
                                       moon_block_cache_listener_t fn, void *arg);
/* Blocks the cache holds (only it, or shared with sequences). */
MOON_API uint32_t moon_block_cache_count(const moon_block_cache_t *cache);
/* Blocks only the cache holds: the room make_room can give back. */
MOON_API uint32_t moon_block_cache_idle(const moon_block_cache_t *cache);

#endif /* MOON_ACTORS_BLOCK_CACHE_H */
