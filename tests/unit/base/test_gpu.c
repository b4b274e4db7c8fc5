/* tests/unit/base/test_gpu.c - GPU discovery: without CUDA or without a
 * device the binary starts, reports no device and skips; with one, the
 * kernel self-check passes on every device. */
#include "moonlet/gpu.h"

#include "moon_test.h"

#include <stdio.h>
#include <string.h>

static void test_discovery_never_fails(void)
{
    int n = moon_gpu_count();

    CU_ASSERT(n >= 0);
    CU_ASSERT_PTR_NOT_NULL(moon_gpu_describe());
    printf("(%s) ", moon_gpu_describe());
    CU_ASSERT_EQUAL(moon_gpu_selftest(n, 16), MOON_ERR_UNSUPPORTED); /* no such device */
}

static void test_kernel_selftest_on_every_device(void)
{
    int n = moon_gpu_count();

    if (n == 0) {
        moon_test_skip("no device");
        return;
    }
    for (int dev = 0; dev < n; dev++) {
        CU_ASSERT_EQUAL(moon_gpu_selftest(dev, 1u << 20), MOON_OK);
    }
}

MOON_TEST_MAIN("gpu", NULL, NULL, test_discovery_never_fails, test_kernel_selftest_on_every_device)
