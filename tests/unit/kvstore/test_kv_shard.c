/* tests/unit/kvstore/test_kv_shard.c - shard puts, gets, leases, removes, pins,
 * queries, integrity and the library-level fault cases. */
#include "moonlet/kv_shard.h"

#include "moonlet/alloc.h"

#include "kv_test_util.h"

#define SEC 1000000000ull

static moon_kv_shard_t *make_shard(uint32_t n_slots, size_t slot_bytes, kv_events_t *events)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;

    cfg                = kv_shard_config(n_slots, slot_bytes);
    cfg.shard_id       = 5;
    cfg.high_watermark = 1.0;
    cfg.low_watermark  = 1.0;
    cfg.on_event       = events != NULL ? kv_record : NULL;
    cfg.event_arg      = events;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    return shard;
}

static void test_create_rejects_bad_config(void)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;
    char                   small[64];

    cfg = kv_shard_config(4, 0);
    CU_ASSERT_EQUAL(moon_kv_shard_create(&cfg, &shard), MOON_ERR_INVALID_PARAM);
    cfg.slot_bytes = 64;
    cfg.n_slots    = 0;
    CU_ASSERT_EQUAL(moon_kv_shard_create(&cfg, &shard), MOON_ERR_INVALID_PARAM);
    cfg.n_slots        = 4;
    cfg.high_watermark = 0.5;
    cfg.low_watermark  = 0.8;
    CU_ASSERT_EQUAL(moon_kv_shard_create(&cfg, &shard), MOON_ERR_INVALID_PARAM);
    cfg.high_watermark = 1.5;
    CU_ASSERT_EQUAL(moon_kv_shard_create(&cfg, &shard), MOON_ERR_INVALID_PARAM);
    cfg             = kv_shard_config(4, 64);
    cfg.arena       = small;
    cfg.arena_bytes = sizeof(small); /* 4 * 64 needed */
    CU_ASSERT_EQUAL(moon_kv_shard_create(&cfg, &shard), MOON_ERR_INVALID_PARAM);
    cfg.arena     = NULL;
    cfg.ssd_path  = "unused";
    cfg.ssd_bytes = 63; /* less than one slot */
    CU_ASSERT_EQUAL(moon_kv_shard_create(&cfg, &shard), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_create(NULL, &shard), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(shard);
    moon_kv_shard_destroy(NULL);
}

static void test_arena_is_one_page_aligned_region(void)
{
    moon_kv_shard_t *shard = make_shard(8, 4096, NULL);
    size_t           bytes = 0;
    char            *base  = moon_kv_shard_arena(shard, &bytes);
    moon_kv_put_t    put;

    CU_ASSERT_EQUAL(bytes, 8 * 4096);
    CU_ASSERT_EQUAL((uintptr_t)base % 4096, 0);
    for (uint64_t i = 0; i < 8; i++) {
        CU_ASSERT_EQUAL_FATAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(i), 100, 1, 0, &put),
                              MOON_OK);
        CU_ASSERT_PTR_EQUAL(put.ptr, base + put.offset);
        CU_ASSERT_EQUAL(put.offset % 4096, 0);
        CU_ASSERT(put.offset + 4096 <= bytes);
        CU_ASSERT_EQUAL(put.max_bytes, 4096);
    }
    moon_kv_shard_destroy(shard);
}

static void test_caller_arena_is_used(void)
{
    static unsigned char   mem[4 * 256];
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;
    moon_kv_get_t          get;

    cfg             = kv_shard_config(4, 256);
    cfg.arena       = mem;
    cfg.arena_bytes = sizeof(mem);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    CU_ASSERT_PTR_EQUAL(moon_kv_shard_arena(shard, NULL), mem);
    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 200), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &get), MOON_OK);
    CU_ASSERT((const unsigned char *)get.ptr >= mem &&
              (const unsigned char *)get.ptr < mem + sizeof(mem));
    moon_kv_shard_release(shard, get.lease);
    moon_kv_shard_destroy(shard); /* must not free mem */
}

