/* moonlet/kv_shard.h - one KV store shard: a contiguous DRAM arena cut into
 * fixed-size slots, a key index, two-phase puts, leased gets, pins, LRU
 * eviction between watermarks, an optional SSD tier, and stored/evicted events.
 *
 * Threading: a shard is used by one thread at a time (the store shard actor's);
 * no call blocks except the SSD tier's pread/pwrite. Time is whatever the caller
 * passes as now_ns (monotonic, never going backwards), so tests and the
 * simulator control it. Memory: everything is allocated at create; no call
 * allocates afterwards (millions of keys cost no per-key malloc).
 *
 * Zero copy: the arena is one region (moon_kv_shard_arena) that the transport
 * registers once. A put reserves a slot; the writer puts the bytes straight
 * into it (RDMA or memcpy) and commits. A get returns the slot of a committed
 * block under a lease; the reader pulls the bytes, then releases. */
#ifndef MOONLET_KV_SHARD_H
#define MOONLET_KV_SHARD_H

#include "moonlet/kv_key.h"

typedef struct moon_kv_shard moon_kv_shard_t; /* opaque */

/* Events the shard actor publishes to the conductor's global prefix index. */
typedef enum {
    MOON_KV_EVENT_STORED   = 1, /* committed: the block can be read from this shard */
    MOON_KV_EVENT_EVICTED  = 2, /* dropped by eviction (or from the SSD tier): gone */
    MOON_KV_EVENT_REMOVED  = 3, /* dropped by remove or a failed check or read: gone */
    MOON_KV_EVENT_SPILLED  = 4, /* moved DRAM -> SSD: still readable, slower */
    MOON_KV_EVENT_PROMOTED = 5, /* moved SSD -> DRAM by a get or pin */
} moon_kv_event_kind_t;

typedef struct {
    moon_kv_event_kind_t kind;
    uint32_t             shard_id;
    moon_kv_key_t        key;
    moon_kv_tag_t        tag;
} moon_kv_event_t;

/* Called synchronously from inside the shard call that caused the event, on the
 * caller's thread. The event is borrowed for the call. The callback must not
 * call back into the shard (copy the event and publish it later). */
typedef void (*moon_kv_event_fn)(const moon_kv_event_t *event, void *arg);

typedef struct {
    uint32_t shard_id;            /* copied into events */
    size_t   slot_bytes;          /* bytes per slot = largest block; > 0, < 4 GiB */
    uint32_t n_slots;             /* slots in the arena; > 0 */
    void    *arena;               /* NULL: the shard allocates page-aligned memory; else the
                                     caller's region (borrowed until destroy) of arena_bytes */
    size_t   arena_bytes;         /* with arena: >= n_slots * slot_bytes */
    uint32_t max_entries;         /* 0: n_slots + SSD slots; blocks tracked at once */
    uint32_t max_leases;          /* 0: n_slots + 1024; leases held at once (40 B each) */
    double   high_watermark;      /* 0: 0.90; used/n_slots above it starts eviction ... */
    double   low_watermark;       /* 0: 0.85; ... down to this */
    uint64_t reserve_timeout_ns;  /* 0: 10 s; a reservation not committed by then is reclaimed
                                     by moon_kv_shard_expire() */
    int         verify_on_commit; /* nonzero: commit recomputes the checksum of the slot */
    int         verify_on_get;    /* nonzero: get recomputes it before handing the block out */
    const char *ssd_path;         /* NULL: no SSD tier; else the tier's file (created,
                                     truncated; borrowed for the call) */
    uint64_t         ssd_bytes;   /* SSD tier capacity; ssd_bytes / slot_bytes slots */
    moon_kv_event_fn on_event;    /* optional; NULL: no events */
    void            *event_arg;
    int virtual_payload; /* a simulation's blocks (sizes and keys, no bytes): no arena (its
                            pointers NULL), no SSD tier, no verification; the metadata,
                            capacity in slots, leases and eviction as ever */
} moon_kv_shard_config_t;

/* Fills cfg with the defaults above; the caller then sets slot_bytes, n_slots... */
MOON_API void moon_kv_shard_config_init(moon_kv_shard_config_t *cfg);

