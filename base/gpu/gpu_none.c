/* base/gpu/gpu_none.c - moonlet/gpu.h when built without CUDA. */
#include "moonlet/gpu.h"

int moon_gpu_count(void)
{
    return 0;
}

const char *moon_gpu_describe(void)
{
    return "none (built without CUDA)";
}

moon_status_t moon_gpu_selftest(int dev, uint32_t n)
{
    (void)dev;
    (void)n;
    return MOON_ERR_UNSUPPORTED;
}
