/* runtime/core/workers.c - the threaded executor: one worker thread per core, pinned
 * with hwloc; each has a FIFO run queue of actors (runq.h) that others steal
 * from; actors made runnable by threads that are not workers (timers, the
 * transport, main) go through a shared inject queue. Idle workers spin a
 * little, then park on a condition variable; a producer wakes one only when
 * some worker is parked (one load otherwise).
 *
 * Stealing takes from a victim whose queue holds at least two actors: the
 * victim will reach its head soon anyway, and leaving a lone actor where it
 * is keeps ping-pong and ring traffic on one core's cache instead of
 * bouncing every message between cores. */
#include "runq.h"
#include "runtime_internal.h"
#include "spin_budget.h"

#include "moonlet/alloc.h"
#include "moonlet/config.h"
#include "moonlet/launcher.h"
#include "moonlet/log.h"

#include <hwloc.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#define SPIN_ROUNDS 2000 /* idle polls before parking (~50-100 us on a free core) */
/* ... and at most this long: with the transport's passes and yields (a
 * shared core) 2000 rounds took milliseconds, after every timer and message,
 * and idle ranks burned a quarter of a core each (issue 27). */
#define SPIN_MAX_NS (100 * 1000ull)
#define INJECT_EVERY 61 /* turns between forced looks at the inject queue */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

typedef struct {
    moon_runq_t        q; /* first: cache-line aligned */
    moon_workers_t    *s;
    pthread_t          thread;
    uint32_t           index;
    uint64_t           rng;
    moon_spin_budget_t spin; /* idle spins get shorter while they find nothing */
} worker_t;

struct moon_workers {
    moon_runtime_t  *rt;
    worker_t        *workers;
    uint32_t         n_workers;
    hwloc_topology_t topo;
    int              topo_loaded, started;
    int              yield_spin;     /* no spare core for other threads: spin with sched_yield */
    int              oversubscribed; /* more workers on this host than cores: yield even
                                        while polling the transport */
    _Atomic int stop;

    /* inject queue: FIFO through actor->next_sched */
    pthread_mutex_t  inject_lock;
    moon_actor_t    *inject_head, *inject_tail;
    _Atomic uint32_t n_inject;

    /* parking */
    pthread_mutex_t  park_lock;
    pthread_cond_t   park_cond;
    _Atomic uint32_t n_parked;
};

static _Thread_local worker_t *tls_worker;

static void wake_one(moon_workers_t *s)
{
    pthread_mutex_lock(&s->park_lock);
    pthread_cond_signal(&s->park_cond);
    pthread_mutex_unlock(&s->park_lock);
}

static void inject(moon_workers_t *s, moon_actor_t *a)
{
    pthread_mutex_lock(&s->inject_lock);
    a->next_sched = NULL;
    if (s->inject_tail != NULL) {
        s->inject_tail->next_sched = a;
    } else {
        s->inject_head = a;
    }
    s->inject_tail = a;
    /* seq_cst: with the seq_cst n_parked update in park(), either we see the
     * parked worker or it sees this actor (Dekker). */
    atomic_fetch_add(&s->n_inject, 1);
    pthread_mutex_unlock(&s->inject_lock);
    if (atomic_load(&s->n_parked) > 0) {
        wake_one(s);
    }
}

static moon_actor_t *inject_pop(moon_workers_t *s)
{
    moon_actor_t *a;

    if (atomic_load_explicit(&s->n_inject, memory_order_relaxed) == 0) {
        return NULL;
    }
    pthread_mutex_lock(&s->inject_lock);
    a = s->inject_head;
    if (a != NULL) {
        s->inject_head = a->next_sched;
        if (s->inject_head == NULL) {
            s->inject_tail = NULL;
        }
        atomic_fetch_sub(&s->n_inject, 1);
    }
    pthread_mutex_unlock(&s->inject_lock);
    return a;
}

static void sched_schedule(moon_runtime_t *rt, moon_actor_t *a)
{
    moon_workers_t *s = rt->workers;
    worker_t       *w = tls_worker;

    if (w != NULL && w->s == s) {
        if (MOON_UNLIKELY(!moon_runq_push(&w->q, a))) {
            inject(s, a);
        } else if (moon_runq_size(&w->q) >= 2 &&
                   MOON_UNLIKELY(atomic_load_explicit(&s->n_parked, memory_order_relaxed) > 0)) {
            wake_one(s); /* more work here than this worker can start now */
        }
        return;
    }
    inject(s, a);
}

