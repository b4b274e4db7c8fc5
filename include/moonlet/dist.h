/* moonlet/dist.h - the distributed runtime: MPI bootstrap, one transport
 * engine per process (UCX active messages + RMA, or MPI when UCX is absent),
 * a progress thread, per-peer credit windows, a global name registry, the
 * bulk lane (registered regions, one-sided get/put with a completion
 * message), heartbeats and peer-down notification.
 *
 * Lifecycle (main thread):
 *   moon_dist_init(&argc, &argv, NULL, &d)     MPI_Init_thread when launched by
 *                                              mpirun; single rank otherwise
 *   cfg.rank = moon_dist_rank(d); moon_runtime_create(&cfg, &rt);
 *   moon_dist_start(d, rt)                     collective: engine, addresses,
 *                                              progress thread, attach
 *   ... spawn, moon_dist_register, moon_runtime_start/wait ...
 *   moon_dist_stop(d)                          collective, tolerates dead ranks
 *   moon_runtime_destroy(rt); moon_dist_finalize(d);
 *
 * Threading: functions marked "any thread" may be called from handlers; the
 * blocking ones (whereis, barrier, start, stop) never from handlers. */
#ifndef MOONLET_DIST_H
#define MOONLET_DIST_H

#include "moonlet/actor.h"
#include "moonlet/config.h"

typedef struct moon_dist        moon_dist_t;        /* opaque */
typedef struct moon_dist_region moon_dist_region_t; /* opaque */

typedef enum {
    MOON_DIST_TRANSPORT_AUTO, /* UCX when built with it, else MPI */
    MOON_DIST_TRANSPORT_UCX,
    MOON_DIST_TRANSPORT_MPI,
} moon_dist_transport_t;

/* The options of the distributed runtime; every field is a row of
 * moon_dist_config_table (dist_config.c), whose docs, defaults and ranges
 * `moonlet config` and the README show. */
typedef struct {
    int      transport;       /* moon_dist_transport_t (--transport auto|ucx|mpi) */
    uint32_t credits;         /* per-peer window, messages in flight (1024) */
    uint32_t batch_bytes;     /* small messages coalesced per frame (16 KiB) */
    uint64_t peer_timeout_ms; /* silence that makes a rank suspected (2000; 0: 2000) */
    uint64_t peer_dead_ms;    /* silence that declares a suspected rank lost when its death
                                 is not seen (10000; 0: 10000): see moon_dist_peer_suspected */
    uint64_t slice_bytes;     /* bulk transfers move in slices of this size (0, the
                                 default: the transport's choice, 1 MiB over shared
                                 memory, 128 KiB over tcp) */
    const char *trace_dir;    /* per-rank message trace files (NULL: none); borrowed */
    uint32_t    spin_passes;  /* idle progress passes before sleeping (256) */
    int         images;       /* ranks of one host exchange message images (1) */
    int         direct;       /* a handler's first message may leave at once (1) */
    int         worker_poll;  /* idle workers drive network progress (1) */
    uint32_t    split_hosts;  /* > 1: ranks count as that many hosts (rank % N) (0) */
    int         shm_rings;    /* frames to ranks of this host through our rings (1) */
    uint32_t    shm_ring_kib; /* size of each ring, KiB (256) */
} moon_dist_config_t;

/* The rows of moon_dist_config_t (env MOON_<NAME>, flags --<name>). */
MOON_API extern const moon_config_table_t moon_dist_config_table;

/* The table's defaults, then the environment's MOON_* variables. A caller sets
 * fields after this call, so its settings win over the environment.
 * MOON_ERR_INVALID_PARAM: a variable is malformed (logged, naming it and what
 * it accepts); cfg then holds the defaults only. */
MOON_API moon_status_t moon_dist_config_default(moon_dist_config_t *cfg);

/* Initialises MPI (MPI_Init_thread, MPI_THREAD_MULTIPLE requested, at least
 * SERIALIZED required) when the process was launched by mpirun or srun and MPI
 * is not yet initialised; otherwise runs as a single rank without MPI. cfg may
 * be NULL (defaults). MOON_ERR_UNSUPPORTED: MPI lacks the thread level. */
MOON_API moon_status_t moon_dist_init(int *argc, char ***argv, const moon_dist_config_t *cfg,
                                      moon_dist_t **dist_p);
