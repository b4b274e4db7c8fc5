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

#include <string.h>

MOON_EXTERN_C_BEGIN

typedef struct moon_htab moon_htab_t;

/* 1 if key equals the key of the stored element elem; arg: the create's. */
typedef int (*moon_htab_eq_fn)(const void *key, const void *elem, void *arg);

/* What a table holds; borrowed by moon_htab_create and read until destroy
 * (usually a static const). arg is the create's arg, given back to each call. */
typedef struct {
    size_t elem_bytes; /* bytes per element, 1..MOON_HTAB_MAX_ELEM_BYTES */
    size_t key_bytes;  /* the key is the element's first key_bytes, unless key_eq is set */
    /* Optional: the hash of a key. NULL: moon_hash_bytes(key, key_bytes). */
    uint64_t (*hash)(const void *key, void *arg);
    /* Optional: 1 if key equals the key of the stored element elem (for an
     * index whose keys live elsewhere). NULL: memcmp of key_bytes. */
    moon_htab_eq_fn key_eq;
    /* Optional: releases what an element owns when the table drops it
     * (remove, clear, destroy). NULL: the table frees nothing. */
    void (*elem_free)(void *elem, void *arg);
} moon_htab_type_t;

/* The struct is here only for moon_htab_find_with's inline probe: use the
 * functions. */
struct moon_htab {
    /* private: */
    const moon_htab_type_t *type;
    void                   *arg;
    uint8_t                *slots;    /* (mask + 1) * stride: a u32 tag, then the element */
    size_t                  stride;   /* bytes per slot */
    size_t                  elem_off; /* the element's offset in its slot */
    size_t                  mask;
    size_t                  n;     /* elements stored */
    size_t                  max_n; /* FIXED: the capacity; else 2/3 of the slots */
    unsigned                flags;
};

#define MOON_HTAB_TAG_USED 0x80000000u /* a slot's tag: this bit and the hash's low 31 */
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

/* moon_htab_find_hashed inline, comparing with eq (the type's key_eq, or
 * NULL: its memcmp): for a hot path whose hash and comparison are known at
 * the call site, so the probe and both inline there. Same result. */
static inline void *moon_htab_find_with(const moon_htab_t *htab, const void *key, uint64_t hash,
                                        moon_htab_eq_fn eq)
{
    uint32_t tag = (uint32_t)hash | MOON_HTAB_TAG_USED;

    /* load < 1: the probe ends at an empty slot */
    for (size_t pos = tag & htab->mask;; pos = (pos + 1) & htab->mask) {
        uint8_t *slot = htab->slots + pos * htab->stride;
        uint32_t t;

        memcpy(&t, slot, sizeof(t));
        if (t == 0) {
            return NULL;
        }
        if (t == tag &&
            (eq != NULL ? eq(key, slot + htab->elem_off, htab->arg)
                        : memcmp(key, slot + htab->elem_off, htab->type->key_bytes) == 0)) {
            return slot + htab->elem_off;
        }
    }
}

/* Copies elem (elem_bytes) in under key; *elem_p (optional) gets the stored
 * copy. MOON_ERR_EXISTS: key is there already (*elem_p: that element);
 * MOON_ERR_NO_RESOURCE: a FIXED table is full; MOON_ERR_NO_MEMORY: growing
 * failed. On error the table is unchanged. */
MOON_API moon_status_t moon_htab_insert(moon_htab_t *htab, const void *key, const void *elem,
                                        void **elem_p);
MOON_API moon_status_t moon_htab_insert_hashed(moon_htab_t *htab, const void *key, uint64_t hash,
                                               const void *elem, void **elem_p);

/* Makes room for n elements in all, so inserts up to n allocate nothing.
 * MOON_ERR_NO_RESOURCE: a FIXED table made for fewer, or n past the largest
 * table; MOON_ERR_NO_MEMORY: growing failed (the elements are unchanged). */
MOON_API moon_status_t moon_htab_reserve(moon_htab_t *htab, size_t n);

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
