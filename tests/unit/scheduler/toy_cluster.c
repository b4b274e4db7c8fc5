/* tests/unit/scheduler/toy_cluster.c - the toy cluster of toy_cluster.h: one
 * event loop over arrivals (the policy decides, the view commits), prefill
 * ends (caches and store learn the prompt's blocks, the sequence reaches its
 * decode instance) and decode steps (continuous batching; each finished
 * sequence is released and its TBT measured; the instance reports its load). */
#include "toy_cluster.h"

#include "moonlet/alloc.h"

#include "moon_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double   arrival_s;
    uint32_t session, prompt_blocks, max_tokens;
} toy_req_t;

typedef struct {
    int      active;
    uint32_t req, made;
    double   last_token_s;
    uint64_t ctx_tokens;
    double   gaps[TOY_MAX_GAPS];
} toy_slot_t;

typedef struct {
    double   at_s;
    uint32_t req, prefill, decode;
} toy_join_t;

typedef struct {
    const toy_config_t  *cfg;
    moon_sched_view_t    view;
    moon_sched_policy_t *policy;
    toy_req_t            reqs[TOY_MAX_REQS];
    double               first_token_s[TOY_MAX_REQS];
    uint32_t             local[TOY_MAX_INST][TOY_SESSIONS]; /* leading blocks cached */
    uint32_t             store[TOY_SESSIONS];
    double               prefill_free_s[TOY_MAX_INST];
    toy_join_t           joins[TOY_MAX_REQS];
    uint32_t             n_joins;
    uint32_t             waiting[TOY_MAX_INST][TOY_MAX_REQS];
    uint32_t             n_waiting[TOY_MAX_INST];
    toy_slot_t           slots[TOY_MAX_INST][TOY_MAX_BATCH];
    double               next_step_s[TOY_MAX_INST];
    double               ttft_sum_s;
    toy_result_t         res;
} toy_t;

static double uniform(uint64_t *rng)
{
    return (double)(moon_test_rand(rng) >> 11) * (1.0 / 9007199254740992.0);
}

/* Conversations: each request extends its session's prompt by a few blocks. */
static void make_workload(toy_t *toy)
{
    const toy_config_t *cfg                  = toy->cfg;
    uint64_t            rng                  = cfg->seed;
    uint32_t            blocks[TOY_SESSIONS] = {0};
    double              t                    = 0.0;

    for (uint32_t i = 0; i < cfg->n_reqs; i++) {
        uint32_t s  = (uint32_t)(uniform(&rng) * TOY_SESSIONS);
        uint32_t nb = cfg->new_blocks_min + (uint32_t)(uniform(&rng) * cfg->new_blocks_span);

        t -= log(1.0 - uniform(&rng)) / cfg->rate;
        if (blocks[s] + nb > cfg->max_prompt_blocks) {
            blocks[s] = 0;
        }
        blocks[s] += nb;
        toy->reqs[i] =
            (toy_req_t){t, s, blocks[s], cfg->out_min + (uint32_t)(uniform(&rng) * cfg->out_span)};
    }
}

static int on_arrival(toy_t *toy, uint32_t r)
{
    const toy_config_t   *cfg                 = toy->cfg;
    const toy_req_t      *q                   = &toy->reqs[r];
    uint32_t              local[TOY_MAX_INST] = {0};
    moon_sched_request_t  req                 = {0};
    moon_sched_decision_t d;
    double                start, end;
    uint64_t              prefix;
    uint32_t              p;

    for (uint32_t i = 0; i < cfg->n_prefill; i++) {
        local[i] = MOON_MIN(toy->local[i][q->session], q->prompt_blocks);
    }
    req.tag           = r;
    req.prompt_tokens = (uint64_t)q->prompt_blocks * cfg->block_tokens;
    req.block_tokens  = cfg->block_tokens;
    req.n_blocks      = q->prompt_blocks;
    req.local_blocks  = local;
    req.store_blocks  = MOON_MIN(toy->store[q->session], q->prompt_blocks);
    req.max_tokens    = q->max_tokens;
    req.ttft_slo_s    = cfg->ttft_slo_s;
    req.tbt_slo_s     = cfg->tbt_slo_s;
    req.now_s         = q->arrival_s;
    if (moon_sched_policy_decide(toy->policy, &toy->view, &req, &d) != MOON_OK) {
        return -1;
    }
    if (d.rejected != MOON_SCHED_ADMIT) {
        toy->res.rejected++;
        return 0;
    }
    if (moon_sched_view_commit(&toy->view, &req, &d) != MOON_OK) {
        return -1;
    }
    toy->res.admitted++;
    toy->res.computed_tokens += d.n_new_tokens;
    toy->res.fetched_blocks += d.fetch_blocks;
    /* truth: FIFO prefill, after the fetch has landed */
    p      = (uint32_t)d.prefill;
    start  = fmax(toy->prefill_free_s[p], req.now_s + d.transfer_s);
    prefix = (uint64_t)(d.local_blocks + d.fetch_blocks) * cfg->block_tokens;
    prefix = MOON_MIN(prefix, req.prompt_tokens - 1);
    end    = start + moon_sched_cost_prefill_s(&cfg->cost, req.prompt_tokens - prefix, prefix);
    toy->prefill_free_s[p] = end;
    toy->ttft_sum_s += end - req.now_s;
    toy->joins[toy->n_joins++] = (toy_join_t){end, r, p, (uint32_t)d.decode - cfg->n_prefill};
    return 0;
}

