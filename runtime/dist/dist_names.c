/* runtime/dist/dist_names.c - the global name registry and placement of the
 * distributed runtime.
 *
 * The registry is replicated: every rank keeps every name. A registration is
 * applied locally and sent to every live peer as an internal message (to the
 * transport, address NONE); resolution reads the local copy and needs no
 * message, so names resolve on every surviving rank whichever ranks are lost.
 * Registrations of one name from different ranks can cross on the wire: each
 * carries a Lamport version (one more than the highest this rank has seen)
 * and the registering rank, and every copy keeps the highest (version, rank),
 * so all copies settle on the same winner and a later registration (one made
 * after its rank saw the earlier) always wins. When a rank is lost, every copy
 * drops the names of its actors, so a replacement can take them and nobody
 * resolves an address that cannot answer. Placement parses a spec only and
 * touches no state.
 *
 * Apart from dist.c so that frames and the progress thread stay readable:
 * what a name op means is decided here, dist.c only routes it. */
#include "dist_state.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- wire format ---------------------------------------------------------- */
enum { NAME_OP_REGISTER = 1 };

/* ---- names ---------------------------------------------------------------- */
/* A registry entry, under d->lock. */
typedef struct name_rec {
    struct name_rec *next;
    moon_addr_t      addr;
    uint64_t         ver;    /* Lamport version of the registration */
    uint32_t         origin; /* the rank that registered it (breaks version ties) */
    char             name[];
} name_rec_t;

/* Under d->lock. */
static name_rec_t **registry_bucket(moon_dist_t *d, const char *name)
{
    return &d->names[moon_name_hash(name) % DIST_NAME_BUCKETS];
}

/* Under d->lock. */
static name_rec_t *registry_find(moon_dist_t *d, const char *name)
{
    for (name_rec_t *n = *registry_bucket(d, name); n != NULL; n = n->next) {
        if (strcmp(n->name, name) == 0) {
            return n;
        }
    }
    return NULL;
}

/* Applies a registration unless the entry holds a later one; wakes blocked
 * whereis calls. MOON_ERR_NO_MEMORY for a new name without memory. */
static moon_status_t registry_apply(moon_dist_t *d, const char *name, moon_addr_t addr,
                                    uint64_t ver, uint32_t origin)
{
    name_rec_t *n;

    pthread_mutex_lock(&d->lock);
    d->name_clock = MOON_MAX(d->name_clock, ver);
    n             = registry_find(d, name);
    if (n == NULL) {
        name_rec_t **bucket = registry_bucket(d, name);
        size_t       len    = strlen(name);

        n = moon_malloc(sizeof(*n) + len + 1);
        if (n == NULL) {
            pthread_mutex_unlock(&d->lock);
            MOON_ERROR("no memory to register name %s", name);
            return MOON_ERR_NO_MEMORY;
        }
        memcpy(n->name, name, len + 1);
        n->next = *bucket;
        *bucket = n;
    } else if (ver < n->ver || (ver == n->ver && origin < n->origin)) {
        pthread_mutex_unlock(&d->lock); /* a later registration is in place */
        return MOON_OK;
    }
    n->addr   = addr;
    n->ver    = ver;
    n->origin = origin;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    return MOON_OK;
}

/* Drops every entry `doomed` says yes to. Under d->lock. */
static void registry_drop(moon_dist_t *d, int (*doomed)(const name_rec_t *, uint32_t), uint32_t r)
{
    for (uint32_t b = 0; b < DIST_NAME_BUCKETS; b++) {
        for (name_rec_t **pn = &d->names[b]; *pn != NULL;) {
            name_rec_t *n = *pn;

            if (doomed(n, r)) {
                *pn = n->next;
                moon_free(n);
            } else {
                pn = &n->next;
            }
        }
    }
}

static int of_rank(const name_rec_t *n, uint32_t r)
{
    return moon_addr_rank(n->addr) == r;
}

static int any_rec(const name_rec_t *n, uint32_t r)
{
    (void)n;
    (void)r;
    return 1;
}

void dist_names_peer_lost(moon_dist_t *d, uint32_t r)
{
    pthread_mutex_lock(&d->lock);
    registry_drop(d, of_rank, r);
    pthread_mutex_unlock(&d->lock);
}

