/* moonlet/store_client.h - the KV store client library, used from inside an
 * actor (the prefill instance, a benchmark driver): requests go out as store
 * messages, and the replies, bulk completions and shard DOWNs the actor
 * receives are fed back with moon_store_client_handle(), which calls the
 * caller's on_done once per finished operation. Nothing blocks.
 *
 * Placement without a master: a key's shards come from rendezvous hashing over
 * the live shards (kv_placement.h), R replicas on distinct shards.
 *   put:   reserve on the R write-set shards -> moon_dist_put the bytes into each
 *          granted slot -> commit; done when every replica answered.
 *   get:   ask the first shard of the read set -> moon_dist_get from its arena
 *          -> release; a miss, a lost shard or a failed transfer moves on to the
 *          next shard of the read set (a surviving replica).
 *   query: batch exists / longest prefix: one EXISTS per shard holding some of
 *          the keys (their first live replica), merged here.
 * The client monitors every shard: a shard's DOWN marks it gone in the
 * placement and fails over what was waiting on it.
 *
 * Without a distributed runtime (dist NULL) the shards must live in this
 * process: the bytes are copied with memcpy at the address the grant carries.
 * Threading: a client belongs to one actor and is used only from its turns. */
#ifndef MOON_ACTORS_STORE_CLIENT_H
#define MOON_ACTORS_STORE_CLIENT_H

#include "moonlet/actor.h"
#include "moonlet/dist.h"
#include "moonlet/kv_key.h"
#include "moonlet/store_msgs.h"

typedef struct moon_store_client moon_store_client_t; /* opaque */

#define MOON_STORE_CLIENT_MAX_SHARDS 64u /* = MOON_KV_PLACEMENT_MAX_OUT */
#define MOON_STORE_CLIENT_MAX_KEYS 256u  /* most keys of one query */

typedef enum {
    MOON_STORE_OP_PUT    = 1,
    MOON_STORE_OP_GET    = 2,
    MOON_STORE_OP_EXISTS = 3,
    MOON_STORE_OP_PREFIX = 4,
    MOON_STORE_OP_REMOVE = 5,
    MOON_STORE_OP_PIN    = 6,
    MOON_STORE_OP_UNPIN  = 7,
} moon_store_op_t;

/* One finished operation, borrowed for the on_done call. */
typedef struct {
    uint64_t       cookie;     /* the caller's, from the request */
    uint32_t       op;         /* moon_store_op_t */
    moon_status_t  status;     /* see each request */
    uint32_t       shard_id;   /* get: the shard the bytes came from */
    uint32_t       n_replicas; /* put/remove/pin: replicas that did it */
    uint64_t       n_bytes;    /* get: the block's size (also when the buffer was too small) */
    uint32_t       n_keys;     /* query: keys asked */
    uint32_t       n_hit;      /* EXISTS: keys present; PREFIX: leading keys present */
    const uint8_t *present;    /* EXISTS: n_keys flags (1 present) */
} moon_store_done_t;

/* Called from moon_store_client_handle (the owning actor's turn); self is that
 * actor. It may issue new requests on the same client. */
typedef void (*moon_store_done_fn)(moon_actor_t *self, void *arg, const moon_store_done_t *done);

typedef struct {
    moon_dist_t       *dist;    /* borrowed; NULL: shards in this process (memcpy) */
    const moon_addr_t *shards;  /* n_shards shard actors; shards[i] must have been spawned
                                   with shard_id i (copied) */
    uint32_t      n_shards;     /* 1..MOON_STORE_CLIENT_MAX_SHARDS */
    uint32_t      n_replicas;   /* R: 1..n_shards */
    moon_kv_tag_t tag;          /* model id + weight version of every request */
    uint32_t      max_ops;      /* operations in flight at once; 0: 256; below 2^22 */
    uint64_t      renew_ns;     /* the grant (reservation or lease) of a transfer in flight is
                                   renewed at most this long after the last time, so a shard
                                   never expires it under the transfer; keep it below half the
                                   shards' reserve_timeout_ns and lease_timeout_ns. A timer of the
                                   owning actor (route MOON_MSG_SYS_TIMER to
                                   moon_store_client_handle, as MOON_STORE_CLIENT_ON_MSG does).
                                   0: 2 s; UINT64_MAX: never */
    int verify_get;             /* check every block read against its stored checksum */
    int skip_checksum;          /* puts commit checksum 0 instead of XXH3 of the bytes (saves a pass
                                   over each block: then no shard may verify_on_commit and no
                                   reader may verify_get) */
    moon_store_done_fn on_done; /* required */
    void              *arg;
} moon_store_client_config_t;

