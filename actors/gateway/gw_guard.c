/* actors/gateway/gw_guard.c - connection deadlines (see gw_guard.h). Every
 * connection in its header phase is on one list and every one in its body
 * phase on another, each in the order it entered the phase: with one timeout
 * per phase, a list's head has the earliest deadline and the oldest
 * connection, so the thread only ever looks at two heads. */
#include "gw_guard.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define NIL UINT32_MAX
#define PRESSURE_RECHECK_NS 100000000ull /* 100 ms */

enum { LIST_HEADERS, LIST_BODY, N_LISTS };

typedef struct {
    int      fd;   /* -1: free */
    int      list; /* LIST_*, or -1: on none (busy or shut down) */
    int      cut;  /* shut down: waits for its close, on no list */
    uint64_t since_ns;
    uint64_t n_bytes;    /* body bytes so far (body phase) */
    uint32_t prev, next; /* list links; next also links the free slots */
} slot_t;

struct moon_gw_guard {
    moon_gw_guard_config_t cfg;
    pthread_t              thread;
    pthread_mutex_t        mu;
    pthread_cond_t         cv; /* signalled when a head or the pressure changes */
    int                    stop;
    slot_t                *slots;
    uint32_t               free_head;
    uint32_t               head[N_LISTS], tail[N_LISTS];
    uint32_t               n_cut_open; /* shut down, not closed yet */
    moon_gw_guard_stats_t  stats;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void unlink_slot(moon_gw_guard_t *g, uint32_t i)
{
    slot_t *s = &g->slots[i];

    if (s->list < 0) {
        return;
    }
    if (s->prev != NIL) {
        g->slots[s->prev].next = s->next;
    } else {
        g->head[s->list] = s->next;
    }
    if (s->next != NIL) {
        g->slots[s->next].prev = s->prev;
    } else {
        g->tail[s->list] = s->prev;
    }
    s->list = -1;
}

/* Appends slot i to list l (it entered that phase now); wakes the thread if
 * it became the head (the thread may sleep with no deadline). */
static void append_slot(moon_gw_guard_t *g, uint32_t i, int l, uint64_t now)
{
    slot_t *s = &g->slots[i];

    s->list     = l;
    s->since_ns = now;
    s->n_bytes  = 0;
    s->next     = NIL;
    s->prev     = g->tail[l];
    if (g->tail[l] != NIL) {
        g->slots[g->tail[l]].next = i;
    } else {
        g->head[l] = i;
        pthread_cond_signal(&g->cv);
    }
    g->tail[l] = i;
}

/* Shuts a connection down (libmicrohttpd closes it). */
static void cut_slot(moon_gw_guard_t *g, uint32_t i)
{
    unlink_slot(g, i);
    g->slots[i].cut = 1;
    g->n_cut_open++;
    shutdown(g->slots[i].fd, SHUT_RDWR);
}

static void cut_head(moon_gw_guard_t *g, int l)
{
    cut_slot(g, g->head[l]);
}

static uint64_t deadline_of(const moon_gw_guard_t *g, int l)
{
    uint64_t t = l == LIST_HEADERS ? g->cfg.header_ns : g->cfg.body_ns;

    return g->head[l] == NIL || t == 0 ? UINT64_MAX : g->slots[g->head[l]].since_ns + t;
}

/* Connections that will stay open (those shut down are closing). */
static uint32_t n_staying(const moon_gw_guard_t *g)
{
    return g->stats.n_open - g->n_cut_open;
}

static int under_pressure(const moon_gw_guard_t *g)
{
    return g->cfg.pressure > 0 && n_staying(g) >= g->cfg.pressure;
}

/* Cuts what is due; returns when next to look (UINT64_MAX: when woken). */
static uint64_t cut_due(moon_gw_guard_t *g, uint64_t now)
{
    uint64_t n_header = 0, n_body = 0, n_evict = 0;
    uint64_t wake;

    while (deadline_of(g, LIST_HEADERS) <= now) {
        cut_head(g, LIST_HEADERS);
        n_header++;
    }
    while (deadline_of(g, LIST_BODY) <= now) {
        cut_head(g, LIST_BODY);
        n_body++;
    }
    /* those shut down do not count: libmicrohttpd closes them soon */
    while (under_pressure(g)) {
        uint32_t victim = NIL;

        if (g->head[LIST_HEADERS] != NIL &&
            g->slots[g->head[LIST_HEADERS]].since_ns + g->cfg.evict_age_ns <= now) {
            victim = g->head[LIST_HEADERS];
        }
        /* else the oldest body arriving slower than min_body_rate (a scan, under
         * pressure only: a fast upload may be older than a slow one) */
        for (uint32_t i = g->head[LIST_BODY]; victim == NIL && i != NIL; i = g->slots[i].next) {
            const slot_t *s = &g->slots[i];

            if (s->since_ns + g->cfg.evict_age_ns > now) {
                break;
            }
            if ((double)s->n_bytes * 1e9 <
                (double)g->cfg.min_body_rate * (double)(now - s->since_ns)) {
                victim = i;
            }
        }
        if (victim == NIL) {
            break;
        }
        cut_slot(g, victim);
        n_evict++;
    }
    g->stats.n_header_cut += n_header;
    g->stats.n_body_cut += n_body;
    g->stats.n_evicted += n_evict;
    if (n_header > 0) {
        MOON_LOG_LIMITED(MOON_LOG_INFO,
                         "gateway: %llu connection(s) sent no whole request head within %.1f s: "
                         "closed",
                         (unsigned long long)n_header, (double)g->cfg.header_ns * 1e-9);
    }
    if (n_body > 0) {
        MOON_LOG_LIMITED(MOON_LOG_INFO,
                         "gateway: %llu request body(ies) not in within %.1f s: closed",
                         (unsigned long long)n_body, (double)g->cfg.body_ns * 1e-9);
    }
    if (n_evict > 0) {
        MOON_LOG_LIMITED(MOON_LOG_INFO,
                         "gateway: %u connections open: %llu slow one(s) (head, or body under "
                         "the minimum rate) closed to make room",
                         n_staying(g), (unsigned long long)n_evict);
    }
    wake = MOON_MIN(deadline_of(g, LIST_HEADERS), deadline_of(g, LIST_BODY));
    if (under_pressure(g) && g->head[LIST_HEADERS] != NIL) {
        wake = MOON_MIN(wake, g->slots[g->head[LIST_HEADERS]].since_ns + g->cfg.evict_age_ns);
    }
    if (under_pressure(g) && g->head[LIST_BODY] != NIL) {
        /* a body's rate changes with time: look again soon (under pressure only) */
        wake =
            MOON_MIN(wake, MOON_MAX(now + PRESSURE_RECHECK_NS,
                                    g->slots[g->head[LIST_BODY]].since_ns + g->cfg.evict_age_ns));
    }
    return wake;
}

static void *guard_main(void *arg)
{
    moon_gw_guard_t *g = arg;

    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        uint64_t wake = cut_due(g, now_ns());

        if (wake == UINT64_MAX) {
            pthread_cond_wait(&g->cv, &g->mu);
        } else {
            struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

moon_status_t moon_gw_guard_create(const moon_gw_guard_config_t *cfg, moon_gw_guard_t **guard_p)
{
    moon_gw_guard_t   *g;
    pthread_condattr_t ca;

    if (cfg == NULL || cfg->capacity == 0 || cfg->capacity >= NIL) {
        return MOON_ERR_INVALID_PARAM;
    }
    g = moon_calloc(1, sizeof(*g));
    if (g == NULL || (g->slots = moon_calloc(cfg->capacity, sizeof(*g->slots))) == NULL) {
        moon_free(g);
        return MOON_ERR_NO_MEMORY;
    }
    g->cfg = *cfg;
    for (uint32_t i = 0; i < cfg->capacity; i++) {
        g->slots[i] = (slot_t){.fd = -1, .list = -1, .prev = NIL, .next = i + 1};
    }
    g->slots[cfg->capacity - 1].next = NIL;
    for (int l = 0; l < N_LISTS; l++) {
        g->head[l] = g->tail[l] = NIL;
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        MOON_ERROR("gateway: cannot start the connection guard's thread");
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        moon_free(g->slots);
        moon_free(g);
        return MOON_ERR_IO;
    }
    *guard_p = g;
    return MOON_OK;
}

void moon_gw_guard_destroy(moon_gw_guard_t *g)
{
    if (g == NULL) {
        return;
    }
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    moon_free(g->slots);
    moon_free(g);
}

uint32_t moon_gw_guard_open(moon_gw_guard_t *g, int fd)
{
    uint32_t i;

    pthread_mutex_lock(&g->mu);
    i = g->free_head;
    if (i == NIL) {
        pthread_mutex_unlock(&g->mu);
        return 0;
    }
    g->free_head     = g->slots[i].next;
    g->slots[i].fd   = fd;
    g->slots[i].list = -1;
    g->slots[i].cut  = 0;
    append_slot(g, i, LIST_HEADERS, now_ns());
    g->stats.n_open++;
    if (under_pressure(g)) {
        pthread_cond_signal(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return i + 1;
}

void moon_gw_guard_set(moon_gw_guard_t *g, uint32_t id, moon_gw_guard_phase_t phase)
{
    uint32_t i = id - 1;

    if (id == 0) {
        return;
    }
    pthread_mutex_lock(&g->mu);
    /* a connection already shut down stays off the lists */
    if (!g->slots[i].cut) {
        unlink_slot(g, i);
        if (phase != MOON_GW_GUARD_BUSY) {
            append_slot(g, i, phase == MOON_GW_GUARD_HEADERS ? LIST_HEADERS : LIST_BODY, now_ns());
        }
    }
    pthread_mutex_unlock(&g->mu);
}

void moon_gw_guard_progress(moon_gw_guard_t *g, uint32_t id, uint64_t n_bytes)
{
    if (id == 0) {
        return;
    }
    pthread_mutex_lock(&g->mu);
    g->slots[id - 1].n_bytes += n_bytes;
    pthread_mutex_unlock(&g->mu);
}

void moon_gw_guard_close(moon_gw_guard_t *g, uint32_t id)
{
    uint32_t i = id - 1;

    if (id == 0) {
        return;
    }
    pthread_mutex_lock(&g->mu);
    unlink_slot(g, i);
    if (g->slots[i].cut) {
        g->n_cut_open--;
    }
    g->slots[i].fd   = -1;
    g->slots[i].next = g->free_head;
    g->free_head     = i;
    g->stats.n_open--;
    pthread_mutex_unlock(&g->mu);
}

void moon_gw_guard_stats(moon_gw_guard_t *g, moon_gw_guard_stats_t *stats)
{
    pthread_mutex_lock(&g->mu);
    *stats = g->stats;
    pthread_mutex_unlock(&g->mu);
}
