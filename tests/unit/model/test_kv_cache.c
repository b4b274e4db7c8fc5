/* tests/unit/model/test_kv_cache.c - paged KV cache: block accounting,
 * prefix sharing by reference count (fork), export/import whole and per
 * layer, and that a sequence rebuilt from imported blocks (or a forked
 * prefix) decodes exactly like the original. */
#include "kv_internal.h"
#include "model_test_util.h"
#include "moonlet/alloc.h"
#include "moonlet/gguf.h"
#include "moonlet/kv_cache.h"

#include <stdlib.h>
#include <string.h>

/* A cache of 4-token blocks, of the shape a test asks for; NULL on failure. */
static moon_kv_cache_t *small_cache(uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                                    uint32_t n_blocks, uint32_t max_seqs, uint32_t max_seq_len)
{
    moon_kv_config_t cfg = {.n_layers     = n_layers,
                            .n_kv_heads   = n_kv_heads,
                            .head_dim     = head_dim,
                            .block_tokens = 4,
                            .n_blocks     = n_blocks,
                            .max_seqs     = max_seqs,
                            .max_seq_len  = max_seq_len};
    moon_kv_cache_t *kv  = NULL;

    CU_ASSERT_EQUAL(moon_kv_cache_create(&cfg, &kv), MOON_OK);
    return kv;
}

static void test_reserve_and_release(void)
{
    moon_kv_cache_t *kv = small_cache(2, 2, 4, 5, 2, 16); /* 5 blocks, 2 seqs, context 16 */
    uint32_t         a, b, c;

    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_EQUAL(moon_kv_block_bytes(kv), 2 * 2 * 4 * 8 * sizeof(float));
    CU_ASSERT_EQUAL(moon_kv_block_layer_bytes(kv), 2 * 4 * 8 * sizeof(float));
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &b), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &c), MOON_ERR_NO_RESOURCE);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, a, 9), MOON_OK); /* 3 blocks */
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 2);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, b, 17), MOON_ERR_NO_RESOURCE); /* > context */
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, b, 12), MOON_ERR_NO_RESOURCE); /* 3 > 2 free */
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 2);                         /* nothing changed */
    moon_kv_seq_advance(kv, a, 9);
    CU_ASSERT_EQUAL(moon_kv_seq_len(kv, a), 9);
    CU_ASSERT_EQUAL(moon_kv_seq_truncate(kv, a, 4), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 4);
    CU_ASSERT_EQUAL(moon_kv_seq_truncate(kv, a, 5), MOON_ERR_INVALID_PARAM);
    moon_kv_seq_destroy(kv, a);
    moon_kv_seq_destroy(kv, b);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 5);
    moon_kv_cache_destroy(kv);
}

static void test_fork_shares_full_blocks(void)
{
    moon_kv_cache_t *kv = small_cache(1, 1, 2, 8, 4, 32); /* 8 blocks, 4 seqs, context 32 */
    uint32_t         a, f8, f10;

    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, a, 10), MOON_OK);
    moon_kv_seq_advance(kv, a, 10);
    CU_ASSERT_EQUAL(moon_kv_seq_fork(kv, a, 8, &f8), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_block(kv, f8, 0), moon_kv_seq_block(kv, a, 0));
    CU_ASSERT_EQUAL(moon_kv_block_refcount(kv, moon_kv_seq_block(kv, a, 1)), 2);
    CU_ASSERT_EQUAL(moon_kv_seq_fork(kv, a, 10, &f10), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_block_refcount(kv, moon_kv_seq_block(kv, a, 0)), 3);
    CU_ASSERT_NOT_EQUAL(moon_kv_seq_block(kv, f10, 2), moon_kv_seq_block(kv, a, 2)); /* copied */
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 8 - 3 - 1);
    /* a shared block is immutable */
    {
        size_t bytes = moon_kv_block_bytes(kv);
        void  *buf   = calloc(1, bytes);
        CU_ASSERT_EQUAL(moon_kv_block_import(kv, moon_kv_seq_block(kv, a, 0), -1, buf, bytes),
                        MOON_ERR_INVALID_PARAM);
        free(buf);
    }
    moon_kv_seq_destroy(kv, a);
    moon_kv_seq_destroy(kv, f8);
    moon_kv_seq_destroy(kv, f10);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 8);
    moon_kv_cache_destroy(kv);
}