/* Creates a client owned by actor self (call from its init or a handler) and
 * monitors every shard. cfg is borrowed for the call.
 * MOON_ERR_INVALID_PARAM: bad config; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_store_client_create(moon_actor_t                     *self,
                                                const moon_store_client_config_t *cfg,
                                                moon_store_client_t             **client_p);
/* Frees the client. Operations still in flight are abandoned (their buffers
 * must stay valid until the bulk transfers already started complete; the
 * shards reclaim what they granted when this actor ends). NULL: no-op. */
MOON_API void moon_store_client_destroy(moon_store_client_t *client);

/* Stores n_bytes of bytes under key on the key's R live shards. bytes (inside
 * local_reg when given, for zero-copy) must stay valid and unchanged until the
 * operation's on_done. Done status: MOON_OK when every replica committed;
 * otherwise the first failure: MOON_ERR_EXISTS (another writer has or is
 * writing the key: blocks are immutable), MOON_ERR_INVALID_PARAM (larger than
 * a slot), MOON_ERR_NO_RESOURCE (shard full of reserved/leased/pinned blocks),
 * MOON_ERR_PEER_LOST (a shard died), MOON_ERR_IO (transfer failed),
 * MOON_ERR_TIMED_OUT (the shard let the reservation expire: a renewal was
 * refused, or the commit found none);
 * n_replicas says how many committed.
 * Call status: MOON_OK (on_done will follow), MOON_ERR_INVALID_PARAM,
 * MOON_ERR_NO_RESOURCE (max_ops in flight), MOON_ERR_PEER_LOST (no live shard). */
/* In one process (dist NULL) bytes (and a get's buf) may be NULL: a virtual
 * block of n_bytes (a simulation's: sizes and keys, no bytes; checksum 0),
 * for shards with virtual_payload. */
MOON_API moon_status_t moon_store_client_put(moon_store_client_t *client, moon_kv_key_t key,
                                             const void *bytes, size_t n_bytes,
                                             moon_dist_region_t *local_reg, uint64_t cookie);

/* Reads the block of key into buf (cap bytes, inside local_reg when given),
 * trying the key's live shards in read-set order. Done status: MOON_OK (n_bytes
 * written to buf, shard_id says where from); MOON_ERR_NOT_FOUND (no shard has
 * it under this client's tag); MOON_ERR_INVALID_PARAM (cap < the block: n_bytes
 * says how large); MOON_ERR_CORRUPT (verify_get, and no replica passed);
 * MOON_ERR_PEER_LOST (every candidate shard died); MOON_ERR_TIMED_OUT (the
 * lease expired under the transfer, on every replica tried: where a shard
 * expires leases by time, it confirms the release, so bytes read from a slot
 * reused meanwhile are never reported as the block). Call statuses as for put. */
MOON_API moon_status_t moon_store_client_get(moon_store_client_t *client, moon_kv_key_t key,
                                             void *buf, size_t cap, moon_dist_region_t *local_reg,
                                             uint64_t cookie);

/* Batch exists (op MOON_STORE_OP_EXISTS) or longest prefix (MOON_STORE_OP_PREFIX)
 * of n chained keys (copied; n <= MOON_STORE_CLIENT_MAX_KEYS). A key counts as
 * present when its first live replica has it. Done status MOON_OK, or the
 * first shard error (the keys of that shard then count as absent). */
