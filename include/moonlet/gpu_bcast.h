/* moonlet/gpu_bcast.h - the GPU path of weight pushes: a broadcast group
 * over NCCL between ranks' GPUs, fed by a pipelined host staging copy. The
 * root copies the checkpoint's bytes chunk by chunk into pinned buffers
 * (two, alternating), uploads each to its device on a copy stream and
 * broadcasts it on NCCL's stream once it is there, so the host copy of
 * chunk i+2, the upload of chunk i+1 and the broadcast of chunk i overlap.
 * Every member calls moon_gpu_bcast_open with the same unique id (the
 * root's moon_gpu_bcast_id, carried in actor messages as bytes). NCCL
 * refuses two ranks on one device: on a machine with one GPU a group has
 * one rank, which still runs the staging pipeline and the upload. Built
 * without CUDA, or with no device, every call but close says
 * MOON_ERR_UNSUPPORTED and callers take the CPU path (the bulk lane). */
#ifndef MOONLET_GPU_BCAST_H
#define MOONLET_GPU_BCAST_H

#include "moonlet/status.h"

#include <stdint.h>

MOON_EXTERN_C_BEGIN

#define MOON_GPU_BCAST_ID_BYTES 128 /* ncclUniqueId */

typedef struct moon_gpu_bcast moon_gpu_bcast_t;

typedef struct {
    uint64_t bytes;   /* broadcast */
    uint32_t chunks;  /* pipeline steps */
    double   seconds; /* moon_gpu_bcast_run, from call to the last byte in place */
    double   stage_s; /* the root's host copies into pinned buffers, summed */
} moon_gpu_bcast_stats_t;

/* A new unique id for a group (the root makes it). */
MOON_API moon_status_t moon_gpu_bcast_id(uint8_t id[MOON_GPU_BCAST_ID_BYTES]);

/* Joins the group of n_ranks (collective: every member calls it) as rank
 * (0: the root) on CUDA device dev, staging in chunks of chunk_bytes.
 * MOON_ERR_INVALID_PARAM: rank >= n_ranks, chunk_bytes 0; MOON_ERR_IO: NCCL
 * or CUDA failed (logged). */
MOON_API moon_status_t moon_gpu_bcast_open(const uint8_t id[MOON_GPU_BCAST_ID_BYTES],
                                           uint32_t n_ranks, uint32_t rank, int dev,
                                           uint64_t chunk_bytes, moon_gpu_bcast_t **g_p);

/* Broadcasts len bytes (collective): the root's host_src (any host memory)
 * lands in every member's dev_dst (device memory of len bytes, the root's
 * included). host_src is ignored on other ranks. st may be NULL. */
MOON_API moon_status_t moon_gpu_bcast_run(moon_gpu_bcast_t *g, const void *host_src, void *dev_dst,
                                          uint64_t len, moon_gpu_bcast_stats_t *st);

/* Device memory for a broadcast's destination, and back to the host (for
 * checks). */
MOON_API moon_status_t moon_gpu_bcast_alloc(moon_gpu_bcast_t *g, uint64_t len, void **dev_p);
MOON_API void          moon_gpu_bcast_free(moon_gpu_bcast_t *g, void *dev);
MOON_API moon_status_t moon_gpu_bcast_download(moon_gpu_bcast_t *g, void *host, const void *dev,
                                               uint64_t len);

/* Leaves the group (NULL: nothing). */
MOON_API void moon_gpu_bcast_close(moon_gpu_bcast_t *g);

MOON_EXTERN_C_END

#endif /* MOONLET_GPU_BCAST_H */
