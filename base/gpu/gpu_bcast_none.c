/* base/gpu/gpu_bcast_none.c - moonlet/gpu_bcast.h when built without CUDA:
 * the arguments are checked as the CUDA build checks them, then there is no
 * device. */
#include "moonlet/gpu_bcast.h"

#include <stddef.h>

moon_status_t moon_gpu_bcast_id(uint8_t id[MOON_GPU_BCAST_ID_BYTES])
{
    (void)id;
    return MOON_ERR_UNSUPPORTED;
}

moon_status_t moon_gpu_bcast_open(const uint8_t id[MOON_GPU_BCAST_ID_BYTES], uint32_t n_ranks,
                                  uint32_t rank, int dev, uint64_t chunk_bytes,
                                  moon_gpu_bcast_t **g_p)
{
    (void)dev;
    *g_p = NULL;
    if (id == NULL || n_ranks == 0 || rank >= n_ranks || chunk_bytes == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_ERR_UNSUPPORTED;
}

moon_status_t moon_gpu_bcast_run(moon_gpu_bcast_t *g, const void *host_src, void *dev_dst,
                                 uint64_t len, moon_gpu_bcast_stats_t *st)
{
    (void)host_src;
    (void)len;
    (void)st;
    return g == NULL || dev_dst == NULL ? MOON_ERR_INVALID_PARAM : MOON_ERR_UNSUPPORTED;
}

moon_status_t moon_gpu_bcast_alloc(moon_gpu_bcast_t *g, uint64_t len, void **dev_p)
{
    (void)g;
    (void)len;
    *dev_p = NULL;
    return MOON_ERR_UNSUPPORTED;
}

void moon_gpu_bcast_free(moon_gpu_bcast_t *g, void *dev)
{
    (void)g;
    (void)dev;
}

moon_status_t moon_gpu_bcast_download(moon_gpu_bcast_t *g, void *host, const void *dev,
                                      uint64_t len)
{
    (void)g;
    (void)host;
    (void)dev;
    (void)len;
    return MOON_ERR_UNSUPPORTED;
}

void moon_gpu_bcast_close(moon_gpu_bcast_t *g)
{
    (void)g;
}
