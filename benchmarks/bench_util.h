/* benchmarks/bench_util.h - timing, percentiles, peak RSS and one-JSON-line
 * output shared by every benchmark (STYLE §14). Single-threaded helpers,
 * except moon_bench_done_t. */
#ifndef MOON_BENCH_UTIL_H
#define MOON_BENCH_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Monotonic clock in nanoseconds. */
uint64_t moon_bench_now_ns(void);

/* Peak resident set size of this process so far, MiB (getrusage ru_maxrss). */
double moon_bench_peak_rss_mib(void);

/* Sorts samples in place and returns the p-th percentile (0..100). */
double moon_bench_percentile(double *samples, size_t n, double p);

/* A JSON line built field by field: moon_bench_json_begin(), then _str/_int/
 * _num for each field, then _end() prints it to stdout with a newline. */
typedef struct {
    char   buf[2048];
    size_t len;
} moon_bench_json_t;

void moon_bench_json_begin(moon_bench_json_t *j);
void moon_bench_json_str(moon_bench_json_t *j, const char *key, const char *val);
void moon_bench_json_int(moon_bench_json_t *j, const char *key, int64_t val);
void moon_bench_json_num(moon_bench_json_t *j, const char *key, double val);
/* "key": null (a figure that has no value, e.g. a ratio over a 0 anchor). */
void moon_bench_json_null(moon_bench_json_t *j, const char *key);
void moon_bench_json_end(moon_bench_json_t *j);

/* Rounds that alternate anchor and measurement in one process: each round's
 * ratio is measured / anchor of the pair that ran back to back (the load they
 * shared cancels); the line reports the median round's ratio with its min and
 * max. A round whose anchor is 0 has no ratio; with none, the ratio is null.
 * Zero-initialise, then _add() per round (at most MOON_BENCH_MAX_ROUNDS). */
#define MOON_BENCH_MAX_ROUNDS 64
typedef struct {
    double ratio[MOON_BENCH_MAX_ROUNDS]; /* the rounds that have one */
    double sum_v, sum_a;                 /* for the means */
    int    n, n_ratio;
} moon_bench_rounds_t;

void moon_bench_rounds_add(moon_bench_rounds_t *r, double measured, double anchor);
/* Mean over rounds of the measured figure, and of the anchor (0 if none). */
double moon_bench_rounds_mean(const moon_bench_rounds_t *r);
double moon_bench_rounds_anchor_mean(const moon_bench_rounds_t *r);
/* Median round ratio, or NAN when no round had one. */
double moon_bench_rounds_median(moon_bench_rounds_t *r);
/* Adds "ratio" (the median; kept for the lines' old readers), "ratio_median",
 * "ratio_min", "ratio_max" (null without a ratio) and "rounds". */
void moon_bench_rounds_json(moon_bench_rounds_t *r, moon_bench_json_t *j);

/* Integer from argv "--name=value" or the environment variable, else dflt. */
int64_t     moon_bench_arg_int(int argc, char **argv, const char *name, int64_t dflt);
const char *moon_bench_arg_str(int argc, char **argv, const char *name, const char *dflt);

/* Sleeps *nap_us, then doubles it up to 16 ms: a thread waiting on something
 * it must poll (an MPI request) wakes ~60 times a second once the wait is
 * long, and a short wait still ends within twice its length. */
void moon_bench_backoff_nap(uint32_t *nap_us);

/* The end of a measured phase, set by an actor, waited for by the main
 * thread. The waiter blocks instead of polling with naps: on a 2-core
 * machine every wake-up of an idle main thread takes the core from a worker
 * for ~10 us (such wake-ups, with the progress threads', put a shared-memory
 * round trip's mean a quarter above its median). The setter stamps the time,
 * so a late wake-up is not measured. Statically initialised with
 * MOON_BENCH_DONE_INIT. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    int             done;
    uint64_t        t_ns; /* moon_bench_now_ns() at the set */
} moon_bench_done_t;
#define MOON_BENCH_DONE_INIT                                                                       \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0                                  \
    }

/* Clears d before the phase starts (nobody may wait on it then). */
void moon_bench_done_reset(moon_bench_done_t *d);
/* Any thread: marks the phase ended, stamps the time, wakes the waiter. */
void moon_bench_done_set(moon_bench_done_t *d);
/* 0 once set (its time in *t_ns when not NULL), -1 once timeout_ns have
 * passed on the monotonic clock. */
int moon_bench_done_wait(moon_bench_done_t *d, uint64_t timeout_ns, uint64_t *t_ns);

#endif /* MOON_BENCH_UTIL_H */
