/* moonlet/store_msgs.h - the KV store protocol between store clients and store
 * shard actors (ids 32..63 of the component range). Keys are 128-bit: carried
 * as (lo, hi) pairs of u64 (a u64s span of 2n entries for a batch). Every
 * request carries a caller-chosen `req` echoed in its reply; the reply goes to
 * the request's sender. Bulk bytes never travel here: grants carry the shard
 * arena's region descriptor (`desc`, see moon_dist_region_desc) and the slot
 * offset, and the client moves the bytes with moon_dist_put / moon_dist_get.
 *
 *   put:  PUT_RESERVE -> PUT_GRANT {token, offset, desc} -> (RDMA put)
 *         -> PUT_COMMIT {token, checksum} -> REPLY(op PUT_COMMIT)
 *         | PUT_REVOKE {token} (reply only when req != 0)
 *   get:  GET -> GET_GRANT {lease, offset, n_bytes, checksum, lease_timeout_ns, desc}
 *         -> (RDMA get) -> RELEASE {lease} (reply only when req != 0: a shard whose
 *         leases expire by time, lease_timeout_ns > 0, confirms the lease was
 *         still held, so the bytes read were still the block's)
 *   query: QUERY {op EXISTS|PREFIX, keys} -> QUERY_REPLY {present | n_hit}
 *   vectors: PUT_RESERVEV, PUT_COMMITV, GETV and RELEASEV carry a span of the
 *         singular request's fields, one entry per key (each with its own
 *         `req`), and are answered by one PUT_GRANTV, REPLYV or GET_GRANTV
 *         whose entries are in the request's order and mean what the
 *         singular answer's would (one arena descriptor for all; a RELEASEV
 *         is answered only when some req != 0, and then for those entries).
 *   REMOVE, PIN {unpin}, RENEW {reservation token | lease}, SUBSCRIBE, STATS.
 *   Shards publish EVENTS {stored / evicted / removed ...} to subscribers;
 *   a SUBSCRIBE is answered with a snapshot (EVENTS with snapshot != 0) of
 *   every block held, and live events carry sequence numbers.
 *
 * Single rank without a distributed runtime: desc is empty and `base` holds the
 * arena's address in this process (the client copies with memcpy). */
#ifndef MOON_ACTORS_STORE_MSGS_H
#define MOON_ACTORS_STORE_MSGS_H

#include "moonlet/msg.h"

/* QUERY ops */
#define MOON_STORE_QUERY_EXISTS 0u /* reply: present (one byte per key) */
#define MOON_STORE_QUERY_PREFIX 1u /* reply: n_hit (leading keys readable here) */
/* RENEW what */
#define MOON_STORE_RENEW_RESERVATION 0u
#define MOON_STORE_RENEW_LEASE 1u
/* Values of events' kind: moon_kv_event_kind_t (STORED 1, EVICTED 2, REMOVED 3,
 * SPILLED 4, PROMOTED 5). Each event is 5 u64s: kind, key lo, key hi, model id,
 * weight version. */
#define MOON_STORE_EVENT_U64S 5u
/* Most keys one QUERY may carry. */
#define MOON_STORE_QUERY_MAX_KEYS 4096u

#define MOON_STORE_TAG_FIELDS(F, T) F(T, u64, model_id) F(T, u64, weight_version)
#define MOON_STORE_KEY_FIELDS(F, T) F(T, u64, key_lo) F(T, u64, key_hi)

#define MOON_STORE_QUERY_FIELDS(F, T)                                                              \
    F(T, u64, req) F(T, u32, op) MOON_STORE_TAG_FIELDS(F, T) F(T, u64s, keys)
#define MOON_STORE_QUERY_REPLY_FIELDS(F, T)                                                        \
    F(T, u64, req)                                                                                 \
    F(T, i32, status) F(T, u32, shard_id) F(T, u32, op) F(T, u32, n_hit) F(T, bytes, present)
#define MOON_STORE_PUT_RESERVE_FIELDS(F, T)                                                        \
    F(T, u64, req) MOON_STORE_TAG_FIELDS(F, T) MOON_STORE_KEY_FIELDS(F, T) F(T, u64, n_bytes)
#define MOON_STORE_PUT_GRANT_FIELDS(F, T)                                                          \
    F(T, u64, req)                                                                                 \
    F(T, i32, status)                                                                              \
    F(T, u32, shard_id)                                                                            \
    F(T, u64, token) F(T, u64, offset) F(T, u64, max_bytes) F(T, u64, base) F(T, bytes, desc)
#define MOON_STORE_PUT_COMMIT_FIELDS(F, T)                                                         \
    F(T, u64, req) F(T, u64, token) F(T, u64, n_bytes) F(T, u64, checksum)
