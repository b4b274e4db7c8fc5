/* actors/store/store_shard.h - the KV store shard actor: owns one moon_kv_shard over
 * a DRAM arena registered with the distributed runtime and serves the store
 * protocol (moonlet/store_msgs.h): batch exists / longest prefix, two-phase put
 * (reserve -> the writer RDMA-puts into the slot -> commit, or revoke), get
 * under a lease (the reader RDMA-gets from the arena, then releases), remove,
 * pin/unpin, renew, stored/evicted events to subscribers, stats.
 *
 * Clients are actors: the shard monitors each one that reserves or gets, and
 * when it ends (its rank lost included: DOWN with MOON_ERR_PEER_LOST) every
 * reservation and lease it held is dropped. A periodic
 * timer reclaims reservations never committed (reserve_timeout_ns) and, when
 * lease_timeout_ns > 0, leases idle that long. With lease_timeout_ns 0 (the
 * default) a lease lasts until its release or its holder's rank is lost, so it
 * never expires while the reader's transfer is in flight (Mooncake #3076).
 *
 * The arena (n_slots * slot_bytes) is allocated and faulted in at init, so a
 * remote write never page-faults the shard's process. Subscribers that are
 * gone (a send to them fails) are dropped.
 *
 * Single rank: with dist NULL nothing is registered; grants carry an empty
 * descriptor and the arena's address in `base`, valid in this process only
 * (clients in the same process copy with memcpy). */
#ifndef MOON_ACTORS_STORE_SHARD_H
#define MOON_ACTORS_STORE_SHARD_H

#include "moonlet/actor.h"
#include "moonlet/dist.h"

#define MOON_STORE_MAX_SUBSCRIBERS 16u

typedef struct {
    uint32_t     shard_id;       /* placement id, copied into events and replies */
    size_t       slot_bytes;     /* largest block; > 0 */
    uint32_t     n_slots;        /* arena = n_slots * slot_bytes (allocated at init) */
    moon_dist_t *dist;           /* borrowed for the actor's life; NULL: single process */
    const char  *name;           /* optional: moon_dist_register'ed (or moon_register'ed
                                    without dist) under this name; copied */
    uint64_t reserve_timeout_ns; /* 0: 10 s */
    uint64_t lease_timeout_ns;   /* 0: leases never expire by time */
    uint64_t tick_ns;            /* expiry sweep period; 0: 100 ms */
    int      verify_on_commit;   /* recompute the checksum at commit (torn writes) */
    int      verify_on_get;      /* recompute it before each get grant */
    uint32_t max_clients;        /* live clients tracked at once; 0: 1024. More get
                                    MOON_ERR_NO_RESOURCE */
    const char *ssd_path;        /* optional SSD tier file (created, truncated; copied) */
    uint64_t    ssd_bytes;       /* its capacity */
    int         virtual_payload; /* a simulation (dist NULL): blocks of sizes and keys, no
                                    bytes (no arena; grants carry base 0), clients put and get
                                    with NULL buffers (store_client.h) */
    int numa;                    /* bind the arena to the NUMA node(s) of this process's cores */
} moon_store_shard_args_t;

/* Spawn with moon_spawn(rt, &moon_store_shard_ops, &args, ...). init fails with
 * MOON_ERR_INVALID_PARAM (bad sizes), MOON_ERR_NO_MEMORY, or the region
 * registration's status. */
MOON_API extern const moon_actor_ops_t moon_store_shard_ops;

#endif /* MOON_ACTORS_STORE_SHARD_H */
