/* runtime/core/runtime.c - runtime lifecycle: configuration, creation of the actor
 * table, names, timers and executor; run, wait, shutdown, teardown. */
#include "runtime_internal.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <math.h>

void moon_runtime_config_default(moon_runtime_config_t *cfg)
{
    *cfg = (moon_runtime_config_t){
        .n_workers     = 0,
        .pin_workers   = 1,
        .batch         = 100,
        .mailbox_bound = 1024,
        .max_actors    = 1u << 20,
        .rank          = 0,
        .deterministic = 0,
        .seed          = 1,
    };
}

moon_status_t moon_runtime_create(const moon_runtime_config_t *cfg, moon_runtime_t **rt_p)
{
    moon_runtime_t *rt;
    moon_status_t   status;

    if (cfg == NULL || cfg->batch == 0 || cfg->mailbox_bound < 2 || cfg->max_actors < 2 ||
        cfg->max_actors > (1u << ADDR_SLOT_BITS) || cfg->rank >= (1u << ADDR_RANK_BITS) ||
        !(cfg->sim_bytes_per_s == 0.0 || cfg->sim_bytes_per_s >= 1.0) ||
        !isfinite(cfg->sim_bytes_per_s)) { /* >= 1 B/s: a message's ns fit 64 bits */
        MOON_ERROR("runtime: invalid configuration");
        return MOON_ERR_INVALID_PARAM;
    }
    status = moon_sys_msgs_register();
    if (status != MOON_OK) {
        return status;
    }
    rt = moon_calloc(1, sizeof(*rt));
    if (rt == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    rt->cfg = *cfg;
    status  = MOON_ERR_NO_MEMORY;
    /* calloc: untouched entries cost no resident memory. */
    rt->slots      = moon_calloc(cfg->max_actors, sizeof(*rt->slots));
    rt->free_slots = moon_calloc(cfg->max_actors, sizeof(*rt->free_slots));
    if (rt->slots == NULL || rt->free_slots == NULL) {
        goto err_free;
    }
    pthread_mutex_init(&rt->slot_lock, NULL);
    pthread_mutex_init(&rt->done_lock, NULL);
    pthread_cond_init(&rt->done_cond, NULL);
    status = moon_names_create(&rt->names);
    if (status != MOON_OK) {
        goto err_locks;
    }
    status = moon_timers_create(rt, &rt->timers);
    if (status != MOON_OK) {
        goto err_names;
    }
    if (cfg->deterministic) {
        rt->exec = &moon_detexec_exec_ops;
        status   = moon_detexec_create(rt, &rt->detexec);
    } else {
        rt->exec = &moon_workers_exec_ops;
        status   = moon_workers_create(rt, &rt->workers);
    }
    if (status != MOON_OK) {
        goto err_timers;
    }
    moon_log_set_rank((int)cfg->rank);
    *rt_p = rt;
    return MOON_OK;

err_timers:
    moon_timers_destroy(rt->timers);
err_names:
    moon_names_destroy(rt->names);
err_locks:
    pthread_mutex_destroy(&rt->slot_lock);
    pthread_mutex_destroy(&rt->done_lock);
    pthread_cond_destroy(&rt->done_cond);
err_free:
    moon_free(rt->slots);
    moon_free(rt->free_slots);
    moon_free(rt);
    return status;
}

void moon_runtime_destroy(moon_runtime_t *rt)
{
    if (rt == NULL) {
        return;
    }
    moon_timers_stop_thread(rt->timers);
    moon_workers_stop(rt->workers); /* joins workers; fini below may still schedule */
    moon_actors_destroy_all(rt);
    moon_workers_destroy(rt->workers);
    moon_detexec_destroy(rt->detexec);
    moon_timers_destroy(rt->timers);
    moon_names_destroy(rt->names);
    pthread_mutex_destroy(&rt->slot_lock);
    pthread_mutex_destroy(&rt->done_lock);
    pthread_cond_destroy(&rt->done_cond);
    moon_free(rt->slots);
    moon_free(rt->free_slots);
    moon_free(rt);
}

void moon_rt_note_maybe_done(moon_runtime_t *rt)
{
    pthread_mutex_lock(&rt->done_lock);
    pthread_cond_broadcast(&rt->done_cond);
    pthread_mutex_unlock(&rt->done_lock);
}

void moon_runtime_shutdown(moon_runtime_t *rt, int code)
{
    pthread_mutex_lock(&rt->done_lock);
    if (!atomic_load(&rt->shutdown_requested)) {
        rt->shutdown_code = code;
        atomic_store(&rt->shutdown_requested, 1);
    }
    pthread_cond_broadcast(&rt->done_cond);
    pthread_mutex_unlock(&rt->done_lock);
}

moon_status_t moon_runtime_start(moon_runtime_t *rt)
{
    moon_status_t status;

    if (rt->workers == NULL) {
        return MOON_ERR_INVALID_PARAM; /* the deterministic executor runs in run/step */
    }
    status = moon_workers_start(rt->workers);
    if (status == MOON_OK && moon_timers_start_thread(rt->timers) != MOON_OK) {
        moon_workers_stop(rt->workers);
        status = MOON_ERR_NO_RESOURCE;
    }
    return status;
}

int moon_runtime_wait(moon_runtime_t *rt)
{
    int code;

    pthread_mutex_lock(&rt->done_lock);
    while (!atomic_load(&rt->shutdown_requested) && atomic_load(&rt->n_alive) > 0) {
        pthread_cond_wait(&rt->done_cond, &rt->done_lock);
    }
    code = rt->shutdown_code;
    atomic_store(&rt->shutdown_requested, 0); /* the runtime can be run again */
    rt->shutdown_code = 0;
    pthread_mutex_unlock(&rt->done_lock);
    moon_timers_stop_thread(rt->timers);
    moon_workers_stop(rt->workers);
    return code;
}

int moon_runtime_run(moon_runtime_t *rt)
{
    if (rt->detexec != NULL) {
        int code;

        moon_detexec_run(rt->detexec, 0);
        code              = rt->shutdown_code;
        rt->shutdown_code = 0;
        atomic_store(&rt->shutdown_requested, 0);
        return code;
    }
    if (moon_runtime_start(rt) != MOON_OK) {
        return -1;
    }
    return moon_runtime_wait(rt);
}

uint64_t moon_runtime_step(moon_runtime_t *rt, uint64_t n)
{
    return rt->detexec != NULL ? moon_detexec_run(rt->detexec, n) : 0;
}

uint64_t moon_now(const moon_runtime_t *rt)
{
    return rt->exec->now(rt);
}

void moon_runtime_stats(moon_runtime_t *rt, moon_runtime_stats_t *stats_p)
{
    stats_p->n_actors_alive = atomic_load(&rt->n_alive);
    stats_p->n_dead_letters = atomic_load(&rt->n_dead_letters);
    stats_p->n_dispatched   = moon_actors_processed(rt);
    stats_p->n_timers       = moon_timers_count(rt->timers);
    stats_p->n_workers      = rt->workers != NULL ? moon_workers_n_workers(rt->workers) : 1;
}
