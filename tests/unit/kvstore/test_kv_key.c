/* tests/unit/kvstore/test_kv_key.c - chained block keys, trace-id keys, checksums. */
#include "moonlet/kv_key.h"

#include "moon_test.h"

#include <stdlib.h>
#include <string.h>

/* Measured once on x86-64 (little-endian) with libxxhash 0.8.1. */
#define GOLDEN_KEY_HI 0x0ab89e0c9e13f6e3ull
#define GOLDEN_KEY_LO 0xe7189ee9cf3501b6ull
#define GOLDEN_TRACE_HI 0x7dd6a87b20f85536ull
#define GOLDEN_TRACE_LO 0xde3ff0af662a358bull
#define GOLDEN_SUM 0x1e8c66928ed1f2e0ull

static const moon_kv_tag_t tag_a = {.model_id = 7, .weight_version = 1};

static void fill_tokens(int32_t *t, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        t[i] = (int32_t)(moon_test_rand(&seed) % 32000);
    }
}

static void test_one_key_per_full_block(void)
{
    int32_t       tokens[100];
    moon_kv_key_t keys[8];
    size_t        n = 99;

    fill_tokens(tokens, 100, 1);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 16, tokens, 100, keys, 8, &n), MOON_OK);
    CU_ASSERT_EQUAL(n, 6); /* 100 / 16: the partial last block has no key */
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 16, tokens, 15, keys, 8, &n), MOON_OK);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 16, tokens, 100, keys, 3, &n), MOON_OK);
    CU_ASSERT_EQUAL(n, 3); /* max_keys truncates to the chain's first keys */
}

static void test_keys_are_deterministic_and_distinct(void)
{
    int32_t       tokens[64];
    moon_kv_key_t k1[4], k2[4];
    size_t        n1, n2;

    fill_tokens(tokens, 64, 2);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 16, tokens, 64, k1, 4, &n1), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 16, tokens, 64, k2, 4, &n2), MOON_OK);
    CU_ASSERT_EQUAL(n1, 4);
    CU_ASSERT_EQUAL(memcmp(k1, k2, sizeof(k1)), 0);
    for (int i = 0; i < 4; i++) {
        for (int j = i + 1; j < 4; j++) {
            CU_ASSERT_FALSE(moon_kv_key_eq(k1[i], k1[j]));
        }
    }
}

static void test_key_covers_every_block_before_it(void)
{
    int32_t       tokens[64];
    moon_kv_key_t base[4], changed[4];
    size_t        n;

    fill_tokens(tokens, 64, 3);
    moon_kv_keys_of_tokens(&tag_a, 16, tokens, 64, base, 4, &n);
    tokens[2 * 16 + 5] ^= 1; /* a token of block 2 */
    moon_kv_keys_of_tokens(&tag_a, 16, tokens, 64, changed, 4, &n);
    CU_ASSERT_TRUE(moon_kv_key_eq(base[0], changed[0]));
    CU_ASSERT_TRUE(moon_kv_key_eq(base[1], changed[1]));
    CU_ASSERT_FALSE(moon_kv_key_eq(base[2], changed[2]));
    CU_ASSERT_FALSE(moon_kv_key_eq(base[3], changed[3]));

    /* Same block contents after a different prefix: different key. */
    tokens[2 * 16 + 5] ^= 1;
    tokens[0] ^= 1;
    moon_kv_keys_of_tokens(&tag_a, 16, tokens, 64, changed, 4, &n);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_FALSE(moon_kv_key_eq(base[i], changed[i]));
    }
}

static void test_key_next_extends_the_chain(void)
{
    int32_t       tokens[48];
    moon_kv_key_t keys[3], k;
    size_t        n;

    fill_tokens(tokens, 48, 4);
    moon_kv_keys_of_tokens(&tag_a, 16, tokens, 48, keys, 3, &n);
    k = moon_kv_key_next(&tag_a, NULL, tokens, 16);
    CU_ASSERT_TRUE(moon_kv_key_eq(k, keys[0]));
    k = moon_kv_key_next(&tag_a, &k, tokens + 16, 16);
    CU_ASSERT_TRUE(moon_kv_key_eq(k, keys[1]));
    k = moon_kv_key_next(&tag_a, &k, tokens + 32, 16);
    CU_ASSERT_TRUE(moon_kv_key_eq(k, keys[2]));
}

static void test_model_and_version_salt_the_key(void)
{
    int32_t       tokens[32];
    moon_kv_tag_t other_model = {.model_id = 8, .weight_version = 1};
    moon_kv_tag_t other_ver   = {.model_id = 7, .weight_version = 2};
    moon_kv_key_t a[2], b[2], c[2];
    size_t        n;

    fill_tokens(tokens, 32, 5);
    moon_kv_keys_of_tokens(&tag_a, 16, tokens, 32, a, 2, &n);
    moon_kv_keys_of_tokens(&other_model, 16, tokens, 32, b, 2, &n);
    moon_kv_keys_of_tokens(&other_ver, 16, tokens, 32, c, 2, &n);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_FALSE(moon_kv_key_eq(a[i], b[i]));
        CU_ASSERT_FALSE(moon_kv_key_eq(a[i], c[i]));
        CU_ASSERT_FALSE(moon_kv_key_eq(b[i], c[i]));
    }
}

