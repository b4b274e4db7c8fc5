/* runtime/core/timer.c - one-shot and periodic timers: a table of timer entries and
 * a binary min-heap of deadlines, under one mutex (timers are not a hot path).
 * Threaded runtimes fire them from a timer thread that sleeps until the next
 * deadline; the deterministic executor calls moon_timers_fire_due itself with
 * virtual time. A fired timer becomes a TIMER message; moon_timers_accept
 * drops, at dispatch, those canceled after they were sent. */
#include "deadline_heap.h"
#include "runtime_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <errno.h>
#include <string.h>
#include <time.h>

enum { T_FREE, T_ARMED, T_FIRED };

typedef struct {
    moon_addr_t owner;
    uint64_t    cookie, period_ns, deadline;
    uint32_t    kind;
    uint32_t    gen, state;
} timer_entry_t;

struct moon_timers {
    moon_runtime_t      *rt;
    pthread_mutex_t      lock;
    pthread_cond_t       cond;
    timer_entry_t       *entries;
    uint32_t             n_entries, cap_entries;
    uint32_t            *free_idx;
    uint32_t             n_free;
    moon_deadline_heap_t heap; /* payload: timer_id(index, gen) */
    pthread_t            thread;
    int                  thread_running, stop;
};

static uint64_t timer_id(uint32_t index, uint32_t gen)
{
    return ((uint64_t)index << 32) | gen;
}

moon_status_t moon_timers_create(moon_runtime_t *rt, moon_timers_t **t_p)
{
    moon_timers_t     *t = moon_calloc(1, sizeof(*t));
    pthread_condattr_t attr;

    if (t == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    t->rt = rt;
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cond, &attr);
    pthread_condattr_destroy(&attr);
    *t_p = t;
    return MOON_OK;
}

void moon_timers_destroy(moon_timers_t *t)
{
    if (t == NULL) {
        return;
    }
    moon_timers_stop_thread(t);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    moon_free(t->entries);
    moon_free(t->free_idx);
    moon_deadline_heap_fini(&t->heap);
    moon_free(t);
}

static void entry_free(moon_timers_t *t, uint32_t index)
{
    t->entries[index].state = T_FREE;
    t->entries[index].gen++;
    t->free_idx[t->n_free++] = index; /* cannot overflow: sized with entries */
}

static int entry_alloc(moon_timers_t *t, uint32_t *index_p)
{
    if (t->n_free == 0) {
        uint32_t       cap = t->cap_entries ? t->cap_entries * 2 : 64;
        timer_entry_t *e   = moon_realloc(t->entries, cap * sizeof(*e));
        uint32_t      *f;

        if (e == NULL) {
            return -1;
        }
        t->entries = e;
        f          = moon_realloc(t->free_idx, cap * sizeof(*f));
        if (f == NULL) {
            return -1;
        }
        t->free_idx = f;
        for (uint32_t i = cap; i > t->cap_entries; i--) {
            memset(&e[i - 1], 0, sizeof(*e));
            f[t->n_free++] = i - 1;
        }
        t->cap_entries = cap;
    }
    *index_p = t->free_idx[--t->n_free];
    return 0;
}

moon_status_t moon_timer_start(moon_actor_t *self, uint64_t delay_ns, uint64_t period_ns,
                               uint64_t cookie, uint64_t *timer_p)
{
    return moon_timer_start_kind(self, 0, delay_ns, period_ns, cookie, timer_p);
}

moon_status_t moon_timer_start_kind(moon_actor_t *self, uint32_t kind, uint64_t delay_ns,
                                    uint64_t period_ns, uint64_t cookie, uint64_t *timer_p)
{
    moon_runtime_t *rt = moon_actor_runtime(self);
    moon_timers_t  *t  = rt->timers;
    timer_entry_t  *e;
    uint32_t        index;
    int             earliest;

    pthread_mutex_lock(&t->lock);
    if (entry_alloc(t, &index) != 0) {
        pthread_mutex_unlock(&t->lock);
        return MOON_ERR_NO_MEMORY;
    }
    e            = &t->entries[index];
    e->owner     = moon_actor_addr(self);
    e->cookie    = cookie;
    e->kind      = kind;
    e->period_ns = period_ns;
    e->deadline  = rt->exec->now(rt) + delay_ns;
    e->state     = T_ARMED;
    if (moon_deadline_push(&t->heap, e->deadline, timer_id(index, e->gen)) != MOON_OK) {
        entry_free(t, index);
        pthread_mutex_unlock(&t->lock);
        return MOON_ERR_NO_MEMORY;
    }
    earliest = moon_deadline_top(&t->heap)->payload == timer_id(index, e->gen);
    *timer_p = timer_id(index, e->gen);
    pthread_mutex_unlock(&t->lock);
    if (earliest) {
        rt->exec->timers_changed(rt);
    }
    return MOON_OK;
}

/* Under t->lock: the entry a timer id names, if still allocated. */
static timer_entry_t *entry_of(moon_timers_t *t, uint64_t id)
{
    uint32_t index = (uint32_t)(id >> 32);

    if (index >= t->cap_entries || t->entries[index].gen != (uint32_t)id ||
        t->entries[index].state == T_FREE) {
        return NULL;
    }
    return &t->entries[index];
}