MOON_API uint32_t      moon_dist_rank(const moon_dist_t *d);
MOON_API uint32_t      moon_dist_size(const moon_dist_t *d);
/* "ucx", "mpi" or "none" (single rank). */
MOON_API const char *moon_dist_engine(const moon_dist_t *d);

/* Collective. Opens the engine (one UCX context + worker per process; worker
 * addresses allgathered over MPI), starts the progress thread and attaches the
 * transport to rt (borrowed until moon_dist_stop). rt's rank must equal
 * moon_dist_rank(d). */
MOON_API moon_status_t moon_dist_start(moon_dist_t *d, moon_runtime_t *rt);
/* Collective over live ranks: flushes, says goodbye to every live peer (waits
 * at most a few seconds for theirs), stops the progress thread, detaches and
 * closes the engine. Ranks found dead are skipped. NULL or not started: no-op. */
MOON_API void moon_dist_stop(moon_dist_t *d);
/* Frees d and finalises MPI if moon_dist_init initialised it (skipped when a
 * rank was lost: MPI_Finalize would wait for it). NULL: no-op. */
MOON_API void moon_dist_finalize(moon_dist_t *d);
/* Waits until what this rank sent was delivered (credits back, at most 10 s),
 * then MPI_Barrier (main thread, before stop; no rank may be dead). */
MOON_API void moon_dist_barrier(moon_dist_t *d);
/* A barrier that also agrees on an outcome: every rank passes its own status
 * and gets the same answer, MOON_OK when every rank passed MOON_OK, else one
 * rank's error (the most negative code). For start-up steps where a failure
 * on one rank must stop them all instead of leaving the others waiting at
 * the next barrier. Main thread; no rank may be dead. NULL d: status. */
MOON_API moon_status_t moon_dist_agree(moon_dist_t *d, moon_status_t status);

/* ---- placement: which rank runs an actor, from configuration ---------------- */
/* Looks name up in a placement spec: entries "pattern=ranks" separated by ';'
 * or newlines; pattern is an exact name or a prefix ending in '*'; ranks is a
 * comma list of ranks or ranges "a-b". An exact entry wins over a prefix; a
 * name ending in "/<i>" maps to the i-th listed rank (round robin), other
 * names to the first. Example: "conductor=0; prefill*=1-2; decode*=3,4".
 * Every rank evaluates the same spec and spawns what lands on it.
 * MOON_ERR_NOT_FOUND: no entry matches; MOON_ERR_INVALID_PARAM: malformed
 * spec or a rank >= n_ranks. */
MOON_API moon_status_t moon_dist_place(const char *spec, const char *name, uint32_t n_ranks,
                                       uint32_t *rank_p);

/* ---- names: a registry replicated on every rank --------------------------- */
/* Registers name -> addr (an actor of this rank) locally and, asynchronously,
 * in every live rank's copy of the registry (a whereis issued after a
 * moon_dist_barrier sees it everywhere). The latest registration of a name
 * wins on every rank (Lamport order; concurrent ones settle on the same
 * winner everywhere). Entries outlive their actor (a send to such an address
 * is answered with SYS_ERROR MOON_ERR_NO_ACTOR) but not their rank: when a
 * rank is lost its names are dropped everywhere. Names resolve on every
 * surviving rank, whichever ranks are lost. MOON_ERR_EXISTS: taken locally;
 * MOON_ERR_INVALID_PARAM: addr is not an actor of this rank. */
MOON_API moon_status_t moon_dist_register(moon_dist_t *d, const char *name, moon_addr_t addr);
/* Resolves from this rank's copy (no message). If the name is not there,
 * waits up to timeout_ns for it to be registered (0: no wait; not from
 * handlers then). MOON_ERR_NOT_FOUND when it is not. */
MOON_API moon_status_t moon_dist_whereis(moon_dist_t *d, const char *name, uint64_t timeout_ns,
                                         moon_addr_t *addr_p);
/* Resolution for actors: reply_to gets DIST_NAME_REPLY {cookie, status, addr}
 * at once (MOON_ERR_NOT_FOUND if the name is not registered). Any thread. */
MOON_API moon_status_t moon_dist_whereis_async(moon_dist_t *d, const char *name,
                                               moon_addr_t reply_to, uint64_t cookie);

/* ---- failure -------------------------------------------------------------- */
/* watcher gets SYS_PEER_DOWN {rank, reason} for every rank already lost and
 * every rank lost from now on (a loss racing with this call may come twice).
 * (Actors that monitor or link actors on a lost rank get DOWN / EXIT with
 * MOON_ERR_PEER_LOST and one PEER_DOWN without asking.) Any thread. */
