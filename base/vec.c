/* base/vec.c - see moonlet/vec.h. */
#include "moonlet/vec.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

#define MIN_CAP 4

void moon_vec_init(moon_vec_t *v, size_t elem_bytes)
{
    MOON_ASSERT(elem_bytes > 0);
    v->data       = NULL;
    v->n          = 0;
    v->cap        = 0;
    v->elem_bytes = elem_bytes;
}

void moon_vec_fini(moon_vec_t *v)
{
    moon_free(v->data);
    v->data = NULL;
    v->n = v->cap = 0;
}

moon_status_t moon_vec_reserve(moon_vec_t *v, size_t n_elems)
{
    size_t cap = v->cap ? v->cap : MIN_CAP;
    void  *data;

    if (n_elems <= v->cap) {
        return MOON_OK;
    }
    while (cap < n_elems) {
        if (cap > SIZE_MAX / 2) {
            return MOON_ERR_NO_MEMORY;
        }
        cap *= 2;
    }
    if (cap > SIZE_MAX / v->elem_bytes) {
        return MOON_ERR_NO_MEMORY;
    }
    data = moon_realloc(v->data, cap * v->elem_bytes);
    if (data == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    v->data = data;
    v->cap  = cap;
    return MOON_OK;
}

moon_status_t moon_vec_append(moon_vec_t *v, const void *elems, size_t n_elems)
{
    moon_status_t status;

    if (n_elems > SIZE_MAX - v->n) {
        return MOON_ERR_NO_MEMORY;
    }
    status = moon_vec_reserve(v, v->n + n_elems);
    if (status != MOON_OK) {
        return status;
    }
    if (n_elems > 0) {
        memcpy(moon_vec_at(v, v->n), elems, n_elems * v->elem_bytes);
    }
    v->n += n_elems;
    return MOON_OK;
}

moon_status_t moon_vec_push(moon_vec_t *v, const void *elem)
{
    return moon_vec_append(v, elem, 1);
}

void moon_vec_remove_swap(moon_vec_t *v, size_t i)
{
    MOON_ASSERT(i < v->n);
    v->n--;
    if (i != v->n) {
        memcpy(moon_vec_at(v, i), moon_vec_at(v, v->n), v->elem_bytes);
    }
}

void moon_vec_pop(moon_vec_t *v)
{
    MOON_ASSERT(v->n > 0);
    v->n--;
}

void moon_vec_truncate(moon_vec_t *v, size_t n_elems)
{
    MOON_ASSERT(n_elems <= v->n);
    v->n = n_elems;
}

void moon_vec_clear(moon_vec_t *v)
{
    v->n = 0;
}
