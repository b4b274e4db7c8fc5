/* tests/unit/base/test_base.c - status strings, log levels, fault injection,
 * arrays that grow on use. */
#include "moonlet/alloc.h"
#include "moonlet/copy.h"
#include "moonlet/log.h"
#include "moonlet/status.h"

#include "moon_test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void test_status_str_never_null(void)
{
    for (int s = -40; s <= 2; s++) {
        CU_ASSERT_PTR_NOT_NULL(moon_status_str((moon_status_t)s));
    }
    CU_ASSERT_STRING_EQUAL(moon_status_str(MOON_OK), "ok");
    CU_ASSERT_STRING_EQUAL(moon_status_str(MOON_ERR_PEER_LOST), "peer lost");
    CU_ASSERT(moon_status_is_peer(MOON_ERR_PEER_LOST));
    CU_ASSERT(!moon_status_is_peer(MOON_ERR_NO_MEMORY));
}

static void test_log_parse_level(void)
{
    CU_ASSERT_EQUAL(moon_log_parse_level("debug"), MOON_LOG_DEBUG);
    CU_ASSERT_EQUAL(moon_log_parse_level("ERROR"), MOON_LOG_ERROR);
    CU_ASSERT_EQUAL(moon_log_parse_level("5"), MOON_LOG_TRACE);
    CU_ASSERT_EQUAL(moon_log_parse_level("6"), -1);
    CU_ASSERT_EQUAL(moon_log_parse_level("loud"), -1);
    CU_ASSERT_EQUAL(moon_log_parse_level(NULL), -1);
}

static char captured[2048];
static void capture(int level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    strncat(captured, line, sizeof(captured) - strlen(captured) - 1);
}

