/* moonlet/weights_msgs.h - the weight-sync protocol (ids 16..31 of the
 * component range): a push of new weights from the broadcaster to every
 * prefill and decode instance of a serving cluster.
 *
 * One push, version V (weights_bcast.c, weights_recv.c):
 *   client --PUSH--> broadcaster: reads the checkpoint once, checks it, cuts
 *     it into chunks with an XXH3 each;
 *   broadcaster --OFFER (chunk hashes)--> every receiver (one per instance):
 *     it opens a staging copy (a registered region) and answers
 *   receiver --HAVE (hashes of the chunks it holds, its staging region)-->;
 *   broadcaster --PLAN (chunks that travel, the predecessor's region, the
 *     next receiver)--> every receiver: the receivers form a chain; a chunk
 *     no receiver holds travels down it (CHUNK k: "k is in my region", the
 *     next one gets it one-sided, checks its XXH3 and passes CHUNK on at
 *     once), the others are copied from the weights each receiver holds;
 *   receiver --STAGED--> broadcaster: every checksum right, the GGUF parsed
 *     from memory, same architecture, shapes and tokenizer (or why not);
 *   broadcaster --COMMIT 1--> receivers --INSTALL--> their instance, which
 *     builds an engine for V beside the old one --INSTALLED--> broadcaster;
 *   broadcaster --FLIP--> conductor: new requests are stamped V (PREFILL's
 *     weight_version) and run on V everywhere; requests in flight finish on
 *     the version they started with; when the last one ends the conductor
 *     sends RETIRE (the old version) to every instance, which frees it.
 *   Any failure before FLIP: COMMIT 0 (abort) everywhere, the instances drop
 *   V, the cluster serves the old version, and PUSH_REPLY says why. */
#ifndef MOON_ACTORS_WEIGHTS_MSGS_H
#define MOON_ACTORS_WEIGHTS_MSGS_H

#include "moonlet/msg.h"

/* PUSH flags */
#define MOON_WEIGHTS_F_FULL 0x1u         /* send every chunk (no delta) */
#define MOON_WEIGHTS_F_TEST_CORRUPT 0x2u /* test hook: one chunk is damaged after hashing */
/* test hook: the last receiver of the chain kills its own rank (SIGKILL,
 * as kill -9 would) once it holds its first chunk (test_weights_kill) */
#define MOON_WEIGHTS_F_TEST_KILL_LAST 0x4u

/* client -> broadcaster. version 0: the serving one + 1. The checkpoint is
 * the file at path (on the broadcaster's rank), or, when src is not empty,
 * the src_bytes at the start of the region src describes (a trainer's
 * image, weights_image.h), got one-sided by the broadcaster. A trainer's
 * image also names itself (image, not 0) and its generation gen; dirty
 * holds (offset, length) pairs of the bytes changed since its generation
 * base. A broadcaster that holds generation base of that image gets only
 * those bytes; any other gets the whole image. */
#define MOON_WEIGHTS_PUSH_FIELDS(F, T)                                                             \
    F(T, u64, req)                                                                                 \
    F(T, u64, version)                                                                             \
    F(T, u32, flags)                                                                               \
    F(T, str, path)                                                                                \
    F(T, u64, src_bytes)                                                                           \
    F(T, bytes, src) F(T, u64, image) F(T, u64, base) F(T, u64, gen) F(T, u64s, dirty)
/* broadcaster -> client: the push's outcome and figures (bytes per link;
 * read_bytes: what the broadcaster read of the checkpoint). */
#define MOON_WEIGHTS_PUSH_REPLY_FIELDS(F, T)                                                       \
    F(T, u64, req)                                                                                 \
    F(T, i32, status)                                                                              \
    F(T, u64, version)                                                                             \
    F(T, u64, old_version)                                                                         \
    F(T, u64, total_bytes)                                                                         \
    F(T, u64, moved_bytes)                                                                         \
    F(T, u64, skipped_bytes)                                                                       \
    F(T, u32, n_chunks)                                                                            \
    F(T, u32, n_moved)                                                                             \
    F(T, u32, n_instances)                                                                         \
    F(T, f64, stage_s) F(T, f64, switch_s) F(T, str, message) F(T, u64, read_bytes)
