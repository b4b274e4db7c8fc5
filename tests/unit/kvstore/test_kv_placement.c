/* tests/unit/kvstore/test_kv_placement.c - rendezvous placement, replicas on
 * distinct shards, minimal movement, read order after a shard is gone. */
#include "moonlet/kv_placement.h"

#include "moonlet/alloc.h"

#include "kv_test_util.h"

static const uint32_t ids8[8] = {10, 11, 12, 13, 14, 15, 16, 17};

static void test_replicas_are_distinct_and_deterministic(void)
{
    moon_kv_placement_t *pl = NULL;
    uint32_t             a[3], b[3];

    CU_ASSERT_EQUAL_FATAL(moon_kv_placement_create(ids8, 8, 3, &pl), MOON_OK);
    for (uint64_t k = 0; k < 1000; k++) {
        CU_ASSERT_EQUAL(moon_kv_placement_write_set(pl, kv_key(k), a), 3);
        CU_ASSERT_EQUAL(moon_kv_rendezvous(kv_key(k), ids8, 8, b, 3), 3);
        CU_ASSERT_EQUAL(memcmp(a, b, sizeof(a)), 0);
        CU_ASSERT(a[0] != a[1] && a[0] != a[2] && a[1] != a[2]);
        CU_ASSERT(moon_kv_rendezvous_weight(kv_key(k), a[0]) >=
                  moon_kv_rendezvous_weight(kv_key(k), a[1]));
    }
    moon_kv_placement_destroy(pl);
}

static void test_keys_spread_evenly(void)
{
    unsigned count[8] = {0};
    uint32_t out;

    for (uint64_t k = 0; k < 80000; k++) {
        CU_ASSERT_EQUAL(moon_kv_rendezvous(kv_key(k), ids8, 8, &out, 1), 1);
        count[out - 10]++;
    }
    for (int i = 0; i < 8; i++) {
        CU_ASSERT(count[i] > 9000 && count[i] < 11000); /* 10000 each, +-10 % */
    }
}

static void test_removing_a_shard_moves_only_its_keys(void)
{
    uint32_t seven[7] = {10, 11, 12, 14, 15, 16, 17}; /* 13 is gone */
    unsigned moved = 0, wrong = 0;

    for (uint64_t k = 0; k < 20000; k++) {
        uint32_t before[2], after[2];

        moon_kv_rendezvous(kv_key(k), ids8, 8, before, 2);
        moon_kv_rendezvous(kv_key(k), seven, 7, after, 2);
        if (before[0] != 13 && before[1] != 13) {
            wrong += before[0] != after[0] || before[1] != after[1];
        } else {
            moved++;
            /* the survivor keeps its place, first */
            wrong += after[0] != (before[0] == 13 ? before[1] : before[0]);
        }
    }
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT(moved > 4000 && moved < 6000); /* about 2/8 of the keys */
}

static void test_reads_go_to_the_surviving_replica_first(void)
{
    moon_kv_placement_t *pl = NULL;
    uint32_t             home[3], rd[8], wr[3];

    CU_ASSERT_EQUAL_FATAL(moon_kv_placement_create(ids8, 8, 3, &pl), MOON_OK);
    for (uint64_t k = 0; k < 200; k++) {
        moon_kv_placement_set_live(pl, 0, 1);
        for (uint32_t i = 0; i < 8; i++) {
            moon_kv_placement_set_live(pl, ids8[i], 1);
        }
        CU_ASSERT_EQUAL(moon_kv_placement_home_set(pl, kv_key(k), home), 3);
        CU_ASSERT_EQUAL(moon_kv_placement_set_live(pl, home[0], 0), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_placement_n_live(pl), 7);
        CU_ASSERT_EQUAL(moon_kv_placement_read_set(pl, kv_key(k), rd, 8), 7);
        CU_ASSERT_EQUAL(rd[0], home[1]);
        CU_ASSERT_EQUAL(rd[1], home[2]);
        CU_ASSERT_EQUAL(moon_kv_placement_write_set(pl, kv_key(k), wr), 3);
        CU_ASSERT_EQUAL(memcmp(wr, rd, sizeof(wr)), 0);
        for (uint32_t i = 0; i < 7; i++) {
            CU_ASSERT_NOT_EQUAL(rd[i], home[0]);
        }
        CU_ASSERT_EQUAL(moon_kv_placement_home_set(pl, kv_key(k), wr), 3); /* unchanged */
        CU_ASSERT_EQUAL(memcmp(wr, home, sizeof(wr)), 0);
    }
    moon_kv_placement_destroy(pl);
}

static void test_fewer_live_shards_than_replicas(void)
{
    moon_kv_placement_t *pl     = NULL;
    uint32_t             ids[3] = {1, 2, 3}, out[3];

    CU_ASSERT_EQUAL_FATAL(moon_kv_placement_create(ids, 3, 3, &pl), MOON_OK);
    moon_kv_placement_set_live(pl, 1, 0);
    moon_kv_placement_set_live(pl, 2, 0);
    CU_ASSERT_EQUAL(moon_kv_placement_write_set(pl, kv_key(1), out), 1);
    CU_ASSERT_EQUAL(out[0], 3);
    moon_kv_placement_set_live(pl, 3, 0);
    CU_ASSERT_EQUAL(moon_kv_placement_write_set(pl, kv_key(1), out), 0);
    CU_ASSERT_EQUAL(moon_kv_placement_read_set(pl, kv_key(1), out, 3), 0);
    moon_kv_placement_destroy(pl);
}

static void test_bad_membership_is_rejected(void)
{
    moon_kv_placement_t *pl     = NULL;
    uint32_t             dup[3] = {1, 2, 1};

    CU_ASSERT_EQUAL(moon_kv_placement_create(dup, 3, 1, &pl), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_placement_create(ids8, 8, 0, &pl), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_placement_create(ids8, 8, 9, &pl), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_placement_create(ids8, 0, 1, &pl), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(pl);
    CU_ASSERT_EQUAL_FATAL(moon_kv_placement_create(ids8, 8, 2, &pl), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_placement_set_live(pl, 99, 0), MOON_ERR_NOT_FOUND);
    moon_kv_placement_destroy(pl);
    moon_kv_placement_destroy(NULL);
    for (uint64_t n = 1; n <= 4; n++) {
        moon_fault_fail_after(n);
        pl = NULL;
        CU_ASSERT_EQUAL(moon_kv_placement_create(ids8, 8, 2, &pl),
                        n <= 4 ? MOON_ERR_NO_MEMORY : MOON_OK);
        moon_fault_reset();
        CU_ASSERT_PTR_NULL(pl);
    }
}

MOON_TEST_MAIN("kv_placement", NULL, NULL, test_replicas_are_distinct_and_deterministic,
               test_keys_spread_evenly, test_removing_a_shard_moves_only_its_keys,
               test_reads_go_to_the_surviving_replica_first, test_fewer_live_shards_than_replicas,
               test_bad_membership_is_rejected)
