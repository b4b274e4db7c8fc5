/* runtime/dist/engine/ucx_rkeys.c - see ucx_rkeys.h. A short list searched linearly: a
 * process talks to a few regions per peer (an arena, a few buffers), and a
 * lookup happens once per transfer, not per slice. */
#define _GNU_SOURCE /* madvise, MADV_POPULATE_WRITE, mremap */
#include "ucx_rkeys.h"

#include "moonlet/alloc.h"
#include "moonlet/defs.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels say EINVAL */
#endif
#define POPULATE_CHUNK ((size_t)8 << 20) /* a cancel waits at most one chunk */
#define POPULATE_MAX 2                   /* populating threads at once */
/* Mappings at least this large are unmapped off the progress lock (see
 * retire); a smaller one costs less than starting the threads. */
#define UNMAP_OFF_LOCK_MIN ((size_t)16 << 20)

/* A background population, shared by its thread and its entry (refs 2). The
 * thread marks each chunk busy before it looks at `cancel` (both seq_cst):
 * either it sees the cancel, or the canceller sees it busy and waits. */
typedef struct populate {
    char       *addr;
    size_t      len;
    _Atomic int cancel, busy, refs;
} populate_t;

static _Atomic int n_populating;

struct ucx_rkey_ref {
    ucx_rkey_ref_t *next;
    uint32_t        peer;
    uint32_t        refs;
    int             cached; /* on the list; else destroyed at the last release */
    uint64_t        region_id;
    ucp_rkey_h      rkey;
    populate_t     *populate;
    char           *map; /* the peer's region mapped here (ucx_rkeys_set_mapping) */
    size_t          map_len;
    char           *keep; /* a second mapping of map's pages, unmapped after the key */
    size_t          keep_len;
    _Atomic int     released; /* retired, and ready to be destroyed under the lock */
    size_t          len;
    char            packed[];
};

struct ucx_rkeys {
    ucx_rkey_ref_t *head; /* most recently used first */
    uint32_t        n, cap;
    ucx_rkey_ref_t *doomed; /* out of the cache and unused: destroyed by ucx_rkeys_reap */
};

static void populate_put(populate_t *p)
{
    if (atomic_fetch_sub(&p->refs, 1) == 1) {
        moon_free(p);
    }
}

static void *populate_main(void *arg)
{
    populate_t *p = arg;

    for (size_t done = 0; done < p->len; done += POPULATE_CHUNK) {
        atomic_store(&p->busy, 1);
        if (atomic_load(&p->cancel)) {
            atomic_store(&p->busy, 0);
            break;
        }
        (void)madvise(p->addr + done, MOON_MIN(POPULATE_CHUNK, p->len - done), MADV_POPULATE_WRITE);
        atomic_store(&p->busy, 0);
    }
    atomic_fetch_sub(&n_populating, 1);
    populate_put(p);
    return NULL;
}

/* Stops the entry's population before its mapping goes. */
static void populate_cancel(populate_t *p)
{
    if (p == NULL) {
        return;
    }
    atomic_store(&p->cancel, 1);
    while (atomic_load(&p->busy)) {
        sched_yield(); /* at most one chunk */
    }
    populate_put(p);
}

static int start_detached(void *(*fn)(void *), void *arg)
{
    pthread_t      t;
    pthread_attr_t attr;
    int            ok;

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    ok = pthread_create(&t, &attr, fn, arg) == 0;
    pthread_attr_destroy(&attr);
    return ok;
}

void ucx_rkeys_populate(ucx_rkey_ref_t *ref, void *addr, size_t len)
{
    uintptr_t   start = (uintptr_t)addr & ~(uintptr_t)4095;
    uintptr_t   end   = ((uintptr_t)addr + len + 4095) & ~(uintptr_t)4095;
    populate_t *p;

    if (ref->populate != NULL) {
        return;
    }
    if (atomic_fetch_add(&n_populating, 1) >= POPULATE_MAX) {
        atomic_fetch_sub(&n_populating, 1);
        return; /* enough at work: these pages fault in */
    }
    p = moon_calloc(1, sizeof(*p));
    if (p == NULL) {
        atomic_fetch_sub(&n_populating, 1);
        return;
    }
    p->addr = (char *)start;
    p->len  = end - start;
    atomic_store(&p->refs, 2);
    if (!start_detached(populate_main, p)) {
        atomic_fetch_sub(&n_populating, 1);
        moon_free(p);
        return;
    }
    ref->populate = p;
}

