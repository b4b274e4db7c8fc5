/* kvstore/checksum_avx2.h - XXH3-64 built for AVX2 (private to kvstore/). */
#ifndef MOON_KVSTORE_CHECKSUM_AVX2_H
#define MOON_KVSTORE_CHECKSUM_AVX2_H

#include <stddef.h>
#include <stdint.h>

/* moon_kv_checksum's value; call only where the CPU has AVX2. */
uint64_t moon_kv_checksum_avx2(const void *bytes, size_t n_bytes);

#endif