static void test_put_then_get_is_zero_copy(void)
{
    moon_kv_shard_t *shard = make_shard(16, 4096, NULL);
    char            *base  = moon_kv_shard_arena(shard, NULL);
    moon_kv_get_t    get;
    unsigned char    want[3000];

    CU_ASSERT_EQUAL(kv_put_i(shard, 3, 3000), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_get(shard, &kv_tag, kv_key(3), 9, 0, &get), MOON_OK);
    kv_fill(want, sizeof(want), 3);
    CU_ASSERT_NOT_EQUAL(get.lease, 0);
    CU_ASSERT_PTR_EQUAL(get.ptr, base + get.offset);
    CU_ASSERT_EQUAL(get.n_bytes, 3000);
    CU_ASSERT_EQUAL(get.checksum, moon_kv_checksum(want, sizeof(want)));
    CU_ASSERT_EQUAL(memcmp(get.ptr, want, sizeof(want)), 0);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, get.lease), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, get.lease), MOON_ERR_NOT_FOUND);
    moon_kv_shard_destroy(shard);
}

static void test_reserved_block_is_invisible_until_commit(void)
{
    kv_events_t      ev    = {0};
    moon_kv_shard_t *shard = make_shard(4, 256, &ev);
    moon_kv_put_t    put;
    moon_kv_get_t    get;
    moon_kv_key_t    key = kv_key(1);
    uint8_t          present;
    size_t           n_hit;

    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_reserve(shard, &kv_tag, key, 256, 1, 0, &put), MOON_OK);
    kv_fill(put.ptr, 256, 1);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, key), MOON_KV_STATE_RESERVED);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, key, 2, 0, &get), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_exists(shard, &kv_tag, &key, 1, &present), MOON_OK);
    CU_ASSERT_EQUAL(present, 0);
    CU_ASSERT_EQUAL(moon_kv_shard_longest_prefix(shard, &kv_tag, &key, 1, &n_hit), MOON_OK);
    CU_ASSERT_EQUAL(n_hit, 0);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_STORED], 0);
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, put.token, 256, moon_kv_checksum(put.ptr, 256)),
                    MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, key), MOON_KV_STATE_COMMITTED);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_STORED], 1);
    CU_ASSERT_TRUE(moon_kv_key_eq(ev.ev[0].key, key));
    CU_ASSERT_EQUAL(ev.ev[0].shard_id, 5);
    CU_ASSERT_EQUAL(ev.ev[0].tag.weight_version, kv_tag.weight_version);
    CU_ASSERT_TRUE(kv_check_i(shard, 1, 256));
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, put.token, 256, 0), MOON_ERR_NOT_FOUND);
    moon_kv_shard_destroy(shard);
}

static void test_oversized_block_is_rejected(void)
{
    moon_kv_shard_t      *shard = make_shard(4, 256, NULL);
    moon_kv_put_t         put;
    moon_kv_shard_stats_t st;
    unsigned char         big[257] = {0};

    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(1), 257, 1, 0, &put),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(1), 0, 1, 0, &put),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_put(shard, &kv_tag, kv_key(1), big, sizeof(big), 1, 0),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(1), 256, 1, 0, &put),
                          MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, put.token, 257, 0), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1)), MOON_KV_STATE_RESERVED);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.used_slots, 1);
    moon_kv_shard_destroy(shard);
}

static void test_unknown_keys_and_ids_get_clear_statuses(void)
{
    moon_kv_shard_t *shard = make_shard(4, 256, NULL);
    moon_kv_get_t    get;

    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(77), 1, 0, &get), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_remove(shard, kv_key(77)), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_pin(shard, kv_key(77)), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_unpin(shard, kv_key(77)), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(77)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, 0), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, (1ull << 32) | 999999), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, (1ull << 32) | 0), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, 0, 10, 0), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, (1ull << 32) | 2, 10, 0), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_revoke(shard, (7ull << 32) | 1), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_lease_transfer_begin(shard, 0), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_lease_renew(shard, (1ull << 32) | 0, 0), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, NULL, kv_key(1), 1, 0, &get), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_exists(shard, &kv_tag, NULL, 1, NULL), MOON_ERR_INVALID_PARAM);
    moon_kv_shard_destroy(shard);
}

