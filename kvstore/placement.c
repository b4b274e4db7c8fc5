/* kvstore/placement.c - rendezvous hashing and replica sets
 * (moonlet/kv_placement.h). Lookups walk all shards: O(n_shards * n_out). */
#include "moonlet/kv_placement.h"

#include "moonlet/alloc.h"

struct moon_kv_placement {
    uint32_t  n_shards;
    uint32_t  n_replicas;
    uint32_t  n_live;
    uint32_t *ids;     /* (n_shards) every member */
    uint32_t *live;    /* (n_live) the live members */
    uint8_t  *is_live; /* (n_shards) */
};

uint64_t moon_kv_rendezvous_weight(moon_kv_key_t key, uint32_t shard_id)
{
    return moon_kv_mix64(moon_kv_key_hash(key) ^
                         moon_kv_mix64((uint64_t)shard_id + 0x9e3779b97f4a7c15ull));
}

static int better(uint64_t wa, uint32_t ia, uint64_t wb, uint32_t ib)
{
    return wa > wb || (wa == wb && ia < ib);
}

uint32_t moon_kv_rendezvous(moon_kv_key_t key, const uint32_t *shard_ids, uint32_t n_shards,
                            uint32_t *out, uint32_t n_out)
{
    uint64_t w[MOON_KV_PLACEMENT_MAX_OUT];
    uint32_t n = 0;

    n_out = MOON_MIN(MOON_MIN(n_out, n_shards), MOON_KV_PLACEMENT_MAX_OUT);
    if (n_out == 0 || shard_ids == NULL || out == NULL) {
        return 0;
    }
    /* Keep the best n_out so far, sorted, by insertion. */
    for (uint32_t i = 0; i < n_shards; i++) {
        uint32_t id = shard_ids[i];
        uint64_t wi = moon_kv_rendezvous_weight(key, id);
        uint32_t j;

        if (n == n_out && !better(wi, id, w[n - 1], out[n - 1])) {
            continue;
        }
        j = n < n_out ? n++ : n - 1;
        while (j > 0 && better(wi, id, w[j - 1], out[j - 1])) {
            w[j]   = w[j - 1];
            out[j] = out[j - 1];
            j--;
        }
        w[j]   = wi;
        out[j] = id;
    }
    return n;
}

moon_status_t moon_kv_placement_create(const uint32_t *shard_ids, uint32_t n_shards,
                                       uint32_t n_replicas, moon_kv_placement_t **placement_p)
{
    moon_kv_placement_t *pl;

    if (shard_ids == NULL || placement_p == NULL || n_shards == 0 || n_replicas == 0 ||
        n_replicas > n_shards || n_replicas > MOON_KV_PLACEMENT_MAX_OUT) {
        return MOON_ERR_INVALID_PARAM;
    }
    /* Duplicates would put two replicas on one shard. O(n^2): memberships are small. */
    for (uint32_t i = 0; i < n_shards; i++) {
        for (uint32_t j = i + 1; j < n_shards; j++) {
            if (shard_ids[i] == shard_ids[j]) {
                return MOON_ERR_INVALID_PARAM;
            }
        }
    }
    pl = moon_calloc(1, sizeof(*pl));
    if (pl == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    pl->ids     = moon_malloc(sizeof(uint32_t) * n_shards);
    pl->live    = moon_malloc(sizeof(uint32_t) * n_shards);
    pl->is_live = moon_malloc(n_shards);
    if (pl->ids == NULL || pl->live == NULL || pl->is_live == NULL) {
        moon_kv_placement_destroy(pl);
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n_shards; i++) {
        pl->ids[i]     = shard_ids[i];
        pl->live[i]    = shard_ids[i];
        pl->is_live[i] = 1;
    }
    pl->n_shards   = n_shards;
    pl->n_live     = n_shards;
    pl->n_replicas = n_replicas;
    *placement_p   = pl;
    return MOON_OK;
}

void moon_kv_placement_destroy(moon_kv_placement_t *placement)
{
    if (placement == NULL) {
        return;
    }
    moon_free(placement->is_live);
    moon_free(placement->live);
    moon_free(placement->ids);
    moon_free(placement);
}

moon_status_t moon_kv_placement_set_live(moon_kv_placement_t *placement, uint32_t shard_id,
                                         int live)
{
    uint32_t n     = 0;
    int      found = 0;

    if (placement == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < placement->n_shards; i++) {
        if (placement->ids[i] == shard_id) {
            placement->is_live[i] = live != 0;
            found                 = 1;
        }
    }
    if (!found) {
        return MOON_ERR_NOT_FOUND;
    }
    for (uint32_t i = 0; i < placement->n_shards; i++) {
        if (placement->is_live[i]) {
            placement->live[n++] = placement->ids[i];
        }
    }
    placement->n_live = n;
    return MOON_OK;
}

uint32_t moon_kv_placement_n_live(const moon_kv_placement_t *placement)
{
    return placement->n_live;
}

uint32_t moon_kv_placement_write_set(const moon_kv_placement_t *placement, moon_kv_key_t key,
                                     uint32_t *out)
{
    return moon_kv_rendezvous(key, placement->live, placement->n_live, out, placement->n_replicas);
}

uint32_t moon_kv_placement_read_set(const moon_kv_placement_t *placement, moon_kv_key_t key,
                                    uint32_t *out, uint32_t n_out)
{
    return moon_kv_rendezvous(key, placement->live, placement->n_live, out, n_out);
}

uint32_t moon_kv_placement_home_set(const moon_kv_placement_t *placement, moon_kv_key_t key,
                                    uint32_t *out)
{
    return moon_kv_rendezvous(key, placement->ids, placement->n_shards, out, placement->n_replicas);
}
