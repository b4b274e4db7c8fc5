/* scheduler/policy.c - the policy registry (names, docs, create by name) and
 * the decision frame every policy shares: argument checks, the colocated or
 * disaggregated mode, liveness, then the policy's pick, then early rejection.
 * A policy object is used by one thread at a time. */
#include "moonlet/sched_policy.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "sched_internal.h"

#include <math.h>
#include <string.h>

static const sched_policy_ops_t *const registry[] = {
    &sched_moonlet_ops,      &sched_mooncake_ops,    &sched_cache_aware_ops,
    &sched_least_loaded_ops, &sched_round_robin_ops, &sched_random_ops,
};

void moon_sched_config_default(moon_sched_config_t *cfg)
{
    if (cfg == NULL) {
        return;
    }
    cfg->seed              = 1;
    cfg->early_reject      = 0;
    cfg->balance_threshold = MOON_SCHED_BALANCE_THRESHOLD_DEFAULT;
    cfg->shed_after        = MOON_SCHED_SHED_AFTER_DEFAULT;
    cfg->shed_share        = MOON_SCHED_SHED_SHARE_DEFAULT;
}

/* The i-th policy: the built-in ones, then those registered. */
static const sched_policy_ops_t *policy_at(uint32_t i)
{
    return i < MOON_ARRAY_SIZE(registry) ? registry[i]
                                         : sched_ext_at(i - (uint32_t)MOON_ARRAY_SIZE(registry));
}

const char *moon_sched_policy_name_at(uint32_t i)
{
    const sched_policy_ops_t *ops = policy_at(i);

    return ops != NULL ? ops->name : NULL;
}

const char *moon_sched_policy_doc_at(uint32_t i)
{
    const sched_policy_ops_t *ops = policy_at(i);

    return ops != NULL ? ops->doc : NULL;
}

/* name, or name+reject / name+noreject: the ops and the override (-1: none). */
static const sched_policy_ops_t *lookup(const char *name, int *reject_p)
{
    const char *plus = strchr(name, '+');
    size_t      len  = plus != NULL ? (size_t)(plus - name) : strlen(name);

    *reject_p = -1;
    if (plus != NULL) {
        if (strcmp(plus, "+reject") == 0) {
            *reject_p = 1;
        } else if (strcmp(plus, "+noreject") == 0) {
            *reject_p = 0;
        } else {
            return NULL;
        }
    }
    for (size_t i = 0; i < MOON_ARRAY_SIZE(registry); i++) {
        if (strlen(registry[i]->name) == len && strncmp(registry[i]->name, name, len) == 0) {
            return registry[i];
        }
    }
    return sched_ext_lookup(name, len);
}

moon_status_t moon_sched_policy_create(const char *name, const moon_sched_config_t *cfg,
                                       moon_sched_policy_t **policy_p)
{
    const sched_policy_ops_t *ops;
    moon_sched_policy_t      *policy;
    moon_sched_config_t       conf;
    int                       reject;

    if (name == NULL || policy_p == NULL) {
        MOON_ERROR("sched policy create: no %s", name == NULL ? "name" : "output");
        return MOON_ERR_INVALID_PARAM;
    }
    moon_sched_config_default(&conf);
    if (cfg != NULL) {
        conf = *cfg;
    }
    if (!(conf.balance_threshold > 0.0) || !isfinite(conf.balance_threshold)) {
        MOON_ERROR("sched policy create: balance threshold %g must be > 0", conf.balance_threshold);
        return MOON_ERR_INVALID_PARAM;
    }
    if (!(conf.shed_after >= 0.0 && conf.shed_after <= 1.0) ||
        !(conf.shed_share >= 0.0 && conf.shed_share <= 1.0)) {
        MOON_ERROR("sched policy create: shed after %g and shed share %g must be in [0, 1]",
                   conf.shed_after, conf.shed_share);
        return MOON_ERR_INVALID_PARAM;
    }
    ops = lookup(name, &reject);
    if (ops == NULL) {
        MOON_ERROR("sched policy create: no policy called '%s'", name);
        return MOON_ERR_NOT_FOUND;
    }
    if (reject >= 0) {
        conf.early_reject = reject;
    }
    policy = moon_calloc(1, sizeof(*policy));
    if (policy == NULL) {
        MOON_ERROR("sched policy create: out of memory");
        return MOON_ERR_NO_MEMORY;
    }
    policy->ops = ops;
    policy->cfg = conf;
    policy->rng = conf.seed;
    *policy_p   = policy;
    return MOON_OK;
}

void moon_sched_policy_destroy(moon_sched_policy_t *policy)
{
    if (policy == NULL) {
        return;
    }
    moon_free(policy->scratch);
    moon_free(policy);
}

const char *moon_sched_policy_name(const moon_sched_policy_t *policy)
{
    return policy != NULL ? policy->ops->name : "?";
}

int moon_sched_policy_early_reject(const moon_sched_policy_t *policy)
{
    return policy != NULL && policy->cfg.early_reject;
}

static int request_ok(const moon_sched_view_t *view, const moon_sched_request_t *req)
{
    if (req->prompt_tokens == 0 || req->block_tokens == 0 || req->max_tokens == 0 ||
        (uint64_t)req->n_blocks * req->block_tokens > req->prompt_tokens ||
        req->store_blocks > req->n_blocks || !isfinite(req->now_s) || !(req->ttft_slo_s >= 0.0) ||
        !(req->tbt_slo_s >= 0.0)) {
        return 0;
    }
    for (uint32_t i = 0; req->local_blocks != NULL && i < view->n_inst; i++) {
        if (req->local_blocks[i] > req->n_blocks) {
            return 0;
        }
    }
    return 1;
}

