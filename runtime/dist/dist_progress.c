/* runtime/dist/dist_progress.c - the progress thread: passes over the engine and
 * the ready peers, ticks (heartbeats, credits, peer timeouts), and its
 * handshakes: senders mark a peer ready and wake it through an eventfd;
 * idle workers take the progress lock and run passes themselves. */
#define _GNU_SOURCE /* ppoll */
#include "dist_core.h"
#include "spin_budget.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- wake-ups ------------------------------------------------------------- */
void dist_wake(moon_dist_t *d)
{
    uint64_t one = 1;

    /* seq_cst: pairs with the store of `sleeping` and the re-check of the
     * queues before the progress thread sleeps (Dekker). */
    if (atomic_load(&d->sleeping)) {
        ssize_t ret = write(d->wake_fd, &one, sizeof(one));
        (void)ret;
    }
}

void dist_mark_ready(moon_dist_t *d, uint32_t r)
{
    atomic_fetch_or(&d->ready[r / 64], 1ull << (r % 64));
}

/* ---- the progress thread -------------------------------------------------- */
static void tick(moon_dist_t *d, uint64_t now)
{
    /* If this thread itself got no CPU for a while, the silence of the peers
     * says nothing about them: restart their clocks instead of losing them. */
    if (d->last_tick_ns != 0 && now - d->last_tick_ns > d->peer_timeout_ns / 4) {
        MOON_WARN("progress thread stalled for %llu ms: peer clocks restarted",
                  (unsigned long long)((now - d->last_tick_ns) / 1000000));
        for (uint32_t r = 0; r < d->size; r++) {
            d->peers[r].last_rx_ns = now;
        }
    }
    d->last_tick_ns = now;
    for (uint32_t r = 0; r < d->size; r++) {
        dist_peer_t *p = &d->peers[r];

        if (r == d->rank) {
            continue;
        }
        if (atomic_load_explicit(&p->down, memory_order_relaxed)) {
            if (atomic_load_explicit(&p->queued, memory_order_relaxed) > 0) {
                dist_fail_queue(d, r); /* sends that raced with the loss */
            }
            continue;
        }
        if (p->rx_frames != p->rx_seen) { /* heard from since the last tick */
            dist_liveness_heard(d, r, now);
            p->rx_seen    = p->rx_frames;
            p->last_rx_ns = now;
        }
        if (p->owed > 0) {
            dist_send_small_frame(d, r, FRAME_CREDIT);
        }
        if (p->tx_frames != p->tx_seen) {
            p->tx_seen    = p->tx_frames;
            p->last_tx_ns = now;
        }
        if (now - p->last_tx_ns >= atomic_load_explicit(&d->hb_ns, memory_order_relaxed)) {
            dist_send_small_frame(
                d, r, atomic_load(&d->saying_goodbye) ? FRAME_GOODBYE : FRAME_HEARTBEAT);
        }
        dist_liveness_check(d, r, now); /* suspicion; loss once confirmed */
    }
}

static int work_pending(moon_dist_t *d)
{
    for (uint32_t w = 0; w < d->n_ready_words; w++) {
        if (atomic_load(&d->ready[w]) != 0) {
            return 1;
        }
    }
    return atomic_load(&d->cmd_pending) || d->n_open > 0 || d->n_held > 0;
}

/* The progress lock: a flag, not a mutex, because idle workers try it on
 * every idle pass. acquire pairs with the release in dist_progress_unlock(), so
 * each holder sees the progress state its predecessor left. */
int dist_progress_trylock(moon_dist_t *d)
{
    return atomic_load_explicit(&d->progress_busy, memory_order_relaxed) == 0 &&
           atomic_exchange_explicit(&d->progress_busy, 1, memory_order_acquire) == 0;
}

/* Blocking, for the progress thread and stop: workers that poll take the lock
 * again right after each pass, so the waiter announces itself and they stay
 * off it until it is through (a progress thread starved for a second missed
 * its heartbeats while a worker drove a tcp transfer). */
void dist_progress_lock(moon_dist_t *d)
{
    if (dist_progress_trylock(d)) {
        return;
    }
    atomic_fetch_add(&d->progress_wanted, 1);
    for (uint32_t i = 0; !dist_progress_trylock(d); i++) {
        /* held for one pass by a worker: yield to it, and if it does not
         * come back soon (it lost its core), sleep instead of spinning */
        if (i < 64) {
            sched_yield();
        } else {
            nanosleep(&(struct timespec){0, 50000}, NULL);
        }
    }
    atomic_fetch_sub(&d->progress_wanted, 1);
}

