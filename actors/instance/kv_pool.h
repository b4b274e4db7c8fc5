/* actors/instance/kv_pool.h - a serving instance's paged KV cache placed in memory
 * peers reach directly: with a distributed runtime the pool is one region
 * (moon_dist_region_alloc), so store gets land in it and the decode instance
 * pulls a sequence's blocks straight out of the prefill instance's pool; in
 * one process (dist NULL) peers copy at the pool's address.
 * Owned by one actor and used from its turns only. */
#ifndef MOON_ACTORS_KV_POOL_H
#define MOON_ACTORS_KV_POOL_H

#include "moonlet/actor.h"
#include "moonlet/dist.h"
#include "moonlet/kv_cache.h"

typedef struct {
    moon_kv_cache_t    *kv;
    moon_dist_t        *dist; /* borrowed; NULL: one process */
    moon_dist_region_t *reg;  /* NULL without dist */
    void               *mem;
    size_t              bytes;
} moon_kv_pool_t;

/* Creates the cache of cfg in a registered region (or plain memory). virt
 * (a simulation, dist NULL): a virtual cache, no payload memory at all
 * (moon_kv_cache_create_virtual); its blocks' data pointers are NULL, its
 * base 0, and pulls between virtual pools move nothing. */
/* numa_core: MOON_KV_POOL_NUMA_OFF leaves the pages where the kernel puts
 * them; >= 0 binds them to the NUMA node(s) of that core (the engine's
 * first, when its threads are pinned), -1 to those of the process's cores
 * (numa.h); a refused binding is logged and the pool opens all the same. */
#define MOON_KV_POOL_NUMA_OFF INT32_MIN
MOON_API moon_status_t moon_kv_pool_open(moon_kv_pool_t *pool, moon_dist_t *dist,
                                         const moon_kv_config_t *cfg, int virt, int32_t numa_core);
MOON_API void          moon_kv_pool_close(moon_kv_pool_t *pool); /* zeroed or opened */

/* Writes the pool's descriptor into msg's bytes span and its address in this
 * process into *base_p (what a peer in the same process copies from). */
MOON_API moon_status_t moon_kv_pool_describe(const moon_kv_pool_t *pool, void *msg,
                                             moon_span_t *desc, uint64_t *base_p);
/* Tail bytes a message needs for the descriptor. */
MOON_API size_t moon_kv_pool_desc_bytes(const moon_kv_pool_t *pool);

/* Copies remote block remote_block of a peer's pool (desc/desc_len, base: as
 * from moon_kv_pool_describe; desc_len 0 = same process) into local block
 * block of this pool. MOON_OK: self gets DIST_BULK_DONE {cookie, status}
 * (in one process at once, or, with delay_ns > 0 (a simulation's modeled
 * move), a TIMER of kind MOON_TIMER_KIND_KV_POOL with cookie after
 * delay_ns: see moon_kv_pool_timer). MOON_ERR_INVALID_PARAM: bad descriptor. */
MOON_API moon_status_t moon_kv_pool_pull(moon_kv_pool_t *pool, moon_actor_t *self, uint32_t block,
                                         const void *desc, size_t desc_len, uint64_t base,
                                         uint32_t remote_block, uint64_t cookie, uint64_t delay_ns);
/* The same for n blocks (1..MOON_DIST_IOV_MAX): remote_blocks[k] into
 * blocks[k] (both borrowed for the call), moved together with ONE
 * completion (one moon_dist_getv, or one DIST_BULK_DONE / timer in one
 * process), bytes the sum. Statuses as for pull; nothing moves on an error. */
MOON_API moon_status_t moon_kv_pool_pullv(moon_kv_pool_t *pool, moon_actor_t *self,
                                          const uint32_t *blocks, const uint32_t *remote_blocks,
                                          uint32_t n, const void *desc, size_t desc_len,
                                          uint64_t base, uint64_t cookie, uint64_t delay_ns);
/* 1 when msg is the timer of a delayed pull: *cookie_p gets its cookie. */
MOON_API int moon_kv_pool_timer(const moon_msg_hdr_t *msg, uint64_t *cookie_p);

#endif /* MOON_ACTORS_KV_POOL_H */