/* client -> broadcaster: the state. */
#define MOON_WEIGHTS_STATE_FIELDS(F, T) F(T, u64, req)
/* phase: 0 idle, 1 offering, 2 streaming, 3 installing, 4 switching,
 * 5 fetching (the trainer's image), 6 reading (the checkpoint file).
 * inst: 3 u64 per instance: role, index, version it serves new requests on.
 * n_ok: pushes that went through; recent: 2 u64 per push of the last
 * MOON_WEIGHTS_RECENT of them, oldest first: stage and switch times (ns). */
#define MOON_WEIGHTS_STATE_REPLY_FIELDS(F, T)                                                      \
    F(T, u64, req)                                                                                 \
    F(T, u64, version)                                                                             \
    F(T, u32, phase)                                                                               \
    F(T, u64, push_version)                                                                        \
    F(T, u32, n_staged)                                                                            \
    F(T, u32, n_pushes)                                                                            \
    F(T, u32, n_failed) F(T, u64s, inst) F(T, str, message) F(T, u32, n_ok) F(T, u64s, recent)
#define MOON_WEIGHTS_RECENT 16u
/* receiver -> broadcaster at start. */
#define MOON_WEIGHTS_HELLO_FIELDS(F, T) F(T, u32, role) F(T, u32, instance) F(T, u64, version)
/* broadcaster -> receiver. hashes: XXH3 64 of every chunk of the new image;
 * flags: the push's MOON_WEIGHTS_F_*. */
#define MOON_WEIGHTS_OFFER_FIELDS(F, T)                                                            \
    F(T, u64, push)                                                                                \
    F(T, u64, version)                                                                             \
    F(T, u64, total_bytes) F(T, u64, chunk_bytes) F(T, u64s, hashes) F(T, u32, flags)
/* receiver -> broadcaster: hashes of its image cut the same way; desc: its
 * staging region. */
#define MOON_WEIGHTS_HAVE_FIELDS(F, T)                                                             \
    F(T, u64, push)                                                                                \
    F(T, i32, status) F(T, u64, version) F(T, u64s, hashes) F(T, bytes, desc) F(T, str, message)
/* broadcaster -> receiver: travel: indices of the chunks that travel (in
 * order); src: the predecessor's region; next: where CHUNK goes on. */
#define MOON_WEIGHTS_PLAN_FIELDS(F, T)                                                             \
    F(T, u64, push) F(T, addr, next) F(T, u32s, travel) F(T, bytes, src)
/* predecessor -> receiver: chunk is in the predecessor's region. */
#define MOON_WEIGHTS_CHUNK_FIELDS(F, T) F(T, u64, push) F(T, u32, chunk)
/* receiver -> broadcaster. */
#define MOON_WEIGHTS_STAGED_FIELDS(F, T)                                                           \
    F(T, u64, push)                                                                                \
    F(T, i32, status) F(T, u64, got_bytes) F(T, u64, copied_bytes) F(T, str, message)
/* broadcaster -> receiver: 1 install, 0 abort (before or after INSTALL). */
#define MOON_WEIGHTS_COMMIT_FIELDS(F, T) F(T, u64, push) F(T, u32, commit)
/* receiver -> its instance (same rank): the staged weights, handed over
 * (model: moon_model_t *, region: moon_dist_region_t *, now the instance's). */
#define MOON_WEIGHTS_INSTALL_FIELDS(F, T)                                                          \
    F(T, u64, version) F(T, u64, model) F(T, u64, region) F(T, addr, ack_to) F(T, addr, recycle_to)
