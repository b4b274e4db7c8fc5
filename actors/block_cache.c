/* actors/block_cache.c - per-instance prefix cache: key -> block in an
 * open-addressing table, LRU order as an intrusive doubly linked list over
 * a fixed array of entries. */
#include "block_cache.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#define NIL UINT32_MAX

typedef struct {
    moon_kv_key_t key;
    uint32_t      block;
    uint32_t      prev, next; /* LRU: head is the oldest */
} centry_t;

typedef struct {
    moon_kv_key_t key;
    uint32_t      entry;
} slot_t;

struct moon_block_cache {
    moon_kv_cache_t            *kv;
    moon_htab_t                *map; /* key -> entry index */
    centry_t                   *e;   /* (max) */
    uint32_t                   *free_list;
    uint32_t                    n_free, max, n;
    uint32_t                    head, tail;
    moon_block_cache_listener_t listen;
    void                       *listen_arg;
};

static uint64_t key_hash(const void *key, void *arg)
{
    (void)arg;
    return moon_kv_key_hash(*(const moon_kv_key_t *)key);
}

static const moon_htab_type_t slot_type = {
    .elem_bytes = sizeof(slot_t),
    .key_bytes  = sizeof(moon_kv_key_t),
    .hash       = key_hash,
};

moon_status_t moon_block_cache_create(moon_kv_cache_t *kv, uint32_t max_blocks,
                                      moon_block_cache_t **cache_p)
{
    moon_block_cache_t *c;
    moon_status_t       status;

    if (kv == NULL || max_blocks == 0 || cache_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    c = moon_calloc(1, sizeof(*c));
    if (c == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    c->kv        = kv;
    c->max       = max_blocks;
    c->head      = NIL;
    c->tail      = NIL;
    c->e         = moon_calloc(max_blocks, sizeof(*c->e));
    c->free_list = moon_calloc(max_blocks, sizeof(*c->free_list));
    status       = c->e && c->free_list
                       ? moon_htab_create(&slot_type, NULL, max_blocks, MOON_HTAB_FIXED, &c->map)
                       : MOON_ERR_NO_MEMORY;
    if (status != MOON_OK) {
        moon_free(c->e);
        moon_free(c->free_list);
        moon_free(c);
        return status;
    }
    for (uint32_t i = 0; i < max_blocks; i++) {
        c->free_list[c->n_free++] = max_blocks - 1 - i;
    }
    *cache_p = c;
    return MOON_OK;
}

static void unlink_entry(moon_block_cache_t *c, uint32_t i)
{
    centry_t *e = &c->e[i];

    if (e->prev != NIL) {
        c->e[e->prev].next = e->next;
    } else {
        c->head = e->next;
    }
    if (e->next != NIL) {
        c->e[e->next].prev = e->prev;
    } else {
        c->tail = e->prev;
    }
}

static void push_newest(moon_block_cache_t *c, uint32_t i)
{
    c->e[i].prev = c->tail;
    c->e[i].next = NIL;
    if (c->tail != NIL) {
        c->e[c->tail].next = i;
    } else {
        c->head = i;
    }
    c->tail = i;
}

static void evict(moon_block_cache_t *c, uint32_t i)
{
    if (c->listen != NULL) {
        c->listen(c->listen_arg, 0, c->e[i].key);
    }
    unlink_entry(c, i);
    moon_htab_remove(c->map, &c->e[i].key);
    moon_kv_block_unref(c->kv, c->e[i].block);
    c->free_list[c->n_free++] = i;
    c->n--;
}

void moon_block_cache_destroy(moon_block_cache_t *c)
{
    if (c == NULL) {
        return;
    }
    c->listen = NULL; /* going away is not an eviction anyone must hear of */
    while (c->head != NIL) {
        evict(c, c->head);
    }
    moon_htab_destroy(c->map);
    moon_free(c->e);
    moon_free(c->free_list);
    moon_free(c);
}

static uint32_t find(const moon_block_cache_t *c, moon_kv_key_t key)
{
    const slot_t *s = moon_htab_find(c->map, &key);
    return s != NULL ? s->entry : NIL;
}

uint32_t moon_block_cache_prefix(const moon_block_cache_t *c, const moon_kv_key_t *keys, uint32_t n)
{
    uint32_t i = 0;

    while (i < n && find(c, keys[i]) != NIL) {
        i++;
    }
    return i;
}

uint32_t moon_block_cache_take(moon_block_cache_t *c, const moon_kv_key_t *keys, uint32_t n,
                               uint32_t seq)
{
    uint32_t i = 0;

    for (; i < n; i++) {
        uint32_t k = find(c, keys[i]);
        if (k == NIL || moon_kv_seq_append_block(c->kv, seq, c->e[k].block) != MOON_OK) {
            break;
        }
        unlink_entry(c, k);
        push_newest(c, k);
    }
    return i;
}

void moon_block_cache_put(moon_block_cache_t *c, moon_kv_key_t key, uint32_t block)
{
    uint32_t k = find(c, key);
    slot_t   s;

    if (k != NIL) {
        unlink_entry(c, k);
        push_newest(c, k);
        return;
    }
    if (c->n_free == 0) {
        evict(c, c->head);
    }
    k = c->free_list[--c->n_free];
    s = (slot_t){key, k};
    if (moon_htab_insert(c->map, &key, &s, NULL) != MOON_OK) {
        c->free_list[c->n_free++] = k; /* full: not kept */
        return;
    }
    c->e[k].key   = key;
    c->e[k].block = block;
    moon_kv_block_ref(c->kv, block);
    push_newest(c, k);
    c->n++;
    if (c->listen != NULL) {
        c->listen(c->listen_arg, 1, key);
    }
}

void moon_block_cache_listen(moon_block_cache_t *c, moon_block_cache_listener_t fn, void *arg)
{
    c->listen     = fn;
    c->listen_arg = arg;
}

void moon_block_cache_foreach(const moon_block_cache_t *c, moon_block_cache_listener_t fn,
                              void *arg)
{
    for (uint32_t i = c->head; i != NIL; i = c->e[i].next) {
        fn(arg, 1, c->e[i].key);
    }
}

uint32_t moon_block_cache_make_room(moon_block_cache_t *c, uint32_t want)
{
    uint32_t i = c->head;

    while (moon_kv_n_free_blocks(c->kv) < want && i != NIL) {
        uint32_t next = c->e[i].next;
        if (moon_kv_block_refcount(c->kv, c->e[i].block) == 1) {
            evict(c, i); /* only the cache held it: the pool gets it back */
        }
        i = next;
    }
    return moon_kv_n_free_blocks(c->kv);
}

uint32_t moon_block_cache_count(const moon_block_cache_t *c)
{
    return c->n;
}

uint32_t moon_block_cache_idle(const moon_block_cache_t *c)
{
    uint32_t n = 0;

    for (uint32_t i = c->head; i != NIL; i = c->e[i].next) {
        n += moon_kv_block_refcount(c->kv, c->e[i].block) == 1;
    }
    return n;
}