static void test_same_key_second_writer_gets_exists(void)
{
    moon_kv_shard_t *shard = make_shard(4, 256, NULL);
    moon_kv_put_t    a, b;
    moon_kv_key_t    key = kv_key(1);

    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_reserve(shard, &kv_tag, key, 100, 1, 0, &a), MOON_OK);
    b.token = 12345;
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, key, 100, 2, 0, &b), MOON_ERR_EXISTS);
    CU_ASSERT_EQUAL(b.token, 12345); /* untouched */
    /* The first writer gives up: the second may now write. */
    CU_ASSERT_EQUAL(moon_kv_shard_revoke(shard, a.token), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_revoke(shard, a.token), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_reserve(shard, &kv_tag, key, 100, 2, 0, &b), MOON_OK);
    CU_ASSERT_NOT_EQUAL(a.token, b.token);
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, a.token, 100, 0), MOON_ERR_NOT_FOUND);
    kv_fill(b.ptr, 100, 1);
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, b.token, 100, moon_kv_checksum(b.ptr, 100)),
                    MOON_OK);
    /* Committed blocks are immutable: a later put of the key says EXISTS. */
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, key, 100, 3, 0, &a), MOON_ERR_EXISTS);
    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 100), MOON_ERR_EXISTS);
    CU_ASSERT_TRUE(kv_check_i(shard, 1, 100));
    moon_kv_shard_destroy(shard);
}

static void test_commit_verifies_the_checksum(void)
{
    moon_kv_shard_t *shard = make_shard(4, 256, NULL);
    moon_kv_put_t    put;
    uint64_t         sum;

    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(1), 256, 1, 0, &put),
                          MOON_OK);
    kv_fill(put.ptr, 256, 1);
    sum = moon_kv_checksum(put.ptr, 256);
    ((unsigned char *)put.ptr)[17] ^= 1; /* a torn or corrupted write */
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, put.token, 256, sum), MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1)), MOON_KV_STATE_RESERVED);
    kv_fill(put.ptr, 256, 1); /* the writer retries */
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, put.token, 256, sum), MOON_OK);
    CU_ASSERT_TRUE(kv_check_i(shard, 1, 256));
    moon_kv_shard_destroy(shard);
}

static void test_client_dying_mid_put_reservation_expires(void)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;
    moon_kv_put_t          put;
    moon_kv_shard_stats_t  st;
    uint64_t               n;

    cfg                    = kv_shard_config(2, 128);
    cfg.reserve_timeout_ns = 2 * SEC;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(1), 128, 1, 10, &put),
                          MOON_OK);
    moon_kv_shard_expire(shard, 10 + 2 * SEC - 1, 0, &n);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1)), MOON_KV_STATE_RESERVED);
    moon_kv_shard_expire(shard, 10 + 2 * SEC, 0, &n);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1)), MOON_KV_STATE_ABSENT);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.used_slots, 0);
    CU_ASSERT_EQUAL(st.n_reserved, 0);
    CU_ASSERT_EQUAL(st.n_expired_reservations, 1);
    /* The writer was only slow: its late commit is refused, nothing corrupted. */
    CU_ASSERT_EQUAL(moon_kv_shard_reserve_renew(shard, put.token, 3 * SEC), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, put.token, 128, 0), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 128), MOON_OK);
    CU_ASSERT_TRUE(kv_check_i(shard, 1, 128));
    moon_kv_shard_destroy(shard);
}

static void test_renewed_reservation_outlives_the_timeout(void)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;
    moon_kv_put_t          slow, other;
    uint64_t               n;

    cfg                    = kv_shard_config(4, 128);
    cfg.reserve_timeout_ns = 2 * SEC;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(1), 128, 1, 0, &slow), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(2), 128, 2, SEC, &other), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve_renew(shard, slow.token, SEC + SEC / 2), MOON_OK);
    moon_kv_shard_expire(shard, 3 * SEC, 0, &n); /* other's deadline: 3 s; slow's: 3.5 s */
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(2)), MOON_KV_STATE_ABSENT);
    kv_fill(slow.ptr, 128, 1);
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, slow.token, 128, moon_kv_checksum(slow.ptr, 128)),
                    MOON_OK);
    moon_kv_shard_expire(shard, 10 * SEC, 0, &n);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_TRUE(kv_check_i(shard, 1, 128));
    moon_kv_shard_destroy(shard);
}

