/* scheduler/predict.c - the predictions every policy makes for what it picked:
 * TTFT = transfer + queue + prefill on the prefill side; on the decode side,
 * when the new sequence can join the batch (KV and batch room, found from the
 * predicted finish times), the step time then, and the TBT it implies. Pure
 * reads of the view. */
#include "sched_internal.h"

#include <math.h>
#include <stdlib.h>

int sched_is_prefill(const sched_ctx_t *c, uint32_t i)
{
    const moon_sched_instance_t *inst = &c->view->inst[i];

    return inst->alive &&
           inst->role == (c->colocated ? MOON_SCHED_ROLE_COLOCATED : MOON_SCHED_ROLE_PREFILL);
}

int sched_is_decode(const sched_ctx_t *c, uint32_t i)
{
    const moon_sched_instance_t *inst = &c->view->inst[i];

    return inst->alive &&
           inst->role == (c->colocated ? MOON_SCHED_ROLE_COLOCATED : MOON_SCHED_ROLE_DECODE);
}

uint32_t sched_local_blocks(const sched_ctx_t *c, uint32_t i)
{
    return c->req->local_blocks != NULL ? c->req->local_blocks[i] : 0;
}

void sched_predict_prefill(const sched_ctx_t *c, uint32_t i, uint32_t local, uint32_t fetch,
                           int32_t fetch_from, moon_sched_decision_t *d)
{
    const moon_sched_instance_t *inst   = &c->view->inst[i];
    const moon_sched_request_t  *req    = c->req;
    uint64_t                     prefix = (uint64_t)(local + fetch) * req->block_tokens;

    d->prefill      = (int32_t)i;
    d->local_blocks = local;
    d->fetch_blocks = fetch;
    d->fetch_from   = fetch > 0 ? fetch_from : -1;
    /* a fully cached prompt still computes its last token (for the logits) */
    if (prefix >= req->prompt_tokens) {
        prefix = req->prompt_tokens - 1;
    }
    d->n_new_tokens = req->prompt_tokens - prefix;
    d->transfer_s   = moon_sched_cost_transfer_s(&inst->cost, fetch);
    d->queue_s      = moon_sched_instance_queue_at(inst, req->now_s);
    d->prefill_s    = moon_sched_cost_prefill_s(&inst->cost, d->n_new_tokens, prefix);
    d->ttft_s       = d->transfer_s + d->queue_s + d->prefill_s;
}

static int has_room(const moon_sched_instance_t *inst, uint32_t batch, uint64_t kv_free,
                    uint32_t blocks_new)
{
    return (inst->max_batch == 0 || batch < inst->max_batch) &&
           (inst->kv_blocks_total == 0 || kv_free >= blocks_new);
}

/* Events by time; on a tie a finish comes before a join (a sequence is alive
 * on [start_s, finish_s)). */
static int by_time(const void *a, const void *b)
{
    const sched_event_t *x = a, *y = b;

    if (x->t_s != y->t_s) {
        return (x->t_s > y->t_s) - (x->t_s < y->t_s);
    }
    return (x->d_batch > y->d_batch) - (x->d_batch < y->d_batch);
}

/* The first time >= t_s the new sequence fits on inst: t_s itself, or the
 * finish of a running sequence that frees enough (sequences that join after
 * t_s are left out: they come after it). HUGE_VAL: never (untracked load or
 * a request larger than the pool). */
static double join_time(const sched_ctx_t *c, const moon_sched_instance_t *inst, double t_s)
{
    uint32_t batch, n = 0;
    uint64_t kv_free = sched_kv_free_at(inst, t_s);

    moon_sched_instance_load_at(inst, t_s, &batch, NULL);
    if (has_room(inst, batch, kv_free, c->blocks_new)) {
        return t_s;
    }
    for (uint32_t k = 0; k < inst->n_seqs; k++) {
        const moon_sched_seq_t *s = &inst->seqs[k];
        if (s->start_s <= t_s && t_s < s->finish_s) {
            c->scratch[n++] = (sched_event_t){s->finish_s, -1, s->kv_blocks, 0};
        }
    }
    if (n > 1) {
        qsort(c->scratch, n, sizeof(*c->scratch), by_time);
    }
    for (uint32_t k = 0; k < n; k++) {
        batch--;
        kv_free += c->scratch[k].kv_blocks;
        if (has_room(inst, batch, kv_free, c->blocks_new)) {
            return c->scratch[k].t_s;
        }
    }
    return HUGE_VAL;
}

/* The largest step over [from_s, until_s) with the new sequence in the
 * batch: a sweep over the joins and finishes of the predicted sequences. */