#define MOON_STORE_PUT_REVOKE_FIELDS(F, T) F(T, u64, req) F(T, u64, token)
#define MOON_STORE_GET_FIELDS(F, T)                                                                \
    F(T, u64, req) MOON_STORE_TAG_FIELDS(F, T) MOON_STORE_KEY_FIELDS(F, T)
#define MOON_STORE_GET_GRANT_FIELDS(F, T)                                                          \
    F(T, u64, req)                                                                                 \
    F(T, i32, status)                                                                              \
    F(T, u32, shard_id)                                                                            \
    F(T, u64, lease)                                                                               \
    F(T, u64, offset)                                                                              \
    F(T, u64, n_bytes) F(T, u64, checksum) F(T, u64, base) F(T, u64, lease_timeout_ns)             \
        F(T, bytes, desc)
#define MOON_STORE_RELEASE_FIELDS(F, T) F(T, u64, req) F(T, u64, lease)
#define MOON_STORE_REMOVE_FIELDS(F, T) F(T, u64, req) MOON_STORE_KEY_FIELDS(F, T)
#define MOON_STORE_PIN_FIELDS(F, T) F(T, u64, req) MOON_STORE_KEY_FIELDS(F, T) F(T, u32, unpin)
#define MOON_STORE_RENEW_FIELDS(F, T) F(T, u64, req) F(T, u32, what) F(T, u64, id)
#define MOON_STORE_SUBSCRIBE_FIELDS(F, T) F(T, u64, req) F(T, u32, unsubscribe)
/* Generic reply: op is the request's message id. */
#define MOON_STORE_REPLY_FIELDS(F, T)                                                              \
    F(T, u64, req) F(T, i32, status) F(T, u32, shard_id) F(T, u32, op)
/* Vectors (n entries; every span has n elements, keys 2n): see above. */
#define MOON_STORE_PUT_RESERVEV_FIELDS(F, T)                                                       \
    MOON_STORE_TAG_FIELDS(F, T) F(T, u64s, reqs) F(T, u64s, keys) F(T, u64s, n_bytes)
#define MOON_STORE_PUT_GRANTV_FIELDS(F, T)                                                         \
    F(T, u32, shard_id)                                                                            \
    F(T, u64, base)                                                                                \
    F(T, u64s, reqs)                                                                               \
    F(T, u32s, status) F(T, u64s, token) F(T, u64s, offset) F(T, u64s, max_bytes) F(T, bytes, desc)
#define MOON_STORE_PUT_COMMITV_FIELDS(F, T)                                                        \
    F(T, u64s, reqs) F(T, u64s, token) F(T, u64s, n_bytes) F(T, u64s, checksum)
#define MOON_STORE_GETV_FIELDS(F, T) MOON_STORE_TAG_FIELDS(F, T) F(T, u64s, reqs) F(T, u64s, keys)
#define MOON_STORE_GET_GRANTV_FIELDS(F, T)                                                         \
    F(T, u32, shard_id)                                                                            \
    F(T, u64, base)                                                                                \
    F(T, u64, lease_timeout_ns)                                                                    \
    F(T, u64s, reqs)                                                                               \
    F(T, u32s, status)                                                                             \
    F(T, u64s, lease) F(T, u64s, offset) F(T, u64s, n_bytes) F(T, u64s, checksum)                  \
        F(T, bytes, desc)
#define MOON_STORE_RELEASEV_FIELDS(F, T) F(T, u64s, reqs) F(T, u64s, lease)
/* status: i32 values */
#define MOON_STORE_REPLYV_FIELDS(F, T)                                                             \
    F(T, u32, shard_id) F(T, u32, op) F(T, u64s, reqs) F(T, u32s, status)
/* Most entries of one vector message. */
#define MOON_STORE_VEC_MAX 1024u

/* seq: live events (snapshot 0): the shard's number of the first event, so a
 * subscriber sees a lost message as a gap; snapshot 1 (the first part of a
 * subscription's snapshot: forget what was known of this shard) or 2 (its
 * later parts): every readable block as a STORED event, seq the number the
 * next live event will carry. */
#define MOON_STORE_EVENTS_FIELDS(F, T)                                                             \
    F(T, u32, shard_id) F(T, u64, seq) F(T, u32, snapshot) F(T, u64s, ev)
/* conductor -> shard: a weight version retired: remove every block of
 * model_id below version (no reply). */
