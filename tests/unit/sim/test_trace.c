/* tests/unit/sim/test_trace.c - the Mooncake trace reader: records, strict
 * errors naming the line, arrivals under a time scale, block keys at other
 * block sizes, prompt tokens, shrinking, and the bundled synthetic trace. */
#include "moon_test.h"
#include "trace.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

#define T2                                                                                         \
    "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [7, 8]}\n"     \
    "\n"                                                                                           \
    "{\"timestamp\": 250, \"input_length\": 1536, \"output_length\": 2, \"hash_ids\": [7, 8, 9], " \
    "\"extra\": 1}\n"

static moon_status_t parse_str(const char *s, moon_trace_t **t, moon_trace_error_t *e)
{
    return moon_trace_parse(s, strlen(s), NULL, t, e);
}

static void test_reads_records(void)
{
    moon_trace_t      *t = NULL;
    moon_trace_error_t e;

    CU_ASSERT_EQUAL_FATAL(parse_str(T2, &t, &e), MOON_OK);
    CU_ASSERT_EQUAL(t->n_reqs, 2);
    CU_ASSERT_EQUAL(t->block_tokens, 512);
    CU_ASSERT_EQUAL(t->reqs[0].timestamp_ms, 0);
    CU_ASSERT_EQUAL(t->reqs[0].input_length, 1000);
    CU_ASSERT_EQUAL(t->reqs[0].output_length, 5);
    CU_ASSERT_EQUAL(t->reqs[0].n_hash_ids, 2);
    CU_ASSERT_EQUAL(t->reqs[0].hash_ids[1], 8);
    CU_ASSERT_EQUAL(t->reqs[0].line, 1);
    CU_ASSERT_EQUAL(t->reqs[1].line, 3); /* the blank line counts */
    CU_ASSERT_EQUAL(t->reqs[1].timestamp_ms, 250);
    CU_ASSERT_EQUAL(t->reqs[1].hash_ids[2], 9);
    CU_ASSERT_EQUAL(moon_trace_arrival_ns(&t->reqs[1], 1.0), 250000000ull);
    CU_ASSERT_EQUAL(moon_trace_arrival_ns(&t->reqs[1], 0.5), 125000000ull);
    CU_ASSERT_DOUBLE_EQUAL(moon_trace_rate_rps(t, 1.0), 4.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(moon_trace_rate_rps(t, 2.0), 2.0, 1e-9);
    moon_trace_destroy(t);
    /* max_reqs stops early; no trailing newline is fine */
    {
        moon_trace_opts_t o = {.max_reqs = 1};
        const char       *s = "{\"timestamp\":3,\"input_length\":1,\"output_length\":1,"
                              "\"hash_ids\":[1]}";
        CU_ASSERT_EQUAL_FATAL(moon_trace_parse(T2, strlen(T2), &o, &t, NULL), MOON_OK);
        CU_ASSERT_EQUAL(t->n_reqs, 1);
        moon_trace_destroy(t);
        CU_ASSERT_EQUAL_FATAL(parse_str(s, &t, NULL), MOON_OK);
        CU_ASSERT_EQUAL(t->reqs[0].timestamp_ms, 3);
        moon_trace_destroy(t);
    }
}

/* Each bad line fails with MOON_ERR_CORRUPT naming line 2 (line 1 is good). */
static void test_bad_lines_name_the_line(void)
{
    static const char *good  = "{\"timestamp\": 5, \"input_length\": 512, \"output_length\": 1, "
                               "\"hash_ids\": [1]}\n";
    static const char *bad[] = {
        "{\"timestamp\": 6, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1]",
        "[1, 2]",
        "{\"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1]}",
        "{\"timestamp\": -1, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1]}",
        "{\"timestamp\": 6.5, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1]}",
        "{\"timestamp\": \"6\", \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1]}",
        "{\"timestamp\": 6, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}",
        "{\"timestamp\": 6, \"input_length\": 5000000000, \"output_length\": 1, \"hash_ids\": [1]}",
        "{\"timestamp\": 6, \"input_length\": 512, \"output_length\": 0, \"hash_ids\": [1]}",
        "{\"timestamp\": 6, \"input_length\": 512, \"output_length\": 1}",
        "{\"timestamp\": 6, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": 1}",
        "{\"timestamp\": 6, \"input_length\": 513, \"output_length\": 1, \"hash_ids\": [1]}",
        "{\"timestamp\": 6, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1, 2]}",
        "{\"timestamp\": 6, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [-3]}",
        "{\"timestamp\": 6, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [\"a\"]}",
        "{\"timestamp\": 4, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1]}",
        "hello",
    };
    char buf[512];

    moon_log_set_level(0); /* the errors are expected */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        moon_trace_t      *t = (moon_trace_t *)&buf; /* must stay untouched */
        moon_trace_error_t e;

        snprintf(buf, sizeof(buf), "%s%s\n", good, bad[i]);
        CU_ASSERT_EQUAL(parse_str(buf, &t, &e), MOON_ERR_CORRUPT);
        CU_ASSERT_EQUAL(e.line, 2);
        CU_ASSERT(e.msg[0] != '\0');
        CU_ASSERT_PTR_EQUAL(t, (moon_trace_t *)&buf);
    }
    {
        moon_trace_t      *t = NULL;
        moon_trace_error_t e;
        CU_ASSERT_EQUAL(parse_str("\n  \n", &t, &e), MOON_ERR_INVALID_PARAM);
        CU_ASSERT_PTR_NULL(t);
        CU_ASSERT_EQUAL(moon_trace_load("/nonexistent/trace.jsonl", NULL, &t, &e),
                        MOON_ERR_NOT_FOUND);
        CU_ASSERT_EQUAL(e.line, 0);
        CU_ASSERT_PTR_NULL(t);
    }
    moon_log_set_level(MOON_LOG_WARN);
}

