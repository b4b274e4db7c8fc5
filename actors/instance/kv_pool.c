/* actors/instance/kv_pool.c - KV pool in a registered region, block pulls between
 * pools (one-sided get, or memcpy in one process; nothing to copy between
 * virtual pools). */
#include "kv_pool.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/numa.h"
#include "timer_kinds.h"

#include <string.h>

/* Binds the pool's pages before any is touched (the cache zeroes each block
 * as it first hands it out), so they are first touched on the node they
 * belong to. */
static void pool_bind(const moon_kv_pool_t *pool, int32_t numa_core)
{
    int32_t node = -1;

    if (numa_core != MOON_KV_POOL_NUMA_OFF &&
        moon_numa_bind(pool->mem, pool->bytes, numa_core, &node) == MOON_OK) {
        if (numa_core >= 0) {
            MOON_INFO("kv pool: %zu MiB bound to NUMA node %d (that of the engine's core %d)",
                      pool->bytes >> 20, node, numa_core);
        } else {
            MOON_INFO("kv pool: %zu MiB bound to NUMA node %d (that of the rank's cores)",
                      pool->bytes >> 20, node);
        }
    }
}

moon_status_t moon_kv_pool_open(moon_kv_pool_t *pool, moon_dist_t *dist,
                                const moon_kv_config_t *cfg, int virt, int32_t numa_core)
{
    moon_status_t status;
    size_t        bytes = moon_kv_config_pool_bytes(cfg);

    memset(pool, 0, sizeof(*pool));
    if (bytes == 0 || (virt && dist != NULL)) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (virt) {
        return moon_kv_cache_create_virtual(cfg, &pool->kv);
    }
    pool->dist  = dist;
    pool->bytes = (bytes + 4095) / 4096 * 4096;
    if (dist != NULL) {
        status = moon_dist_region_alloc(dist, pool->bytes, &pool->mem, &pool->reg);
    } else {
        pool->mem = moon_aligned_alloc(4096, pool->bytes);
        status    = pool->mem != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
    }
    if (status != MOON_OK) {
        MOON_ERROR("kv pool: %zu bytes: %s", pool->bytes, moon_status_str(status));
        return status;
    }
    pool_bind(pool, numa_core);
    status = moon_kv_cache_create_in(cfg, pool->mem, pool->bytes, &pool->kv);
    if (status != MOON_OK) {
        moon_kv_pool_close(pool);
    }
    return status;
}

void moon_kv_pool_close(moon_kv_pool_t *pool)
{
    moon_kv_cache_destroy(pool->kv);
    if (pool->reg != NULL) {
        moon_dist_region_deregister(pool->dist, pool->reg); /* frees pool->mem */
    } else {
        moon_free(pool->mem);
    }
    memset(pool, 0, sizeof(*pool));
}

size_t moon_kv_pool_desc_bytes(const moon_kv_pool_t *pool)
{
    return pool->reg != NULL ? moon_dist_region_desc_bytes(pool->reg) : 0;
}

moon_status_t moon_kv_pool_describe(const moon_kv_pool_t *pool, void *msg, moon_span_t *desc,
                                    uint64_t *base_p)
{
    *base_p = (uint64_t)(uintptr_t)pool->mem;
    return pool->reg != NULL ? moon_dist_region_desc(pool->reg, msg, desc) : MOON_OK;
}

