/* scheduler/policy_basic.c - the baseline policies: random (seeded),
 * round-robin, least-loaded and local cache-aware. Each reuses the chosen
 * prefill instance's own cached prefix and fetches nothing. */
#include "sched_internal.h"

/* splitmix64: small, seeded, the same sequence everywhere */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef int (*candidate_fn)(const sched_ctx_t *c, uint32_t i);

/* The k-th (0-based) candidate by index. */
static uint32_t nth_candidate(const sched_ctx_t *c, candidate_fn is, uint32_t k)
{
    for (uint32_t i = 0; i < c->view->n_inst; i++) {
        if (is(c, i) && k-- == 0) {
            return i;
        }
    }
    return UINT32_MAX; /* not reached: k < the number of candidates */
}

static uint32_t count_candidates(const sched_ctx_t *c, candidate_fn is)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < c->view->n_inst; i++) {
        n += is(c, i);
    }
    return n;
}

static void use_prefill(const sched_ctx_t *c, uint32_t i, moon_sched_decision_t *d)
{
    sched_predict_prefill(c, i, sched_local_blocks(c, i), 0, -1, d);
}

static void random_place(moon_sched_policy_t *policy, const sched_ctx_t *c,
                         moon_sched_decision_t *d)
{
    uint32_t p = nth_candidate(
        c, sched_is_prefill,
        (uint32_t)(next_random(&policy->rng) % count_candidates(c, sched_is_prefill)));

    use_prefill(c, p, d);
    if (c->colocated) {
        sched_set_decode(c, p, d);
        return;
    }
    sched_set_decode(
        c,
        nth_candidate(c, sched_is_decode,
                      (uint32_t)(next_random(&policy->rng) % count_candidates(c, sched_is_decode))),
        d);
}

/* The first candidate at or after *cursor (cyclic); the cursor moves past it. */
static uint32_t next_in_turn(const sched_ctx_t *c, candidate_fn is, uint32_t *cursor)
{
    uint32_t n = c->view->n_inst;

    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (*cursor + k) % n;
        if (is(c, i)) {
            *cursor = (i + 1) % n;
            return i;
        }
    }
    return UINT32_MAX; /* not reached: one candidate is alive */
}

static void round_robin_place(moon_sched_policy_t *policy, const sched_ctx_t *c,
                              moon_sched_decision_t *d)
{
    uint32_t p = next_in_turn(c, sched_is_prefill, &policy->rr_prefill);

    use_prefill(c, p, d);
    sched_set_decode(c, c->colocated ? p : next_in_turn(c, sched_is_decode, &policy->rr_decode), d);
}

/* Prefill instance by (longest local prefix if by_cache), then smallest
 * queue now, then fewer queued tokens, then lower index. */
static uint32_t pick_prefill(const sched_ctx_t *c, int by_cache)
{
    uint32_t best = UINT32_MAX, best_local = 0;
    double   best_queue  = 0.0;
    uint64_t best_tokens = 0;

    for (uint32_t i = 0; i < c->view->n_inst; i++) {
        const moon_sched_instance_t *inst  = &c->view->inst[i];
        uint32_t                     local = by_cache ? sched_local_blocks(c, i) : 0;
        double                       queue = moon_sched_instance_queue_at(inst, c->req->now_s);
        int                          better;

        if (!sched_is_prefill(c, i)) {
            continue;
        }
        better =
            best == UINT32_MAX || local > best_local ||
            (local == best_local &&
             (queue < best_queue || (queue == best_queue && inst->queue_tokens < best_tokens)));
        if (better) {
            best        = i;
            best_local  = local;
            best_queue  = queue;
            best_tokens = inst->queue_tokens;
        }
    }
    return best;
}

static void least_loaded_place(moon_sched_policy_t *policy, const sched_ctx_t *c,
                               moon_sched_decision_t *d)
{
    uint32_t p = pick_prefill(c, 0);

    (void)policy;
    use_prefill(c, p, d);
    sched_set_decode(c, c->colocated ? p : sched_least_loaded_decode(c), d);
}

static void cache_aware_place(moon_sched_policy_t *policy, const sched_ctx_t *c,
                              moon_sched_decision_t *d)
{
    uint32_t p = pick_prefill(c, 1);

    (void)policy;
    use_prefill(c, p, d);
    sched_set_decode(c, c->colocated ? p : sched_least_loaded_decode(c), d);
}

const sched_policy_ops_t sched_random_ops = {
    .name  = "random",
    .doc   = "uniform over alive instances (seeded, deterministic)",
    .place = random_place,
};
const sched_policy_ops_t sched_round_robin_ops = {
    .name  = "round-robin",
    .doc   = "cycles over alive instances, skipping dead ones",
    .place = round_robin_place,
};
const sched_policy_ops_t sched_least_loaded_ops = {
    .name  = "least-loaded",
    .doc   = "prefill with the smallest predicted queue, decode with the smallest batch",
    .place = least_loaded_place,
};
const sched_policy_ops_t sched_cache_aware_ops = {
    .name  = "cache-aware",
    .doc   = "prefill with the longest local prefix (ties: smaller queue); local cache only",
    .place = cache_aware_place,
};
