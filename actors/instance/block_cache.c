/* actors/instance/block_cache.c - per-instance prefix cache: key -> block in an
 * open-addressing table, LRU order as an intrusive doubly linked list over
 * an array of entries. The table and the array grow as entries are first
 * used (up to max_blocks): a simulated instance models a pool far larger
 * than its trace touches. */
#include "block_cache.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

#define NIL UINT32_MAX

typedef struct {
    moon_kv_key_t key;
    uint32_t      block;
    uint32_t      prev, next; /* LRU: head is the oldest */
} centry_t;

struct moon_block_cache {
    moon_kv_cache_t            *kv;
    moon_htab_t                *map;        /* key -> entry (uint32_t); the keys are the entries' */
    centry_t                   *e;          /* (cap): entries [0, n_touched) used at least once */
    uint32_t                   *free_stack; /* (cap) freed entries, the next to reuse on top */
    uint32_t                    n_stack, n_touched, cap, max, n;
    uint32_t                    head, tail;
    moon_block_cache_listener_t listen;
    void                       *listen_arg;
};

static uint64_t key_hash(const void *key, void *arg)
{
    moon_kv_key_t k;

    (void)arg;
    memcpy(&k, key, sizeof(k));
    return moon_kv_key_hash(k);
}

/* The table stores entry numbers (4 bytes a slot, not a key's 16 again). */
static int key_eq(const void *key, const void *elem, void *arg)
{
    const moon_block_cache_t *c = arg;
    moon_kv_key_t             k;
    uint32_t                  i;

    memcpy(&k, key, sizeof(k));
    memcpy(&i, elem, sizeof(i));
    return moon_kv_key_eq(c->e[i].key, k);
}

static const moon_htab_type_t slot_type = {
    .elem_bytes = sizeof(uint32_t),
    .hash       = key_hash,
    .key_eq     = key_eq,
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
    c->kv   = kv;
    c->max  = max_blocks;
    c->head = NIL;
    c->tail = NIL;
    /* grows by doubling; put keeps at most max entries in it */
    status = moon_htab_create(&slot_type, c, 0, 0, &c->map);
    if (status != MOON_OK) {
        moon_free(c);
        return status;
    }
    *cache_p = c;
    return MOON_OK;
}

/* Room in the arrays for one more never-used entry (n_touched < max). */
static moon_status_t grow(moon_block_cache_t *c)
{
    const moon_grow_table_t tables[] = {MOON_GROW_TABLE(c->e), MOON_GROW_TABLE(c->free_stack)};

    return moon_grow_tables(tables, 2, c->n_touched + 1, c->max, &c->cap);
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
    c->free_stack[c->n_stack++] = i; /* cannot overflow: cap >= n_touched */
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
    moon_free(c->free_stack);
    moon_free(c);
}

static uint32_t find(const moon_block_cache_t *c, moon_kv_key_t key)
{
    const uint32_t *i = moon_htab_find(c->map, &key);
    return i != NULL ? *i : NIL;
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

    if (k != NIL) {
        unlink_entry(c, k);
        push_newest(c, k);
        return;
    }
    if (c->n == c->max) {
        evict(c, c->head);
    }
    /* freed entries first, then unused ones in order (as a stack of all, 0 on top) */
    if (c->n_stack == 0 && grow(c) != MOON_OK) {
        return; /* no memory: not kept */
    }
    k           = c->n_stack > 0 ? c->free_stack[c->n_stack - 1] : c->n_touched;
    c->e[k].key = key; /* first: the table compares with it */
    if (moon_htab_insert(c->map, &key, &k, NULL) != MOON_OK) {
        return; /* no memory: not kept */
    }
    if (c->n_stack > 0) {
        c->n_stack--;
    } else {
        c->n_touched++;
    }
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
