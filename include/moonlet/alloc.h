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
/* Zero-filled anonymous pages that the kernel backs on first touch, so the
 * resident memory of a buffer sized for the worst case (a KV pool for every
 * context) follows the pages written, not the bytes reserved; no memset
 * needed. From MOON_PAGES_HUGE bytes on: aligned to it and hinted for
 * transparent huge pages (512x fewer faults, fewer TLB misses; residency
 * then grows 2 MiB at a time). Counted by fault injection. Free with
 * moon_pages_free and the same bytes. */
#define MOON_PAGES_HUGE ((size_t)2 << 20)
MOON_API void *moon_pages_alloc(size_t bytes);
MOON_API void  moon_pages_free(void *ptr, size_t bytes);
/* Tables of ids that grow on use (metadata of a modeled capacity that a run
 * may touch only a little of, so memory follows use). The tables share one
 * capacity: ids [0, cap) have storage in each. */
typedef struct {
    void **ptr;        /* the table: moon_grow_tables may move it */
    size_t elem_bytes; /* of one element */
} moon_grow_table_t;
/* The table entry for an array variable or field (C only: a compound literal). */
#define MOON_GROW_TABLE(_table) ((moon_grow_table_t){(void **)&(_table), sizeof(*(_table))})
/* Grows the n_tables tables of capacity *cap_p to hold at least need elements
 * (need past limit: limit), doubling (at least 64) but never past limit
 * (<= UINT32_MAX), the new elements zeroed, and sets *cap_p. Nothing to grow
 * (need <= *cap_p, or *cap_p == limit): MOON_OK at once, inline, since it
 * runs wherever an id is taken. MOON_ERR_NO_MEMORY: *cap_p and the first
 * *cap_p elements of every table are as they were (a table grown before the
 * failure is merely larger than *cap_p says). _slow is the growing part. */
MOON_API moon_status_t      moon_grow_tables_slow(const moon_grow_table_t *tables, size_t n_tables,
                                                  size_t need, size_t limit, uint32_t *cap_p);
static inline moon_status_t moon_grow_tables(const moon_grow_table_t *tables, size_t n_tables,
                                             size_t need, size_t limit, uint32_t *cap_p)
{
    if (need <= *cap_p || *cap_p >= limit) {
        return MOON_OK;
    }
    return moon_grow_tables_slow(tables, n_tables, need, limit, cap_p);
}
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