/* What a reservation hands the writer. */
typedef struct {
    uint64_t token;     /* for commit/revoke; never 0 */
    uint64_t offset;    /* of the slot from the arena base */
    void    *ptr;       /* arena base + offset: write the bytes here (or RDMA to offset) */
    size_t   max_bytes; /* slot_bytes */
} moon_kv_put_t;

/* What a get hands the reader. */
typedef struct {
    uint64_t    lease;  /* for release and the lease calls; never 0 */
    uint64_t    offset; /* of the block from the arena base */
    const void *ptr;    /* arena base + offset: the bytes stay valid and unchanged
                           until the lease is released */
    uint32_t n_bytes;
    uint64_t checksum; /* moon_kv_checksum of the bytes */
} moon_kv_get_t;

typedef enum {
    MOON_KV_STATE_ABSENT    = 0,
    MOON_KV_STATE_RESERVED  = 1, /* a put is in progress; readers don't see it */
    MOON_KV_STATE_COMMITTED = 2, /* in DRAM, readable */
    MOON_KV_STATE_SPILLED   = 3, /* on the SSD tier, readable (a get promotes it) */
} moon_kv_state_t;

typedef struct {
    uint32_t n_slots, used_slots; /* DRAM: reserved + committed */
    uint64_t ssd_slots, ssd_used_slots;
    uint32_t n_reserved, n_committed, n_spilled, n_pinned, n_leases;
    uint64_t n_puts, n_gets, n_get_misses, n_evicted, n_spills, n_promotes, n_removed;
    uint64_t n_expired_reservations, n_expired_leases, n_corrupt, n_tag_mismatch, n_io_errors;
} moon_kv_shard_stats_t;

/* Creates a shard. cfg is borrowed for the call (arena: see the config).
 * MOON_ERR_INVALID_PARAM: bad config (zero sizes, watermarks not 0 < low <= high
 * <= 1, arena too small, SSD tier smaller than one slot); MOON_ERR_NO_MEMORY;
 * MOON_ERR_IO: the SSD file cannot be opened (errno logged). */
MOON_API moon_status_t moon_kv_shard_create(const moon_kv_shard_config_t *cfg,
                                            moon_kv_shard_t             **shard_p);

/* Frees everything the shard allocated (not a caller arena); closes the SSD
 * file. Outstanding reservations and leases die with it. NULL: no-op. */
MOON_API void moon_kv_shard_destroy(moon_kv_shard_t *shard);

/* The arena to register with the transport: base and size (n_slots * slot_bytes;
 * NULL and 0 with virtual_payload). */
MOON_API void *moon_kv_shard_arena(const moon_kv_shard_t *shard, size_t *bytes_p);

/* Phase 1 of a put: reserves a slot for key (a block of n_bytes, made under tag)
 * for client_id (caller-defined id of the writer, for moon_kv_shard_drop_client).
 * May evict (LRU) to make room and to keep usage under the high watermark.
 * MOON_ERR_INVALID_PARAM: n_bytes 0 or > slot_bytes, NULL pointers;
 * MOON_ERR_EXISTS: the key is committed, spilled or already reserved (by anyone:
 *   a second writer does not wait; the first one commits or its reservation
 *   expires, and then reserve succeeds or says EXISTS again);
 * MOON_ERR_NO_RESOURCE: every slot is reserved, leased or pinned (nothing of
 *   those is evicted), or the entry table is full. Nothing changed on error. */
MOON_API moon_status_t moon_kv_shard_reserve(moon_kv_shard_t *shard, const moon_kv_tag_t *tag,
                                             moon_kv_key_t key, size_t n_bytes, uint64_t client_id,
                                             uint64_t now_ns, moon_kv_put_t *put_p);

/* Phase 2: the n_bytes of the slot reserved under token are the block, whose
 * checksum is moon_kv_checksum(bytes). Publishes it (event STORED).
 * MOON_ERR_INVALID_PARAM: token 0 or malformed, n_bytes 0 or > slot_bytes;
 * MOON_ERR_NOT_FOUND: no such reservation (revoked, expired, committed);
 * MOON_ERR_CORRUPT: verify_on_commit and the slot's checksum differs: the
 *   reservation stays (rewrite and commit again, or revoke). */