void dist_names_on_msg(moon_dist_t *d, uint32_t r, const moon_msg_hdr_t *msg)
{
    const moon_dist_name_op_t *op = (const moon_dist_name_op_t *)msg;

    if (msg->type != MOON_MSG_DIST_NAME_OP || op->op != NAME_OP_REGISTER || op->name.n == 0 ||
        moon_addr_rank(op->addr) != r) {
        /* a rank registers its own actors only */
        atomic_fetch_add(&d->st.bad_msgs, 1);
        dist_log_once(&d->logged_bad_msg, "a malformed name op", r, MOON_ERR_INVALID_PARAM);
        return;
    }
    (void)registry_apply(d, MOON_SPAN_PTR(op, op->name), op->addr, op->ver, r); /* logged */
}

/* Every message of a broadcast is made before any is sent, so a registration
 * without memory reaches nobody rather than some ranks. */
moon_status_t moon_dist_register(moon_dist_t *d, const char *name, moon_addr_t addr)
{
    moon_dist_name_op_t **msgs;
    moon_status_t         status;
    uint64_t              ver;

    if (d == NULL || d->rt == NULL || name == NULL || name[0] == '\0' ||
        moon_addr_rank(addr) != d->rank) {
        return MOON_ERR_INVALID_PARAM;
    }
    if ((msgs = moon_calloc(d->size, sizeof(*msgs))) == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&d->lock);
    ver = ++d->name_clock;
    pthread_mutex_unlock(&d->lock);
    status = MOON_OK;
    for (uint32_t r = 0; r < d->size && status == MOON_OK; r++) {
        moon_dist_name_op_t *m;

        if (r == d->rank) {
            continue;
        }
        if ((m = msgs[r] = moon_msg_new(MOON_MSG_DIST_NAME_OP, strlen(name) + 1)) == NULL) {
            status = MOON_ERR_NO_MEMORY;
            break;
        }
        m->op      = NAME_OP_REGISTER;
        m->ver     = ver;
        m->addr    = addr;
        m->hdr.src = addr_make(d->rank, 0, 0);
        m->hdr.seq = 0;
        moon_msg_set_str(m, &m->name, name);
    }
    if (status == MOON_OK && (status = moon_register(d->rt, name, addr)) == MOON_OK &&
        (status = registry_apply(d, name, addr, ver, d->rank)) != MOON_OK) {
        moon_names_drop_addr(d->rt->names, name, addr); /* ours only: not a later one's */
    }
    for (uint32_t r = 0; r < d->size; r++) {
        if (msgs[r] == NULL) {
            continue;
        }
        if (status == MOON_OK && !atomic_load(&d->peers[r].down)) {
            dist_enqueue(d, r, MOON_ADDR_NONE, &msgs[r]->hdr);
        } else {
            moon_msg_release(&msgs[r]->hdr);
        }
    }
    moon_free(msgs);
    return status;
}

/* The replica first (it holds the winner among ranks), then this rank's own
 * runtime table (names registered with moon_register only). */
static moon_status_t lookup(moon_dist_t *d, const char *name, moon_addr_t *addr_p)
{
    name_rec_t   *n;
    moon_status_t status = MOON_ERR_NOT_FOUND;

    pthread_mutex_lock(&d->lock);
    if ((n = registry_find(d, name)) != NULL) {
        *addr_p = n->addr;
        status  = MOON_OK;
    }
    pthread_mutex_unlock(&d->lock);
    return status == MOON_OK ? status : moon_whereis(d->rt, name, addr_p);
}

