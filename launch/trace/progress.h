/* launch/trace/progress.h - a one-line progress bar on stderr while a replay runs,
 * drawn only when stderr is a terminal (never into logs or pipes), redrawn
 * when the shown thousandth changes. Single-threaded. */
#ifndef MOON_LAUNCH_PROGRESS_H
#define MOON_LAUNCH_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int      fd; /* where it draws; -1: disabled */
    uint64_t total;
    int      shown; /* last thousandth drawn; -1: none yet */
} moon_progress_t;

/* Enabled when fd is a terminal (force: always, for tests). */
void moon_progress_init(moon_progress_t *p, int fd, uint64_t total, int force);
/* done of total requests finished at virtual time sim_s. */
void moon_progress_update(moon_progress_t *p, uint64_t done, double sim_s);
/* Ends the line (a newline) if anything was drawn. */
void moon_progress_finish(moon_progress_t *p);
/* The bar's text ("\r[#####.....]  50.0% 2/4 requests, t 12.3 s"); returns
 * its length (snprintf's). */
int moon_progress_format(char *buf, size_t n, uint64_t done, uint64_t total, double sim_s);

#endif /* MOON_LAUNCH_PROGRESS_H */
