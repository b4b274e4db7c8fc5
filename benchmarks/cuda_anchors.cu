/* benchmarks/cuda_anchors.cu - see cuda_anchors.h. Timed with CUDA events. */
#include "cuda_anchors.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <string.h>

static int have_device(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/* Every thread sums float4s grid-stride; the sum is stored only if it takes
 * a value the input never gives, so the loads cannot be dropped. */
__global__ static void k_read(const float4 *p, size_t n, float *sink)
{
    float  acc = 0.0f;
    size_t i   = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = p[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1.2345f) {
        *sink = acc;
    }
}

/* Bytes per second of the best of iters timed calls of pass (CUDA events
 * around each), after one untimed warm-up call. */
template <typename Pass> static double best_rate(size_t bytes, int iters, Pass pass)
{
    cudaEvent_t e0, e1;
    double      best = 0.0;

    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int it = 0; it < iters + 1; it++) { /* the first pass warms up */
        float ms = 0.0f;
        cudaEventRecord(e0);
        pass();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (it > 0 && ms > 0.0f && (double)bytes / (ms * 1e-3) > best) {
            best = (double)bytes / (ms * 1e-3);
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

extern "C" double moon_bench_cuda_read_bw(size_t bytes, int iters)
{
    float *buf = NULL, *sink = NULL;
    double best = 0.0;
    int    sms  = 0;
    size_t n    = bytes / sizeof(float4);

    if (!have_device() || cudaMalloc(&buf, n * sizeof(float4)) != cudaSuccess ||
        cudaMalloc(&sink, sizeof(float)) != cudaSuccess) {
        cudaFree(buf);
        return 0.0;
    }
    cudaMemset(buf, 0x3c, n * sizeof(float4)); /* 0.0115f: no zero fast path */
    {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    }
    best = best_rate(bytes, iters, [&] { k_read<<<sms * 8, 512>>>((const float4 *)buf, n, sink); });
    cudaFree(buf);
    cudaFree(sink);
    return best;
}

extern "C" double moon_bench_cuda_sgemm_flops(int m, const int *n, const int *k, const int *count,
                                              int n_shapes, int iters)
{
    cublasHandle_t h = NULL;
    float         *X = NULL, *W = NULL, *Y = NULL;
    int            maxn = 0, maxk = 0;
    double         flops = 0.0, best = 0.0;
    const float    one = 1.0f, zero = 0.0f;
    cudaEvent_t    e0, e1;

    for (int i = 0; i < n_shapes; i++) {
        maxn = n[i] > maxn ? n[i] : maxn;
        maxk = k[i] > maxk ? k[i] : maxk;
        flops += 2.0 * m * n[i] * (double)k[i] * count[i];
    }
    if (!have_device() || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cudaMalloc(&X, (size_t)m * maxk * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&W, (size_t)maxn * maxk * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&Y, (size_t)m * maxn * sizeof(float)) != cudaSuccess) {
        best = 0.0;
        goto out;
    }
    cudaMemset(X, 0x3c, (size_t)m * maxk * sizeof(float));
    cudaMemset(W, 0x3c, (size_t)maxn * maxk * sizeof(float));
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int it = 0; it < iters + 1; it++) {
        float ms = 0.0f;
        cudaEventRecord(e0);
        for (int i = 0; i < n_shapes; i++) {
            for (int c = 0; c < count[i]; c++) { /* the engine's call: W row-major (n, k) */
                cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n[i], m, k[i], &one, W, k[i], X, k[i],
                            &zero, Y, n[i]);
            }
        }
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (it > 0 && ms > 0.0f && flops / (ms * 1e-3) > best) {
            best = flops / (ms * 1e-3);
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
out:
    cudaFree(X);
    cudaFree(W);
    cudaFree(Y);
    if (h != NULL) {
        cublasDestroy(h);
    }
    return best;
}

extern "C" double moon_bench_cuda_h2d_pinned_bw(size_t bytes, int iters)
{
    void  *host = NULL, *dev = NULL;
    double best = 0.0;

    if (!have_device() || cudaMallocHost(&host, bytes) != cudaSuccess ||
        cudaMalloc(&dev, bytes) != cudaSuccess) {
        cudaFreeHost(host);
        return 0.0;
    }
    memset(host, 0x5a, bytes);
    best = best_rate(bytes, iters, [&] { cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice); });
    cudaFree(dev);
    cudaFreeHost(host);
    return best;
}
