/* base/gpu/gpu_cuda.cu - moonlet/gpu.h over the CUDA runtime and NCCL.
 * Linked against cudart and nccl only (never the driver stub), so binaries
 * start on machines without a GPU: cudaGetDeviceCount then fails (e.g. 35,
 * no driver) without writing the count, and we report zero devices. */
#include "moonlet/gpu.h"
#include "moonlet/log.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>

extern "C" int moon_gpu_count(void)
{
    int         n   = 0;
    cudaError_t err = cudaGetDeviceCount(&n);

    if (err != cudaSuccess) {
        MOON_DEBUG_LOG("cudaGetDeviceCount: %s (%d): no usable GPU", cudaGetErrorString(err),
                       (int)err);
        (void)cudaGetLastError(); /* clear the sticky error */
        return 0;
    }
    return n;
}

extern "C" const char *moon_gpu_describe(void)
{
    static char text[96];
    int         rt = 0, nccl = 0;

    (void)cudaRuntimeGetVersion(&rt);
    (void)ncclGetVersion(&nccl);
    snprintf(text, sizeof(text), "cuda runtime %d, nccl %d, %d device(s)", rt, nccl,
             moon_gpu_count());
    return text;
}

__global__ static void fill_kernel(float *d_out, uint32_t n)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n) {
        d_out[i] = 0.5f * (float)i;
    }
}

extern "C" moon_status_t moon_gpu_selftest(int dev, uint32_t n)
{
    float        *d_out = NULL, *h_out = NULL;
    moon_status_t status = MOON_ERR_IO;

    if (dev < 0 || dev >= moon_gpu_count() || n == 0) {
        return MOON_ERR_UNSUPPORTED;
    }
    if (cudaSetDevice(dev) != cudaSuccess || cudaMalloc(&d_out, n * sizeof(float)) != cudaSuccess ||
        cudaMallocHost(&h_out, n * sizeof(float)) != cudaSuccess) {
        goto out;
    }
    fill_kernel<<<(n + 255) / 256, 256>>>(d_out, n);
    if (cudaMemcpy(h_out, d_out, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        goto out;
    }
    status = MOON_OK;
    for (uint32_t i = 0; i < n; i++) {
        if (h_out[i] != 0.5f * (float)i) {
            status = MOON_ERR_CORRUPT;
            break;
        }
    }
out:
    if (status != MOON_OK) {
        MOON_ERROR("gpu selftest on device %d: %s", dev, moon_status_str(status));
    }
    cudaFree(d_out);
    cudaFreeHost(h_out);
    return status;
}