/* A real model: run a prompt, export its blocks (whole and by layer), import
 * them into a second cache, continue both: identical logits. A forked prefix
 * continued with the same tokens gives identical logits too. */
static void test_export_import_and_fork_decode_identically(void)
{
    moon_model_config_t  shape = mt_shape(64, 128, 3, 8, 4, 300, 64);
    char                 path[256];
    moon_model_t        *m    = mt_random_model(&shape, MOON_GGML_F32, 7, path, sizeof(path));
    moon_engine_config_t ecfg = {
        .kind = MOON_BACKEND_CPU, .n_threads = 2, .max_batch = 2, .max_chunk = 32};
    moon_engine_t   *eng;
    moon_kv_cache_t *k1, *k2;
    moon_kv_config_t kcfg;
    uint32_t         s1, s2, sf;
    int32_t          toks[24];
    float            l1[300], l2[300], lf[300];
    size_t           bb, lb;
    uint8_t         *buf;
    uint64_t         rng = 5;

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    kcfg = moon_model_kv_config(moon_model_config(m), 8, 16, 4);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg, &eng), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &k1), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &k2), MOON_OK);
    for (int i = 0; i < 24; i++) {
        toks[i] = (int32_t)(moon_test_rand(&rng) % 300);
    }
    CU_ASSERT_EQUAL(moon_kv_seq_create(k1, &s1), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, k1, s1, toks, 16, l1, NULL), MOON_OK);
    /* move the two full blocks: block 0 whole, block 1 layer by layer */
    bb  = moon_kv_block_bytes(k1);
    lb  = moon_kv_block_layer_bytes(k1);
    buf = malloc(bb);
    CU_ASSERT_EQUAL(moon_kv_seq_create(k2, &s2), MOON_OK);
    for (uint32_t i = 0; i < 2; i++) {
        uint32_t nb;
        CU_ASSERT_EQUAL_FATAL(moon_kv_block_alloc(k2, &nb), MOON_OK);
        if (i == 0) {
            CU_ASSERT_EQUAL(moon_kv_block_export(k1, moon_kv_seq_block(k1, s1, i), -1, buf, bb),
                            MOON_OK);
            CU_ASSERT_EQUAL(moon_kv_block_import(k2, nb, -1, buf, bb), MOON_OK);
        } else {
            for (int32_t l = 0; l < 3; l++) {
                CU_ASSERT_EQUAL(moon_kv_block_export(k1, moon_kv_seq_block(k1, s1, i), l, buf, lb),
                                MOON_OK);
                CU_ASSERT_EQUAL(moon_kv_block_import(k2, nb, l, buf, lb), MOON_OK);
            }
            CU_ASSERT_EQUAL(moon_kv_block_export(k1, 0, 3, buf, lb), MOON_ERR_INVALID_PARAM);
            CU_ASSERT_EQUAL(moon_kv_block_export(k1, 0, -1, buf, lb), MOON_ERR_INVALID_PARAM);
        }
        CU_ASSERT_EQUAL(moon_kv_seq_append_block(k2, s2, nb), MOON_OK);
        moon_kv_block_unref(k2, nb); /* the sequence holds it now */
    }
    CU_ASSERT_EQUAL(moon_kv_seq_len(k2, s2), 16);
    CU_ASSERT_EQUAL(moon_kv_seq_fork(k1, s1, 16, &sf), MOON_OK);
    /* continue all three with the same 8 tokens */
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, k1, s1, toks + 16, 8, l1, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, k2, s2, toks + 16, 8, l2, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, k1, sf, toks + 16, 8, lf, NULL), MOON_OK);
    CU_ASSERT(memcmp(l1, l2, sizeof(l1)) == 0);
    CU_ASSERT(memcmp(l1, lf, sizeof(l1)) == 0);
    free(buf);
    moon_kv_cache_destroy(k1);
    moon_kv_cache_destroy(k2);
    moon_engine_destroy(eng);
    moon_model_destroy(m);
    unlink(path);
}

