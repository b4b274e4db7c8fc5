/* tests/unit/kvstore/test_kv_eviction.c - LRU eviction between watermarks, what
 * is never evicted (leased, pinned, reserved), a full store, events. */
#include "moonlet/kv_shard.h"

#include "kv_test_util.h"

static moon_kv_shard_t *make_shard(uint32_t n_slots, double high, double low, kv_events_t *ev)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;

    cfg                = kv_shard_config(n_slots, 64);
    cfg.shard_id       = 2;
    cfg.high_watermark = high;
    cfg.low_watermark  = low;
    cfg.on_event       = ev != NULL ? kv_record : NULL;
    cfg.event_arg      = ev;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    return shard;
}

static void test_least_recently_used_goes_first(void)
{
    kv_events_t      ev    = {0};
    moon_kv_shard_t *shard = make_shard(4, 1.0, 1.0, &ev);

    for (uint64_t i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 64), MOON_OK);
    }
    CU_ASSERT_TRUE(kv_check_i(shard, 0, 64)); /* a get is a use: 1 is now the oldest */
    CU_ASSERT_EQUAL(kv_put_i(shard, 4, 64), MOON_OK);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_EVICTED], 1);
    CU_ASSERT_TRUE(moon_kv_key_eq(ev.ev[ev.n - 2].key, kv_key(1))); /* evicted, then stored */
    CU_ASSERT_EQUAL(ev.ev[ev.n - 2].kind, MOON_KV_EVENT_EVICTED);
    CU_ASSERT_EQUAL(ev.ev[ev.n - 2].shard_id, 2);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_EQUAL(kv_put_i(shard, 5, 64), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(2)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_TRUE(kv_check_i(shard, 0, 64));
    CU_ASSERT_TRUE(kv_check_i(shard, 3, 64));
    CU_ASSERT_TRUE(kv_check_i(shard, 4, 64));
    CU_ASSERT_TRUE(kv_check_i(shard, 5, 64));
    moon_kv_shard_destroy(shard);
}

static void test_eviction_runs_from_high_to_low_watermark(void)
{
    kv_events_t           ev    = {0};
    moon_kv_shard_t      *shard = make_shard(100, 0.90, 0.85, &ev);
    moon_kv_shard_stats_t st;

    for (uint64_t i = 0; i < 90; i++) {
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 64), MOON_OK);
    }
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_EVICTED], 0); /* at the high mark, not above */
    CU_ASSERT_EQUAL(kv_put_i(shard, 90, 64), MOON_OK);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.used_slots, 85);
    CU_ASSERT_EQUAL(st.n_evicted, 6);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_EVICTED], 6);
    for (uint64_t i = 0; i < 6; i++) { /* the six oldest */
        CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(i)), MOON_KV_STATE_ABSENT);
    }
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(6)), MOON_KV_STATE_COMMITTED);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(90)), MOON_KV_STATE_COMMITTED);
    moon_kv_shard_destroy(shard);
}

static void test_full_store_is_no_resource_and_evicts_nothing_held(void)
{
    kv_events_t           ev    = {0};
    moon_kv_shard_t      *shard = make_shard(4, 0.9, 0.5, &ev);
    moon_kv_get_t         g0, g1;
    moon_kv_put_t         p3, p;
    moon_kv_shard_stats_t st;

    CU_ASSERT_EQUAL(kv_put_i(shard, 0, 64), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 64), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 2, 64), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(0), 1, 0, &g0), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &g1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_pin(shard, kv_key(2)), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_pin(shard, kv_key(2)), MOON_OK); /* idempotent */
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(3), 64, 1, 0, &p3), MOON_OK);
    /* 4 of 4 slots: two leased, one pinned, one reserved. */
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(4), 64, 1, 0, &p),
                    MOON_ERR_NO_RESOURCE);
    CU_ASSERT_EQUAL(kv_put_i(shard, 4, 64), MOON_ERR_NO_RESOURCE);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_EVICTED], 0);
    CU_ASSERT_TRUE(kv_check_i(shard, 2, 64));
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(3)), MOON_KV_STATE_RESERVED);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.used_slots, 4);
    CU_ASSERT_EQUAL(st.n_pinned, 1);
    CU_ASSERT_EQUAL(st.n_leases, 2);
    CU_ASSERT_EQUAL(st.n_reserved, 1);

    /* Unpinning makes room: the next put evicts that block. */
    CU_ASSERT_EQUAL(moon_kv_shard_unpin(shard, kv_key(2)), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 4, 64), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(2)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_EVICTED], 1);
    /* Leased blocks become evictable when released. */
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, g0.lease), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, g1.lease), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_revoke(shard, p3.token), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 5, 64), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 6, 64), MOON_OK);
    moon_kv_shard_destroy(shard);
}

