/* kvstore/shard.c - one KV store shard (moonlet/kv_shard.h), its API:
 * lifecycle, puts, gets and queries (the rest: shard_internal.h). The shard: slot arena with a
 * free-slot stack, open-addressing key index over an entry table, intrusive
 * lists (free, reservations by deadline, DRAM LRU, SSD LRU), a lease table,
 * and the SSD tier. Single-threaded: the owner's thread only.
 *
 * Metadata grows on use: DRAM slots, entries and leases past their
 * high-water mark (n_*_touched) were never handed out, are free, and have no
 * storage yet; each is handed out in the order a full free stack (slots) or
 * free list (entries, leases) made at create gave. A real shard allocates
 * every table for its capacity at create (nothing allocates after it); a
 * virtual one (a simulation's) starts small and doubles, so its memory
 * follows the blocks a trace stores, not the modeled capacity.
 *
 * Invariants: an entry is in exactly one list or in none. The DRAM LRU holds
 * exactly the evictable blocks (committed, unleased, unpinned, indexed), so
 * eviction pops its head in O(1). Reserved entries sit in the reservation list
 * (deadlines ascend because the timeout is fixed and time never goes back).
 * Leased or pinned entries sit in no list. A removed entry that is still
 * leased is an orphan: out of the index, freed when its last lease ends. */
#include "moonlet/kv_shard.h"

#include "shard_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>
#include <unistd.h>

/* ---- lifecycle ---- */

void moon_kv_shard_config_init(moon_kv_shard_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->high_watermark     = DEFAULT_HIGH_WATERMARK;
    cfg->low_watermark      = DEFAULT_LOW_WATERMARK;
    cfg->reserve_timeout_ns = DEFAULT_RESERVE_TIMEOUT_NS;
    cfg->verify_on_commit   = 1;
    cfg->verify_on_get      = 1;
}