static void test_engine_rejects_and_rolls_back(void)
{
    moon_model_config_t  shape = mt_shape(32, 64, 1, 4, 2, 260, 16);
    char                 path[256];
    moon_model_t        *m    = mt_random_model(&shape, MOON_GGML_F32, 3, path, sizeof(path));
    moon_engine_config_t ecfg = {
        .kind = MOON_BACKEND_CPU, .n_threads = 1, .max_batch = 2, .max_chunk = 16};
    moon_engine_t   *eng;
    moon_kv_cache_t *kv;
    moon_kv_config_t kcfg;
    uint32_t         s[2];
    int32_t          toks[16] = {0};
    float            lg[2 * 260];

    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    kcfg = moon_model_kv_config(moon_model_config(m), 4, 3, 2);
    CU_ASSERT_EQUAL_FATAL(moon_engine_create(m, &ecfg, &eng), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&kcfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &s[0]), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &s[1]), MOON_OK);
    toks[0] = 260;
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, s[0], toks, 1, lg, NULL), MOON_ERR_INVALID_PARAM);
    toks[0] = 5;
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, s[0], toks, 8, lg, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_engine_prefill(eng, kv, s[1], toks, 4, lg, NULL), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 0);
    /* both need a new block, none is free: nothing changes */
    CU_ASSERT_EQUAL(moon_engine_decode(eng, kv, s, toks, 2, lg, NULL), MOON_ERR_NO_RESOURCE);
    CU_ASSERT_EQUAL(moon_kv_seq_len(kv, s[0]), 8);
    CU_ASSERT_EQUAL(moon_kv_seq_len(kv, s[1]), 4);
    s[1] = s[0];
    CU_ASSERT_EQUAL(moon_engine_decode(eng, kv, s, toks, 2, lg, NULL), MOON_ERR_INVALID_PARAM);
    moon_kv_cache_destroy(kv);
    moon_engine_destroy(eng);
    moon_model_destroy(m);
    unlink(path);
}

/* Every allocation of model load, tokenizer, engine (ref and cpu) and KV cache
 * creation fails in turn: each call returns MOON_ERR_NO_MEMORY (or an error)
 * and leaks nothing (ASan runs check), or succeeds. */
static void test_alloc_failures_unwind(void)
{
    const char *path = MOON_MODELS_DIR "/stories260K/stories260K.gguf";
    int         done = 0;

    for (uint64_t k = 1; k < 400 && !done; k++) {
        moon_model_t        *m  = NULL;
        moon_engine_t       *e1 = NULL, *e2 = NULL;
        moon_kv_cache_t     *kv  = NULL;
        moon_engine_config_t ref = {.kind = MOON_BACKEND_REF};
        moon_engine_config_t cpu = {.kind = MOON_BACKEND_CPU, .n_threads = 2};
        moon_kv_config_t     kcfg;
        moon_status_t        st;

        moon_fault_fail_after(k);
        st = moon_model_load(path, &m);
        if (st == MOON_OK) {
            kcfg = moon_model_kv_config(moon_model_config(m), 16, 8, 2);
            st   = moon_engine_create(m, &ref, &e1);
        }
        if (st == MOON_OK) {
            st = moon_engine_create(m, &cpu, &e2);
        }
        if (st == MOON_OK) {
            st = moon_kv_cache_create(&kcfg, &kv);
        }
        moon_fault_reset();
        CU_ASSERT(st == MOON_OK || st == MOON_ERR_NO_MEMORY || st == MOON_ERR_NO_RESOURCE);
        done = st == MOON_OK;
        moon_kv_cache_destroy(kv);
        moon_engine_destroy(e2);
        moon_engine_destroy(e1);
        moon_model_destroy(m);
    }
    CU_ASSERT(done);
}

/* ---- resident memory follows the blocks used ---- */

