/* tests/unit/kvstore/test_kv_shard_virtual.c - a virtual-payload shard (a
 * simulation's) grows its metadata on use: it behaves call for call like a
 * real shard of the same capacity (same handles, offsets, statuses, events),
 * a modeled capacity of 2^30 slots costs only what is stored, and a table
 * that cannot grow fails the call cleanly. */
#include "moonlet/kv_shard.h"

#include "moonlet/alloc.h"

#include "kv_test_util.h"

#define N_KEYS 400
#define N_SLOTS 150
#define MAX_HELD 40

/* Folds every event into one hash: two shards that raised the same events
 * in the same order agree on it. */
static void fold_event(const moon_kv_event_t *ev, void *arg)
{
    uint64_t *h = arg;

    *h = (*h ^ ev->kind ^ ev->key.lo ^ (ev->key.hi << 1)) * 0x100000001b3ull;
}

/* The default config but for the slots, with no payload checks (a virtual
 * shard has no bytes to check), virtual or real. */
static moon_kv_shard_config_t shard_config(uint32_t n_slots, size_t slot_bytes, int virt)
{
    moon_kv_shard_config_t cfg = kv_shard_config(n_slots, slot_bytes);

    cfg.verify_on_commit = 0;
    cfg.verify_on_get    = 0;
    cfg.virtual_payload  = virt;
    return cfg;
}

static moon_kv_shard_config_t twin_config(uint32_t n_slots, int virt, uint64_t *events)
{
    moon_kv_shard_config_t cfg = shard_config(n_slots, 4096, virt);

    cfg.max_leases = 32; /* fewer than MAX_HELD: the lease table fills */
    cfg.on_event   = fold_event;
    cfg.event_arg  = events;
    return cfg;
}

/* Counts the fields of the two shards' stats that differ. */
static unsigned stats_diff(moon_kv_shard_t *const sh[2])
{
    moon_kv_shard_stats_t a, b;

    moon_kv_shard_stats(sh[0], &a);
    moon_kv_shard_stats(sh[1], &b);
    return (a.used_slots != b.used_slots) + (a.n_reserved != b.n_reserved) +
           (a.n_committed != b.n_committed) + (a.n_pinned != b.n_pinned) +
           (a.n_leases != b.n_leases) + (a.n_puts != b.n_puts) + (a.n_gets != b.n_gets) +
           (a.n_evicted != b.n_evicted) + (a.n_removed != b.n_removed) +
           (a.n_expired_reservations != b.n_expired_reservations) +
           (a.n_expired_leases != b.n_expired_leases);
}

/* Seeded random puts (two-phase, some left pending), gets, releases, pins,
 * removes and expiries on a real and a virtual shard in lockstep: every
 * status, put token and offset, lease handle and event agree, and both pass
 * their invariant walk. The virtual tables grow from 64 past N_SLOTS. */
