/* runtime/msg_internal.h - the hidden envelope in front of every message: the
 * intrusive mailbox link, the address it was sent to, the consumer-assigned
 * mailbox position and the reference count. Private to runtime/. */
#ifndef MOON_RUNTIME_MSG_INTERNAL_H
#define MOON_RUNTIME_MSG_INTERNAL_H

#include "moonlet/msg.h"

#include <stdatomic.h>

typedef struct moon_msg_env {
    _Atomic(struct moon_msg_env *) next; /* mailbox link (producers write once) */
    moon_addr_t      dst;                /* address it was sent to (generation check) */
    uint32_t         mb_seq;             /* mailbox position; consumer-owned */
    _Atomic uint32_t refs;
    uint32_t         tail_used;          /* span bytes handed out, offset from msg start */
    uint8_t          size_class;         /* pool class, MSG_CLASS_BIG or MSG_CLASS_STUB */
    uint8_t          pad[3];
} moon_msg_env_t;
_Static_assert(sizeof(moon_msg_env_t) == 32, "envelope grew: small messages leave class 64");

#define MSG_CLASS_BIG  0xfe
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
 * message to its sender at once, instead of dropping it when it encodes. */
size_t moon_msg_checked_bound(const moon_msg_hdr_t *msg);

/* Registers the runtime's own message types (idempotent). */
moon_status_t moon_sys_msgs_register(void);

#endif /* MOON_RUNTIME_MSG_INTERNAL_H */
