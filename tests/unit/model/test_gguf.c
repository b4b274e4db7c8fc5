/* tests/unit/model/test_gguf.c - GGUF reader/writer: every metadata type,
 * every tensor type, and malformed input: every truncation, random byte
 * flips, random bytes, hostile counts, and the fuzz corpus. */
#include "moon_test.h"
#include "moonlet/alloc.h"
#include "moonlet/gguf.h"
#include "moonlet/log.h"
#include "moonlet/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp_path[256];

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE    *f = fopen(path, "rb");
    uint8_t *d;
    long     n;

    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    d = malloc((size_t)n + 1);
    if (fread(d, 1, (size_t)n, f) != (size_t)n) {
        n = 0;
    }
    fclose(f);
    *len = (size_t)n;
    return d;
}

/* Writes a file with every metadata type and every tensor type. */
static void write_sample(void)
{
    moon_gguf_writer_t *w;
    uint8_t             u8      = 200;
    int8_t              i8      = -100;
    uint16_t            u16     = 60000;
    int16_t             i16     = -30000;
    int64_t             i64     = -5000000000ll;
    uint64_t            u64     = 9000000000ull;
    double              f64     = 3.25;
    int32_t             arr[5]  = {1, -2, 3, -4, 5};
    const char         *strs[3] = {"alpha", "", "\xe2\x96\x81gamma"};
    static float        f32[64], q[64];
    static uint8_t      f16[128], bf16[128], q8[68], q4[36];
    uint64_t            ne[2] = {32, 2};

    for (int i = 0; i < 64; i++) {
        f32[i] = (float)i / 8.0f - 3.0f;
    }
    moon_ggml_quantize(MOON_GGML_F16, f32, f16, 64);
    moon_ggml_quantize(MOON_GGML_BF16, f32, bf16, 64);
    moon_ggml_quantize(MOON_GGML_Q8_0, f32, q8, 64);
    moon_ggml_quantize(MOON_GGML_Q4_0, f32, q4, 64);
    (void)q;
    CU_ASSERT_EQUAL_FATAL(moon_gguf_writer_create(&w), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_raw(w, "t.u8", MOON_GGUF_UINT8, &u8), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_raw(w, "t.i8", MOON_GGUF_INT8, &i8), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_raw(w, "t.u16", MOON_GGUF_UINT16, &u16), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_raw(w, "t.i16", MOON_GGUF_INT16, &i16), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_u32(w, "t.u32", 4000000000u), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_i32(w, "t.i32", -7), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_f32(w, "t.f32", 1.5f), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_bool(w, "t.bool", true), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_str(w, "t.str", "hello"), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_raw(w, "t.u64", MOON_GGUF_UINT64, &u64), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_raw(w, "t.i64", MOON_GGUF_INT64, &i64), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_raw(w, "t.f64", MOON_GGUF_FLOAT64, &f64), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_arr(w, "t.arr", MOON_GGUF_INT32, arr, 5), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_arr_str(w, "t.strs", strs, 3), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_raw(w, "bad", MOON_GGUF_STRING, "x"),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gguf_writer_tensor(w, "f32", MOON_GGML_F32, 2, ne, f32), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_tensor(w, "f16", MOON_GGML_F16, 2, ne, f16), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_tensor(w, "bf16", MOON_GGML_BF16, 2, ne, bf16), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_tensor(w, "q8", MOON_GGML_Q8_0, 2, ne, q8), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_tensor(w, "q4", MOON_GGML_Q4_0, 2, ne, q4), MOON_OK);
    ne[0] = 33;
    CU_ASSERT_EQUAL(moon_gguf_writer_tensor(w, "odd", MOON_GGML_Q8_0, 2, ne, q8),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gguf_writer_write(w, tmp_path), MOON_OK);
    moon_gguf_writer_destroy(w);
}