/* 256 blocks of 512 KiB (8 layers, 4 KV heads of 64, 32-token blocks). */
static moon_kv_config_t big_config(void)
{
    return (moon_kv_config_t){.n_layers     = 8,
                              .n_kv_heads   = 4,
                              .head_dim     = 64,
                              .block_tokens = 32,
                              .n_blocks     = 256,
                              .max_seqs     = 2,
                              .max_seq_len  = 4096};
}

/* An own pool is reserved, not backed: nothing of it is resident after
 * create, the blocks a sequence writes are (to the 2 MiB page), and fresh
 * blocks read as zero. */
static void test_pool_resident_follows_blocks_written(void)
{
    moon_kv_config_t cfg = big_config();
    moon_kv_cache_t *kv  = NULL;
    size_t           pool, bb, zero = 1;
    uint32_t         a;
    const float     *f;

    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&cfg, &kv), MOON_OK);
    pool = moon_kv_pool_bytes(kv);
    bb   = moon_kv_block_bytes(kv);
    CU_ASSERT_EQUAL(bb, 512u << 10);
    CU_ASSERT_EQUAL(moon_test_resident_bytes(moon_kv_pool_data(kv), pool), 0);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, a, 8 * 32), MOON_OK); /* blocks 0..7: 4 MiB */
    for (uint32_t i = 0; i < 8; i++) {
        f = moon_kv_block_data(kv, moon_kv_seq_block(kv, a, i));
        for (size_t j = 0; j < bb / sizeof(float); j += 61) {
            zero &= f[j] == 0.0f;
        }
        memset((void *)f, 1, bb);
    }
    CU_ASSERT(zero);
    CU_ASSERT(moon_test_resident_bytes(moon_kv_pool_data(kv), pool) >= 8 * bb);
    CU_ASSERT(moon_test_resident_bytes(moon_kv_pool_data(kv), pool) <= 8 * bb + (2u << 20));
    moon_kv_cache_destroy(kv);
}

/* Over the caller's memory (garbage in it): create writes none of it, each
 * block is zeroed when first handed out, and a block handed out again keeps
 * what was written in it (no zeroing past the first time). */
static void test_create_in_zeroes_blocks_as_handed_out(void)
{
    moon_kv_config_t cfg   = big_config();
    size_t           bytes = moon_kv_config_pool_bytes(&cfg), bb, junk = 0, zero = 1;
    uint8_t         *mem = moon_pages_alloc(bytes);
    moon_kv_cache_t *kv  = NULL;
    uint32_t         a, b0;
    uint8_t         *d;

    CU_ASSERT_PTR_NOT_NULL_FATAL(mem);
    memset(mem, 0xab, 4u << 20); /* blocks 0..7 hold junk, the rest untouched */
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create_in(&cfg, mem, bytes, &kv), MOON_OK);
    bb = moon_kv_block_bytes(kv);
    CU_ASSERT(moon_test_resident_bytes(mem, bytes) <= (4u << 20) + (2u << 20));
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, a, 32), MOON_OK); /* one block */
    b0 = moon_kv_seq_block(kv, a, 0);
    d  = moon_kv_block_data(kv, b0);
    CU_ASSERT_PTR_EQUAL(d, mem + (size_t)b0 * bb);
    for (size_t j = 0; j < bb; j++) {
        zero &= d[j] == 0;
    }
    for (size_t j = 0; j < (4u << 20); j++) { /* the other junk blocks: untouched */
        junk += (j < (size_t)b0 * bb || j >= (size_t)(b0 + 1) * bb) && mem[j] == 0xab;
    }
    CU_ASSERT(zero);
    CU_ASSERT_EQUAL(junk, (4u << 20) - bb);
    memset(d, 5, bb);
    moon_kv_seq_destroy(kv, a);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, a, 32), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_block(kv, a, 0), b0); /* the freed block again, */
    CU_ASSERT_EQUAL(d[0], 5);                         /* as it was left */
    CU_ASSERT_EQUAL(d[bb - 1], 5);
    moon_kv_cache_destroy(kv);
    moon_pages_free(mem, bytes);
}

/* ---- virtual caches: metadata that grows on use ---- */

