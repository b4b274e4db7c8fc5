/* tests/support/moon_test.h - shared CUnit driver and helpers for Moonlet tests.
 * Single-threaded use from the test's main(). */
#ifndef MOON_TEST_H
#define MOON_TEST_H

#include <CUnit/CUnit.h>
#include <stdint.h>

/* Registers the suites, runs them in basic verbose mode and returns 0 when every
 * assertion passed, 1 otherwise (also when CUnit itself failed to set up). */
int moon_test_run(CU_SuiteInfo *suites);

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

#endif /* MOON_TEST_H */