ucx_rkeys_t *ucx_rkeys_create(uint32_t cap)
{
    ucx_rkeys_t *c = moon_calloc(1, sizeof(*c));

    if (c != NULL) {
        c->cap = cap;
    }
    return c;
}

typedef struct {
    char  *addr;
    size_t len;
} unmap_job_t;

static void *unmap_main(void *arg)
{
    unmap_job_t *j = arg;

    (void)munmap(j->addr, j->len);
    moon_free(j);
    return NULL;
}

/* Destroys the key (under the progress lock). Its mapping has no page tables
 * left and is not the last of its pages (see retire): the last, `keep`, goes
 * on a thread of its own, which frees the pages if nobody else maps them. */
static void entry_free(ucx_rkey_ref_t *e)
{
    populate_cancel(e->populate);
    ucp_rkey_destroy(e->rkey);
    if (e->keep != NULL) {
        unmap_job_t *j = moon_malloc(sizeof(*j));

        if (j != NULL) {
            *j = (unmap_job_t){e->keep, e->keep_len};
        }
        if (j == NULL || !start_detached(unmap_main, j)) {
            (void)munmap(e->keep, e->keep_len);
            moon_free(j);
        }
    }
    moon_free(e);
}

void ucx_rkeys_set_mapping(ucx_rkey_ref_t *ref, void *addr, size_t len)
{
    uintptr_t start = ((uintptr_t)addr + 4095) & ~(uintptr_t)4095; /* whole pages inside */
    uintptr_t end   = ((uintptr_t)addr + len) & ~(uintptr_t)4095;

    if (end > start) {
        ref->map     = (char *)start;
        ref->map_len = end - start;
    }
}

/* How much of [addr, addr + len) one mapping of this process covers from
 * addr (/proc/self/maps), 0 if none: a descriptor's length is the peer's
 * word, and what follows the mapping here may be memory of our own. */
static size_t mapped_extent(const char *addr, size_t len)
{
    FILE         *f = fopen("/proc/self/maps", "r");
    char          line[512];
    unsigned long lo, hi;
    size_t        extent = 0;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)addr >= lo &&
            (uintptr_t)addr < hi) {
            extent = MOON_MIN(len, (size_t)(hi - (uintptr_t)addr));
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return extent;
}

/* Readies a retired key's large mapping for a cheap destroy, off the lock and
 * without touching the data (its owner may be alive, even when declared
 * lost): mremap with old size 0 makes a second mapping of the same pages,
 * with no page tables, that outlives the key's (the kernel refuses it for a
 * private mapping, which is then left alone), and MADV_DONTNEED drops our
 * page tables of the first (shared memory keeps its pages). */
static void *release_main(void *arg)
{
    ucx_rkey_ref_t *e    = arg;
    size_t          len  = mapped_extent(e->map, e->map_len);
    void           *keep = len > 0 ? mremap(e->map, 0, len, MREMAP_MAYMOVE) : MAP_FAILED;

    if (keep != MAP_FAILED) {
        e->keep     = keep;
        e->keep_len = len;
        (void)madvise(e->map, len, MADV_DONTNEED);
    }
    atomic_store_explicit(&e->released, 1, memory_order_release);
    return NULL; /* e may be gone from here on */
}

/* An unused key out of the cache: to the doomed list, for ucx_rkeys_reap
 * once it is ready (at once where it maps little or nothing). */
static void retire(ucx_rkeys_t *c, ucx_rkey_ref_t *e)
{
    populate_cancel(e->populate); /* it must not touch the pages from here on */
    e->populate = NULL;
    e->next     = c->doomed;
    c->doomed   = e;
    if (e->map == NULL || e->map_len < UNMAP_OFF_LOCK_MIN || !start_detached(release_main, e)) {
        atomic_store_explicit(&e->released, 1, memory_order_release);
    }
}

/* Unlinks *pp; retires it unless a transfer still holds it. */
static void unlink_entry(ucx_rkeys_t *c, ucx_rkey_ref_t **pp)
{
    ucx_rkey_ref_t *e = *pp;

    *pp       = e->next;
    e->next   = NULL;
    e->cached = 0;
    c->n--;
    if (e->refs == 0) {
        retire(c, e);
    }
}

