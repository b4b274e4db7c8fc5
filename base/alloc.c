/* base/alloc.c - heap wrappers with fault injection (moonlet/alloc.h).
 * The disarmed fast path is one relaxed load. */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "moonlet/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static _Atomic uint64_t   fault_at;     /* 0: disarmed; else fail from this count on */
static _Atomic uint64_t   fault_count;  /* allocations since arming */
static _Atomic uintptr_t  fault_thread; /* 0: every thread; else the one armed (its tls_self) */
static _Thread_local char tls_self;     /* its address names the thread */

static int fault_hit(void)
{
    uint64_t  at = atomic_load_explicit(&fault_at, memory_order_relaxed);
    uintptr_t only;

    if (MOON_LIKELY(at == 0)) {
        return 0;
    }
    only = atomic_load_explicit(&fault_thread, memory_order_relaxed);
    if (only != 0 && only != (uintptr_t)&tls_self) {
        return 0;
    }
    return atomic_fetch_add_explicit(&fault_count, 1, memory_order_relaxed) + 1 >= at;
}

static void arm(uint64_t n, uintptr_t only)
{
    atomic_store(&fault_at, 0);
    atomic_store(&fault_count, 0);
    atomic_store(&fault_thread, only);
    atomic_store(&fault_at, n);
}

void moon_fault_fail_after(uint64_t n)
{
    arm(n, 0);
}

void moon_fault_fail_after_here(uint64_t n)
{
    arm(n, (uintptr_t)&tls_self);
}

void moon_fault_reset(void)
{
    atomic_store(&fault_at, 0);
}

uint64_t moon_fault_count(void)
{
    return atomic_load(&fault_count);
}

void *moon_malloc(size_t bytes)
{
    return fault_hit() ? NULL : malloc(bytes);
}

void *moon_calloc(size_t n, size_t bytes)
{
    return fault_hit() ? NULL : calloc(n, bytes);
}

void *moon_realloc(void *ptr, size_t bytes)
{
    return fault_hit() ? NULL : realloc(ptr, bytes);
}

void *moon_aligned_alloc(size_t alignment, size_t bytes)
{
    void *ptr = NULL;

    if (fault_hit() || posix_memalign(&ptr, alignment, bytes) != 0) {
        return NULL;
    }
    return ptr;
}

/* The mapping's length: whole pages, whole huge pages from MOON_PAGES_HUGE on. */
static size_t pages_len(size_t bytes)
{
    size_t unit = bytes >= MOON_PAGES_HUGE ? MOON_PAGES_HUGE : 4096;
    return (bytes + unit - 1) / unit * unit;
}

void *moon_pages_alloc(size_t bytes)
{
    size_t   len   = pages_len(bytes);
    size_t   extra = len >= MOON_PAGES_HUGE ? MOON_PAGES_HUGE : 0; /* room to align */
    uint8_t *p, *a;

    if (bytes == 0 || len < bytes || fault_hit()) {
        return NULL;
    }
    p = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    if (extra == 0) {
        return p;
    }
    /* keep the aligned len bytes, give back the head and the tail */
    a = (uint8_t *)(((uintptr_t)p + MOON_PAGES_HUGE - 1) & ~(uintptr_t)(MOON_PAGES_HUGE - 1));
    if (a > p) {
        munmap(p, (size_t)(a - p));
    }
    if (a + len < p + len + extra) {
        munmap(a + len, (size_t)(p + len + extra - (a + len)));
    }
#ifdef MADV_HUGEPAGE
    madvise(a, len, MADV_HUGEPAGE); /* a hint: refused, the pages stay small */
#endif
    return a;
}

void moon_pages_free(void *ptr, size_t bytes)
{
    if (ptr != NULL) {
        munmap(ptr, pages_len(bytes));
    }
}

char *moon_strdup(const char *s)
{
    size_t len  = strlen(s) + 1;
    char  *copy = moon_malloc(len);

    if (copy != NULL) {
        memcpy(copy, s, len);
    }
    return copy;
}

/* The next capacity for at least need elements: doubling from cap (at least
 * 64), never past limit (need <= limit). */
static size_t grow_cap(size_t cap, size_t need, size_t limit)
{
    size_t next = cap < 32 ? 64 : cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;

    return MOON_MIN(limit, MOON_MAX(need, next));
}

/* Grows *ptr from old_n to new_n elements, zeroing the new ones; on
 * MOON_ERR_NO_MEMORY *ptr and its contents are as they were. */
static moon_status_t realloc_zero(void **ptr, size_t old_n, size_t new_n, size_t elem_bytes)
{
    char *p;

    if (elem_bytes == 0 || new_n > SIZE_MAX / elem_bytes) {
        return MOON_ERR_NO_MEMORY;
    }
    p = moon_realloc(*ptr, new_n * elem_bytes);
    if (p == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    memset(p + old_n * elem_bytes, 0, (new_n - old_n) * elem_bytes);
    *ptr = p;
    return MOON_OK;
}

MOON_NOINLINE moon_status_t moon_grow_tables_slow(const moon_grow_table_t *tables, size_t n_tables,
                                                  size_t need, size_t limit, uint32_t *cap_p)
{
    size_t cap;

    if (need <= *cap_p || *cap_p >= limit) {
        return MOON_OK;
    }
    cap = grow_cap(*cap_p, MOON_MIN(need, limit), limit);
    for (size_t i = 0; i < n_tables; i++) {
        if (realloc_zero(tables[i].ptr, *cap_p, cap, tables[i].elem_bytes) != MOON_OK) {
            return MOON_ERR_NO_MEMORY; /* the ones grown are merely larger than *cap_p says */
        }
    }
    *cap_p = (uint32_t)cap;
    return MOON_OK;
}

void moon_free(void *ptr)
{
    free(ptr);
}

void moon_free_array(void *const *ptrs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        moon_free(ptrs[i]);
    }
}
