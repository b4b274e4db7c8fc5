/* benchmarks/cuda_anchors.h - the GPU anchors of the model suite and of the
 * weights' GPU path (MOON_WITH_CUDA builds): what the device itself reaches,
 * measured in the same run as the figures they anchor. Each returns <= 0
 * without a device. */
#ifndef MOON_BENCH_CUDA_ANCHORS_H
#define MOON_BENCH_CUDA_ANCHORS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device-memory read bandwidth (bytes/s): a read-only kernel over `bytes`,
 * best of iters passes. */
double moon_bench_cuda_read_bw(size_t bytes, int iters);

/* cuBLAS sgemm FLOP rate (FLOP/s) over the GEMM shapes given: for each i,
 * count[i] products Y (m, n[i]) = X (m, k[i]) W^T, as the engine lays them
 * out; best of iters passes over all of them. */
double moon_bench_cuda_sgemm_flops(int m, const int *n, const int *k, const int *count,
                                   int n_shapes, int iters);

/* Host-to-device copy bandwidth (bytes/s) of a plain cudaMemcpy from pinned
 * memory, `bytes` at a time; best of iters passes (the weights_gpu suite's
 * anchor). */
double moon_bench_cuda_h2d_pinned_bw(size_t bytes, int iters);

#ifdef __cplusplus
}
#endif

#endif /* MOON_BENCH_CUDA_ANCHORS_H */
