/* runtime/core/mailbox.h - Pony-style intrusive MPSC mailbox. Many producers (any
 * thread), one consumer (the thread running the actor's turn).
 *
 * Push is one atomic exchange. The low bit of `head` means "empty and not
 * scheduled": the push that swaps out a marked head returns 1 and must
 * schedule the actor; the consumer that finds no message sets the mark with
 * one CAS (moon_mailbox_mark_empty) and fails if a push raced in. So every
 * actor is in at most one run queue, without a lock.
 *
 * The consumer keeps the last message it popped as the list's tail (a stub),
 * so a popped message is released only when the next one is popped; the
 * runtime holds one reference on it for that. Depth is counted by the
 * consumer: it numbers messages as it walks the linked list ahead of the tail
 * (each message numbered once), so producers pay nothing for it. */
#ifndef MOON_RUNTIME_MAILBOX_H
#define MOON_RUNTIME_MAILBOX_H

#include "msg_internal.h"

typedef struct {
    /* producers */
    alignas(MOON_CACHE_LINE) _Atomic(uintptr_t) head;
    /* consumer only */
    alignas(MOON_CACHE_LINE) moon_msg_env_t *tail;
    moon_msg_env_t *scan;     /* furthest message numbered so far */
    uint32_t        tail_seq; /* number of the tail */
    uint32_t        scan_seq;
    moon_msg_env_t  stub; /* initial tail; never freed */
} moon_mailbox_t;

#define MAILBOX_EMPTY_BIT ((uintptr_t)1)

/* Starts empty and unscheduled. */
static inline void moon_mailbox_init(moon_mailbox_t *mb)
{
    atomic_store_explicit(&mb->stub.next, NULL, memory_order_relaxed);
    mb->stub.size_class = MSG_CLASS_STUB;
    mb->stub.mb_seq     = 0;
    mb->tail            = &mb->stub;
    mb->scan            = &mb->stub;
    mb->tail_seq        = 0;
    mb->scan_seq        = 0;
    atomic_store_explicit(&mb->head, (uintptr_t)&mb->stub | MAILBOX_EMPTY_BIT,
                          memory_order_relaxed);
}

/* Appends env; returns 1 when the mailbox was empty and unscheduled: the
 * caller must then schedule the actor. */
static inline int moon_mailbox_push(moon_mailbox_t *mb, moon_msg_env_t *env)
{
    uintptr_t       prev;
    moon_msg_env_t *prev_env;

    atomic_store_explicit(&env->next, NULL, memory_order_relaxed);
    /* acq_rel: release publishes env's contents to the consumer that will read
     * it through prev->next; acquire orders us after the previous producer. */
    prev     = atomic_exchange_explicit(&mb->head, (uintptr_t)env, memory_order_acq_rel);
    prev_env = (moon_msg_env_t *)(prev & ~MAILBOX_EMPTY_BIT);
    /* release: pairs with the acquire load of tail->next in moon_mailbox_pop(). */
    atomic_store_explicit(&prev_env->next, env, memory_order_release);
    return (int)(prev & MAILBOX_EMPTY_BIT);
}

/* Consumer: next message or NULL (empty, or a push not yet linked). The
 * previous tail loses the runtime's reference. */
static inline moon_msg_env_t *moon_mailbox_pop(moon_mailbox_t *mb)
{
    moon_msg_env_t *tail = mb->tail;
    /* acquire: pairs with the release store of prev->next in moon_mailbox_push(). */
    moon_msg_env_t *next = atomic_load_explicit(&tail->next, memory_order_acquire);

    if (next == NULL) {
        return NULL;
    }
    mb->tail = next;
    mb->tail_seq++;
    if ((int32_t)(mb->scan_seq - mb->tail_seq) < 0) { /* the scan fell behind */
        mb->scan     = next;
        mb->scan_seq = mb->tail_seq;
    }
    moon_msg_release(moon_env_msg(tail));
    return next;
}

/* Consumer: numbers up to `budget` linked messages beyond the scan point and
 * returns the depth known so far (a lower bound of the true depth). */
static inline uint32_t moon_mailbox_depth(moon_mailbox_t *mb, uint32_t budget)
{
    moon_msg_env_t *scan = mb->scan;

    for (uint32_t i = 0; i < budget; i++) {
        moon_msg_env_t *next = atomic_load_explicit(&scan->next, memory_order_acquire);
        if (next == NULL) {
            break;
        }
        scan = next;
        mb->scan_seq++;
    }
    mb->scan = scan;
    return mb->scan_seq - mb->tail_seq;
}

/* Consumer, after pop returned NULL: marks the mailbox empty-and-unscheduled.
 * Returns 0 if a producer swapped head meanwhile (the actor stays scheduled). */
static inline int moon_mailbox_mark_empty(moon_mailbox_t *mb)
{
    uintptr_t expected = (uintptr_t)mb->tail;

    /* acq_rel: release makes this turn's writes visible to whoever schedules
     * the actor next (pairs with the acquire of the exchange in push). */
    return atomic_compare_exchange_strong_explicit(&mb->head, &expected,
                                                   expected | MAILBOX_EMPTY_BIT,
                                                   memory_order_acq_rel, memory_order_relaxed);
}

/* Any thread: 1 if the mailbox is empty and unscheduled (its actor idle).
 * seq_cst: see try_mute in actor.c. */
static inline int moon_mailbox_idle(moon_mailbox_t *mb)
{
    return (atomic_load(&mb->head) & MAILBOX_EMPTY_BIT) != 0;
}

/* Any thread: claims an empty-and-unscheduled mailbox as scheduled (as if a
 * push had found it empty), so nobody else schedules it. 0 if it is scheduled. */
static inline int moon_mailbox_claim(moon_mailbox_t *mb)
{
    uintptr_t h = atomic_load_explicit(&mb->head, memory_order_acquire);

    return (h & MAILBOX_EMPTY_BIT) != 0 &&
           atomic_compare_exchange_strong_explicit(&mb->head, &h, h & ~MAILBOX_EMPTY_BIT,
                                                   memory_order_acq_rel, memory_order_relaxed);
}

/* Consumer at teardown: releases every message still queued and the tail. */
static inline void moon_mailbox_drain(moon_mailbox_t *mb)
{
    while (moon_mailbox_pop(mb) != NULL) {
    }
    if (mb->tail != &mb->stub) {
        moon_msg_release(moon_env_msg(mb->tail));
        mb->tail = &mb->stub;
    }
}

#endif /* MOON_RUNTIME_MAILBOX_H */
