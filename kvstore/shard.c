/* kvstore/shard.c - one KV store shard (moonlet/kv_shard.h): slot arena with a
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

#include "moonlet/alloc.h"
#include "moonlet/htab.h"
#include "moonlet/log.h"
#include "ssd.h"

#include <string.h>
#include <unistd.h>

#define NIL ((uint32_t)UINT32_MAX)

#define DEFAULT_HIGH_WATERMARK 0.90
#define DEFAULT_LOW_WATERMARK 0.85
#define DEFAULT_RESERVE_TIMEOUT_NS (10ull * 1000 * 1000 * 1000)
#define MAX_ENTRIES (1u << 30)
#define VIRT_START 64 /* a virtual shard's tables at create; they double as used */

enum { ST_FREE = 0, ST_RESERVED = 1, ST_COMMITTED = 2, ST_SPILLED = 3 };
enum { L_NONE = 0, L_FREE, L_RESERVED, L_DRAM, L_SSD, L_LEASE_IDLE };
enum { F_PINNED = 1, F_ORPHAN = 2 };

typedef struct {
    uint32_t prev, next;
} link_t;

typedef struct {
    uint32_t head, tail; /* head: oldest */
    uint32_t n;
} list_t;

typedef struct {
    link_t        link; /* first: lists address entries and leases alike */
    moon_kv_key_t key;
    moon_kv_tag_t tag;
    uint64_t      checksum;    /* COMMITTED, SPILLED */
    uint64_t      client_id;   /* RESERVED: the writer */
    uint64_t      deadline_ns; /* RESERVED */
    uint32_t      slot;        /* RESERVED, COMMITTED: DRAM slot; SPILLED: SSD slot */
    uint32_t      n_bytes;
    uint32_t      n_leases;
    uint32_t      gen; /* bumped at each free; half of a put token */
    uint8_t       state;
    uint8_t       flags;
    uint8_t       list;
} entry_t;

typedef struct {
    link_t   link;
    uint64_t client_id;
    uint64_t last_ns; /* last acquire, renew or transfer end */
    uint32_t entry;   /* NIL: free */
    uint32_t gen;
    uint32_t n_transfers; /* in flight: never expires, ends at the last transfer_end */
    uint8_t  list;
    uint8_t  ending; /* released or dropped during a transfer */
} lease_t;

_Static_assert(sizeof(entry_t) <= 88, "entry grew: it is paid per key");
_Static_assert(sizeof(lease_t) <= 40, "lease grew");

struct moon_kv_shard {
    uint32_t         shard_id;
    size_t           slot_bytes;
    uint32_t         n_slots;
    char            *arena;
    int              own_arena;
    uint32_t         high_slots, low_slots;
    uint64_t         reserve_timeout_ns;
    int              verify_on_commit, verify_on_get;
    moon_kv_event_fn on_event;
    void            *event_arg;

    uint32_t *free_slots;   /* (cap_slots) stack of freed slots, the next on top */
    uint32_t  n_slot_stack; /* on free_slots */
    uint32_t  n_free_slots; /* n_slot_stack + the untouched n_slots - n_slots_touched */
    uint32_t  n_slots_touched, cap_slots;

    entry_t *entries; /* (cap_entries) */
    uint32_t max_entries, n_entries_touched, cap_entries;
    list_t   free_entries, reserved, dram_lru, ssd_lru; /* free_entries: freed ones only */

    /* key -> entry (uint32_t); its keys are the entries'; room for cap_entries */
    moon_htab_t *index;

    lease_t *leases; /* (cap_leases) */
    uint32_t max_leases, n_leases_touched, cap_leases;
    list_t   free_leases, idle_leases; /* free_leases: ended ones only */
    uint32_t n_leases;

    int           has_ssd;
    moon_kv_ssd_t ssd;
    uint32_t     *free_ssd; /* stack */
    uint32_t      n_free_ssd;

    uint32_t              n_pinned;
    moon_kv_shard_stats_t counters; /* the uint64 counters only */
};

/* ---- intrusive lists over the entry and lease tables ---- */

