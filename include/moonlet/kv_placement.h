/* moonlet/kv_placement.h - where a key lives without a central master:
 * rendezvous (highest-random-weight) hashing of the key over the store shards,
 * R replicas on distinct shards. Removing a shard moves only the keys it held
 * (each to the next shard in that key's ranking); every client computes the
 * same answer from the same membership. A placement object is used by one
 * thread at a time; the lookups are const and allocate nothing. */
#ifndef MOONLET_KV_PLACEMENT_H
#define MOONLET_KV_PLACEMENT_H

#include "moonlet/kv_key.h"

#define MOON_KV_PLACEMENT_MAX_OUT 64u /* most shards one lookup returns */

typedef struct moon_kv_placement moon_kv_placement_t; /* opaque */

/* Rendezvous weight of key on shard_id: the shards of a key are those with the
 * highest weights. Pure. */
MOON_API uint64_t moon_kv_rendezvous_weight(moon_kv_key_t key, uint32_t shard_id);

/* The min(n_out, n_shards, MOON_KV_PLACEMENT_MAX_OUT) shards of shard_ids with
 * the highest weight for key, best first, into out (caller's); returns how
 * many. Ties (never in practice) go to the lower id. Pure; arrays borrowed. */
MOON_API uint32_t moon_kv_rendezvous(moon_kv_key_t key, const uint32_t *shard_ids,
                                     uint32_t n_shards, uint32_t *out, uint32_t n_out);

/* A membership: shard ids (distinct, copied), all live at first, and the
 * replica count R (1 <= R <= n_shards). MOON_ERR_INVALID_PARAM: empty, duplicate
 * ids, bad R; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_kv_placement_create(const uint32_t *shard_ids, uint32_t n_shards,
                                                uint32_t              n_replicas,
                                                moon_kv_placement_t **placement_p);
MOON_API void          moon_kv_placement_destroy(moon_kv_placement_t *placement); /* NULL: no-op */

/* Marks a shard live or gone (failure detection, or a shard leaving).
 * MOON_ERR_NOT_FOUND: not a member. */
MOON_API moon_status_t moon_kv_placement_set_live(moon_kv_placement_t *placement, uint32_t shard_id,
                                                  int live);
MOON_API uint32_t      moon_kv_placement_n_live(const moon_kv_placement_t *placement);

/* Where to write key: the R best live shards (fewer if fewer are live), best
 * first, into out (R entries); returns how many. */
MOON_API uint32_t moon_kv_placement_write_set(const moon_kv_placement_t *placement,
                                              moon_kv_key_t key, uint32_t *out);

/* Where to read key, in the order to try: the live shards by rank, up to n_out
 * (capped at MOON_KV_PLACEMENT_MAX_OUT). The first R are the write set; while
 * all are live they are the key's home replicas; when some are gone the
 * surviving home replicas come first (a removal does not reorder the others),
 * then the shards that took over their writes. Returns how many. */
MOON_API uint32_t moon_kv_placement_read_set(const moon_kv_placement_t *placement,
                                             moon_kv_key_t key, uint32_t *out, uint32_t n_out);

/* The R home replicas of key over the whole membership, live or not. */
MOON_API uint32_t moon_kv_placement_home_set(const moon_kv_placement_t *placement,
                                             moon_kv_key_t key, uint32_t *out);

#endif /* MOONLET_KV_PLACEMENT_H */
