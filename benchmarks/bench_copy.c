/* benchmarks/bench_copy.c - the question: how fast can one core copy blocks
 * in the access patterns of the store's bulk lines, against the pattern of
 * their anchor? It is the ceiling of bench_kvstore_dist's get and put lines
 * on this machine (a client core does every byte's copy over shared memory).
 *   one_buffer: the same source to the same destination every time, as
 *               ucx_perftest ucp_put_bw does (memcpy; cache-resident when
 *               it fits);
 *   get:        `depth` arena slots read in turn into `depth` buffers, as
 *               the get lines do (memcpy, UCX's copy for a mapped peer);
 *   get_stream: the same with moon_copy_stream (the engine's copy for gets
 *               of 8 MiB and more);
 *   put:        one buffer written into the arena's slots in turn, as the
 *               put lines do (moon_copy_stream, the engine's copy into an
 *               arena; a slot is cold by the time it comes round again).
 * One JSON line per block size and pattern: gb_per_s. Args (or env):
 * --bytes=N (copied per line, default 8 GiB), --depth=N (default 4). */
#include "bench_util.h"
#include "kv_kinds.h"

#include "moonlet/copy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { PAT_ONE_BUFFER, PAT_GET, PAT_GET_STREAM, PAT_PUT, N_PATTERNS } pattern_t;

static const char *const pattern_names[N_PATTERNS] = {"one_buffer", "get", "get_stream", "put"};

static double run(pattern_t pat, size_t n, uint32_t n_slots, uint32_t depth, uint64_t bytes)
{
    /* the arena (every slot, as in the shard) and the client's buffers */
    uint32_t n_src    = pat == PAT_PUT ? 1 : pat == PAT_ONE_BUFFER ? 1 : depth;
    uint32_t n_dst    = pat == PAT_PUT ? n_slots : pat == PAT_ONE_BUFFER ? 1 : depth;
    char    *src      = aligned_alloc(4096, (size_t)n_src * n);
    char    *dst      = aligned_alloc(4096, (size_t)n_dst * n);
    uint64_t iters    = bytes / n > 4 ? bytes / n : 4;
    double   gb_per_s = -1;

    if (src != NULL && dst != NULL) {
        uint64_t t0;

        memset(src, 1, (size_t)n_src * n); /* every page faulted in before timing */
        memset(dst, 2, (size_t)n_dst * n);
        t0 = moon_bench_now_ns();
        for (uint64_t i = 0; i < iters; i++) {
            char       *d = dst + (size_t)(i % n_dst) * n;
            const char *s = src + (size_t)(i % n_src) * n;

            if (pat == PAT_PUT || pat == PAT_GET_STREAM) {
                moon_copy_stream(d, s, n);
            } else {
                memcpy(d, s, n);
            }
        }
        gb_per_s = (double)iters * (double)n / (double)(moon_bench_now_ns() - t0);
    }
    free(src);
    free(dst);
    return gb_per_s;
}

int main(int argc, char **argv)
{
    uint64_t bytes = (uint64_t)moon_bench_arg_int(argc, argv, "bytes", (int64_t)8 << 30);
    uint32_t depth = (uint32_t)moon_bench_arg_int(argc, argv, "depth", 4);

    for (uint32_t k = 0; k < N_BULK_KINDS; k++) {
        for (int p = 0; p < N_PATTERNS; p++) {
            double            gbs = run((pattern_t)p, kind_bytes[k], kind_slots[k], depth, bytes);
            moon_bench_json_t j;

            moon_bench_json_begin(&j);
            moon_bench_json_str(&j, "suite", "kvstore");
            moon_bench_json_str(&j, "bench", "copy");
            moon_bench_json_str(&j, "impl", "memcpy");
            moon_bench_json_str(&j, "pattern", pattern_names[p]);
            moon_bench_json_int(&j, "size_bytes", (int64_t)kind_bytes[k]);
            moon_bench_json_int(&j, "depth", depth);
            if (gbs < 0) {
                moon_bench_json_str(&j, "skipped", "no memory");
            } else {
                moon_bench_json_num(&j, "gb_per_s", gbs);
            }
            moon_bench_json_str(&j, "note", "one core's copy ceiling of the pattern");
            moon_bench_json_end(&j);
        }
    }
    return 0;
}