static uint64_t mono_now(const moon_runtime_t *rt)
{
    struct timespec ts;

    (void)rt;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sched_timers_changed(moon_runtime_t *rt)
{
    moon_timers_kick(rt->timers);
}

const moon_exec_ops_t moon_workers_exec_ops = {
    .schedule       = sched_schedule,
    .now            = mono_now,
    .timers_changed = sched_timers_changed,
};

static moon_actor_t *steal(worker_t *w)
{
    moon_workers_t *s = w->s;
    uint32_t        start;

    if (s->n_workers < 2) {
        return NULL;
    }
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    start = (uint32_t)(w->rng % s->n_workers);
    for (uint32_t k = 0; k < s->n_workers; k++) {
        worker_t *v = &s->workers[(start + k) % s->n_workers];

        if (v != w && moon_runq_size(&v->q) >= 2) {
            moon_actor_t *a = moon_runq_pop(&v->q);
            if (a != NULL) {
                return a;
            }
        }
    }
    return NULL;
}

static int any_work(moon_workers_t *s)
{
    if (atomic_load(&s->n_inject) > 0) {
        return 1;
    }
    for (uint32_t i = 0; i < s->n_workers; i++) {
        if (moon_runq_size(&s->workers[i].q) >= 2) {
            return 1;
        }
    }
    return 0;
}

static void park(worker_t *w)
{
    moon_workers_t *s = w->s;

    pthread_mutex_lock(&s->park_lock);
    atomic_fetch_add(&s->n_parked, 1); /* seq_cst: pairs with inject() */
    if (!atomic_load(&s->stop) && !any_work(s) && moon_runq_size(&w->q) == 0) {
        pthread_cond_wait(&s->park_cond, &s->park_lock);
    }
    atomic_fetch_sub(&s->n_parked, 1);
    pthread_mutex_unlock(&s->park_lock);
}

static void pin(worker_t *w)
{
    moon_workers_t *s = w->s;
    int             n_cores;
    hwloc_obj_t     core;

    if (!s->topo_loaded || !s->rt->cfg.pin_workers) {
        return;
    }
    n_cores = hwloc_get_nbobjs_by_type(s->topo, HWLOC_OBJ_CORE);
    if (n_cores <= 0) {
        return;
    }
    core = hwloc_get_obj_by_type(s->topo, HWLOC_OBJ_CORE, w->index % (unsigned)n_cores);
    if (core == NULL || hwloc_set_cpubind(s->topo, core->cpuset, HWLOC_CPUBIND_THREAD) != 0) {
        MOON_DEBUG_LOG("worker %u: could not pin to core %u", w->index, w->index);
    }
}

static void *worker_main(void *arg)
{
    worker_t       *w     = arg;
    moon_workers_t *s     = w->s;
    uint32_t        batch = s->rt->cfg.batch;
    uint32_t        spins = 0, turns = 0;
    uint64_t        spin_start = 0;

    tls_worker = w;
    pin(w);
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
        moon_actor_t *a = NULL;

        if (MOON_UNLIKELY(++turns % INJECT_EVERY == 0)) {
            a = inject_pop(s); /* keep external work from starving */
        }
        if (a == NULL) {
            a = moon_runq_pop(&w->q);
        }
        if (a == NULL) {
            a = inject_pop(s);
        }
        if (a == NULL) {
            a = steal(w);
        }
        if (a == NULL) {
            moon_idle_fn hook = atomic_load_explicit(&s->rt->idle_hook, memory_order_acquire);

            int polled = hook != NULL ? hook(atomic_load(&s->rt->idle_ctx), 0) : 0;

            if (polled > 0) {
                if (spins > 0) {
                    moon_spin_budget_end(&w->spin, 1);
                }
                spins = 0; /* the transport delivered or sent something */
                continue;
            }
            if (++spins == 1) {
                spin_start = mono_now(s->rt);
            }
            if (spins < moon_spin_budget(&w->spin, SPIN_ROUNDS) &&
                ((spins & 63) != 0 || mono_now(s->rt) - spin_start < SPIN_MAX_NS)) {
                /* Without a spare core, let the progress and timer threads run.
                 * While a transport hook polls, the progress thread naps: the
                 * hook is the delay between polls, and a message that lands
                 * during a yield would wait for it; but when the transport's
                 * own thread is busy (polled < 0), spinning would only keep it
                 * off the core, and with more workers on the host than cores
                 * (ranks oversubscribed) it keeps the core from the rank that
                 * has the message. One pause stays: polling with none makes a
                 * shared-memory round trip slower (the poller keeps taking the
                 * FIFO's cache line from the writer). */
                if (s->yield_spin && (hook == NULL || polled < 0 || s->oversubscribed)) {
                    sched_yield();
                } else {
                    cpu_relax();
                }
            } else {
                if (hook != NULL) {
                    hook(atomic_load(&s->rt->idle_ctx), 1); /* hand progress back */
                }
                park(w);
                moon_spin_budget_end(&w->spin, 0);
                spins = 0;
            }
            continue;
        }
        if (spins > 0) {
            moon_spin_budget_end(&w->spin, 1);
        }
        spins = 0;
        if (moon_actor_run_turn(a, batch)) {
            sched_schedule(s->rt, a); /* back of our queue: FIFO fairness */
        }
    }
    tls_worker = NULL;
    moon_msg_cache_flush();
    return NULL;
}

/* Processing units this process may run on (its binding: under mpirun often
 * one core). When workers take them all, the transport's progress thread and
 * the timer thread share a core with a worker, so idle workers must yield
 * rather than spin on it. */