MOON_API moon_status_t moon_dist_watch_peers(moon_dist_t *d, moon_addr_t watcher);
/* 1 while rank r is considered alive. */
MOON_API int moon_dist_peer_alive(moon_dist_t *d, uint32_t r);
/* 1 while rank r is alive but suspected: silent for more than peer_timeout_ms
 * (paused, starved of CPU, or dying). Nothing of it is torn down: it is a
 * member as before once heard from again. It is declared lost (PEER_DOWN)
 * only on a confirmation: its process on this host is gone, the transport
 * reports an error, or it stays silent past peer_dead_ms (and past four
 * times the longest silence it came back from). Any thread; callers may
 * avoid placing new work there. */
MOON_API int moon_dist_peer_suspected(moon_dist_t *d, uint32_t r);

/* ---- bulk lane ------------------------------------------------------------ */
/* Registers [addr, addr + len) once (ucp_mem_map); addr stays the caller's and
 * must outlive the region. Any thread. */
MOON_API moon_status_t moon_dist_region_register(moon_dist_t *d, void *addr, size_t len,
                                                 moon_dist_region_t **reg_p);
/* Allocates len bytes registered as one region, placed where peers reach them
 * fastest (with UCX: a shared-memory segment that ranks on the same host map,
 * so their gets and puts are plain copies; elsewhere the heap). Prefer it to
 * register for memory that other ranks read or write: a store's arena, a
 * receive buffer. The memory is freed by moon_dist_region_deregister. */
MOON_API moon_status_t moon_dist_region_alloc(moon_dist_t *d, size_t len, void **addr_p,
                                              moon_dist_region_t **reg_p);
/* Writers of this region use streaming (non-temporal) stores where they copy
 * into it themselves (a peer on the same host with the region mapped): for
 * memory that someone else reads later, like a store's arena, where the
 * writer's cache gains nothing and a cold destination line would be read
 * before it is written (4 MiB blocks into an arena: ~1.35x). Not for memory
 * the writer or owner reads again at once. */
#define MOON_DIST_REGION_STREAM 1u
/* Sets MOON_DIST_REGION_* flags; descriptors made afterwards carry them. */
MOON_API void moon_dist_region_set_flags(moon_dist_region_t *reg, uint32_t flags);
/* No transfer may use it any more; call before moon_dist_stop (which releases
 * what is still registered, with a warning; deregistering afterwards only
 * frees the region). NULL: no-op.
 * Frees the memory of a region from moon_dist_region_alloc. */
MOON_API void moon_dist_region_deregister(moon_dist_t *d, moon_dist_region_t *reg);
/* Size of the region's wire descriptor (rank, address, length, packed rkey). */
MOON_API size_t moon_dist_region_desc_bytes(const moon_dist_region_t *reg);
/* Writes the descriptor into a `bytes` span of msg (tail room needed:
 * moon_dist_region_desc_bytes). MOON_ERR_NO_RESOURCE: tail too small. */
MOON_API moon_status_t moon_dist_region_desc(const moon_dist_region_t *reg, void *msg,
                                             moon_span_t *span);

/* One-sided transfer of len bytes between local memory [local, local + len)
 * (inside local_reg when given: zero-copy; NULL: the engine registers on the
 * fly) and the remote region described by desc (desc_len bytes, borrowed for
 * the call) at remote_off. get reads remote into local; put writes local to
 * remote. MOON_OK: reply_to gets DIST_BULK_DONE {cookie, status, bytes} when
 * done (status MOON_ERR_PEER_LOST if the rank dies first); local must stay
 * valid until then. MOON_ERR_INVALID_PARAM: bad descriptor or range (nothing
 * sent); MOON_ERR_PEER_LOST: rank already lost. Any thread. */
MOON_API moon_status_t moon_dist_get(moon_dist_t *d, void *local, moon_dist_region_t *local_reg,
                                     const void *desc, size_t desc_len, uint64_t remote_off,
                                     size_t len, moon_addr_t reply_to, uint64_t cookie);
MOON_API moon_status_t moon_dist_put(moon_dist_t *d, const void *local,
                                     moon_dist_region_t *local_reg, const void *desc,
                                     size_t desc_len, uint64_t remote_off, size_t len,
                                     moon_addr_t reply_to, uint64_t cookie);

