/* kvstore/shard_store.c - a shard's storage: intrusive lists, the key index,
 * growth on use, slots and entries, events, eviction by watermark, spills to
 * and promotions from the SSD tier. */
#include "shard_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>
#include <unistd.h>

/* ---- intrusive lists over the entry and lease tables ---- */

static list_t *entry_list(moon_kv_shard_t *shard, uint8_t list)
{
    switch (list) {
    case L_FREE:
        return &shard->free_entries;
    case L_RESERVED:
        return &shard->reserved;
    case L_DRAM:
        return &shard->dram_lru;
    case L_SSD:
        return &shard->ssd_lru;
    default:
        return NULL;
    }
}

void shard_entry_link(moon_kv_shard_t *shard, uint32_t e, uint8_t list)
{
    MOON_ASSERT(shard->entries[e].list == L_NONE);
    list_push_tail(entry_list(shard, list), shard->entries, sizeof(entry_t), e);
    shard->entries[e].list = list;
}

void shard_entry_unlink(moon_kv_shard_t *shard, uint32_t e)
{
    list_t *l = entry_list(shard, shard->entries[e].list);

    if (l != NULL) {
        list_unlink(l, shard->entries, sizeof(entry_t), e);
        shard->entries[e].list = L_NONE;
    }
}

/* Moves e to the tail (newest end) of list, out of whichever it was in. */
void shard_entry_relink(moon_kv_shard_t *shard, uint32_t e, uint8_t list)
{
    shard_entry_unlink(shard, e);
    shard_entry_link(shard, e, list);
}

/* ---- key index ---- */

/* The index's hash: moon_kv_key_hash mixed by the murmur3 finalizer. Keys
 * from moon_kv_key_* are XXH3 outputs, but callers may use structured keys
 * (counters, trace ids): unmixed, consecutive keys fill consecutive buckets
 * and a miss then probes the whole run (a prefix query after 160 k sequential
 * puts cost 25 us instead of 1.7). */
static inline uint64_t bucket_hash(moon_kv_key_t key)
{
    return moon_kv_mix64(moon_kv_key_hash(key));
}

static uint64_t index_hash(const void *key, void *arg)
{
    moon_kv_key_t k;

    (void)arg;
    memcpy(&k, key, sizeof(k));
    return bucket_hash(k);
}

/* The index stores entry numbers; the keys are in the entries. */
static int index_key_eq(const void *key, const void *elem, void *arg)
{
    const moon_kv_shard_t *shard = arg;
    moon_kv_key_t          k;
    uint32_t               e;

    memcpy(&k, key, sizeof(k));
    memcpy(&e, elem, sizeof(e));
    return moon_kv_key_eq(shard->entries[e].key, k);
}

const moon_htab_type_t shard_index_type = {
    .elem_bytes = sizeof(uint32_t), .hash = index_hash, .key_eq = index_key_eq};

uint32_t shard_index_lookup(const moon_kv_shard_t *shard, moon_kv_key_t key)
{
    /* inline: the hash and the comparison are this file's (the hot lookup) */
    const uint32_t *e = moon_htab_find_with(shard->index, &key, bucket_hash(key), index_key_eq);

    return e == NULL ? NIL : *e;
}

void shard_index_insert(moon_kv_shard_t *shard, uint32_t e)
{
    /* room was made (a real shard: max_entries fit its index; a virtual one:
     * grow_entries reserved it), and the key was checked absent */
    MOON_CHECK(moon_htab_insert(shard->index, &shard->entries[e].key, &e, NULL) == MOON_OK);
}

void shard_index_delete(moon_kv_shard_t *shard, uint32_t e)
{
    uint32_t *at = moon_htab_find(shard->index, &shard->entries[e].key);

    MOON_CHECK(at != NULL && *at == e);
    moon_htab_remove_at(shard->index, at);
}

/* The stored block (committed or spilled) of key. INVALID_PARAM: no shard;
 * NOT_FOUND: absent or only reserved. */