void dist_progress_unlock(moon_dist_t *d)
{
    atomic_store_explicit(&d->progress_busy, 0, memory_order_release);
}

static int sends_ready(moon_dist_t *d)
{
    for (uint32_t w = 0; w < d->n_ready_words; w++) {
        if (atomic_load_explicit(&d->ready[w], memory_order_relaxed) != 0) {
            return 1;
        }
    }
    return 0;
}

enum {
    PASS_CLOCK  = 1, /* also the clock-driven work (heartbeats, timeouts) */
    PASS_WORKER = 2, /* run by an idle worker (else by the progress thread) */
};

/* One pass over the engine and the queues, under the progress lock (the
 * progress thread or an idle worker). The clock is read under the lock,
 * after the pass's own work: a `now` older than a peer's last_rx_ns would
 * make the peer look silent for 2^64 ns. */
static int progress_pass(moon_dist_t *d, unsigned flags, int *busy_p)
{
    int      n = 0, with_clock = (flags & PASS_CLOCK) != 0;
    uint64_t now;

    /* sends first: what a turn just queued leaves before anything else */
    n += dist_pump_sends(d);
    /* One engine call from a worker: what it delivered runs on this worker
     * only after the pass. The progress thread drives the engine a few times
     * but stops for queued sends. One call may take milliseconds (over tcp,
     * answering a peer's bulk get fills a socket); sixteen in a row held a
     * reply back for tens of them. */
    for (int i = 0; i < ((flags & PASS_WORKER) ? 1 : 16); i++) {
        int k = d->eng->progress(d);
        n += k;
        if (k == 0 || sends_ready(d)) {
            break;
        }
    }
    if (d->n_held > 0) {
        n += dist_release_held(d);
    }
    n += dist_bulk_pump(d);
    /* The clock after the work above (tick() stamps what it counted with it). */
    now = with_clock ? dist_peer_clock_ns() : 0;
    if (with_clock && now >= d->next_tick_ns) {
        tick(d, now);
        d->next_tick_ns = now + TICK_NS;
    }
    *busy_p = d->n_open > 0 || d->n_held > 0;
    return n;
}

/* The runtime's idle hook: an idle worker runs a pass itself, so what
 * arrives is handled on that worker without a thread hand-off. */
int dist_worker_poll(void *ctx, int parking)
{
    moon_dist_t *d = ctx;
    int          n = 0, busy;

    if (parking) {
        atomic_store(&d->worker_polled, 0);
        /* the progress thread takes over now (unless stop closes its fd):
         * the count, then napping; nap() sets napping, then reads the count */
        atomic_fetch_add(&d->parks, 1);
        if (atomic_load(&d->napping) && !atomic_load(&d->closing)) {
            uint64_t one = 1;
            ssize_t  ret = write(d->wake_fd, &one, sizeof(one));
            (void)ret;
        }
        return 0;
    }
    atomic_store_explicit(&d->worker_polled, 1, memory_order_relaxed); /* no clock: hot */
    if (atomic_load_explicit(&d->progress_wanted, memory_order_relaxed) ||
        !dist_progress_trylock(d)) {
        return -1; /* the progress thread is in a pass, or waits for one */
    }
    if (atomic_load(&d->closing)) {
        dist_progress_unlock(d);
        return 0;
    }
    n = progress_pass(d, PASS_WORKER, &busy);
    dist_progress_unlock(d);
    return n;
}

/* An idle worker ran a pass since the last look (the progress thread looks
 * once per nap, 1-4 ms): the workers drive progress. */
static int worker_polling(moon_dist_t *d)
{
    return atomic_exchange_explicit(&d->worker_polled, 0, memory_order_relaxed);
}

static void drain_wake_fd(moon_dist_t *d)
{
    uint64_t v;
    ssize_t  rr = read(d->wake_fd, &v, sizeof(v));

    (void)rr;
}

/* Sleeps up to ms milliseconds, or until woken: a parking worker hands
 * progress back through the wake fd while `napping` is set. parks: d->parks
 * as read before the caller saw the worker polling; a worker that parked
 * since, before `napping` was set, wrote no wake-up (Dekker with
 * dist_worker_poll: each side stores, then loads the other's), so no sleep. */