static void test_roundtrip_every_type(void)
{
    moon_gguf_t              *g = NULL;
    uint64_t                  u;
    int64_t                   i;
    uint32_t                  u32;
    double                    d;
    float                     f;
    bool                      b;
    const char               *s;
    uint64_t                  len, n;
    moon_gguf_type_t          et;
    const void               *data;
    const moon_gguf_tensor_t *t;
    float                     out[64];

    write_sample();
    CU_ASSERT_EQUAL_FATAL(moon_gguf_open(tmp_path, &g), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_version(g), 3);
    CU_ASSERT_EQUAL(moon_gguf_n_kv(g), 14);
    CU_ASSERT_EQUAL(moon_gguf_n_tensors(g), 5);
    CU_ASSERT(moon_gguf_get_u64(g, "t.u8", &u) == MOON_OK && u == 200);
    CU_ASSERT(moon_gguf_get_i64(g, "t.i8", &i) == MOON_OK && i == -100);
    CU_ASSERT(moon_gguf_get_u64(g, "t.u16", &u) == MOON_OK && u == 60000);
    CU_ASSERT(moon_gguf_get_i64(g, "t.i16", &i) == MOON_OK && i == -30000);
    CU_ASSERT(moon_gguf_get_u32(g, "t.u32", &u32) == MOON_OK && u32 == 4000000000u);
    CU_ASSERT(moon_gguf_get_i64(g, "t.i32", &i) == MOON_OK && i == -7);
    CU_ASSERT_EQUAL(moon_gguf_get_u64(g, "t.i32", &u), MOON_ERR_INVALID_PARAM);
    CU_ASSERT(moon_gguf_get_f32(g, "t.f32", &f) == MOON_OK && f == 1.5f);
    CU_ASSERT(moon_gguf_get_bool(g, "t.bool", &b) == MOON_OK && b);
    CU_ASSERT(moon_gguf_get_str(g, "t.str", &s, &len) == MOON_OK && len == 5 &&
              memcmp(s, "hello", 5) == 0);
    CU_ASSERT(moon_gguf_get_u64(g, "t.u64", &u) == MOON_OK && u == 9000000000ull);
    CU_ASSERT_EQUAL(moon_gguf_get_u32(g, "t.u64", &u32), MOON_ERR_INVALID_PARAM);
    CU_ASSERT(moon_gguf_get_i64(g, "t.i64", &i) == MOON_OK && i == -5000000000ll);
    CU_ASSERT(moon_gguf_get_f64(g, "t.f64", &d) == MOON_OK && d == 3.25);
    CU_ASSERT_EQUAL(moon_gguf_get_str(g, "t.f64", &s, &len), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_gguf_get_u64(g, "missing", &u), MOON_ERR_NOT_FOUND);
    CU_ASSERT(moon_gguf_get_arr(g, "t.arr", &et, &n, &data) == MOON_OK && et == MOON_GGUF_INT32 &&
              n == 5 && data != NULL);
    CU_ASSERT(moon_gguf_get_arr_f64(g, "t.arr", 3, &d) == MOON_OK && d == -4.0);
    CU_ASSERT_EQUAL(moon_gguf_get_arr_f64(g, "t.arr", 5, &d), MOON_ERR_INVALID_PARAM);
    CU_ASSERT(moon_gguf_get_arr_str(g, "t.strs", 2, &s, &len) == MOON_OK && len == 8 &&
              memcmp(s, "\xe2\x96\x81gamma", 8) == 0);
    CU_ASSERT(moon_gguf_get_arr_str(g, "t.strs", 1, &s, &len) == MOON_OK && len == 0);
    CU_ASSERT_EQUAL(moon_gguf_get_arr_str(g, "t.strs", 3, &s, &len), MOON_ERR_INVALID_PARAM);
    {
        const char      *names[] = {"f32", "f16", "bf16", "q8", "q4"};
        moon_ggml_type_t types[] = {MOON_GGML_F32, MOON_GGML_F16, MOON_GGML_BF16, MOON_GGML_Q8_0,
                                    MOON_GGML_Q4_0};
        float            tol[]   = {0.0f, 0.002f, 0.02f, 0.03f, 0.5f};
        for (int k = 0; k < 5; k++) {
            t = moon_gguf_find_tensor(g, names[k]);
            CU_ASSERT_PTR_NOT_NULL_FATAL(t);
            CU_ASSERT_EQUAL(t->type, types[k]);
            CU_ASSERT(t->ne[0] == 32 && t->ne[1] == 2 && t->n_elems == 64);
            CU_ASSERT_EQUAL((uintptr_t)t->data % 32, 0);
            moon_ggml_dequantize(t->type, t->data, out, 64);
            for (int j = 0; j < 64; j++) {
                float want = (float)j / 8.0f - 3.0f;
                CU_ASSERT(fabsf(out[j] - want) <= tol[k]);
            }
        }
    }
    CU_ASSERT_PTR_NULL(moon_gguf_find_tensor(g, "nope"));
    moon_gguf_close(g);
}

