/* tests/unit/kvstore/test_kv_index.c - the global prefix index: snapshots,
 * live events, gaps, lost shards, other tags, and a table that holds only
 * the keys some shard holds (churn of distinct blocks does not grow it). */
#include "moon_test.h"
#include "moonlet/kv_index.h"
#include "moonlet/kv_shard.h"

#include <string.h>

static const moon_kv_tag_t TAG = {42, 1};

static void ev_of(uint64_t *ev, uint64_t kind, uint64_t lo, const moon_kv_tag_t *tag)
{
    ev[0] = kind;
    ev[1] = lo;
    ev[2] = lo * 7;
    ev[3] = tag->model_id;
    ev[4] = tag->weight_version;
}

static moon_kv_key_t key(uint64_t lo)
{
    moon_kv_key_t k = {lo, lo * 7};
    return k;
}

static void test_snapshot_then_live_events(void)
{
    moon_kv_index_t *x;
    uint64_t         ev[3 * 5];
    moon_kv_key_t    keys[4] = {key(1), key(2), key(3), key(4)};

    CU_ASSERT_EQUAL_FATAL(moon_kv_index_create(2, &TAG, &x), MOON_OK);
    /* live events before any snapshot are refused */
    ev_of(ev, MOON_KV_EVENT_STORED, 1, &TAG);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 0, 0, ev, 1), MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, keys, 4), 0);
    /* snapshot of shard 0: keys 1, 2; next live event is number 10 */
    ev_of(ev, MOON_KV_EVENT_STORED, 1, &TAG);
    ev_of(ev + 5, MOON_KV_EVENT_STORED, 2, &TAG);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 10, 1, ev, 2), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, keys, 4), 2);
    /* live: key 3 stored on shard 1 needs shard 1's snapshot first */
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 1, 0, 1, NULL, 0), MOON_OK);
    ev_of(ev, MOON_KV_EVENT_STORED, 3, &TAG);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 1, 0, 0, ev, 1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, keys, 4), 3);
    CU_ASSERT_EQUAL(moon_kv_index_count(x), 3);
    /* key 2 evicted from shard 0: the prefix stops at 1 */
    ev_of(ev, MOON_KV_EVENT_EVICTED, 2, &TAG);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 10, 0, ev, 1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, keys, 4), 1);
    CU_ASSERT_EQUAL(moon_kv_index_count(x), 2);
    moon_kv_index_destroy(x);
}

static void test_gap_drops_the_shard_until_its_next_snapshot(void)
{
    moon_kv_index_t *x;
    uint64_t         ev[5];
    moon_kv_key_t    k1 = key(1);

    CU_ASSERT_EQUAL_FATAL(moon_kv_index_create(1, &TAG, &x), MOON_OK);
    ev_of(ev, MOON_KV_EVENT_STORED, 1, &TAG);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 5, 1, ev, 1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, &k1, 1), 1);
    /* event 5 was lost: 6 comes */
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 6, 0, ev, 1), MOON_ERR_CORRUPT);
    CU_ASSERT_FALSE(moon_kv_index_synced(x, 0));
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, &k1, 1), 0);
    CU_ASSERT_EQUAL(moon_kv_index_count(x), 0);
    /* the re-subscription's snapshot restores it */
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 7, 1, ev, 1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, &k1, 1), 1);
    moon_kv_index_destroy(x);
}

static void test_lost_shard_and_other_tags(void)
{
    moon_kv_index_t *x;
    uint64_t         ev[10];
    moon_kv_tag_t    other = {42, 2};
    moon_kv_key_t    k1 = key(1), k9 = key(9);

    CU_ASSERT_EQUAL_FATAL(moon_kv_index_create(2, &TAG, &x), MOON_OK);
    ev_of(ev, MOON_KV_EVENT_STORED, 1, &TAG);
    ev_of(ev + 5, MOON_KV_EVENT_STORED, 9, &other); /* another weight version */
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 0, 1, ev, 2), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 1, 0, 1, ev, 1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, &k9, 1), 0);
    moon_kv_index_drop_shard(x, 0);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, &k1, 1), 1); /* shard 1 still has it */
    moon_kv_index_drop_shard(x, 1);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, &k1, 1), 0);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 2, 0, 1, NULL, 0), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_index_create(0, &TAG, &x), MOON_ERR_INVALID_PARAM);
    moon_kv_index_destroy(x);
}