moon_status_t moon_timer_cancel(moon_actor_t *self, uint64_t timer)
{
    moon_timers_t *t = moon_actor_runtime(self)->timers;
    timer_entry_t *e;
    moon_status_t  status = MOON_ERR_NOT_FOUND;

    pthread_mutex_lock(&t->lock);
    e = entry_of(t, timer);
    if (e != NULL && e->owner == moon_actor_addr(self)) {
        entry_free(t, (uint32_t)(timer >> 32)); /* its heap item goes stale */
        status = MOON_OK;
    }
    pthread_mutex_unlock(&t->lock);
    return status;
}

int moon_timers_accept(moon_timers_t *t, const moon_sys_timer_t *m)
{
    timer_entry_t *e;
    int            ok = 0;

    pthread_mutex_lock(&t->lock);
    e = entry_of(t, m->timer);
    if (e != NULL && e->owner == moon_env_msg_dst(&m->hdr)) {
        ok = 1;
        if (e->state == T_FIRED) {
            entry_free(t, (uint32_t)(m->timer >> 32)); /* one-shot: delivered now */
        }
    }
    pthread_mutex_unlock(&t->lock);
    return ok;
}

uint64_t moon_timers_fire_due(moon_timers_t *t, uint64_t now)
{
    moon_runtime_t *rt = t->rt;
    uint64_t        next;

    pthread_mutex_lock(&t->lock);
    while (moon_deadline_top(&t->heap) != NULL && moon_deadline_top(&t->heap)->deadline_ns <= now) {
        uint64_t          id    = moon_deadline_pop(&t->heap).payload;
        uint32_t          index = (uint32_t)(id >> 32), gen = (uint32_t)id;
        timer_entry_t    *e = &t->entries[index];
        moon_sys_timer_t *m;

        if (e->gen != gen || e->state != T_ARMED) {
            continue; /* canceled */
        }
        m = moon_msg_new(MOON_MSG_SYS_TIMER, 0);
        if (m == NULL) {
            MOON_ERROR("timer of %llx: no memory, retrying in 1 ms", (unsigned long long)e->owner);
            (void)moon_deadline_push(&t->heap, now + 1000000, id); /* cannot fail: just popped */
            break;
        }
        m->timer     = id;
        m->cookie    = e->cookie;
        m->kind      = e->kind;
        m->hdr.flags = MOON_MSG_F_SYSTEM;
        if (moon_runtime_send(rt, e->owner, &m->hdr) != MOON_OK) {
            moon_msg_release(&m->hdr);
            entry_free(t, index); /* owner is gone */
            continue;
        }
        if (e->period_ns > 0) {
            e->deadline = MOON_MAX(e->deadline + e->period_ns, now);
            (void)moon_deadline_push(&t->heap, e->deadline, id);
        } else {
            e->state = T_FIRED;
        }
    }
    next =
        moon_deadline_top(&t->heap) != NULL ? moon_deadline_top(&t->heap)->deadline_ns : UINT64_MAX;
    pthread_mutex_unlock(&t->lock);
    return next;
}

static void *timer_thread(void *arg)
{
    moon_timers_t  *t  = arg;
    moon_runtime_t *rt = t->rt;

    moon_log_set_thread_actor("timers", 0);
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        uint64_t        next;
        struct timespec ts;

        pthread_mutex_unlock(&t->lock);
        next = moon_timers_fire_due(t, rt->exec->now(rt));
        pthread_mutex_lock(&t->lock);
        if (t->stop) {
            break;
        }
        if (moon_deadline_top(&t->heap) != NULL &&
            moon_deadline_top(&t->heap)->deadline_ns < next) {
            continue; /* armed while we were firing */
        }
        if (next == UINT64_MAX) {
            pthread_cond_wait(&t->cond, &t->lock);
        } else {
            ts.tv_sec  = (time_t)(next / 1000000000ull);
            ts.tv_nsec = (long)(next % 1000000000ull);
            (void)pthread_cond_timedwait(&t->cond, &t->lock, &ts);
        }
    }
    pthread_mutex_unlock(&t->lock);
    moon_msg_cache_flush();
    return NULL;
}

moon_status_t moon_timers_start_thread(moon_timers_t *t)
{
    if (pthread_create(&t->thread, NULL, timer_thread, t) != 0) {
        MOON_ERROR("timer thread: pthread_create failed");
        return MOON_ERR_NO_RESOURCE;
    }
    t->thread_running = 1;
    return MOON_OK;
}

void moon_timers_stop_thread(moon_timers_t *t)
{
    if (!t->thread_running) {
        return;
    }
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    t->thread_running = 0;
    t->stop           = 0;
}

uint64_t moon_timers_count(moon_timers_t *t)
{
    uint64_t n;

    pthread_mutex_lock(&t->lock);
    n = t->cap_entries - t->n_free;
    pthread_mutex_unlock(&t->lock);
    return n;
}

void moon_timers_kick(moon_timers_t *t)
{
    pthread_mutex_lock(&t->lock);
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
}