/* Opens bytes from memory; must fail cleanly or succeed, never crash. */
static moon_status_t try_open(const uint8_t *d, size_t n)
{
    moon_gguf_t  *g = NULL;
    moon_status_t status;
    uint8_t      *copy = malloc(n ? n : 1); /* exact-size heap copy: ASan sees overreads */

    memcpy(copy, d, n);
    status = moon_gguf_open_memory(copy, n, &g);
    if (status == MOON_OK) {
        /* touch everything the reader hands out */
        for (uint64_t i = 0; i < moon_gguf_n_tensors(g); i++) {
            const moon_gguf_tensor_t *t   = moon_gguf_tensor(g, i);
            volatile uint8_t          sum = 0;
            for (uint64_t j = 0; j < t->bytes; j++) {
                sum ^= ((const uint8_t *)t->data)[j];
            }
            (void)sum;
        }
        for (uint64_t i = 0; i < moon_gguf_n_kv(g); i++) {
            const char      *k = moon_gguf_key_name(g, i);
            const char      *s;
            uint64_t         len, n_el;
            moon_gguf_type_t et;
            double           dd;
            if (moon_gguf_get_str(g, k, &s, &len) == MOON_OK && len > 0) {
                volatile char c = s[len - 1];
                (void)c;
            }
            if (moon_gguf_get_arr(g, k, &et, &n_el, NULL) == MOON_OK && n_el > 0) {
                if (moon_gguf_get_arr_str(g, k, n_el - 1, &s, &len) == MOON_OK && len > 0) {
                    volatile char c = s[len - 1];
                    (void)c;
                }
                moon_gguf_get_arr_f64(g, k, n_el - 1, &dd);
            }
        }
        moon_gguf_close(g);
    } else {
        CU_ASSERT_PTR_NULL(g);
    }
    free(copy);
    return status;
}

