/* launch/trace/progress.c - the replay's progress bar (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BAR_WIDTH 30

void moon_progress_init(moon_progress_t *p, int fd, uint64_t total, int force)
{
    p->fd    = (force || isatty(fd)) ? fd : -1;
    p->total = total;
    p->shown = -1;
}

int moon_progress_format(char *buf, size_t n, uint64_t done, uint64_t total, double sim_s)
{
    double frac = total ? (double)(done > total ? total : done) / (double)total : 1.0;
    int    fill = (int)(frac * BAR_WIDTH);
    char   bar[BAR_WIDTH + 1];

    memset(bar, '#', (size_t)fill);
    memset(bar + fill, '.', (size_t)(BAR_WIDTH - fill));
    bar[BAR_WIDTH] = '\0';
    return snprintf(buf, n, "\r[%s] %5.1f%% %llu/%llu requests, t %.1f s", bar, frac * 100.0,
                    (unsigned long long)done, (unsigned long long)total, sim_s);
}

void moon_progress_update(moon_progress_t *p, uint64_t done, double sim_s)
{
    char buf[160];
    int  k, len;

    if (p->fd < 0) {
        return;
    }
    k = p->total ? (int)((done > p->total ? p->total : done) * 1000 / p->total) : 1000;
    if (k == p->shown) {
        return;
    }
    p->shown = k;
    len      = moon_progress_format(buf, sizeof(buf), done, p->total, sim_s);
    if (len > 0 &&
        write(p->fd, buf, (size_t)len < sizeof(buf) ? (size_t)len : sizeof(buf) - 1) < 0) {
        p->fd = -1; /* stderr is gone: stop drawing */
    }
}

void moon_progress_finish(moon_progress_t *p)
{
    if (p->fd >= 0 && p->shown >= 0 && write(p->fd, "\n", 1) < 0) {
        p->fd = -1;
    }
}
