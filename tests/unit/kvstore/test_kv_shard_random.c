/* tests/unit/kvstore/test_kv_shard_random.c - seeded random operation sequences
 * against a shard with an SSD tier, checked after every step against a small
 * model (what may be readable, what must stay put) and the shard's own
 * invariant walk (moon_kv_shard_check: no slot leaked or owned twice). */
#include "moonlet/kv_shard.h"

#include "moonlet/alloc.h"

#include "kv_test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define N_KEYS 48
#define MAX_HELD 10
#define MAX_PUTS 6
#define BLOCK 200
#define TIMEOUT_NS 50

typedef struct {
    uint64_t      key_i;
    moon_kv_get_t get;
    uint64_t      client;
} held_t;

typedef struct {
    uint64_t      key_i;
    moon_kv_put_t put;
    uint64_t      deadline;
} pending_t;

static char path[300];

static int suite_init(void)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(path, sizeof(path), "%s/moon_kv_random_%ld.ssd", tmp != NULL ? tmp : "/tmp",
             (long)getpid());
    return 0;
}

static int suite_clean(void)
{
    unlink(path);
    return 0;
}

static void run_sequence(uint64_t seed0, int with_ssd, unsigned steps)
{
    uint64_t               seed = seed0;
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;
    held_t                 held[MAX_HELD];
    pending_t              puts[MAX_PUTS];
    unsigned               n_held = 0, n_puts = 0, bad = 0, bad_check = 0;
    uint8_t                pinned[N_KEYS] = {0}, removed_now[N_KEYS] = {0};
    uint64_t               now = 0;
    unsigned char          want[BLOCK];
    moon_kv_shard_stats_t  st;

    moon_kv_shard_config_init(&cfg);
    cfg.n_slots            = 16;
    cfg.slot_bytes         = 256;
    cfg.high_watermark     = 0.9;
    cfg.low_watermark      = 0.75;
    cfg.max_leases         = MAX_HELD + 2;
    cfg.reserve_timeout_ns = TIMEOUT_NS;
    if (with_ssd) {
        cfg.ssd_path  = path;
        cfg.ssd_bytes = 8 * 256;
    }
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);

    for (unsigned step = 0; step < steps; step++) {
        uint64_t      r = moon_test_rand(&seed);
        uint64_t      k = (r >> 16) % N_KEYS;
        moon_status_t status;

        now += r % 3;
        switch ((r >> 8) % 12) {
        case 0: /* reserve */
            if (n_puts < MAX_PUTS) {
                status = moon_kv_shard_reserve(shard, &kv_tag, kv_key(k), BLOCK, k % 3, now,
                                               &puts[n_puts].put);
                if (status == MOON_OK) {
                    kv_fill(puts[n_puts].put.ptr, BLOCK, k);
                    puts[n_puts].key_i    = k;
                    puts[n_puts].deadline = now + TIMEOUT_NS;
                    n_puts++;
                    removed_now[k] = 0;
                } else {
                    bad += status != MOON_ERR_EXISTS && status != MOON_ERR_NO_RESOURCE;
                }
            }
            break;
        case 1:
        case 10:
        case 11: /* commit or revoke a pending put */
            if (n_puts > 0) {
                pending_t *p = &puts[r % n_puts];

                if (r & 1) {
                    status = moon_kv_shard_commit(shard, p->put.token, BLOCK,
                                                  moon_kv_checksum(p->put.ptr, BLOCK));
                } else {
                    status = moon_kv_shard_revoke(shard, p->put.token);
                }
                /* NOT_FOUND only once the reservation's deadline has passed. */
                bad += !(status == MOON_OK || (status == MOON_ERR_NOT_FOUND && now >= p->deadline));
                *p = puts[--n_puts];
            }
            break;
        case 2:
        case 3: /* get */
            if (n_held < MAX_HELD) {
                held_t *h = &held[n_held];

                h->client = k % 3;
                status    = moon_kv_shard_get(shard, &kv_tag, kv_key(k), h->client, now, &h->get);
                if (status == MOON_OK) {
                    kv_fill(want, BLOCK, k);
                    bad += removed_now[k] || memcmp(h->get.ptr, want, BLOCK) != 0;
                    h->key_i = k;
                    n_held++;
                } else {
                    bad += status != MOON_ERR_NOT_FOUND && status != MOON_ERR_NO_RESOURCE;
                    bad += pinned[k] && status == MOON_ERR_NOT_FOUND;
                }
            }
            break;
        case 4: /* release: the bytes were stable all along */
            if (n_held > 0) {
                held_t *h = &held[r % n_held];

                kv_fill(want, BLOCK, h->key_i);
                bad += memcmp(h->get.ptr, want, BLOCK) != 0;
                bad += moon_kv_shard_release(shard, h->get.lease) != MOON_OK;
                *h = held[--n_held];
            }
            break;
        case 5: /* remove */
            status = moon_kv_shard_remove(shard, kv_key(k));
            if (status == MOON_OK) {
                pinned[k]      = 0;
                removed_now[k] = 1;
                bad += moon_kv_shard_state(shard, kv_key(k)) != MOON_KV_STATE_ABSENT;
            }
            break;
        case 6: /* pin / unpin (at most a few pinned) */
            if (r & 1) {
                unsigned n_pinned = 0;

                for (int i = 0; i < N_KEYS; i++) {
                    n_pinned += pinned[i];
                }
                if (n_pinned < 4 && moon_kv_shard_pin(shard, kv_key(k)) == MOON_OK) {
                    pinned[k] = 1;
                }
            } else if (moon_kv_shard_unpin(shard, kv_key(k)) == MOON_OK) {
                pinned[k] = 0;
            }
            break;
        case 7: /* time passes: dead writers' reservations go */
            now += TIMEOUT_NS / 4;
            moon_kv_shard_expire(shard, now, 0, NULL);
            for (unsigned i = 0; i < n_puts;) {
                if (puts[i].deadline <= now) {
                    bad +=
                        moon_kv_shard_state(shard, kv_key(puts[i].key_i)) == MOON_KV_STATE_RESERVED;
                    puts[i] = puts[--n_puts];
                } else {
                    i++;
                }
            }
            break;
        case 8: /* a client dies */
            if ((r >> 40) % 8 == 0) {
                uint64_t c = k % 3;

                moon_kv_shard_drop_client(shard, c);
                for (unsigned i = 0; i < n_held;) {
                    if (held[i].client == c) {
                        bad +=
                            moon_kv_shard_release(shard, held[i].get.lease) != MOON_ERR_NOT_FOUND;
                        held[i] = held[--n_held];
                    } else {
                        i++;
                    }
                }
                for (unsigned i = 0; i < n_puts;) {
                    if (puts[i].key_i % 3 == c) {
                        bad += moon_kv_shard_commit(shard, puts[i].put.token, BLOCK, 0) !=
                               MOON_ERR_NOT_FOUND;
                        puts[i] = puts[--n_puts];
                    } else {
                        i++;
                    }
                }
            }
            break;
        default: { /* prefix query never sees removed or reserved blocks */
            uint8_t present;

            moon_kv_shard_exists(shard, &kv_tag, &(moon_kv_key_t){kv_key(k).lo, kv_key(k).hi}, 1,
                                 &present);
            bad += present && removed_now[k];
            bad += !present && pinned[k];
            break;
        }
        }
        if (moon_kv_shard_check(shard) != MOON_OK) {
            bad_check++;
            break;
        }
    }
    while (n_held > 0) {
        bad += moon_kv_shard_release(shard, held[--n_held].get.lease) != MOON_OK;
    }
    while (n_puts > 0) {
        moon_kv_shard_revoke(shard, puts[--n_puts].put.token);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(bad_check, 0);
    CU_ASSERT_EQUAL(moon_kv_shard_check(shard), MOON_OK);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_leases, 0);
    CU_ASSERT_EQUAL(st.n_reserved, 0);
    CU_ASSERT(st.n_evicted + st.n_spills > 0); /* the sequence did reach eviction */
    if (getenv("MOON_TEST_VERBOSE") != NULL) {
        printf("\n    seed %llu: puts %llu gets %llu misses %llu evicted %llu spills %llu "
               "promotes %llu removed %llu expired %llu",
               (unsigned long long)seed0, (unsigned long long)st.n_puts,
               (unsigned long long)st.n_gets, (unsigned long long)st.n_get_misses,
               (unsigned long long)st.n_evicted, (unsigned long long)st.n_spills,
               (unsigned long long)st.n_promotes, (unsigned long long)st.n_removed,
               (unsigned long long)st.n_expired_reservations);
    }
    moon_kv_shard_destroy(shard);
}

static void test_random_sequences_dram_only(void)
{
    for (uint64_t seed = 1; seed <= 8; seed++) {
        run_sequence(seed, 0, 4000);
    }
}

static void test_random_sequences_with_ssd_tier(void)
{
    for (uint64_t seed = 100; seed <= 108; seed++) {
        run_sequence(seed, 1, 4000);
    }
}

static void test_random_sequences_under_allocation_faults(void)
{
    /* Nothing allocates after create: fail every allocation during the run. */
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;

    moon_kv_shard_config_init(&cfg);
    cfg.n_slots    = 8;
    cfg.slot_bytes = 256;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    moon_fault_fail_after(1);
    for (uint64_t i = 0; i < 100; i++) {
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 100), MOON_OK);
        CU_ASSERT_TRUE(kv_check_i(shard, i, 100));
    }
    moon_fault_reset();
    CU_ASSERT_EQUAL(moon_kv_shard_check(shard), MOON_OK);
    moon_kv_shard_destroy(shard);
}

MOON_TEST_MAIN("kv_shard_random", suite_init, suite_clean, test_random_sequences_dram_only,
               test_random_sequences_with_ssd_tier, test_random_sequences_under_allocation_faults)
