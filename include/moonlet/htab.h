/* moonlet/htab.h - open-addressing hash table of fixed-size elements: linear
 * probing, backward-shift deletion (no tombstones), load kept at or under 2/3.
 * Elements are copied in and stored in place; a slot also keeps 31 bits of the
 * element's hash, so a probe compares keys only on a hash match and deletion
 * and growth never hash again. Single-threaded: the owner's thread only (a
 * table shared across threads needs the caller's lock).
 *
 * Ownership (Redis dictType): the table frees its elements' resources only if
 * its type has elem_free; otherwise removing or destroying drops the bytes. */
#ifndef MOONLET_HTAB_H
#define MOONLET_HTAB_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

MOON_EXTERN_C_BEGIN

typedef struct moon_htab moon_htab_t; /* opaque */

/* What a table holds; borrowed by moon_htab_create and read until destroy
 * (usually a static const). arg is the create's arg, given back to each call. */
typedef struct {
    size_t elem_bytes; /* bytes per element, 1..MOON_HTAB_MAX_ELEM_BYTES */
    size_t key_bytes;  /* the key is the element's first key_bytes, unless key_eq is set */
    /* Optional: the hash of a key. NULL: moon_hash_bytes(key, key_bytes). */
    uint64_t (*hash)(const void *key, void *arg);
    /* Optional: 1 if key equals the key of the stored element elem (for an
     * index whose keys live elsewhere). NULL: memcmp of key_bytes. */
    int (*key_eq)(const void *key, const void *elem, void *arg);
    /* Optional: releases what an element owns when the table drops it
     * (remove, clear, destroy). NULL: the table frees nothing. */
    void (*elem_free)(void *elem, void *arg);
} moon_htab_type_t;

#define MOON_HTAB_MAX_ELEM_BYTES 4096
#define MOON_HTAB_MAX_CAPACITY (1ull << 30)

enum {
    /* Never grows: created for capacity elements (no allocation after create),
     * an insert beyond them returns MOON_ERR_NO_RESOURCE. */
    MOON_HTAB_FIXED = 1,
};

/* Creates a table sized for capacity elements (0: a small default), growing
 * by doubling past it unless flags has MOON_HTAB_FIXED. MOON_ERR_INVALID_PARAM:
 * bad type, capacity over MOON_HTAB_MAX_CAPACITY; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_htab_create(const moon_htab_type_t *type, void *arg, size_t capacity,
                                        unsigned flags, moon_htab_t **htab_p);
/* Drops every element (elem_free on each, if set) and frees the table. NULL: no-op. */
MOON_API void moon_htab_destroy(moon_htab_t *htab);

/* The hash the table uses for key (its type's hash or moon_hash_bytes): the
 * *_hashed calls take it, for a caller that looks a key up more than once. */
MOON_API uint64_t moon_htab_hash(const moon_htab_t *htab, const void *key);

/* The stored element whose key equals key, or NULL. The pointer stays valid
 * until the next insert or remove. */
MOON_API void *moon_htab_find(const moon_htab_t *htab, const void *key);
MOON_API void *moon_htab_find_hashed(const moon_htab_t *htab, const void *key, uint64_t hash);

/* Copies elem (elem_bytes) in under key; *elem_p (optional) gets the stored
 * copy. MOON_ERR_EXISTS: key is there already (*elem_p: that element);
 * MOON_ERR_NO_RESOURCE: a FIXED table is full; MOON_ERR_NO_MEMORY: growing
 * failed. On error the table is unchanged. */
MOON_API moon_status_t moon_htab_insert(moon_htab_t *htab, const void *key, const void *elem,
                                        void **elem_p);
MOON_API moon_status_t moon_htab_insert_hashed(moon_htab_t *htab, const void *key, uint64_t hash,
                                               const void *elem, void **elem_p);

/* Removes the element with key (elem_free on it, if set). MOON_ERR_NOT_FOUND: none. */
MOON_API moon_status_t moon_htab_remove(moon_htab_t *htab, const void *key);
/* Removes elem, a pointer from find, insert or next (elem_free on it, if set).
 * Other elements may move: pointers into the table are stale after it. */
MOON_API void moon_htab_remove_at(moon_htab_t *htab, void *elem);
/* Removes every element (elem_free on each, if set); keeps the storage. */
MOON_API void moon_htab_clear(moon_htab_t *htab);

MOON_API size_t moon_htab_count(const moon_htab_t *htab);
/* Iteration: *pos = 0 first; each call returns the next element (and moves
 * *pos past it), NULL at the end. Inserting or removing during a walk may
 * skip or repeat elements. */
MOON_API void *moon_htab_next(const moon_htab_t *htab, size_t *pos);
/* The longest run of occupied slots: what a miss may probe at worst. */
MOON_API size_t moon_htab_longest_probe(const moon_htab_t *htab);

MOON_EXTERN_C_END

#endif /* MOONLET_HTAB_H */