static void test_pinned_block_survives_any_churn(void)
{
    moon_kv_shard_t *shard = make_shard(8, 0.9, 0.85, NULL);

    CU_ASSERT_EQUAL(kv_put_i(shard, 1000, 64), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_pin(shard, kv_key(1000)), MOON_OK);
    for (uint64_t i = 0; i < 200; i++) {
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 64), MOON_OK);
    }
    CU_ASSERT_TRUE(kv_check_i(shard, 1000, 64));
    CU_ASSERT_TRUE(kv_check_i(shard, 199, 64));
    /* A removed pinned block goes (remove is explicit; pin only stops eviction). */
    CU_ASSERT_EQUAL(moon_kv_shard_remove(shard, kv_key(1000)), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1000)), MOON_KV_STATE_ABSENT);
    moon_kv_shard_destroy(shard);
}

static void test_small_entry_table_recycles_coldest(void)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;
    moon_kv_put_t          a, b, c;

    cfg             = kv_shard_config(8, 64);
    cfg.max_entries = 2;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 64), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 2, 64), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 3, 64), MOON_OK); /* drops 1 for its entry */
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_TRUE(kv_check_i(shard, 2, 64));
    CU_ASSERT_EQUAL(moon_kv_shard_remove(shard, kv_key(2)), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_remove(shard, kv_key(3)), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(4), 64, 1, 0, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(5), 64, 1, 0, &b), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(6), 64, 1, 0, &c),
                    MOON_ERR_NO_RESOURCE);
    moon_kv_shard_destroy(shard); /* outstanding reservations die with the shard */
}

static void test_random_churn_keeps_accounting(void)
{
    moon_kv_shard_t      *shard = make_shard(32, 0.9, 0.8, NULL);
    moon_kv_get_t         held[8];
    unsigned              n_held = 0, bad = 0;
    uint64_t              seed = 11;
    moon_kv_shard_stats_t st;

    for (int step = 0; step < 20000; step++) {
        uint64_t      r = moon_test_rand(&seed);
        uint64_t      k = (r >> 8) % 64;
        moon_kv_get_t g;

        switch (r % 4) {
        case 0:
        case 1: {
            moon_status_t status = kv_put_i(shard, k, 64);

            bad += status != MOON_OK && status != MOON_ERR_EXISTS && status != MOON_ERR_NO_RESOURCE;
            break;
        }
        case 2:
            if (n_held < 8 && moon_kv_shard_get(shard, &kv_tag, kv_key(k), 1, 0, &g) == MOON_OK) {
                unsigned char want[64];

                kv_fill(want, 64, k);
                bad += memcmp(g.ptr, want, 64) != 0;
                held[n_held++] = g;
            } else if (n_held > 0) {
                bad += moon_kv_shard_release(shard, held[--n_held].lease) != MOON_OK;
            }
            break;
        default:
            moon_kv_shard_remove(shard, kv_key(k));
            break;
        }
    }
    while (n_held > 0) {
        bad += moon_kv_shard_release(shard, held[--n_held].lease) != MOON_OK;
    }
    CU_ASSERT_EQUAL(bad, 0);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_leases, 0);
    CU_ASSERT_EQUAL(st.used_slots, st.n_committed);
    CU_ASSERT(st.used_slots <= 29);
    moon_kv_shard_destroy(shard);
}

MOON_TEST_MAIN("kv_eviction", NULL, NULL, test_least_recently_used_goes_first,
               test_eviction_runs_from_high_to_low_watermark,
               test_full_store_is_no_resource_and_evicts_nothing_held,
               test_pinned_block_survives_any_churn, test_small_entry_table_recycles_coldest,
               test_random_churn_keeps_accounting)
