/* kvstore/key.c - chained XXH3 block keys and block checksums (moonlet/kv_key.h).
 * Pure functions; the hash state lives on the caller's stack. */
#include "moonlet/kv_key.h"

#include "checksum_avx2.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* The salt part hashed before each block: previous key, model id, version. */
static void put_le64(unsigned char *out, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        out[i] = (unsigned char)(v >> (8 * i));
    }
}

static moon_kv_key_t key_of_digest(XXH128_hash_t h)
{
    moon_kv_key_t key = {.lo = h.low64, .hi = h.high64};

    return key;
}

static int host_is_le(void)
{
    const uint16_t one = 1;
    unsigned char  first;

    memcpy(&first, &one, 1);
    return first == 1;
}

moon_kv_key_t moon_kv_key_next(const moon_kv_tag_t *tag, const moon_kv_key_t *prev,
                               const int32_t *tokens, size_t n_tokens)
{
    XXH3_state_t  state;
    unsigned char head[32];

    put_le64(head, prev != NULL ? prev->lo : 0);
    put_le64(head + 8, prev != NULL ? prev->hi : 0);
    put_le64(head + 16, tag->model_id);
    put_le64(head + 24, tag->weight_version);
    XXH3_128bits_reset(&state);
    XXH3_128bits_update(&state, head, sizeof(head));
    if (host_is_le()) {
        XXH3_128bits_update(&state, tokens, n_tokens * sizeof(uint32_t));
    } else {
        for (size_t i = 0; i < n_tokens; i++) {
            uint32_t      t     = (uint32_t)tokens[i];
            unsigned char le[4] = {(unsigned char)t, (unsigned char)(t >> 8),
                                   (unsigned char)(t >> 16), (unsigned char)(t >> 24)};

            XXH3_128bits_update(&state, le, sizeof(le));
        }
    }
    return key_of_digest(XXH3_128bits_digest(&state));
}

moon_status_t moon_kv_keys_of_tokens(const moon_kv_tag_t *tag, uint32_t block_tokens,
                                     const int32_t *tokens, size_t n_tokens, moon_kv_key_t *keys,
                                     size_t max_keys, size_t *n_keys_p)
{
    size_t n_keys;

    if (tag == NULL || n_keys_p == NULL || (tokens == NULL && n_tokens > 0) ||
        (keys == NULL && max_keys > 0) || block_tokens == 0 ||
        block_tokens > MOON_KV_BLOCK_TOKENS_MAX) {
        return MOON_ERR_INVALID_PARAM;
    }
    n_keys = MOON_MIN(n_tokens / block_tokens, max_keys);
    for (size_t i = 0; i < n_keys; i++) {
        keys[i] = moon_kv_key_next(tag, i == 0 ? NULL : &keys[i - 1],
                                   tokens + i * (size_t)block_tokens, block_tokens);
    }
    *n_keys_p = n_keys;
    return MOON_OK;
}

moon_status_t moon_kv_keys_of_trace_ids(const moon_kv_tag_t *tag, const int64_t *hash_ids, size_t n,
                                        moon_kv_key_t *keys)
{
    unsigned char buf[29];

    if (n > 0 && (tag == NULL || hash_ids == NULL || keys == NULL)) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(buf, "trace", 5);
        put_le64(buf + 5, tag->model_id);
        put_le64(buf + 13, tag->weight_version);
        put_le64(buf + 21, (uint64_t)hash_ids[i]);
        keys[i] = key_of_digest(XXH3_128bits(buf, sizeof(buf)));
    }
    return MOON_OK;
}

uint64_t moon_kv_checksum(const void *bytes, size_t n_bytes)
{
#ifdef MOON_KV_CHECKSUM_AVX2
    /* short inputs take XXH3's scalar paths either way */
    if (n_bytes > 240 && __builtin_cpu_supports("avx2")) {
        return moon_kv_checksum_avx2(bytes, n_bytes);
    }
#endif
    return XXH3_64bits(bytes, n_bytes);
}
