/* kvstore/shard_lease.c - a shard's leases: reads pin a block until they
 * end (release, expiry, the client's loss); a transfer in flight never
 * expires. */
#include "shard_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>
#include <unistd.h>

/* ---- leases ---- */

static void entry_unlease(moon_kv_shard_t *shard, uint32_t e)
{
    entry_t *ent = &shard->entries[e];

    MOON_ASSERT(ent->n_leases > 0);
    if (--ent->n_leases > 0) {
        return;
    }
    if (ent->flags & F_ORPHAN) {
        shard_slot_give(shard, ent->slot);
        shard_entry_free(shard, e);
    } else if (!(ent->flags & F_PINNED)) {
        shard_entry_link(shard, e, L_DRAM); /* a use: most recently used */
    }
}

static void lease_end(moon_kv_shard_t *shard, uint32_t l)
{
    lease_t *ls = &shard->leases[l];
    uint32_t e  = ls->entry;

    if (ls->list == L_LEASE_IDLE) {
        list_unlink(&shard->idle_leases, shard->leases, sizeof(lease_t), l);
    }
    ls->entry       = NIL;
    ls->gen         = ls->gen + 1 == 0 ? 1 : ls->gen + 1;
    ls->n_transfers = 0;
    ls->ending      = 0;
    ls->list        = L_FREE;
    list_push_tail(&shard->free_leases, shard->leases, sizeof(lease_t), l);
    shard->n_leases--;
    entry_unlease(shard, e);
}

void shard_lease_touch(moon_kv_shard_t *shard, uint32_t l, uint64_t now_ns)
{
    lease_t *ls = &shard->leases[l];

    if (ls->list == L_LEASE_IDLE) {
        list_unlink(&shard->idle_leases, shard->leases, sizeof(lease_t), l);
    }
    ls->last_ns = now_ns;
    list_push_tail(&shard->idle_leases, shard->leases, sizeof(lease_t), l);
    ls->list = L_LEASE_IDLE;
}

/* The lease a handle names. INVALID_PARAM: no shard or a malformed handle;
 * NOT_FOUND: ended (or another generation). */
static moon_status_t lease_find(const moon_kv_shard_t *shard, uint64_t lease, uint32_t *l_p)
{
    uint32_t l   = (uint32_t)lease;
    uint32_t gen = (uint32_t)(lease >> 32);

    if (shard == NULL || gen == 0 || l >= shard->max_leases) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (l >= shard->n_leases_touched || shard->leases[l].gen != gen ||
        shard->leases[l].entry == NIL) {
        return MOON_ERR_NOT_FOUND;
    }
    *l_p = l;
    return MOON_OK;
}

/* The reserved entry a put token names (same statuses as lease_find). */
moon_status_t shard_token_find(const moon_kv_shard_t *shard, uint64_t token, uint32_t *e_p)
{
    uint32_t e   = (uint32_t)token;
    uint32_t gen = (uint32_t)(token >> 32);

    if (shard == NULL || gen == 0 || e >= shard->max_entries) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (e >= shard->n_entries_touched || shard->entries[e].gen != gen ||
        shard->entries[e].state != ST_RESERVED) {
        return MOON_ERR_NOT_FOUND;
    }
    *e_p = e;
    return MOON_OK;
}

/* lease_find of a lease not released yet: NOT_FOUND once released (it may
 * live on until its last transfer ends). */
static moon_status_t live_lease_find(const moon_kv_shard_t *shard, uint64_t lease, uint32_t *l_p)
{
    moon_status_t status = lease_find(shard, lease, l_p);

    return status == MOON_OK && shard->leases[*l_p].ending ? MOON_ERR_NOT_FOUND : status;
}

moon_status_t moon_kv_shard_release(moon_kv_shard_t *shard, uint64_t lease)
{
    moon_status_t status;
    uint32_t      l;

    status = live_lease_find(shard, lease, &l); /* released: it ends at transfer_end */
    if (status != MOON_OK) {
        return status;
    }
    if (shard->leases[l].n_transfers > 0) {
        shard->leases[l].ending = 1;
        return MOON_OK;
    }
    lease_end(shard, l);
    return MOON_OK;
}