static double peak_step(const sched_ctx_t *c, const moon_sched_instance_t *inst, double from_s,
                        double until_s)
{
    uint32_t batch, n = 0;
    uint64_t ctx;
    int64_t  b, x;
    double   peak;

    moon_sched_instance_load_at(inst, from_s, &batch, &ctx);
    b    = (int64_t)batch + 1;
    x    = (int64_t)(ctx + c->ctx_new);
    peak = moon_sched_cost_step_s(&inst->cost, (uint32_t)b, (uint64_t)x);
    for (uint32_t k = 0; k < inst->n_seqs; k++) {
        const moon_sched_seq_t *s = &inst->seqs[k];
        if (s->start_s > from_s && s->start_s < until_s) {
            c->scratch[n++] = (sched_event_t){s->start_s, +1, 0, (int64_t)s->ctx_tokens};
        }
        if (s->finish_s > from_s && s->finish_s < until_s && s->start_s < until_s) {
            c->scratch[n++] = (sched_event_t){s->finish_s, -1, 0, -(int64_t)s->ctx_tokens};
        }
    }
    if (n > 1) {
        qsort(c->scratch, n, sizeof(*c->scratch), by_time);
    }
    for (uint32_t k = 0; k < n; k++) {
        b += c->scratch[k].d_batch;
        x += c->scratch[k].d_ctx;
        if (c->scratch[k].d_batch > 0) {
            peak = fmax(peak, moon_sched_cost_step_s(&inst->cost, (uint32_t)b, (uint64_t)x));
        }
    }
    return peak;
}

/* How long after its prefill's end (t_s) the new sequence's KV is all on
 * inst: its prompt's blocks, and those of the sequences joining inst
 * during its compute (their pulls share the link), go over inst's link from
 * the compute's start (the reused prefix is sent then, computed chunks as
 * they finish). */
static double handover_wait(const sched_ctx_t *c, const moon_sched_instance_t *inst, double t_s,
                            double compute_s)
{
    uint64_t blocks = (c->req->prompt_tokens + c->req->block_tokens - 1) / c->req->block_tokens;

    for (uint32_t k = 0; k < inst->n_seqs; k++) {
        const moon_sched_seq_t *s = &inst->seqs[k];
        if (s->start_s > t_s - compute_s && s->start_s <= t_s) {
            blocks += s->kv_blocks;
        }
    }
    return fmax(0.0,
                moon_sched_cost_transfer_s(&inst->cost, (uint32_t)MOON_MIN(blocks, UINT32_MAX)) -
                    compute_s);
}

void sched_predict_decode(const sched_ctx_t *c, uint32_t j, double t_s, double compute_s,
                          sched_decode_pred_t *p)
{
    const moon_sched_instance_t *inst  = &c->view->inst[j];
    uint32_t                     gaps  = c->req->max_tokens - 1, n_slow;
    uint32_t                     batch = 0;
    uint64_t                     ctx   = 0;

    /* it joins once its KV is there and the batch has room */
    p->join_s =
        join_time(c, inst, c->handover ? t_s + handover_wait(c, inst, t_s, compute_s) : t_s);
    if (isfinite(p->join_s)) {
        moon_sched_instance_load_at(inst, p->join_s, &batch, &ctx);
    } else {
        moon_sched_instance_load_at(inst, t_s, &batch, &ctx);
    }
    p->step_s = moon_sched_cost_step_s(&inst->cost, batch + 1, ctx + c->ctx_new);
    if (c->peak && isfinite(p->join_s)) {
        /* sequences placed earlier that join during its life slow every
         * step from then on, its own and its neighbours' */
        p->step_s =
            peak_step(c, inst, p->join_s, p->join_s + (double)c->req->max_tokens * p->step_s);
    }
    if (gaps == 0) {
        p->tbt_s = 0.0; /* one token: the prefill's, no decode gap */
        return;
    }
    if (!isfinite(p->join_s)) {
        p->tbt_s = HUGE_VAL;
        return;
    }
    /* the first gap is longer by the wait to join plus up to a step (a
     * sequence joins the batch between steps); TBT is the mean of the
     * slowest tenth of the gaps, which that one belongs to */
    n_slow   = (gaps + 9) / 10;
    p->tbt_s = p->step_s + (p->join_s - t_s + p->step_s) / n_slow;
}

void sched_set_decode(const sched_ctx_t *c, uint32_t j, moon_sched_decision_t *d)
{
    sched_decode_pred_t p;
    double              t_end = c->req->now_s + d->ttft_s;

    sched_predict_decode(c, j, t_end, d->prefill_s, &p);
    d->decode        = (int32_t)j;
    d->decode_join_s = isfinite(p.join_s) ? p.join_s : t_end;
    d->step_s        = p.step_s;
    d->tbt_s         = p.tbt_s;
}

uint32_t sched_least_loaded_decode(const sched_ctx_t *c)
{
    uint32_t best = UINT32_MAX, best_batch = 0;
    uint64_t best_ctx = 0, best_free = 0;

    for (uint32_t j = 0; j < c->view->n_inst; j++) {
        const moon_sched_instance_t *inst = &c->view->inst[j];
        uint32_t                     batch;
        uint64_t                     ctx;

        if (!sched_is_decode(c, j)) {
            continue;
        }
        moon_sched_instance_load_at(inst, c->req->now_s, &batch, &ctx);
        if (best == UINT32_MAX || batch < best_batch ||
            (batch == best_batch &&
             (ctx < best_ctx || (ctx == best_ctx && inst->kv_blocks_free > best_free)))) {
            best       = j;
            best_batch = batch;
            best_ctx   = ctx;
            best_free  = inst->kv_blocks_free;
        }
    }
    return best;
}
