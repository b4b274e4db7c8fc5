/* model/cpu/threadpool.c - spin-then-sleep worker pool (see threadpool.h). A run
 * is published by bumping a generation counter; workers count themselves done
 * on an atomic counter the caller spins on. */
#include "threadpool.h"

#include "moonlet/alloc.h"
#include "moonlet/cpu.h"
#include "moonlet/log.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

/* Pause-loop iterations before a worker sleeps / the caller starts yielding.
 * Short enough that an oversubscribed core is handed back quickly. */
#define TP_SPIN 8000
#define TP_SPIN_MAIN 1000

struct moon_tp {
    uint32_t   n;
    int        pin;
    uint32_t   first_core;
    pthread_t *threads; /* (n - 1) */
    moon_tp_fn fn;      /* written before the release on gen */
    void      *arg;
    int        stop;
    alignas(MOON_CACHE_LINE) atomic_uint_fast64_t gen;
    alignas(MOON_CACHE_LINE) atomic_uint done;
    pthread_mutex_t lock;
    pthread_cond_t  wake;
    uint32_t        n_sleeping; /* under lock */
    void           *wargs;      /* (n) worker_arg_t, owned */
};

typedef struct {
    moon_tp_t *tp;
    uint32_t   ith;
} worker_arg_t;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p)
{
    moon_tp_t *tp   = ((worker_arg_t *)p)->tp;
    uint32_t   ith  = ((worker_arg_t *)p)->ith;
    uint64_t   seen = 0;

    if (tp->pin) {
        moon_cpu_pin_self(tp->first_core + ith);
    }
    for (;;) {
        uint64_t g;
        uint32_t spins = 0;
        /* acquire: pairs with the release increment in moon_tp_run(); makes fn/arg visible */
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen) {
            if (++spins < TP_SPIN) {
                /* an occasional yield hands an oversubscribed core to whoever waits */
                if (spins % 256 == 0) {
                    sched_yield();
                } else {
                    cpu_relax();
                }
                continue;
            }
            pthread_mutex_lock(&tp->lock);
            tp->n_sleeping++;
            while (atomic_load_explicit(&tp->gen, memory_order_acquire) == seen) {
                pthread_cond_wait(&tp->wake, &tp->lock);
            }
            tp->n_sleeping--;
            pthread_mutex_unlock(&tp->lock);
            spins = 0;
        }
        seen = g;
        if (tp->stop) {
            break;
        }
        tp->fn(tp->arg, ith, tp->n);
        /* release: publishes this worker's results; pairs with the acquire in moon_tp_run() */
        atomic_fetch_add_explicit(&tp->done, 1, memory_order_release);
    }
    return NULL;
}

static void publish(moon_tp_t *tp)
{
    pthread_mutex_lock(&tp->lock);
    /* release: pairs with the acquire loads in worker_main() */
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    if (tp->n_sleeping > 0) {
        pthread_cond_broadcast(&tp->wake);
    }
    pthread_mutex_unlock(&tp->lock);
}

moon_status_t moon_tp_create(uint32_t n_threads, int pin, uint32_t first_core, moon_tp_t **tp_p)
{
    moon_tp_t    *tp;
    worker_arg_t *args;

    if (n_threads == 0 || tp_p == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    tp   = moon_calloc(1, sizeof(*tp));
    args = moon_calloc(n_threads, sizeof(*args));
    if (tp == NULL || args == NULL) {
        moon_free(tp);
        moon_free(args);
        return MOON_ERR_NO_MEMORY;
    }
    tp->n          = n_threads;
    tp->pin        = pin;
    tp->first_core = first_core;
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->done, 0);
    pthread_mutex_init(&tp->lock, NULL);
    pthread_cond_init(&tp->wake, NULL);
    tp->threads = moon_calloc(n_threads, sizeof(*tp->threads));
    if (tp->threads == NULL) {
        moon_free(args);
        moon_free(tp);
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 1; i < n_threads; i++) {
        args[i].tp  = tp;
        args[i].ith = i;
        if (pthread_create(&tp->threads[i - 1], NULL, worker_main, &args[i]) != 0) {
            MOON_ERROR("threadpool: pthread_create failed");
            tp->n    = i; /* join the ones started */
            tp->stop = 1;
            publish(tp);
            for (uint32_t j = 1; j < i; j++) {
                pthread_join(tp->threads[j - 1], NULL);
            }
            moon_free(tp->threads);
            moon_free(args);
            moon_free(tp);
            return MOON_ERR_NO_RESOURCE;
        }
    }
    tp->wargs = args;
    *tp_p     = tp;
    return MOON_OK;
}

void moon_tp_destroy(moon_tp_t *tp)
{
    if (tp == NULL) {
        return;
    }
    tp->stop = 1;
    publish(tp);
    for (uint32_t i = 1; i < tp->n; i++) {
        pthread_join(tp->threads[i - 1], NULL);
    }
    pthread_mutex_destroy(&tp->lock);
    pthread_cond_destroy(&tp->wake);
    moon_free(tp->threads);
    moon_free(tp->wargs);
    moon_free(tp);
}

uint32_t moon_tp_n(const moon_tp_t *tp)
{
    return tp->n;
}

void moon_tp_run(moon_tp_t *tp, moon_tp_fn fn, void *arg)
{
    uint32_t spins = 0;

    if (tp->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn  = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    publish(tp);
    fn(arg, 0, tp->n);
    /* acquire: pairs with the workers' release increments of done */
    while (atomic_load_explicit(&tp->done, memory_order_acquire) != tp->n - 1) {
        if (++spins < TP_SPIN_MAIN) {
            cpu_relax();
        } else {
            sched_yield();
        }
    }
}