static uint32_t allowed_pus(moon_workers_t *s)
{
    hwloc_bitmap_t set;
    int            n = -1;

    if (!s->topo_loaded || (set = hwloc_bitmap_alloc()) == NULL) {
        return 1;
    }
    if (hwloc_get_cpubind(s->topo, set, HWLOC_CPUBIND_PROCESS) == 0) {
        n = hwloc_bitmap_weight(set);
    }
    hwloc_bitmap_free(set);
    return n > 0 ? (uint32_t)n : 1;
}

/* PUs of the whole host (1 if unknown). */
static uint32_t host_pus(moon_workers_t *s)
{
    int n = s->topo_loaded ? hwloc_get_nbobjs_by_type(s->topo, HWLOC_OBJ_PU) : 1;

    return n > 0 ? (uint32_t)n : 1;
}

/* Ranks of this job on this host (the launcher's environment; 1 outside one):
 * with mpirun --oversubscribe several ranks share the cores unbound, and a
 * worker that spins takes them from the rank that has the work. */
moon_status_t moon_workers_create(moon_runtime_t *rt, moon_workers_t **sched_p)
{
    moon_workers_t *s = moon_calloc(1, sizeof(*s));
    uint32_t        n = rt->cfg.n_workers, pus, sharing;

    if (s == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    s->rt = rt;
    if (hwloc_topology_init(&s->topo) == 0) {
        if (hwloc_topology_load(s->topo) == 0) {
            s->topo_loaded = 1;
        } else {
            hwloc_topology_destroy(s->topo);
        }
    }
    if (n == 0) {
        int cores = s->topo_loaded ? hwloc_get_nbobjs_by_type(s->topo, HWLOC_OBJ_CORE) : 0;
        n         = cores > 0 ? (uint32_t)cores : 1;
    }
    s->workers = moon_aligned_alloc(MOON_CACHE_LINE, n * sizeof(worker_t));
    if (s->workers == NULL) {
        if (s->topo_loaded) {
            hwloc_topology_destroy(s->topo);
        }
        moon_free(s);
        return MOON_ERR_NO_MEMORY;
    }
    s->n_workers = n;
    /* A rank bound to part of the host has those PUs to itself (the launcher
     * binds ranks apart); an unbound one shares them with the host's ranks. */
    pus               = allowed_pus(s);
    sharing           = pus < host_pus(s) ? 1 : moon_launcher_local_size();
    s->yield_spin     = n * sharing >= pus;
    s->oversubscribed = n * sharing > pus;
    MOON_DEBUG_LOG("scheduler: %u worker(s), %u of %u PUs, %u rank(s) sharing them%s%s", n, pus,
                   host_pus(s), sharing, s->yield_spin ? ", spin with yields" : "",
                   s->oversubscribed ? ", oversubscribed" : "");
    for (uint32_t i = 0; i < n; i++) {
        moon_runq_init(&s->workers[i].q);
        s->workers[i].s     = s;
        s->workers[i].index = i;
        s->workers[i].rng   = 0x9e3779b97f4a7c15ull * (i + 1);
    }
    pthread_mutex_init(&s->inject_lock, NULL);
    pthread_mutex_init(&s->park_lock, NULL);
    pthread_cond_init(&s->park_cond, NULL);
    *sched_p = s;
    return MOON_OK;
}

moon_status_t moon_workers_start(moon_workers_t *s)
{
    if (s->started) {
        return MOON_OK;
    }
    atomic_store(&s->stop, 0);
    for (uint32_t i = 0; i < s->n_workers; i++) {
        if (pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]) != 0) {
            MOON_ERROR("worker %u: pthread_create failed", i);
            atomic_store(&s->stop, 1);
            pthread_mutex_lock(&s->park_lock);
            pthread_cond_broadcast(&s->park_cond);
            pthread_mutex_unlock(&s->park_lock);
            for (uint32_t k = 0; k < i; k++) {
                pthread_join(s->workers[k].thread, NULL);
            }
            return MOON_ERR_NO_RESOURCE;
        }
    }
    s->started = 1;
    return MOON_OK;
}

void moon_workers_stop(moon_workers_t *s)
{
    if (s == NULL || !s->started) {
        return;
    }
    atomic_store(&s->stop, 1);
    pthread_mutex_lock(&s->park_lock);
    pthread_cond_broadcast(&s->park_cond);
    pthread_mutex_unlock(&s->park_lock);
    for (uint32_t i = 0; i < s->n_workers; i++) {
        pthread_join(s->workers[i].thread, NULL);
    }
    s->started = 0;
}

void moon_workers_destroy(moon_workers_t *s)
{
    if (s == NULL) {
        return;
    }
    moon_workers_stop(s);
    pthread_mutex_destroy(&s->inject_lock);
    pthread_mutex_destroy(&s->park_lock);
    pthread_cond_destroy(&s->park_cond);
    if (s->topo_loaded) {
        hwloc_topology_destroy(s->topo);
    }
    moon_free(s->workers);
    moon_free(s);
}

uint32_t moon_workers_n_workers(const moon_workers_t *s)
{
    return s->n_workers;
}
