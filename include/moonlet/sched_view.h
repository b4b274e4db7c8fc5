/* moonlet/sched_view.h - the conductor's view of the cluster that placement
 * policies read: per instance its role, liveness, cost model, predicted
 * prefill queue and decode load (with the predicted finish time of each
 * sequence it was given, so its load at a future time can be predicted); the
 * request being placed; the decision a policy returns; and the updates the
 * conductor applies after a decision (commit), when a sequence leaves an
 * instance (release) and when an instance reports its load (report).
 *
 * Times are seconds on one clock the caller chooses (the conductor's
 * monotonic clock, or virtual time in simulation); every call that needs
 * "now" takes it. A view belongs to one thread at a time (the conductor
 * actor); nothing here blocks. */
#ifndef MOONLET_SCHED_VIEW_H
#define MOONLET_SCHED_VIEW_H

#include "moonlet/sched_cost.h"

MOON_EXTERN_C_BEGIN

typedef enum {
    MOON_SCHED_ROLE_PREFILL   = 0, /* same numbers as the serving LOAD/HELLO role field */
    MOON_SCHED_ROLE_DECODE    = 1,
    MOON_SCHED_ROLE_COLOCATED = 2, /* prefill and decode on one instance, local cache only */
} moon_sched_role_t;

/* A sequence a decode (or colocated) instance was given, as predicted. */
typedef struct {
    uint64_t tag;        /* the caller's name for it (moon_sched_request_t.tag) */
    double   start_s;    /* joins the batch: the predicted end of its prefill */
    double   finish_s;   /* predicted time of its last token */
    uint64_t ctx_tokens; /* context it holds: prompt + max_tokens (an upper bound) */
    uint32_t kv_blocks;  /* KV blocks it takes: ceil(ctx_tokens / block_tokens) */
} moon_sched_seq_t;

#define MOON_SCHED_PENDING_MAX 256u /* prefill commits remembered per instance */

/* private: a prefill commit a later report may not have seen. */
typedef struct {
    double   at_s;
    double   prefill_s;
    uint64_t tokens;
} moon_sched_pending_t;

/* One instance. The conductor sets the identity fields (id, role, alive,
 * cost, max_batch, kv_blocks_total) directly; the load fields are set by
 * moon_sched_view_report() and _commit() (writing them directly is allowed,
 * e.g. in tests). */
typedef struct {
    uint32_t          id; /* the caller's instance id (decisions use view indices) */
    moon_sched_role_t role;
    int               alive;           /* 0 after init: not a candidate until set */
    moon_sched_cost_t cost;            /* this instance's engine and link */
    uint32_t          max_batch;       /* decode: most sequences in a batch; 0: unbounded */
    uint64_t          kv_blocks_total; /* KV pool size, blocks; 0: unknown, KV room not checked */

    /* Prefill side. queue_s was the predicted seconds of prefill work queued
     * (waiting or computing) at time queue_at_s; at a later now it is
     * max(0, queue_s - (now - queue_at_s)): the queue drains in real time. */
    double   queue_s;
    double   queue_at_s;
    uint64_t queue_tokens; /* tokens to compute in that queue (as last known) */
    uint32_t queue_reqs;   /* requests in that queue (as last known) */

    /* Decode side. batch / ctx_tokens: running sequences the view has no
     * prediction for (not in seqs), assumed to run on past any future time.
     * The load at time t is those plus the seqs with start_s <= t < finish_s
     * (moon_sched_instance_load_at). */
    uint32_t batch;
    uint64_t ctx_tokens;
    uint64_t kv_blocks_free; /* free now, after every predicted sequence took its blocks */

    /* private: owned by the view; read through moon_sched_instance_load_at,
     * changed through commit, release, report and add_seq. */
    moon_sched_seq_t     *seqs; /* (n_seqs of seq_cap) */
    uint32_t              n_seqs;
    uint32_t              seq_cap;
    moon_sched_pending_t *pending; /* ring of the last MOON_SCHED_PENDING_MAX prefill commits */
    uint32_t              pending_head; /* oldest entry */
    uint32_t              n_pending;
    uint32_t              n_covered; /* the oldest n_covered a report saw (kept for estimates) */
} moon_sched_instance_t;

