/* benchmarks/bench_util.h - timing, percentiles, peak RSS and one-JSON-line
 * output shared by every benchmark (STYLE §14). Single-threaded helpers. */
#ifndef MOON_BENCH_UTIL_H
#define MOON_BENCH_UTIL_H

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
void moon_bench_json_end(moon_bench_json_t *j);

/* Integer from argv "--name=value" or the environment variable, else dflt. */
int64_t moon_bench_arg_int(int argc, char **argv, const char *name, int64_t dflt);
const char *moon_bench_arg_str(int argc, char **argv, const char *name, const char *dflt);

#endif /* MOON_BENCH_UTIL_H */