moon_status_t shard_block_find(const moon_kv_shard_t *shard, moon_kv_key_t key, uint32_t *e_p)
{
    uint32_t e;

    if (shard == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    e = shard_index_lookup(shard, key);
    if (e == NIL || shard->entries[e].state == ST_RESERVED) {
        return MOON_ERR_NOT_FOUND;
    }
    *e_p = e;
    return MOON_OK;
}

/* ---- growth on use ---- */

/* Room for one more never-used slot, entry or lease (its table and, for
 * entries, the index), so the call that may take one cannot fail half-way.
 * None is left to take once all were used (touched == max): MOON_OK, as in
 * a real shard, whose tables are full-size. */
moon_status_t shard_grow_slots(moon_kv_shard_t *shard)
{
    return moon_grow_tables(&MOON_GROW_TABLE(shard->free_slots), 1,
                            (size_t)shard->n_slots_touched + 1, shard->n_slots, &shard->cap_slots);
}

moon_status_t shard_grow_entries(moon_kv_shard_t *shard)
{
    uint32_t cap = shard->cap_entries;

    /* The index keeps room for the whole table, so insert never fails
     * half-way; cap_entries says so only once both grew. */
    if (moon_grow_tables(&MOON_GROW_TABLE(shard->entries), 1, (size_t)shard->n_entries_touched + 1,
                         shard->max_entries, &cap) != MOON_OK ||
        (cap != shard->cap_entries && moon_htab_reserve(shard->index, cap) != MOON_OK)) {
        return MOON_ERR_NO_MEMORY; /* a grown table is merely larger than needed */
    }
    shard->cap_entries = cap;
    return MOON_OK;
}

moon_status_t shard_grow_leases(moon_kv_shard_t *shard)
{
    return moon_grow_tables(&MOON_GROW_TABLE(shard->leases), 1, (size_t)shard->n_leases_touched + 1,
                            shard->max_leases, &shard->cap_leases);
}

/* ---- slots, entries, events ---- */

/* Freed slots first, newest on top, then never-used ones in order (what a
 * stack of every slot, 0 on top, gave). Room was made by grow_slots. */
static uint32_t slot_take(moon_kv_shard_t *shard)
{
    if (shard->n_free_slots == 0) {
        return NIL;
    }
    shard->n_free_slots--;
    if (shard->n_slot_stack > 0) {
        return shard->free_slots[--shard->n_slot_stack];
    }
    MOON_ASSERT(shard->n_slots_touched < shard->cap_slots);
    return shard->n_slots_touched++;
}

void shard_slot_give(moon_kv_shard_t *shard, uint32_t slot)
{
    MOON_ASSERT(shard->n_slot_stack < shard->n_slots_touched && slot < shard->n_slots_touched);
    shard->free_slots[shard->n_slot_stack++] = slot; /* cap_slots >= n_slots_touched */
    shard->n_free_slots++;
}

/* Never-used entries first, in order, then freed ones oldest first (what a
 * list of every entry made at create gave). Room was made by grow_entries. */
uint32_t shard_entry_take(moon_kv_shard_t *shard)
{
    uint32_t e;

    if (shard->n_entries_touched < shard->max_entries) {
        MOON_ASSERT(shard->n_entries_touched < shard->cap_entries);
        e = shard->n_entries_touched++;
        memset(&shard->entries[e], 0, sizeof(entry_t));
        shard->entries[e].gen = 1;
        return e;
    }
    e = shard->free_entries.head;
    shard_entry_unlink(shard, e);
    return e;
}

/* The same order for leases. Room was made by grow_leases. */
uint32_t shard_lease_take(moon_kv_shard_t *shard)
{
    uint32_t l;

    if (shard->n_leases_touched < shard->max_leases) {
        MOON_ASSERT(shard->n_leases_touched < shard->cap_leases);
        l = shard->n_leases_touched++;
        memset(&shard->leases[l], 0, sizeof(lease_t));
        shard->leases[l].gen = 1;
        return l;
    }
    l = shard->free_leases.head;
    list_unlink(&shard->free_leases, shard->leases, sizeof(lease_t), l);
    return l;
}

static uint32_t ssd_take(moon_kv_shard_t *shard)
{
    return shard->n_free_ssd == 0 ? NIL : shard->free_ssd[--shard->n_free_ssd];
}

static void ssd_give(moon_kv_shard_t *shard, uint32_t slot)
{
    shard->free_ssd[shard->n_free_ssd++] = slot;
}

void shard_entry_free(moon_kv_shard_t *shard, uint32_t e)
{
    entry_t *ent = &shard->entries[e];

    if (ent->flags & F_PINNED) {
        shard->n_pinned--;
    }
    ent->state    = ST_FREE;
    ent->flags    = 0;
    ent->n_leases = 0;
    ent->gen      = ent->gen + 1 == 0 ? 1 : ent->gen + 1; /* stale tokens never match */
    shard_entry_link(shard, e, L_FREE);
}

void shard_emit(moon_kv_shard_t *shard, moon_kv_event_kind_t kind, const entry_t *ent)
{
    moon_kv_event_t ev;

    if (shard->on_event == NULL) {
        return;
    }
    ev.kind     = kind;
    ev.shard_id = shard->shard_id;
    ev.key      = ent->key;
    ev.tag      = ent->tag;
    shard->on_event(&ev, shard->event_arg);
}

/* Drops an SSD-resident block entirely (SSD LRU victim or failed read). */
void shard_drop_spilled(moon_kv_shard_t *shard, uint32_t e, moon_kv_event_kind_t kind)
{
    entry_t *ent = &shard->entries[e];

    shard_entry_unlink(shard, e);
    shard_index_delete(shard, e);
    ssd_give(shard, ent->slot);
    shard_emit(shard, kind, ent);
    shard_entry_free(shard, e);
}

/* Evicts the DRAM LRU head: spills it to the SSD tier if there is one (making
 * room there by dropping the SSD LRU head), else drops it. Returns 0 when
 * nothing is evictable. */
static int evict_one(moon_kv_shard_t *shard)
{
    uint32_t e = shard->dram_lru.head;
    entry_t *ent;

    if (e == NIL) {
        return 0;
    }
    ent = &shard->entries[e];
    shard_entry_unlink(shard, e);
    if (shard->has_ssd) {
        uint32_t ssd_slot = ssd_take(shard);

        if (ssd_slot == NIL && shard->ssd_lru.head != NIL) {
            shard_drop_spilled(shard, shard->ssd_lru.head, MOON_KV_EVENT_EVICTED);
            shard->counters.n_evicted++;
            ssd_slot = ssd_take(shard);
        }
        if (ssd_slot != NIL) {
            if (moon_kv_ssd_write(&shard->ssd, ssd_slot, slot_ptr(shard, ent->slot),
                                  ent->n_bytes) == MOON_OK) {
                shard_slot_give(shard, ent->slot);
                ent->slot  = ssd_slot;
                ent->state = ST_SPILLED;
                shard_entry_link(shard, e, L_SSD);
                shard->counters.n_spills++;
                shard_emit(shard, MOON_KV_EVENT_SPILLED, ent);
                return 1;
            }
            ssd_give(shard, ssd_slot);
            shard->counters.n_io_errors++;
        }
    }
    shard_index_delete(shard, e);
    shard_slot_give(shard, ent->slot);
    shard->counters.n_evicted++;
    shard_emit(shard, MOON_KV_EVENT_EVICTED, ent);
    shard_entry_free(shard, e);
    return 1;
}

/* After a slot was taken: above the high watermark, evict down to the low one. */
void shard_enforce_watermark(moon_kv_shard_t *shard)
{
    if (shard->n_slots - shard->n_free_slots <= shard->high_slots) {
        return;
    }
    while (shard->n_slots - shard->n_free_slots > shard->low_slots && evict_one(shard)) {
    }
}

/* Takes a DRAM slot, evicting one block if none is free. NIL: all slots are
 * reserved, leased or pinned. */
uint32_t shard_slot_take_evicting(moon_kv_shard_t *shard)
{
    if (shard->n_free_slots == 0) {
        evict_one(shard);
    }
    return slot_take(shard);
}

/* Drops a readable block from the index (remove, failed check). A leased one
 * becomes an orphan that keeps its slot until its last lease ends. */
void shard_drop_block(moon_kv_shard_t *shard, uint32_t e, moon_kv_event_kind_t kind)
{
    entry_t *ent = &shard->entries[e];

    if (ent->state == ST_SPILLED) {
        shard_drop_spilled(shard, e, kind);
        return;
    }
    shard_entry_unlink(shard, e);
    shard_index_delete(shard, e);
    shard_emit(shard, kind, ent);
    if (ent->flags & F_PINNED) {
        ent->flags &= (uint8_t)~F_PINNED;
        shard->n_pinned--;
    }
    if (ent->n_leases > 0) {
        ent->flags |= F_ORPHAN;
        return;
    }
    shard_slot_give(shard, ent->slot);
    shard_entry_free(shard, e);
}

/* Brings a spilled block back into a DRAM slot. On success the entry is
 * COMMITTED and in no list (the caller leases, pins or links it). */
moon_status_t shard_promote(moon_kv_shard_t *shard, uint32_t e)
{
    entry_t      *ent = &shard->entries[e];
    uint32_t      slot;
    moon_status_t status;

    if (shard_grow_slots(shard) != MOON_OK) { /* every caller (get, pin) takes a slot here */
        return MOON_ERR_NO_MEMORY;
    }
    shard_entry_unlink(shard, e); /* out of the SSD LRU: making room must not drop it */
    slot = shard_slot_take_evicting(shard);
    if (slot == NIL) {
        shard_entry_link(shard, e, L_SSD);
        return MOON_ERR_NO_RESOURCE;
    }
    status = moon_kv_ssd_read(&shard->ssd, ent->slot, slot_ptr(shard, slot), ent->n_bytes);
    if (status != MOON_OK) {
        shard_slot_give(shard, slot);
        shard->counters.n_io_errors++;
        shard->counters.n_removed++;
        shard_drop_spilled(shard, e, MOON_KV_EVENT_REMOVED);
        return status;
    }
    ssd_give(shard, ent->slot);
    ent->slot  = slot;
    ent->state = ST_COMMITTED;
    shard->counters.n_promotes++;
    shard_emit(shard, MOON_KV_EVENT_PROMOTED, ent);
    shard_enforce_watermark(shard);
    return MOON_OK;
}

void shard_revoke_entry(moon_kv_shard_t *shard, uint32_t e)
{
    shard_entry_unlink(shard, e);
    shard_index_delete(shard, e);
    shard_slot_give(shard, shard->entries[e].slot);
    shard_entry_free(shard, e);
}