/* The cluster: n_inst instances, indexed 0..n_inst-1 (a decision names
 * instances by this index). */
typedef struct {
    moon_sched_instance_t *inst; /* (n_inst) owned by the view */
    uint32_t               n_inst;
} moon_sched_view_t;

/* The request being placed. Arrays are borrowed for the call. */
typedef struct {
    uint64_t        tag;           /* the caller's name for it (commit/release) */
    uint64_t        prompt_tokens; /* >= 1 */
    uint32_t        block_tokens;  /* >= 1: tokens per KV block (the deployment's) */
    uint32_t        n_blocks;      /* full blocks of the prompt: <= prompt_tokens / block_tokens */
    const uint32_t *local_blocks;  /* (n_inst) or NULL (no local cache anywhere): leading
                                      blocks held in each instance's own cache (from the
                                      conductor's prefix index), <= n_blocks */
    uint32_t store_blocks;         /* leading blocks available in the global store, <= n_blocks */
    uint32_t max_tokens;           /* >= 1: tokens to generate at most */
    double   ttft_slo_s;           /* 0: none */
    double   tbt_slo_s;            /* 0: none */
    double   now_s;                /* arrival (the time of the decision) */
    uint64_t affinity; /* hash of the request's session field (SUBMIT session); 0: none. No
                          built-in policy reads it: for policies of one's own */
} moon_sched_request_t;

typedef enum {
    MOON_SCHED_ADMIT          = 0,
    MOON_SCHED_REJECT_TTFT    = 1, /* predicted TTFT > ttft_slo_s */
    MOON_SCHED_REJECT_TBT     = 2, /* predicted TBT > tbt_slo_s on every decode instance */
    MOON_SCHED_REJECT_NO_ROOM = 3, /* no decode instance can hold the sequence (KV or batch) */
} moon_sched_reject_t;

/* What a policy decided. Predictions are filled for admitted and rejected
 * requests alike (a rejected one: for the instances it would have used). */
typedef struct {
    int32_t  prefill;       /* view index of the prefill instance (colocated: == decode) */
    int32_t  decode;        /* view index of the decode instance */
    uint32_t local_blocks;  /* leading blocks the prefill instance reuses from its own cache */
    uint32_t fetch_blocks;  /* blocks [local_blocks, local_blocks + fetch_blocks) it fetches */
    int32_t  fetch_from;    /* -1: from the global store; >= 0: from that instance's cache */
    uint64_t n_new_tokens;  /* tokens it computes: prompt - prefix (at least 1) */
    double   transfer_s;    /* predicted: the fetch */
    double   queue_s;       /* predicted: waiting behind the instance's queue */
    double   prefill_s;     /* predicted: computing n_new_tokens after the prefix */
    double   ttft_s;        /* transfer_s + queue_s + prefill_s (policies may overlap terms) */
    double   decode_join_s; /* predicted time it joins the decode batch: the prefill's end,
                               or later when the instance has no KV or batch room then */
    double step_s;          /* predicted decode step once joined (moonlet: the largest over
                               its predicted life; commit uses it for the finish time) */
    double tbt_s;           /* predicted TBT, the mean of its slowest 10 % of token gaps:
                               step_s + (join wait + step_s) / ceil((max_tokens - 1) / 10)
                               (it joins between steps: the first gap is longer); 0 for
                               max_tokens 1; HUGE_VAL when room never comes */
    moon_sched_reject_t rejected; /* MOON_SCHED_ADMIT (0) when placed */
    const char *reason; /* static text for a rejection ("predicted ttft over slo"), else NULL */
} moon_sched_decision_t;

