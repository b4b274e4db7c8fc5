/* model/cpu/threadpool.h - a fixed pool of worker threads for the fast CPU path.
 * moon_tp_run() runs fn(arg, ith, nth) on every thread (the caller is ith 0)
 * and returns when all are done. Workers spin briefly between runs, then
 * sleep on a condition variable. One thread drives a pool at a time. */
#ifndef MOON_MODEL_THREADPOOL_H
#define MOON_MODEL_THREADPOOL_H

#include "moonlet/status.h"

typedef void (*moon_tp_fn)(void *arg, uint32_t ith, uint32_t nth);
typedef struct moon_tp moon_tp_t;

/* n_threads >= 1 (1: no workers, runs inline). pin: worker i is bound to
 * core first_core + i (wrapping; the caller is thread 0). */
moon_status_t moon_tp_create(uint32_t n_threads, int pin, uint32_t first_core, moon_tp_t **tp_p);
void          moon_tp_destroy(moon_tp_t *tp); /* NULL: no-op; joins the workers */
uint32_t      moon_tp_n(const moon_tp_t *tp);
void          moon_tp_run(moon_tp_t *tp, moon_tp_fn fn, void *arg);

#endif /* MOON_MODEL_THREADPOOL_H */