static void test_drop_client_revokes_and_releases(void)
{
    moon_kv_shard_t      *shard = make_shard(8, 128, NULL);
    moon_kv_put_t         put;
    moon_kv_get_t         g1, g2, g3;
    moon_kv_shard_stats_t st;

    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 128), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(2), 128, 66, 0, &put), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 66, 0, &g1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 66, 0, &g2), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 7, 0, &g3), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_drop_client(shard, 66), 3);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(2)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, g1.lease), MOON_ERR_NOT_FOUND);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_leases, 1);
    CU_ASSERT_EQUAL(st.used_slots, 1);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, g3.lease), MOON_OK);
    moon_kv_shard_destroy(shard);
}

static void test_remove_of_leased_block_is_deferred(void)
{
    kv_events_t           ev    = {0};
    moon_kv_shard_t      *shard = make_shard(2, 128, &ev);
    moon_kv_get_t         get, again;
    moon_kv_shard_stats_t st;
    unsigned char         want[128];

    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 128), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &get), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_remove(shard, kv_key(1)), MOON_OK);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_REMOVED], 1);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 2, 0, &again), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_remove(shard, kv_key(1)), MOON_ERR_NOT_FOUND);
    /* New puts take the free slot, then evict each other, never the leased slot. */
    CU_ASSERT_EQUAL(kv_put_i(shard, 2, 128), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 3, 128), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(2)), MOON_KV_STATE_ABSENT);
    kv_fill(want, 128, 1);
    CU_ASSERT_EQUAL(memcmp(get.ptr, want, 128), 0); /* the reader's bytes are intact */
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, get.lease), MOON_OK);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.used_slots, 1);
    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 128), MOON_OK); /* the key may be written again */
    CU_ASSERT_TRUE(kv_check_i(shard, 3, 128));
    CU_ASSERT_TRUE(kv_check_i(shard, 1, 128));
    moon_kv_shard_destroy(shard);
}

static void test_client_dying_mid_get_lease_is_swept(void)
{
    moon_kv_shard_t      *shard = make_shard(4, 128, NULL);
    moon_kv_get_t         dead, slow, busy;
    moon_kv_shard_stats_t st;
    uint64_t              n;

    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 128), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &dead), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 2, 0, &slow), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 3, 0, &busy), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_lease_transfer_begin(shard, busy.lease), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_lease_renew(shard, slow.lease, 4 * SEC), MOON_OK);

    moon_kv_shard_expire(shard, 5 * SEC, 0, &n); /* timeout 0: leases never expire */
    CU_ASSERT_EQUAL(n, 0);
    moon_kv_shard_expire(shard, 5 * SEC, 5 * SEC, &n);
    CU_ASSERT_EQUAL(n, 1); /* only the dead reader's */
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, dead.lease), MOON_ERR_NOT_FOUND);
    /* A transfer in flight never expires, however long it takes. */
    moon_kv_shard_expire(shard, 100 * SEC, 5 * SEC, &n);
    CU_ASSERT_EQUAL(n, 1); /* the slow one now */
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_leases, 1);
    CU_ASSERT_EQUAL(st.n_expired_leases, 2);
    CU_ASSERT_EQUAL(moon_kv_shard_remove(shard, kv_key(1)), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_lease_transfer_end(shard, busy.lease, 101 * SEC), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_lease_transfer_end(shard, busy.lease, 101 * SEC),
                    MOON_ERR_INVALID_PARAM);
    moon_kv_shard_expire(shard, 105 * SEC, 5 * SEC, &n);
    CU_ASSERT_EQUAL(n, 0); /* the clock restarted at transfer end */
    moon_kv_shard_expire(shard, 106 * SEC, 5 * SEC, &n);
    CU_ASSERT_EQUAL(n, 1);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_leases, 0);
    CU_ASSERT_EQUAL(st.used_slots, 0); /* the removed block went with its last lease */
    moon_kv_shard_destroy(shard);
}

