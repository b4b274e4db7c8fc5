/* tests/support/moon_test.h - shared CUnit driver and helpers for Moonlet tests.
 * Single-threaded use from the test's main(). */
#ifndef MOON_TEST_H
#define MOON_TEST_H

#include <CUnit/CUnit.h>
#include <stdint.h>

#include <stddef.h>

/* One suite: a name, CUnit's init and cleanup (NULL: none) and its tests,
 * each listed once, as its function; the test is named after the function
 * less its "test_" prefix. Build one with MOON_TEST_SUITE. */
typedef struct {
    const char        *name;
    CU_InitializeFunc  init;
    CU_CleanupFunc     clean;
    const char        *fn_names; /* the function list, stringized: "test_a, test_b" */
    const CU_TestFunc *fns;
    size_t             n_fns;
} moon_test_suite_t;

/* The list is expanded before it is stringized, so an entry may be a macro
 * that stands for several tests (or none: tests built only with CUDA). */
#define MOON_TEST_SUITE(name, init, clean, ...) MOON_TEST_SUITE_(name, init, clean, __VA_ARGS__)
#define MOON_TEST_SUITE_(name, init, clean, ...)                                                   \
    ((moon_test_suite_t){(name), (init), (clean), #__VA_ARGS__,                                    \
                         (const CU_TestFunc[]){__VA_ARGS__},                                       \
                         sizeof((const CU_TestFunc[]){__VA_ARGS__}) / sizeof(CU_TestFunc)})

/* Registers the suite, runs it in basic verbose mode and returns 0 when every
 * assertion passed, 1 otherwise (also when CUnit itself failed to set up). */
int moon_test_run(moon_test_suite_t suite);
#define MOON_TEST_RUN(name, init, clean, ...)                                                      \
    moon_test_run(MOON_TEST_SUITE(name, init, clean, __VA_ARGS__))

/* The whole main() of a test executable that only runs its suite. */
#define MOON_TEST_MAIN(name, init, clean, ...)                                                     \
    int main(void)                                                                                 \
    {                                                                                              \
        return MOON_TEST_RUN(name, init, clean, __VA_ARGS__);                                      \
    }

/* Prints "skipped: <why>" once, for tests that cannot run here (no GPU...).
 * CUnit 2.1 has no skip: the caller returns and the test passes. */
void moon_test_skip(const char *why);

/* splitmix64: a small seeded generator for reproducible random inputs. */
static inline uint64_t moon_test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Seconds on the monotonic clock, for waits with a deadline in tests. */
double moon_test_now_s(void);

/* The process's resident bytes now (/proc/self/statm; 0 where unreadable):
 * for "this allocates next to nothing" checks, in bytes, never in time. */
size_t moon_test_rss_bytes(void);

/* How many of the bytes [p, p + n) sit on resident pages (mincore; p page
 * aligned): whether a buffer is backed where it was written and nowhere
 * else. 0 where mincore fails. */
size_t moon_test_resident_bytes(const void *p, size_t n);

/* A whole file, NUL-terminated, in a malloc'd buffer (free it); *len_p
 * (optional) gets its length. NULL: cannot open or read it. */
char *moon_test_read_file(const char *path, size_t *len_p);

#endif /* MOON_TEST_H */
