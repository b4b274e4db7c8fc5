/* scheduler/sched_internal.h - what the policies share inside the library: the
 * policy object and its ops, the per-decision context, and the predictors
 * every policy uses for what it picked (so policies differ only in choices). */
#ifndef MOON_SCHEDULER_SCHED_INTERNAL_H
#define MOON_SCHEDULER_SCHED_INTERNAL_H

#include "moonlet/sched_policy.h"

/* One change of a decode batch (a sequence joins or finishes): scratch for
 * the room-wait search and the peak-load sweep. */
typedef struct {
    double   t_s;
    int32_t  d_batch; /* +1 joins, -1 finishes */
    uint32_t kv_blocks;
    int64_t  d_ctx;
} sched_event_t;

/* One decision's inputs, validated. */
typedef struct {
    const moon_sched_view_t    *view;
    const moon_sched_request_t *req;
    int                         colocated;  /* every instance is colocated */
    uint64_t                    ctx_new;    /* the new sequence's context: prompt + max_tokens */
    uint32_t                    blocks_new; /* its KV blocks */
    int                         peak;       /* TBT from the peak step over the sequence's life */
    int                         handover;   /* the first gap waits for the KV handover */
    sched_event_t              *scratch;    /* 2 events per seq of the busiest instance */
} sched_ctx_t;

/* What a decode instance would give the new sequence if its prefill ends at t. */
typedef struct {
    double join_s; /* when it joins the batch (HUGE_VAL: never) */
    double step_s; /* decode step then (c->peak: the largest over its predicted life) */
    double tbt_s;  /* the predicted TBT (see moon_sched_decision_t.tbt_s) */
} sched_decode_pred_t;

typedef struct {
    const char *name;
    const char *doc;
    int         peak;     /* predict TBT from the peak step over the sequence's life */
    int         handover; /* count the KV handover's wait in the first gap */
    int         shed;     /* early rejection also sheds by cost (policy.c shed()) */
    /* Picks into d: the prefill instance and prefix (through
     * sched_predict_prefill), then the decode instance (through
     * sched_set_decode). At least one candidate of each role is alive. */
    void (*place)(moon_sched_policy_t *policy, const sched_ctx_t *c, moon_sched_decision_t *d);
} sched_policy_ops_t;

struct moon_sched_policy {
    const sched_policy_ops_t *ops;
    moon_sched_config_t       cfg;
    uint64_t                  rng;        /* random: splitmix64 state */
    uint32_t                  rr_prefill; /* round-robin: next index to try */
    uint32_t                  rr_decode;
    sched_event_t            *scratch;
    uint32_t                  scratch_cap;
};

extern const sched_policy_ops_t sched_random_ops, sched_round_robin_ops, sched_least_loaded_ops,
    sched_cache_aware_ops, sched_mooncake_ops, sched_moonlet_ops;

/* Whether instance i is an alive candidate for the prefill / decode side. */
int sched_is_prefill(const sched_ctx_t *c, uint32_t i);
int sched_is_decode(const sched_ctx_t *c, uint32_t i);
/* The request's leading blocks in instance i's own cache (0 without an array). */
uint32_t sched_local_blocks(const sched_ctx_t *c, uint32_t i);

/* Fills d->prefill = i and its prefix, fetch and prefill predictions
 * (transfer_s + queue_s + prefill_s = ttft_s). */
void sched_predict_prefill(const sched_ctx_t *c, uint32_t i, uint32_t local, uint32_t fetch,
                           int32_t fetch_from, moon_sched_decision_t *d);
/* The new sequence on decode instance j when its prefill, computing for
 * compute_s, ends at t_s. */
void sched_predict_decode(const sched_ctx_t *c, uint32_t j, double t_s, double compute_s,
                          sched_decode_pred_t *p);
/* d->decode = j with its predictions at the end of d's prefill. */
void sched_set_decode(const sched_ctx_t *c, uint32_t j, moon_sched_decision_t *d);
/* The alive decode instance with the fewest sequences at now (ties: less
 * context, more free KV, lower index). */
uint32_t sched_least_loaded_decode(const sched_ctx_t *c);

/* Policies registered with moon_sched_policy_register (policy_ext.c): the
 * i-th one's ops (NULL past the end), and one by its name's first len bytes. */
const sched_policy_ops_t *sched_ext_at(uint32_t i);
const sched_policy_ops_t *sched_ext_lookup(const char *name, size_t len);

/* Predicted KV blocks free on inst at t (blocks of sequences finished by then
 * come back). */
uint64_t sched_kv_free_at(const moon_sched_instance_t *inst, double t_s);

#endif /* MOON_SCHEDULER_SCHED_INTERNAL_H */
