/* base/htab.c - see moonlet/htab.h. A slot is a 32-bit tag (0: empty; else
 * bit 31 set and the low 31 bits of the hash) followed by the element; the
 * slot count is a power of two at most 2^31, so the home slot is tag & mask. */
#include "moonlet/htab.h"

#include "moonlet/alloc.h"
#include "moonlet/hash.h"
#include "moonlet/log.h"

#include <string.h>

#define TAG_USED MOON_HTAB_TAG_USED
#define MIN_SLOTS 8u
#define DEFAULT_CAP 8u

static inline uint32_t tag_of(uint64_t hash)
{
    return (uint32_t)hash | TAG_USED;
}

static inline uint8_t *slot_at(const moon_htab_t *h, size_t pos)
{
    return h->slots + pos * h->stride;
}

static inline uint32_t slot_tag(const moon_htab_t *h, size_t pos)
{
    uint32_t tag;

    memcpy(&tag, slot_at(h, pos), sizeof(tag));
    return tag;
}

static inline void slot_set_tag(moon_htab_t *h, size_t pos, uint32_t tag)
{
    memcpy(slot_at(h, pos), &tag, sizeof(tag));
}

/* The slot count holding n elements at load <= 2/3. */
static size_t slots_for(size_t n)
{
    size_t slots = MIN_SLOTS;

    while (slots < n + n / 2 + 1) {
        slots *= 2;
    }
    return slots;
}

