/* tests/unit/base/test_gpu_bcast.c - the weight pushes' GPU path
 * (moonlet/gpu_bcast.h): bad arguments are refused in every build; with a
 * device, a one-rank NCCL group (NCCL refuses two ranks on one device, and
 * the lent machines have one) runs the pinned staging pipeline, the upload
 * and the broadcast of a buffer that is no multiple of the chunk, twice
 * over the same buffers, and the device holds the host's bytes. Without
 * CUDA or a device it says so and skips. */
#include "moonlet/gpu.h"
#include "moonlet/gpu_bcast.h"

#include "moon_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_bad_arguments(void)
{
    uint8_t           id[MOON_GPU_BCAST_ID_BYTES] = {0};
    moon_gpu_bcast_t *g                           = (moon_gpu_bcast_t *)&id; /* must be cleared */

    CU_ASSERT_EQUAL(moon_gpu_bcast_open(id, 2, 2, 0, 1u << 20, &g), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(g);
    CU_ASSERT_EQUAL(moon_gpu_bcast_open(id, 1, 0, 0, 0, &g), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gpu_bcast_open(NULL, 1, 0, 0, 1u << 20, &g), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gpu_bcast_open(id, 1, 0, moon_gpu_count(), 1u << 20, &g),
                    MOON_ERR_UNSUPPORTED); /* no such device */
    CU_ASSERT_EQUAL(moon_gpu_bcast_run(NULL, id, id, 1, NULL), MOON_ERR_INVALID_PARAM);
    moon_gpu_bcast_close(NULL);
}

static void test_one_rank_pipeline(void)
{
    const uint64_t         chunk = 1u << 20, len = 9 * chunk + 123;
    uint8_t                id[MOON_GPU_BCAST_ID_BYTES];
    moon_gpu_bcast_t      *g = NULL;
    moon_gpu_bcast_stats_t st;
    uint8_t               *src = malloc(len), *back = malloc(len);
    void                  *dev = NULL;

    CU_ASSERT_PTR_NOT_NULL_FATAL(src);
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    if (moon_gpu_count() == 0) {
        CU_ASSERT_EQUAL(moon_gpu_bcast_id(id), MOON_ERR_UNSUPPORTED);
        moon_test_skip("no CUDA device: the NCCL broadcast and its staging pipeline did not run");
        free(src);
        free(back);
        return;
    }
    CU_ASSERT_EQUAL_FATAL(moon_gpu_bcast_id(id), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gpu_bcast_open(id, 1, 0, 0, chunk, &g), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_gpu_bcast_alloc(g, len, &dev), MOON_OK);
    for (int round = 0; round < 2; round++) {
        for (uint64_t i = 0; i < len; i++) {
            src[i] = (uint8_t)(i * 131u + (uint64_t)round * 7u + (i >> 13));
        }
        memset(back, 0, len);
        CU_ASSERT_EQUAL(moon_gpu_bcast_run(g, src, dev, len, &st), MOON_OK);
        CU_ASSERT_EQUAL(st.bytes, len);
        CU_ASSERT_EQUAL(st.chunks, 10);
        CU_ASSERT(st.seconds > 0);
        CU_ASSERT_EQUAL(moon_gpu_bcast_download(g, back, dev, len), MOON_OK);
        CU_ASSERT_EQUAL(memcmp(src, back, len), 0);
        printf("(round %d: %.2f GB/s) ", round, (double)len / st.seconds * 1e-9);
    }
    moon_gpu_bcast_free(g, dev);
    moon_gpu_bcast_close(g);
    free(src);
    free(back);
}

int main(void)
{
    return MOON_TEST_RUN("gpu_bcast", NULL, NULL, test_bad_arguments, test_one_rank_pipeline);
}
