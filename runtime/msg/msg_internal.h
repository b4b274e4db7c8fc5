/* runtime/msg/msg_internal.h - the hidden envelope in front of every message: the
 * intrusive mailbox link, the address it was sent to, the consumer-assigned
 * mailbox position and the reference count. Private to runtime/. */
#ifndef MOON_RUNTIME_MSG_INTERNAL_H
#define MOON_RUNTIME_MSG_INTERNAL_H

#include "moonlet/msg.h"

#include <stdatomic.h>

typedef struct moon_msg_env {
    _Atomic(struct moon_msg_env *) next;   /* mailbox link (producers write once) */
    moon_addr_t                    dst;    /* address it was sent to (generation check) */
    uint32_t                       mb_seq; /* mailbox position; consumer-owned */
    _Atomic uint32_t               refs;
    uint32_t                       tail_used;  /* span bytes handed out, offset from msg start */
    uint8_t                        size_class; /* pool class, MSG_CLASS_BIG or MSG_CLASS_STUB */
    uint8_t                        pad[3];
} moon_msg_env_t;
_Static_assert(sizeof(moon_msg_env_t) == 32, "envelope grew: small messages leave class 64");

#define MSG_CLASS_BIG 0xfe
#define MSG_CLASS_STUB 0xff /* a mailbox's embedded stub: never freed */

static inline moon_msg_env_t *moon_msg_env(const moon_msg_hdr_t *msg)
{
    return (moon_msg_env_t *)((char *)msg - sizeof(moon_msg_env_t));
}

static inline moon_msg_hdr_t *moon_env_msg(moon_msg_env_t *env)
{
    return (moon_msg_hdr_t *)((char *)env + sizeof(moon_msg_env_t));
}

static inline moon_addr_t moon_env_msg_dst(const moon_msg_hdr_t *msg)
{
    return moon_msg_env(msg)->dst;
}

/* A zeroed message of type d with exactly tail_bytes of span room (codec). */
void *moon_msg_new_for_decode(const moon_msg_desc_t *d, size_t tail_bytes);

/* moon_msg_encoded_bound of a message that encodes; 0 (logged) if its type
 * is not registered or a span lies outside it: a transport refuses such a
 * message to its sender at once, instead of dropping it when it encodes.
 * image_p, when not NULL: moon_msg_image_bytes, from the same walk. */
size_t moon_msg_checked_bound(const moon_msg_hdr_t *msg, size_t *image_p);

/* ---- images: messages between ranks of one host ----------------------------
 * Between processes of one host, built from the same schemas, a message can
 * travel as its image, its own bytes up to the end of its last span, instead
 * of msgpack: nothing to encode at the sender, one copy and a check at the
 * receiver. The image goes with its type's layout (a hash of the schema's
 * sizes, kinds and offsets): a receiver whose schema differs refuses it.
 * Nothing in an image is trusted: it must cover its struct, and every span
 * must lie inside it, an array aligned to its element, a str followed by
 * its NUL. An empty span decodes as msgpack leaves it (a str reads "").
 * Unlike msgpack's, an image's spans may overlap: a received message is
 * read-only to its handler (a const pointer), so that stays harmless. A
 * receiver takes images from any peer (it checks everything), whether or
 * not it sends them. */

/* The layout of a registered type (never 0), 0 for an unknown one. */
uint32_t moon_msg_layout(uint32_t type);
/* Bytes of msg's image, or 0 if a span of it is not as an image carries it
 * (then the message travels as msgpack). */
size_t moon_msg_image_bytes(const moon_msg_hdr_t *msg);
/* A new message from an image of layout `layout`; MOON_ERR_INVALID_PARAM if
 * it is not one of ours (see above), MOON_ERR_NO_MEMORY. */
moon_status_t moon_msg_image_decode(const void *buf, size_t len, uint32_t layout,
                                    moon_msg_hdr_t **msg_p);
/* An image's type, source and sequence number (its header), for an error
 * reply to a message that did not decode. */
moon_status_t moon_msg_image_peek(const void *buf, size_t len, uint32_t *type_p, moon_addr_t *src_p,
                                  uint64_t *seq_p);

/* Registers the runtime's own message types (idempotent). */
moon_status_t moon_sys_msgs_register(void);

#endif /* MOON_RUNTIME_MSG_INTERNAL_H */
