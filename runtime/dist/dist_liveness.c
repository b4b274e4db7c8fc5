/* runtime/dist_liveness.c - the failure detector: tells a slow rank from a
 * dead one. A rank that sends nothing (no frame, not even a heartbeat) for
 * peer_timeout is only *suspected*: logged, shown by moon_dist_peer_suspected,
 * and nothing of it is torn down, so a rank paused by SIGSTOP or starved of
 * CPU is a member as before once it is heard from again. Its loss needs a
 * confirmation:
 *   - its process, where it runs on this host, is gone: kill(pid, 0) every
 *     PROC_CHECK_NS, and once it missed a heartbeat its /proc state and start
 *     time too (a zombie, or a new process under the reused pid, is gone).
 *     This is also the fast path for a kill -9: about a heartbeat period;
 *   - the transport's own error (dist_frame_done, UCX's error callback);
 *   - a silence past the dead deadline: peer_dead_ms, at least twice
 *     peer_timeout, and at least DEAD_GAP_FACTOR times the longest silence
 *     the rank came back from (a rank that once stalled 5 s gets 20 s), for
 *     a rank on another host or a live process here that stays silent.
 * Everything here runs under the progress lock, from the tick (dist_progress.c). */
#include "dist_state.h"

#include "moonlet/log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define PROC_CHECK_NS (100 * 1000 * 1000ull) /* kill(pid, 0) of a peer here, at most this often */
#define DEAD_GAP_FACTOR 4

/* Reads a process's state letter and start time from /proc/PID/stat; 0 if
 * it cannot (no such process, or no /proc). */
static int proc_read(int64_t pid, char *state_p, uint64_t *start_p)
{
    char               path[64], line[1024];
    const char        *close;
    FILE              *f;
    unsigned long long start = 0;
    char               state = 0;
    int                ok;

    snprintf(path, sizeof(path), "/proc/%lld/stat", (long long)pid);
    if ((f = fopen(path, "r")) == NULL) {
        return 0;
    }
    ok = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    /* "pid (comm) S ppid ...": the fields follow the last ')'; starttime is
     * the 22nd field, the 20th after the state */
    if (!ok || (close = strrchr(line, ')')) == NULL ||
        sscanf(close + 1,
               " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
               "%*d %llu",
               &state, &start) != 2) {
        return 0;
    }
    *state_p = state;
    *start_p = start;
    return 1;
}

uint64_t dist_proc_start_ticks(int64_t pid)
{
    char     state;
    uint64_t start;

    return proc_read(pid, &state, &start) ? start : 0;
}

dist_proc_state_t dist_proc_state(const moon_dist_t *d, uint32_t r, int full)
{
    const dist_proc_t *p;
    char               state = 0;
    uint64_t           start = 0;

    if (d->peers == NULL || !d->peers[r].proc_check) {
        return DIST_PROC_UNKNOWN;
    }
    p = &d->procs[r];
    if (kill((pid_t)p->pid, 0) != 0 && errno == ESRCH) {
        return DIST_PROC_GONE;
    }
    if (!full) {
        return DIST_PROC_ALIVE;
    }
    /* it was readable at start: unreadable now means gone */
    if (!proc_read(p->pid, &state, &start) || state == 'Z' || state == 'X' || start != p->start) {
        return DIST_PROC_GONE;
    }
    return DIST_PROC_ALIVE;
}

void dist_liveness_start(moon_dist_t *d)
{
    for (uint32_t r = 0; r < d->size; r++) {
        dist_peer_t *p = &d->peers[r];
        char         state;
        uint64_t     start;

        p->proc_check   = 0;
        p->max_gap_ns   = 0;
        p->next_proc_ns = 0;
        atomic_store(&p->suspected, 0);
        if (r == d->rank || d->procs == NULL || d->procs[r].host != d->procs[d->rank].host ||
            d->procs[r].start == 0) {
            continue;
        }
        /* Same host name but another pid namespace (containers) would show
         * another process, or none, under that pid: then it is not checked. */
        if (proc_read(d->procs[r].pid, &state, &start) && start == d->procs[r].start) {
            p->proc_check = 1;
        } else {
            MOON_INFO("rank %u: its process %lld is not visible from here; its loss is judged "
                      "by its silence only",
                      r, (long long)d->procs[r].pid);
        }
    }
}

void dist_liveness_heard(moon_dist_t *d, uint32_t r, uint64_t now)
{
    dist_peer_t *p   = &d->peers[r];
    uint64_t     gap = now > p->last_rx_ns ? now - p->last_rx_ns : 0;

    if (gap > p->max_gap_ns) {
        p->max_gap_ns = gap;
    }
    if (atomic_load_explicit(&p->suspected, memory_order_relaxed)) {
        atomic_store(&p->suspected, 0);
        atomic_fetch_add(&d->st.peers_back, 1);
        MOON_WARN("rank %u heard from again after %llu ms of silence: still a member", r,
                  (unsigned long long)(gap / 1000000));
    }
}

/* The silence that confirms a loss without a death seen. */
static uint64_t dead_ns(const moon_dist_t *d, const dist_peer_t *p)
{
    uint64_t ns = MOON_MAX(d->peer_dead_ns, 2 * d->peer_timeout_ns);

    return MOON_MAX(ns, DEAD_GAP_FACTOR * p->max_gap_ns);
}

void dist_liveness_check(moon_dist_t *d, uint32_t r, uint64_t now)
{
    dist_peer_t *p      = &d->peers[r];
    uint64_t     silent = now > p->last_rx_ns ? now - p->last_rx_ns : 0;
    uint64_t     hb     = atomic_load_explicit(&d->hb_ns, memory_order_relaxed);

    if (p->goodbye) {
        return; /* it said goodbye: its silence is expected */
    }
    if (p->proc_check && now >= p->next_proc_ns) {
        /* the cheap look always; the full one once it missed a heartbeat */
        int full        = silent > 2 * MOON_MAX(hb, d->peer_timeout_ns / 8);
        p->next_proc_ns = now + PROC_CHECK_NS;
        if (dist_proc_state(d, r, full) == DIST_PROC_GONE) {
            MOON_WARN("rank %u: its process %lld on this host is gone (silent for %llu ms)", r,
                      (long long)d->procs[r].pid, (unsigned long long)(silent / 1000000));
            dist_peer_failed(d, r, MOON_ERR_PEER_LOST);
            return;
        }
    }
    if (silent <= d->peer_timeout_ns) {
        return;
    }
    if (!atomic_load_explicit(&p->suspected, memory_order_relaxed)) {
        atomic_store(&p->suspected, 1);
        atomic_fetch_add(&d->st.peers_suspected, 1);
        MOON_WARN("rank %u suspected: silent for %llu ms; %s, else lost after %llu ms of silence",
                  r, (unsigned long long)(silent / 1000000),
                  p->proc_check ? "lost as soon as its process on this host is gone"
                                : "lost on a transport error",
                  (unsigned long long)(dead_ns(d, p) / 1000000));
    }
    if (silent > dead_ns(d, p)) {
        dist_peer_failed(d, r, MOON_ERR_PEER_LOST);
    }
}
