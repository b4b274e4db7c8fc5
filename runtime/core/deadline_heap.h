/* runtime/core/deadline_heap.h - a binary min-heap of (deadline, payload) items
 * in deadline order, ties in push order (a count the heap keeps), so a
 * deterministic run pops the same sequence every time. The timers and the
 * simulated network's messages in flight both wait in one. Not thread-safe:
 * its owner locks (timers) or runs single-threaded (the simulator). */
#ifndef MOON_RUNTIME_DEADLINE_HEAP_H
#define MOON_RUNTIME_DEADLINE_HEAP_H

#include "moonlet/status.h"

#include <stdint.h>

typedef struct {
    uint64_t deadline_ns;
    uint64_t order;   /* push count: breaks ties */
    uint64_t payload; /* the owner's: an id, or a pointer as uintptr_t */
} moon_deadline_item_t;

typedef struct {
    moon_deadline_item_t *items;
    uint32_t              n, cap;
    uint64_t              pushes;
} moon_deadline_heap_t;

/* Zero-initialised is empty. MOON_ERR_NO_MEMORY: the heap is unchanged. A
 * push right after a pop cannot fail (the room is there). */
moon_status_t moon_deadline_push(moon_deadline_heap_t *h, uint64_t deadline_ns, uint64_t payload);
/* The earliest item, or NULL when empty. */
static inline const moon_deadline_item_t *moon_deadline_top(const moon_deadline_heap_t *h)
{
    return h->n > 0 ? &h->items[0] : NULL;
}
/* Removes and returns the earliest item (h not empty). */
moon_deadline_item_t moon_deadline_pop(moon_deadline_heap_t *h);
void                 moon_deadline_heap_fini(moon_deadline_heap_t *h);

#endif /* MOON_RUNTIME_DEADLINE_HEAP_H */