/* instance -> broadcaster. */
#define MOON_WEIGHTS_INSTALLED_FIELDS(F, T) F(T, u64, version) F(T, i32, status) F(T, str, message)
/* broadcaster -> conductor: stamp new requests with version. */
#define MOON_WEIGHTS_FLIP_FIELDS(F, T) F(T, u64, version)
/* conductor -> broadcaster. */
#define MOON_WEIGHTS_FLIPPED_FIELDS(F, T) F(T, u64, version) F(T, u64, old_version)
/* conductor (or a receiver, rolling back) -> instance: free version
 * (region 0). instance -> its receiver (same rank): version was freed, and
 * region (moon_dist_region_t *) goes back to stage the next push in (its
 * pages are faulted in, the next ranks have it mapped already). */
#define MOON_WEIGHTS_RETIRE_FIELDS(F, T) F(T, u64, version) F(T, u64, region)

#define MOON_WEIGHTS_MSGS(X)                                                                       \
    X(MOON_MSG_WEIGHTS_PUSH, moon_weights_push_t, MOON_WEIGHTS_PUSH_FIELDS)                        \
    X(MOON_MSG_WEIGHTS_PUSH_REPLY, moon_weights_push_reply_t, MOON_WEIGHTS_PUSH_REPLY_FIELDS)      \
    X(MOON_MSG_WEIGHTS_STATE, moon_weights_state_t, MOON_WEIGHTS_STATE_FIELDS)                     \
    X(MOON_MSG_WEIGHTS_STATE_REPLY, moon_weights_state_reply_t, MOON_WEIGHTS_STATE_REPLY_FIELDS)   \
    X(MOON_MSG_WEIGHTS_HELLO, moon_weights_hello_t, MOON_WEIGHTS_HELLO_FIELDS)                     \
    X(MOON_MSG_WEIGHTS_OFFER, moon_weights_offer_t, MOON_WEIGHTS_OFFER_FIELDS)                     \
    X(MOON_MSG_WEIGHTS_HAVE, moon_weights_have_t, MOON_WEIGHTS_HAVE_FIELDS)                        \
    X(MOON_MSG_WEIGHTS_PLAN, moon_weights_plan_t, MOON_WEIGHTS_PLAN_FIELDS)                        \
    X(MOON_MSG_WEIGHTS_CHUNK, moon_weights_chunk_t, MOON_WEIGHTS_CHUNK_FIELDS)                     \
    X(MOON_MSG_WEIGHTS_STAGED, moon_weights_staged_t, MOON_WEIGHTS_STAGED_FIELDS)                  \
    X(MOON_MSG_WEIGHTS_COMMIT, moon_weights_commit_t, MOON_WEIGHTS_COMMIT_FIELDS)                  \
    X(MOON_MSG_WEIGHTS_INSTALL, moon_weights_install_t, MOON_WEIGHTS_INSTALL_FIELDS)               \
    X(MOON_MSG_WEIGHTS_INSTALLED, moon_weights_installed_t, MOON_WEIGHTS_INSTALLED_FIELDS)         \
    X(MOON_MSG_WEIGHTS_FLIP, moon_weights_flip_t, MOON_WEIGHTS_FLIP_FIELDS)                        \
    X(MOON_MSG_WEIGHTS_FLIPPED, moon_weights_flipped_t, MOON_WEIGHTS_FLIPPED_FIELDS)               \
    X(MOON_MSG_WEIGHTS_RETIRE, moon_weights_retire_t, MOON_WEIGHTS_RETIRE_FIELDS)

MOON_MSG_DECLARE_IN(MOON_WEIGHTS_MSGS, WEIGHTS, MOON_MSG_WEIGHTS_END)

MOON_API extern const moon_msg_desc_t moon_weights_msg_descs[];

/* Registers the weight-sync messages (idempotent; every rank, before any
 * traffic). */
MOON_API moon_status_t moon_weights_msgs_register(void);

#endif /* MOON_ACTORS_WEIGHTS_MSGS_H */