static void test_out_of_memory_is_clean(void)
{
    moon_trace_t *t = NULL;

    moon_log_set_level(0);
    for (uint64_t n = 1; n < 6; n++) {
        moon_status_t s;
        moon_fault_fail_after(n);
        s = parse_str(T2, &t, NULL);
        moon_fault_reset();
        if (s == MOON_OK) {
            moon_trace_destroy(t);
            break;
        }
        CU_ASSERT_EQUAL(s, MOON_ERR_NO_MEMORY);
    }
    moon_log_set_level(MOON_LOG_WARN);
}

static void test_block_keys(void)
{
    moon_trace_t *t = NULL;
    uint64_t      a[8], b[8], c[8];
    uint32_t      na, nb, nc;

    CU_ASSERT_EQUAL_FATAL(parse_str(T2, &t, NULL), MOON_OK);
    /* at the trace's own size: full blocks only (1000 tokens = 1 full block) */
    moon_trace_block_keys(&t->reqs[0], 512, 512, a, 8, &na);
    moon_trace_block_keys(&t->reqs[1], 512, 512, b, 8, &nb);
    CU_ASSERT_EQUAL(na, 1);
    CU_ASSERT_EQUAL(nb, 3);
    CU_ASSERT_EQUAL(a[0], b[0]);
    CU_ASSERT_NOT_EQUAL(b[0], b[1]);
    /* 256-token blocks: the 1000-token prompt has 3 full ones, all shared */
    moon_trace_block_keys(&t->reqs[0], 512, 256, a, 8, &na);
    moon_trace_block_keys(&t->reqs[1], 512, 256, b, 8, &nb);
    CU_ASSERT_EQUAL(na, 3);
    CU_ASSERT_EQUAL(nb, 6);
    CU_ASSERT_EQUAL(memcmp(a, b, 3 * sizeof(uint64_t)), 0);
    /* the second half of a block differs from its first; key 1 = trace block 0 ends */
    CU_ASSERT_NOT_EQUAL(b[0], b[1]);
    moon_trace_block_keys(&t->reqs[1], 512, 512, c, 8, &nc);
    CU_ASSERT_EQUAL(b[1], c[0]);
    CU_ASSERT_EQUAL(b[3], c[1]);
    /* 1024-token blocks end on trace block 1's end; max_keys caps */
    moon_trace_block_keys(&t->reqs[1], 512, 1024, a, 8, &na);
    CU_ASSERT_EQUAL(na, 1);
    CU_ASSERT_EQUAL(a[0], c[1]);
    moon_trace_block_keys(&t->reqs[1], 512, 256, a, 2, &na);
    CU_ASSERT_EQUAL(na, 2);
    moon_trace_destroy(t);
}

