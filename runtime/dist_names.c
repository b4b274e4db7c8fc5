/* runtime/dist_names.c - the global name registry and placement of the
 * distributed runtime. Rank 0 holds the registry; other ranks send it name
 * ops as internal messages (to the transport of rank 0, address NONE) and it
 * answers with name replies. A blocking moon_dist_whereis waits on a waiter
 * under d->lock; peer loss (dist_peers.c) wakes them all when rank 0 is lost.
 * Placement parses a spec only and touches no state.
 *
 * Apart from dist.c so that frames and the progress thread stay readable:
 * what a name op means is decided here, dist.c only routes it. */
#include "dist_state.h"

#include "moonlet/alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- wire format ---------------------------------------------------------- */
enum { NAME_OP_REGISTER = 1, NAME_OP_QUERY = 2 };

/* ---- names ---------------------------------------------------------------- */
/* A registry entry (rank 0), under d->lock. */
typedef struct name_rec {
    struct name_rec *next;
    moon_addr_t      addr;
    char             name[];
} name_rec_t;

static void wake_waiter(moon_dist_t *d, uint64_t cookie, moon_status_t status, moon_addr_t addr)
{
    pthread_mutex_lock(&d->lock);
    for (waiter_t *w = d->waiters; w != NULL; w = w->next) {
        if (w->cookie == cookie) {
            w->done   = 1;
            w->status = status;
            w->addr   = addr;
        }
    }
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

/* Sends an internal message (to == NONE: the transport of rank r). */
static moon_status_t send_internal(moon_dist_t *d, uint32_t r, moon_addr_t to,
                                   moon_msg_hdr_t *msg)
{
    msg->src = addr_make(d->rank, 0, 0);
    msg->seq = 0;
    if (r == d->rank) {
        if (to == MOON_ADDR_NONE) {
            return MOON_ERR_INVALID_PARAM;
        }
        return moon_runtime_deliver_remote(d->rt, to, msg);
    }
    if (atomic_load(&d->peers[r].down)) {
        return MOON_ERR_PEER_LOST;
    }
    dist_enqueue(d, r, to, msg);
    return MOON_OK;
}

static moon_status_t registry_lookup(moon_dist_t *d, const char *name, moon_addr_t *addr_p)
{
    moon_status_t status = MOON_ERR_NOT_FOUND;

    pthread_mutex_lock(&d->lock);
    for (name_rec_t *n = d->names; n != NULL; n = n->next) {
        if (strcmp(n->name, name) == 0) {
            *addr_p = n->addr;
            status  = MOON_OK;
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return status;
}

static void registry_add(moon_dist_t *d, const char *name, moon_addr_t addr)
{
    size_t      len = strlen(name);
    name_rec_t *n;

    pthread_mutex_lock(&d->lock);
    for (n = d->names; n != NULL; n = n->next) {
        if (strcmp(n->name, name) == 0) {
            n->addr = addr; /* the latest registration wins */
            pthread_mutex_unlock(&d->lock);
            return;
        }
    }
    n = moon_malloc(sizeof(*n) + len + 1);
    if (n != NULL) {
        n->addr = addr;
        memcpy(n->name, name, len + 1);
        n->next  = d->names;
        d->names = n;
    }
    pthread_mutex_unlock(&d->lock);
}

static void reply_name(moon_dist_t *d, uint32_t r, moon_addr_t reply_to, uint64_t cookie,
                       moon_status_t status, moon_addr_t addr)
{
    moon_dist_name_reply_t *m = moon_msg_new(MOON_MSG_DIST_NAME_REPLY, 0);

    if (m == NULL) {
        return;
    }
    m->cookie = cookie;
    m->status = status;
    m->addr   = addr;
    if (reply_to == MOON_ADDR_NONE && r == d->rank) {
        wake_waiter(d, cookie, status, addr);
        moon_msg_release(&m->hdr);
        return;
    }
    if (send_internal(d, reply_to != MOON_ADDR_NONE ? moon_addr_rank(reply_to) : r, reply_to,
                      &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
}

/* Rank 0 (or a local call there): register or query. */
static void names_handle(moon_dist_t *d, uint32_t r, const moon_msg_hdr_t *msg)
{
    const moon_dist_name_op_t *op   = (const moon_dist_name_op_t *)msg;
    const char                *name = MOON_SPAN_PTR(op, op->name);
    moon_addr_t                addr = MOON_ADDR_NONE;
    moon_status_t              status;

    if (op->name.n == 0) {
        return;
    }
    if (op->op == NAME_OP_REGISTER) {
        registry_add(d, name, op->addr);
    } else if (op->op == NAME_OP_QUERY) {
        status = registry_lookup(d, name, &addr);
        reply_name(d, r, op->reply_to, op->cookie, status, addr);
    }
}

void dist_names_on_msg(moon_dist_t *d, uint32_t r, const moon_msg_hdr_t *msg)
{
    if (msg->type == MOON_MSG_DIST_NAME_OP) {
        names_handle(d, r, msg);
    } else if (msg->type == MOON_MSG_DIST_NAME_REPLY) {
        const moon_dist_name_reply_t *m = (const moon_dist_name_reply_t *)msg;
        wake_waiter(d, m->cookie, m->status, m->addr);
    }
}

static moon_status_t name_op(moon_dist_t *d, uint32_t op, const char *name, moon_addr_t addr,
                             moon_addr_t reply_to, uint64_t cookie)
{
    moon_dist_name_op_t *m = moon_msg_new(MOON_MSG_DIST_NAME_OP, strlen(name) + 1);
    moon_status_t        status;

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->op       = op;
    m->cookie   = cookie;
    m->addr     = addr;
    m->reply_to = reply_to;
    moon_msg_set_str(m, &m->name, name);
    if (d->rank == 0 || d->rt == NULL) {
        names_handle(d, d->rank, &m->hdr);
        moon_msg_release(&m->hdr);
        return MOON_OK;
    }
    status = send_internal(d, 0, MOON_ADDR_NONE, &m->hdr);
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
    return status;
}

moon_status_t moon_dist_register(moon_dist_t *d, const char *name, moon_addr_t addr)
{
    moon_status_t status;

    if (d == NULL || d->rt == NULL || name == NULL || name[0] == '\0') {
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_register(d->rt, name, addr);
    if (status != MOON_OK) {
        return status;
    }
    return name_op(d, NAME_OP_REGISTER, name, addr, MOON_ADDR_NONE, 0);
}

moon_status_t moon_dist_whereis_async(moon_dist_t *d, const char *name, moon_addr_t reply_to,
                                      uint64_t cookie)
{
    moon_addr_t addr;

    if (d == NULL || d->rt == NULL || name == NULL || reply_to == MOON_ADDR_NONE) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_whereis(d->rt, name, &addr) == MOON_OK) {
        reply_name(d, d->rank, reply_to, cookie, MOON_OK, addr);
        return MOON_OK;
    }
    return name_op(d, NAME_OP_QUERY, name, MOON_ADDR_NONE, reply_to, cookie);
}

moon_status_t moon_dist_whereis(moon_dist_t *d, const char *name, uint64_t timeout_ns,
                                moon_addr_t *addr_p)
{
    waiter_t        w = {0};
    moon_status_t   status;
    struct timespec dl;
    uint64_t        t;

    if (d == NULL || d->rt == NULL || name == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_whereis(d->rt, name, addr_p) == MOON_OK) {
        return MOON_OK;
    }
    if (d->rank == 0) {
        return registry_lookup(d, name, addr_p);
    }
    pthread_mutex_lock(&d->lock);
    w.cookie   = ++d->next_cookie;
    w.next     = d->waiters;
    d->waiters = &w;
    pthread_mutex_unlock(&d->lock);
    status = name_op(d, NAME_OP_QUERY, name, MOON_ADDR_NONE, MOON_ADDR_NONE, w.cookie);
    clock_gettime(CLOCK_REALTIME, &dl);
    t        = (uint64_t)dl.tv_nsec + (timeout_ns ? timeout_ns : 5000000000ull);
    dl.tv_sec += (time_t)(t / 1000000000ull);
    dl.tv_nsec = (long)(t % 1000000000ull);
    pthread_mutex_lock(&d->lock);
    while (status == MOON_OK && !w.done) {
        if (pthread_cond_timedwait(&d->cond, &d->lock, &dl) == ETIMEDOUT) {
            status = MOON_ERR_TIMED_OUT;
        }
    }
    for (waiter_t **pw = &d->waiters; *pw != NULL; pw = &(*pw)->next) {
        if (*pw == &w) {
            *pw = w.next;
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (status == MOON_OK) {
        status = w.status;
        if (status == MOON_OK) {
            *addr_p = w.addr;
        }
    }
    return status;
}

void dist_names_fini(moon_dist_t *d)
{
    while (d->names != NULL) {
        name_rec_t *n = d->names;
        d->names      = n->next;
        moon_free(n);
    }
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
    const char *cur = spec, *slash;
    int         best = -1; /* 2: exact, 1 + prefix length: prefix */
    size_t      best_len = 0;
    uint32_t    best_rank = 0, ranks[256];
    uint64_t    index = 0;

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
        const char *p0 = cur, *p1;
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