static void nap(moon_dist_t *d, struct pollfd *wake_pfd, int ms, uint32_t parks)
{
    atomic_store(&d->napping, 1);
    if (atomic_load(&d->parks) == parks) {
        (void)poll(wake_pfd, 1, ms);
        if (wake_pfd->revents & POLLIN) {
            drain_wake_fd(d);
        }
    }
    atomic_store(&d->napping, 0);
}

/* The longest nap while workers poll. Each wake takes the core from a
 * worker for ~10 us on these VMs: with the waits of the main threads, a wake
 * each millisecond cost a shared-memory round trip a quarter of its mean.
 * Clock-driven work (heartbeats, every peer_timeout / 8) needs a pass now and
 * then only, and a parking worker wakes us at once. What the cap bounds is
 * how long frames wait (the pass after each nap still takes them in) when the
 * polling worker goes into a long turn instead of parking: up to two naps,
 * as the worker's last poll, from before the turn, counts once more. */
#define NAP_MAX_MS 4

/* Idle: spin at most this long (and dist-spin passes) before sleeping: long
 * enough for the answer to what just left, short enough that an idle rank on
 * a shared core costs nothing (each spin yields after the first passes). */
#define SPIN_MAX_NS (100 * 1000ull)
/* Without an engine event fd (the MPI engine) only a pass sees an answer:
 * the spin lasts up to SPIN_MAX_POLL_NS (with 100 us a back-to-back round
 * trip fell from 78k to 130 a second under load, each answer waiting for a
 * sleep), and sleeps stay at SLEEP_MAX_POLL_MS (1 ms: a lone message over
 * MPI waited 12 ms instead of 1.6 when they backed off to 4 ms). */
#define SPIN_MAX_POLL_NS (1000 * 1000ull)
/* Sleeping: the timeout doubles while nothing happens, from SLEEP_MIN_MS up
 * to SLEEP_MAX_MS with an engine event fd (senders wake us: local ones through
 * the wake fd, remote ones through the engine's events and the rings'
 * doorbell: the timeout only paces the clock-driven work), and of
 * SLEEP_MAX_POLL_MS without one (the MPI engine: frames from peers arrive
 * without an event, so a message to an idle rank waits at most that long).
 * Heartbeats need a tick every hb / 2 at least. */
#define SLEEP_MIN_MS 8
#define SLEEP_MAX_MS 64
#define SLEEP_MAX_POLL_MS 1
/* Busy (an open bulk op, withheld credits) but a pass found nothing: spin
 * this many passes, yield for BUSY_YIELD more, then nap BUSY_NAP_NS at a time. */
#define BUSY_SPIN 64
#define BUSY_YIELD 1024
#define BUSY_NAP_NS (100 * 1000)

/* The longest sleep now, in ms. */
static int sleep_cap_ms(moon_dist_t *d, int has_event_fd)
{
    uint64_t hb_ms = atomic_load_explicit(&d->hb_ns, memory_order_relaxed) / 2000000;
    int      cap   = has_event_fd ? SLEEP_MAX_MS : SLEEP_MAX_POLL_MS;

    return hb_ms == 0 ? 1 : (int)MOON_MIN((uint64_t)cap, hb_ms);
}

