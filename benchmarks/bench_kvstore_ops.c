/* benchmarks/bench_kvstore_ops.c - in-process cost of the shard library's small
 * operations, one thread: batch exists / longest prefix of 32-key prompts,
 * reserve + memcpy + commit of 4 KiB blocks, get + memcpy + release of 4 KiB
 * blocks. No transport: this is the shard actor's CPU cost per request, not
 * the distributed get/put path (that needs the runtime's RDMA lanes).
 * Prints one JSON line per configuration (STYLE §14).
 * Args (or env): --iters=N (timed ops per config), --seed=N. */
#include "bench_util.h"

#include "moonlet/kv_shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_BYTES 4096
#define PROMPT_KEYS 32
#define BLOCK_TOKENS 16

static const moon_kv_tag_t tag = {.model_id = 1, .weight_version = 1};

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void report(const char *bench, const char *op, size_t size_bytes, int verify, double *lat_ns,
                   size_t n, uint64_t total_ns)
{
    moon_bench_json_t j;

    moon_bench_json_begin(&j);
    moon_bench_json_str(&j, "suite", "kvstore");
    moon_bench_json_str(&j, "bench", bench);
    moon_bench_json_str(&j, "impl", "moonlet_local");
    moon_bench_json_str(&j, "op", op);
    moon_bench_json_int(&j, "size_bytes", (int64_t)size_bytes);
    moon_bench_json_int(&j, "clients", 1);
    moon_bench_json_int(&j, "verify_checksum", verify);
    moon_bench_json_int(&j, "iters", (int64_t)n);
    moon_bench_json_num(&j, "ops_per_s", (double)n * 1e9 / (double)total_ns);
    moon_bench_json_num(&j, "p50_us", moon_bench_percentile(lat_ns, n, 50) / 1e3);
    moon_bench_json_num(&j, "p99_us", moon_bench_percentile(lat_ns, n, 99) / 1e3);
    moon_bench_json_num(&j, "peak_rss_mib", moon_bench_peak_rss_mib());
    moon_bench_json_str(&j, "note", "in-process shard library, no transport");
    moon_bench_json_end(&j);
}

static moon_kv_shard_t *make_shard(uint32_t n_slots, size_t slot_bytes, int verify)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;
    moon_status_t          status;

    moon_kv_shard_config_init(&cfg);
    cfg.n_slots          = n_slots;
    cfg.slot_bytes       = slot_bytes;
    cfg.verify_on_commit = verify;
    cfg.verify_on_get    = verify;
    status               = moon_kv_shard_create(&cfg, &shard);
    if (status != MOON_OK) {
        fprintf(stderr, "bench_kvstore_ops: shard create failed: %s\n", moon_status_str(status));
        exit(1);
    }
    return shard;
}

/* Prompts of 32 chained keys; half the store holds the first k blocks of each. */
static void bench_query(size_t iters, uint64_t seed)
{
    const size_t     n_prompts = 4096;
    moon_kv_shard_t *shard     = make_shard(n_prompts * PROMPT_KEYS, 64, 1);
    moon_kv_key_t   *keys      = malloc(sizeof(moon_kv_key_t) * n_prompts * PROMPT_KEYS);
    double          *lat       = malloc(sizeof(double) * iters);
    int32_t          tokens[PROMPT_KEYS * BLOCK_TOKENS];
    unsigned char    blk[64] = {0};
    uint8_t          present[PROMPT_KEYS];
    size_t           n, sink = 0;

    for (size_t p = 0; p < n_prompts; p++) {
        size_t cached = rnd(&seed) % (PROMPT_KEYS + 1);

        for (size_t t = 0; t < PROMPT_KEYS * BLOCK_TOKENS; t++) {
            tokens[t] = (int32_t)(rnd(&seed) % 32000);
        }
        moon_kv_keys_of_tokens(&tag, BLOCK_TOKENS, tokens, PROMPT_KEYS * BLOCK_TOKENS,
                               keys + p * PROMPT_KEYS, PROMPT_KEYS, &n);
        for (size_t b = 0; b < cached; b++) {
            moon_kv_shard_put(shard, &tag, keys[p * PROMPT_KEYS + b], blk, sizeof(blk), 1, 0);
        }
    }
    for (int op = 0; op < 2; op++) {
        uint64_t t0, t_all;

        for (size_t i = 0; i < iters / 10; i++) { /* warm-up */
            moon_kv_shard_longest_prefix(shard, &tag, keys + (i % n_prompts) * PROMPT_KEYS,
                                         PROMPT_KEYS, &n);
        }
        t_all = moon_bench_now_ns();
        for (size_t i = 0; i < iters; i++) {
            const moon_kv_key_t *pk = keys + (rnd(&seed) % n_prompts) * PROMPT_KEYS;

            t0 = moon_bench_now_ns();
            if (op == 0) {
                moon_kv_shard_exists(shard, &tag, pk, PROMPT_KEYS, present);
                sink += present[0];
            } else {
                moon_kv_shard_longest_prefix(shard, &tag, pk, PROMPT_KEYS, &n);
                sink += n;
            }
            lat[i] = (double)(moon_bench_now_ns() - t0);
        }
        t_all = moon_bench_now_ns() - t_all;
        report("query", op == 0 ? "exists_32" : "longest_prefix_32",
               PROMPT_KEYS * sizeof(moon_kv_key_t), 0, lat, iters, t_all);
    }
    if (sink == 1) {
        fprintf(stderr, "\n");
    }
    free(lat);
    free(keys);
    moon_kv_shard_destroy(shard);
}

