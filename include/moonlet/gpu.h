/* moonlet/gpu.h - GPU discovery shared by every component that may use one
 * (model backend, weight broadcaster). Built with MOON_WITH_CUDA it asks the
 * CUDA runtime; without it, or on a machine without a GPU or driver, it
 * reports no device and callers take their CPU path. Thread-safe. */
#ifndef MOONLET_GPU_H
#define MOONLET_GPU_H

#include "moonlet/status.h"

MOON_EXTERN_C_BEGIN

/* Number of usable CUDA devices: 0 when built without CUDA, when no driver is
 * installed, or when cudaGetDeviceCount fails (its error is logged at debug). */
MOON_API int moon_gpu_count(void);

/* "cuda <runtime version>, nccl <version>" or "none" (never NULL; static). */
MOON_API const char *moon_gpu_describe(void);

/* Device self-check: runs a kernel on device dev that writes n floats, copies
 * them back and verifies them. MOON_ERR_UNSUPPORTED without CUDA or device. */
MOON_API moon_status_t moon_gpu_selftest(int dev, uint32_t n);

MOON_EXTERN_C_END

#endif /* MOONLET_GPU_H */
