/* scheduler/policy_mooncake.c - Mooncake's Algorithm 1 (KVCache-centric
 * scheduling, FAST'25): the prefill instance with the smallest predicted
 * TTFT = T_transfer + T_queue + T_prefill, where an instance whose local
 * prefix is short against the longest one anywhere (best_len / local_len >
 * balance_threshold) plans to pull the missing blocks (hot-block
 * replication); the decode instance by its load at arrival. Colocated views
 * use the local cache only (no pulls). */
#include "sched_internal.h"

/* The longest cached prefix anywhere: the global store, or a prefill
 * instance's own cache when longer (then *holder_p is that instance). */
static uint32_t longest_prefix(const sched_ctx_t *c, int32_t *holder_p)
{
    uint32_t best = c->colocated ? 0 : c->req->store_blocks;

    *holder_p = -1;
    for (uint32_t i = 0; i < c->view->n_inst; i++) {
        if (sched_is_prefill(c, i) && sched_local_blocks(c, i) > best) {
            best      = sched_local_blocks(c, i);
            *holder_p = (int32_t)i;
        }
    }
    return best;
}

static void mooncake_place(moon_sched_policy_t *policy, const sched_ctx_t *c,
                           moon_sched_decision_t *d)
{
    int32_t               holder;
    uint32_t              best_len = longest_prefix(c, &holder), best_dec = UINT32_MAX;
    double                thr = policy->cfg.balance_threshold, best_tbt = 0.0;
    int                   have = 0;
    moon_sched_decision_t cand;

    for (uint32_t i = 0; i < c->view->n_inst; i++) {
        uint32_t local = sched_local_blocks(c, i);
        int      pull;

        if (!sched_is_prefill(c, i)) {
            continue;
        }
        /* local 0 against any cached prefix: an infinite ratio, so pull */
        pull = !c->colocated && best_len > local &&
               (local == 0 || (double)best_len / (double)local > thr);
        cand = *d;
        if (pull) {
            /* from the store when it holds the whole prefix, else from its holder */
            sched_predict_prefill(c, i, local, best_len - local,
                                  c->req->store_blocks >= best_len ? -1 : holder, &cand);
        } else {
            sched_predict_prefill(c, i, local, 0, -1, &cand);
        }
        if (!have || cand.ttft_s < d->ttft_s) {
            *d   = cand;
            have = 1;
        }
    }
    if (c->colocated) {
        sched_set_decode(c, (uint32_t)d->prefill, d);
        return;
    }
    /* decode by load at arrival: the step the new sequence would see now */
    for (uint32_t j = 0; j < c->view->n_inst; j++) {
        sched_decode_pred_t p;

        if (!sched_is_decode(c, j)) {
            continue;
        }
        sched_predict_decode(c, j, c->req->now_s, 0.0, &p);
        if (best_dec == UINT32_MAX || p.tbt_s < best_tbt) {
            best_dec = j;
            best_tbt = p.tbt_s;
        }
    }
    sched_set_decode(c, best_dec, d);
}

const sched_policy_ops_t sched_mooncake_ops = {
    .name  = "mooncake",
    .doc   = "Mooncake Algorithm 1: prefill by predicted TTFT with hot-block pulls above the "
             "balance threshold; decode by load",
    .place = mooncake_place,
};