/* A weight switch: the old version's keys are forgotten at once (a block
 * computed by version 1 is never found for version 2), the new version's
 * events count from then on with the shard's numbering going on, the old
 * version's later events are ignored. */
static void test_switch_drops_the_old_version(void)
{
    moon_kv_index_t *x;
    uint64_t         ev[10];
    moon_kv_tag_t    v2      = {42, 2};
    moon_kv_key_t    keys[2] = {key(1), key(2)};

    CU_ASSERT_EQUAL_FATAL(moon_kv_index_create(1, &TAG, &x), MOON_OK);
    ev_of(ev, MOON_KV_EVENT_STORED, 1, &TAG);
    ev_of(ev + 5, MOON_KV_EVENT_STORED, 2, &TAG);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 5, 1, ev, 2), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, keys, 2), 2);
    CU_ASSERT_EQUAL(moon_kv_index_set_tag(x, &v2), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_count(x), 0);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, keys, 2), 0);
    CU_ASSERT_TRUE(moon_kv_index_synced(x, 0));
    /* version 1's block stored late (a request that started on it) and
     * version 2's: only the latter counts; the numbering goes on (5, 6) */
    ev_of(ev, MOON_KV_EVENT_STORED, 1, &TAG);
    ev_of(ev + 5, MOON_KV_EVENT_STORED, 2, &v2);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 5, 0, ev, 2), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, keys, 1), 0);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, keys + 1, 1), 1);
    CU_ASSERT_EQUAL(moon_kv_index_count(x), 1);
    CU_ASSERT_EQUAL(moon_kv_index_set_tag(x, NULL), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_index_count(x), 1);
    moon_kv_index_destroy(x);
}

/* A long run of distinct blocks, each stored then evicted (a store under
 * churn): the table ends as small as it started, and a key two shards hold
 * stays until both lost it, evicted or dropped. */
static void test_churn_leaves_no_entries(void)
{
    enum { N = 20000 };
    moon_kv_index_t *x;
    uint64_t         ev[2 * 5];
    moon_kv_key_t    k      = key(7);
    uint64_t         seq[2] = {0, 0};

    CU_ASSERT_EQUAL_FATAL(moon_kv_index_create(2, &TAG, &x), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, 0, 1, NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 1, 0, 1, NULL, 0), MOON_OK);
    for (uint64_t i = 0; i < N; i++) {
        uint32_t s = (uint32_t)(i & 1);
        ev_of(ev, MOON_KV_EVENT_STORED, 100 + i, &TAG);
        ev_of(ev + 5, MOON_KV_EVENT_EVICTED, 100 + i, &TAG);
        CU_ASSERT_EQUAL_FATAL(moon_kv_index_apply(x, s, seq[s], 0, ev, 2), MOON_OK);
        seq[s] += 2;
    }
    CU_ASSERT_EQUAL(moon_kv_index_count(x), 0);
    CU_ASSERT_EQUAL(moon_kv_index_entries(x), 0);
    /* key 7 on both shards: shard 0 evicts it, shard 1 still holds it */
    ev_of(ev, MOON_KV_EVENT_STORED, 7, &TAG);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, seq[0]++, 0, ev, 1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 1, seq[1]++, 0, ev, 1), MOON_OK);
    ev_of(ev, MOON_KV_EVENT_EVICTED, 7, &TAG);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, seq[0]++, 0, ev, 1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, &k, 1), 1);
    CU_ASSERT_EQUAL(moon_kv_index_entries(x), 1);
    /* shard 1 lost: its keys leave the table, not only the mask */
    ev_of(ev, MOON_KV_EVENT_STORED, 8, &TAG);
    CU_ASSERT_EQUAL(moon_kv_index_apply(x, 0, seq[0]++, 0, ev, 1), MOON_OK);
    moon_kv_index_drop_shard(x, 1);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, &k, 1), 0);
    CU_ASSERT_EQUAL(moon_kv_index_count(x), 1); /* key 8, on shard 0 */
    CU_ASSERT_EQUAL(moon_kv_index_entries(x), 1);
    k = key(8);
    CU_ASSERT_EQUAL(moon_kv_index_prefix(x, &k, 1), 1);
    moon_kv_index_destroy(x);
}

MOON_TEST_MAIN("kv_index", NULL, NULL, test_snapshot_then_live_events,
               test_gap_drops_the_shard_until_its_next_snapshot, test_lost_shard_and_other_tags,
               test_switch_drops_the_old_version, test_churn_leaves_no_entries)
