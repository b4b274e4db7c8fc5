/* kvstore/checksum_avx2.c - XXH3-64 compiled for AVX2 (this file alone is
 * built with -mavx2; key.c calls it only where the CPU has AVX2). XXH3's
 * result does not depend on the instructions that compute it.
 *
 * Why: block checksums run on every store put and get, and a weight push
 * hashes the whole checkpoint once and every chunk on each receiver. The
 * baseline build's SSE2 XXH3 hashed 256 MiB in 15.5 ms here, AVX2 in 8 ms.
 * Not AVX-512: on this machine it took 15 ms (libxxhash's own dispatcher
 * picks it, which is why it is not used either). */
#include "checksum_avx2.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#if !defined(__AVX2__)
#error "checksum_avx2.c must be compiled with -mavx2"
#endif

uint64_t moon_kv_checksum_avx2(const void *bytes, size_t n_bytes)
{
    return XXH3_64bits(bytes, n_bytes);
}