static void test_every_truncation_fails_cleanly(void)
{
    size_t   len = 0;
    uint8_t *d;

    write_sample();
    d = slurp(tmp_path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(try_open(d, len), MOON_OK);
    moon_log_set_level(0); /* the errors below are expected */
    for (size_t n = 0; n < len; n++) {
        /* only the zero padding after the last tensor may be cut */
        moon_status_t status = try_open(d, n);
        CU_ASSERT(status == MOON_ERR_CORRUPT || (status == MOON_OK && n + 32 > len));
    }
    moon_log_set_level(MOON_LOG_WARN);
    free(d);
}

static void test_random_flips_and_bytes(void)
{
    size_t   len = 0;
    uint8_t *d, *m;
    uint64_t rng = 42;

    write_sample();
    d = slurp(tmp_path, &len);
    m = malloc(len);
    moon_log_set_level(0);
    for (int iter = 0; iter < 3000; iter++) {
        int flips = 1 + (int)(moon_test_rand(&rng) % 4);
        memcpy(m, d, len);
        for (int k = 0; k < flips; k++) {
            size_t pos   = moon_test_rand(&rng) % 600; /* header region */
            m[pos % len] = (uint8_t)moon_test_rand(&rng);
        }
        try_open(m, len);
    }
    for (int iter = 0; iter < 500; iter++) {
        size_t n = moon_test_rand(&rng) % 512;
        for (size_t k = 0; k < n; k++) {
            m[k] = (uint8_t)moon_test_rand(&rng);
        }
        if (n >= 8) {
            memcpy(m, "GGUF\x03\x00\x00\x00", 8); /* get past the magic */
        }
        try_open(m, n);
    }
    moon_log_set_level(MOON_LOG_WARN);
    free(m);
    free(d);
}

static void test_hostile_counts(void)
{
    uint8_t  h[64];
    uint64_t big = UINT64_MAX;

    moon_log_set_level(0);
    memset(h, 0, sizeof(h));
    memcpy(h, "GGUF\x03\x00\x00\x00", 8);
    memcpy(h + 8, &big, 8); /* n_tensors */
    CU_ASSERT_EQUAL(try_open(h, sizeof(h)), MOON_ERR_CORRUPT);
    memset(h + 8, 0, 8);
    memcpy(h + 16, &big, 8); /* n_kv */
    CU_ASSERT_EQUAL(try_open(h, sizeof(h)), MOON_ERR_CORRUPT);
    {
        /* one kv: a string array claiming 2^60 elements */
        uint8_t  f[64] = {0};
        uint64_t one = 1, klen = 1, cnt = 1ull << 60;
        uint32_t t = MOON_GGUF_ARRAY, et = MOON_GGUF_STRING;
        memcpy(f, "GGUF\x03\x00\x00\x00", 8);
        memcpy(f + 16, &one, 8);
        memcpy(f + 24, &klen, 8);
        f[32] = 'k';
        memcpy(f + 33, &t, 4);
        memcpy(f + 37, &et, 4);
        memcpy(f + 41, &cnt, 8);
        CU_ASSERT_EQUAL(try_open(f, sizeof(f)), MOON_ERR_CORRUPT);
    }
    CU_ASSERT_EQUAL(try_open((const uint8_t *)"GGUF\x01\x00\x00\x00", 8), MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL(try_open((const uint8_t *)"GGML", 4), MOON_ERR_CORRUPT);
    moon_log_set_level(MOON_LOG_WARN);
    CU_ASSERT_EQUAL(moon_gguf_open("/nonexistent/x.gguf", &(moon_gguf_t *){NULL}),
                    MOON_ERR_NOT_FOUND);
}

/* A file with one F32 tensor and general.alignment = align (the writer lays
 * the data out at its own 32 bytes whatever the key says). */
static void write_aligned(uint32_t align)
{
    moon_gguf_writer_t *w;
    static float        x[8];
    uint64_t            ne[1] = {8};

    CU_ASSERT_EQUAL_FATAL(moon_gguf_writer_create(&w), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_kv_u32(w, "general.alignment", align), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_tensor(w, "x", MOON_GGML_F32, 1, ne, x), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_writer_write(w, tmp_path), MOON_OK);
    moon_gguf_writer_destroy(w);
}

/* general.alignment below the spec's 8 would put tensor data at any byte
 * (misaligned float reads, UBSan in forward_cpu.c before): refused. */
static void test_small_alignment_refused(void)
{
    static const uint32_t bad[] = {1, 2, 4, 0, 3, 48};
    moon_gguf_t          *g     = NULL;

    moon_log_set_level(0);
    for (size_t i = 0; i < MOON_ARRAY_SIZE(bad); i++) {
        write_aligned(bad[i]);
        CU_ASSERT_EQUAL(moon_gguf_open(tmp_path, &g), MOON_ERR_CORRUPT);
        CU_ASSERT_PTR_NULL(g);
    }
    moon_log_set_level(MOON_LOG_WARN);
    write_aligned(32);
    CU_ASSERT_EQUAL_FATAL(moon_gguf_open(tmp_path, &g), MOON_OK);
    CU_ASSERT_EQUAL(moon_gguf_alignment(g), 32);
    moon_gguf_close(g);
    unlink(tmp_path);
}

/* A buffer that puts an F32 tensor at an odd address is refused, not read. */
static void test_misaligned_memory_refused(void)
{
    size_t       len = 0;
    uint8_t     *d, *buf;
    moon_gguf_t *g = NULL;

    write_aligned(32);
    d = slurp(tmp_path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    buf = malloc(len + 8);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    memcpy(buf + 8, d, len);
    CU_ASSERT_EQUAL(moon_gguf_open_memory(buf + 8, len, &g), MOON_OK);
    moon_gguf_close(g);
    g = NULL;
    memcpy(buf + 1, d, len);
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(moon_gguf_open_memory(buf + 1, len, &g), MOON_ERR_CORRUPT);
    moon_log_set_level(MOON_LOG_WARN);
    CU_ASSERT_PTR_NULL(g);
    free(buf);
    free(d);
    unlink(tmp_path);
}

/* A FIFO given as a model fails at once (open() used to wait for a writer
 * that never comes); alarm() turns a regression into a failure, not a hang. */
static void test_fifo_refused_without_blocking(void)
{
    char         fifo[300];
    moon_gguf_t *g = NULL;

    snprintf(fifo, sizeof(fifo), "%s.fifo", tmp_path);
    unlink(fifo);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    alarm(30);
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(moon_gguf_open(fifo, &g), MOON_ERR_IO);
    CU_ASSERT_PTR_NULL(g);
    CU_ASSERT_EQUAL(moon_model_convert_llama2c(fifo, fifo, tmp_path, NULL, NULL), MOON_ERR_IO);
    moon_log_set_level(MOON_LOG_WARN);
    alarm(0);
    unlink(fifo);
}

static void test_alloc_failures_leak_nothing(void)
{
    moon_gguf_t *g;

    write_sample();
    for (uint64_t k = 1; k < 64; k++) {
        moon_status_t status;
        g = NULL;
        moon_fault_fail_after(k);
        status = moon_gguf_open(tmp_path, &g);
        moon_fault_reset();
        CU_ASSERT(status == MOON_OK || status == MOON_ERR_NO_MEMORY);
        moon_gguf_close(g);
        if (status == MOON_OK) {
            break;
        }
    }
}

static void test_fp16_bf16_conversions(void)
{
    float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1e-5f, 1e-7f, 3.14159f};

    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        float h = moon_fp16_to_f32(moon_f32_to_fp16(vals[i]));
        float b = moon_bf16_to_f32(moon_f32_to_bf16(vals[i]));
        CU_ASSERT(fabsf(h - vals[i]) <= fabsf(vals[i]) * 1e-3f + 6e-8f);
        CU_ASSERT(fabsf(b - vals[i]) <= fabsf(vals[i]) * 8e-3f);
    }
    CU_ASSERT(isinf(moon_fp16_to_f32(moon_f32_to_fp16(1e6f))));
    CU_ASSERT(isnan(moon_bf16_to_f32(moon_f32_to_bf16(NAN))));
}

int main(void)
{
    snprintf(tmp_path, sizeof(tmp_path), "/tmp/moon_test_gguf_%d.gguf", (int)getpid());
    return MOON_TEST_RUN("gguf", NULL, NULL, test_roundtrip_every_type,
                         test_every_truncation_fails_cleanly, test_random_flips_and_bytes,
                         test_hostile_counts, test_small_alignment_refused,
                         test_misaligned_memory_refused, test_fifo_refused_without_blocking,
                         test_alloc_failures_leak_nothing, test_fp16_bf16_conversions);
}
