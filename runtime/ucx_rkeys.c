/* runtime/ucx_rkeys.c - see ucx_rkeys.h. A short list searched linearly: a
 * process talks to a few regions per peer (an arena, a few buffers), and a
 * lookup happens once per transfer, not per slice. */
#include "ucx_rkeys.h"

#include "moonlet/alloc.h"

#include <string.h>

struct ucx_rkey_ref {
    ucx_rkey_ref_t *next;
    uint32_t        peer;
    uint32_t        refs;
    int             cached; /* on the list; else destroyed at the last release */
    ucp_rkey_h      rkey;
    size_t          len;
    char            packed[];
};

struct ucx_rkeys {
    ucx_rkey_ref_t *head; /* most recently used first */
    uint32_t        n, cap;
};

ucx_rkeys_t *ucx_rkeys_create(uint32_t cap)
{
    ucx_rkeys_t *c = moon_calloc(1, sizeof(*c));

    if (c != NULL) {
        c->cap = cap;
    }
    return c;
}

static void entry_free(ucx_rkey_ref_t *e)
{
    ucp_rkey_destroy(e->rkey);
    moon_free(e);
}

/* Unlinks *pp; destroys it unless a transfer still holds it. */
static void unlink_entry(ucx_rkeys_t *c, ucx_rkey_ref_t **pp)
{
    ucx_rkey_ref_t *e = *pp;

    *pp       = e->next;
    e->next   = NULL;
    e->cached = 0;
    c->n--;
    if (e->refs == 0) {
        entry_free(e);
    }
}

void ucx_rkeys_destroy(ucx_rkeys_t *c)
{
    if (c == NULL) {
        return;
    }
    while (c->head != NULL) {
        unlink_entry(c, &c->head);
    }
    moon_free(c);
}

/* Keeps at most cap unreferenced entries: drops the least recent of them. */
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

ucs_status_t ucx_rkeys_acquire(ucx_rkeys_t *c, ucp_ep_h ep, uint32_t peer, const void *packed,
                               size_t len, ucx_rkey_ref_t **ref_p, int *fresh_p)
{
    ucx_rkey_ref_t **pp, *e;
    ucs_status_t     s;

    *fresh_p = 0;

    for (pp = &c->head; (e = *pp) != NULL; pp = &e->next) {
        if (e->peer == peer && e->len == len && memcmp(e->packed, packed, len) == 0) {
            *pp     = e->next; /* to the front */
            e->next = c->head;
            c->head = e;
            e->refs++;
            *ref_p = e;
            return UCS_OK;
        }
    }
    e = moon_malloc(sizeof(*e) + len);
    if (e == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    s = ucp_ep_rkey_unpack(ep, packed, &e->rkey);
    if (s != UCS_OK) {
        moon_free(e);
        return s;
    }
    e->peer   = peer;
    e->refs   = 1;
    e->cached = 1;
    e->len    = len;
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
            entry_free(ref);
        } else {
            trim(c);
        }
    }
}

void ucx_rkeys_drop_peer(ucx_rkeys_t *c, uint32_t peer)
{
    ucx_rkey_ref_t **pp = c != NULL ? &c->head : NULL;

    while (pp != NULL && *pp != NULL) {
        if ((*pp)->peer == peer) {
            unlink_entry(c, pp);
        } else {
            pp = &(*pp)->next;
        }
    }
}