static moon_kv_config_t virt_config(uint32_t n_blocks)
{
    return (moon_kv_config_t){.n_layers     = 1,
                              .n_kv_heads   = 1,
                              .head_dim     = 2,
                              .block_tokens = 4,
                              .n_blocks     = n_blocks,
                              .max_seqs     = 8,
                              .max_seq_len  = 4 * n_blocks};
}

/* Counts the ways seq s differs between the two caches (length, blocks). */
static unsigned seq_diff(moon_kv_cache_t *const kv[2], uint32_t s)
{
    unsigned bad = moon_kv_seq_len(kv[0], s) != moon_kv_seq_len(kv[1], s) ||
                   moon_kv_seq_n_blocks(kv[0], s) != moon_kv_seq_n_blocks(kv[1], s);

    for (uint32_t j = 0; j < moon_kv_seq_n_blocks(kv[0], s); j++) {
        bad += moon_kv_seq_block(kv[0], s, j) != moon_kv_seq_block(kv[1], s, j);
    }
    return bad;
}

/* A virtual cache (its metadata growing past the 64 blocks it starts with)
 * hands out exactly the blocks and sequences a real one does under the same
 * random calls, and once full refuses with the same MOON_ERR_NO_RESOURCE. */
static void test_virtual_hands_out_what_real_does(void)
{
    moon_kv_config_t cfg     = virt_config(300);
    moon_kv_cache_t *kv[2]   = {NULL, NULL};
    int              live[8] = {0};
    uint64_t         rng     = 7;
    unsigned         bad = 0, peak         = 0;
    uint32_t         got[2][301], n_got[2] = {0, 0};

    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&cfg, &kv[0]), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create_virtual(&cfg, &kv[1]), MOON_OK);
    for (int step = 0; step < 4000; step++) {
        uint32_t      s = (uint32_t)(moon_test_rand(&rng) % 8), id[2] = {0, 0};
        uint32_t      len = moon_kv_seq_len(kv[0], s);
        uint32_t      n   = (uint32_t)(moon_test_rand(&rng) % 200);
        moon_status_t st[2];

        switch (moon_test_rand(&rng) % 5) {
        case 0:
            st[0] = moon_kv_seq_create(kv[0], &id[0]);
            st[1] = moon_kv_seq_create(kv[1], &id[1]);
            bad += st[0] != st[1] || id[0] != id[1];
            if (st[0] == MOON_OK) {
                live[id[0]] = 1;
            }
            break;
        case 1:
            st[0] = moon_kv_seq_reserve(kv[0], s, n);
            st[1] = moon_kv_seq_reserve(kv[1], s, n);
            bad += st[0] != st[1];
            if (st[0] == MOON_OK) {
                moon_kv_seq_advance(kv[0], s, n);
                moon_kv_seq_advance(kv[1], s, n);
            }
            break;
        case 2:
            n     = live[s] ? n % (len + 1) : 0;
            st[0] = moon_kv_seq_truncate(kv[0], s, n);
            st[1] = moon_kv_seq_truncate(kv[1], s, n);
            bad += st[0] != st[1];
            break;
        case 3:
            moon_kv_seq_destroy(kv[0], s);
            moon_kv_seq_destroy(kv[1], s);
            live[s] = 0;
            break;
        default:
            n     = live[s] ? n % (len + 1) : 0;
            st[0] = moon_kv_seq_fork(kv[0], s, n, &id[0]);
            st[1] = moon_kv_seq_fork(kv[1], s, n, &id[1]);
            bad += st[0] != st[1] || (st[0] == MOON_OK && id[0] != id[1]);
            if (st[0] == MOON_OK) {
                live[id[0]] = 1;
                bad += seq_diff(kv, id[0]);
            }
            break;
        }
        bad += seq_diff(kv, s);
        bad += moon_kv_n_free_blocks(kv[0]) != moon_kv_n_free_blocks(kv[1]);
        peak = MOON_MAX(peak, 300 - moon_kv_n_free_blocks(kv[0]));
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(peak > 200); /* the virtual metadata grew well past its first 64 */
    for (uint32_t s = 0; s < 8; s++) {
        moon_kv_seq_destroy(kv[0], s);
        moon_kv_seq_destroy(kv[1], s);
    }
    /* every block, in the same order, then the same refusal */
    for (int c = 0; c < 2; c++) {
        while (n_got[c] < 301 && moon_kv_block_alloc(kv[c], &got[c][n_got[c]]) == MOON_OK) {
            n_got[c]++;
        }
        CU_ASSERT_EQUAL(n_got[c], 300);
        CU_ASSERT_EQUAL(moon_kv_block_alloc(kv[c], &got[c][300]), MOON_ERR_NO_RESOURCE);
        CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv[c]), 0);
        CU_ASSERT_EQUAL(moon_kv_block_refcount(kv[c], 300), 0);
    }
    CU_ASSERT_EQUAL(memcmp(got[0], got[1], sizeof(got[0][0]) * 300), 0);
    moon_kv_cache_destroy(kv[0]);
    moon_kv_cache_destroy(kv[1]);
}