static void test_fill_tokens(void)
{
    moon_trace_t  *t = NULL;
    static int32_t x[1536], y[1536];

    CU_ASSERT_EQUAL_FATAL(parse_str(T2, &t, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_trace_fill_tokens(&t->reqs[0], 512, 3, 512, 0, x), MOON_OK);
    CU_ASSERT_EQUAL(moon_trace_fill_tokens(&t->reqs[1], 512, 3, 512, 0, y), MOON_OK);
    CU_ASSERT_EQUAL(memcmp(x, y, 1000 * sizeof(int32_t)), 0); /* ids 7, 8 shared */
    for (int i = 0; i < 1536; i++) {
        CU_ASSERT_FATAL(y[i] >= 3 && y[i] < 512);
    }
    CU_ASSERT(memcmp(y, y + 512, 512 * sizeof(int32_t)) != 0);
    CU_ASSERT_EQUAL(moon_trace_fill_tokens(&t->reqs[0], 512, 3, 512, 1, x), MOON_OK);
    CU_ASSERT(memcmp(x, y, 1000 * sizeof(int32_t)) != 0); /* the seed matters */
    CU_ASSERT_EQUAL(moon_trace_fill_tokens(&t->reqs[0], 512, 512, 512, 0, x),
                    MOON_ERR_INVALID_PARAM);
    moon_trace_destroy(t);
}

static void test_shrink(void)
{
    moon_trace_t *t = NULL, *s = NULL;

    CU_ASSERT_EQUAL_FATAL(parse_str(T2, &t, NULL), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_trace_shrink(t, 16, 0, 0, &s), MOON_OK);
    CU_ASSERT_EQUAL(s->block_tokens, 16);
    /* 1000 = 512 + 488: 16 + ceil(488 * 16 / 512) = 16 + 16 (15.25 up) */
    CU_ASSERT_EQUAL(s->reqs[0].input_length, 32);
    CU_ASSERT_EQUAL(s->reqs[0].n_hash_ids, 2);
    CU_ASSERT_EQUAL(s->reqs[1].input_length, 48);
    CU_ASSERT_EQUAL(s->reqs[1].hash_ids[2], 9);
    CU_ASSERT_EQUAL(s->reqs[1].timestamp_ms, 250);
    moon_trace_destroy(s);
    /* caps: input 40 tokens keeps ceil(40 / 16) = 3 ids; output 3 */
    CU_ASSERT_EQUAL_FATAL(moon_trace_shrink(t, 16, 40, 3, &s), MOON_OK);
    CU_ASSERT_EQUAL(s->reqs[1].input_length, 40);
    CU_ASSERT_EQUAL(s->reqs[1].n_hash_ids, 3);
    CU_ASSERT_EQUAL(s->reqs[0].output_length, 3);
    CU_ASSERT_EQUAL(s->reqs[1].output_length, 2);
    moon_trace_destroy(s);
    s = NULL;
    CU_ASSERT_EQUAL(moon_trace_shrink(t, 0, 0, 0, &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_trace_shrink(t, 1024, 0, 0, &s), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(s);
    moon_trace_destroy(t);
}

/* The bench client's scaling: every length by 16 / 512, then clamped. */
static void test_scale_like_bench(void)
{
    moon_trace_t *t = NULL, *s = NULL;

    CU_ASSERT_EQUAL_FATAL(parse_str(T2, &t, NULL), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_trace_scale(t, 16, 0, &s), MOON_OK);
    CU_ASSERT_EQUAL(s->reqs[0].input_length, 32); /* ceil(1000 * 16 / 512) */
    CU_ASSERT_EQUAL(s->reqs[0].output_length, 1); /* ceil(5 * 16 / 512) */
    CU_ASSERT_EQUAL(s->reqs[1].input_length, 48);
    CU_ASSERT_EQUAL(s->reqs[1].n_hash_ids, 3);
    moon_trace_destroy(s);
    /* a 40-token context: output 1, input 39 (3 ids) */
    CU_ASSERT_EQUAL_FATAL(moon_trace_scale(t, 16, 40, &s), MOON_OK);
    CU_ASSERT_EQUAL(s->reqs[1].input_length, 39);
    CU_ASSERT_EQUAL(s->reqs[1].n_hash_ids, 3);
    CU_ASSERT_EQUAL(s->reqs[0].input_length, 32);
    moon_trace_destroy(s);
    CU_ASSERT_EQUAL_FATAL(moon_trace_scale(t, 16, 20, &s), MOON_OK);
    CU_ASSERT_EQUAL(s->reqs[1].input_length, 19);
    CU_ASSERT_EQUAL(s->reqs[1].n_hash_ids, 2);
    moon_trace_destroy(s);
    CU_ASSERT_EQUAL(moon_trace_scale(t, 0, 0, &s), MOON_ERR_INVALID_PARAM);
    moon_trace_destroy(t);
}

/* The bundled trace: the README's figures (3,993 requests, 0..1,022,025 ms,
 * mean input 15,325.5, mean output 149.1). */
static void test_synthetic_trace(void)
{
    moon_trace_t *t  = NULL;
    double        in = 0, out = 0;

    CU_ASSERT_EQUAL_FATAL(
        moon_trace_load(MOON_TEST_DATA_DIR "/traces/synthetic_trace.jsonl", NULL, &t, NULL),
        MOON_OK);
    CU_ASSERT_EQUAL(t->n_reqs, 3993);
    CU_ASSERT_EQUAL(t->reqs[0].timestamp_ms, 0);
    CU_ASSERT_EQUAL(t->reqs[3992].timestamp_ms, 1022025);
    CU_ASSERT_EQUAL(t->reqs[0].input_length, 40160);
    CU_ASSERT_EQUAL(t->reqs[0].hash_ids[78], 78);
    for (size_t i = 0; i < t->n_reqs; i++) {
        in += t->reqs[i].input_length;
        out += t->reqs[i].output_length;
    }
    CU_ASSERT_DOUBLE_EQUAL(in / 3993, 15325.5, 0.1);
    CU_ASSERT_DOUBLE_EQUAL(out / 3993, 149.1, 0.1);
    CU_ASSERT_DOUBLE_EQUAL(moon_trace_rate_rps(t, 1.0), 3992 / 1022.025, 1e-9);
    moon_trace_destroy(t);
}

MOON_TEST_MAIN("trace", NULL, NULL, test_reads_records, test_bad_lines_name_the_line,
               test_out_of_memory_is_clean, test_block_keys, test_fill_tokens, test_shrink,
               test_scale_like_bench, test_synthetic_trace)