/* The prefill ended: its instance and the store hold the prompt's blocks, the
 * first token is out, the sequence waits for its decode instance's batch. */
static void on_join(toy_t *toy, uint32_t k)
{
    toy_join_t       e = toy->joins[k];
    const toy_req_t *q = &toy->reqs[e.req];

    toy->joins[k] = toy->joins[--toy->n_joins];
    toy->local[e.prefill][q->session] =
        MOON_MAX(toy->local[e.prefill][q->session], q->prompt_blocks);
    toy->store[q->session]    = MOON_MAX(toy->store[q->session], q->prompt_blocks);
    toy->first_token_s[e.req] = e.at_s;
    toy->waiting[e.decode][toy->n_waiting[e.decode]++] = e.req;
    if (isinf(toy->next_step_s[e.decode])) {
        toy->next_step_s[e.decode] = e.at_s;
    }
}

static int by_gap_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x < y) - (x > y);
}

static void finish(toy_t *toy, uint32_t j, toy_slot_t *s)
{
    const toy_config_t *cfg    = toy->cfg;
    uint32_t            n_gaps = toy->reqs[s->req].max_tokens - 1, n_slow = (n_gaps + 9) / 10;
    double              sum = 0.0, ttft, tbt = 0.0;

    qsort(s->gaps, n_gaps, sizeof(double), by_gap_desc);
    for (uint32_t g = 0; g < n_slow && n_gaps > 0; g++) {
        sum += s->gaps[g];
    }
    tbt  = n_gaps > 0 ? sum / n_slow : 0.0;
    ttft = toy->first_token_s[s->req] - toy->reqs[s->req].arrival_s;
    if (ttft > cfg->ttft_slo_s) {
        toy->res.ttft_miss++;
    } else if (tbt > cfg->tbt_slo_s) {
        toy->res.tbt_miss++;
    } else {
        toy->res.met++;
    }
    moon_sched_view_release(&toy->view, cfg->n_prefill + j, s->req);
    s->active = 0;
}

static void on_step(toy_t *toy, uint32_t j, double t)
{
    const toy_config_t *cfg   = toy->cfg;
    toy_slot_t         *slots = toy->slots[j];
    uint32_t            batch = 0, running = 0;
    uint64_t            ctx = 0;
    double              end;
    moon_sched_report_t report = {0};

    for (uint32_t k = 0; k < cfg->max_batch && toy->n_waiting[j] > 0; k++) {
        if (!slots[k].active) {
            uint32_t r = toy->waiting[j][0];
            memmove(toy->waiting[j], toy->waiting[j] + 1, --toy->n_waiting[j] * sizeof(uint32_t));
            slots[k] = (toy_slot_t){.active       = 1,
                                    .req          = r,
                                    .made         = 1,
                                    .last_token_s = toy->first_token_s[r],
                                    .ctx_tokens =
                                        (uint64_t)toy->reqs[r].prompt_blocks * cfg->block_tokens};
        }
    }
    for (uint32_t k = 0; k < cfg->max_batch; k++) {
        batch += slots[k].active;
        ctx += slots[k].active ? slots[k].ctx_tokens : 0;
    }
    if (batch == 0) {
        toy->next_step_s[j] = HUGE_VAL;
        return;
    }
    end = t + moon_sched_cost_step_s(&cfg->cost, batch, ctx);
    for (uint32_t k = 0; k < cfg->max_batch; k++) {
        toy_slot_t *s = &slots[k];
        if (!s->active) {
            continue;
        }
        s->gaps[s->made - 1] = end - s->last_token_s;
        s->last_token_s      = end;
        s->made++;
        s->ctx_tokens++;
        if (s->made >= toy->reqs[s->req].max_tokens) {
            finish(toy, j, s);
        } else {
            running++;
        }
    }
    toy->next_step_s[j] = end;
    report.now_s        = end;
    report.running      = running + toy->n_waiting[j];
    report.block_tokens = cfg->block_tokens;
    moon_sched_view_report(&toy->view, cfg->n_prefill + j, &report);
}

