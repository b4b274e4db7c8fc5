/* launch/bench_progress.h - the progress bar `moonlet bench` draws on stderr
 * while it runs, only when stderr is a terminal; redrawn at most 10 times a
 * second. Single-threaded. */
#ifndef MOON_LAUNCH_BENCH_PROGRESS_H
#define MOON_LAUNCH_BENCH_PROGRESS_H

#include <stdint.h>

typedef struct {
    /* private: */
    int      on;
    uint32_t total;
    double   drawn_s;
} moon_bench_progress_t;

/* Turns the bar on when want is set and stderr is a tty. */
void moon_bench_progress_init(moon_bench_progress_t *p, uint32_t total, int want);

/* Redraws when 0.1 s passed since the last draw (or force). */
void moon_bench_progress_update(moon_bench_progress_t *p, uint32_t done, uint32_t failed,
                                uint32_t in_flight, double elapsed_s, int force);

/* Draws the final state and ends the line. */
void moon_bench_progress_finish(moon_bench_progress_t *p, uint32_t done, uint32_t failed,
                                double elapsed_s);

#endif /* MOON_LAUNCH_BENCH_PROGRESS_H */
