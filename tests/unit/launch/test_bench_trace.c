/* tests/unit/launch/test_bench_trace.c - Mooncake trace -> `moonlet bench`
 * requests (over the shared trace reader): equal hash ids give equal token
 * blocks, --block-scale and --max-context arithmetic, timestamps and
 * --time-scale, bad files. */
#include "loadgen_opts.h"
#include "loadgen_trace.h"
#include "loadgen_workload.h"

#include "moonlet/alloc.h"

#include "moon_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];

static void write_trace(const char *text)
{
    int   fd;
    FILE *f;

    snprintf(path, sizeof(path), "/tmp/moon_loadgen_trace_XXXXXX");
    fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    f = fdopen(fd, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
}

static moon_loadgen_opts_t opts_of(const char *a, const char *b)
{
    char               *argv[6] = {"bench", "trace", path};
    int                 argc    = 3;
    moon_loadgen_opts_t o;
    char                err[200];

    if (a)
        argv[argc++] = (char *)a;
    if (b)
        argv[argc++] = (char *)b;
    if (moon_loadgen_opts_parse(argc, argv, &o, err, sizeof(err)) != MOON_OK) {
        fprintf(stderr, "options: %s\n", err);
        CU_FAIL_FATAL("options did not parse");
    }
    return o;
}

static moon_status_t load(const char *a, const char *b, moon_loadgen_workload_t **wl_p)
{
    moon_loadgen_opts_t o = opts_of(a, b);

    return moon_loadgen_workload_create(&o, wl_p);
}

static const char three[] =
    "{\"timestamp\": 1000, \"input_length\": 1500, \"output_length\": 64, \"hash_ids\": [1, 2, "
    "3]}\n"
    "\n"
    "{\"timestamp\": 1500, \"input_length\": 1500, \"output_length\": 600, \"hash_ids\": [1, 2, "
    "4]}\r\n"
    "{\"timestamp\": 2500, \"input_length\": 300, \"output_length\": 1, \"hash_ids\": [5]}\n";

static void test_scale_arithmetic(void)
{
    CU_ASSERT_EQUAL(moon_loadgen_trace_scale(1500, 16), 47); /* ceil(1500 * 16 / 512) */
    CU_ASSERT_EQUAL(moon_loadgen_trace_scale(1536, 16), 48);
    CU_ASSERT_EQUAL(moon_loadgen_trace_scale(1, 16), 1);
    CU_ASSERT_EQUAL(moon_loadgen_trace_scale(0, 16), 1);
    CU_ASSERT_EQUAL(moon_loadgen_trace_scale(40160, 512), 40160);
}

static void test_equal_hash_ids_give_equal_blocks(void)
{
    moon_loadgen_workload_t *wl = NULL;
    const uint32_t          *a, *b;

    write_trace(three);
    CU_ASSERT_EQUAL_FATAL(load("--block-scale=16", NULL, &wl), MOON_OK);
    unlink(path);
    CU_ASSERT_EQUAL_FATAL(wl->n_reqs, 3);
    CU_ASSERT_EQUAL(wl->block_tokens, 16);
    a = wl->reqs[0].ids;
    b = wl->reqs[1].ids;
    CU_ASSERT_EQUAL(wl->reqs[0].n_ids, 47);
    CU_ASSERT_EQUAL(wl->reqs[1].n_ids, 47);
    CU_ASSERT_EQUAL(wl->reqs[2].n_ids, 10); /* ceil(300 * 16 / 512) */
    /* hash ids 1, 2 shared: the first 32 ids are equal */
    CU_ASSERT_EQUAL(memcmp(a, b, 32 * sizeof(*a)), 0);
    /* hash 3 vs 4: the third blocks differ */
    CU_ASSERT_NOT_EQUAL(memcmp(a + 32, b + 32, 15 * sizeof(*a)), 0);
    /* hash 5 is neither 1 nor anything else */
    CU_ASSERT_NOT_EQUAL(memcmp(wl->reqs[2].ids, a, 10 * sizeof(*a)), 0);
    for (uint32_t i = 0; i < 47; i++) {
        CU_ASSERT(a[i] >= 3 && a[i] < 512); /* never the special ids 0..2 */
    }
    /* outputs scale alike: ceil(64 * 16 / 512) = 2, ceil(600 * 16 / 512) = 19, min 1 */
    CU_ASSERT_EQUAL(wl->reqs[0].max_tokens, 2);
    CU_ASSERT_EQUAL(wl->reqs[1].max_tokens, 19);
    CU_ASSERT_EQUAL(wl->reqs[2].max_tokens, 1);
    /* sent at its timestamps, from the first */
    CU_ASSERT_DOUBLE_EQUAL(wl->reqs[0].arrival_s, 0.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(wl->reqs[1].arrival_s, 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(wl->reqs[2].arrival_s, 1.5, 1e-12);
    moon_loadgen_workload_destroy(wl);
}

static void test_time_scale_and_max_context(void)
{
    moon_loadgen_workload_t *wl = NULL;

    write_trace(three);
    CU_ASSERT_EQUAL_FATAL(load("--time-scale=0.5", "--max-context=512", &wl), MOON_OK);
    CU_ASSERT_DOUBLE_EQUAL(wl->reqs[1].arrival_s, 0.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(wl->reqs[2].arrival_s, 0.75, 1e-12);
    /* unscaled 1500 + 64 over a 512 context: output kept, input cut */
    CU_ASSERT_EQUAL(wl->reqs[0].max_tokens, 64);
    CU_ASSERT_EQUAL(wl->reqs[0].n_ids, 448);
    CU_ASSERT_EQUAL(wl->reqs[1].max_tokens, 511);
    CU_ASSERT_EQUAL(wl->reqs[1].n_ids, 1);
    moon_loadgen_workload_destroy(wl);
    wl = NULL;
    CU_ASSERT_EQUAL_FATAL(load("--num-prompts=2", NULL, &wl), MOON_OK);
    unlink(path);
    CU_ASSERT_EQUAL(wl->n_reqs, 2);
    moon_loadgen_workload_destroy(wl);
}

static void test_same_seed_same_trace_prompts(void)
{
    moon_loadgen_workload_t *a = NULL, *b = NULL, *c = NULL;

    write_trace(three);
    CU_ASSERT_EQUAL_FATAL(load("--block-scale=16", NULL, &a), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(load("--block-scale=16", NULL, &b), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(load("--block-scale=16", "--seed=3", &c), MOON_OK);
    unlink(path);
    CU_ASSERT_EQUAL(memcmp(a->reqs[0].ids, b->reqs[0].ids, 47 * 4), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a->reqs[0].ids, c->reqs[0].ids, 47 * 4), 0);
    moon_loadgen_workload_destroy(a);
    moon_loadgen_workload_destroy(b);
    moon_loadgen_workload_destroy(c);
}

static void test_bad_traces_are_errors(void)
{
    static const char *const bad[] = {
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}\n", /* no hash_ids */
        "{\"timestamp\": 0, \"input_length\": -1, \"output_length\": 1, \"hash_ids\": []}\n",
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1.5]}\n",
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [\"a\"]}\n",
        "[1, 2]\n",
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]\n",
        /* two hash ids for one block's worth of prompt */
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1, 2]}\n",
        /* time runs backwards */
        "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n"
        "{\"timestamp\": 4, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [2]}\n",
    };
    moon_loadgen_workload_t *wl = NULL;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_trace(bad[i]);
        CU_ASSERT_EQUAL(load(NULL, NULL, &wl), MOON_ERR_CORRUPT);
        unlink(path);
        CU_ASSERT_PTR_NULL(wl);
    }
    write_trace("\n\n");
    CU_ASSERT_EQUAL(load(NULL, NULL, &wl), MOON_ERR_INVALID_PARAM);
    unlink(path);
    CU_ASSERT_EQUAL(load(NULL, NULL, &wl), MOON_ERR_NOT_FOUND);
    CU_ASSERT_PTR_NULL(wl);
}

static void test_out_of_memory_leaves_nothing(void)
{
    moon_loadgen_opts_t o;

    write_trace(three);
    o = opts_of("--block-scale=16", NULL);
    for (uint64_t n = 1;; n++) {
        moon_loadgen_workload_t *wl = NULL;
        moon_status_t            status;

        moon_fault_fail_after(n);
        status = moon_loadgen_workload_create(&o, &wl);
        moon_fault_reset();
        if (status == MOON_OK) {
            CU_ASSERT(n > 3);
            moon_loadgen_workload_destroy(wl);
            break;
        }
        CU_ASSERT_EQUAL_FATAL(status, MOON_ERR_NO_MEMORY);
        CU_ASSERT_PTR_NULL(wl);
    }
    unlink(path);
}

MOON_TEST_MAIN("bench_trace", NULL, NULL, test_out_of_memory_leaves_nothing, test_scale_arithmetic,
               test_equal_hash_ids_give_equal_blocks, test_time_scale_and_max_context,
               test_same_seed_same_trace_prompts, test_bad_traces_are_errors)