int ucx_rkeys_reap(ucx_rkeys_t *c)
{
    for (ucx_rkey_ref_t **pp = c != NULL ? &c->doomed : NULL; pp != NULL && *pp != NULL;
         pp                  = &(*pp)->next) {
        ucx_rkey_ref_t *e = *pp;

        if (atomic_load_explicit(&e->released, memory_order_acquire)) {
            *pp = e->next;
            entry_free(e);
            return 1;
        }
    }
    return 0;
}

int ucx_rkeys_reaping(const ucx_rkeys_t *c)
{
    for (const ucx_rkey_ref_t *e = c != NULL ? c->doomed : NULL; e != NULL; e = e->next) {
        if (atomic_load_explicit(&e->released, memory_order_acquire)) {
            return 1;
        }
    }
    return 0;
}

void ucx_rkeys_destroy(ucx_rkeys_t *c)
{
    if (c == NULL) {
        return;
    }
    while (c->head != NULL) {
        ucx_rkey_ref_t *e = c->head;
        c->head           = e->next;
        entry_free(e); /* in use or not: the worker goes next */
    }
    while (c->doomed != NULL) {
        if (!ucx_rkeys_reap(c)) {
            sched_yield(); /* a release thread is still giving pages back */
        }
    }
    moon_free(c);
}

/* Keeps at most cap entries where it can: drops the least recent unused one. */
static void trim(ucx_rkeys_t *c)
{
    ucx_rkey_ref_t **pp, **victim = NULL;

    if (c->n <= c->cap) {
        return;
    }
    for (pp = &c->head; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->refs == 0) {
            victim = pp; /* the last one seen is the least recent */
        }
    }
    if (victim != NULL) {
        unlink_entry(c, victim);
    }
}

ucs_status_t ucx_rkeys_acquire(ucx_rkeys_t *c, ucp_ep_h ep, uint32_t peer, uint64_t region_id,
                               const void *packed, size_t len, ucx_rkey_ref_t **ref_p, int *fresh_p)
{
    ucx_rkey_ref_t **pp, *e;
    ucs_status_t     s;

    *fresh_p = 0;
    for (pp = &c->head; (e = *pp) != NULL; pp = &e->next) {
        if (e->peer == peer && e->region_id == region_id && e->len == len &&
            memcmp(e->packed, packed, len) == 0) {
            *pp     = e->next; /* to the front */
            e->next = c->head;
            c->head = e;
            e->refs++;
            *ref_p = e;
            return UCS_OK;
        }
    }
    e = moon_calloc(1, sizeof(*e) + len);
    if (e == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    s = ucp_ep_rkey_unpack(ep, packed, &e->rkey);
    if (s != UCS_OK) {
        moon_free(e);
        return s;
    }
    e->peer      = peer;
    e->region_id = region_id;
    e->refs      = 1;
    e->cached    = 1;
    e->len       = len;
    memcpy(e->packed, packed, len);
    e->next = c->head;
    c->head = e;
    c->n++;
    trim(c);
    *ref_p   = e;
    *fresh_p = 1;
    return UCS_OK;
}

ucp_rkey_h ucx_rkeys_handle(const ucx_rkey_ref_t *ref)
{
    return ref->rkey;
}

void ucx_rkeys_release(ucx_rkeys_t *c, ucx_rkey_ref_t *ref)
{
    if (--ref->refs == 0) {
        if (!ref->cached) {
            retire(c, ref);
        } else {
            trim(c);
        }
    }
}

/* Drops the entries of peer (all its regions when all_regions). */
static int drop(ucx_rkeys_t *c, uint32_t peer, int all_regions, uint64_t region_id)
{
    ucx_rkey_ref_t **pp = c != NULL ? &c->head : NULL;
    int              n  = 0;

    while (pp != NULL && *pp != NULL) {
        if ((*pp)->peer == peer && (all_regions || (*pp)->region_id == region_id)) {
            unlink_entry(c, pp);
            n++;
        } else {
            pp = &(*pp)->next;
        }
    }
    return n;
}

void ucx_rkeys_drop_peer(ucx_rkeys_t *c, uint32_t peer)
{
    (void)drop(c, peer, 1, 0);
}

int ucx_rkeys_forget(ucx_rkeys_t *c, uint32_t peer, uint64_t region_id)
{
    return drop(c, peer, 0, region_id);
}