static int run_events(toy_t *toy)
{
    const toy_config_t *cfg  = toy->cfg;
    uint32_t            next = 0;

    for (;;) {
        double   ta = next < cfg->n_reqs ? toy->reqs[next].arrival_s : HUGE_VAL;
        double   tj = HUGE_VAL, td = HUGE_VAL;
        uint32_t kj = 0, kd = 0;

        for (uint32_t k = 0; k < toy->n_joins; k++) {
            if (toy->joins[k].at_s < tj) {
                tj = toy->joins[k].at_s;
                kj = k;
            }
        }
        for (uint32_t j = 0; j < cfg->n_decode; j++) {
            if (toy->next_step_s[j] < td) {
                td = toy->next_step_s[j];
                kd = j;
            }
        }
        if (isinf(ta) && isinf(tj) && isinf(td)) {
            return 0;
        }
        if (ta <= tj && ta <= td) {
            if (on_arrival(toy, next++) != 0) {
                return -1;
            }
        } else if (tj <= td) {
            on_join(toy, kj);
        } else {
            on_step(toy, kd, td);
        }
    }
}

int toy_cluster_run(const toy_config_t *cfg, const char *policy, int early_reject,
                    toy_result_t *result)
{
    moon_sched_config_t pc;
    toy_t              *toy;
    int                 ret = -1;

    if (cfg->n_prefill + cfg->n_decode > TOY_MAX_INST || cfg->n_reqs > TOY_MAX_REQS ||
        cfg->max_batch > TOY_MAX_BATCH || cfg->out_min + cfg->out_span > TOY_MAX_GAPS + 1 ||
        cfg->out_min < 1) {
        return -1;
    }
    toy = moon_calloc(1, sizeof(*toy));
    if (toy == NULL) {
        return -1;
    }
    toy->cfg = cfg;
    moon_sched_config_default(&pc);
    pc.early_reject = early_reject;
    if (moon_sched_view_init(&toy->view, cfg->n_prefill + cfg->n_decode) != MOON_OK) {
        goto out_free;
    }
    if (moon_sched_policy_create(policy, &pc, &toy->policy) != MOON_OK) {
        goto out_fini;
    }
    for (uint32_t i = 0; i < cfg->n_prefill + cfg->n_decode; i++) {
        moon_sched_instance_t *inst = &toy->view.inst[i];
        inst->id                    = i;
        inst->role      = i < cfg->n_prefill ? MOON_SCHED_ROLE_PREFILL : MOON_SCHED_ROLE_DECODE;
        inst->alive     = 1;
        inst->cost      = cfg->cost;
        inst->max_batch = cfg->max_batch;
    }
    for (uint32_t j = 0; j < TOY_MAX_INST; j++) {
        toy->next_step_s[j] = HUGE_VAL;
    }
    make_workload(toy);
    if (run_events(toy) == 0) {
        toy->res.goodput_rps = toy->res.met / toy->reqs[cfg->n_reqs - 1].arrival_s;
        toy->res.ttft_mean_s = toy->res.admitted ? toy->ttft_sum_s / toy->res.admitted : 0.0;
        *result              = toy->res;
        ret                  = 0;
    }
    moon_sched_policy_destroy(toy->policy);
out_fini:
    moon_sched_view_fini(&toy->view);
out_free:
    moon_free(toy);
    return ret;
}
