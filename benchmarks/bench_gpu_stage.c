/* benchmarks/bench_gpu_stage.c - the weight pushes' GPU path on one device:
 * moon_gpu_bcast_run in a one-rank NCCL group (NCCL refuses two ranks on
 * one device) moves a checkpoint-sized buffer from ordinary (pageable) host
 * memory through the pinned staging pipeline onto the device, against the
 * anchor measured in the same run: a plain cudaMemcpy of the same bytes from
 * pinned memory (the link's rate with no staging to do). Rounds alternate;
 * one JSON line per size with the median ratio of the rates and its min and
 * max. Without CUDA or a device: one line saying it was skipped. Args:
 * --mib=N (256), --chunk_mib=N (8), --rounds=N (5). */
#include "bench_util.h"

#include "moonlet/gpu.h"
#include "moonlet/gpu_bcast.h"

#ifdef MOON_WITH_CUDA
#include "cuda_anchors.h"
#endif

#include <stdio.h>
#include <stdlib.h>

#ifdef MOON_WITH_CUDA
static int measure(int argc, char **argv)
{
    uint64_t               len    = (uint64_t)moon_bench_arg_int(argc, argv, "mib", 256) << 20;
    uint64_t               chunk  = (uint64_t)moon_bench_arg_int(argc, argv, "chunk_mib", 8) << 20;
    int                    rounds = (int)moon_bench_arg_int(argc, argv, "rounds", 5);
    uint8_t                id[MOON_GPU_BCAST_ID_BYTES];
    moon_gpu_bcast_t      *g   = NULL;
    moon_gpu_bcast_stats_t st  = {0};
    moon_bench_rounds_t    r   = {0};
    uint8_t               *src = NULL;
    void                  *dev = NULL;
    moon_bench_json_t      j;

    src = malloc(len);
    if (src == NULL || moon_gpu_bcast_id(id) != MOON_OK ||
        moon_gpu_bcast_open(id, 1, 0, 0, chunk, &g) != MOON_OK ||
        moon_gpu_bcast_alloc(g, len, &dev) != MOON_OK) {
        printf("{\"suite\": \"weights_gpu\", \"error\": \"no group or no memory\"}\n");
        return 1;
    }
    for (uint64_t i = 0; i < len; i++) {
        src[i] = (uint8_t)(i * 2654435761u >> 13);
    }
    (void)moon_gpu_bcast_run(g, src, dev, len, &st); /* warm-up: pages, NCCL */
    for (int k = 0; k < rounds; k++) {
        double anchor = moon_bench_cuda_h2d_pinned_bw(len, 1);
        if (moon_gpu_bcast_run(g, src, dev, len, &st) != MOON_OK) {
            printf("{\"suite\": \"weights_gpu\", \"error\": \"the broadcast failed\"}\n");
            return 1;
        }
        moon_bench_rounds_add(&r, (double)len / st.seconds, anchor);
    }
    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "suite", "weights_gpu");
    moon_bench_json_str(&j, "bench", "staging_upload");
    moon_bench_json_str(&j, "impl", "moonlet_nccl_1rank");
    moon_bench_json_str(&j, "anchor", "cudamemcpy_pinned");
    moon_bench_json_int(&j, "bytes", (int64_t)len);
    moon_bench_json_int(&j, "chunk_bytes", (int64_t)chunk);
    moon_bench_json_num(&j, "gbps_mean", moon_bench_rounds_mean(&r) * 1e-9);
    moon_bench_json_num(&j, "anchor_gbps_mean", moon_bench_rounds_anchor_mean(&r) * 1e-9);
    moon_bench_json_num(&j, "last_stage_s", st.stage_s);
    moon_bench_rounds_json(&r, &j);
    moon_bench_json_end(&j);
    moon_gpu_bcast_free(g, dev);
    moon_gpu_bcast_close(g);
    free(src);
    return 0;
}
#endif

int main(int argc, char **argv)
{
#ifdef MOON_WITH_CUDA
    if (moon_gpu_count() > 0) {
        return measure(argc, argv);
    }
    printf("{\"suite\": \"weights_gpu\", \"skipped\": \"no CUDA device\"}\n");
#else
    (void)argc;
    (void)argv;
    printf("{\"suite\": \"weights_gpu\", \"skipped\": \"built without CUDA\"}\n");
#endif
    return 0;
}
