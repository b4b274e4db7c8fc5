/* actors/instance/engine_runner.c - the engine thread of a serving instance: a
 * one-slot hand-off under a mutex (one job at a time; the owner waits for its
 * completion message before the next), completions sent as messages. */
#define _GNU_SOURCE
#include "engine_runner.h"

#include "moonlet/alloc.h"
#include "moonlet/cpu.h"
#include "moonlet/log.h"
#include "moonlet/serve_msgs.h"
#include "timer_kinds.h"

#include <pthread.h>
#include <stdatomic.h>

/* Spin iterations (about 20 us) before the engine thread sleeps. */
#define RUNNER_SPIN 4000u

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct moon_engine_runner {
    moon_runtime_t    *rt;
    moon_addr_t        owner;
    int                threaded;
    int32_t            core;
    pthread_t          thread;
    pthread_mutex_t    lock;
    pthread_cond_t     cond;
    int                quit;    /* under lock */
    int                pending; /* a job handed over, not yet taken (under lock) */
    _Atomic int        posted;  /* pending, for the spin before the wait (no lock) */
    int                busy;    /* owner's view: submitted, completion not read */
    moon_engine_job_fn fn;
    void              *arg;
    uint64_t           job;
    /* inline: the last job's result, delivered with its timer */
    moon_status_t inline_status;
    double        inline_duration_s;
};

static void send_done(moon_engine_runner_t *r, uint64_t job, moon_status_t status, double dur_s)
{
    moon_serve_engine_done_t *m = moon_msg_new(MOON_MSG_SERVE_ENGINE_DONE, 0);

    /* Nothing else can tell the owner its job ended: a lost completion would
     * hang the instance, so running out of memory here is fatal. */
    MOON_CHECK(m != NULL);
    m->job        = job;
    m->status     = status;
    m->duration_s = dur_s;
    if (moon_runtime_send(r->rt, r->owner, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr); /* the owner is gone: nobody waits */
    }
}

static void *runner_main(void *p)
{
    moon_engine_runner_t *r = p;

    if (r->core >= 0) {
        moon_cpu_pin_self((uint32_t)r->core);
    }
    for (;;) {
        /* A decode batch's next step is submitted as soon as its completion
         * is handled: spin a little before sleeping, so a short step does not
         * pay a wake-up each time. acquire: pairs with the release in submit. */
        for (uint32_t i = 0;
             i < RUNNER_SPIN && !atomic_load_explicit(&r->posted, memory_order_acquire); i++) {
            cpu_relax();
        }
        pthread_mutex_lock(&r->lock);
        while (!r->pending && !r->quit) {
            pthread_cond_wait(&r->cond, &r->lock);
        }
        if (!r->pending) {
            pthread_mutex_unlock(&r->lock);
            break; /* quit with nothing left to run */
        }
        r->pending = 0;
        atomic_store_explicit(&r->posted, 0, memory_order_relaxed); /* under the lock */
        moon_engine_job_fn fn  = r->fn;
        void              *arg = r->arg;
        uint64_t           job = r->job;
        pthread_mutex_unlock(&r->lock);
        double        dur    = 0.0;
        moon_status_t status = fn(arg, &dur);
        send_done(r, job, status, dur);
    }
    moon_msg_cache_flush();
    return NULL;
}

moon_status_t moon_engine_runner_create(moon_runtime_t *rt, moon_addr_t owner, int threaded,
                                        int32_t core, moon_engine_runner_t **runner_p)
{
    moon_engine_runner_t *r = moon_calloc(1, sizeof(*r));

    if (r == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    r->rt       = rt;
    r->owner    = owner;
    r->threaded = threaded;
    r->core     = core;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    if (threaded && pthread_create(&r->thread, NULL, runner_main, r) != 0) {
        MOON_ERROR("engine runner: pthread_create failed");
        pthread_cond_destroy(&r->cond);
        pthread_mutex_destroy(&r->lock);
        moon_free(r);
        return MOON_ERR_IO;
    }
    *runner_p = r;
    return MOON_OK;
}

void moon_engine_runner_destroy(moon_engine_runner_t *r)
{
    if (r == NULL) {
        return;
    }
    if (r->threaded) {
        pthread_mutex_lock(&r->lock);
        r->quit = 1;
        pthread_cond_signal(&r->cond);
        pthread_mutex_unlock(&r->lock);
        pthread_join(r->thread, NULL);
    }
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    moon_free(r);
}

moon_status_t moon_engine_runner_submit(moon_engine_runner_t *r, moon_actor_t *self,
                                        moon_engine_job_fn fn, void *arg, uint64_t job)
{
    if (r->busy) {
        return MOON_ERR_NO_RESOURCE;
    }
    r->busy = 1;
    if (!r->threaded) {
        uint64_t timer;

        r->job           = job;
        r->inline_status = fn(arg, &r->inline_duration_s);
        /* virtual time passes by the modeled duration before the completion */
        return moon_timer_start_kind(self, MOON_TIMER_KIND_ENGINE_RUNNER,
                                     (uint64_t)(r->inline_duration_s * 1e9), 0, job, &timer);
    }
    pthread_mutex_lock(&r->lock);
    r->fn      = fn;
    r->arg     = arg;
    r->job     = job;
    r->pending = 1;
    /* release: publishes the job to the spinning thread; pairs with its acquire */
    atomic_store_explicit(&r->posted, 1, memory_order_release);
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return MOON_OK;
}

int moon_engine_runner_threaded(const moon_engine_runner_t *r)
{
    return r->threaded;
}

int moon_engine_runner_busy(const moon_engine_runner_t *r)
{
    return r->busy;
}

int moon_engine_runner_done(moon_engine_runner_t *r, const moon_msg_hdr_t *msg, uint64_t *job_p,
                            moon_status_t *status_p, double *duration_s_p)
{
    if (msg->type == MOON_MSG_SERVE_ENGINE_DONE && r->threaded) {
        const moon_serve_engine_done_t *m = (const void *)msg;

        *job_p        = m->job;
        *status_p     = m->status;
        *duration_s_p = m->duration_s;
    } else if (msg->type == MOON_MSG_SYS_TIMER && !r->threaded &&
               ((const moon_sys_timer_t *)msg)->kind == MOON_TIMER_KIND_ENGINE_RUNNER) {
        *job_p        = r->job;
        *status_p     = r->inline_status;
        *duration_s_p = r->inline_duration_s;
    } else {
        return 0;
    }
    r->busy = 0;
    return 1;
}