void *dist_progress_main(void *arg)
{
    moon_dist_t       *d    = arg;
    uint32_t           idle = 0, missed = 0, busy_idle = 0;
    int                nap_ms     = 1; /* doubles while workers keep polling */
    int                sleep_ms   = 0; /* the next sleep's timeout; 0: spin first */
    uint64_t           spin_start = 0;
    moon_spin_budget_t spin       = {0}; /* idle spins get shorter while they find nothing */
    uint32_t           parks;
    struct pollfd      fds[2];
    int                n_fds = 0;

    moon_log_set_thread_actor("dist-progress", 0);
    fds[n_fds++] = (struct pollfd){d->wake_fd, POLLIN, 0};
    if (d->eng->event_fd(d) >= 0) {
        fds[n_fds++] = (struct pollfd){d->eng->event_fd(d), POLLIN, 0};
    }
    while (!atomic_load_explicit(&d->stop_req, memory_order_relaxed)) {
        int with_clock = (idle & 15) == 0; /* the clock every 16th pass */
        int n, busy, armed = 0;

        if (!dist_progress_trylock(d)) {
            /* A polling worker holds it, maybe for a long pass (a bulk slice
             * is a copy of up to slice_bytes): nap instead of yielding to it,
             * a few times. A handler's direct send holds it for microseconds:
             * yield and try again. Then wait for it, as heartbeats and
             * timeouts are ours. */
            if (++missed < 4) {
                parks = atomic_load(&d->parks);
                if (atomic_load_explicit(&d->worker_polled, memory_order_relaxed)) {
                    nap(d, fds, nap_ms, parks);
                } else {
                    sched_yield();
                }
                idle = 0;
                continue;
            }
            dist_progress_lock(d);
            with_clock = 1;
        }
        missed = 0;
        n      = progress_pass(d, with_clock ? PASS_CLOCK : 0, &busy);
        dist_progress_unlock(d);
        parks = atomic_load(&d->parks);
        if (worker_polling(d)) {
            /* An idle worker is driving progress: stay out of its core (a
             * pass of ours that found work does not change that: competing
             * for the lock on one core costs both of us a context switch),
             * wake for the clock-driven work (the pass after a nap has the
             * clock), or when it parks. */
            nap(d, fds, nap_ms, parks);
            nap_ms = MOON_MIN(nap_ms * 2, NAP_MAX_MS);
            idle   = 0;
            continue;
        }
        nap_ms = 1;
        if (n > 0) {
            if (idle > 0) {
                moon_spin_budget_end(&spin, 1);
            }
            idle = busy_idle = 0;
            sleep_ms         = 0;
            continue;
        }
        if (busy) {
            /* waiting for a transfer or a pressed target, and nothing moved:
             * a spinning thread here would take the core from the very
             * workers and peers it waits for */
            idle = 0;
            if (++busy_idle > BUSY_SPIN + BUSY_YIELD) {
                struct timespec ts = {0, BUSY_NAP_NS};
                if (ppoll(fds, 1, &ts, NULL) > 0 && (fds[0].revents & POLLIN)) {
                    drain_wake_fd(d);
                }
            } else if (busy_idle > BUSY_SPIN) {
                sched_yield();
            }
            continue;
        }
        busy_idle = 0;
        if (sleep_ms == 0) {
            /* Spin a little first: the answer to what just left comes soon.
             * The clock every 16th pass bounds the spin in time too. */
            if (idle++ == 0) {
                spin_start = dist_now_ns();
            }
            if (idle < moon_spin_budget(&spin, d->spin_passes) &&
                ((idle & 15) != 0 ||
                 dist_now_ns() - spin_start < (n_fds > 1 ? SPIN_MAX_NS : SPIN_MAX_POLL_NS))) {
                if (idle > 32) {
                    /* mpirun binds a rank to one core by default: let the
                     * worker that may share it run the message just delivered */
                    sched_yield();
                }
                continue;
            }
            sleep_ms = n_fds > 1 ? SLEEP_MIN_MS : 1;
            moon_spin_budget_end(&spin, 0);
        }
        dist_progress_lock(d);
        for (uint32_t r = 0; r < d->size; r++) { /* return credits before sleeping */
            if (r != d->rank && d->peers[r].owed > 0 && !atomic_load(&d->peers[r].down)) {
                dist_send_small_frame(d, r, FRAME_CREDIT);
            }
        }
        /* seq_cst store, then re-check: pairs with dist_wake() (Dekker). */
        atomic_store(&d->sleeping, 1);
        armed = !work_pending(d) && d->eng->arm(d);
        dist_progress_unlock(d);
        if (armed) {
            int ret = poll(fds, (nfds_t)n_fds, MOON_MIN(sleep_ms, sleep_cap_ms(d, n_fds > 1)));
            if (ret > 0 && (fds[0].revents & POLLIN)) {
                drain_wake_fd(d);
            }
            if (d->eng->disarm != NULL) {
                d->eng->disarm(d);
            }
            /* woken: work follows, spin again after it; timed out: sleep
             * longer next time unless the pass finds something */
            sleep_ms = ret > 0 ? 0 : MOON_MIN(sleep_ms * 2, SLEEP_MAX_MS);
        } else {
            sleep_ms = 0; /* something is pending: passes, then spin again */
        }
        atomic_store(&d->sleeping, 0);
        idle = 0;
    }
    moon_msg_cache_flush();
    return NULL;
}