MOON_API moon_status_t moon_kv_shard_commit(moon_kv_shard_t *shard, uint64_t token, size_t n_bytes,
                                            uint64_t checksum);

/* The writer is alive and its transfer still running: moves the reservation's
 * deadline to now_ns + reserve_timeout_ns. Keep reserve_timeout_ns above the
 * longest put transfer, or renew: a reservation reclaimed while the writer's
 * RDMA write is still landing lets that write hit a reused slot (the commit and
 * get checksums then catch it, but the block is lost). Statuses as for commit. */
MOON_API moon_status_t moon_kv_shard_reserve_renew(moon_kv_shard_t *shard, uint64_t token,
                                                   uint64_t now_ns);

/* Abandons a reservation and frees its slot. MOON_ERR_NOT_FOUND as for commit. */
MOON_API moon_status_t moon_kv_shard_revoke(moon_kv_shard_t *shard, uint64_t token);

/* Convenience: reserve, memcpy n_bytes from bytes (borrowed), commit. Statuses of
 * reserve; on any error nothing is stored. */
MOON_API moon_status_t moon_kv_shard_put(moon_kv_shard_t *shard, const moon_kv_tag_t *tag,
                                         moon_kv_key_t key, const void *bytes, size_t n_bytes,
                                         uint64_t client_id, uint64_t now_ns);

/* Gets the committed block of key made under tag and leases it to client_id:
 * until moon_kv_shard_release(lease) the bytes stay where *get_p says and the
 * block is neither evicted nor freed (remove is deferred). A spilled block is
 * read back from SSD into a DRAM slot first (may evict). Counts as a use for LRU.
 * MOON_ERR_NOT_FOUND: no committed block (unknown, only reserved, removed) or
 *   one made under another tag (never served);
 * MOON_ERR_CORRUPT: verify_on_get and the bytes fail the checksum: the block is
 *   dropped (event REMOVED) and never served;
 * MOON_ERR_NO_RESOURCE: the lease table is full, or no DRAM slot for a promote;
 * MOON_ERR_IO: the SSD read failed: the block is dropped (event REMOVED);
 * MOON_ERR_INVALID_PARAM: NULL pointers. *get_p is set only on MOON_OK. */
MOON_API moon_status_t moon_kv_shard_get(moon_kv_shard_t *shard, const moon_kv_tag_t *tag,
                                         moon_kv_key_t key, uint64_t client_id, uint64_t now_ns,
                                         moon_kv_get_t *get_p);

/* Ends a lease. MOON_ERR_NOT_FOUND: unknown or already ended (released, swept,
 * dropped); MOON_ERR_INVALID_PARAM: lease 0 or malformed. */
MOON_API moon_status_t moon_kv_shard_release(moon_kv_shard_t *shard, uint64_t lease);

/* The shard itself moves the leased bytes (e.g. an RDMA put to the reader):
 * between transfer_begin and transfer_end the lease never expires and is never
 * ended by moon_kv_shard_drop_client (it ends at transfer_end instead). Nested
 * calls count. transfer_end also renews the lease at now_ns.
 * MOON_ERR_NOT_FOUND / MOON_ERR_INVALID_PARAM as for release; transfer_end
 * without begin: MOON_ERR_INVALID_PARAM. */
MOON_API moon_status_t moon_kv_shard_lease_transfer_begin(moon_kv_shard_t *shard, uint64_t lease);
MOON_API moon_status_t moon_kv_shard_lease_transfer_end(moon_kv_shard_t *shard, uint64_t lease,
                                                        uint64_t now_ns);

/* The reader says it is alive (a long transfer): restarts the lease's idle clock. */
MOON_API moon_status_t moon_kv_shard_lease_renew(moon_kv_shard_t *shard, uint64_t lease,
                                                 uint64_t now_ns);

/* Reclaims what dead clients left: reservations older than reserve_timeout_ns
 * (slot freed; a late commit gets NOT_FOUND) and, when lease_timeout_ns > 0,
 * leases idle (no renew) for lease_timeout_ns with no transfer in flight.
 * lease_timeout_ns 0: leases never expire by time. O(what expires).
 * *n_expired_p (may be NULL) gets the number of reservations + leases ended. */