MOON_API moon_status_t moon_store_client_query(moon_store_client_t *client, uint32_t op,
                                               const moon_kv_key_t *keys, uint32_t n,
                                               uint64_t cookie);

/* Remove / pin / unpin key on its live home replicas (op MOON_STORE_OP_REMOVE,
 * _PIN, _UNPIN). Done status MOON_OK when at least one replica did it
 * (n_replicas), else the first error (MOON_ERR_NOT_FOUND...). */
MOON_API moon_status_t moon_store_client_apply(moon_store_client_t *client, uint32_t op,
                                               moon_kv_key_t key, uint64_t cookie);

/* Batching: the puts and gets issued between begin and the matching end
 * (nesting counts; every moon_store_client_handle call is one batch too, so
 * what a reply sets off is batched) leave at the outermost end as one vector
 * message per shard and verb (PUT_RESERVEV, PUT_COMMITV, GETV, RELEASEV;
 * store_msgs.h) instead of one message per key and replica. Nothing else
 * changes: each operation still ends with its own on_done. end may call
 * on_done, for the operations whose messages could not be sent (a shard just
 * lost): call it where the owner can take on_done. */
MOON_API void moon_store_client_batch_begin(moon_store_client_t *client);
MOON_API void moon_store_client_batch_end(moon_store_client_t *client);

/* Feeds a message the owning actor received. Returns 1 when it was the
 * client's (a store reply, a DIST_BULK_DONE it started, a DOWN of one of its
 * shards): consumed, on_done possibly called; 0 otherwise (the actor's own). */
MOON_API int moon_store_client_handle(moon_store_client_t *client, const moon_msg_hdr_t *msg);

/* Ends with MOON_ERR_TIMED_OUT every operation issued more than timeout_ns
 * before now_ns (moon_now) that has no bulk transfer in flight: a shard that
 * never answers (a lost message, a hung shard that is still alive). Replies
 * that come later are recognised and undone (a late grant is revoked or
 * released; a late commit may still store the block). Call it from a timer of
 * the owning actor. Returns how many operations ended (on_done was called for
 * each). */
MOON_API uint32_t moon_store_client_expire(moon_store_client_t *client, uint64_t now_ns,
                                           uint64_t timeout_ns);

/* Logs (WARN) every operation in flight with the state of each replica:
 * for diagnosing an operation that never ends. */
MOON_API void moon_store_client_log_pending(const moon_store_client_t *client);

/* Operations in flight. */
MOON_API uint32_t moon_store_client_pending(const moon_store_client_t *client);
/* Live shards as this client sees them. */
MOON_API uint32_t moon_store_client_n_live(const moon_store_client_t *client);

/* Designated initialisers routing the reply types to one handler in an actor's
 * ops table: .on_msg = { MOON_STORE_CLIENT_ON_MSG(my_on_store), ... } (route
 * MOON_MSG_SYS_DOWN there too, and pass on what handle() returns 0 for: the
 * actor's own timers arrive there too, as the client's renewal timer is one). */
#define MOON_STORE_CLIENT_ON_MSG(_fn)                                                              \
    [MOON_MSG_STORE_QUERY_REPLY] = (_fn), [MOON_MSG_STORE_PUT_GRANT] = (_fn),                      \
    [MOON_MSG_STORE_GET_GRANT] = (_fn), [MOON_MSG_STORE_REPLY] = (_fn),                            \
    [MOON_MSG_DIST_BULK_DONE] = (_fn), [MOON_MSG_SYS_TIMER] = (_fn),                               \
    [MOON_MSG_STORE_PUT_GRANTV] = (_fn), [MOON_MSG_STORE_GET_GRANTV] = (_fn),                      \
    [MOON_MSG_STORE_REPLYV] = (_fn)

#endif /* MOON_ACTORS_STORE_CLIENT_H */
