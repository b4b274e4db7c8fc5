/* tests/unit/kvstore/test_kv_ssd.c - the SSD tier: spill on eviction, promote on
 * get, its own LRU, and clear statuses for bad files, I/O errors, corruption. */
#include "moonlet/kv_shard.h"

#include "moonlet/alloc.h"

#include "kv_test_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[256];
static char path[300];

static int suite_init(void)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(dir, sizeof(dir), "%s/moon_kv_ssd_XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        return 1;
    }
    snprintf(path, sizeof(path), "%s/shard.ssd", dir);
    return 0;
}

static int suite_clean(void)
{
    unlink(path);
    return rmdir(dir) != 0;
}

static moon_kv_shard_t *make_shard(uint32_t n_slots, uint32_t ssd_slots, kv_events_t *ev)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;

    moon_kv_shard_config_init(&cfg);
    cfg.n_slots        = n_slots;
    cfg.slot_bytes     = 256;
    cfg.high_watermark = 1.0;
    cfg.low_watermark  = 1.0;
    cfg.ssd_path       = path;
    cfg.ssd_bytes      = (uint64_t)ssd_slots * 256;
    cfg.on_event       = ev != NULL ? kv_record : NULL;
    cfg.event_arg      = ev;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &shard), MOON_OK);
    return shard;
}

static void test_evicted_blocks_spill_and_come_back(void)
{
    kv_events_t           ev    = {0};
    moon_kv_shard_t      *shard = make_shard(4, 8, &ev);
    moon_kv_shard_stats_t st;
    moon_kv_key_t         keys[6];
    size_t                n_hit;

    for (uint64_t i = 0; i < 6; i++) {
        keys[i] = kv_key(i);
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 200), MOON_OK);
    }
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_SPILLED], 2);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_EVICTED], 0);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(0)), MOON_KV_STATE_SPILLED);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1)), MOON_KV_STATE_SPILLED);
    CU_ASSERT_EQUAL(moon_kv_shard_longest_prefix(shard, &kv_tag, keys, 6, &n_hit), MOON_OK);
    CU_ASSERT_EQUAL(n_hit, 6); /* spilled blocks are still readable */
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_spilled, 2);
    CU_ASSERT_EQUAL(st.ssd_used_slots, 2);

    CU_ASSERT_TRUE(kv_check_i(shard, 0, 200)); /* promote: another block spills */
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_PROMOTED], 1);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(0)), MOON_KV_STATE_COMMITTED);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(2)), MOON_KV_STATE_SPILLED);
    for (uint64_t i = 0; i < 6; i++) {
        CU_ASSERT_TRUE(kv_check_i(shard, i, 200));
    }
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.used_slots, 4);
    CU_ASSERT_EQUAL(st.ssd_used_slots, 2);
    CU_ASSERT_EQUAL(st.n_evicted, 0);
    moon_kv_shard_destroy(shard);
}

static void test_ssd_tier_has_its_own_lru(void)
{
    kv_events_t      ev    = {0};
    moon_kv_shard_t *shard = make_shard(2, 2, &ev);

    for (uint64_t i = 0; i < 6; i++) {
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 256), MOON_OK);
    }
    /* DRAM: 4, 5; SSD: 2, 3; 0 and 1 fell off the SSD tier. */
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_EVICTED], 2);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(0)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(2)), MOON_KV_STATE_SPILLED);
    CU_ASSERT_TRUE(kv_check_i(shard, 4, 256));
    CU_ASSERT_TRUE(kv_check_i(shard, 5, 256));
    /* Promoting 3 spills 4 (DRAM LRU), which pushes 2 (SSD LRU) out. */
    CU_ASSERT_TRUE(kv_check_i(shard, 3, 256));
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_EVICTED], 3);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(2)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(4)), MOON_KV_STATE_SPILLED);
    CU_ASSERT_TRUE(kv_check_i(shard, 5, 256));
    moon_kv_shard_destroy(shard);
}

static void test_pin_and_remove_of_spilled_blocks(void)
{
    moon_kv_shard_t      *shard = make_shard(2, 4, NULL);
    moon_kv_shard_stats_t st;

    for (uint64_t i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 100), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_kv_shard_pin(shard, kv_key(0)), MOON_OK); /* promotes */
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(0)), MOON_KV_STATE_COMMITTED);
    CU_ASSERT_EQUAL(moon_kv_shard_remove(shard, kv_key(1)), MOON_OK); /* spilled */
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_pinned, 1);
    for (uint64_t i = 10; i < 20; i++) {
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 100), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(0)), MOON_KV_STATE_COMMITTED);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(1)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_TRUE(kv_check_i(shard, 0, 100));
    moon_kv_shard_destroy(shard);
}

