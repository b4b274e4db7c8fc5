/* runtime/dist/dist_state.h - the state of the distributed runtime, shared by the
 * files that implement it: dist.c (frames, queues, the progress thread,
 * start/stop), dist_peers.c (monitors, links, peer loss), dist_names.c (name
 * registry, placement) and dist_bulk.c (regions, bulk ops). Private to them:
 * engines include dist_internal.h only and reach this state through the
 * accessors declared there.
 *
 * Threading is described in dist.c: fields named without an atomic are the
 * progress thread's, `lock` guards monitors, watchers, names and waiters,
 * `cmd_lock` the commands from other threads. */
#ifndef MOON_RUNTIME_DIST_STATE_H
#define MOON_RUNTIME_DIST_STATE_H

#include "dist_internal.h"

#include <mpi.h>

#include <stdio.h>

#define DIST_NAME_BUCKETS 256 /* the registry copy's hash buckets */

typedef struct {
    moon_mailbox_t   q;      /* outgoing messages (env->dst = address) */
    _Atomic uint32_t queued; /* pushed, not yet framed */
    _Atomic int      down;
    moon_actor_t    *gate;    /* senders muted while the queue is long */
    uint32_t         credits; /* sender side: messages we may still send */
    int              stalled; /* queue non-empty, no credits */
    uint32_t         owed;    /* receiver side: credits to return */
    uint32_t         held;    /* withheld while held_addr is overloaded */
    moon_addr_t      held_addr;
    _Atomic int      goodbye; /* peer said goodbye: silence is fine (read by stop) */
    int              images;  /* on this host: messages go as images (set at start) */
    /* Frames each way, counted per frame; tick() turns a change into a time
     * (no clock read per frame). Progress lock. */
    uint32_t rx_frames, tx_frames, rx_seen, tx_seen;
    uint64_t last_rx_ns, last_tx_ns; /* as of the last tick that saw frames */
    /* The failure detector (dist_liveness.c), progress lock; `suspected` is
     * read by any thread. */
    _Atomic int suspected;    /* silent past peer_timeout, not (yet) lost */
    int         proc_check;   /* its process runs on this host and can be checked */
    uint64_t    max_gap_ns;   /* the longest silence it came back from */
    uint64_t    next_proc_ns; /* the next look at its process */
} dist_peer_t;

struct moon_dist {
    moon_dist_config_t       cfg;
    uint32_t                 rank, size;
    dist_proc_t             *procs;    /* every rank's, gathered at init; NULL without MPI */
    int                      mpi_ours; /* we called MPI_Init_thread */
    int                      use_mpi;
    MPI_Comm                 comm;
    const dist_engine_ops_t *eng;
    void                    *eng_ctx;
    moon_runtime_t          *rt;
    dist_peer_t             *peers;
    int                      started;

    /* progress thread; idle workers run the same passes (worker_poll) */
    pthread_t         thread;
    _Atomic int       progress_busy;   /* held for a pass: the progress state below */
    _Atomic int       worker_polled;   /* an idle worker ran a pass since the last look */
    _Atomic int       napping;         /* progress thread defers to polling workers */
    _Atomic uint32_t  parks;           /* workers that stopped polling: see nap() */
    _Atomic int       direct;          /* handlers may send their first message at once */
    _Atomic int       progress_wanted; /* threads waiting in progress_lock: workers stay off */
    _Atomic int       closing;         /* moon_dist_stop: no pass or direct send any more */
    _Atomic int       stop_req;
    _Atomic int       sleeping;
    int               wake_fd;
    _Atomic uint64_t *ready; /* one bit per peer */
    uint32_t          n_ready_words;
    dist_buf_t       *buf_pool;
    uint32_t          n_pool;
    uint64_t          next_tick_ns, last_tick_ns;
    _Atomic uint64_t  hb_ns;           /* set by moon_dist_stop while progress runs */
    uint32_t          spin_passes;     /* idle passes before sleeping (cfg.spin_passes) */
    uint64_t          peer_timeout_ns; /* cfg.peer_timeout_ms, in ns: suspicion */
    uint64_t          peer_dead_ns;    /* cfg.peer_dead_ms, in ns: loss without a death seen */
    _Atomic int       saying_goodbye;

    /* commands from other threads: bulk ops, raw frames */
    struct moon_dist_region *regions; /* registered with the engine (dist_bulk.c), under lock */
    pthread_mutex_t          cmd_lock;
    bulk_op_t               *cmd_bulk;
    dist_buf_t              *cmd_raw;
    _Atomic int              cmd_pending;
    bulk_op_t               *active;   /* progress thread */
    uint32_t                 n_held;   /* peers with withheld credits */
    moon_addr_t              tgt_addr; /* last target: deliveries (all peers) vs. its progress */
    uint64_t                 tgt_base, tgt_delivered;
    uint32_t                 n_open; /* active ops not yet finished */
    uint64_t                 next_op_id;

