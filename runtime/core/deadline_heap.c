/* runtime/core/deadline_heap.c - the deadline heap (deadline_heap.h). */
#include "deadline_heap.h"

#include "moonlet/alloc.h"

static int before(const moon_deadline_item_t *a, const moon_deadline_item_t *b)
{
    return a->deadline_ns < b->deadline_ns ||
           (a->deadline_ns == b->deadline_ns && a->order < b->order);
}

moon_status_t moon_deadline_push(moon_deadline_heap_t *h, uint64_t deadline_ns, uint64_t payload)
{
    const moon_grow_table_t table[] = {MOON_GROW_TABLE(h->items)};
    moon_deadline_item_t    item    = {deadline_ns, h->pushes, payload};
    uint32_t                i;

    if (h->n == UINT32_MAX ||
        moon_grow_tables(table, 1, (size_t)h->n + 1, UINT32_MAX, &h->cap) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    h->pushes++;
    i = h->n++;
    while (i > 0 && before(&item, &h->items[(i - 1) / 2])) {
        h->items[i] = h->items[(i - 1) / 2];
        i           = (i - 1) / 2;
    }
    h->items[i] = item;
    return MOON_OK;
}

moon_deadline_item_t moon_deadline_pop(moon_deadline_heap_t *h)
{
    moon_deadline_item_t top  = h->items[0];
    moon_deadline_item_t last = h->items[--h->n];
    uint32_t             i    = 0;

    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n) {
            break;
        }
        if (c + 1 < h->n && before(&h->items[c + 1], &h->items[c])) {
            c++;
        }
        if (!before(&h->items[c], &last)) {
            break;
        }
        h->items[i] = h->items[c];
        i           = c;
    }
    if (h->n > 0) {
        h->items[i] = last;
    }
    return top;
}

void moon_deadline_heap_fini(moon_deadline_heap_t *h)
{
    moon_free(h->items);
    *h = (moon_deadline_heap_t){0};
}