static moon_status_t alloc_slots(moon_htab_t *h, size_t n_slots)
{
    uint8_t *slots = moon_calloc(n_slots, h->stride); /* zero: every tag empty */

    if (slots == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    h->slots = slots;
    h->mask  = n_slots - 1;
    return MOON_OK;
}

moon_status_t moon_htab_create(const moon_htab_type_t *type, void *arg, size_t capacity,
                               unsigned flags, moon_htab_t **htab_p)
{
    moon_htab_t  *h;
    moon_status_t status;
    size_t        align;

    if (type == NULL || htab_p == NULL || type->elem_bytes == 0 ||
        type->elem_bytes > MOON_HTAB_MAX_ELEM_BYTES ||
        (type->key_eq == NULL && (type->key_bytes == 0 || type->key_bytes > type->elem_bytes)) ||
        (type->hash == NULL && type->key_bytes == 0) || capacity > MOON_HTAB_MAX_CAPACITY) {
        MOON_ERROR("htab: invalid type or capacity %zu", capacity);
        return MOON_ERR_INVALID_PARAM;
    }
    h = moon_calloc(1, sizeof(*h));
    if (h == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    align       = type->elem_bytes >= 8 ? 8 : 4;
    h->type     = type;
    h->arg      = arg;
    h->flags    = flags;
    h->elem_off = align;
    h->stride   = align + (type->elem_bytes + align - 1) / align * align;
    if (capacity == 0) {
        capacity = DEFAULT_CAP;
    }
    status = alloc_slots(h, slots_for(capacity));
    if (status != MOON_OK) {
        moon_free(h);
        return status;
    }
    h->max_n = (flags & MOON_HTAB_FIXED) ? capacity : (h->mask + 1) * 2 / 3;
    *htab_p  = h;
    return MOON_OK;
}

void moon_htab_destroy(moon_htab_t *h)
{
    if (h == NULL) {
        return;
    }
    moon_htab_clear(h);
    moon_free(h->slots);
    moon_free(h);
}

uint64_t moon_htab_hash(const moon_htab_t *h, const void *key)
{
    return h->type->hash != NULL ? h->type->hash(key, h->arg)
                                 : moon_hash_bytes(key, h->type->key_bytes);
}

void *moon_htab_find_hashed(const moon_htab_t *h, const void *key, uint64_t hash)
{
    return moon_htab_find_with(h, key, hash, h->type->key_eq);
}

void *moon_htab_find(const moon_htab_t *h, const void *key)
{
    return moon_htab_find_hashed(h, key, moon_htab_hash(h, key));
}

/* Stores tag + elem in the first empty slot of the tag's run. */
static uint8_t *place(moon_htab_t *h, uint32_t tag, const void *elem)
{
    size_t pos = tag & h->mask;

    while (slot_tag(h, pos) != 0) {
        pos = (pos + 1) & h->mask;
    }
    slot_set_tag(h, pos, tag);
    memcpy(slot_at(h, pos) + h->elem_off, elem, h->type->elem_bytes);
    return slot_at(h, pos) + h->elem_off;
}

/* Doubles the slots, moving each element by its tag (no hashing). */
static MOON_NOINLINE moon_status_t grow(moon_htab_t *h)
{
    uint8_t      *old   = h->slots;
    size_t        n_old = h->mask + 1;
    moon_status_t status;

    if (n_old >= ((size_t)TAG_USED)) {
        return MOON_ERR_NO_RESOURCE; /* the tags hold 31 bits of home */
    }
    status = alloc_slots(h, n_old * 2);
    if (status != MOON_OK) {
        h->slots = old;
        h->mask  = n_old - 1;
        return status;
    }
    for (size_t i = 0; i < n_old; i++) {
        uint32_t tag;

        memcpy(&tag, old + i * h->stride, sizeof(tag));
        if (tag != 0) {
            place(h, tag, old + i * h->stride + h->elem_off);
        }
    }
    moon_free(old);
    h->max_n = (h->mask + 1) * 2 / 3;
    return MOON_OK;
}

moon_status_t moon_htab_reserve(moon_htab_t *h, size_t n)
{
    moon_status_t status = MOON_OK;

    if (h->flags & MOON_HTAB_FIXED) {
        return n <= h->max_n ? MOON_OK : MOON_ERR_NO_RESOURCE;
    }
    while (status == MOON_OK && h->max_n < n) {
        status = grow(h);
    }
    return status;
}

moon_status_t moon_htab_insert_hashed(moon_htab_t *h, const void *key, uint64_t hash,
                                      const void *elem, void **elem_p)
{
    void         *found = moon_htab_find_hashed(h, key, hash);
    moon_status_t status;
    uint8_t      *stored;

    if (found != NULL) {
        if (elem_p != NULL) {
            *elem_p = found;
        }
        return MOON_ERR_EXISTS;
    }
    if (h->n >= h->max_n) {
        if (h->flags & MOON_HTAB_FIXED) {
            return MOON_ERR_NO_RESOURCE;
        }
        status = grow(h);
        if (status != MOON_OK) {
            return status;
        }
    }
    stored = place(h, tag_of(hash), elem);
    h->n++;
    if (elem_p != NULL) {
        *elem_p = stored;
    }
    return MOON_OK;
}

moon_status_t moon_htab_insert(moon_htab_t *h, const void *key, const void *elem, void **elem_p)
{
    return moon_htab_insert_hashed(h, key, moon_htab_hash(h, key), elem, elem_p);
}

void moon_htab_remove_at(moon_htab_t *h, void *elem)
{
    size_t hole = (size_t)((uint8_t *)elem - h->elem_off - h->slots) / h->stride;
    size_t j    = hole;

    MOON_ASSERT(hole <= h->mask && slot_tag(h, hole) != 0);
    if (h->type->elem_free != NULL) {
        h->type->elem_free(elem, h->arg);
    }
    /* Backward shift (Knuth 6.4 algorithm R): move later members of the run
     * into the hole unless their home lies cyclically in (hole, j]. */
    for (;;) {
        uint32_t t;
        size_t   home;

        j = (j + 1) & h->mask;
        t = slot_tag(h, j);
        if (t == 0) {
            break;
        }
        home = t & h->mask;
        if ((hole <= j) ? (home > hole && home <= j) : (home > hole || home <= j)) {
            continue;
        }
        memcpy(slot_at(h, hole), slot_at(h, j), h->stride);
        hole = j;
    }
    slot_set_tag(h, hole, 0);
    h->n--;
}

moon_status_t moon_htab_remove(moon_htab_t *h, const void *key)
{
    void *elem = moon_htab_find(h, key);

    if (elem == NULL) {
        return MOON_ERR_NOT_FOUND;
    }
    moon_htab_remove_at(h, elem);
    return MOON_OK;
}

void moon_htab_clear(moon_htab_t *h)
{
    for (size_t pos = 0; pos <= h->mask; pos++) {
        if (slot_tag(h, pos) != 0 && h->type->elem_free != NULL) {
            h->type->elem_free(slot_at(h, pos) + h->elem_off, h->arg);
        }
        slot_set_tag(h, pos, 0);
    }
    h->n = 0;
}

size_t moon_htab_count(const moon_htab_t *h)
{
    return h->n;
}

void *moon_htab_next(const moon_htab_t *h, size_t *pos)
{
    for (; *pos <= h->mask; (*pos)++) {
        if (slot_tag(h, *pos) != 0) {
            return slot_at(h, (*pos)++) + h->elem_off;
        }
    }
    return NULL;
}

size_t moon_htab_longest_probe(const moon_htab_t *h)
{
    size_t n = h->mask + 1, longest = 0, run = 0, start = 0;

    /* start after an empty slot, so no run is cut at the wrap-around */
    while (start < n && slot_tag(h, start) != 0) {
        start++;
    }
    for (size_t i = 1; start < n && i <= n; i++) {
        if (slot_tag(h, (start + i) & h->mask) != 0) {
            longest = MOON_MAX(longest, ++run);
        } else {
            run = 0;
        }
    }
    return start < n ? longest : n; /* no empty slot: every probe may wrap */
}