    /* remote monitors and links, the name registry */
    pthread_mutex_t     lock;
    struct monitor_rec *mons; /* dist_peers.c */
    uint32_t            n_mons, cap_mons;
    moon_addr_t        *watchers;
    uint32_t            n_watchers, cap_watchers;
    struct name_rec *names[DIST_NAME_BUCKETS]; /* this rank's copy of the registry (dist_names.c) */
    uint64_t         name_clock;               /* highest registration version seen */
    pthread_cond_t   cond;                     /* signalled when a name is registered */
    _Atomic uint64_t any_down;

    FILE       *trace;
    _Atomic int logged_bad_frame, logged_bad_msg, logged_stale;

    struct {
        _Atomic uint64_t sent, received, frames_sent, frames_received, bad_frames, bad_msgs, stale,
            credit_stalls, gate_mutes, peers_lost, peers_suspected, peers_back, bulk_done,
            bulk_bytes, regions_forgotten;
    } st;
};

/* ---- dist.c, for the other dist files ---------------------------------------- */
/* Wakes the progress thread if it sleeps; any thread. */
void dist_wake(moon_dist_t *d);
/* Returns a frame buffer to the pool (or frees it); progress thread. */
void dist_buf_put(moon_dist_t *d, dist_buf_t *b);
/* Queues msg for rank r (not this rank) addressed to `to`; ownership moves to
 * the queue. Any thread. */
void dist_enqueue(moon_dist_t *d, uint32_t r, moon_addr_t to, moon_msg_hdr_t *msg);
/* Reopens the peer's gate: the senders muted on it run again. */
void dist_gate_open(dist_peer_t *p);

/* ---- dist_peers.c: remote monitors and links, peer loss ----------------------- */
/* Outgoing system messages that set up a remote watch; sending thread. */
void dist_note_sys_tx(moon_dist_t *d, moon_addr_t to, const moon_msg_hdr_t *msg);
/* Incoming system messages that set up or end a remote watch; progress thread. */
void dist_note_sys_rx(moon_dist_t *d, moon_addr_t to, const moon_msg_hdr_t *msg);
/* Fails what is queued for lost rank r: each local sender gets a SYS_ERROR
 * (PEER_LOST) and the gate reopens. Progress thread. */
void dist_fail_queue(moon_dist_t *d, uint32_t r);

/* Gathers every rank's process (pid, host) into d->procs; collective. */
void dist_procs_gather(moon_dist_t *d);

/* ---- dist_liveness.c: the failure detector ------------------------------------ */
typedef enum {
    DIST_PROC_UNKNOWN, /* not on this host, or its process cannot be looked at */
    DIST_PROC_ALIVE,
    DIST_PROC_GONE, /* exited, a zombie, or its pid now belongs to another process */
} dist_proc_state_t;

/* This process's start time (/proc/self/stat, clock ticks since boot), 0 if
 * unknown: with the pid, it names the process even after the pid is reused. */
uint64_t dist_proc_start_ticks(int64_t pid);
/* Rank r's process as seen from here. full = 0: kill(pid, 0) only (a
 * zombie still counts as alive); 1: also its /proc state and start time. */
dist_proc_state_t dist_proc_state(const moon_dist_t *d, uint32_t r, int full);
/* Which peers' processes can be checked from here; at start, before the
 * progress thread. */
void dist_liveness_start(moon_dist_t *d);
/* Rank r was heard from at now (frames since the last tick): its silence
 * ends (a suspected rank is a member again). Progress lock. */
void dist_liveness_heard(moon_dist_t *d, uint32_t r, uint64_t now);
/* Rank r's silence at now: suspicion, a look at its process, loss once
 * confirmed (dist_peer_failed). Progress lock, from the tick. */
void dist_liveness_check(moon_dist_t *d, uint32_t r, uint64_t now);

/* Logs "dropped <what> from rank r: <status>" the first time *flag is set. */
void dist_log_once(_Atomic int *flag, const char *what, uint32_t r, moon_status_t status);

/* ---- dist_names.c: the name registry ---------------------------------------- */
/* A message for the transport itself (record to == NONE) from rank r: a name
 * registration of one of its actors. Borrows msg. Progress thread. */
void dist_names_on_msg(moon_dist_t *d, uint32_t r, const moon_msg_hdr_t *msg);
/* Rank r is lost: drops the names of its actors. Not under d->lock. */
void dist_names_peer_lost(moon_dist_t *d, uint32_t r);
/* Frees the registry; once no other thread runs. */
void dist_names_fini(moon_dist_t *d);

/* ---- dist_bulk.c: bulk ops and raw frames ----------------------------------- */
/* Takes the commands of other threads (bulk ops, raw frames) and issues a
 * bounded number of slices; returns the work done. Progress thread. */
int dist_bulk_pump(moon_dist_t *d);
/* Finishes every unfinished op with lost rank r (PEER_LOST). Progress thread. */
void dist_bulk_peer_lost(moon_dist_t *d, uint32_t r);

/* dist_bulk.c: moon_dist_stop releases what is still registered (the engine
 * cannot close over mapped memory), with a warning. */
void dist_regions_release(moon_dist_t *d);

/* dist.c: tells every live peer that region_id of ours is gone, so their
 * engines drop what they cached for it (best effort, any thread). */
void dist_send_region_gone(moon_dist_t *d, uint64_t region_id);

#endif /* MOON_RUNTIME_DIST_STATE_H */
