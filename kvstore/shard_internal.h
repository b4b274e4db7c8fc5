/* kvstore/shard_internal.h - what the files of one KV store shard share
 * (private to kvstore/): the entry and lease tables, their intrusive lists,
 * the key index, and the helpers that keep the invariants of shard.c's
 * header comment. shard.c: lifecycle, puts, gets, queries; shard_store.c:
 * storage, the index and eviction; shard_lease.c: leases; shard_check.c:
 * the invariant checker. Single-threaded, as a shard is. */
#ifndef MOON_KVSTORE_SHARD_INTERNAL_H
#define MOON_KVSTORE_SHARD_INTERNAL_H

#include "moonlet/kv_shard.h"

#include "moonlet/htab.h"
#include "ssd.h"

#include <stdint.h>
#include <string.h>

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

/* ---- small list and table helpers (inline: on every path) ---- */

static inline link_t *link_at(void *base, size_t stride, uint32_t i)
{
    return (link_t *)((char *)base + (size_t)i * stride);
}

static inline void list_init(list_t *l)
{
    l->head = l->tail = NIL;
    l->n              = 0;
}

static inline void list_push_tail(list_t *l, void *base, size_t stride, uint32_t i)
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

static inline void list_unlink(list_t *l, void *base, size_t stride, uint32_t i)
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

static inline int tag_eq(const moon_kv_tag_t *a, const moon_kv_tag_t *b)
{
    return a->model_id == b->model_id && a->weight_version == b->weight_version;
}

/* Free entries and leases: the freed ones and the never used. */
static inline uint32_t entries_free(const moon_kv_shard_t *shard)
{
    return shard->free_entries.n + (shard->max_entries - shard->n_entries_touched);
}

static inline uint32_t leases_free(const moon_kv_shard_t *shard)
{
    return shard->free_leases.n + (shard->max_leases - shard->n_leases_touched);
}

static inline char *slot_ptr(const moon_kv_shard_t *shard, uint32_t slot)
{
    return shard->arena != NULL ? shard->arena + (size_t)slot * shard->slot_bytes : NULL;
}

/* ---- shard_store.c: storage, index, eviction ---- */
/* The key index's type: a uint32_t entry per key, hashed and compared by its entry's key. */
extern const moon_htab_type_t shard_index_type;
moon_status_t shard_block_find(const moon_kv_shard_t *shard, moon_kv_key_t key, uint32_t *e_p);
void          shard_drop_block(moon_kv_shard_t *shard, uint32_t e, moon_kv_event_kind_t kind);
void          shard_drop_spilled(moon_kv_shard_t *shard, uint32_t e, moon_kv_event_kind_t kind);
void          shard_emit(moon_kv_shard_t *shard, moon_kv_event_kind_t kind, const entry_t *ent);
void          shard_enforce_watermark(moon_kv_shard_t *shard);
void          shard_entry_free(moon_kv_shard_t *shard, uint32_t e);
void          shard_entry_link(moon_kv_shard_t *shard, uint32_t e, uint8_t list);
void          shard_entry_relink(moon_kv_shard_t *shard, uint32_t e, uint8_t list);
uint32_t      shard_entry_take(moon_kv_shard_t *shard);
void          shard_entry_unlink(moon_kv_shard_t *shard, uint32_t e);
moon_status_t shard_grow_entries(moon_kv_shard_t *shard);
moon_status_t shard_grow_leases(moon_kv_shard_t *shard);
moon_status_t shard_grow_slots(moon_kv_shard_t *shard);
void          shard_index_delete(moon_kv_shard_t *shard, uint32_t e);
void          shard_index_insert(moon_kv_shard_t *shard, uint32_t e);
uint32_t      shard_index_lookup(const moon_kv_shard_t *shard, moon_kv_key_t key);
uint32_t      shard_lease_take(moon_kv_shard_t *shard);
void          shard_lease_touch(moon_kv_shard_t *shard, uint32_t l, uint64_t now_ns);
moon_status_t shard_promote(moon_kv_shard_t *shard, uint32_t e);
void          shard_revoke_entry(moon_kv_shard_t *shard, uint32_t e);
void          shard_slot_give(moon_kv_shard_t *shard, uint32_t slot);
uint32_t      shard_slot_take_evicting(moon_kv_shard_t *shard);
moon_status_t shard_token_find(const moon_kv_shard_t *shard, uint64_t token, uint32_t *e_p);

#endif /* MOON_KVSTORE_SHARD_INTERNAL_H */