/* reserve + memcpy 4 KiB + commit of new keys into a store in steady state
 * (full to the high watermark, so puts also pay for LRU eviction). */
static void bench_put(size_t iters, uint64_t seed, int verify)
{
    const uint32_t   n_slots = 8192; /* 32 MiB arena */
    moon_kv_shard_t *shard   = make_shard(n_slots, BLOCK_BYTES, verify);
    double          *lat     = malloc(sizeof(double) * iters);
    unsigned char    src[BLOCK_BYTES];
    uint64_t         t_all, k = 0;

    for (size_t i = 0; i < sizeof(src); i++) {
        src[i] = (unsigned char)rnd(&seed);
    }
    for (uint32_t i = 0; i < n_slots; i++) { /* warm-up: fill to steady state */
        moon_kv_key_t key = {.lo = rnd(&seed), .hi = k++};

        moon_kv_shard_put(shard, &tag, key, src, sizeof(src), 1, 0);
    }
    t_all = moon_bench_now_ns();
    for (size_t i = 0; i < iters; i++) {
        moon_kv_key_t key = {.lo = rnd(&seed), .hi = k++};
        moon_kv_put_t put;
        uint64_t      t0 = moon_bench_now_ns();

        /* The writer's side (memcpy + checksum) stands in for its RDMA write. */
        if (moon_kv_shard_reserve(shard, &tag, key, sizeof(src), 1, 0, &put) != MOON_OK) {
            fprintf(stderr, "bench_kvstore_ops: reserve failed\n");
            exit(1);
        }
        memcpy(put.ptr, src, sizeof(src));
        moon_kv_shard_commit(shard, put.token, sizeof(src),
                             verify ? moon_kv_checksum(src, sizeof(src)) : 0);
        lat[i] = (double)(moon_bench_now_ns() - t0);
    }
    t_all = moon_bench_now_ns() - t_all;
    report("small_put", "reserve_copy_commit", BLOCK_BYTES, verify, lat, iters, t_all);
    free(lat);
    moon_kv_shard_destroy(shard);
}

/* get + memcpy 4 KiB out + release of random resident blocks. */
static void bench_get(size_t iters, uint64_t seed, int verify)
{
    const uint32_t   n_blocks = 7000; /* under the 0.90 watermark of 8192 slots */
    moon_kv_shard_t *shard    = make_shard(8192, BLOCK_BYTES, verify);
    double          *lat      = malloc(sizeof(double) * iters);
    unsigned char    src[BLOCK_BYTES], dst[BLOCK_BYTES];
    uint64_t         t_all, sink = 0;

    for (uint32_t i = 0; i < n_blocks; i++) {
        moon_kv_key_t key = {.lo = i, .hi = ~(uint64_t)i};

        memset(src, (int)i, sizeof(src));
        moon_kv_shard_put(shard, &tag, key, src, sizeof(src), 1, 0);
    }
    for (size_t w = 0; w < 2; w++) {
        size_t n = w == 0 ? iters / 10 : iters;

        t_all = moon_bench_now_ns();
        for (size_t i = 0; i < n; i++) {
            uint32_t      b   = (uint32_t)(rnd(&seed) % n_blocks);
            moon_kv_key_t key = {.lo = b, .hi = ~(uint64_t)b};
            moon_kv_get_t get;
            uint64_t      t0 = moon_bench_now_ns();

            if (moon_kv_shard_get(shard, &tag, key, 1, 0, &get) != MOON_OK) {
                fprintf(stderr, "bench_kvstore_ops: get failed\n");
                exit(1);
            }
            memcpy(dst, get.ptr, get.n_bytes); /* stands in for the reader's RDMA read */
            moon_kv_shard_release(shard, get.lease);
            lat[i] = (double)(moon_bench_now_ns() - t0);
            sink += dst[0];
        }
        t_all = moon_bench_now_ns() - t_all;
    }
    report("small_get", "get_copy_release", BLOCK_BYTES, verify, lat, iters, t_all);
    if (sink == 1) {
        fprintf(stderr, "\n");
    }
    free(lat);
    moon_kv_shard_destroy(shard);
}

int main(int argc, char **argv)
{
    size_t   iters = (size_t)moon_bench_arg_int(argc, argv, "iters", 200000);
    uint64_t seed  = (uint64_t)moon_bench_arg_int(argc, argv, "seed", 1);

    if (iters < 10) {
        iters = 10;
    }
    bench_query(iters, seed);
    bench_put(iters, seed, 1);
    bench_put(iters, seed, 0);
    bench_get(iters, seed, 1);
    bench_get(iters, seed, 0);
    return 0;
}
