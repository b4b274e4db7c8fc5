/* benchmarks/bench_util.c - see bench_util.h. */
#include "bench_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

uint64_t moon_bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double moon_bench_peak_rss_mib(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* ru_maxrss is KiB on Linux */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double moon_bench_percentile(double *samples, size_t n, double p)
{
    size_t idx;

    if (n == 0) {
        return 0.0;
    }
    qsort(samples, n, sizeof(*samples), cmp_double);
    idx = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return samples[idx < n ? idx : n - 1];
}

static void json_raw(moon_bench_json_t *j, const char *fmt, const char *key, const char *val)
{
    int n;

    if (j->len >= sizeof(j->buf)) {
        return;
    }
    n = snprintf(j->buf + j->len, sizeof(j->buf) - j->len, fmt, j->len > 1 ? ", " : "", key, val);
    if (n > 0) {
        j->len += (size_t)n;
    }
}

void moon_bench_json_begin(moon_bench_json_t *j)
{
    j->buf[0] = '{';
    j->buf[1] = '\0';
    j->len    = 1;
}

void moon_bench_json_str(moon_bench_json_t *j, const char *key, const char *val)
{
    json_raw(j, "%s\"%s\": \"%s\"", key, val);
}

void moon_bench_json_int(moon_bench_json_t *j, const char *key, int64_t val)
{
    char num[32];

    snprintf(num, sizeof(num), "%lld", (long long)val);
    json_raw(j, "%s\"%s\": %s", key, num);
}

void moon_bench_json_num(moon_bench_json_t *j, const char *key, double val)
{
    char num[48];

    snprintf(num, sizeof(num), "%.6g", val);
    json_raw(j, "%s\"%s\": %s", key, num);
}

void moon_bench_json_null(moon_bench_json_t *j, const char *key)
{
    json_raw(j, "%s\"%s\": %s", key, "null");
}

void moon_bench_rounds_add(moon_bench_rounds_t *r, double measured, double anchor)
{
    if (r->n >= MOON_BENCH_MAX_ROUNDS) {
        return;
    }
    r->n++;
    r->sum_v += measured;
    r->sum_a += anchor;
    if (anchor > 0) {
        r->ratio[r->n_ratio++] = measured / anchor;
    }
}

double moon_bench_rounds_mean(const moon_bench_rounds_t *r)
{
    return r->n > 0 ? r->sum_v / r->n : 0.0;
}

double moon_bench_rounds_anchor_mean(const moon_bench_rounds_t *r)
{
    return r->n > 0 ? r->sum_a / r->n : 0.0;
}

double moon_bench_rounds_median(moon_bench_rounds_t *r)
{
    if (r->n_ratio == 0) {
        return NAN;
    }
    qsort(r->ratio, (size_t)r->n_ratio, sizeof(double), cmp_double);
    return r->ratio[r->n_ratio / 2];
}

void moon_bench_rounds_json(moon_bench_rounds_t *r, moon_bench_json_t *j)
{
    double med = moon_bench_rounds_median(r); /* sorts */

    if (r->n_ratio == 0) {
        moon_bench_json_null(j, "ratio");
        moon_bench_json_null(j, "ratio_median");
        moon_bench_json_null(j, "ratio_min");
        moon_bench_json_null(j, "ratio_max");
    } else {
        moon_bench_json_num(j, "ratio", med);
        moon_bench_json_num(j, "ratio_median", med);
        moon_bench_json_num(j, "ratio_min", r->ratio[0]);
        moon_bench_json_num(j, "ratio_max", r->ratio[r->n_ratio - 1]);
    }
    moon_bench_json_int(j, "rounds", r->n);
}

void moon_bench_json_end(moon_bench_json_t *j)
{
    printf("%.*s}\n", (int)j->len, j->buf);
    fflush(stdout);
}

const char *moon_bench_arg_str(int argc, char **argv, const char *name, const char *dflt)
{
    size_t      len = strlen(name);
    const char *env;

    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) == 0 && strncmp(argv[i] + 2, name, len) == 0 &&
            argv[i][2 + len] == '=') {
            return argv[i] + 3 + len;
        }
    }
    env = getenv(name);
    return env != NULL ? env : dflt;
}

int64_t moon_bench_arg_int(int argc, char **argv, const char *name, int64_t dflt)
{
    const char *s = moon_bench_arg_str(argc, argv, name, NULL);

    return s != NULL ? strtoll(s, NULL, 0) : dflt;
}

void moon_bench_done_reset(moon_bench_done_t *d)
{
    pthread_mutex_lock(&d->lock);
    d->done = 0;
    pthread_mutex_unlock(&d->lock);
}

void moon_bench_done_set(moon_bench_done_t *d)
{
    uint64_t t = moon_bench_now_ns();

    pthread_mutex_lock(&d->lock);
    d->done = 1;
    d->t_ns = t;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

int moon_bench_done_wait(moon_bench_done_t *d, uint64_t timeout_ns, uint64_t *t_ns)
{
    uint64_t end = moon_bench_now_ns() + timeout_ns, now;
    int      done;

    pthread_mutex_lock(&d->lock);
    /* The condvar times out on the wall clock, which may jump: each wait is
     * a second at most, and the deadline is the monotonic clock's. */
    while (!d->done && (now = moon_bench_now_ns()) < end) {
        uint64_t        ns = end - now < 1000000000ull ? end - now : 1000000000ull;
        struct timespec until;

        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)ns;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&d->cond, &d->lock, &until);
    }
    done = d->done;
    if (done && t_ns != NULL) {
        *t_ns = d->t_ns;
    }
    pthread_mutex_unlock(&d->lock);
    return done ? 0 : -1;
}

void moon_bench_backoff_nap(uint32_t *nap_us)
{
    struct timespec ts = {0, (long)*nap_us * 1000};

    nanosleep(&ts, NULL);
    *nap_us = *nap_us < 8000 ? *nap_us * 2 : 16000;
}