/* An instance's load report (the serving LOAD message). */
typedef struct {
    double now_s;          /* when the instance made it (or when it arrived) */
    double queue_s;        /* predicted queued prefill seconds; < 0: unknown, estimated
                              from queue_reqs and queue_tokens with the instance's cost */
    uint32_t queue_reqs;   /* prefill requests waiting or computing */
    uint64_t queue_tokens; /* their tokens still to compute */
    uint32_t running;      /* sequences in the decode batch */
    uint64_t ctx_tokens;   /* their context tokens; 0 with running > 0: estimated from
                              the used KV blocks (total - free) times block_tokens */
    uint32_t block_tokens; /* for that estimate */
    uint64_t kv_blocks_free;
    uint64_t kv_blocks_total; /* 0: unchanged */
} moon_sched_report_t;

/* Initialises view (caller's memory) with n_inst instances, all zero: not
 * alive, no role cost or load. MOON_ERR_INVALID_PARAM: NULL or n_inst = 0;
 * MOON_ERR_NO_MEMORY. On error *view is left as it was. */
MOON_API moon_status_t moon_sched_view_init(moon_sched_view_t *view, uint32_t n_inst);
/* Frees what the view owns; NULL or a zeroed view: no-op. */
MOON_API void moon_sched_view_fini(moon_sched_view_t *view);

/* Applies an admitted decision for req at req->now_s: the prefill instance's
 * queue becomes its queue at now plus decision->prefill_s (and its queued
 * tokens and requests grow; the commit is remembered until a report made after
 * it covers it); the decode instance gets a sequence (tag = req->tag) joining
 * at decode_join_s and finishing max_tokens decode steps of step_s later, and
 * its free KV blocks shrink by the sequence's blocks. Sequences predicted to
 * have finished before now are dropped first.
 * MOON_ERR_INVALID_PARAM (nothing changed): NULL, a rejected decision, indices
 * out of range; MOON_ERR_NO_MEMORY (nothing changed). */
MOON_API moon_status_t moon_sched_view_commit(moon_sched_view_t           *view,
                                              const moon_sched_request_t  *req,
                                              const moon_sched_decision_t *decision);

/* The sequence tag left instance index (finished, cancelled or failed): drops
 * its prediction and returns its KV blocks to kv_blocks_free.
 * MOON_ERR_INVALID_PARAM: NULL view or index out of range; MOON_ERR_NOT_FOUND:
 * no such sequence (already dropped: harmless). */
MOON_API moon_status_t moon_sched_view_release(moon_sched_view_t *view, uint32_t index,
                                               uint64_t tag);

/* Overwrites instance index's predicted load with what it reported: the queue
 * (queue_at_s = report->now_s; without queue_s, the predicted prefill times
 * of the last queue_reqs commits before it, as the instance serves in order)
 * plus the commits made after report->now_s,
 * which the instance could not have seen; the free KV blocks; the running
 * sequences not covered by a predicted sequence started by then become the
 * untracked batch/ctx_tokens.
 * MOON_ERR_INVALID_PARAM (nothing changed): NULL, index out of range. */
MOON_API moon_status_t moon_sched_view_report(moon_sched_view_t *view, uint32_t index,
                                              const moon_sched_report_t *report);

/* Adds a predicted sequence to instance index (e.g. one the conductor placed
 * before a restart of its view, or a test's hand-built load); like a commit,
 * its kv_blocks are taken from kv_blocks_free (down to 0) and come back when
 * it is released or predicted finished. MOON_ERR_INVALID_PARAM (nothing changed):
 * NULL, index out of range, finish_s < start_s; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_sched_view_add_seq(moon_sched_view_t *view, uint32_t index,
                                               const moon_sched_seq_t *seq);

/* Predicted queued prefill seconds of inst at now_s (see queue_s). */
MOON_API double moon_sched_instance_queue_at(const moon_sched_instance_t *inst, double now_s);

/* Predicted decode load of inst at time t_s: sequences in its batch and their
 * context tokens (untracked ones plus predicted sequences alive at t_s). */
MOON_API void moon_sched_instance_load_at(const moon_sched_instance_t *inst, double t_s,
                                          uint32_t *batch_p, uint64_t *ctx_tokens_p);

MOON_EXTERN_C_END

#endif /* MOONLET_SCHED_VIEW_H */
