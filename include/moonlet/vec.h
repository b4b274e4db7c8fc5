/* moonlet/vec.h - a growable array of fixed-size elements (doubling). The
 * caller embeds the moon_vec_t (init/fini); the vector owns its storage, never
 * what the elements point to. One thread at a time. */
#ifndef MOONLET_VEC_H
#define MOONLET_VEC_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

MOON_EXTERN_C_BEGIN

typedef struct {
    /* private: read through the functions below */
    void  *data; /* (cap) elements */
    size_t n, cap;
    size_t elem_bytes;
} moon_vec_t;

/* An empty vector of elem_bytes-sized elements (> 0); allocates nothing. */
MOON_API void moon_vec_init(moon_vec_t *vec, size_t elem_bytes);
/* Frees the storage (not what elements point to); the vector is then empty
 * and may be used again. */
MOON_API void moon_vec_fini(moon_vec_t *vec);

/* Makes room for n_elems in all without another allocation.
 * MOON_ERR_NO_MEMORY (or a size overflow): unchanged. */
MOON_API moon_status_t moon_vec_reserve(moon_vec_t *vec, size_t n_elems);
/* Appends n_elems elements copied from elems. MOON_ERR_NO_MEMORY: unchanged. */
MOON_API moon_status_t moon_vec_append(moon_vec_t *vec, const void *elems, size_t n_elems);
/* Appends one element copied from elem. MOON_ERR_NO_MEMORY: unchanged. */
MOON_API moon_status_t moon_vec_push(moon_vec_t *vec, const void *elem);
/* Removes element i by moving the last one into its place (order not kept). */
MOON_API void moon_vec_remove_swap(moon_vec_t *vec, size_t i);
/* Removes the last element (the vector must not be empty). */
MOON_API void moon_vec_pop(moon_vec_t *vec);
/* Keeps the first n_elems (<= len) elements; keeps the storage. */
MOON_API void moon_vec_truncate(moon_vec_t *vec, size_t n_elems);
/* Removes every element; keeps the storage. */
MOON_API void moon_vec_clear(moon_vec_t *vec);

static inline size_t moon_vec_len(const moon_vec_t *vec)
{
    return vec->n;
}

/* The elements, contiguous: valid until the next push, append or reserve. */
static inline void *moon_vec_data(const moon_vec_t *vec)
{
    return vec->data;
}

/* Element i (< len). */
static inline void *moon_vec_at(const moon_vec_t *vec, size_t i)
{
    return (char *)vec->data + i * vec->elem_bytes;
}

MOON_EXTERN_C_END

#endif /* MOONLET_VEC_H */
