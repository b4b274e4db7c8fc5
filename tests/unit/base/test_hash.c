/* tests/unit/base/test_hash.c - the hash family: XXH3 values, strings as
 * their bytes, seeds, the integer mix and combining. */
#include "moonlet/hash.h"

#include "moon_test.h"

#include <string.h>

static void test_bytes_are_xxh3(void)
{
    /* XXH3_64bits of the empty input, seed 0 (the reference's test vector) */
    CU_ASSERT_EQUAL(moon_hash_bytes(NULL, 0), 0x2D06800538D394C2ull);
    CU_ASSERT_EQUAL(moon_hash_bytes("moonlet", 7), moon_hash_str("moonlet"));
    CU_ASSERT_NOT_EQUAL(moon_hash_bytes("moonlet", 7), moon_hash_bytes("moonlet", 6));
    CU_ASSERT_EQUAL(moon_hash_bytes_seeded("moonlet", 7, 0), moon_hash_bytes("moonlet", 7));
    CU_ASSERT_NOT_EQUAL(moon_hash_bytes_seeded("moonlet", 7, 1), moon_hash_bytes("moonlet", 7));
}

static void test_mix_spreads_consecutive_ints(void)
{
    uint64_t prev            = moon_hash_mix64(0);
    int      low_bits_differ = 0;

    CU_ASSERT_EQUAL(prev, 0); /* murmur3's finalizer fixes 0 */
    for (uint64_t k = 1; k < 1000; k++) {
        uint64_t h = moon_hash_mix64(k);
        CU_ASSERT_NOT_EQUAL(h, prev);
        low_bits_differ += (h & 0xff) != (prev & 0xff);
        prev = h;
    }
    CU_ASSERT(low_bits_differ > 980); /* consecutive keys land in scattered buckets */
}

static void test_combine_is_ordered(void)
{
    uint64_t ab = moon_hash_combine(moon_hash_combine(1, 2), 3);
    uint64_t ba = moon_hash_combine(moon_hash_combine(1, 3), 2);

    CU_ASSERT_NOT_EQUAL(ab, ba);
    CU_ASSERT_EQUAL(ab, moon_hash_combine(moon_hash_combine(1, 2), 3));
}

MOON_TEST_MAIN("hash", NULL, NULL, test_bytes_are_xxh3, test_mix_spreads_consecutive_ints,
               test_combine_is_ordered)