static void test_log_prefix_and_threshold(void)
{
    int saved = moon_log_level;

    captured[0] = '\0';
    moon_log_set_sink(capture, NULL);
    moon_log_set_rank(3);
    moon_log_set_thread_actor("decode", 0x42);
    moon_log_set_level(MOON_LOG_WARN);
    MOON_INFO("hidden %d", 1);
    CU_ASSERT_EQUAL(captured[0], '\0');
    MOON_WARN("shown %d", 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(captured, "[r3 t"));
    CU_ASSERT_PTR_NOT_NULL(strstr(captured, "decode@42"));
    CU_ASSERT_PTR_NOT_NULL(strstr(captured, "warn test_base.c:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(captured, "shown 2\n"));
    moon_log_set_thread_actor(NULL, 0);
    moon_log_set_sink(NULL, NULL);
    moon_log_set_level(saved);
}

static int side_effects;
static int bump(void)
{
    return ++side_effects;
}

static void test_log_arguments_not_evaluated_below_threshold(void)
{
    int saved = moon_log_level;

    moon_log_set_sink(capture, NULL);
    moon_log_set_level(MOON_LOG_WARN);
    side_effects = 0;
    MOON_DEBUG_LOG("x %d", bump()); /* below the runtime threshold */
    CU_ASSERT_EQUAL(side_effects, 0);
    moon_log_set_level(MOON_LOG_TRACE);
    MOON_TRACE("x %d", bump()); /* compiled out of release builds (MOON_LOG_MAX_LEVEL 4) */
    CU_ASSERT_EQUAL(side_effects, MOON_LOG_MAX_LEVEL >= MOON_LOG_TRACE ? 1 : 0);
    moon_log_set_sink(NULL, NULL);
    moon_log_set_level(saved);
}

static void test_fault_injection_fails_nth_allocation(void)
{
    void *a, *b, *c;

    moon_fault_fail_after(3);
    a = moon_malloc(8);
    b = moon_calloc(1, 8);
    c = moon_malloc(8);
    CU_ASSERT_PTR_NOT_NULL(a);
    CU_ASSERT_PTR_NOT_NULL(b);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_PTR_NULL(moon_strdup("x"));
    CU_ASSERT_EQUAL(moon_fault_count(), 4);
    moon_fault_reset();
    c = moon_strdup("abc");
    CU_ASSERT_STRING_EQUAL(c, "abc");
    moon_free(a);
    moon_free(b);
    moon_free(c);
}

/* moon_pages_alloc: zero pages, none resident until written, huge-page
 * aligned from MOON_PAGES_HUGE on; counted by fault injection. */
static void test_pages_alloc_zero_and_lazy(void)
{
    size_t   big = 3 * MOON_PAGES_HUGE + 100, small = 5000;
    uint8_t *a       = moon_pages_alloc(big);
    uint8_t *b       = moon_pages_alloc(small);
    size_t   nonzero = 0;

    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL((uintptr_t)a % MOON_PAGES_HUGE, 0);
    CU_ASSERT_EQUAL((uintptr_t)b % 4096, 0);
    CU_ASSERT_EQUAL(moon_test_resident_bytes(a, big), 0); /* reserved, not backed */
    memset(a + MOON_PAGES_HUGE, 7, 4096);                 /* one page of the second huge page */
    CU_ASSERT(moon_test_resident_bytes(a, big) >= 4096);
    CU_ASSERT(moon_test_resident_bytes(a, big) <= MOON_PAGES_HUGE);
    CU_ASSERT_EQUAL(moon_test_resident_bytes(a, MOON_PAGES_HUGE), 0);
    for (size_t i = 0; i < big; i += 997) { /* reads of untouched pages: zero */
        nonzero += a[i] != 0 && (i < MOON_PAGES_HUGE || i >= MOON_PAGES_HUGE + 4096);
    }
    CU_ASSERT_EQUAL(nonzero, 0);
    a[big - 1]   = 1; /* the last byte asked for is there */
    b[small - 1] = 1;
    CU_ASSERT_EQUAL(b[0], 0);
    moon_pages_free(a, big);
    moon_pages_free(b, small);
    moon_pages_free(NULL, small); /* a no-op */
    CU_ASSERT_PTR_NULL(moon_pages_alloc(0));
    moon_fault_fail_after(1);
    CU_ASSERT_PTR_NULL(moon_pages_alloc(small));
    CU_ASSERT_EQUAL(moon_fault_count(), 1);
    moon_fault_reset();
}

static void *alloc_one(void *arg)
{
    void *p = moon_malloc(8);

    *(int *)arg = p != NULL;
    moon_free(p);
    return NULL;
}

/* Armed "here", another thread's allocations neither fail nor count. */
static void test_fault_injection_here_spares_other_threads(void)
{
    pthread_t t;
    int       other_ok = 0;

    moon_fault_fail_after_here(1);
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, alloc_one, &other_ok), 0);
    pthread_join(t, NULL);
    CU_ASSERT(other_ok);
    CU_ASSERT_EQUAL(moon_fault_count(), 0);
    CU_ASSERT_PTR_NULL(moon_malloc(8));
    CU_ASSERT_EQUAL(moon_fault_count(), 1);
    moon_fault_reset();
    moon_fault_fail_after(1); /* the plain one again fails every thread's */
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, alloc_one, &other_ok), 0);
    pthread_join(t, NULL);
    CU_ASSERT(!other_ok);
    moon_fault_reset();
}

/* Every size around the thresholds, every alignment of both ends: the bytes
 * of the range and nothing outside it. */
static void test_copy_stream_copies_exactly(void)
{
    const size_t sizes[] = {0, 1, 15, 63, 64, 65, 4095, 4096, 4097, 65536 + 17, (1u << 20) + 3};
    const size_t max     = (1u << 20) + 64 + 64;
    uint8_t     *src = malloc(max), *dst = malloc(max);

    CU_ASSERT_PTR_NOT_NULL_FATAL(src);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dst);
    for (size_t i = 0; i < max; i++) {
        src[i] = (uint8_t)(i * 131 + 7);
    }
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (size_t so = 0; so < 3; so++) {
            for (size_t doff = 0; doff < 20; doff += 7) {
                int ok = 1;
                memset(dst, 0xEE, max);
                moon_copy_stream(dst + doff, src + so, sizes[k]);
                ok &= memcmp(dst + doff, src + so, sizes[k]) == 0;
                for (size_t i = 0; i < doff; i++) {
                    ok &= dst[i] == 0xEE;
                }
                for (size_t i = doff + sizes[k]; i < doff + sizes[k] + 64 && i < max; i++) {
                    ok &= dst[i] == 0xEE;
                }
                CU_ASSERT(ok);
            }
        }
    }
    free(src);
    free(dst);
}