/* 2^30 modeled blocks of a 70B model's shape (320 MiB each): created in a
 * few bytes, paying only for the blocks used; blocks never handed out are
 * refused as such. */
static void test_virtual_huge_pool_costs_what_it_uses(void)
{
    moon_kv_config_t cfg  = {.n_layers     = 80,
                             .n_kv_heads   = 8,
                             .head_dim     = 128,
                             .block_tokens = 512,
                             .n_blocks     = 1u << 30,
                             .max_seqs     = 4,
                             .max_seq_len  = 8192};
    moon_kv_cache_t *kv   = NULL;
    size_t           rss0 = moon_test_rss_bytes();
    uint32_t         a, b;

    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create_virtual(&cfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 1u << 30);
    CU_ASSERT_EQUAL(moon_kv_pool_bytes(kv), (size_t)moon_kv_block_bytes(kv) << 30);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &b), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, a, 8192), MOON_OK); /* 16 blocks: 0..15 */
    moon_kv_seq_advance(kv, a, 8192);
    CU_ASSERT_EQUAL(moon_kv_seq_block(kv, a, 15), 15);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), (1u << 30) - 16);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, a, 1), MOON_ERR_NO_RESOURCE); /* past the context */
    /* ids never handed out: no reference, refused */
    CU_ASSERT_EQUAL(moon_kv_block_refcount(kv, 1u << 29), 0);
    CU_ASSERT_EQUAL(moon_kv_block_refcount(kv, 1u << 30), 0);
    CU_ASSERT_EQUAL(moon_kv_seq_append_block(kv, b, 1u << 29), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_seq_append_block(kv, b, 3), MOON_OK); /* a live one is shared */
    CU_ASSERT_EQUAL(moon_kv_block_refcount(kv, 3), 2);
    moon_kv_seq_destroy(kv, a);
    moon_kv_seq_destroy(kv, b);
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 1u << 30);
    if (rss0 != 0) { /* a full-size table of 2^30 blocks would be 16 GiB */
        CU_ASSERT(moon_test_rss_bytes() < rss0 + (16u << 20));
    }
    moon_kv_cache_destroy(kv);
}

/* The metadata cannot grow: MOON_ERR_NO_MEMORY and nothing changed; then it
 * goes on as if nothing happened. */
static void test_virtual_growth_failure_changes_nothing(void)
{
    moon_kv_config_t cfg = virt_config(300);
    moon_kv_cache_t *kv  = NULL;
    uint32_t         b, s;

    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create_virtual(&cfg, &kv), MOON_OK);
    for (uint32_t i = 0; i < 64; i++) { /* the metadata's first size */
        CU_ASSERT_EQUAL(moon_kv_block_alloc(kv, &b), MOON_OK);
    }
    CU_ASSERT_EQUAL(moon_kv_seq_create(kv, &s), MOON_OK);
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_kv_block_alloc(kv, &b), MOON_ERR_NO_MEMORY);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, s, 9), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 300 - 64);
    CU_ASSERT_EQUAL(moon_kv_seq_n_blocks(kv, s), 0);
    CU_ASSERT_EQUAL(moon_kv_seq_reserve(kv, s, 9), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_seq_block(kv, s, 0), 64);
    CU_ASSERT_EQUAL(moon_kv_seq_block(kv, s, 2), 66);
    moon_kv_block_unref(kv, 10);
    CU_ASSERT_EQUAL(moon_kv_block_alloc(kv, &b), MOON_OK);
    CU_ASSERT_EQUAL(b, 10); /* the last freed first */
    CU_ASSERT_EQUAL(moon_kv_block_alloc(kv, &b), MOON_OK);
    CU_ASSERT_EQUAL(b, 67);
    moon_kv_cache_destroy(kv);
}