static link_t *link_at(void *base, size_t stride, uint32_t i)
{
    return (link_t *)((char *)base + (size_t)i * stride);
}

static void list_init(list_t *l)
{
    l->head = l->tail = NIL;
    l->n              = 0;
}

static void list_push_tail(list_t *l, void *base, size_t stride, uint32_t i)
{
    link_t *ln = link_at(base, stride, i);

    ln->prev = l->tail;
    ln->next = NIL;
    if (l->tail != NIL) {
        link_at(base, stride, l->tail)->next = i;
    } else {
        l->head = i;
    }
    l->tail = i;
    l->n++;
}

static void list_unlink(list_t *l, void *base, size_t stride, uint32_t i)
{
    link_t *ln = link_at(base, stride, i);

    if (ln->prev != NIL) {
        link_at(base, stride, ln->prev)->next = ln->next;
    } else {
        l->head = ln->next;
    }
    if (ln->next != NIL) {
        link_at(base, stride, ln->next)->prev = ln->prev;
    } else {
        l->tail = ln->prev;
    }
    ln->prev = ln->next = NIL;
    l->n--;
}

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

static void entry_link(moon_kv_shard_t *shard, uint32_t e, uint8_t list)
{
    MOON_ASSERT(shard->entries[e].list == L_NONE);
    list_push_tail(entry_list(shard, list), shard->entries, sizeof(entry_t), e);
    shard->entries[e].list = list;
}

static void entry_unlink(moon_kv_shard_t *shard, uint32_t e)
{
    list_t *l = entry_list(shard, shard->entries[e].list);

    if (l != NULL) {
        list_unlink(l, shard->entries, sizeof(entry_t), e);
        shard->entries[e].list = L_NONE;
    }
}