static void test_release_during_transfer_ends_at_transfer_end(void)
{
    moon_kv_shard_t      *shard = make_shard(4, 128, NULL);
    moon_kv_get_t         get;
    moon_kv_shard_stats_t st;

    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 128), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &get), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_lease_transfer_begin(shard, get.lease), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_drop_client(shard, 1), 1); /* reader died mid-transfer */
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, get.lease), MOON_ERR_NOT_FOUND);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_leases, 1); /* the shard's transfer still reads the slot */
    CU_ASSERT_EQUAL(moon_kv_shard_lease_transfer_end(shard, get.lease, 0), MOON_OK);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_leases, 0);
    CU_ASSERT_EQUAL(moon_kv_shard_lease_transfer_end(shard, get.lease, 0), MOON_ERR_NOT_FOUND);
    moon_kv_shard_destroy(shard);
}

static void test_other_model_or_version_is_never_served(void)
{
    moon_kv_shard_t *shard = make_shard(4, 128, NULL);
    moon_kv_tag_t    v4    = {.model_id = kv_tag.model_id, .weight_version = 4};
    moon_kv_tag_t    m2    = {.model_id = 2, .weight_version = kv_tag.weight_version};
    moon_kv_get_t    get;
    moon_kv_key_t    key = kv_key(1);
    uint8_t          present;
    size_t           n_hit;

    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 128), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &v4, key, 1, 0, &get), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &m2, key, 1, 0, &get), MOON_ERR_NOT_FOUND);
    moon_kv_shard_exists(shard, &v4, &key, 1, &present);
    CU_ASSERT_EQUAL(present, 0);
    moon_kv_shard_longest_prefix(shard, &m2, &key, 1, &n_hit);
    CU_ASSERT_EQUAL(n_hit, 0);
    CU_ASSERT_TRUE(kv_check_i(shard, 1, 128));
    moon_kv_shard_destroy(shard);
}

/* A weight version retired: every block of the model below the serving
 * version goes (REMOVED events, a leased one once its lease ends); the
 * serving version's and another model's stay. */
static void test_remove_older_versions(void)
{
    kv_events_t      ev    = {0};
    moon_kv_shard_t *shard = make_shard(8, 128, &ev);
    moon_kv_tag_t    v4    = {.model_id = kv_tag.model_id, .weight_version = 4};
    moon_kv_tag_t    m2    = {.model_id = 2, .weight_version = 1};
    unsigned char    blk[128];
    moon_kv_get_t    get, get4;
    uint64_t         n = 99;

    for (uint64_t i = 1; i <= 3; i++) { /* version 3 */
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 128), MOON_OK);
    }
    kv_fill(blk, 128, 4);
    CU_ASSERT_EQUAL(moon_kv_shard_put(shard, &v4, kv_key(4), blk, 128, 1, 0), MOON_OK);
    kv_fill(blk, 128, 5);
    CU_ASSERT_EQUAL(moon_kv_shard_put(shard, &m2, kv_key(5), blk, 128, 1, 0), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &get), MOON_OK);
    moon_kv_shard_remove_older(shard, kv_tag.model_id, 4, &n);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_REMOVED], 3);
    for (uint64_t i = 1; i <= 3; i++) {
        CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(i)), MOON_KV_STATE_ABSENT);
    }
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &v4, kv_key(4), 2, 0, &get4), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, get4.lease), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, get.lease), MOON_OK); /* the removed one's */
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(5)), MOON_KV_STATE_COMMITTED);
    CU_ASSERT_EQUAL(moon_kv_shard_check(shard), MOON_OK);
    moon_kv_shard_remove_older(shard, kv_tag.model_id, 4, NULL); /* nothing left to remove */
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_REMOVED], 3);
    moon_kv_shard_destroy(shard);
}

static void test_corrupted_block_is_detected_and_dropped(void)
{
    kv_events_t           ev    = {0};
    moon_kv_shard_t      *shard = make_shard(4, 128, &ev);
    moon_kv_get_t         get;
    moon_kv_shard_stats_t st;

    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 128), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &get), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, get.lease), MOON_OK);
    ((unsigned char *)(uintptr_t)get.ptr)[5] ^= 0x40; /* a stray write into the arena */
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &get), MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_REMOVED], 1);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &get), MOON_ERR_NOT_FOUND);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_corrupt, 1);
    CU_ASSERT_EQUAL(st.used_slots, 0);
    moon_kv_shard_destroy(shard);
}

