/* tests/unit/sim/test_virtual_kv.c - the simulator's virtual KV payloads:
 * a KV cache of block tables and no bytes, and a store shard of keys,
 * sizes, leases and eviction without an arena, both refusing what would
 * need the bytes. */
#include "moon_test.h"

#include "moonlet/kv_cache.h"
#include "moonlet/kv_key.h"
#include "moonlet/kv_shard.h"

static void test_virtual_cache(void)
{
    moon_kv_config_t cfg = {.n_layers     = 80,
                            .n_kv_heads   = 8,
                            .head_dim     = 128,
                            .block_tokens = 512,
                            .n_blocks     = 100000, /* 16 TiB of fp32 KV were it real */
                            .max_seqs     = 4,
                            .max_seq_len  = 4096};
    moon_kv_cache_t *kv  = NULL;
    uint32_t         seq = 0, fork = 0, blk;
    char             buf[16];

    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create_virtual(&cfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 100000);
    CU_ASSERT_PTR_NULL(moon_kv_pool_data(kv));
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &seq), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, seq, 1000), MOON_OK);
    moon_kv_seq_advance(kv, seq, 1000);
    CU_ASSERT_EQUAL(moon_kv_seq_n_blocks(kv, seq), 2);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 99998);
    blk = moon_kv_seq_block(kv, seq, 0);
    CU_ASSERT_PTR_NULL(moon_kv_block_data(kv, blk));
    /* the partial last block is a new block, nothing copied */
    CU_ASSERT_EQUAL(moon_kv_seq_fork(kv, seq, 1000, &fork), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_block_refcount(kv, blk), 2);
    CU_ASSERT_NOT_EQUAL(moon_kv_seq_block(kv, fork, 1), moon_kv_seq_block(kv, seq, 1));
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 99997);
    CU_ASSERT_EQUAL(moon_kv_block_export(kv, blk, 0, buf, moon_kv_block_layer_bytes(kv)),
                    MOON_ERR_INVALID_PARAM);
    moon_kv_seq_destroy(kv, fork);
    moon_kv_seq_destroy(kv, seq);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 100000);
    moon_kv_cache_destroy(kv);
    CU_ASSERT_EQUAL(moon_kv_cache_create_virtual(NULL, &kv), MOON_ERR_INVALID_PARAM);
}

static moon_status_t put_virtual(moon_kv_shard_t *sh, const moon_kv_tag_t *tag, uint64_t k,
                                 size_t n_bytes)
{
    moon_kv_put_t put;
    moon_status_t status =
        moon_kv_shard_reserve(sh, tag, (moon_kv_key_t){k, k}, n_bytes, 1, 0, &put);

    if (status != MOON_OK) {
        return status;
    }
    CU_ASSERT_PTR_NULL(put.ptr);
    return moon_kv_shard_commit(sh, put.token, n_bytes, 0);
}

/* Four slots of 160 MiB blocks: puts and gets of sizes only, a lease that
 * keeps its block, eviction of the least recently used when full. */
static void test_virtual_shard(void)
{
    moon_kv_shard_config_t cfg;
    moon_kv_shard_t       *sh  = NULL;
    moon_kv_tag_t          tag = {.model_id = 7};
    moon_kv_shard_stats_t  st;
    moon_kv_get_t          get;
    size_t                 bytes = 1;
    const size_t           blk   = 160u << 20;

    moon_kv_shard_config_init(&cfg);
    cfg.slot_bytes       = blk;
    cfg.n_slots          = 4;
    cfg.high_watermark   = 1.0;
    cfg.low_watermark    = 0.75;
    cfg.virtual_payload  = 1;
    cfg.verify_on_commit = 0;
    cfg.verify_on_get    = 0;
    CU_ASSERT_EQUAL_FATAL(moon_kv_shard_create(&cfg, &sh), MOON_OK);
    CU_ASSERT_PTR_NULL(moon_kv_shard_arena(sh, &bytes));
    CU_ASSERT_EQUAL(bytes, 0);
    for (uint64_t k = 1; k <= 4; k++) {
        CU_ASSERT_EQUAL(put_virtual(sh, &tag, k, blk), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_kv_shard_get(sh, &tag, (moon_kv_key_t){1, 1}, 1, 0, &get), MOON_OK);
    CU_ASSERT_EQUAL(get.n_bytes, blk);
    CU_ASSERT_PTR_NULL(get.ptr);
    /* full: a fifth block evicts the least recently used unleased one (key 2) */
    CU_ASSERT_EQUAL(put_virtual(sh, &tag, 5, blk), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_shard_get(sh, &tag, (moon_kv_key_t){2, 2}, 1, 0, &get),
                    MOON_ERR_NOT_FOUND);
    moon_kv_shard_stats(sh, &st);
    CU_ASSERT(st.n_evicted >= 1);
    CU_ASSERT_EQUAL(st.n_leases, 1);
    moon_kv_shard_destroy(sh);
    /* what needs the bytes is refused */
    cfg.verify_on_get = 1;
    CU_ASSERT_EQUAL(moon_kv_shard_create(&cfg, &sh), MOON_ERR_INVALID_PARAM);
}

MOON_TEST_MAIN("virtual_kv", NULL, NULL, test_virtual_cache, test_virtual_shard)
