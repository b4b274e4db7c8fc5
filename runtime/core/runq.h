/* runtime/core/runq.h - a worker's run queue: bounded FIFO ring of actors, one
 * producer (the owning worker) and many consumers (the owner and thieves).
 * Push is a plain store plus a release store of `tail`; pop is one CAS on
 * `head`. Full: the caller falls back to the shared inject queue. */
#ifndef MOON_RUNTIME_RUNQ_H
#define MOON_RUNTIME_RUNQ_H

#include "moonlet/defs.h"

#include <stdatomic.h>

#define RUNQ_SIZE 4096 /* power of two */

typedef struct {
    alignas(MOON_CACHE_LINE) _Atomic uint32_t head; /* consumers */
    alignas(MOON_CACHE_LINE) _Atomic uint32_t tail; /* owner */
    _Atomic(void *) slots[RUNQ_SIZE];
} moon_runq_t;

static inline void moon_runq_init(moon_runq_t *q)
{
    atomic_store(&q->head, 0);
    atomic_store(&q->tail, 0);
}

/* Owner only. Returns 0 when full. */
static inline int moon_runq_push(moon_runq_t *q, void *item)
{
    uint32_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
    /* acquire: pairs with the CAS in pop, so a slot is reused only after it was read. */
    uint32_t h = atomic_load_explicit(&q->head, memory_order_acquire);

    if (t - h >= RUNQ_SIZE) {
        return 0;
    }
    atomic_store_explicit(&q->slots[t & (RUNQ_SIZE - 1)], item, memory_order_relaxed);
    /* release: publishes the slot; pairs with the acquire load of tail in pop. */
    atomic_store_explicit(&q->tail, t + 1, memory_order_release);
    return 1;
}

/* Owner or thief. NULL when empty. */
static inline void *moon_runq_pop(moon_runq_t *q)
{
    uint32_t h = atomic_load_explicit(&q->head, memory_order_acquire);

    for (;;) {
        uint32_t t = atomic_load_explicit(&q->tail, memory_order_acquire);
        void    *item;

        if (h == t) {
            return NULL;
        }
        item = atomic_load_explicit(&q->slots[h & (RUNQ_SIZE - 1)], memory_order_relaxed);
        /* acq_rel: claims the slot; a failed CAS reloads h and retries. The
         * owner can overwrite the slot only after head moved past it, which
         * makes this CAS fail. */
        if (atomic_compare_exchange_weak_explicit(&q->head, &h, h + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            return item;
        }
    }
}

static inline uint32_t moon_runq_size(moon_runq_t *q)
{
    return atomic_load_explicit(&q->tail, memory_order_relaxed) -
           atomic_load_explicit(&q->head, memory_order_relaxed);
}

#endif /* MOON_RUNTIME_RUNQ_H */