/* Metadata reserved for n blocks in use: up to n blocks in use (freed ones
 * reused) allocate nothing more, so they cannot fail for memory; a failed
 * reserve changes nothing. */
static void test_virtual_reserve_meta_makes_alloc_infallible(void)
{
    moon_kv_config_t cfg = virt_config(1000);
    moon_kv_cache_t *kv  = NULL;
    uint32_t         b[200];

    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create_virtual(&cfg, &kv), MOON_OK);
    moon_fault_fail_after(1);
    CU_ASSERT_EQUAL(moon_kv_cache_reserve_meta(kv, 200), MOON_ERR_NO_MEMORY);
    moon_fault_reset();
    CU_ASSERT_EQUAL(moon_kv_n_free_blocks(kv), 1000);
    CU_ASSERT_EQUAL(moon_kv_cache_reserve_meta(kv, 200), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_cache_reserve_meta(kv, 5000), MOON_OK); /* clamped to 1000 */
    moon_kv_cache_destroy(kv);
    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create_virtual(&cfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_cache_reserve_meta(kv, 200), MOON_OK);
    moon_fault_fail_after(1); /* any allocation from here fails */
    for (uint32_t round = 0; round < 3; round++) {
        for (uint32_t i = 0; i < 200; i++) {
            CU_ASSERT_EQUAL(moon_kv_block_alloc(kv, &b[i]), MOON_OK);
        }
        for (uint32_t i = 0; i < 200; i++) {
            moon_kv_block_unref(kv, b[i]);
        }
    }
    for (uint32_t i = 0; i < 200; i++) {
        CU_ASSERT_EQUAL(moon_kv_block_alloc(kv, &b[i]), MOON_OK);
    }
    moon_fault_reset();
    moon_kv_cache_destroy(kv);
}

/* An F16 cache: half an F32 cache's bytes per block, layer and pool; a type
 * that is not a cache type (AUTO, or past the enum) refused. */
static void test_f16_sizes(void)
{
    moon_kv_config_t cfg = {.n_layers     = 2,
                            .n_kv_heads   = 2,
                            .head_dim     = 4,
                            .block_tokens = 4,
                            .n_blocks     = 5,
                            .max_seqs     = 2,
                            .max_seq_len  = 16,
                            .elem_type    = MOON_KV_F16};
    moon_kv_cache_t *kv  = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_kv_cache_create(&cfg, &kv), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_block_bytes(kv), 2 * 2 * 4 * 8 * sizeof(uint16_t));
    CU_ASSERT_EQUAL(moon_kv_block_layer_bytes(kv), 2 * 4 * 8 * sizeof(uint16_t));
    CU_ASSERT_EQUAL(moon_kv_pool_bytes(kv), 5 * moon_kv_block_bytes(kv));
    CU_ASSERT_EQUAL(moon_kv_config_pool_bytes(&cfg), moon_kv_pool_bytes(kv));
    moon_kv_cache_destroy(kv);
    cfg.elem_type = MOON_KV_AUTO;
    CU_ASSERT_EQUAL(moon_kv_cache_create(&cfg, &kv), MOON_ERR_INVALID_PARAM);
    cfg.elem_type = (moon_kv_type_t)7;
    CU_ASSERT_EQUAL(moon_kv_config_pool_bytes(&cfg), 0);
    CU_ASSERT_EQUAL(moon_kv_type_bytes(MOON_KV_F32), 4);
    CU_ASSERT_EQUAL(moon_kv_type_bytes(MOON_KV_F16), 2);
}