static void test_unopenable_file_is_io_error(void)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *shard = NULL;
    char                   bad[320];

    snprintf(bad, sizeof(bad), "%s/no/such/dir/shard.ssd", dir);
    moon_kv_shard_config_init(&cfg);
    cfg.n_slots    = 4;
    cfg.slot_bytes = 64;
    cfg.ssd_path   = bad;
    cfg.ssd_bytes  = 4096;
    CU_ASSERT_EQUAL(moon_kv_shard_create(&cfg, &shard), MOON_ERR_IO);
    CU_ASSERT_PTR_NULL(shard);
}

static void test_read_error_drops_the_block(void)
{
    kv_events_t           ev    = {0};
    moon_kv_shard_t      *shard = make_shard(2, 4, &ev);
    moon_kv_get_t         get;
    moon_kv_shard_stats_t st;

    for (uint64_t i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 256), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_kv_shard_remove(shard, kv_key(3)), MOON_OK); /* a free DRAM slot */
    CU_ASSERT_EQUAL(truncate(path, 0), 0);                            /* the device lost the data */
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(0), 1, 0, &get), MOON_ERR_IO);
    CU_ASSERT_EQUAL(ev.count[MOON_KV_EVENT_REMOVED], 2);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(0)), MOON_KV_STATE_ABSENT);
    moon_kv_shard_stats(shard, &st);
    CU_ASSERT_EQUAL(st.n_io_errors, 1);
    CU_ASSERT_EQUAL(st.used_slots, 1);     /* the slot taken for it went back */
    CU_ASSERT_EQUAL(st.ssd_used_slots, 1); /* block 1 still there */
    CU_ASSERT_TRUE(kv_check_i(shard, 2, 256));
    moon_kv_shard_destroy(shard);
}

static void test_corruption_on_ssd_is_detected(void)
{
    moon_kv_shard_t *shard = make_shard(2, 4, NULL);
    moon_kv_get_t    get;
    unsigned char    junk[256];
    int              fd;

    for (uint64_t i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(kv_put_i(shard, i, 256), MOON_OK);
    }
    memset(junk, 0xab, sizeof(junk));
    fd = open(path, O_WRONLY);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk)); /* slot 0 */
    close(fd);
    CU_ASSERT_EQUAL(moon_kv_shard_get(shard, &kv_tag, kv_key(0), 1, 0, &get), MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL(moon_kv_shard_state(shard, kv_key(0)), MOON_KV_STATE_ABSENT);
    CU_ASSERT_TRUE(kv_check_i(shard, 1, 256));
    CU_ASSERT_TRUE(kv_check_i(shard, 2, 256));
    moon_kv_shard_destroy(shard);
}

static void test_allocation_failures_with_ssd_tier_are_clean(void)
{
    moon_kv_shard_config_t cfg;
    int                    ok = 0;

    moon_kv_shard_config_init(&cfg);
    cfg.n_slots    = 4;
    cfg.slot_bytes = 256;
    cfg.ssd_path   = path;
    cfg.ssd_bytes  = 4 * 256;
    for (uint64_t k = 1; k < 20 && !ok; k++) {
        moon_kv_shard_t *shard = NULL;
        moon_status_t    status;

        moon_fault_fail_after(k);
        status = moon_kv_shard_create(&cfg, &shard);
        moon_fault_reset();
        CU_ASSERT(status == MOON_OK || status == MOON_ERR_NO_MEMORY);
        if (status == MOON_OK) {
            ok = 1;
            for (uint64_t i = 0; i < 8; i++) {
                CU_ASSERT_EQUAL(kv_put_i(shard, i, 256), MOON_OK);
            }
            CU_ASSERT_TRUE(kv_check_i(shard, 7, 256));
            CU_ASSERT_EQUAL(moon_kv_shard_check(shard), MOON_OK);
            moon_kv_shard_destroy(shard);
        }
    }
    CU_ASSERT_TRUE(ok); /* LSan: the failed creates leaked nothing, fds closed */
}

MOON_TEST_MAIN("kv_ssd", suite_init, suite_clean, test_evicted_blocks_spill_and_come_back,
               test_ssd_tier_has_its_own_lru, test_pin_and_remove_of_spilled_blocks,
               test_unopenable_file_is_io_error, test_read_error_drops_the_block,
               test_corruption_on_ssd_is_detected, test_allocation_failures_with_ssd_tier_are_clean)