static void test_block_size_is_configurable(void)
{
    int32_t       tokens[1024];
    moon_kv_key_t k256[4], k512[2];
    size_t        n256, n512;

    fill_tokens(tokens, 1024, 6);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 256, tokens, 1024, k256, 4, &n256), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 512, tokens, 1024, k512, 2, &n512), MOON_OK);
    CU_ASSERT_EQUAL(n256, 4);
    CU_ASSERT_EQUAL(n512, 2);
    CU_ASSERT_FALSE(moon_kv_key_eq(k256[1], k512[0])); /* same 512 tokens, other blocking */
}

static void test_bad_input_is_rejected(void)
{
    int32_t       tokens[16] = {0};
    moon_kv_key_t keys[1];
    size_t        n = 42;

    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(NULL, 16, tokens, 16, keys, 1, &n),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 0, tokens, 16, keys, 1, &n),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(
        moon_kv_keys_of_tokens(&tag_a, MOON_KV_BLOCK_TOKENS_MAX + 1, tokens, 16, keys, 1, &n),
        MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 16, NULL, 16, keys, 1, &n),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 16, tokens, 16, NULL, 1, &n),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 16, tokens, 16, keys, 1, NULL),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(n, 42); /* untouched on error */
    CU_ASSERT_EQUAL(moon_kv_keys_of_tokens(&tag_a, 16, NULL, 0, NULL, 0, &n), MOON_OK);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(moon_kv_keys_of_trace_ids(&tag_a, NULL, 1, keys), MOON_ERR_INVALID_PARAM);
}

static void test_trace_ids_map_to_salted_keys(void)
{
    int64_t       ids_a[3] = {0, 1, 2};
    int64_t       ids_b[3] = {0, 1, 9};
    moon_kv_tag_t other    = {.model_id = 7, .weight_version = 2};
    moon_kv_key_t a[3], b[3], c[3];

    CU_ASSERT_EQUAL(moon_kv_keys_of_trace_ids(&tag_a, ids_a, 3, a), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_keys_of_trace_ids(&tag_a, ids_b, 3, b), MOON_OK);
    CU_ASSERT_EQUAL(moon_kv_keys_of_trace_ids(&other, ids_a, 3, c), MOON_OK);
    CU_ASSERT_TRUE(moon_kv_key_eq(a[0], b[0])); /* equal ids: reusable prefix */
    CU_ASSERT_TRUE(moon_kv_key_eq(a[1], b[1]));
    CU_ASSERT_FALSE(moon_kv_key_eq(a[2], b[2]));
    CU_ASSERT_FALSE(moon_kv_key_eq(a[0], a[1]));
    CU_ASSERT_FALSE(moon_kv_key_eq(a[0], c[0])); /* another weight version */
}

static void test_checksum_detects_a_flipped_bit(void)
{
    unsigned char buf[4096];
    uint64_t      seed = 7, sum;

    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (unsigned char)moon_test_rand(&seed);
    }
    sum = moon_kv_checksum(buf, sizeof(buf));
    CU_ASSERT_EQUAL(sum, moon_kv_checksum(buf, sizeof(buf)));
    buf[1000] ^= 0x10;
    CU_ASSERT_NOT_EQUAL(sum, moon_kv_checksum(buf, sizeof(buf)));
}

/* Keys are a wire format (every rank and the conductor's index must agree):
 * pin it, so a change to the hashing is a deliberate one. */
static void test_key_format_is_stable(void)
{
    int32_t       tokens[4] = {1, 2, 3, -1};
    int64_t       id        = 123456;
    moon_kv_key_t k, t;

    k = moon_kv_key_next(&tag_a, NULL, tokens, 4);
    moon_kv_keys_of_trace_ids(&tag_a, &id, 1, &t);
    CU_ASSERT_EQUAL(k.hi, GOLDEN_KEY_HI);
    CU_ASSERT_EQUAL(k.lo, GOLDEN_KEY_LO);
    CU_ASSERT_EQUAL(t.hi, GOLDEN_TRACE_HI);
    CU_ASSERT_EQUAL(t.lo, GOLDEN_TRACE_LO);
    CU_ASSERT_EQUAL(moon_kv_checksum("moonlet", 7), GOLDEN_SUM);
}

/* Lengths past XXH3's short-input paths take the vector code (AVX2 where the
 * CPU has it, kvstore/checksum_avx2.c): the values are XXH3's own, measured
 * once with libxxhash 0.8.1's scalar build (XXH_VECTOR=0). */
static void test_checksum_is_xxh3_at_every_length(void)
{
    static const size_t   lens[4] = {241, 1000, 4096, (1u << 20) + 3};
    static const uint64_t want[4] = {0x44dbd3180a664e27ull, 0x2ac5b3b66d7cf18full,
                                     0x1e0a232f4ec7fa9eull, 0x7f1144962d4e30fcull};
    unsigned char        *buf     = malloc(lens[3]);

    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    for (size_t i = 0; i < lens[3]; i++) {
        buf[i] = (unsigned char)(i * 131u + (i >> 8));
    }
    for (int k = 0; k < 4; k++) {
        CU_ASSERT_EQUAL(moon_kv_checksum(buf, lens[k]), want[k]);
    }
    free(buf);
}

MOON_TEST_MAIN("kv_key", NULL, NULL, test_key_format_is_stable,
               test_checksum_is_xxh3_at_every_length, test_one_key_per_full_block,
               test_keys_are_deterministic_and_distinct, test_key_covers_every_block_before_it,
               test_key_next_extends_the_chain, test_model_and_version_salt_the_key,
               test_block_size_is_configurable, test_bad_input_is_rejected,
               test_trace_ids_map_to_salted_keys, test_checksum_detects_a_flipped_bit)
