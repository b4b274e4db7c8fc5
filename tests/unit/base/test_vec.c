/* tests/unit/base/test_vec.c - the growable vector: order, removal, growth
 * and allocation failures that leave it unchanged. */
#include "moonlet/vec.h"

#include "moonlet/alloc.h"

#include "moon_test.h"

#include <string.h>

static void test_push_at_remove(void)
{
    moon_vec_t v;

    moon_vec_init(&v, sizeof(uint32_t));
    CU_ASSERT_EQUAL(moon_vec_len(&v), 0);
    for (uint32_t i = 0; i < 100; i++) {
        CU_ASSERT_EQUAL_FATAL(moon_vec_push(&v, &i), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_vec_len(&v), 100);
    for (uint32_t i = 0; i < 100; i++) {
        CU_ASSERT_EQUAL(*(uint32_t *)moon_vec_at(&v, i), i);
    }
    moon_vec_remove_swap(&v, 10); /* the last (99) moves into 10 */
    CU_ASSERT_EQUAL(moon_vec_len(&v), 99);
    CU_ASSERT_EQUAL(*(uint32_t *)moon_vec_at(&v, 10), 99);
    moon_vec_remove_swap(&v, 98); /* the last itself */
    CU_ASSERT_EQUAL(moon_vec_len(&v), 98);
    CU_ASSERT_EQUAL(*(uint32_t *)moon_vec_at(&v, 97), 97);
    moon_vec_pop(&v);
    CU_ASSERT_EQUAL(moon_vec_len(&v), 97);
    moon_vec_clear(&v);
    CU_ASSERT_EQUAL(moon_vec_len(&v), 0);
    moon_vec_fini(&v);
    moon_vec_fini(&v); /* twice: still empty, no double free */
    CU_ASSERT_PTR_NULL(moon_vec_data(&v));
}

static void test_append_bytes(void)
{
    moon_vec_t v;

    moon_vec_init(&v, 1);
    CU_ASSERT_EQUAL(moon_vec_append(&v, "hello ", 6), MOON_OK);
    CU_ASSERT_EQUAL(moon_vec_append(&v, "world", 6), MOON_OK);
    CU_ASSERT_EQUAL(moon_vec_append(&v, NULL, 0), MOON_OK);
    CU_ASSERT_STRING_EQUAL(moon_vec_data(&v), "hello world");
    CU_ASSERT_EQUAL(moon_vec_len(&v), 12);
    moon_vec_truncate(&v, 5); /* a rollback to a mark */
    CU_ASSERT_EQUAL(moon_vec_append(&v, "!", 2), MOON_OK);
    CU_ASSERT_STRING_EQUAL(moon_vec_data(&v), "hello!");
    moon_vec_fini(&v);
}

/* A push that cannot grow changes nothing, and works once memory is back. */
static void test_failed_growth_changes_nothing(void)
{
    moon_vec_t v;
    uint64_t   x = 0;

    moon_vec_init(&v, sizeof(x));
    CU_ASSERT_EQUAL_FATAL(moon_vec_reserve(&v, 4), MOON_OK);
    moon_fault_fail_after(1);
    for (x = 0; x < 4; x++) {
        CU_ASSERT_EQUAL(moon_vec_push(&v, &x), MOON_OK); /* within the reservation */
    }
    CU_ASSERT_EQUAL(moon_vec_push(&v, &x), MOON_ERR_NO_MEMORY);
    CU_ASSERT_EQUAL(moon_vec_append(&v, &x, 1), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    CU_ASSERT_EQUAL(moon_vec_len(&v), 4);
    for (uint64_t i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(*(uint64_t *)moon_vec_at(&v, i), i);
    }
    CU_ASSERT_EQUAL(moon_vec_push(&v, &x), MOON_OK);
    CU_ASSERT_EQUAL(moon_vec_len(&v), 5);
    moon_vec_fini(&v);
}

static void test_size_overflow_refused(void)
{
    moon_vec_t v;

    moon_vec_init(&v, 16);
    CU_ASSERT_EQUAL(moon_vec_reserve(&v, SIZE_MAX / 8), MOON_ERR_NO_MEMORY);
    CU_ASSERT_EQUAL(moon_vec_len(&v), 0);
    CU_ASSERT_PTR_NULL(moon_vec_data(&v));
    moon_vec_fini(&v);
}

MOON_TEST_MAIN("vec", NULL, NULL, test_push_at_remove, test_append_bytes,
               test_failed_growth_changes_nothing, test_size_overflow_refused)