/* Tables that grow on use: capacities double from 64 up to the limit, the
 * new elements are zero, nothing is touched while the capacity suffices,
 * and a failed growth leaves the capacity and the elements as they were. */
static void test_grow_tables_double_to_limit(void)
{
    uint32_t               *a = NULL, cap = 0, small_cap = 0;
    uint64_t               *b = NULL, *c = NULL, *d = NULL;
    const moon_grow_table_t t[]   = {MOON_GROW_TABLE(a), MOON_GROW_TABLE(b)};
    const moon_grow_table_t small = MOON_GROW_TABLE(c);
    const moon_grow_table_t huge  = {(void **)&d, SIZE_MAX / 4};

    CU_ASSERT_EQUAL(moon_grow_tables(t, 2, 1, 1000, &cap), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(cap, 64);
    CU_ASSERT_FATAL(a != NULL && b != NULL);
    CU_ASSERT(a[0] == 0 && a[63] == 0 && b[0] == 0 && b[63] == 0);
    a[0]  = 1;
    a[63] = 4;
    b[5]  = 7;
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_grow_tables(t, 2, 64, 1000, &cap), MOON_OK); /* room: no allocation */
    CU_ASSERT_EQUAL(moon_fault_count(), 0);
    moon_fault_reset();
    moon_fault_fail_after(2); /* a grows, b fails */
    CU_ASSERT_EQUAL(moon_grow_tables(t, 2, 65, 1000, &cap), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    CU_ASSERT_EQUAL(cap, 64);
    CU_ASSERT(a[0] == 1 && a[63] == 4 && b[5] == 7);
    CU_ASSERT_EQUAL(moon_grow_tables(t, 2, 65, 1000, &cap), MOON_OK);
    CU_ASSERT_EQUAL(cap, 128);
    CU_ASSERT(a[0] == 1 && a[63] == 4 && a[64] == 0 && a[127] == 0 && b[5] == 7 && b[127] == 0);
    CU_ASSERT_EQUAL(moon_grow_tables(t, 2, 300, 1000, &cap), MOON_OK);
    CU_ASSERT_EQUAL(cap, 300); /* more than double asked: what was asked */
    CU_ASSERT_EQUAL(moon_grow_tables(t, 2, 301, 1000, &cap), MOON_OK);
    CU_ASSERT_EQUAL(cap, 600);
    CU_ASSERT_EQUAL(moon_grow_tables(t, 2, 601, 1000, &cap), MOON_OK);
    CU_ASSERT_EQUAL(cap, 1000); /* never past the limit */
    CU_ASSERT_EQUAL(moon_grow_tables(t, 2, 1001, 1000, &cap), MOON_OK);
    CU_ASSERT_EQUAL(cap, 1000);
    CU_ASSERT(a[999] == 0 && b[999] == 0);
    CU_ASSERT_EQUAL(moon_grow_tables(&small, 1, 5, 10, &small_cap), MOON_OK);
    CU_ASSERT_EQUAL(small_cap, 10); /* a limit under 64 */
    small_cap = 0;
    CU_ASSERT_EQUAL(moon_grow_tables(&huge, 1, 8, 8, &small_cap), MOON_ERR_NO_MEMORY);
    CU_ASSERT_EQUAL(small_cap, 0); /* the byte count would overflow */
    CU_ASSERT_PTR_NULL(d);
    MOON_FREE_ALL(a, b, c);
}

MOON_TEST_MAIN("base", NULL, NULL, test_status_str_never_null, test_log_parse_level,
               test_log_prefix_and_threshold, test_log_arguments_not_evaluated_below_threshold,
               test_fault_injection_fails_nth_allocation, test_pages_alloc_zero_and_lazy,
               test_fault_injection_here_spares_other_threads, test_copy_stream_copies_exactly,
               test_grow_tables_double_to_limit)