moon_status_t moon_dist_whereis_async(moon_dist_t *d, const char *name, moon_addr_t reply_to,
                                      uint64_t cookie)
{
    moon_dist_name_reply_t *m;
    moon_addr_t             addr = MOON_ADDR_NONE;
    moon_status_t           status;

    if (d == NULL || d->rt == NULL || name == NULL || reply_to == MOON_ADDR_NONE) {
        return MOON_ERR_INVALID_PARAM;
    }
    m = moon_msg_new(MOON_MSG_DIST_NAME_REPLY, 0);
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->cookie  = cookie;
    m->status  = lookup(d, name, &addr);
    m->addr    = addr;
    m->hdr.src = addr_make(d->rank, 0, 0);
    status     = moon_runtime_send(d->rt, reply_to, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return status;
}

moon_status_t moon_dist_whereis(moon_dist_t *d, const char *name, uint64_t timeout_ns,
                                moon_addr_t *addr_p)
{
    moon_status_t   status;
    struct timespec dl;
    uint64_t        t;

    if (d == NULL || d->rt == NULL || name == NULL || addr_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = lookup(d, name, addr_p);
    if (status == MOON_OK || timeout_ns == 0) {
        return status;
    }
    clock_gettime(CLOCK_REALTIME, &dl);
    t = (uint64_t)dl.tv_nsec + timeout_ns;
    dl.tv_sec += (time_t)(t / 1000000000ull);
    dl.tv_nsec = (long)(t % 1000000000ull);
    pthread_mutex_lock(&d->lock);
    for (;;) {
        name_rec_t *n = registry_find(d, name);

        if (n != NULL) {
            *addr_p = n->addr;
            status  = MOON_OK;
            break;
        }
        if (pthread_cond_timedwait(&d->cond, &d->lock, &dl) == ETIMEDOUT) {
            status = MOON_ERR_NOT_FOUND;
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return status;
}

void dist_names_fini(moon_dist_t *d)
{
    registry_drop(d, any_rec, 0);
}

/* ---- placement ------------------------------------------------------------ */
/* Parses "a,b-c,..." into ranks (at most cap); returns the count or -1. */
static int parse_ranks(const char *s, const char *end, uint32_t n_ranks, uint32_t *out,
                       uint32_t cap)
{
    int n = 0;

    while (s < end) {
        char         *next;
        unsigned long a, b;

        while (s < end && (*s == ' ' || *s == ',')) {
            s++;
        }
        if (s == end) {
            break;
        }
        a = strtoul(s, &next, 10);
        if (next == s || next > end) {
            return -1;
        }
        b = a;
        s = next;
        if (s < end && *s == '-') {
            b = strtoul(s + 1, &next, 10);
            if (next == s + 1 || next > end || b < a) {
                return -1;
            }
            s = next;
        }
        for (unsigned long r = a; r <= b; r++) {
            if (r >= n_ranks || (uint32_t)n >= cap) {
                return -1;
            }
            out[n++] = (uint32_t)r;
        }
        while (s < end && *s == ' ') {
            s++;
        }
        if (s < end && *s != ',') {
            return -1;
        }
    }
    return n;
}

moon_status_t moon_dist_place(const char *spec, const char *name, uint32_t n_ranks,
                              uint32_t *rank_p)
{
    const char *cur       = spec, *slash;
    int         best      = -1; /* 2: exact, 1 + prefix length: prefix */
    size_t      best_len  = 0;
    uint32_t    best_rank = 0, ranks[256];
    uint64_t    index     = 0;

    if (spec == NULL || name == NULL || rank_p == NULL || n_ranks == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    slash = strrchr(name, '/');
    if (slash != NULL && slash[1] != '\0') {
        char *end;
        index = strtoull(slash + 1, &end, 10);
        if (*end != '\0') {
            index = 0;
        }
    }
    while (*cur != '\0') {
        const char *end = cur + strcspn(cur, ";\n"), *eq;
        const char *p0  = cur, *p1;
        int         n;

        while (p0 < end && *p0 == ' ') {
            p0++;
        }
        eq = memchr(p0, '=', (size_t)(end - p0));
        if (eq == NULL) {
            for (const char *c = p0; c < end; c++) {
                if (*c != ' ' && *c != '\r' && *c != '\t') {
                    return MOON_ERR_INVALID_PARAM;
                }
            }
        } else {
            p1 = eq;
            while (p1 > p0 && p1[-1] == ' ') {
                p1--;
            }
            n = parse_ranks(eq + 1, end, n_ranks, ranks, MOON_ARRAY_SIZE(ranks));
            if (n <= 0) {
                return MOON_ERR_INVALID_PARAM;
            }
            if ((size_t)(p1 - p0) == strlen(name) && memcmp(p0, name, (size_t)(p1 - p0)) == 0) {
                *rank_p = ranks[index % (uint64_t)n];
                return MOON_OK; /* exact match wins */
            }
            if (p1 > p0 && p1[-1] == '*' && (size_t)(p1 - p0 - 1) <= strlen(name) &&
                memcmp(p0, name, (size_t)(p1 - p0 - 1)) == 0 &&
                (best < 0 || (size_t)(p1 - p0 - 1) > best_len)) {
                best      = 1;
                best_len  = (size_t)(p1 - p0 - 1);
                best_rank = ranks[index % (uint64_t)n];
            }
        }
        cur = *end != '\0' ? end + 1 : end;
    }
    if (best < 0) {
        return MOON_ERR_NOT_FOUND;
    }
    *rank_p = best_rank;
    return MOON_OK;
}
