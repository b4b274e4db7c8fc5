/* moonlet/sched_policy.h - placement policies of the conductor: given the
 * cluster view and a request, pick the prefill and decode instances, what
 * prefix to reuse or fetch, predict TTFT and TBT, and optionally reject early
 * when an SLO cannot be met. Pure code: a policy reads the view and never
 * changes it (the caller then applies moon_sched_view_commit). A policy object
 * holds only its own small state (seeded generator, round-robin cursor) and
 * belongs to one thread at a time.
 *
 * Policies (moon_sched_policy_name_at lists them, with one-line docs):
 *   random        uniform over alive instances (seeded, deterministic)
 *   round-robin   cycles over alive instances, skipping dead ones
 *   least-loaded  prefill with the smallest predicted queue; decode with the
 *                 smallest batch
 *   cache-aware   prefill with the longest local prefix (ties: smaller
 *                 queue); decode least-loaded. Local cache only, no fetch
 *   mooncake      Mooncake's Algorithm 1: prefill by predicted TTFT =
 *                 T_transfer + T_queue + T_prefill, pulling the missing blocks
 *                 (from the store, or the instance holding the longest prefix)
 *                 when best_len / local_len > balance_threshold; decode by
 *                 current load; TBT predicted at the prefill's end
 *   moonlet       ours (the default): every fetch option is priced (pull
 *                 exactly when the transfer costs less than the compute it
 *                 saves: no hand-tuned threshold); decode picked by the TBT
 *                 predicted at the prefill's end, including the wait for KV or
 *                 batch room, and from the peak step over the sequence's
 *                 predicted life (sequences placed earlier that join during
 *                 it slow it and its neighbours), and the wait for the KV
 *                 handover (the prompt's blocks and those arriving meanwhile
 *                 on the decode instance's link, less the prefill compute
 *                 they overlap), which early rejection then judges.
 *                 scheduler/README.md says why it wins.
 * Random, round-robin and least-loaded reuse the chosen instance's local
 * prefix and fetch nothing. Every policy predicts TTFT and TBT the same way
 * for what it picked, and rejects early (when early rejection is on) if the
 * predicted TTFT > ttft_slo_s or TBT > tbt_slo_s, with the decode load
 * predicted at the time the prefill will end.
 *
 * Colocated views (every instance MOON_SCHED_ROLE_COLOCATED): one instance
 * does both (decision prefill == decode), local cache only. */
#ifndef MOONLET_SCHED_POLICY_H
#define MOONLET_SCHED_POLICY_H

#include "moonlet/sched_view.h"

MOON_EXTERN_C_BEGIN

typedef struct moon_sched_policy moon_sched_policy_t; /* opaque */

#define MOON_SCHED_POLICY_DEFAULT "moonlet"
#define MOON_SCHED_BALANCE_THRESHOLD_DEFAULT 2.0
#define MOON_SCHED_SHED_AFTER_DEFAULT 0.3
#define MOON_SCHED_SHED_SHARE_DEFAULT 0.5
/* The two options' help, for the option tables that carry them */
#define MOON_SCHED_SHED_AFTER_DOC                                                                  \
    "moonlet policy: shed by cost once the queue exceeds this share of the ttft slo"
#define MOON_SCHED_SHED_SHARE_DOC                                                                  \
    "moonlet policy: then reject a prefill over this share of the ttft budget left (1: off)"

typedef struct {
    uint64_t seed;              /* random: the generator's seed */
    int      early_reject;      /* 1: reject a request whose predicted TTFT/TBT breaks its SLO */
    double   balance_threshold; /* mooncake: pull when best_len / local_len > this (> 0) */
    /* moonlet's early rejection sheds load by cost: once the predicted queue
     * exceeds shed_after x the TTFT SLO, it rejects a request whose prefill
     * would take more than shed_share of the TTFT budget left (SLO - queue -
     * transfer). Both in [0, 1]; shed_share 1 turns it off. */
    double shed_after;
    double shed_share;
} moon_sched_config_t;

/* Defaults: seed 1, early rejection off, balance threshold 2.0, shedding
 * after 0.3 of the TTFT SLO above half the budget left. */
MOON_API void moon_sched_config_default(moon_sched_config_t *cfg);

/* Creates the policy called name (see the list above). A suffix "+reject" or
 * "+noreject" ("mooncake+reject") overrides cfg->early_reject. cfg may be
 * NULL (defaults); it is copied. MOON_ERR_INVALID_PARAM (logged): NULL name or
 * policy_p, bad cfg; MOON_ERR_NOT_FOUND (logged): no policy of that name;
 * MOON_ERR_NO_MEMORY. *policy_p is set only on success. */