/* The cache's row conversions (F16C where the CPU has it) give the scalar
 * moon_f32_to_fp16's bits for every kind of finite float: normal, ties,
 * subnormal, past fp16's range; and widen back exactly. */
static void test_f16_rows_match_scalar(void)
{
    enum { N = 4099 }; /* not a multiple of the vector width: the scalar tail runs too */
    static float    src[N], back[N];
    static uint16_t h[N];
    unsigned        seed = 7;
    int             bad = 0, bad_back = 0;

    for (int i = 0; i < N; i++) {
        float e = (float)(i % 48) - 30.0f; /* 2^-30 .. 2^17: subnormal to overflow */
        src[i]  = mt_frand(&seed) * ldexpf(1.0f, (int)e);
    }
    src[0] = 1.0f + ldexpf(1.0f, -11); /* a tie: rounds to even (1.0) */
    src[1] = 65519.0f;                 /* just under the overflow threshold */
    src[2] = 65520.0f;                 /* rounds to inf */
    src[3] = -0.0f;
    moon_kv_f16_from_f32(h, src, N);
    for (int i = 0; i < N; i++) {
        bad += h[i] != moon_f32_to_fp16(src[i]);
    }
    moon_kv_f16_to_f32(back, h, N);
    for (int i = 0; i < N; i++) {
        float want = moon_fp16_to_f32(h[i]);
        bad_back += memcmp(&back[i], &want, sizeof(float)) != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(bad_back, 0);
    CU_ASSERT_EQUAL(h[0], 0x3c00);
    CU_ASSERT_EQUAL(h[2], 0x7c00);
}

/* What each backend's caches hold: auto is F16 where the backend reads it
 * (reference, CPU, cost), F32 on CUDA, which refuses F16 (a clear error,
 * not a cache its kernels would misread). */
static void test_backend_kv_types(void)
{
    moon_kv_type_t t = MOON_KV_AUTO;

    CU_ASSERT_EQUAL(moon_backend_kv_type(MOON_BACKEND_CPU, MOON_KV_AUTO, &t), MOON_OK);
    CU_ASSERT_EQUAL(t, MOON_KV_F16);
    CU_ASSERT_EQUAL(moon_backend_kv_type(MOON_BACKEND_REF, MOON_KV_AUTO, &t), MOON_OK);
    CU_ASSERT_EQUAL(t, MOON_KV_F16);
    CU_ASSERT_EQUAL(moon_backend_kv_type(MOON_BACKEND_COST, MOON_KV_AUTO, &t), MOON_OK);
    CU_ASSERT_EQUAL(t, MOON_KV_F16);
    CU_ASSERT_EQUAL(moon_backend_kv_type(MOON_BACKEND_CPU, MOON_KV_F32, &t), MOON_OK);
    CU_ASSERT_EQUAL(t, MOON_KV_F32);
    CU_ASSERT_EQUAL(moon_backend_kv_type(MOON_BACKEND_CUDA, MOON_KV_AUTO, &t), MOON_OK);
    CU_ASSERT_EQUAL(t, MOON_KV_F32);
    t = MOON_KV_AUTO;
    CU_ASSERT_EQUAL(moon_backend_kv_type(MOON_BACKEND_CUDA, MOON_KV_F16, &t), MOON_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(t, MOON_KV_AUTO); /* untouched */
    CU_ASSERT_EQUAL(moon_backend_kv_type(MOON_BACKEND_CPU, (moon_kv_type_t)9, &t),
                    MOON_ERR_UNSUPPORTED);
}

MOON_TEST_MAIN("kv_cache", NULL, NULL, test_alloc_failures_unwind, test_reserve_and_release,
               test_fork_shares_full_blocks, test_export_import_and_fork_decode_identically,
               test_engine_rejects_and_rolls_back, test_virtual_hands_out_what_real_does,
               test_virtual_huge_pool_costs_what_it_uses,
               test_virtual_growth_failure_changes_nothing,
               test_virtual_reserve_meta_makes_alloc_infallible,
               test_pool_resident_follows_blocks_written,
               test_create_in_zeroes_blocks_as_handed_out, test_f16_sizes,
               test_f16_rows_match_scalar, test_backend_kv_types)
