/* moonlet/kv_key.h - KV cache block keys: chained 128-bit XXH3 hashes over the
 * token ids of a prompt, salted with model id and weight version, plus the
 * per-block checksum. Pure functions: no state, thread-safe.
 *
 * key_0 = XXH3_128(zero_key || model_id || weight_version || tokens of block 0)
 * key_i = XXH3_128(key_{i-1} || model_id || weight_version || tokens of block i)
 * Every integer is hashed little-endian (token ids as the tokenizer's int32), so
 * keys are the same on every rank and build. Each key covers its block and every block before it,
 * so equal keys mean an equal prefix under the same model and weights. */
#ifndef MOONLET_KV_KEY_H
#define MOONLET_KV_KEY_H

#include "moonlet/defs.h"
#include "moonlet/hash.h"
#include "moonlet/status.h"

/* A block key: 128 bits of XXH3. Compare with moon_kv_key_eq(). */
typedef struct {
    uint64_t lo;
    uint64_t hi;
} moon_kv_key_t;

/* What keys are salted with; a shard also checks it on every get so a block of
 * another model or weight version is never served. */
typedef struct {
    uint64_t model_id;
    uint64_t weight_version;
} moon_kv_tag_t;

#define MOON_KV_BLOCK_TOKENS_MAX (1u << 20)
/* Tokens per block in the Mooncake traces (one hash id per 512 tokens). */
#define MOON_KV_TRACE_BLOCK_TOKENS 512u

static inline int moon_kv_key_eq(moon_kv_key_t a, moon_kv_key_t b)
{
    return a.lo == b.lo && a.hi == b.hi;
}

/* Keys of every full block of tokens[0..n_tokens): n_keys = n_tokens /
 * block_tokens (a partial last block gets no key). Writes at most max_keys keys
 * to keys (caller's array), the first ones of the chain; *n_keys_p gets the
 * number written. tokens and keys are borrowed for the call.
 * MOON_ERR_INVALID_PARAM: NULL pointers (keys may be NULL when max_keys is 0),
 * block_tokens 0 or above MOON_KV_BLOCK_TOKENS_MAX; nothing written. */
MOON_API moon_status_t moon_kv_keys_of_tokens(const moon_kv_tag_t *tag, uint32_t block_tokens,
                                              const int32_t *tokens, size_t n_tokens,
                                              moon_kv_key_t *keys, size_t max_keys,
                                              size_t *n_keys_p);

/* One step of the chain: the key of block `tokens` (n_tokens of them) after the
 * block whose key is *prev (NULL: the first block). Lets a prefill instance
 * extend the chain block by block as it computes. */
MOON_API moon_kv_key_t moon_kv_key_next(const moon_kv_tag_t *tag, const moon_kv_key_t *prev,
                                        const int32_t *tokens, size_t n_tokens);

/* Keys for Mooncake trace hash ids (one id per 512-token block, already chained:
 * an id names its block and every block before it). key_i = XXH3_128("trace" ||
 * model_id || weight_version || hash_ids[i]); the ids are not chained again.
 * Writes n keys to keys. MOON_ERR_INVALID_PARAM: NULL pointers with n > 0. */
MOON_API moon_status_t moon_kv_keys_of_trace_ids(const moon_kv_tag_t *tag, const int64_t *hash_ids,
                                                 size_t n, moon_kv_key_t *keys);

/* Per-block checksum (XXH3 64-bit, seed 0) of bytes[0..n_bytes). */
MOON_API uint64_t moon_kv_checksum(const void *bytes, size_t n_bytes);

/* 64-bit hash of a key for tables: keys are already uniform hashes. */
static inline uint64_t moon_kv_key_hash(moon_kv_key_t key)
{
    return key.lo ^ (key.hi * 0x9e3779b97f4a7c15ull);
}

/* moon_hash_mix64 (murmur3's finalizer), for keys that are not
 * uniform (structured ids) and for combining hashes. */
static inline uint64_t moon_kv_mix64(uint64_t k)
{
    return moon_hash_mix64(k);
}

#endif /* MOONLET_KV_KEY_H */