#define MOON_STORE_RETIRE_FIELDS(F, T) F(T, u64, model_id) F(T, u64, version)
#define MOON_STORE_STATS_FIELDS(F, T) F(T, u64, req)
#define MOON_STORE_STATS_REPLY_FIELDS(F, T)                                                        \
    F(T, u64, req)                                                                                 \
    F(T, u32, shard_id)                                                                            \
    F(T, u32, n_slots)                                                                             \
    F(T, u32, used_slots)                                                                          \
    F(T, u32, n_reserved)                                                                          \
    F(T, u32, n_committed) F(T, u32, n_pinned) F(T, u32, n_leases) F(T, u32, n_subscribers)        \
        F(T, u64, n_puts) F(T, u64, n_gets) F(T, u64, n_get_misses) F(T, u64, n_evicted)           \
            F(T, u64, n_expired_reservations) F(T, u64, n_expired_leases) F(T, u64, n_dropped)     \
                F(T, u64, n_corrupt) F(T, u64, n_tag_mismatch) F(T, u64, n_renewals)

#define MOON_STORE_MSGS(X)                                                                         \
    X(MOON_MSG_STORE_QUERY, moon_store_query_t, MOON_STORE_QUERY_FIELDS)                           \
    X(MOON_MSG_STORE_QUERY_REPLY, moon_store_query_reply_t, MOON_STORE_QUERY_REPLY_FIELDS)         \
    X(MOON_MSG_STORE_PUT_RESERVE, moon_store_put_reserve_t, MOON_STORE_PUT_RESERVE_FIELDS)         \
    X(MOON_MSG_STORE_PUT_GRANT, moon_store_put_grant_t, MOON_STORE_PUT_GRANT_FIELDS)               \
    X(MOON_MSG_STORE_PUT_COMMIT, moon_store_put_commit_t, MOON_STORE_PUT_COMMIT_FIELDS)            \
    X(MOON_MSG_STORE_PUT_REVOKE, moon_store_put_revoke_t, MOON_STORE_PUT_REVOKE_FIELDS)            \
    X(MOON_MSG_STORE_GET, moon_store_get_t, MOON_STORE_GET_FIELDS)                                 \
    X(MOON_MSG_STORE_GET_GRANT, moon_store_get_grant_t, MOON_STORE_GET_GRANT_FIELDS)               \
    X(MOON_MSG_STORE_RELEASE, moon_store_release_t, MOON_STORE_RELEASE_FIELDS)                     \
    X(MOON_MSG_STORE_REMOVE, moon_store_remove_t, MOON_STORE_REMOVE_FIELDS)                        \
    X(MOON_MSG_STORE_PIN, moon_store_pin_t, MOON_STORE_PIN_FIELDS)                                 \
    X(MOON_MSG_STORE_RENEW, moon_store_renew_t, MOON_STORE_RENEW_FIELDS)                           \
    X(MOON_MSG_STORE_SUBSCRIBE, moon_store_subscribe_t, MOON_STORE_SUBSCRIBE_FIELDS)               \
    X(MOON_MSG_STORE_REPLY, moon_store_reply_t, MOON_STORE_REPLY_FIELDS)                           \
    X(MOON_MSG_STORE_EVENTS, moon_store_events_t, MOON_STORE_EVENTS_FIELDS)                        \
    X(MOON_MSG_STORE_STATS, moon_store_stats_t, MOON_STORE_STATS_FIELDS)                           \
    X(MOON_MSG_STORE_STATS_REPLY, moon_store_stats_reply_t, MOON_STORE_STATS_REPLY_FIELDS)         \
    X(MOON_MSG_STORE_PUT_RESERVEV, moon_store_put_reservev_t, MOON_STORE_PUT_RESERVEV_FIELDS)      \
    X(MOON_MSG_STORE_PUT_GRANTV, moon_store_put_grantv_t, MOON_STORE_PUT_GRANTV_FIELDS)            \
    X(MOON_MSG_STORE_PUT_COMMITV, moon_store_put_commitv_t, MOON_STORE_PUT_COMMITV_FIELDS)         \
    X(MOON_MSG_STORE_GETV, moon_store_getv_t, MOON_STORE_GETV_FIELDS)                              \
    X(MOON_MSG_STORE_GET_GRANTV, moon_store_get_grantv_t, MOON_STORE_GET_GRANTV_FIELDS)            \
    X(MOON_MSG_STORE_RELEASEV, moon_store_releasev_t, MOON_STORE_RELEASEV_FIELDS)                  \
    X(MOON_MSG_STORE_REPLYV, moon_store_replyv_t, MOON_STORE_REPLYV_FIELDS)                        \
    X(MOON_MSG_STORE_RETIRE, moon_store_retire_t, MOON_STORE_RETIRE_FIELDS)

MOON_MSG_DECLARE_IN(MOON_STORE_MSGS, STORE, MOON_MSG_STORE_END)
_Static_assert(MOON_MSG_STORE_END <= 64, "store ids are 32..63");

MOON_API extern const moon_msg_desc_t moon_store_msg_descs[];

/* Registers the store messages (idempotent; every rank, before any store
 * traffic: the shard and client create functions call it). */
MOON_API moon_status_t moon_store_msgs_register(void);

#endif /* MOON_ACTORS_STORE_MSGS_H */