moon_status_t moon_kv_shard_create(const moon_kv_shard_config_t *cfg, moon_kv_shard_t **shard_p)
{
    moon_kv_shard_t *shard;
    moon_status_t    status;
    double           high, low;
    uint64_t         ssd_slots = 0, max_entries, max_leases;
    size_t           arena_bytes;
    long             page = sysconf(_SC_PAGESIZE);

    if (cfg == NULL || shard_p == NULL || cfg->slot_bytes == 0 || cfg->slot_bytes > UINT32_MAX ||
        cfg->n_slots == 0 || cfg->n_slots == NIL || cfg->slot_bytes > SIZE_MAX / cfg->n_slots) {
        return MOON_ERR_INVALID_PARAM;
    }
    high = cfg->high_watermark == 0 ? DEFAULT_HIGH_WATERMARK : cfg->high_watermark;
    low  = cfg->low_watermark == 0 ? DEFAULT_LOW_WATERMARK : cfg->low_watermark;
    if (!(low > 0 && low <= high && high <= 1.0)) {
        return MOON_ERR_INVALID_PARAM;
    }
    arena_bytes = cfg->slot_bytes * cfg->n_slots;
    if ((cfg->arena != NULL && cfg->arena_bytes < arena_bytes) ||
        (cfg->virtual_payload && (cfg->arena != NULL || cfg->ssd_path != NULL ||
                                  cfg->verify_on_commit || cfg->verify_on_get))) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (cfg->ssd_path != NULL) {
        ssd_slots = MOON_MIN(cfg->ssd_bytes / cfg->slot_bytes, (uint64_t)NIL - 1);
        if (ssd_slots == 0) {
            return MOON_ERR_INVALID_PARAM;
        }
    }
    max_entries = cfg->max_entries != 0 ? cfg->max_entries : cfg->n_slots + ssd_slots;
    max_leases  = cfg->max_leases != 0 ? cfg->max_leases : (uint64_t)cfg->n_slots + 1024;
    if (max_entries > MAX_ENTRIES || max_leases > MAX_ENTRIES) {
        return MOON_ERR_INVALID_PARAM;
    }

    shard = moon_calloc(1, sizeof(*shard));
    if (shard == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    shard->ssd.fd     = -1;
    shard->shard_id   = cfg->shard_id;
    shard->slot_bytes = cfg->slot_bytes;
    shard->n_slots    = cfg->n_slots;
    shard->high_slots = (uint32_t)(high * cfg->n_slots);
    shard->low_slots  = (uint32_t)(low * cfg->n_slots);
    shard->reserve_timeout_ns =
        cfg->reserve_timeout_ns != 0 ? cfg->reserve_timeout_ns : DEFAULT_RESERVE_TIMEOUT_NS;
    shard->verify_on_commit = cfg->verify_on_commit;
    shard->verify_on_get    = cfg->verify_on_get;
    shard->on_event         = cfg->on_event;
    shard->event_arg        = cfg->event_arg;
    shard->max_entries      = (uint32_t)max_entries;
    shard->max_leases       = (uint32_t)max_leases;

    status = MOON_ERR_NO_MEMORY;
    if (cfg->arena != NULL) {
        shard->arena = cfg->arena;
    } else if (!cfg->virtual_payload) {
        size_t rounded = (arena_bytes + (size_t)page - 1) / (size_t)page * (size_t)page;

        shard->arena = moon_aligned_alloc((size_t)page, rounded);
        if (shard->arena == NULL) {
            goto err_free;
        }
        shard->own_arena = 1;
    }
    /* real: every table full-size (fixed index, load <= 2/3), so nothing
     * allocates after create; virtual: small, grown as blocks are stored */
    shard->cap_slots = cfg->virtual_payload ? MOON_MIN(cfg->n_slots, VIRT_START) : cfg->n_slots;
    shard->cap_entries =
        (uint32_t)(cfg->virtual_payload ? MOON_MIN(max_entries, VIRT_START) : max_entries);
    shard->cap_leases =
        (uint32_t)(cfg->virtual_payload ? MOON_MIN(max_leases, VIRT_START) : max_leases);
    shard->free_slots = moon_malloc(sizeof(uint32_t) * shard->cap_slots);
    shard->entries    = moon_malloc(sizeof(entry_t) * shard->cap_entries);
    shard->leases     = moon_malloc(sizeof(lease_t) * shard->cap_leases);
    if (shard->free_slots == NULL || shard->entries == NULL || shard->leases == NULL) {
        goto err_free;
    }
    status = cfg->virtual_payload
                 ? moon_htab_create(&shard_index_type, shard, shard->cap_entries, 0, &shard->index)
                 : moon_htab_create(&shard_index_type, shard, max_entries, MOON_HTAB_FIXED,
                                    &shard->index);
    if (status != MOON_OK) {
        goto err_free;
    }
    status = MOON_ERR_NO_MEMORY;
    if (ssd_slots > 0) {
        shard->free_ssd = moon_malloc(sizeof(uint32_t) * ssd_slots);
        if (shard->free_ssd == NULL) {
            goto err_free;
        }
        status = moon_kv_ssd_open(&shard->ssd, cfg->ssd_path, cfg->slot_bytes, (uint32_t)ssd_slots);
        if (status != MOON_OK) {
            goto err_free;
        }
        shard->has_ssd = 1;
        /* Stack order: slot 0 is taken first. */
        for (uint32_t i = 0; i < ssd_slots; i++) {
            shard->free_ssd[i] = (uint32_t)ssd_slots - 1 - i;
        }
        shard->n_free_ssd = (uint32_t)ssd_slots;
    }

    shard->n_free_slots = cfg->n_slots; /* all never used: the tables fill as they go */
    list_init(&shard->free_entries);
    list_init(&shard->reserved);
    list_init(&shard->dram_lru);
    list_init(&shard->ssd_lru);
    list_init(&shard->free_leases);
    list_init(&shard->idle_leases);
    MOON_DEBUG_LOG("kv shard %u: %u slots of %zu bytes, %u entries, %llu ssd slots",
                   shard->shard_id, shard->n_slots, shard->slot_bytes, shard->max_entries,
                   (unsigned long long)ssd_slots);
    *shard_p = shard;
    return MOON_OK;

err_free:
    moon_free(shard->free_ssd);
    moon_free(shard->leases);
    moon_htab_destroy(shard->index);
    moon_free(shard->entries);
    moon_free(shard->free_slots);
    if (shard->own_arena) {
        moon_free(shard->arena);
    }
    moon_free(shard);
    return status;
}

void moon_kv_shard_destroy(moon_kv_shard_t *shard)
{
    if (shard == NULL) {
        return;
    }
    moon_kv_ssd_close(&shard->ssd);
    moon_free(shard->free_ssd);
    moon_free(shard->leases);
    moon_htab_destroy(shard->index);
    moon_free(shard->entries);
    moon_free(shard->free_slots);
    if (shard->own_arena) {
        moon_free(shard->arena);
    }
    moon_free(shard);
}

void *moon_kv_shard_arena(const moon_kv_shard_t *shard, size_t *bytes_p)
{
    if (bytes_p != NULL) {
        *bytes_p = shard->arena != NULL ? shard->slot_bytes * shard->n_slots : 0;
    }
    return shard->arena;
}

/* ---- puts ---- */

moon_status_t moon_kv_shard_reserve(moon_kv_shard_t *shard, const moon_kv_tag_t *tag,
                                    moon_kv_key_t key, size_t n_bytes, uint64_t client_id,
                                    uint64_t now_ns, moon_kv_put_t *put_p)
{
    uint32_t e, slot;
    entry_t *ent;

    if (shard == NULL || tag == NULL || put_p == NULL || n_bytes == 0 ||
        n_bytes > shard->slot_bytes) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (shard_index_lookup(shard, key) != NIL) {
        return MOON_ERR_EXISTS;
    }
    /* Decide before changing anything: a slot must be free or evictable. */
    if (shard->n_free_slots == 0 && shard->dram_lru.n == 0) {
        return MOON_ERR_NO_RESOURCE;
    }
    if (shard_grow_slots(shard) != MOON_OK || shard_grow_entries(shard) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    if (entries_free(shard) == 0) {
        /* Entry table full (max_entries below slots + SSD slots): drop the
         * coldest block, SSD first, to reuse its entry. */
        if (shard->ssd_lru.head != NIL) {
            shard_drop_spilled(shard, shard->ssd_lru.head, MOON_KV_EVENT_EVICTED);
            shard->counters.n_evicted++;
        } else if (shard->dram_lru.head != NIL) {
            uint32_t victim = shard->dram_lru.head;

            shard_entry_unlink(shard, victim);
            shard_index_delete(shard, victim);
            shard_slot_give(shard, shard->entries[victim].slot);
            shard->counters.n_evicted++;
            shard_emit(shard, MOON_KV_EVENT_EVICTED, &shard->entries[victim]);
            shard_entry_free(shard, victim);
        } else {
            return MOON_ERR_NO_RESOURCE;
        }
    }
    slot = shard_slot_take_evicting(shard);
    MOON_CHECK(slot != NIL); /* guaranteed by the checks above */
    e                = shard_entry_take(shard);
    ent              = &shard->entries[e];
    ent->key         = key;
    ent->tag         = *tag;
    ent->checksum    = 0;
    ent->client_id   = client_id;
    ent->deadline_ns = now_ns + shard->reserve_timeout_ns;
    ent->slot        = slot;
    ent->n_bytes     = (uint32_t)n_bytes;
    ent->n_leases    = 0;
    ent->state       = ST_RESERVED;
    ent->flags       = 0;
    shard_index_insert(shard, e);
    shard_entry_link(shard, e, L_RESERVED);
    shard_enforce_watermark(shard);

    put_p->token     = (uint64_t)ent->gen << 32 | e;
    put_p->offset    = (uint64_t)slot * shard->slot_bytes;
    put_p->ptr       = slot_ptr(shard, slot);
    put_p->max_bytes = shard->slot_bytes;
    return MOON_OK;
}

moon_status_t moon_kv_shard_commit(moon_kv_shard_t *shard, uint64_t token, size_t n_bytes,
                                   uint64_t checksum)
{
    moon_status_t status;
    uint32_t      e;
    entry_t      *ent;

    if (shard == NULL || n_bytes == 0 || n_bytes > shard->slot_bytes) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = shard_token_find(shard, token, &e);
    if (status != MOON_OK) {
        return status;
    }
    ent = &shard->entries[e];
    if (shard->verify_on_commit &&
        moon_kv_checksum(slot_ptr(shard, ent->slot), n_bytes) != checksum) {
        shard->counters.n_corrupt++;
        return MOON_ERR_CORRUPT;
    }
    ent->state    = ST_COMMITTED;
    ent->n_bytes  = (uint32_t)n_bytes;
    ent->checksum = checksum;
    shard_entry_relink(shard, e, L_DRAM);
    shard->counters.n_puts++;
    shard_emit(shard, MOON_KV_EVENT_STORED, ent);
    return MOON_OK;
}

moon_status_t moon_kv_shard_reserve_renew(moon_kv_shard_t *shard, uint64_t token, uint64_t now_ns)
{
    moon_status_t status;
    uint32_t      e;

    status = shard_token_find(shard, token, &e);
    if (status != MOON_OK) {
        return status;
    }
    /* The newest deadline goes last: the list stays sorted by deadline. */
    shard->entries[e].deadline_ns = now_ns + shard->reserve_timeout_ns;
    shard_entry_relink(shard, e, L_RESERVED);
    return MOON_OK;
}

moon_status_t moon_kv_shard_revoke(moon_kv_shard_t *shard, uint64_t token)
{
    moon_status_t status;
    uint32_t      e;

    status = shard_token_find(shard, token, &e);
    if (status != MOON_OK) {
        return status;
    }
    shard_revoke_entry(shard, e);
    return MOON_OK;
}

moon_status_t moon_kv_shard_put(moon_kv_shard_t *shard, const moon_kv_tag_t *tag, moon_kv_key_t key,
                                const void *bytes, size_t n_bytes, uint64_t client_id,
                                uint64_t now_ns)
{
    moon_kv_put_t put;
    moon_status_t status;

    if (bytes == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_kv_shard_reserve(shard, tag, key, n_bytes, client_id, now_ns, &put);
    if (status != MOON_OK) {
        return status;
    }
    if (put.ptr != NULL) { /* NULL: virtual payload, nothing to copy */
        memcpy(put.ptr, bytes, n_bytes);
    }
    status = moon_kv_shard_commit(shard, put.token, n_bytes, moon_kv_checksum(bytes, n_bytes));
    MOON_CHECK(status == MOON_OK); /* the bytes were just copied in */
    return MOON_OK;
}

/* ---- gets and leases ---- */

moon_status_t moon_kv_shard_get(moon_kv_shard_t *shard, const moon_kv_tag_t *tag, moon_kv_key_t key,
                                uint64_t client_id, uint64_t now_ns, moon_kv_get_t *get_p)
{
    moon_status_t status;
    uint32_t      e, l;
    entry_t      *ent;
    lease_t      *ls;

    if (shard == NULL || tag == NULL || get_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    e = shard_index_lookup(shard, key);
    if (e == NIL || shard->entries[e].state == ST_RESERVED) {
        shard->counters.n_get_misses++;
        return MOON_ERR_NOT_FOUND;
    }
    ent = &shard->entries[e];
    if (!tag_eq(&ent->tag, tag)) {
        shard->counters.n_tag_mismatch++;
        shard->counters.n_get_misses++;
        return MOON_ERR_NOT_FOUND;
    }
    if (leases_free(shard) == 0) {
        return MOON_ERR_NO_RESOURCE;
    }
    if (shard_grow_leases(shard) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    if (ent->state == ST_SPILLED) {
        status = shard_promote(shard, e);
        if (status != MOON_OK) {
            return status;
        }
        /* Readable and in no list: the lease below keeps it from eviction. */
    }
    if (shard->verify_on_get &&
        moon_kv_checksum(slot_ptr(shard, ent->slot), ent->n_bytes) != ent->checksum) {
        MOON_WARN("kv shard %u: block %016llx%016llx failed its checksum; dropped", shard->shard_id,
                  (unsigned long long)key.hi, (unsigned long long)key.lo);
        shard->counters.n_corrupt++;
        shard->counters.n_removed++;
        shard_drop_block(shard, e, MOON_KV_EVENT_REMOVED);
        return MOON_ERR_CORRUPT;
    }
    if (ent->list == L_DRAM) {
        shard_entry_unlink(shard, e); /* leased: not evictable */
    }
    ent->n_leases++;
    l               = shard_lease_take(shard);
    ls              = &shard->leases[l];
    ls->list        = L_NONE;
    ls->entry       = e;
    ls->client_id   = client_id;
    ls->n_transfers = 0;
    ls->ending      = 0;
    shard_lease_touch(shard, l, now_ns);
    shard->n_leases++;
    shard->counters.n_gets++;

    get_p->lease    = (uint64_t)ls->gen << 32 | l;
    get_p->offset   = (uint64_t)ent->slot * shard->slot_bytes;
    get_p->ptr      = slot_ptr(shard, ent->slot);
    get_p->n_bytes  = ent->n_bytes;
    get_p->checksum = ent->checksum;
    return MOON_OK;
}

/* ---- queries, remove, pin ---- */

static int readable(const moon_kv_shard_t *shard, const moon_kv_tag_t *tag, moon_kv_key_t key)
{
    uint32_t e = shard_index_lookup(shard, key);

    return e != NIL && shard->entries[e].state != ST_RESERVED &&
           tag_eq(&shard->entries[e].tag, tag);
}

moon_status_t moon_kv_shard_exists(const moon_kv_shard_t *shard, const moon_kv_tag_t *tag,
                                   const moon_kv_key_t *keys, size_t n, uint8_t *present)
{
    if (shard == NULL || tag == NULL || (n > 0 && (keys == NULL || present == NULL))) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < n; i++) {
        present[i] = (uint8_t)readable(shard, tag, keys[i]);
    }
    return MOON_OK;
}

moon_status_t moon_kv_shard_longest_prefix(const moon_kv_shard_t *shard, const moon_kv_tag_t *tag,
                                           const moon_kv_key_t *keys, size_t n, size_t *n_hit_p)
{
    size_t i = 0;

    if (shard == NULL || tag == NULL || n_hit_p == NULL || (n > 0 && keys == NULL)) {
        return MOON_ERR_INVALID_PARAM;
    }
    while (i < n && readable(shard, tag, keys[i])) {
        i++;
    }
    *n_hit_p = i;
    return MOON_OK;
}

moon_status_t moon_kv_shard_remove(moon_kv_shard_t *shard, moon_kv_key_t key)
{
    moon_status_t status;
    uint32_t      e;

    status = shard_block_find(shard, key, &e);
    if (status != MOON_OK) {
        return status;
    }
    shard->counters.n_removed++;
    shard_drop_block(shard, e, MOON_KV_EVENT_REMOVED);
    return MOON_OK;
}

void moon_kv_shard_remove_older(moon_kv_shard_t *shard, uint64_t model_id, uint64_t version,
                                uint64_t *n_removed_p)
{
    uint64_t n = 0;

    for (uint32_t i = 0; i < shard->n_entries_touched; i++) {
        const entry_t *ent = &shard->entries[i];
        if ((ent->state == ST_COMMITTED || ent->state == ST_SPILLED) &&
            ent->tag.model_id == model_id && ent->tag.weight_version < version) {
            shard->counters.n_removed++;
            shard_drop_block(shard, i, MOON_KV_EVENT_REMOVED);
            n++;
        }
    }
    if (n_removed_p != NULL) {
        *n_removed_p = n;
    }
}

moon_status_t moon_kv_shard_pin(moon_kv_shard_t *shard, moon_kv_key_t key)
{
    moon_status_t status;
    uint32_t      e;
    entry_t      *ent;

    status = shard_block_find(shard, key, &e);
    if (status != MOON_OK) {
        return status;
    }
    ent = &shard->entries[e];
    if (ent->state == ST_SPILLED && (status = shard_promote(shard, e)) != MOON_OK) {
        return status;
    }
    if (ent->flags & F_PINNED) {
        return MOON_OK;
    }
    shard_entry_unlink(shard, e); /* out of the DRAM LRU if it was there */
    ent->flags |= F_PINNED;
    shard->n_pinned++;
    return MOON_OK;
}

moon_status_t moon_kv_shard_unpin(moon_kv_shard_t *shard, moon_kv_key_t key)
{
    moon_status_t status;
    uint32_t      e;
    entry_t      *ent;

    status = shard_block_find(shard, key, &e);
    if (status != MOON_OK) {
        return status;
    }
    ent = &shard->entries[e];
    if (!(ent->flags & F_PINNED)) {
        return MOON_OK;
    }
    ent->flags &= (uint8_t)~F_PINNED;
    shard->n_pinned--;
    if (ent->n_leases == 0) {
        shard_entry_link(shard, e, L_DRAM);
    }
    return MOON_OK;
}

moon_kv_state_t moon_kv_shard_state(const moon_kv_shard_t *shard, moon_kv_key_t key)
{
    uint32_t e = shard_index_lookup(shard, key);

    if (e == NIL) {
        return MOON_KV_STATE_ABSENT;
    }
    switch (shard->entries[e].state) {
    case ST_RESERVED:
        return MOON_KV_STATE_RESERVED;
    case ST_COMMITTED:
        return MOON_KV_STATE_COMMITTED;
    default:
        return MOON_KV_STATE_SPILLED;
    }
}

uint64_t moon_kv_shard_longest_probe(const moon_kv_shard_t *shard)
{
    return moon_htab_longest_probe(shard->index);
}

void moon_kv_shard_stats(const moon_kv_shard_t *shard, moon_kv_shard_stats_t *stats)
{
    *stats                = shard->counters;
    stats->n_slots        = shard->n_slots;
    stats->used_slots     = shard->n_slots - shard->n_free_slots;
    stats->ssd_slots      = shard->has_ssd ? shard->ssd.n_slots : 0;
    stats->ssd_used_slots = shard->has_ssd ? shard->ssd.n_slots - shard->n_free_ssd : 0;
    stats->n_reserved     = shard->reserved.n;
    stats->n_spilled      = shard->ssd_lru.n;
    stats->n_committed =
        shard->max_entries - entries_free(shard) - shard->reserved.n - shard->ssd_lru.n;
    stats->n_pinned = shard->n_pinned;
    stats->n_leases = shard->n_leases;
}