static void test_exists_and_longest_prefix_of_a_prompt(void)
{
    moon_kv_shard_t *shard = make_shard(64, 64, NULL);
    int32_t          tokens[8 * 16];
    moon_kv_key_t    keys[8];
    uint8_t          present[8];
    size_t           n, n_hit;
    unsigned char    blk[64] = {1};

    for (uint32_t i = 0; i < 8 * 16; i++) {
        tokens[i] = (int32_t)i * 7;
    }
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&kv_tag, 16, tokens, 8 * 16, keys, 8, &n), MOON_OK);
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(moon_kv_shard_put(shard, &kv_tag, keys[i], blk, 64, 1, 0), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_kv_shard_put(shard, &kv_tag, keys[6], blk, 64, 1, 0), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_exists(shard, &kv_tag, keys, 8, present), MOON_OK);
    for (int i = 0; i < 8; i++) {
        CU_ASSERT_EQUAL(present[i], i < 5 || i == 6);
    }
    CU_ASSERT_EQUAL(moon_kv_shard_longest_prefix(shard, &kv_tag, keys, 8, &n_hit), MOON_OK);
    CU_ASSERT_EQUAL(n_hit, 5);
    CU_ASSERT_EQUAL(moon_kv_shard_longest_prefix(shard, &kv_tag, keys, 0, &n_hit), MOON_OK);
    CU_ASSERT_EQUAL(n_hit, 0);
    moon_kv_shard_remove(shard, keys[2]);
    CU_ASSERT_EQUAL(moon_kv_shard_longest_prefix(shard, &kv_tag, keys, 8, &n_hit), MOON_OK);
    CU_ASSERT_EQUAL(n_hit, 2);
    moon_kv_shard_destroy(shard);
}

static void test_lease_table_full_is_no_resource(void)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;
    moon_kv_get_t          a, b, c;

    cfg            = kv_shard_config(4, 64);
    cfg.max_leases = 2;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    CU_ASSERT_EQUAL(kv_put_i(shard, 1, 64), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &b), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &c), MOON_ERR_NO_RESOURCE);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, a.lease), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(1), 1, 0, &c), MOON_OK);
    CU_ASSERT_NOT_EQUAL(c.lease, a.lease); /* a reused lease slot has a new id */
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, a.lease), MOON_ERR_NOT_FOUND);
    moon_kv_shard_release(shard, b.lease);
    moon_kv_shard_release(shard, c.lease);
    moon_kv_shard_destroy(shard);
}

/* A shard of n 8-byte slots that never evicts (watermarks 1.0), no commit
 * check: for tests of the index at scale. */
static moon_kv_shard_t *big_shard(uint32_t n)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;

    cfg                  = kv_shard_config(n, 8);
    cfg.high_watermark   = 1.0;
    cfg.low_watermark    = 1.0;
    cfg.verify_on_commit = 0;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    return shard;
}

static void test_a_million_keys_without_per_key_malloc(void)
{
    const uint32_t        n = 1u << 20;
    moon_kv_shard_t      *shard;
    uint64_t              block;
    unsigned              bad = 0;
    moon_kv_shard_stats_t st;

    shard = big_shard(n);
    moon_fault_fail_after(UINT64_MAX); /* counts allocations, fails none */
    for (uint32_t i = 0; i < n; i++) {
        block = i;
        bad += moon_kv_shard_put(shard, &kv_tag, kv_key(i), &block, 8, 1, 0) != MOON_OK;
    }
    for (uint32_t i = 0; i < n; i += 3) {
        bad += moon_kv_shard_remove(shard, kv_key(i)) != MOON_OK;
    }
    for (uint32_t i = 0; i < n; i++) {
        moon_kv_get_t get;
        moon_status_t status = moon_kv_shard_get(shard, &kv_tag, kv_key(i), 1, 0, &get);

        if (i % 3 == 0) {
            bad += status != MOON_ERR_NOT_FOUND;
        } else {
            bad += status != MOON_OK || memcmp(get.ptr, &(uint64_t){i}, 8) != 0;
            moon_kv_shard_release(shard, get.lease);
        }
    }
    CU_ASSERT_EQUAL(moon_fault_count(), 0);
    moon_fault_reset();
    CU_ASSERT_EQUAL(bad, 0);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.used_slots, n - (n + 2) / 3);
    moon_kv_shard_destroy(shard);
}

