/* base/hash.c - see moonlet/hash.h. */
#include "moonlet/hash.h"

#include <string.h>
#include <xxhash.h>

uint64_t moon_hash_bytes(const void *bytes, size_t n_bytes)
{
    return XXH3_64bits(bytes, n_bytes);
}

uint64_t moon_hash_bytes_seeded(const void *bytes, size_t n_bytes, uint64_t seed)
{
    return XXH3_64bits_withSeed(bytes, n_bytes, seed);
}

uint64_t moon_hash_str(const char *s)
{
    return XXH3_64bits(s, strlen(s));
}
