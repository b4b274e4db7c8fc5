/* benchmarks/kv_kinds.h - the block kinds of the kvstore suite: the block
 * sizes bench_kvstore_dist moves and the slots of each kind's shard arena,
 * shared with bench_copy (the copy ceiling of the same access patterns). */
#ifndef MOON_BENCH_KV_KINDS_H
#define MOON_BENCH_KV_KINDS_H

#include <stddef.h>
#include <stdint.h>

#define N_KINDS 4 /* 256 KiB, 4 MiB, 32 MiB, 4 KiB */
#define N_BULK_KINDS 3
#define MAX_DEPTH 8 /* bulk blocks in flight per client (one 32 MiB buffer each) */

static const size_t   kind_bytes[N_KINDS] = {256u << 10, 4u << 20, 32u << 20, 4096};
static const uint32_t kind_slots[N_KINDS] = {256, 48, 36, 8192}; /* >= 2 x 4 clients x depth */

#endif /* MOON_BENCH_KV_KINDS_H */
