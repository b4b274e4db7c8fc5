/* actors/gateway/gw_hangup.c - the hang-up watcher (see gw_hangup.h): one epoll set,
 * one thread, a table of slots. An event names its slot by index and
 * generation, so an event read just before an unwatch (and its slot's reuse)
 * is recognised as stale under the lock and dropped. */
#include "gw_hangup.h"

#include "moonlet/alloc.h"
#include "moonlet/defs.h"
#include "moonlet/log.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define STOP_KEY UINT64_MAX

typedef struct {
    moon_gw_hangup_fn fn; /* NULL: free */
    void             *arg;
    int               fd;
    uint32_t          gen;
    uint32_t          next_free;
} slot_t;

struct moon_gw_hangup {
    int             epfd, stopfd;
    pthread_t       thread;
    pthread_mutex_t mu;
    slot_t         *slots;
    uint32_t        capacity, free_head; /* free list through next_free; capacity: empty */
};

static uint64_t key_of(uint32_t slot, uint32_t gen)
{
    return (uint64_t)gen << 32 | slot;
}

static void *watcher_main(void *arg)
{
    moon_gw_hangup_t  *w = arg;
    struct epoll_event ev[64];

    for (;;) {
        int n = epoll_wait(w->epfd, ev, (int)MOON_ARRAY_SIZE(ev), -1);

        if (n < 0 && errno != EINTR) {
            MOON_ERROR("gateway: the hang-up watcher's epoll_wait failed: %s", strerror(errno));
            return NULL;
        }
        pthread_mutex_lock(&w->mu);
        for (int i = 0; i < n; i++) {
            uint64_t key  = ev[i].data.u64;
            uint32_t slot = (uint32_t)key;
            slot_t  *s;

            if (key == STOP_KEY) {
                pthread_mutex_unlock(&w->mu);
                return NULL;
            }
            s = slot < w->capacity ? &w->slots[slot] : NULL;
            if (s != NULL && s->fn != NULL && s->gen == (uint32_t)(key >> 32)) {
                moon_gw_hangup_fn fn = s->fn;
                s->fn                = NULL; /* once; the slot stays taken until unwatch */
                fn(s->arg);
            }
        }
        pthread_mutex_unlock(&w->mu);
    }
}

moon_status_t moon_gw_hangup_create(uint32_t capacity, moon_gw_hangup_t **w_p)
{
    moon_gw_hangup_t  *w = moon_calloc(1, sizeof(*w));
    struct epoll_event ev;

    if (w == NULL || capacity == 0 ||
        (w->slots = moon_calloc(capacity, sizeof(*w->slots))) == NULL) {
        moon_free(w);
        return capacity == 0 ? MOON_ERR_INVALID_PARAM : MOON_ERR_NO_MEMORY;
    }
    w->capacity = capacity;
    for (uint32_t i = 0; i < capacity; i++) {
        w->slots[i].fd        = -1;
        w->slots[i].next_free = i + 1;
    }
    w->epfd     = epoll_create1(EPOLL_CLOEXEC);
    w->stopfd   = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ev.events   = EPOLLIN;
    ev.data.u64 = STOP_KEY;
    if (w->epfd < 0 || w->stopfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->stopfd, &ev) != 0 ||
        pthread_mutex_init(&w->mu, NULL) != 0) {
        goto err;
    }
    if (pthread_create(&w->thread, NULL, watcher_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        goto err;
    }
    *w_p = w;
    return MOON_OK;
err:
    MOON_ERROR("gateway: the hang-up watcher cannot start: %s", strerror(errno));
    if (w->epfd >= 0) {
        close(w->epfd);
    }
    if (w->stopfd >= 0) {
        close(w->stopfd);
    }
    moon_free(w->slots);
    moon_free(w);
    return MOON_ERR_IO;
}

void moon_gw_hangup_destroy(moon_gw_hangup_t *w)
{
    uint64_t one = 1;

    if (w == NULL) {
        return;
    }
    if (write(w->stopfd, &one, sizeof(one)) != (ssize_t)sizeof(one)) {
        MOON_ERROR("gateway: cannot stop the hang-up watcher: %s", strerror(errno));
    }
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    close(w->epfd);
    close(w->stopfd);
    moon_free(w->slots);
    moon_free(w);
}

moon_status_t moon_gw_hangup_watch(moon_gw_hangup_t *w, int fd, moon_gw_hangup_fn fn, void *arg,
                                   uint32_t *slot_p)
{
    struct epoll_event ev;
    moon_status_t      status = MOON_OK;
    uint32_t           i;
    slot_t            *s;

    pthread_mutex_lock(&w->mu);
    i = w->free_head;
    if (i >= w->capacity) {
        pthread_mutex_unlock(&w->mu);
        return MOON_ERR_NO_RESOURCE;
    }
    s = &w->slots[i];
    /* EPOLLRDHUP only: a request pipelined behind this one is no hang-up
     * (EPOLLHUP and EPOLLERR are always reported). One shot: a hook runs once. */
    ev.events   = EPOLLRDHUP | EPOLLONESHOT;
    ev.data.u64 = key_of(i, s->gen);
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        MOON_WARN("gateway: cannot watch socket %d for hang-ups: %s", fd, strerror(errno));
        status = MOON_ERR_IO;
    } else {
        w->free_head = s->next_free;
        s->fn        = fn;
        s->arg       = arg;
        s->fd        = fd;
        *slot_p      = i;
    }
    pthread_mutex_unlock(&w->mu);
    return status;
}

void moon_gw_hangup_unwatch(moon_gw_hangup_t *w, uint32_t slot)
{
    slot_t *s;

    if (slot >= w->capacity) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    s = &w->slots[slot];
    if (s->fd >= 0) {
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, s->fd, NULL);
        s->fd = -1;
        s->fn = NULL;
        s->gen++;
        s->next_free = w->free_head;
        w->free_head = slot;
    }
    pthread_mutex_unlock(&w->mu);
}