static void test_virtual_shard_answers_like_a_real_one(void)
{
    moon_kv_shard_t       *sh[2]     = {NULL, NULL};
    uint64_t               events[2] = {0, 0}, rng = 11, now = 0;
    moon_kv_shard_config_t cfg[2] = {twin_config(N_SLOTS, 0, &events[0]),
                                     twin_config(N_SLOTS, 1, &events[1])};
    uint64_t               held[MAX_HELD], pending[MAX_HELD];
    unsigned               n_held = 0, n_pending = 0, bad = 0, n_full = 0, n_ok = 0;

    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg[0], &sh[0]), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg[1], &sh[1]), MOON_OK);
    for (int step = 0; step < 20000; step++) {
        moon_kv_key_t key   = kv_key(moon_test_rand(&rng) % N_KEYS);
        unsigned      op    = (unsigned)(moon_test_rand(&rng) % 12);
        moon_status_t st[2] = {MOON_ERR_NOT_FOUND, MOON_ERR_NOT_FOUND}; /* set by the calls */

        now += 1000;
        if (op <= 3) { /* a put: commit now, or leave it pending */
            moon_kv_put_t put[2];

            for (int c = 0; c < 2; c++) {
                st[c] = moon_kv_shard_reserve(sh[c], &kv_tag, key, 4096, 1, now, &put[c]);
            }
            bad += st[0] != st[1];
            if (st[0] == MOON_OK) {
                bad += put[0].token != put[1].token || put[0].offset != put[1].offset ||
                       put[1].ptr != NULL;
                if (op == 0 && n_pending < MAX_HELD) {
                    pending[n_pending++] = put[0].token;
                } else {
                    bad += moon_kv_shard_commit(sh[0], put[0].token, 4096, 0) != MOON_OK;
                    bad += moon_kv_shard_commit(sh[1], put[1].token, 4096, 0) != MOON_OK;
                }
            }
            n_full += st[0] == MOON_ERR_NO_RESOURCE;
        } else if (op <= 6) { /* a get, held a while */
            moon_kv_get_t get[2];

            for (int c = 0; c < 2; c++) {
                st[c] = moon_kv_shard_get(sh[c], &kv_tag, key, 1, now, &get[c]);
            }
            bad += st[0] != st[1];
            if (st[0] == MOON_OK) {
                bad += get[0].lease != get[1].lease || get[0].offset != get[1].offset ||
                       get[1].ptr != NULL;
                if (n_held < MAX_HELD) {
                    held[n_held++] = get[0].lease;
                } else {
                    bad += moon_kv_shard_release(sh[0], get[0].lease) != MOON_OK;
                    bad += moon_kv_shard_release(sh[1], get[1].lease) != MOON_OK;
                }
            }
            n_full += st[0] == MOON_ERR_NO_RESOURCE;
        } else if (op == 7 && n_held > 0) { /* release a held lease */
            unsigned i = (unsigned)(moon_test_rand(&rng) % n_held);

            bad += moon_kv_shard_release(sh[0], held[i]) != moon_kv_shard_release(sh[1], held[i]);
            held[i] = held[--n_held];
        } else if (op == 8 && n_pending > 0) { /* commit or revoke a pending put */
            unsigned i      = (unsigned)(moon_test_rand(&rng) % n_pending);
            int      commit = (int)(moon_test_rand(&rng) & 1);

            for (int c = 0; c < 2; c++) {
                st[c] = commit ? moon_kv_shard_commit(sh[c], pending[i], 4096, 0)
                               : moon_kv_shard_revoke(sh[c], pending[i]);
            }
            bad += st[0] != st[1];
            pending[i] = pending[--n_pending];
        } else if (op == 9 || op == 10) { /* remove, pin or unpin */
            unsigned what = (unsigned)(moon_test_rand(&rng) % 3);

            for (int c = 0; c < 2; c++) {
                st[c] = what == 0   ? moon_kv_shard_remove(sh[c], key)
                        : what == 1 ? moon_kv_shard_pin(sh[c], key)
                                    : moon_kv_shard_unpin(sh[c], key);
            }
            bad += st[0] != st[1];
        } else { /* time passes: old reservations and idle leases go */
            uint64_t n[2];

            moon_kv_shard_expire(sh[0], now, 5000000, &n[0]);
            moon_kv_shard_expire(sh[1], now, 5000000, &n[1]);
            bad += n[0] != n[1];
        }
        n_ok += st[0] == MOON_OK;
        bad += stats_diff(sh) + (events[0] != events[1]);
        if (step % 1000 == 0) {
            bad += moon_kv_shard_check(sh[0]) != MOON_OK || moon_kv_shard_check(sh[1]) != MOON_OK;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(n_full > 0); /* the tables filled: the same refusals */
    CU_ASSERT(n_ok > 1000);
    CU_ASSERT_EQUAL(moon_kv_shard_check(sh[0]), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_check(sh[1]), MOON_OK);
    moon_kv_shard_destroy(sh[0]);
    moon_kv_shard_destroy(sh[1]);
}

/* Full is full: with every slot reserved (nothing evictable) a virtual shard
 * refuses the next reservation with MOON_ERR_NO_RESOURCE, as a real one
 * does, and takes it once a slot is given back. */
static void test_virtual_shard_full_is_no_resource(void)
{
    moon_kv_shard_config_t cfg   = shard_config(200, 4096, 1);
    moon_kv_shard_t       *shard = NULL;
    moon_kv_put_t          put, first = {0};
    unsigned               bad = 0;

    cfg.high_watermark = 1.0;
    cfg.low_watermark  = 1.0;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    for (uint32_t i = 0; i < 200; i++) {
        bad += moon_kv_shard_reserve(shard, &kv_tag, kv_key(i), 4096, 1, 0, &put) != MOON_OK;
        bad += put.offset != (uint64_t)i * 4096; /* slots in order */
        if (i == 7) {
            first = put;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(200), 4096, 1, 0, &put),
                    MOON_ERR_NO_RESOURCE);
    CU_ASSERT_EQUAL(moon_kv_shard_revoke(shard, first.token), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(200), 4096, 1, 0, &put), MOON_OK);
    CU_ASSERT_EQUAL(put.offset, 7 * 4096); /* the slot given back */
    CU_ASSERT_EQUAL(moon_kv_shard_check(shard), MOON_OK);
    moon_kv_shard_destroy(shard);
}

/* 2^30 slots of a 70B model's 160 MiB blocks (160 PiB modeled): created in a
 * few bytes; 10,000 blocks stored cost a few MiB; handles and tokens of
 * entries and leases never used are unknown, not out of bounds. */
