/* moonlet/kv_index.h - the conductor's global prefix index: which store
 * shards hold each block key, kept from the shards' event streams. A
 * subscription starts with a snapshot of the shard (resetting what was known
 * of it), then live events numbered per shard: a gap (a lost message) drops
 * the shard's part and asks the caller to subscribe again, whose snapshot
 * rebuilds it. Pure code; one owner thread. */
#ifndef MOONLET_KV_INDEX_H
#define MOONLET_KV_INDEX_H

#include "moonlet/kv_key.h"

MOON_EXTERN_C_BEGIN

typedef struct moon_kv_index moon_kv_index_t; /* opaque */

/* An index of up to 64 shards counting only blocks of tag (copied).
 * MOON_ERR_INVALID_PARAM, MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_kv_index_create(uint32_t n_shards, const moon_kv_tag_t *tag,
                                            moon_kv_index_t **index_p);
MOON_API void          moon_kv_index_destroy(moon_kv_index_t *index); /* NULL: no-op */

/* Applies one EVENTS message of shard: snapshot 0 live events numbered from
 * seq, 1 the first part of a snapshot (the shard's part is reset), 2 a later
 * part; seq of a snapshot: the number of the next live event. ev: n events of
 * 5 u64 (kind, key lo, key hi, model id, weight version). MOON_OK;
 * MOON_ERR_CORRUPT: a gap in the numbering (or live events before any
 * snapshot): the shard's part was dropped, subscribe again;
 * MOON_ERR_NO_MEMORY: an insert failed, the shard's part was dropped
 * likewise; MOON_ERR_INVALID_PARAM: shard out of range (nothing changed). */
MOON_API moon_status_t moon_kv_index_apply(moon_kv_index_t *index, uint32_t shard, uint64_t seq,
                                           uint32_t snapshot, const uint64_t *ev, uint32_t n);
/* Forgets shard (lost): its blocks no longer count until its next snapshot. */
MOON_API void moon_kv_index_drop_shard(moon_kv_index_t *index, uint32_t shard);
/* Counts blocks of tag (copied) from now on: a weight switch. Every key
 * known so far (the old tag's) is forgotten, so no block of the old version
 * is ever found for the new one; the shards stay synced (their events go on
 * numbering). MOON_ERR_NO_MEMORY, MOON_ERR_INVALID_PARAM: nothing changed. */
MOON_API moon_status_t moon_kv_index_set_tag(moon_kv_index_t *index, const moon_kv_tag_t *tag);
/* Leading keys of keys[0..n) that some synced shard holds. */
MOON_API uint32_t moon_kv_index_prefix(const moon_kv_index_t *index, const moon_kv_key_t *keys,
                                       uint32_t n);
/* Keys held by at least one shard. */
MOON_API size_t moon_kv_index_count(const moon_kv_index_t *index);
/* Entries the table stores, held or not: what its memory grows with. Equal
 * to the count once every change is applied (no key stays without a holder). */
MOON_API size_t moon_kv_index_entries(const moon_kv_index_t *index);
/* 1 once shard's snapshot arrived and no gap followed. */
MOON_API int moon_kv_index_synced(const moon_kv_index_t *index, uint32_t shard);

MOON_EXTERN_C_END

#endif /* MOONLET_KV_INDEX_H */
