/* tests/unit/model/test_safetensors.c - the safetensors reader of
 * `moonlet convert --hf`: tensors read back with their dtype, shape and
 * bytes; every truncation, a bad header, an unsupported dtype, offsets that
 * disagree with the shape and a duplicate name are refused with their status. */
#include "moonlet/hf.h"
#include "moonlet/log.h"

#include "moon_test.h"

#include <stdio.h>
#include <string.h>

/* A safetensors image of header (JSON) and data into buf; its length. */
static size_t image(uint8_t *buf, const char *header, const void *data, size_t data_len)
{
    uint64_t n = strlen(header);

    for (int i = 0; i < 8; i++) {
        buf[i] = (uint8_t)(n >> (8 * i));
    }
    memcpy(buf + 8, header, n);
    memcpy(buf + 8 + n, data, data_len);
    return 8 + n + data_len;
}

static const float f32[4] = {1.0f, 2.0f, 3.0f, 4.0f};

static void test_reads_tensors(void)
{
    uint8_t                 buf[512];
    moon_st_t              *st = NULL;
    const moon_st_tensor_t *t;
    size_t                  n = image(buf,
                                      "{\"__metadata__\":{\"format\":\"pt\"},"
                                                       "\"w\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[0,8]},"
                                                       "\"h\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[8,16]}}",
                                      f32, sizeof(f32));

    CU_ASSERT_EQUAL_FATAL(moon_st_open_memory(buf, n, "test", &st), MOON_OK);
    CU_ASSERT_EQUAL(moon_st_n_tensors(st), 2);
    t = moon_st_find(st, "w");
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(t->type, MOON_GGML_F32);
    CU_ASSERT_EQUAL(t->n_dims, 2);
    CU_ASSERT_EQUAL(t->shape[0], 2);
    CU_ASSERT_EQUAL(t->shape[1], 1);
    CU_ASSERT_EQUAL(t->bytes, 8);
    CU_ASSERT_EQUAL(memcmp(t->data, f32, 8), 0);
    t = moon_st_find(st, "h");
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(t->type, MOON_GGML_BF16);
    CU_ASSERT_EQUAL(t->n_elems, 4);
    CU_ASSERT_PTR_NULL(moon_st_find(st, "__metadata__"));
    CU_ASSERT_PTR_NULL(moon_st_tensor(st, 2));
    moon_st_close(st);
}

static void test_every_truncation_fails_cleanly(void)
{
    uint8_t    buf[256];
    moon_st_t *st = NULL;
    size_t n = image(buf, "{\"w\":{\"dtype\":\"F16\",\"shape\":[8],\"data_offsets\":[0,16]}}", f32,
                     sizeof(f32));

    for (size_t len = 0; len < n; len++) {
        CU_ASSERT_EQUAL(moon_st_open_memory(buf, len, "test", &st), MOON_ERR_CORRUPT);
    }
    CU_ASSERT_EQUAL(moon_st_open_memory(buf, n, "test", &st), MOON_OK);
    moon_st_close(st);
}

static void test_bad_headers_refused(void)
{
    static const struct {
        const char   *header;
        moon_status_t want;
    } cases[] = {
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],", MOON_ERR_CORRUPT}, /* bad JSON */
        {"[1,2]", MOON_ERR_CORRUPT},
        {"{\"w\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", MOON_ERR_UNSUPPORTED},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", MOON_ERR_CORRUPT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", MOON_ERR_CORRUPT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", MOON_ERR_CORRUPT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4]}}", MOON_ERR_CORRUPT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         MOON_ERR_CORRUPT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}",
         MOON_ERR_CORRUPT},
    };
    uint8_t buf[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        moon_st_t *st = NULL;
        size_t     n  = image(buf, cases[i].header, f32, sizeof(f32));
        CU_ASSERT_EQUAL(moon_st_open_memory(buf, n, "test", &st), cases[i].want);
        CU_ASSERT_PTR_NULL(st);
    }
}

static void test_missing_file(void)
{
    moon_st_t *st = NULL;

    CU_ASSERT_EQUAL(moon_st_open("/nonexistent/model.safetensors", &st), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_hf_convert("/nonexistent", "/nonexistent/x.gguf", NULL),
                    MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_hf_is_checkpoint("/nonexistent"), 0);
}

int main(void)
{
    moon_log_set_level(0);
    return MOON_TEST_RUN("safetensors", NULL, NULL, test_reads_tensors,
                         test_every_truncation_fails_cleanly, test_bad_headers_refused,
                         test_missing_file);
}
