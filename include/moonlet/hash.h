/* moonlet/hash.h - the one hash function family: XXH3 (64-bit) over bytes and
 * strings, and a full-avalanche mix for integers and for combining hashes.
 * Pure functions: any thread. Hashes are the same on every rank of a job (one
 * binary), not across versions: never store them. */
#ifndef MOONLET_HASH_H
#define MOONLET_HASH_H

#include "moonlet/defs.h"

MOON_EXTERN_C_BEGIN

/* XXH3 64-bit of bytes[0..n_bytes) (seed 0). bytes may be NULL when n_bytes is 0. */
MOON_API uint64_t moon_hash_bytes(const void *bytes, size_t n_bytes);
/* The same with a seed (independent hashes of the same bytes). */
MOON_API uint64_t moon_hash_bytes_seeded(const void *bytes, size_t n_bytes, uint64_t seed);
/* moon_hash_bytes of the string's characters, the NUL excluded. */
MOON_API uint64_t moon_hash_str(const char *s);

/* Murmur3's finalizer: a full-avalanche 64-bit mix, for keys that are not
 * uniform (counters, addresses, structured ids). A bijection: distinct inputs
 * never collide. */
static inline uint64_t moon_hash_mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

/* Folds v into the running hash h (order matters: combine(combine(h, a), b)
 * differs from combine(combine(h, b), a)). */
static inline uint64_t moon_hash_combine(uint64_t h, uint64_t v)
{
    return moon_hash_mix64(h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}

MOON_EXTERN_C_END

#endif /* MOONLET_HASH_H */