/* Structured keys (consecutive lo, one hi) must not cluster in the index: a
 * miss whose home lies inside one long run of buckets would probe all of it
 * (unmixed, 256 k consecutive keys make one run of 256 k buckets). */
static void test_consecutive_keys_do_not_cluster(void)
{
    const uint32_t   n = 1u << 18, n_miss = 4096;
    moon_kv_shard_t *shard;
    uint64_t         block = 0;
    unsigned         bad   = 0;
    uint8_t          present;

    shard = big_shard(n);
    for (uint32_t i = 0; i < n; i++) {
        moon_kv_key_t key = {.lo = i, .hi = 7};
        bad += moon_kv_shard_put(shard, &kv_tag, key, &block, 8, 1, 0) != MOON_OK;
    }
    CU_ASSERT_EQUAL_FATAL(bad, 0);
    printf("longest probe over %u consecutive keys: %llu buckets\n", n,
           (unsigned long long)moon_kv_shard_longest_probe(shard));
    CU_ASSERT(moon_kv_shard_longest_probe(shard) < 256);
    for (uint32_t i = 0; i < n_miss; i++) {
        /* same low bits as a stored key: unmixed, its home is inside the run */
        moon_kv_key_t key = {.lo = ((uint64_t)1 << 40) + (uint64_t)i * 61, .hi = 7};
        CU_ASSERT_EQUAL(moon_kv_shard_exists(shard, &kv_tag, &key, 1, &present), MOON_OK);
        bad += present != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    moon_kv_shard_destroy(shard);
}

static void test_allocation_failures_are_clean(void)
{
    moon_kv_shard_config_t cfg;
    int                    ok = 0;

    cfg = kv_shard_config(16, 64);
    for (uint64_t k = 1; k < 20 && !ok; k++) {
        moon_kv_shard_t *shard = NULL;
        moon_status_t    status;

        moon_fault_fail_after(k);
        status = moon_kv_shard_create(&cfg, &shard);
        moon_fault_reset();
        CU_ASSERT(status == MOON_OK || status == MOON_ERR_NO_MEMORY);
        if (status == MOON_OK) {
            ok = 1;
            CU_ASSERT_EQUAL(kv_put_i(shard, 1, 64), MOON_OK);
            moon_kv_shard_destroy(shard);
        } else {
            CU_ASSERT_PTR_NULL(shard);
        }
    }
    CU_ASSERT_TRUE(ok); /* and LSan reports no leak on the failed paths */
}

MOON_TEST_MAIN("kv_shard", NULL, NULL, test_create_rejects_bad_config,
               test_arena_is_one_page_aligned_region, test_caller_arena_is_used,
               test_put_then_get_is_zero_copy, test_reserved_block_is_invisible_until_commit,
               test_oversized_block_is_rejected, test_unknown_keys_and_ids_get_clear_statuses,
               test_same_key_second_writer_gets_exists, test_commit_verifies_the_checksum,
               test_client_dying_mid_put_reservation_expires,
               test_renewed_reservation_outlives_the_timeout, test_drop_client_revokes_and_releases,
               test_remove_of_leased_block_is_deferred, test_client_dying_mid_get_lease_is_swept,
               test_release_during_transfer_ends_at_transfer_end,
               test_other_model_or_version_is_never_served, test_remove_older_versions,
               test_corrupted_block_is_detected_and_dropped,
               test_exists_and_longest_prefix_of_a_prompt, test_lease_table_full_is_no_resource,
               test_a_million_keys_without_per_key_malloc, test_consecutive_keys_do_not_cluster,
               test_allocation_failures_are_clean)
