/* launch/bench_progress.c - the terminal progress bar (bench_progress.h). */
#include "bench_progress.h"

#include <stdio.h>
#include <unistd.h>

#define BAR_WIDTH 30

void moon_bench_progress_init(moon_bench_progress_t *p, uint32_t total, int want)
{
    p->on      = want && isatty(STDERR_FILENO);
    p->total   = total;
    p->drawn_s = -1.0;
}

static void draw(const moon_bench_progress_t *p, uint32_t done, uint32_t failed, uint32_t in_flight,
                 double elapsed_s)
{
    char     bar[BAR_WIDTH + 1];
    uint32_t fill = p->total ? (uint32_t)((uint64_t)done * BAR_WIDTH / p->total) : BAR_WIDTH;

    for (uint32_t i = 0; i < BAR_WIDTH; i++) {
        bar[i] = i < fill ? '#' : '-';
    }
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\r[%s] %u/%u done, %u failed, %u in flight, %.1f s ", bar, done, p->total,
            failed, in_flight, elapsed_s);
    fflush(stderr);
}

void moon_bench_progress_update(moon_bench_progress_t *p, uint32_t done, uint32_t failed,
                                uint32_t in_flight, double elapsed_s, int force)
{
    if (!p->on || (!force && p->drawn_s >= 0 && elapsed_s - p->drawn_s < 0.1)) {
        return;
    }
    p->drawn_s = elapsed_s;
    draw(p, done, failed, in_flight, elapsed_s);
}

void moon_bench_progress_finish(moon_bench_progress_t *p, uint32_t done, uint32_t failed,
                                double elapsed_s)
{
    if (!p->on) {
        return;
    }
    draw(p, done, failed, 0, elapsed_s);
    fputc('\n', stderr);
}