MOON_API void moon_kv_shard_expire(moon_kv_shard_t *shard, uint64_t now_ns,
                                   uint64_t lease_timeout_ns, uint64_t *n_expired_p);

/* client_id is known dead (runtime failure detection): revokes its reservations
 * and ends its leases (those with a transfer in flight end at transfer_end).
 * O(reservations + max_leases). Returns how many were ended or marked. */
MOON_API uint64_t moon_kv_shard_drop_client(moon_kv_shard_t *shard, uint64_t client_id);

/* Batch exists: present[i] = 1 if keys[i] is readable here under tag
 * (committed or spilled), else 0. Does not count as a use.
 * MOON_ERR_INVALID_PARAM: NULL pointers with n > 0. */
MOON_API moon_status_t moon_kv_shard_exists(const moon_kv_shard_t *shard, const moon_kv_tag_t *tag,
                                            const moon_kv_key_t *keys, size_t n, uint8_t *present);

/* Longest prefix: given the chained keys of a prompt in order, *n_hit_p = how
 * many leading ones are readable here under tag. Does not count as a use. */
MOON_API moon_status_t moon_kv_shard_longest_prefix(const moon_kv_shard_t *shard,
                                                    const moon_kv_tag_t   *tag,
                                                    const moon_kv_key_t *keys, size_t n,
                                                    size_t *n_hit_p);

/* Removes the committed or spilled block of key (any tag): it is gone from the
 * index at once (event REMOVED; a new put of the key may follow); a leased block
 * keeps its slot until the last lease ends. MOON_ERR_NOT_FOUND: no such block
 * (a reservation is not a block: revoke it). */
MOON_API moon_status_t moon_kv_shard_remove(moon_kv_shard_t *shard, moon_kv_key_t key);

/* Removes every committed or spilled block of model_id whose weight version
 * is below version (a weight push retired them: no request can use them
 * again), like moon_kv_shard_remove (events REMOVED; a leased block keeps its
 * slot until its last lease ends). *n_removed_p (may be NULL): blocks removed.
 * O(entries). */
MOON_API void moon_kv_shard_remove_older(moon_kv_shard_t *shard, uint64_t model_id,
                                         uint64_t version, uint64_t *n_removed_p);

/* Pin: the committed block of key is never evicted (a spilled one is promoted
 * first). Unpin: evictable again. Not counted: one unpin undoes any pins.
 * MOON_ERR_NOT_FOUND: no committed or spilled block; pin may also return the
 * statuses of a promote (NO_RESOURCE, IO, CORRUPT). */
MOON_API moon_status_t moon_kv_shard_pin(moon_kv_shard_t *shard, moon_kv_key_t key);
MOON_API moon_status_t moon_kv_shard_unpin(moon_kv_shard_t *shard, moon_kv_key_t key);

/* Where key stands (any tag); for tests, and to tell apart the EXISTS cases. */
MOON_API moon_kv_state_t moon_kv_shard_state(const moon_kv_shard_t *shard, moon_kv_key_t key);

/* Calls fn for every readable block (DRAM or SSD), in no particular order;
 * fn must not change the shard. For a subscriber's snapshot. */
typedef void (*moon_kv_shard_visit_fn)(void *arg, moon_kv_key_t key, const moon_kv_tag_t *tag);
MOON_API void moon_kv_shard_foreach(const moon_kv_shard_t *shard, moon_kv_shard_visit_fn fn,
                                    void *arg);

MOON_API void moon_kv_shard_stats(const moon_kv_shard_t *shard, moon_kv_shard_stats_t *stats);
/* The longest run of occupied index buckets: the most buckets a lookup that
 * misses can probe (a health figure of the key hash; O(index size)). */
MOON_API uint64_t moon_kv_shard_longest_probe(const moon_kv_shard_t *shard);

/* Walks every internal structure and checks its invariants (each slot owned
 * exactly once, lists and index agree, lease counts add up). O(size); for
 * tests and debug builds. MOON_OK; MOON_ERR_CORRUPT: the first broken invariant
 * is logged; MOON_ERR_NO_MEMORY: no room for the scratch bitmaps. */
MOON_API moon_status_t moon_kv_shard_check(const moon_kv_shard_t *shard);

#endif /* MOONLET_KV_SHARD_H */
