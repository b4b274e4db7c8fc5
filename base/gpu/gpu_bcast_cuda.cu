/* base/gpu/gpu_bcast_cuda.cu - moonlet/gpu_bcast.h over NCCL and the CUDA
 * runtime: a communicator, a copy stream and a collective stream per
 * member; on the root two pinned staging buffers, each with an event that
 * says its upload is done (so it may be refilled). */
#include "moonlet/gpu.h"
#include "moonlet/gpu_bcast.h"
#include "moonlet/log.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static_assert(sizeof(ncclUniqueId) == MOON_GPU_BCAST_ID_BYTES, "ncclUniqueId size changed");

struct moon_gpu_bcast {
    ncclComm_t   comm;
    cudaStream_t copy, coll;
    void        *pinned[2];   /* root only */
    cudaEvent_t  uploaded[2]; /* pinned[i]'s last upload is done */
    uint64_t     chunk;
    uint32_t     rank, n_ranks;
    int          dev;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cuda_ok(cudaError_t err, const char *what)
{
    if (err == cudaSuccess) {
        return 1;
    }
    MOON_ERROR("gpu bcast: %s: %s", what, cudaGetErrorString(err));
    (void)cudaGetLastError();
    return 0;
}

static int nccl_ok(ncclResult_t res, const char *what)
{
    if (res == ncclSuccess) {
        return 1;
    }
    MOON_ERROR("gpu bcast: %s: %s", what, ncclGetErrorString(res));
    return 0;
}

extern "C" moon_status_t moon_gpu_bcast_id(uint8_t id[MOON_GPU_BCAST_ID_BYTES])
{
    ncclUniqueId u;

    if (moon_gpu_count() == 0) {
        return MOON_ERR_UNSUPPORTED;
    }
    if (!nccl_ok(ncclGetUniqueId(&u), "ncclGetUniqueId")) {
        return MOON_ERR_IO;
    }
    memcpy(id, &u, sizeof(u));
    return MOON_OK;
}

extern "C" void moon_gpu_bcast_close(moon_gpu_bcast_t *g)
{
    if (g == NULL) {
        return;
    }
    (void)cudaSetDevice(g->dev);
    if (g->comm != NULL) {
        ncclCommDestroy(g->comm);
    }
    for (int i = 0; i < 2; i++) {
        if (g->uploaded[i] != NULL) {
            cudaEventDestroy(g->uploaded[i]);
        }
        cudaFreeHost(g->pinned[i]);
    }
    if (g->copy != NULL) {
        cudaStreamDestroy(g->copy);
    }
    if (g->coll != NULL) {
        cudaStreamDestroy(g->coll);
    }
    free(g);
}

extern "C" moon_status_t moon_gpu_bcast_open(const uint8_t id[MOON_GPU_BCAST_ID_BYTES],
                                             uint32_t n_ranks, uint32_t rank, int dev,
                                             uint64_t chunk_bytes, moon_gpu_bcast_t **g_p)
{
    moon_gpu_bcast_t *g;
    ncclUniqueId      u;
    int               ok;

    *g_p = NULL;
    if (id == NULL || n_ranks == 0 || rank >= n_ranks || chunk_bytes == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (dev < 0 || dev >= moon_gpu_count()) {
        return MOON_ERR_UNSUPPORTED;
    }
    g = (moon_gpu_bcast_t *)calloc(1, sizeof(*g));
    if (g == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    g->chunk   = chunk_bytes;
    g->rank    = rank;
    g->n_ranks = n_ranks;
    g->dev     = dev;
    memcpy(&u, id, sizeof(u));
    ok = cuda_ok(cudaSetDevice(dev), "cudaSetDevice") &&
         cuda_ok(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking), "copy stream") &&
         cuda_ok(cudaStreamCreateWithFlags(&g->coll, cudaStreamNonBlocking), "nccl stream");
    for (int i = 0; ok && i < 2; i++) {
        ok = cuda_ok(cudaEventCreateWithFlags(&g->uploaded[i], cudaEventDisableTiming), "event") &&
             (rank != 0 || cuda_ok(cudaMallocHost(&g->pinned[i], chunk_bytes), "pinned staging"));
    }
    ok = ok && nccl_ok(ncclCommInitRank(&g->comm, (int)n_ranks, u, (int)rank), "ncclCommInitRank");
    if (!ok) {
        moon_gpu_bcast_close(g);
        return MOON_ERR_IO;
    }
    *g_p = g;
    return MOON_OK;
}

extern "C" moon_status_t moon_gpu_bcast_run(moon_gpu_bcast_t *g, const void *host_src,
                                            void *dev_dst, uint64_t len, moon_gpu_bcast_stats_t *st)
{
    double   t0 = now_s(), stage = 0;
    uint32_t n = 0;
    int      ok;

    if (g == NULL || dev_dst == NULL || (g->rank == 0 && host_src == NULL && len > 0)) {
        return MOON_ERR_INVALID_PARAM;
    }
    ok = cuda_ok(cudaSetDevice(g->dev), "cudaSetDevice");
    for (uint64_t off = 0; ok && off < len; off += g->chunk, n++) {
        uint64_t k   = len - off < g->chunk ? len - off : g->chunk;
        char    *dst = (char *)dev_dst + off;
        if (g->rank == 0) {
            int    b  = (int)(n % 2);
            double ts = now_s();
            /* the host copy of this chunk overlaps the upload of the last
             * one and the broadcast of the one before */
            ok = cuda_ok(cudaEventSynchronize(g->uploaded[b]), "staging buffer wait");
            if (!ok) {
                break;
            }
            memcpy(g->pinned[b], (const char *)host_src + off, k);
            stage += now_s() - ts;
            ok = cuda_ok(cudaMemcpyAsync(dst, g->pinned[b], k, cudaMemcpyHostToDevice, g->copy),
                         "upload") &&
                 cuda_ok(cudaEventRecord(g->uploaded[b], g->copy), "event record") &&
                 cuda_ok(cudaStreamWaitEvent(g->coll, g->uploaded[b], 0), "stream wait");
        }
        ok = ok &&
             nccl_ok(ncclBroadcast(dst, dst, k, ncclInt8, 0, g->comm, g->coll), "ncclBroadcast");
    }
    ok = ok && cuda_ok(cudaStreamSynchronize(g->coll), "broadcast wait") &&
         cuda_ok(cudaStreamSynchronize(g->copy), "upload wait");
    if (st != NULL) {
        *st = (moon_gpu_bcast_stats_t){len, n, now_s() - t0, stage};
    }
    return ok ? MOON_OK : MOON_ERR_IO;
}

extern "C" moon_status_t moon_gpu_bcast_alloc(moon_gpu_bcast_t *g, uint64_t len, void **dev_p)
{
    *dev_p = NULL;
    if (g == NULL || len == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    return cuda_ok(cudaSetDevice(g->dev), "cudaSetDevice") &&
                   cuda_ok(cudaMalloc(dev_p, len), "cudaMalloc")
               ? MOON_OK
               : MOON_ERR_NO_MEMORY;
}

extern "C" void moon_gpu_bcast_free(moon_gpu_bcast_t *g, void *dev)
{
    if (g != NULL && dev != NULL) {
        (void)cudaSetDevice(g->dev);
        cudaFree(dev);
    }
}

extern "C" moon_status_t moon_gpu_bcast_download(moon_gpu_bcast_t *g, void *host, const void *dev,
                                                 uint64_t len)
{
    if (g == NULL || host == NULL || dev == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    return cuda_ok(cudaSetDevice(g->dev), "cudaSetDevice") &&
                   cuda_ok(cudaMemcpy(host, dev, len, cudaMemcpyDeviceToHost), "download")
               ? MOON_OK
               : MOON_ERR_IO;
}