/* The scratch the decode predictions need: two events per predicted
 * sequence of the busiest instance. */
static moon_status_t scratch_reserve(moon_sched_policy_t *policy, const moon_sched_view_t *view)
{
    uint32_t       need = 0;
    sched_event_t *grown;

    for (uint32_t i = 0; i < view->n_inst; i++) {
        need = MOON_MAX(need, 2 * view->inst[i].n_seqs);
    }
    if (need <= policy->scratch_cap) {
        return MOON_OK;
    }
    grown = moon_realloc(policy->scratch, (size_t)need * sizeof(*grown));
    if (grown == NULL) {
        MOON_ERROR("sched policy: out of memory for %u sequences of scratch", need);
        return MOON_ERR_NO_MEMORY;
    }
    policy->scratch     = grown;
    policy->scratch_cap = need;
    return MOON_OK;
}

/* Shedding by cost (policies with ops->shed): when the queue is long, a
 * request is worth one unit of goodput whatever its prefill costs, and the
 * prefill time it takes is taken from the requests behind it. So once the
 * queue passes shed_after of the TTFT SLO, a request whose prefill would use
 * more than shed_share of the budget left is turned away, and the cheap
 * (mostly cached) ones that fit in its place are admitted: on the synthetic
 * trace at 2.5x its rate this keeps the queues near 14 s instead of at the
 * SLO's edge and meets the SLOs of more requests. An idle instance admits
 * whatever fits (the queue is under the bar). */
static int shed(const moon_sched_policy_t *policy, const moon_sched_request_t *req,
                const moon_sched_decision_t *d)
{
    double budget = req->ttft_slo_s - d->queue_s - d->transfer_s;

    return policy->ops->shed && req->ttft_slo_s > 0.0 &&
           d->queue_s > policy->cfg.shed_after * req->ttft_slo_s &&
           d->prefill_s > policy->cfg.shed_share * budget;
}

/* Early rejection on the predictions of what was picked. */
static void judge(const moon_sched_policy_t *policy, const moon_sched_request_t *req,
                  moon_sched_decision_t *d)
{
    d->rejected = MOON_SCHED_ADMIT;
    d->reason   = NULL;
    if (!policy->cfg.early_reject) {
        return;
    }
    if (req->ttft_slo_s > 0.0 && d->ttft_s > req->ttft_slo_s) {
        d->rejected = MOON_SCHED_REJECT_TTFT;
        d->reason   = "predicted ttft over slo";
    } else if (shed(policy, req, d)) {
        d->rejected = MOON_SCHED_REJECT_TTFT;
        d->reason   = "overloaded: this prefill would take most of the ttft budget left";
    } else if (req->tbt_slo_s > 0.0 && !isfinite(d->tbt_s)) {
        d->rejected = MOON_SCHED_REJECT_NO_ROOM;
        d->reason   = "no decode instance can hold the sequence";
    } else if (req->tbt_slo_s > 0.0 && d->tbt_s > req->tbt_slo_s) {
        d->rejected = MOON_SCHED_REJECT_TBT;
        d->reason   = "predicted tbt over slo";
    }
}

moon_status_t moon_sched_policy_decide(moon_sched_policy_t *policy, const moon_sched_view_t *view,
                                       const moon_sched_request_t *req,
                                       moon_sched_decision_t      *decision_p)
{
    moon_sched_decision_t d;
    sched_ctx_t           c;
    uint32_t              n_colocated = 0, n_prefill = 0, n_decode = 0;
    moon_status_t         status;

    if (policy == NULL || view == NULL || view->inst == NULL || view->n_inst == 0 || req == NULL ||
        decision_p == NULL) {
        MOON_ERROR("sched decide: null argument or empty view");
        return MOON_ERR_INVALID_PARAM;
    }
    if (!request_ok(view, req)) {
        MOON_ERROR("sched decide: bad request (prompt %llu tokens, %u blocks of %u, store %u, "
                   "max_tokens %u)",
                   (unsigned long long)req->prompt_tokens, req->n_blocks, req->block_tokens,
                   req->store_blocks, req->max_tokens);
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < view->n_inst; i++) {
        n_colocated += view->inst[i].role == MOON_SCHED_ROLE_COLOCATED;
    }
    if (n_colocated != 0 && n_colocated != view->n_inst) {
        MOON_ERROR("sched decide: the view mixes colocated and prefill/decode instances");
        return MOON_ERR_INVALID_PARAM;
    }
    c = (sched_ctx_t){
        .view       = view,
        .req        = req,
        .colocated  = n_colocated != 0,
        .peak       = policy->ops->peak,
        .handover   = policy->ops->handover,
        .ctx_new    = req->prompt_tokens + req->max_tokens,
        .blocks_new = (uint32_t)((req->prompt_tokens + req->max_tokens + req->block_tokens - 1) /
                                 req->block_tokens)};
    for (uint32_t i = 0; i < view->n_inst; i++) {
        n_prefill += sched_is_prefill(&c, i);
        n_decode += sched_is_decode(&c, i);
    }
    if (n_prefill == 0 || n_decode == 0) {
        MOON_WARN("sched decide: no alive %s instance", c.colocated      ? "colocated"
                                                        : n_prefill == 0 ? "prefill"
                                                                         : "decode");
        return MOON_ERR_NO_RESOURCE;
    }
    status = scratch_reserve(policy, view);
    if (status != MOON_OK) {
        return status;
    }
    c.scratch = policy->scratch;
    memset(&d, 0, sizeof(d));
    policy->ops->place(policy, &c, &d);
    judge(policy, req, &d);
    *decision_p = d;
    return MOON_OK;
}