moon_status_t moon_kv_shard_lease_transfer_begin(moon_kv_shard_t *shard, uint64_t lease)
{
    moon_status_t status;
    uint32_t      l;
    lease_t      *ls;

    status = live_lease_find(shard, lease, &l);
    if (status != MOON_OK) {
        return status;
    }
    ls = &shard->leases[l];
    if (ls->n_transfers == UINT32_MAX) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (ls->list == L_LEASE_IDLE) {
        list_unlink(&shard->idle_leases, shard->leases, sizeof(lease_t), l);
        ls->list = L_NONE; /* in flight: out of reach of the expiry sweep */
    }
    ls->n_transfers++;
    return MOON_OK;
}

moon_status_t moon_kv_shard_lease_transfer_end(moon_kv_shard_t *shard, uint64_t lease,
                                               uint64_t now_ns)
{
    moon_status_t status;
    uint32_t      l;
    lease_t      *ls;

    status = lease_find(shard, lease, &l);
    if (status != MOON_OK) {
        return status;
    }
    ls = &shard->leases[l];
    if (ls->n_transfers == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (--ls->n_transfers > 0) {
        return MOON_OK;
    }
    if (ls->ending) {
        lease_end(shard, l);
    } else {
        shard_lease_touch(shard, l, now_ns);
    }
    return MOON_OK;
}

moon_status_t moon_kv_shard_lease_renew(moon_kv_shard_t *shard, uint64_t lease, uint64_t now_ns)
{
    moon_status_t status;
    uint32_t      l;

    status = live_lease_find(shard, lease, &l);
    if (status != MOON_OK) {
        return status;
    }
    if (shard->leases[l].n_transfers == 0) {
        shard_lease_touch(shard, l, now_ns);
    } else {
        shard->leases[l].last_ns = now_ns;
    }
    return MOON_OK;
}

void moon_kv_shard_expire(moon_kv_shard_t *shard, uint64_t now_ns, uint64_t lease_timeout_ns,
                          uint64_t *n_expired_p)
{
    uint64_t n = 0;

    while (shard->reserved.head != NIL &&
           shard->entries[shard->reserved.head].deadline_ns <= now_ns) {
        uint32_t e = shard->reserved.head;

        MOON_DEBUG_LOG("kv shard %u: reservation of client %llu expired", shard->shard_id,
                       (unsigned long long)shard->entries[e].client_id);
        shard_revoke_entry(shard, e);
        shard->counters.n_expired_reservations++;
        n++;
    }
    while (lease_timeout_ns > 0 && shard->idle_leases.head != NIL) {
        uint32_t l    = shard->idle_leases.head;
        uint64_t last = shard->leases[l].last_ns;

        if (now_ns < last || now_ns - last < lease_timeout_ns) {
            break;
        }
        lease_end(shard, l);
        shard->counters.n_expired_leases++;
        n++;
    }
    if (n_expired_p != NULL) {
        *n_expired_p = n;
    }
}

uint64_t moon_kv_shard_drop_client(moon_kv_shard_t *shard, uint64_t client_id)
{
    uint64_t n = 0;
    uint32_t e = shard->reserved.head;

    while (e != NIL) {
        uint32_t next = shard->entries[e].link.next;

        if (shard->entries[e].client_id == client_id) {
            shard_revoke_entry(shard, e);
            n++;
        }
        e = next;
    }
    for (uint32_t l = 0; l < shard->n_leases_touched; l++) {
        lease_t *ls = &shard->leases[l];

        if (ls->entry == NIL || ls->client_id != client_id || ls->ending) {
            continue;
        }
        if (ls->n_transfers > 0) {
            ls->ending = 1; /* the shard's own transfer still reads the slot */
        } else {
            lease_end(shard, l);
        }
        n++;
    }
    return n;
}