/* One entry of a vectored transfer: len bytes at local and at remote_off of
 * the remote region. */
typedef struct {
    void    *local;
    uint64_t remote_off;
    size_t   len;
} moon_dist_iov_t;
#define MOON_DIST_IOV_MAX 4096u /* most entries of one getv/putv */

/* Vectored get/put: n entries (1..MOON_DIST_IOV_MAX; iov borrowed for the
 * call) between local memory (inside local_reg when given) and ONE remote
 * region (desc), moved like n moon_dist_get/_put calls (in flight together)
 * but with ONE completion: reply_to gets a single DIST_BULK_DONE {cookie,
 * status, bytes} once every entry has ended, status the first failure
 * (MOON_ERR_PEER_LOST, MOON_ERR_IO), bytes the sum of the entries' when
 * MOON_OK. Every local buffer stays in use until then, also when an entry
 * failed early. MOON_ERR_INVALID_PARAM: an entry out of range or a bad
 * descriptor (nothing moved, no completion); MOON_ERR_PEER_LOST: the rank
 * is already lost; MOON_ERR_NO_MEMORY. Any thread. */
MOON_API moon_status_t moon_dist_getv(moon_dist_t *d, const moon_dist_iov_t *iov, uint32_t n,
                                      moon_dist_region_t *local_reg, const void *desc,
                                      size_t desc_len, moon_addr_t reply_to, uint64_t cookie);
MOON_API moon_status_t moon_dist_putv(moon_dist_t *d, const moon_dist_iov_t *iov, uint32_t n,
                                      moon_dist_region_t *local_reg, const void *desc,
                                      size_t desc_len, moon_addr_t reply_to, uint64_t cookie);

/* ---- counters --------------------------------------------------------------- */
typedef struct {
    uint64_t n_sent, n_received; /* remote messages */
    uint64_t n_frames_sent, n_frames_received;
    uint64_t n_bad_frames;    /* truncated or unknown frame kinds */
    uint64_t n_bad_msgs;      /* records that failed to decode */
    uint64_t n_stale;         /* records for stale or unknown actors */
    uint64_t n_credit_stalls; /* times a peer's window was exhausted */
    uint64_t n_gate_mutes;    /* senders muted by a full window */
    uint64_t n_peers_lost;
    uint64_t n_peers_suspected; /* times a rank became suspected */
    uint64_t n_peers_back;      /* times a suspected rank was heard from again */
    uint64_t n_bulk_done, bulk_bytes;
    uint64_t n_peer_regions_forgotten; /* peers' regions dropped from our caches when
                                          their owners deregistered them */
} moon_dist_stats_t;
MOON_API void moon_dist_stats(moon_dist_t *d, moon_dist_stats_t *stats_p);

/* Test hook: sends raw bytes as one frame to rank r (bad-input tests). */
MOON_API moon_status_t moon_dist_send_raw(moon_dist_t *d, uint32_t r, const void *bytes,
                                          size_t len);

/* ---- messages (ids 112..119 of the component range) ------------------------ */
#define MOON_DIST_BULK_DONE_FIELDS(F, T) F(T, u64, cookie) F(T, i32, status) F(T, u64, bytes)
#define MOON_DIST_NAME_REPLY_FIELDS(F, T) F(T, u64, cookie) F(T, i32, status) F(T, addr, addr)
/* internal: a registration sent to every rank's copy of the registry */
#define MOON_DIST_NAME_OP_FIELDS(F, T) F(T, u32, op) F(T, u64, ver) F(T, addr, addr) F(T, str, name)

#define MOON_DIST_MSGS(X)                                                                          \
    X(MOON_MSG_DIST_BULK_DONE, moon_dist_bulk_done_t, MOON_DIST_BULK_DONE_FIELDS)                  \
    X(MOON_MSG_DIST_NAME_REPLY, moon_dist_name_reply_t, MOON_DIST_NAME_REPLY_FIELDS)               \
    X(MOON_MSG_DIST_NAME_OP, moon_dist_name_op_t, MOON_DIST_NAME_OP_FIELDS)

MOON_MSG_DECLARE_IN(MOON_DIST_MSGS, DIST, MOON_MSG_DIST_END)
_Static_assert(MOON_MSG_DIST_END <= 120, "dist ids are 112..119");

MOON_API extern const moon_msg_desc_t moon_dist_msg_descs[];

#endif /* MOONLET_DIST_H */
