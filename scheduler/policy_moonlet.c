/* scheduler/policy_moonlet.c - Moonlet's own policy. Prefill: every prefix
 * option of every instance is priced - its own cache, a fetch from the
 * store, a fetch from the instance holding the longest prefix - and the
 * smallest predicted TTFT wins, so a pull happens exactly when its transfer
 * costs less than the compute it saves (Algorithm 1's hand-tuned ratio
 * threshold, replaced by the fitted costs). Fetching all the missing blocks
 * or none is enough: the saving of one more block grows with its position
 * (the attention term) while its transfer cost does not, so TTFT is concave
 * in the blocks fetched. Decode: the instance with the smallest TBT
 * predicted at the prefill's end, from the predicted finish times of its
 * sequences, including the wait for KV or batch room and for the KV
 * handover: the prompt's blocks, and those of the sequences whose prefills
 * end meanwhile on the same instance, come over its link, overlapping the
 * prefill's compute only (a long cached prefix after a short suffix makes
 * the first gap long, and spreading such handovers shortens it). With early
 * rejection it also sheds by cost under overload (policy.c shed()). */
#include "sched_internal.h"

#include <math.h>

static void moonlet_prefill(const sched_ctx_t *c, moon_sched_decision_t *d)
{
    int32_t               holder = -1;
    uint32_t              held = 0, store = c->colocated ? 0 : c->req->store_blocks;
    int                   have = 0;
    moon_sched_decision_t cand;

    for (uint32_t i = 0; i < c->view->n_inst && !c->colocated; i++) {
        if (sched_is_prefill(c, i) && sched_local_blocks(c, i) > held) {
            held   = sched_local_blocks(c, i);
            holder = (int32_t)i;
        }
    }
    for (uint32_t i = 0; i < c->view->n_inst; i++) {
        uint32_t local = sched_local_blocks(c, i);
        /* options in preference order for a tie: own cache, store, holder */
        uint32_t fetch[3] = {0, store > local ? store - local : 0,
                             held > MOON_MAX(local, store) ? held - local : 0};
        int32_t  from[3]  = {-1, -1, holder};

        if (!sched_is_prefill(c, i)) {
            continue;
        }
        for (int o = 0; o < 3; o++) {
            if (o > 0 && fetch[o] == 0) {
                continue;
            }
            cand = *d;
            sched_predict_prefill(c, i, local, fetch[o], from[o], &cand);
            if (!have || cand.ttft_s < d->ttft_s) {
                *d   = cand;
                have = 1;
            }
        }
    }
}

static void moonlet_place(moon_sched_policy_t *policy, const sched_ctx_t *c,
                          moon_sched_decision_t *d)
{
    double   t_end, best_tbt = 0.0, best_join = 0.0;
    uint32_t best = UINT32_MAX;

    (void)policy;
    moonlet_prefill(c, d);
    if (c->colocated) {
        sched_set_decode(c, (uint32_t)d->prefill, d);
        return;
    }
    t_end = c->req->now_s + d->ttft_s;
    for (uint32_t j = 0; j < c->view->n_inst; j++) {
        sched_decode_pred_t p;

        if (!sched_is_decode(c, j)) {
            continue;
        }
        sched_predict_decode(c, j, t_end, d->prefill_s, &p);
        if (best == UINT32_MAX || p.tbt_s < best_tbt ||
            (p.tbt_s == best_tbt && p.join_s < best_join)) {
            best      = j;
            best_tbt  = p.tbt_s;
            best_join = p.join_s;
        }
    }
    /* room never comes anywhere: the least loaded one, where it waits */
    sched_set_decode(c, isfinite(best_tbt) ? best : sched_least_loaded_decode(c), d);
}

const sched_policy_ops_t sched_moonlet_ops = {
    .name     = "moonlet",
    .doc      = "ours: prices every fetch option (pull when the transfer costs less than the "
                "compute it saves); decode by TBT predicted at prefill end with room waits; "
                "sheds costly prefills under overload",
    .peak     = 1,
    .handover = 1,
    .shed     = 1,
    .place    = moonlet_place,
};