/* A pull in this process ended: its completion now, or after the modeled delay. */
static moon_status_t pull_done(moon_actor_t *self, uint64_t cookie, size_t bytes, uint64_t delay_ns)
{
    moon_dist_bulk_done_t *done;

    if (delay_ns > 0) {
        uint64_t timer;
        return moon_timer_start_kind(self, MOON_TIMER_KIND_KV_POOL, delay_ns, 0, cookie, &timer);
    }
    if ((done = moon_msg_new(MOON_MSG_DIST_BULK_DONE, 0)) == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    done->cookie = cookie;
    done->status = MOON_OK;
    done->bytes  = bytes;
    return moon_tell(self, moon_actor_addr(self), &done->hdr);
}

moon_status_t moon_kv_pool_pull(moon_kv_pool_t *pool, moon_actor_t *self, uint32_t block,
                                const void *desc, size_t desc_len, uint64_t base,
                                uint32_t remote_block, uint64_t cookie, uint64_t delay_ns)
{
    size_t   bb    = moon_kv_block_bytes(pool->kv);
    void    *local = moon_kv_block_data(pool->kv, block);
    uint64_t off   = (uint64_t)remote_block * bb;

    moon_kv_block_mark_written(pool->kv, block);
    if (local == NULL) {
        if (desc_len > 0 || base != 0) {
            return MOON_ERR_INVALID_PARAM; /* a virtual pool pulls from virtual ones only */
        }
        return pull_done(self, cookie, bb, delay_ns);
    }
    if (desc_len > 0) {
        if (pool->dist == NULL) {
            return MOON_ERR_INVALID_PARAM;
        }
        return moon_dist_get(pool->dist, local, pool->reg, desc, desc_len, off, bb,
                             moon_actor_addr(self), cookie);
    }
    if (base == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    /* One process: the peer's pool is at base; its blocks stay put until we
     * answer KV_DONE, like a remote one. */
    memcpy(local, (const char *)(uintptr_t)base + off, bb);
    return pull_done(self, cookie, bb, delay_ns);
}

moon_status_t moon_kv_pool_pullv(moon_kv_pool_t *pool, moon_actor_t *self, const uint32_t *blocks,
                                 const uint32_t *remote_blocks, uint32_t n, const void *desc,
                                 size_t desc_len, uint64_t base, uint64_t cookie, uint64_t delay_ns)
{
    size_t           bb = moon_kv_block_bytes(pool->kv);
    moon_dist_iov_t *iov;
    moon_status_t    status;

    if (n == 0 || n > MOON_DIST_IOV_MAX || blocks == NULL || remote_blocks == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_kv_block_data(pool->kv, blocks[0]) == NULL) {
        if (desc_len > 0 || base != 0) {
            return MOON_ERR_INVALID_PARAM; /* a virtual pool pulls from virtual ones only */
        }
        for (uint32_t k = 0; k < n; k++) {
            moon_kv_block_mark_written(pool->kv, blocks[k]);
        }
        return pull_done(self, cookie, bb * n, delay_ns);
    }
    if (desc_len > 0) {
        if (pool->dist == NULL) {
            return MOON_ERR_INVALID_PARAM;
        }
        if ((iov = moon_malloc((size_t)n * sizeof(*iov))) == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        for (uint32_t k = 0; k < n; k++) {
            iov[k] = (moon_dist_iov_t){moon_kv_block_data(pool->kv, blocks[k]),
                                       (uint64_t)remote_blocks[k] * bb, bb};
        }
        status = moon_dist_getv(pool->dist, iov, n, pool->reg, desc, desc_len,
                                moon_actor_addr(self), cookie);
        moon_free(iov);
        for (uint32_t k = 0; status == MOON_OK && k < n; k++) {
            moon_kv_block_mark_written(pool->kv, blocks[k]);
        }
        return status;
    }
    if (base == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    /* One process: the peer's pool is at base (see moon_kv_pool_pull). */
    for (uint32_t k = 0; k < n; k++) {
        moon_kv_block_mark_written(pool->kv, blocks[k]);
        memcpy(moon_kv_block_data(pool->kv, blocks[k]),
               (const char *)(uintptr_t)base + (uint64_t)remote_blocks[k] * bb, bb);
    }
    return pull_done(self, cookie, bb * n, delay_ns);
}

int moon_kv_pool_timer(const moon_msg_hdr_t *msg, uint64_t *cookie_p)
{
    const moon_sys_timer_t *t = (const void *)msg;

    if (msg->type != MOON_MSG_SYS_TIMER || t->kind != MOON_TIMER_KIND_KV_POOL) {
        return 0;
    }
    *cookie_p = t->cookie;
    return 1;
}
