/* kvstore/index.c - global prefix index: key -> mask of shards holding it,
 * in an open-addressing table. A key whose last holder removes it leaves the
 * table at once; a lost shard's keys leave in one rebuild. Keeping empty
 * entries instead grew the conductor by every block ever stored (about
 * 0.6 KB per request in a 4-minute soak of distinct prompts). */
#include "moonlet/kv_index.h"

#include "moonlet/alloc.h"
#include "moonlet/htab.h"
#include "moonlet/kv_shard.h"

#include <string.h>

#define INDEX_MAX_SHARDS 64u

typedef struct {
    moon_kv_key_t key;
    uint64_t      mask; /* bit s: shard s holds it */
} entry_t;

struct moon_kv_index {
    moon_htab_t  *tab;
    moon_kv_tag_t tag;
    uint32_t      n_shards;
    uint64_t      next_seq[INDEX_MAX_SHARDS];
    uint64_t      synced; /* bit s: a snapshot of s arrived and no gap since */
    size_t        n_held; /* entries with a non-zero mask */
};

static uint64_t key_hash(const void *key, void *arg)
{
    (void)arg;
    return moon_kv_key_hash(*(const moon_kv_key_t *)key);
}

static const moon_htab_type_t entry_type = {
    .elem_bytes = sizeof(entry_t),
    .key_bytes  = sizeof(moon_kv_key_t),
    .hash       = key_hash,
};

moon_status_t moon_kv_index_create(uint32_t n_shards, const moon_kv_tag_t *tag,
                                   moon_kv_index_t **index_p)
{
    moon_kv_index_t *x;
    moon_status_t    status;

    if (n_shards == 0 || n_shards > INDEX_MAX_SHARDS || tag == NULL || index_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    x = moon_calloc(1, sizeof(*x));
    if (x == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    x->n_shards = n_shards;
    x->tag      = *tag;
    status      = moon_htab_create(&entry_type, NULL, 1024, 0, &x->tab);
    if (status != MOON_OK) {
        moon_free(x);
        return status;
    }
    *index_p = x;
    return MOON_OK;
}

void moon_kv_index_destroy(moon_kv_index_t *x)
{
    if (x != NULL) {
        moon_htab_destroy(x->tab);
        moon_free(x);
    }
}

static void clear_bit(moon_kv_index_t *x, entry_t *e, uint64_t bit)
{
    if (e->mask & bit) {
        e->mask &= ~bit;
        x->n_held -= e->mask == 0;
    }
}

/* Keeps only the held entries, in a fresh table: removing during a walk
 * would skip entries. Without memory for it the empty entries stay (still
 * correct: a key with mask 0 counts as absent). */
static void compact(moon_kv_index_t *x)
{
    moon_htab_t *fresh = NULL;
    size_t       pos   = 0;
    entry_t     *e;

    if (moon_htab_count(x->tab) == x->n_held ||
        moon_htab_create(&entry_type, NULL, x->n_held > 1024 ? x->n_held : 1024, 0, &fresh) !=
            MOON_OK) {
        return;
    }
    while ((e = moon_htab_next(x->tab, &pos)) != NULL) {
        if (e->mask != 0 && moon_htab_insert(fresh, &e->key, e, NULL) != MOON_OK) {
            moon_htab_destroy(fresh); /* reserved above: not expected */
            return;
        }
    }
    moon_htab_destroy(x->tab);
    x->tab = fresh;
}

void moon_kv_index_drop_shard(moon_kv_index_t *x, uint32_t shard)
{
    uint64_t bit = 1ull << shard;
    size_t   pos = 0;
    entry_t *e;

    if (x == NULL || shard >= x->n_shards) {
        return;
    }
    while ((e = moon_htab_next(x->tab, &pos)) != NULL) {
        clear_bit(x, e, bit);
    }
    x->synced &= ~bit;
    compact(x);
}

static moon_status_t add(moon_kv_index_t *x, moon_kv_key_t key, uint64_t bit)
{
    entry_t *e = moon_htab_find(x->tab, &key);

    if (e == NULL) {
        entry_t       fresh  = {key, 0};
        moon_status_t status = moon_htab_insert(x->tab, &key, &fresh, (void **)&e);
        if (status != MOON_OK) {
            return status;
        }
    }
    x->n_held += e->mask == 0;
    e->mask |= bit;
    return MOON_OK;
}

moon_status_t moon_kv_index_apply(moon_kv_index_t *x, uint32_t shard, uint64_t seq,
                                  uint32_t snapshot, const uint64_t *ev, uint32_t n)
{
    uint64_t bit = 1ull << shard;

    if (x == NULL || shard >= x->n_shards || (n > 0 && ev == NULL)) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (snapshot == 1) {
        moon_kv_index_drop_shard(x, shard);
        x->synced |= bit;
        x->next_seq[shard] = seq;
    } else if (!(x->synced & bit) || (snapshot == 0 && seq != x->next_seq[shard])) {
        moon_kv_index_drop_shard(x, shard);
        return MOON_ERR_CORRUPT;
    }
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t *e   = ev + (size_t)i * 5;
        moon_kv_key_t   key = {e[1], e[2]};
        if (e[3] != x->tag.model_id || e[4] != x->tag.weight_version) {
            continue; /* another model's or version's block */
        }
        if (e[0] == MOON_KV_EVENT_STORED || e[0] == MOON_KV_EVENT_PROMOTED ||
            e[0] == MOON_KV_EVENT_SPILLED) {
            if (add(x, key, bit) != MOON_OK) {
                moon_kv_index_drop_shard(x, shard);
                return MOON_ERR_NO_MEMORY;
            }
        } else {
            entry_t *found = moon_htab_find(x->tab, &key);
            if (found != NULL) {
                clear_bit(x, found, bit);
                if (found->mask == 0) {
                    moon_htab_remove_at(x->tab, found); /* no holder left */
                }
            }
        }
    }
    if (snapshot == 0) {
        x->next_seq[shard] = seq + n;
    }
    return MOON_OK;
}

moon_status_t moon_kv_index_set_tag(moon_kv_index_t *x, const moon_kv_tag_t *tag)
{
    moon_htab_t  *fresh = NULL;
    moon_status_t status;

    if (x == NULL || tag == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    /* a new table: the old tag's keys never come back, keeping their empty
     * entries would only grow the table push after push */
    status = moon_htab_create(&entry_type, NULL, 1024, 0, &fresh);
    if (status != MOON_OK) {
        return status;
    }
    moon_htab_destroy(x->tab);
    x->tab    = fresh;
    x->tag    = *tag;
    x->n_held = 0;
    return MOON_OK;
}

uint32_t moon_kv_index_prefix(const moon_kv_index_t *x, const moon_kv_key_t *keys, uint32_t n)
{
    uint32_t i = 0;

    while (i < n) {
        const entry_t *e = moon_htab_find(x->tab, &keys[i]);
        if (e == NULL || (e->mask & x->synced) == 0) {
            break;
        }
        i++;
    }
    return i;
}

size_t moon_kv_index_count(const moon_kv_index_t *x)
{
    return x->n_held;
}

size_t moon_kv_index_entries(const moon_kv_index_t *x)
{
    return moon_htab_count(x->tab);
}

int moon_kv_index_synced(const moon_kv_index_t *x, uint32_t shard)
{
    return shard < x->n_shards && (x->synced >> shard) & 1;
}