/* Moves e to the tail (newest end) of list, out of whichever it was in. */
static void entry_relink(moon_kv_shard_t *shard, uint32_t e, uint8_t list)
{
    entry_unlink(shard, e);
    entry_link(shard, e, list);
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

static const moon_htab_type_t index_type = {
    .elem_bytes = sizeof(uint32_t), .hash = index_hash, .key_eq = index_key_eq};

static uint32_t index_lookup(const moon_kv_shard_t *shard, moon_kv_key_t key)
{
    /* inline: the hash and the comparison are this file's (the hot lookup) */
    const uint32_t *e = moon_htab_find_with(shard->index, &key, bucket_hash(key), index_key_eq);

    return e == NULL ? NIL : *e;
}

static void index_insert(moon_kv_shard_t *shard, uint32_t e)
{
    /* room was made (a real shard: max_entries fit its index; a virtual one:
     * grow_entries reserved it), and the key was checked absent */
    MOON_CHECK(moon_htab_insert(shard->index, &shard->entries[e].key, &e, NULL) == MOON_OK);
}

static void index_delete(moon_kv_shard_t *shard, uint32_t e)
{
    uint32_t *at = moon_htab_find(shard->index, &shard->entries[e].key);

    MOON_CHECK(at != NULL && *at == e);
    moon_htab_remove_at(shard->index, at);
}

/* The stored block (committed or spilled) of key. INVALID_PARAM: no shard;
 * NOT_FOUND: absent or only reserved. */
static moon_status_t block_find(const moon_kv_shard_t *shard, moon_kv_key_t key, uint32_t *e_p)
{
    uint32_t e;

    if (shard == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    e = index_lookup(shard, key);
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
static moon_status_t grow_slots(moon_kv_shard_t *shard)
{
    return moon_grow_tables(&MOON_GROW_TABLE(shard->free_slots), 1,
                            (size_t)shard->n_slots_touched + 1, shard->n_slots, &shard->cap_slots);
}

static moon_status_t grow_entries(moon_kv_shard_t *shard)
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

static moon_status_t grow_leases(moon_kv_shard_t *shard)
{
    return moon_grow_tables(&MOON_GROW_TABLE(shard->leases), 1, (size_t)shard->n_leases_touched + 1,
                            shard->max_leases, &shard->cap_leases);
}

/* Free entries and leases: the freed ones and the never used. */
static uint32_t entries_free(const moon_kv_shard_t *shard)
{
    return shard->free_entries.n + (shard->max_entries - shard->n_entries_touched);
}

static uint32_t leases_free(const moon_kv_shard_t *shard)
{
    return shard->free_leases.n + (shard->max_leases - shard->n_leases_touched);
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

static void slot_give(moon_kv_shard_t *shard, uint32_t slot)
{
    MOON_ASSERT(shard->n_slot_stack < shard->n_slots_touched && slot < shard->n_slots_touched);
    shard->free_slots[shard->n_slot_stack++] = slot; /* cap_slots >= n_slots_touched */
    shard->n_free_slots++;
}

/* Never-used entries first, in order, then freed ones oldest first (what a
 * list of every entry made at create gave). Room was made by grow_entries. */
static uint32_t entry_take(moon_kv_shard_t *shard)
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
    entry_unlink(shard, e);
    return e;
}

/* The same order for leases. Room was made by grow_leases. */
static uint32_t lease_take(moon_kv_shard_t *shard)
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

static char *slot_ptr(const moon_kv_shard_t *shard, uint32_t slot)
{
    return shard->arena != NULL ? shard->arena + (size_t)slot * shard->slot_bytes : NULL;
}

static void entry_free(moon_kv_shard_t *shard, uint32_t e)
{
    entry_t *ent = &shard->entries[e];

    if (ent->flags & F_PINNED) {
        shard->n_pinned--;
    }
    ent->state    = ST_FREE;
    ent->flags    = 0;
    ent->n_leases = 0;
    ent->gen      = ent->gen + 1 == 0 ? 1 : ent->gen + 1; /* stale tokens never match */
    entry_link(shard, e, L_FREE);
}

static void emit(moon_kv_shard_t *shard, moon_kv_event_kind_t kind, const entry_t *ent)
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

static int tag_eq(const moon_kv_tag_t *a, const moon_kv_tag_t *b)
{
    return a->model_id == b->model_id && a->weight_version == b->weight_version;
}

/* Drops an SSD-resident block entirely (SSD LRU victim or failed read). */
static void drop_spilled(moon_kv_shard_t *shard, uint32_t e, moon_kv_event_kind_t kind)
{
    entry_t *ent = &shard->entries[e];

    entry_unlink(shard, e);
    index_delete(shard, e);
    ssd_give(shard, ent->slot);
    emit(shard, kind, ent);
    entry_free(shard, e);
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
    entry_unlink(shard, e);
    if (shard->has_ssd) {
        uint32_t ssd_slot = ssd_take(shard);

        if (ssd_slot == NIL && shard->ssd_lru.head != NIL) {
            drop_spilled(shard, shard->ssd_lru.head, MOON_KV_EVENT_EVICTED);
            shard->counters.n_evicted++;
            ssd_slot = ssd_take(shard);
        }
        if (ssd_slot != NIL) {
            if (moon_kv_ssd_write(&shard->ssd, ssd_slot, slot_ptr(shard, ent->slot),
                                  ent->n_bytes) == MOON_OK) {
                slot_give(shard, ent->slot);
                ent->slot  = ssd_slot;
                ent->state = ST_SPILLED;
                entry_link(shard, e, L_SSD);
                shard->counters.n_spills++;
                emit(shard, MOON_KV_EVENT_SPILLED, ent);
                return 1;
            }
            ssd_give(shard, ssd_slot);
            shard->counters.n_io_errors++;
        }
    }
    index_delete(shard, e);
    slot_give(shard, ent->slot);
    shard->counters.n_evicted++;
    emit(shard, MOON_KV_EVENT_EVICTED, ent);
    entry_free(shard, e);
    return 1;
}

/* After a slot was taken: above the high watermark, evict down to the low one. */
static void enforce_watermark(moon_kv_shard_t *shard)
{
    if (shard->n_slots - shard->n_free_slots <= shard->high_slots) {
        return;
    }
    while (shard->n_slots - shard->n_free_slots > shard->low_slots && evict_one(shard)) {
    }
}

/* Takes a DRAM slot, evicting one block if none is free. NIL: all slots are
 * reserved, leased or pinned. */
static uint32_t slot_take_evicting(moon_kv_shard_t *shard)
{
    if (shard->n_free_slots == 0) {
        evict_one(shard);
    }
    return slot_take(shard);
}

/* Drops a readable block from the index (remove, failed check). A leased one
 * becomes an orphan that keeps its slot until its last lease ends. */
static void drop_block(moon_kv_shard_t *shard, uint32_t e, moon_kv_event_kind_t kind)
{
    entry_t *ent = &shard->entries[e];

    if (ent->state == ST_SPILLED) {
        drop_spilled(shard, e, kind);
        return;
    }
    entry_unlink(shard, e);
    index_delete(shard, e);
    emit(shard, kind, ent);
    if (ent->flags & F_PINNED) {
        ent->flags &= (uint8_t)~F_PINNED;
        shard->n_pinned--;
    }
    if (ent->n_leases > 0) {
        ent->flags |= F_ORPHAN;
        return;
    }
    slot_give(shard, ent->slot);
    entry_free(shard, e);
}

/* Brings a spilled block back into a DRAM slot. On success the entry is
 * COMMITTED and in no list (the caller leases, pins or links it). */
static moon_status_t promote(moon_kv_shard_t *shard, uint32_t e)
{
    entry_t      *ent = &shard->entries[e];
    uint32_t      slot;
    moon_status_t status;

    if (grow_slots(shard) != MOON_OK) { /* every caller (get, pin) takes a slot here */
        return MOON_ERR_NO_MEMORY;
    }
    entry_unlink(shard, e); /* out of the SSD LRU: making room must not drop it */
    slot = slot_take_evicting(shard);
    if (slot == NIL) {
        entry_link(shard, e, L_SSD);
        return MOON_ERR_NO_RESOURCE;
    }
    status = moon_kv_ssd_read(&shard->ssd, ent->slot, slot_ptr(shard, slot), ent->n_bytes);
    if (status != MOON_OK) {
        slot_give(shard, slot);
        shard->counters.n_io_errors++;
        shard->counters.n_removed++;
        drop_spilled(shard, e, MOON_KV_EVENT_REMOVED);
        return status;
    }
    ssd_give(shard, ent->slot);
    ent->slot  = slot;
    ent->state = ST_COMMITTED;
    shard->counters.n_promotes++;
    emit(shard, MOON_KV_EVENT_PROMOTED, ent);
    enforce_watermark(shard);
    return MOON_OK;
}

static void revoke_entry(moon_kv_shard_t *shard, uint32_t e)
{
    entry_unlink(shard, e);
    index_delete(shard, e);
    slot_give(shard, shard->entries[e].slot);
    entry_free(shard, e);
}

/* ---- leases ---- */

static void entry_unlease(moon_kv_shard_t *shard, uint32_t e)
{
    entry_t *ent = &shard->entries[e];

    MOON_ASSERT(ent->n_leases > 0);
    if (--ent->n_leases > 0) {
        return;
    }
    if (ent->flags & F_ORPHAN) {
        slot_give(shard, ent->slot);
        entry_free(shard, e);
    } else if (!(ent->flags & F_PINNED)) {
        entry_link(shard, e, L_DRAM); /* a use: most recently used */
    }
}

static void lease_end(moon_kv_shard_t *shard, uint32_t l)
{
    lease_t *ls = &shard->leases[l];
    uint32_t e  = ls->entry;

    if (ls->list == L_LEASE_IDLE) {
        list_unlink(&shard->idle_leases, shard->leases, sizeof(lease_t), l);
    }
    ls->entry       = NIL;
    ls->gen         = ls->gen + 1 == 0 ? 1 : ls->gen + 1;
    ls->n_transfers = 0;
    ls->ending      = 0;
    ls->list        = L_FREE;
    list_push_tail(&shard->free_leases, shard->leases, sizeof(lease_t), l);
    shard->n_leases--;
    entry_unlease(shard, e);
}

static void lease_touch(moon_kv_shard_t *shard, uint32_t l, uint64_t now_ns)
{
    lease_t *ls = &shard->leases[l];

    if (ls->list == L_LEASE_IDLE) {
        list_unlink(&shard->idle_leases, shard->leases, sizeof(lease_t), l);
    }
    ls->last_ns = now_ns;
    list_push_tail(&shard->idle_leases, shard->leases, sizeof(lease_t), l);
    ls->list = L_LEASE_IDLE;
}

/* The lease a handle names. INVALID_PARAM: no shard or a malformed handle;
 * NOT_FOUND: ended (or another generation). */
static moon_status_t lease_find(const moon_kv_shard_t *shard, uint64_t lease, uint32_t *l_p)
{
    uint32_t l   = (uint32_t)lease;
    uint32_t gen = (uint32_t)(lease >> 32);

    if (shard == NULL || gen == 0 || l >= shard->max_leases) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (l >= shard->n_leases_touched || shard->leases[l].gen != gen ||
        shard->leases[l].entry == NIL) {
        return MOON_ERR_NOT_FOUND;
    }
    *l_p = l;
    return MOON_OK;
}

/* The reserved entry a put token names (same statuses as lease_find). */
static moon_status_t token_find(const moon_kv_shard_t *shard, uint64_t token, uint32_t *e_p)
{
    uint32_t e   = (uint32_t)token;
    uint32_t gen = (uint32_t)(token >> 32);

    if (shard == NULL || gen == 0 || e >= shard->max_entries) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (e >= shard->n_entries_touched || shard->entries[e].gen != gen ||
        shard->entries[e].state != ST_RESERVED) {
        return MOON_ERR_NOT_FOUND;
    }
    *e_p = e;
    return MOON_OK;
}

/* lease_find of a lease not released yet: NOT_FOUND once released (it may
 * live on until its last transfer ends). */
static moon_status_t live_lease_find(const moon_kv_shard_t *shard, uint64_t lease, uint32_t *l_p)
{
    moon_status_t status = lease_find(shard, lease, l_p);

    return status == MOON_OK && shard->leases[*l_p].ending ? MOON_ERR_NOT_FOUND : status;
}

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
    status =
        cfg->virtual_payload
            ? moon_htab_create(&index_type, shard, shard->cap_entries, 0, &shard->index)
            : moon_htab_create(&index_type, shard, max_entries, MOON_HTAB_FIXED, &shard->index);
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
    if (index_lookup(shard, key) != NIL) {
        return MOON_ERR_EXISTS;
    }
    /* Decide before changing anything: a slot must be free or evictable. */
    if (shard->n_free_slots == 0 && shard->dram_lru.n == 0) {
        return MOON_ERR_NO_RESOURCE;
    }
    if (grow_slots(shard) != MOON_OK || grow_entries(shard) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    if (entries_free(shard) == 0) {
        /* Entry table full (max_entries below slots + SSD slots): drop the
         * coldest block, SSD first, to reuse its entry. */
        if (shard->ssd_lru.head != NIL) {
            drop_spilled(shard, shard->ssd_lru.head, MOON_KV_EVENT_EVICTED);
            shard->counters.n_evicted++;
        } else if (shard->dram_lru.head != NIL) {
            uint32_t victim = shard->dram_lru.head;

            entry_unlink(shard, victim);
            index_delete(shard, victim);
            slot_give(shard, shard->entries[victim].slot);
            shard->counters.n_evicted++;
            emit(shard, MOON_KV_EVENT_EVICTED, &shard->entries[victim]);
            entry_free(shard, victim);
        } else {
            return MOON_ERR_NO_RESOURCE;
        }
    }
    slot = slot_take_evicting(shard);
    MOON_CHECK(slot != NIL); /* guaranteed by the checks above */
    e                = entry_take(shard);
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
    index_insert(shard, e);
    entry_link(shard, e, L_RESERVED);
    enforce_watermark(shard);

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
    status = token_find(shard, token, &e);
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
    entry_relink(shard, e, L_DRAM);
    shard->counters.n_puts++;
    emit(shard, MOON_KV_EVENT_STORED, ent);
    return MOON_OK;
}

moon_status_t moon_kv_shard_reserve_renew(moon_kv_shard_t *shard, uint64_t token, uint64_t now_ns)
{
    moon_status_t status;
    uint32_t      e;

    status = token_find(shard, token, &e);
    if (status != MOON_OK) {
        return status;
    }
    /* The newest deadline goes last: the list stays sorted by deadline. */
    shard->entries[e].deadline_ns = now_ns + shard->reserve_timeout_ns;
    entry_relink(shard, e, L_RESERVED);
    return MOON_OK;
}

moon_status_t moon_kv_shard_revoke(moon_kv_shard_t *shard, uint64_t token)
{
    moon_status_t status;
    uint32_t      e;

    status = token_find(shard, token, &e);
    if (status != MOON_OK) {
        return status;
    }
    revoke_entry(shard, e);
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
    e = index_lookup(shard, key);
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
    if (grow_leases(shard) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    if (ent->state == ST_SPILLED) {
        status = promote(shard, e);
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
        drop_block(shard, e, MOON_KV_EVENT_REMOVED);
        return MOON_ERR_CORRUPT;
    }
    if (ent->list == L_DRAM) {
        entry_unlink(shard, e); /* leased: not evictable */
    }
    ent->n_leases++;
    l               = lease_take(shard);
    ls              = &shard->leases[l];
    ls->list        = L_NONE;
    ls->entry       = e;
    ls->client_id   = client_id;
    ls->n_transfers = 0;
    ls->ending      = 0;
    lease_touch(shard, l, now_ns);
    shard->n_leases++;
    shard->counters.n_gets++;

    get_p->lease    = (uint64_t)ls->gen << 32 | l;
    get_p->offset   = (uint64_t)ent->slot * shard->slot_bytes;
    get_p->ptr      = slot_ptr(shard, ent->slot);
    get_p->n_bytes  = ent->n_bytes;
    get_p->checksum = ent->checksum;
    return MOON_OK;
}

moon_status_t moon_kv_shard_release(moon_kv_shard_t *shard, uint64_t lease)
{
    moon_status_t status;
    uint32_t      l;

    status = live_lease_find(shard, lease, &l); /* released: it ends at transfer_end */
    if (status != MOON_OK) {
        return status;
    }
    if (shard->leases[l].n_transfers > 0) {
        shard->leases[l].ending = 1;
        return MOON_OK;
    }
    lease_end(shard, l);
    return MOON_OK;
}

moon_status_t moon_kv_shard_lease_transfer_begin(moon_kv_shard_t *shard, uint64_t lease)
{
    moon_status_t status;
    uint32_t      l;
    lease_t      *ls;

    status = live_lease_find(shard, lease, &l);
    if (status != MOON_OK) {
        return status;
    }
    ls = &shard->leases[l];
    if (ls->n_transfers == UINT32_MAX) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (ls->list == L_LEASE_IDLE) {
        list_unlink(&shard->idle_leases, shard->leases, sizeof(lease_t), l);
        ls->list = L_NONE; /* in flight: out of reach of the expiry sweep */
    }
    ls->n_transfers++;
    return MOON_OK;
}

moon_status_t moon_kv_shard_lease_transfer_end(moon_kv_shard_t *shard, uint64_t lease,
                                               uint64_t now_ns)
{
    moon_status_t status;
    uint32_t      l;
    lease_t      *ls;

    status = lease_find(shard, lease, &l);
    if (status != MOON_OK) {
        return status;
    }
    ls = &shard->leases[l];
    if (ls->n_transfers == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (--ls->n_transfers > 0) {
        return MOON_OK;
    }
    if (ls->ending) {
        lease_end(shard, l);
    } else {
        lease_touch(shard, l, now_ns);
    }
    return MOON_OK;
}

moon_status_t moon_kv_shard_lease_renew(moon_kv_shard_t *shard, uint64_t lease, uint64_t now_ns)
{
    moon_status_t status;
    uint32_t      l;

    status = live_lease_find(shard, lease, &l);
    if (status != MOON_OK) {
        return status;
    }
    if (shard->leases[l].n_transfers == 0) {
        lease_touch(shard, l, now_ns);
    } else {
        shard->leases[l].last_ns = now_ns;
    }
    return MOON_OK;
}

void moon_kv_shard_expire(moon_kv_shard_t *shard, uint64_t now_ns, uint64_t lease_timeout_ns,
                          uint64_t *n_expired_p)
{
    uint64_t n = 0;

    while (shard->reserved.head != NIL &&
           shard->entries[shard->reserved.head].deadline_ns <= now_ns) {
        uint32_t e = shard->reserved.head;

        MOON_DEBUG_LOG("kv shard %u: reservation of client %llu expired", shard->shard_id,
                       (unsigned long long)shard->entries[e].client_id);
        revoke_entry(shard, e);
        shard->counters.n_expired_reservations++;
        n++;
    }
    while (lease_timeout_ns > 0 && shard->idle_leases.head != NIL) {
        uint32_t l    = shard->idle_leases.head;
        uint64_t last = shard->leases[l].last_ns;

        if (now_ns < last || now_ns - last < lease_timeout_ns) {
            break;
        }
        lease_end(shard, l);
        shard->counters.n_expired_leases++;
        n++;
    }
    if (n_expired_p != NULL) {
        *n_expired_p = n;
    }
}

uint64_t moon_kv_shard_drop_client(moon_kv_shard_t *shard, uint64_t client_id)
{
    uint64_t n = 0;
    uint32_t e = shard->reserved.head;

    while (e != NIL) {
        uint32_t next = shard->entries[e].link.next;

        if (shard->entries[e].client_id == client_id) {
            revoke_entry(shard, e);
            n++;
        }
        e = next;
    }
    for (uint32_t l = 0; l < shard->n_leases_touched; l++) {
        lease_t *ls = &shard->leases[l];

        if (ls->entry == NIL || ls->client_id != client_id || ls->ending) {
            continue;
        }
        if (ls->n_transfers > 0) {
            ls->ending = 1; /* the shard's own transfer still reads the slot */
        } else {
            lease_end(shard, l);
        }
        n++;
    }
    return n;
}

/* ---- queries, remove, pin ---- */

static int readable(const moon_kv_shard_t *shard, const moon_kv_tag_t *tag, moon_kv_key_t key)
{
    uint32_t e = index_lookup(shard, key);

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

    status = block_find(shard, key, &e);
    if (status != MOON_OK) {
        return status;
    }
    shard->counters.n_removed++;
    drop_block(shard, e, MOON_KV_EVENT_REMOVED);
    return MOON_OK;
}

moon_status_t moon_kv_shard_pin(moon_kv_shard_t *shard, moon_kv_key_t key)
{
    moon_status_t status;
    uint32_t      e;
    entry_t      *ent;

    status = block_find(shard, key, &e);
    if (status != MOON_OK) {
        return status;
    }
    ent = &shard->entries[e];
    if (ent->state == ST_SPILLED && (status = promote(shard, e)) != MOON_OK) {
        return status;
    }
    if (ent->flags & F_PINNED) {
        return MOON_OK;
    }
    entry_unlink(shard, e); /* out of the DRAM LRU if it was there */
    ent->flags |= F_PINNED;
    shard->n_pinned++;
    return MOON_OK;
}

moon_status_t moon_kv_shard_unpin(moon_kv_shard_t *shard, moon_kv_key_t key)
{
    moon_status_t status;
    uint32_t      e;
    entry_t      *ent;

    status = block_find(shard, key, &e);
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
        entry_link(shard, e, L_DRAM);
    }
    return MOON_OK;
}

moon_kv_state_t moon_kv_shard_state(const moon_kv_shard_t *shard, moon_kv_key_t key)
{
    uint32_t e = index_lookup(shard, key);

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
        CHECK_OR_FAIL(orphan == (index_lookup(shard, ent->key) != e), "entry %u index", id, e);
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
