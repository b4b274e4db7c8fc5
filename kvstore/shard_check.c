/* kvstore/shard_check.c - a shard's invariant checker (tests call it after
 * every operation) and its visitor. */
#include "shard_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>
#include <unistd.h>

/* ---- self-check ---- */

#define CHECK_OR_FAIL(_cond, ...)                                                                  \
    do {                                                                                           \
        if (!(_cond)) {                                                                            \
            MOON_ERROR("kv shard %u: invariant broken: " __VA_ARGS__);                             \
            status = MOON_ERR_CORRUPT;                                                             \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static uint32_t list_count(const list_t *l, const void *base, size_t stride)
{
    uint32_t n = 0, prev = NIL;

    for (uint32_t i = l->head; i != NIL; i = link_at((void *)(uintptr_t)base, stride, i)->next) {
        if (link_at((void *)(uintptr_t)base, stride, i)->prev != prev || n > l->n) {
            return UINT32_MAX;
        }
        prev = i;
        n++;
    }
    return prev == l->tail ? n : UINT32_MAX;
}

moon_status_t moon_kv_shard_check(const moon_kv_shard_t *shard)
{
    moon_status_t status = MOON_OK;
    /* slots, entries and leases past the touched ones are free by construction */
    uint8_t  *dram      = moon_calloc(shard->n_slots_touched + 1, 1);
    uint8_t  *ssd       = moon_calloc(shard->has_ssd ? shard->ssd.n_slots : 1, 1);
    uint32_t *leases    = moon_calloc(shard->n_entries_touched + 1, sizeof(uint32_t));
    uint32_t  n_indexed = 0, n_in_index = 0, n_held = 0, n_pinned = 0;
    uint32_t  id = shard->shard_id;

    if (dram == NULL || ssd == NULL || leases == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    CHECK_OR_FAIL(
        list_count(&shard->free_entries, shard->entries, sizeof(entry_t)) ==
                shard->free_entries.n &&
            list_count(&shard->reserved, shard->entries, sizeof(entry_t)) == shard->reserved.n &&
            list_count(&shard->dram_lru, shard->entries, sizeof(entry_t)) == shard->dram_lru.n &&
            list_count(&shard->ssd_lru, shard->entries, sizeof(entry_t)) == shard->ssd_lru.n,
        "entry list links", id);
    CHECK_OR_FAIL(
        list_count(&shard->idle_leases, shard->leases, sizeof(lease_t)) == shard->idle_leases.n &&
            list_count(&shard->free_leases, shard->leases, sizeof(lease_t)) == shard->free_leases.n,
        "lease list links", id);
    CHECK_OR_FAIL(shard->n_slots_touched <= shard->cap_slots &&
                      shard->n_slots_touched <= shard->n_slots &&
                      shard->n_free_slots ==
                          shard->n_slot_stack + (shard->n_slots - shard->n_slots_touched) &&
                      shard->n_entries_touched <= shard->cap_entries &&
                      shard->n_entries_touched <= shard->max_entries &&
                      shard->n_leases_touched <= shard->cap_leases &&
                      shard->n_leases_touched <= shard->max_leases,
                  "high-water marks", id);
    for (uint32_t i = 0; i < shard->n_slot_stack; i++) {
        uint32_t slot = shard->free_slots[i];

        CHECK_OR_FAIL(slot < shard->n_slots_touched && !dram[slot], "free slot %u twice", id, slot);
        dram[slot] = 1;
    }
    for (uint32_t i = 0; shard->has_ssd && i < shard->n_free_ssd; i++) {
        uint32_t slot = shard->free_ssd[i];

        CHECK_OR_FAIL(slot < shard->ssd.n_slots && !ssd[slot], "free ssd slot %u twice", id, slot);
        ssd[slot] = 1;
    }
    for (uint32_t l = 0; l < shard->n_leases_touched; l++) {
        const lease_t *ls = &shard->leases[l];

        if (ls->entry == NIL) {
            CHECK_OR_FAIL(ls->list == L_FREE, "free lease %u not in the free list", id, l);
            continue;
        }
        CHECK_OR_FAIL(ls->entry < shard->n_entries_touched &&
                          shard->entries[ls->entry].state == ST_COMMITTED,
                      "lease %u on a non-committed entry", id, l);
        CHECK_OR_FAIL((ls->list == L_LEASE_IDLE) == (ls->n_transfers == 0),
                      "lease %u idle list vs transfers", id, l);
        leases[ls->entry]++;
        n_held++;
    }
    CHECK_OR_FAIL(n_held == shard->n_leases, "lease count %u != %u", id, n_held, shard->n_leases);
    for (uint32_t e = 0; e < shard->n_entries_touched; e++) {
        const entry_t *ent = &shard->entries[e];
        int            orphan;

        if (ent->state == ST_FREE) {
            CHECK_OR_FAIL(ent->list == L_FREE, "free entry %u not in the free list", id, e);
            continue;
        }
        orphan = (ent->flags & F_ORPHAN) != 0;
        CHECK_OR_FAIL(leases[e] == ent->n_leases, "entry %u leases %u != %u", id, e, leases[e],
                      ent->n_leases);
        CHECK_OR_FAIL(orphan == (shard_index_lookup(shard, ent->key) != e), "entry %u index", id,
                      e);
        CHECK_OR_FAIL(!orphan || ent->n_leases > 0, "orphan %u without a lease", id, e);
        n_indexed += !orphan;
        n_pinned += (ent->flags & F_PINNED) != 0;
        switch (ent->state) {
        case ST_RESERVED:
            CHECK_OR_FAIL(ent->list == L_RESERVED && ent->n_leases == 0, "reserved %u", id, e);
            break;
        case ST_COMMITTED:
            CHECK_OR_FAIL((ent->list == L_DRAM) ==
                              (ent->n_leases == 0 && !(ent->flags & F_PINNED) && !orphan),
                          "committed %u in the LRU iff evictable", id, e);
            CHECK_OR_FAIL(ent->list == L_DRAM || ent->list == L_NONE, "committed %u list", id, e);
            break;
        case ST_SPILLED:
            CHECK_OR_FAIL(ent->list == L_SSD && ent->n_leases == 0 && !ent->flags, "spilled %u", id,
                          e);
            CHECK_OR_FAIL(ent->slot < shard->ssd.n_slots && !ssd[ent->slot],
                          "ssd slot of %u owned twice", id, e);
            ssd[ent->slot] = 1;
            continue;
        default:
            CHECK_OR_FAIL(0, "entry %u state %u", id, e, ent->state);
        }
        CHECK_OR_FAIL(ent->slot < shard->n_slots_touched && !dram[ent->slot],
                      "slot of %u owned twice", id, e);
        dram[ent->slot] = 1;
    }
    for (uint32_t i = 0; i < shard->n_slots_touched; i++) {
        CHECK_OR_FAIL(dram[i], "slot %u leaked", id, i);
    }
    for (uint32_t i = 0; shard->has_ssd && i < shard->ssd.n_slots; i++) {
        CHECK_OR_FAIL(ssd[i], "ssd slot %u leaked", id, i);
    }
    n_in_index = (uint32_t)moon_htab_count(shard->index);
    CHECK_OR_FAIL(n_in_index == n_indexed, "index holds %u, entries %u", id, n_in_index, n_indexed);
    CHECK_OR_FAIL(n_pinned == shard->n_pinned, "pinned %u != %u", id, n_pinned, shard->n_pinned);
out:
    moon_free(leases);
    moon_free(ssd);
    moon_free(dram);
    return status;
}

void moon_kv_shard_foreach(const moon_kv_shard_t *shard, moon_kv_shard_visit_fn fn, void *arg)
{
    for (uint32_t i = 0; i < shard->n_entries_touched; i++) {
        const entry_t *e = &shard->entries[i];
        if (e->state == ST_COMMITTED || e->state == ST_SPILLED) {
            fn(arg, e->key, &e->tag);
        }
    }
}
