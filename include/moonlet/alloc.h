/* moonlet/alloc.h - the heap functions every Moonlet module allocates through,
 * so tests can fail the N-th allocation and walk error paths (SQLite
 * faultsim). Thread-safe. Outside tests they are plain malloc/calloc/free. */
#ifndef MOONLET_ALLOC_H
#define MOONLET_ALLOC_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

MOON_EXTERN_C_BEGIN

MOON_API void *moon_malloc(size_t bytes);
MOON_API void *moon_calloc(size_t n, size_t bytes);
MOON_API void *moon_realloc(void *ptr, size_t bytes);
MOON_API void *moon_aligned_alloc(size_t alignment, size_t bytes); /* free with moon_free */
MOON_API char *moon_strdup(const char *s);
MOON_API void  moon_free(void *ptr);
/* Arrays that grow on use (metadata of a modeled capacity that a run may
 * touch only a little of, so memory follows use): moon_grow_cap is the next
 * capacity for at least need elements, doubling from cap (at least 64), never
 * past limit (need <= limit). moon_realloc_zero grows *ptr from old_n to new_n
 * elements of elem_bytes, zeroing the new ones: MOON_ERR_NO_MEMORY leaves *ptr
 * and its contents as they were. */
MOON_API size_t        moon_grow_cap(size_t cap, size_t need, size_t limit);
MOON_API moon_status_t moon_realloc_zero(void **ptr, size_t old_n, size_t new_n, size_t elem_bytes);
/* moon_free of each of the n pointers (NULL ones are no-ops), for the
 * destructor of a struct that holds many buffers; MOON_FREE_ALL(a, b, ...)
 * lists them (C only: a compound literal). */
MOON_API void moon_free_array(void *const *ptrs, size_t n);
#define MOON_FREE_ALL(...)                                                                         \
    moon_free_array((void *const[]){__VA_ARGS__},                                                  \
                    sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))

/* Fault injection: the n-th moon_* allocation from now (1 = the next) and every
 * later one return NULL until moon_fault_reset(); n = 0 disarms. Counted across
 * threads. moon_fault_count() tells how many allocations happened since arming. */
MOON_API void moon_fault_fail_after(uint64_t n);
/* The same for the calling thread's allocations only (a runtime's other
 * threads, its progress thread say, go on allocating). */
MOON_API void     moon_fault_fail_after_here(uint64_t n);
MOON_API void     moon_fault_reset(void);
MOON_API uint64_t moon_fault_count(void);

MOON_EXTERN_C_END

#endif /* MOONLET_ALLOC_H */