MOON_API moon_status_t moon_sched_policy_create(const char *name, const moon_sched_config_t *cfg,
                                                moon_sched_policy_t **policy_p);
MOON_API void          moon_sched_policy_destroy(moon_sched_policy_t *policy); /* NULL: no-op */

/* The policy's base name ("mooncake"); never NULL. */
MOON_API const char *moon_sched_policy_name(const moon_sched_policy_t *policy);
/* Whether it rejects early. */
MOON_API int moon_sched_policy_early_reject(const moon_sched_policy_t *policy);

/* The i-th policy name and its one-line doc, i = 0, 1, ... (for
 * `moonlet replay --list-policies`); NULL past the end. */
MOON_API const char *moon_sched_policy_name_at(uint32_t i);
MOON_API const char *moon_sched_policy_doc_at(uint32_t i);

/* Places req on view (both borrowed, unchanged) into *decision_p. MOON_OK:
 * decision_p->rejected says whether it was placed (MOON_SCHED_ADMIT) or
 * rejected early (then reason says why; the instances it would have used and
 * the predictions are still filled). Without early rejection a request is
 * always placed; on a decode instance without room it waits there (mooncake
 * and moonlet count that wait in the TBT they pick by; when room never comes
 * anywhere, moonlet takes the least-loaded instance).
 * MOON_ERR_INVALID_PARAM (logged, nothing changed): NULL argument; a bad
 * request (prompt_tokens, block_tokens or max_tokens 0, n_blocks over the
 * prompt, local/store blocks over n_blocks); a view mixing colocated with
 * prefill/decode instances. MOON_ERR_NO_RESOURCE (logged, nothing changed):
 * no alive prefill instance or no alive decode instance (colocated: no alive
 * instance). MOON_ERR_NO_MEMORY (logged, nothing changed): the policy could
 * not grow its scratch (as many entries as the busiest instance has predicted
 * sequences). The policy's own state (generator, cursor) advances only on
 * MOON_OK. */
MOON_API moon_status_t moon_sched_policy_decide(moon_sched_policy_t        *policy,
                                                const moon_sched_view_t    *view,
                                                const moon_sched_request_t *req,
                                                moon_sched_decision_t      *decision_p);

/* ---- policies of one's own (plugins) -------------------------------------- */
/* A policy outside the library picks the two instances; the frame does the
 * rest as for a built-in one (argument checks, predictions for what was
 * picked, early rejection). */
typedef struct {
    int32_t prefill; /* view index of an alive prefill (or colocated) instance */
    int32_t decode;  /* view index of an alive decode instance (colocated: == prefill) */
} moon_sched_pick_t;

/* Picks for req on view (both borrowed, validated as for decide: at least one
 * alive candidate of each role). arg is the definition's. Called on the
 * conductor's thread, one call at a time per policy; must not block. MOON_OK
 * with *pick_p set; any other status, or a pick that is not an alive
 * candidate, makes the frame place the request as least-loaded does (logged). */
typedef moon_status_t (*moon_sched_pick_fn)(void *arg, const moon_sched_view_t *view,
                                            const moon_sched_request_t *req,
                                            moon_sched_pick_t          *pick_p);

typedef struct {
    const char        *name; /* [a-z0-9_-], at most 31 characters; copied */
    const char        *doc;  /* one line for --list-policies; copied (NULL: "") */
    moon_sched_pick_fn pick;
    void              *arg; /* passed to pick; borrowed for the life of the process */
} moon_sched_policy_def_t;

/* Adds a policy that moon_sched_policy_create (and so --policy NAME) finds
 * by name and the name_at/doc_at listing shows after the built-in ones. The
 * prefill instance reuses its local prefix and fetches what the store holds
 * beyond it. Main thread, before any policy of that name is created (start-up).
 * MOON_ERR_INVALID_PARAM (logged): NULL def, pick or name, a bad name;
 * MOON_ERR_EXISTS (logged): the name is taken; MOON_ERR_NO_RESOURCE (logged):
 * MOON_SCHED_POLICY_EXT_MAX policies registered already. */
#define MOON_SCHED_POLICY_EXT_MAX 16
MOON_API moon_status_t moon_sched_policy_register(const moon_sched_policy_def_t *def);

MOON_EXTERN_C_END

#endif /* MOONLET_SCHED_POLICY_H */