static void test_virtual_shard_of_2_to_30_slots_costs_what_it_stores(void)
{
    moon_kv_shard_config_t cfg   = shard_config(1u << 30, 160u << 20, 1);
    moon_kv_shard_t       *shard = NULL;
    moon_kv_shard_stats_t  st;
    moon_kv_get_t          get;
    size_t                 rss0 = moon_test_rss_bytes();
    unsigned               bad  = 0;

    cfg.max_leases = 1u << 30;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    for (uint32_t i = 0; i < 10000; i++) {
        moon_kv_put_t put;

        bad += moon_kv_shard_reserve(shard, &kv_tag, kv_key(i), 4096, 1, 0, &put) != MOON_OK ||
               moon_kv_shard_commit(shard, put.token, 4096, 0) != MOON_OK;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(9999), 1, 0, &get), MOON_OK);
    CU_ASSERT_EQUAL(get.offset, 9999ull * (160u << 20));
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_slots, 1u << 30);
    CU_ASSERT_EQUAL(st.used_slots, 10000);
    CU_ASSERT_EQUAL(st.n_committed, 10000);
    CU_ASSERT_EQUAL(st.n_leases, 1);
    /* an entry and a lease past the ones used: unknown, not out of bounds */
    CU_ASSERT_EQUAL(moon_kv_shard_commit(shard, 1ull << 32 | (1u << 29), 4096, 0),
                    MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, 1ull << 32 | (1u << 29)), MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, 1ull << 32 | (1u << 30)), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_shard_release(shard, get.lease), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_check(shard), MOON_OK);
    if (rss0 != 0) { /* full-size tables: 88 GiB of entries alone */
        CU_ASSERT(moon_test_rss_bytes() < rss0 + (32u << 20));
    }
    moon_kv_shard_destroy(shard);
}

/* A virtual shard of 1000 slots holding 64 blocks, all leased: its tables
 * are at their first size, so the next reserve and get grow them. */
static moon_kv_shard_t *shard_at_first_size(void)
{
    moon_kv_shard_config_t cfg   = shard_config(1000, 4096, 1);
    moon_kv_shard_t       *shard = NULL;
    moon_kv_put_t          put;
    moon_kv_get_t          get;
    unsigned               bad = 0;

    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    for (uint32_t i = 0; i < 64; i++) {
        bad += moon_kv_shard_reserve(shard, &kv_tag, kv_key(i), 4096, 1, 0, &put) != MOON_OK ||
               moon_kv_shard_commit(shard, put.token, 4096, 0) != MOON_OK ||
               moon_kv_shard_get(shard, &kv_tag, kv_key(i), 1, 0, &get) != MOON_OK;
    }
    CU_ASSERT_EQUAL(bad, 0);
    return shard;
}

/* A table that cannot grow: MOON_ERR_NO_MEMORY, the shard unchanged; the
 * same call then succeeds. The k-th allocation of the reserve fails, for
 * each k until it makes fewer: the slot stack, the entries, then the index
 * (only a get that promotes a spilled block grows the slot stack). */
static void test_virtual_shard_growth_failure_changes_nothing(void)
{
    unsigned n_failed = 0;

    for (uint64_t k = 1; k <= 8; k++) {
        moon_kv_shard_t      *shard = shard_at_first_size();
        moon_kv_shard_stats_t before, after;
        moon_kv_put_t         put;
        moon_kv_get_t         get;
        moon_status_t         status, get_status = MOON_ERR_NO_MEMORY;

        moon_kv_shard_stats(shard, &before);
        moon_fault_fail_after(k);
        status = moon_kv_shard_reserve(shard, &kv_tag, kv_key(64), 4096, 1, 0, &put);
        if (k == 1) { /* the lease table too */
            get_status = moon_kv_shard_get(shard, &kv_tag, kv_key(0), 1, 0, &get);
        }
        moon_fault_reset();
        if (status == MOON_OK) { /* past the allocations the call makes */
            moon_kv_shard_destroy(shard);
            break;
        }
        n_failed++;
        CU_ASSERT_EQUAL(status, MOON_ERR_NO_MEMORY);
        CU_ASSERT_EQUAL(get_status, MOON_ERR_NO_MEMORY);
        moon_kv_shard_stats(shard, &after);
        CU_ASSERT_EQUAL(after.used_slots, before.used_slots);
        CU_ASSERT_EQUAL(after.n_leases, before.n_leases);
        CU_ASSERT_EQUAL(after.n_gets, before.n_gets);
        CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(64)), MOON_KV_STATE_ABSENT);
        CU_ASSERT_EQUAL(moon_kv_shard_check(shard), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_shard_reserve(shard, &kv_tag, kv_key(64), 4096, 1, 0, &put),
                        MOON_OK);
        CU_ASSERT_EQUAL(put.offset, 64 * 4096);
        CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(0), 1, 0, &get), MOON_OK);
        CU_ASSERT_EQUAL(moon_kv_shard_check(shard), MOON_OK);
        moon_kv_shard_destroy(shard);
    }
    CU_ASSERT_EQUAL(n_failed, 3);
}

MOON_TEST_MAIN("kv_shard_virtual", NULL, NULL, test_virtual_shard_answers_like_a_real_one,
               test_virtual_shard_full_is_no_resource,
               test_virtual_shard_of_2_to_30_slots_costs_what_it_stores,
               test_virtual_shard_growth_failure_changes_nothing)
