/* tests/unit/base/test_reader.c - the bounds-checked reader: each read checks
 * what is left, and a read past the end moves nothing. */
#include "moonlet/reader.h"

#include "moon_test.h"

static const uint8_t buf[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a};

static void test_integers_both_orders(void)
{
    moon_reader_t r;
    uint64_t      v = 0;

    moon_reader_init(&r, buf, sizeof(buf));
    CU_ASSERT_EQUAL(moon_reader_be(&r, 2, &v), MOON_OK);
    CU_ASSERT_EQUAL(v, 0x0102);
    CU_ASSERT_EQUAL(moon_reader_le(&r, 4, &v), MOON_OK);
    CU_ASSERT_EQUAL(v, 0x06050403);
    CU_ASSERT_EQUAL(moon_reader_be(&r, 1, &v), MOON_OK);
    CU_ASSERT_EQUAL(v, 0x07);
    CU_ASSERT_EQUAL(moon_reader_left(&r), 3);
    CU_ASSERT_EQUAL(moon_reader_be(&r, 3, &v), MOON_ERR_INVALID_PARAM); /* not a msgpack width */
    moon_reader_init(&r, buf, sizeof(buf));
    CU_ASSERT_EQUAL(moon_reader_be(&r, 8, &v), MOON_OK);
    CU_ASSERT_EQUAL(v, 0x0102030405060708ull);
    moon_reader_init(&r, buf, sizeof(buf));
    CU_ASSERT_EQUAL(moon_reader_le(&r, 8, &v), MOON_OK);
    CU_ASSERT_EQUAL(v, 0x0807060504030201ull);
}

static void test_past_the_end_moves_nothing(void)
{
    moon_reader_t  r;
    const uint8_t *p = NULL;
    uint64_t       v = 99;
    uint8_t        out[4];

    moon_reader_init(&r, buf, sizeof(buf));
    CU_ASSERT_EQUAL(moon_reader_skip(&r, 7), MOON_OK);
    CU_ASSERT_EQUAL(moon_reader_be(&r, 4, &v), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(v, 99);
    CU_ASSERT_EQUAL(moon_reader_le(&r, 4, &v), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_reader_copy(&r, out, 4), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_reader_take(&r, UINT64_MAX, &p), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_reader_skip(&r, 4), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_EQUAL(moon_reader_left(&r), 3);
    CU_ASSERT_EQUAL(moon_reader_take(&r, 3, &p), MOON_OK);
    CU_ASSERT_PTR_EQUAL(p, buf + 7); /* in place */
    CU_ASSERT_EQUAL(moon_reader_left(&r), 0);
    CU_ASSERT_EQUAL(moon_reader_take(&r, 0, &p), MOON_OK);
}

static void test_copy(void)
{
    moon_reader_t r;
    uint8_t       out[3] = {0};

    moon_reader_init(&r, buf, sizeof(buf));
    CU_ASSERT_EQUAL(moon_reader_copy(&r, out, 3), MOON_OK);
    CU_ASSERT_EQUAL(out[0], 1);
    CU_ASSERT_EQUAL(out[2], 3);
    CU_ASSERT_EQUAL(moon_reader_left(&r), 7);
}

MOON_TEST_MAIN("reader", NULL, NULL, test_integers_both_orders, test_past_the_end_moves_nothing,
               test_copy)
