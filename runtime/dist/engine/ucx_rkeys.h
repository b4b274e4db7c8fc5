/* runtime/dist/engine/ucx_rkeys.h - a cache of unpacked UCX remote keys for the UCX engine.
 *
 * Unpacking an rkey is not free: with shared-memory transports it attaches the
 * peer's segment (shmat/mmap), and every page of a fresh mapping faults on
 * first touch. A store serves thousands of transfers from one arena, so the
 * engine unpacks each region's key once and keeps it, bounded and least
 * recently used first out. A key is found by (peer, region id, packed bytes):
 * the packed bytes alone do not name one allocation (a posix segment freed and
 * allocated again at the same size packs to the same bytes), the owner's
 * region id does. Entries are counted references: an entry in use by a
 * transfer is never destroyed under it, except by ucx_rkeys_destroy.
 *
 * Forgetting is cheap for the progress thread. A key leaves the cache at once
 * and is destroyed later, one per ucx_rkeys_reap. Destroying a key unmaps the
 * peer's segment (page tables of every page touched here) and frees its pages
 * where this was its last mapping: hundreds of milliseconds for a GiB arena on
 * a loaded machine, all under the progress lock, and a peer deregistering
 * several arenas had held progress (and so heartbeats) long enough for a false
 * peer loss. So a large mapping is readied first by a helper thread: it drops
 * the page tables (MADV_DONTNEED: shared memory keeps its pages) and maps the
 * same pages a second time (mremap, old size 0); the key is destroyed after,
 * cheaply, and the second mapping is unmapped on a thread of its own, which
 * frees the pages if nobody else maps them. Nothing writes the memory: the
 * region's owner may be alive (a region evicted from the cache, a peer
 * declared lost by mistake), and its data stays as it was.
 *
 * Progress thread only, like the engine's worker. */
#ifndef MOON_RUNTIME_UCX_RKEYS_H
#define MOON_RUNTIME_UCX_RKEYS_H

#include <ucp/api/ucp.h>

#include <stddef.h>
#include <stdint.h>

typedef struct ucx_rkeys    ucx_rkeys_t;
typedef struct ucx_rkey_ref ucx_rkey_ref_t;

/* A cache that trims itself to cap entries when it can (entries in use stay);
 * NULL without memory. */
ucx_rkeys_t *ucx_rkeys_create(uint32_t cap);
/* The engine is closing: destroys every key, in use or not (their transfers
 * are abandoned; nobody releases them afterwards). NULL: no-op. */
void ucx_rkeys_destroy(ucx_rkeys_t *c);
/* The unpacked key of region `region_id` of `peer` (packed bytes packed)
 * through ep, with a reference the caller gives back with ucx_rkeys_release;
 * *fresh_p: 1 if it was unpacked now. */
ucs_status_t ucx_rkeys_acquire(ucx_rkeys_t *c, ucp_ep_h ep, uint32_t peer, uint64_t region_id,
                               const void *packed, size_t len, ucx_rkey_ref_t **ref_p,
                               int *fresh_p);
ucp_rkey_h   ucx_rkeys_handle(const ucx_rkey_ref_t *ref);
void         ucx_rkeys_release(ucx_rkeys_t *c, ucx_rkey_ref_t *ref);
/* The peer's endpoint is going: its keys leave the cache (those still in use
 * are destroyed when released). NULL: no-op. */
void ucx_rkeys_drop_peer(ucx_rkeys_t *c, uint32_t peer);
/* The peer deregistered region_id: its keys leave the cache (as above);
 * returns how many. */
int ucx_rkeys_forget(ucx_rkeys_t *c, uint32_t peer, uint64_t region_id);
/* Destroys one key that left the cache, is no longer in use and has its
 * pages released; 1 if it did. The engine calls it once per progress call.
 * NULL: 0. */
int ucx_rkeys_reap(ucx_rkeys_t *c);
/* 1 while such a key waits (the engine must not sleep then). */
int ucx_rkeys_reaping(const ucx_rkeys_t *c);
/* [addr, addr + len) is the key's region mapped here (ucp_rkey_ptr): a
 * large shared mapping is unmapped off the lock when the key goes (see
 * above; the kernel refuses the second mapping of a private one, which is
 * then unmapped with the key). */
void ucx_rkeys_set_mapping(ucx_rkey_ref_t *ref, void *addr, size_t len);
/* Fills the page tables of [addr, addr + len), the key's mapping here, in a
 * background thread (MADV_POPULATE_WRITE): a fresh mapping otherwise costs a
 * fault per 4 KiB page on first touch. Tied to the entry: destroying the key
 * stops the thread first, so it never touches memory mapped there later. At
 * most two at once, process-wide; beyond that the pages fault in. */
void ucx_rkeys_populate(ucx_rkey_ref_t *ref, void *addr, size_t len);

#endif
