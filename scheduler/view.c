/* scheduler/view.c - the cluster view's bookkeeping: predicted prefill queues
 * that drain in real time, predicted decode sequences with finish times, and
 * the reconciliation of both with the instances' load reports. One thread at
 * a time; allocation only when a sequence list or commit ring grows. */
#include "moonlet/sched_view.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "sched_internal.h"

#include <math.h>
#include <string.h>

moon_status_t moon_sched_view_init(moon_sched_view_t *view, uint32_t n_inst)
{
    moon_sched_instance_t *inst;

    if (view == NULL || n_inst == 0) {
        MOON_ERROR("sched view init: %s", view == NULL ? "no view" : "no instances");
        return MOON_ERR_INVALID_PARAM;
    }
    inst = moon_calloc(n_inst, sizeof(*inst));
    if (inst == NULL) {
        MOON_ERROR("sched view init: out of memory for %u instances", n_inst);
        return MOON_ERR_NO_MEMORY;
    }
    view->inst   = inst;
    view->n_inst = n_inst;
    return MOON_OK;
}

void moon_sched_view_fini(moon_sched_view_t *view)
{
    if (view == NULL || view->inst == NULL) {
        return;
    }
    for (uint32_t i = 0; i < view->n_inst; i++) {
        moon_free(view->inst[i].seqs);
        moon_free(view->inst[i].pending);
    }
    moon_free(view->inst);
    view->inst   = NULL;
    view->n_inst = 0;
}

double moon_sched_instance_queue_at(const moon_sched_instance_t *inst, double now_s)
{
    double elapsed;

    if (inst == NULL) {
        return 0.0;
    }
    elapsed = now_s - inst->queue_at_s;
    /* a clock read before the last update (out-of-order callers) drains nothing */
    if (!(elapsed > 0.0)) {
        return inst->queue_s;
    }
    return inst->queue_s > elapsed ? inst->queue_s - elapsed : 0.0;
}

void moon_sched_instance_load_at(const moon_sched_instance_t *inst, double t_s, uint32_t *batch_p,
                                 uint64_t *ctx_tokens_p)
{
    uint32_t batch = 0;
    uint64_t ctx   = 0;

    if (inst != NULL) {
        batch = inst->batch;
        ctx   = inst->ctx_tokens;
        for (uint32_t k = 0; k < inst->n_seqs; k++) {
            const moon_sched_seq_t *s = &inst->seqs[k];
            if (s->start_s <= t_s && t_s < s->finish_s) {
                batch++;
                ctx += s->ctx_tokens;
            }
        }
    }
    if (batch_p != NULL) {
        *batch_p = batch;
    }
    if (ctx_tokens_p != NULL) {
        *ctx_tokens_p = ctx;
    }
}

uint64_t sched_kv_free_at(const moon_sched_instance_t *inst, double t_s)
{
    uint64_t free_blocks = inst->kv_blocks_free;

    for (uint32_t k = 0; k < inst->n_seqs; k++) {
        if (inst->seqs[k].finish_s <= t_s) {
            free_blocks += inst->seqs[k].kv_blocks;
        }
    }
    return free_blocks;
}

/* Gives blocks back to the pool, never above its size when known. */
static void kv_give_back(moon_sched_instance_t *inst, uint64_t blocks)
{
    inst->kv_blocks_free += blocks;
    if (inst->kv_blocks_total != 0 && inst->kv_blocks_free > inst->kv_blocks_total) {
        inst->kv_blocks_free = inst->kv_blocks_total;
    }
}

static void kv_take(moon_sched_instance_t *inst, uint64_t blocks)
{
    inst->kv_blocks_free = inst->kv_blocks_free > blocks ? inst->kv_blocks_free - blocks : 0;
}

static void seq_remove(moon_sched_instance_t *inst, uint32_t k)
{
    kv_give_back(inst, inst->seqs[k].kv_blocks);
    inst->seqs[k] = inst->seqs[--inst->n_seqs];
}

/* Drops the sequences predicted to have finished by now. */
static void seqs_prune(moon_sched_instance_t *inst, double now_s)
{
    for (uint32_t k = 0; k < inst->n_seqs;) {
        if (inst->seqs[k].finish_s <= now_s) {
            seq_remove(inst, k);
        } else {
            k++;
        }
    }
}

/* Room for one more sequence (nothing else changes). */
static moon_status_t seqs_reserve(moon_sched_instance_t *inst)
{
    moon_sched_seq_t *grown;
    uint32_t          cap;

    if (inst->n_seqs < inst->seq_cap) {
        return MOON_OK;
    }
    cap   = inst->seq_cap ? inst->seq_cap * 2 : 16;
    grown = moon_realloc(inst->seqs, (size_t)cap * sizeof(*grown));
    if (grown == NULL) {
        MOON_ERROR("sched view: out of memory for %u sequences of instance %u", cap, inst->id);
        return MOON_ERR_NO_MEMORY;
    }
    inst->seqs    = grown;
    inst->seq_cap = cap;
    return MOON_OK;
}

static moon_status_t pending_reserve(moon_sched_instance_t *inst)
{
    if (inst->pending != NULL) {
        return MOON_OK;
    }
    inst->pending = moon_calloc(MOON_SCHED_PENDING_MAX, sizeof(*inst->pending));
    if (inst->pending == NULL) {
        MOON_ERROR("sched view: out of memory for the commit ring of instance %u", inst->id);
        return MOON_ERR_NO_MEMORY;
    }
    return MOON_OK;
}

/* Remembers a prefill commit; a full ring forgets its oldest. */
static void pending_push(moon_sched_instance_t *inst, double at_s, double prefill_s,
                         uint64_t tokens)
{
    uint32_t slot;

    if (inst->n_pending == MOON_SCHED_PENDING_MAX) {
        inst->pending_head = (inst->pending_head + 1) % MOON_SCHED_PENDING_MAX;
        inst->n_pending--;
        inst->n_covered -= inst->n_covered > 0;
    }
    slot                = (inst->pending_head + inst->n_pending) % MOON_SCHED_PENDING_MAX;
    inst->pending[slot] = (moon_sched_pending_t){at_s, prefill_s, tokens};
    inst->n_pending++;
}

moon_status_t moon_sched_view_commit(moon_sched_view_t *view, const moon_sched_request_t *req,
                                     const moon_sched_decision_t *decision)
{
    moon_sched_instance_t *p, *d;
    moon_sched_seq_t       seq;
    moon_status_t          status;
    double                 now;

    if (view == NULL || view->inst == NULL || req == NULL || decision == NULL ||
        decision->rejected != MOON_SCHED_ADMIT || decision->prefill < 0 || decision->decode < 0 ||
        (uint32_t)decision->prefill >= view->n_inst || (uint32_t)decision->decode >= view->n_inst ||
        req->block_tokens == 0) {
        MOON_ERROR(
            "sched view commit: bad argument (a rejected decision or an index out of range)");
        return MOON_ERR_INVALID_PARAM;
    }
    p   = &view->inst[decision->prefill];
    d   = &view->inst[decision->decode];
    now = req->now_s;
    /* reserve first so that a failure changes nothing */
    status = pending_reserve(p);
    if (status == MOON_OK) {
        seqs_prune(d, now);
        status = seqs_reserve(d);
    }
    if (status != MOON_OK) {
        return status;
    }
    p->queue_s    = moon_sched_instance_queue_at(p, now) + decision->prefill_s;
    p->queue_at_s = now;
    p->queue_tokens += decision->n_new_tokens;
    p->queue_reqs++;
    pending_push(p, now, decision->prefill_s, decision->n_new_tokens);

    seq.tag = req->tag;
    seq.start_s =
        isfinite(decision->decode_join_s) ? decision->decode_join_s : now + decision->ttft_s;
    seq.finish_s         = seq.start_s + (double)req->max_tokens * decision->step_s;
    seq.ctx_tokens       = req->prompt_tokens + req->max_tokens;
    seq.kv_blocks        = (uint32_t)((seq.ctx_tokens + req->block_tokens - 1) / req->block_tokens);
    d->seqs[d->n_seqs++] = seq;
    kv_take(d, seq.kv_blocks);
    return MOON_OK;
}

moon_status_t moon_sched_view_add_seq(moon_sched_view_t *view, uint32_t index,
                                      const moon_sched_seq_t *seq)
{
    moon_sched_instance_t *inst;
    moon_status_t          status;

    if (view == NULL || view->inst == NULL || index >= view->n_inst || seq == NULL ||
        !(seq->finish_s >= seq->start_s)) {
        MOON_ERROR("sched view add seq: bad argument");
        return MOON_ERR_INVALID_PARAM;
    }
    inst   = &view->inst[index];
    status = seqs_reserve(inst);
    if (status != MOON_OK) {
        return status;
    }
    inst->seqs[inst->n_seqs++] = *seq;
    kv_take(inst, seq->kv_blocks);
    return MOON_OK;
}

moon_status_t moon_sched_view_release(moon_sched_view_t *view, uint32_t index, uint64_t tag)
{
    moon_sched_instance_t *inst;

    if (view == NULL || view->inst == NULL || index >= view->n_inst) {
        MOON_ERROR("sched view release: bad argument");
        return MOON_ERR_INVALID_PARAM;
    }
    inst = &view->inst[index];
    for (uint32_t k = 0; k < inst->n_seqs; k++) {
        if (inst->seqs[k].tag == tag) {
            seq_remove(inst, k);
            return MOON_OK;
        }
    }
    return MOON_ERR_NOT_FOUND;
}

static const moon_sched_pending_t *pending_at(const moon_sched_instance_t *inst, uint32_t k)
{
    return &inst->pending[(inst->pending_head + k) % MOON_SCHED_PENDING_MAX];
}

/* The queue the instance reported, or one estimated from its counts. A
 * prefill instance serves its requests in order, so the r requests it still
 * has are the last r committed before the report: their predicted prefill
 * times (prefixes and all), scaled down by the tokens already computed of
 * the one in progress. Without that many remembered: r requests of equal
 * length sharing the tokens, without prefixes. */
static double reported_queue_s(const moon_sched_instance_t *inst, const moon_sched_report_t *r)
{
    double reqs, tokens = (double)r->queue_tokens, sum_s = 0.0, sum_tokens = 0.0;

    if (r->queue_s >= 0.0) {
        return r->queue_s;
    }
    if (r->queue_tokens == 0) {
        return 0.0;
    }
    if (r->queue_reqs > 0 && inst->n_covered >= r->queue_reqs) {
        for (uint32_t k = inst->n_covered - r->queue_reqs; k < inst->n_covered; k++) {
            sum_s += pending_at(inst, k)->prefill_s;
            sum_tokens += (double)pending_at(inst, k)->tokens;
        }
        return sum_tokens > tokens ? sum_s * tokens / sum_tokens : sum_s;
    }
    reqs = r->queue_reqs ? (double)r->queue_reqs : 1.0;
    return reqs * inst->cost.a0 + inst->cost.a1 * tokens + inst->cost.a2 * tokens * tokens / reqs;
}

/* The prefill side: the reported queue, then the commits made after the
 * report replayed on it in order (each drains the queue up to its time). */
static void report_prefill(moon_sched_instance_t *inst, const moon_sched_report_t *r)
{
    double   q, t = r->now_s;
    uint64_t tokens = r->queue_tokens;
    uint32_t reqs   = r->queue_reqs;

    while (inst->n_covered < inst->n_pending && pending_at(inst, inst->n_covered)->at_s <= t) {
        inst->n_covered++; /* the report saw it: kept for estimates, not replayed */
    }
    q = reported_queue_s(inst, r);
    for (uint32_t k = inst->n_covered; k < inst->n_pending; k++) {
        const moon_sched_pending_t *e       = pending_at(inst, k);
        double                      drained = e->at_s - t;

        if (drained > 0.0) {
            q = q > drained ? q - drained : 0.0;
            t = e->at_s;
        }
        q += e->prefill_s;
        tokens += e->tokens;
        reqs++;
    }
    inst->queue_s      = q;
    inst->queue_at_s   = t;
    inst->queue_tokens = tokens;
    inst->queue_reqs   = reqs;
}

/* The decode side: running sequences no predicted one accounts for become
 * the untracked batch; the free blocks exclude what the predicted sequences
 * not yet started will take. */
static void report_decode(moon_sched_instance_t *inst, const moon_sched_report_t *r)
{
    uint64_t ctx = r->ctx_tokens, not_started = 0, total;
    uint32_t alive;
    uint64_t alive_ctx;

    if (r->kv_blocks_total != 0) {
        inst->kv_blocks_total = r->kv_blocks_total;
    }
    total = inst->kv_blocks_total;
    seqs_prune(inst, r->now_s);
    inst->batch      = 0;
    inst->ctx_tokens = 0;
    moon_sched_instance_load_at(inst, r->now_s, &alive, &alive_ctx);
    if (ctx == 0 && r->running > 0 && total > r->kv_blocks_free) {
        ctx = (total - r->kv_blocks_free) * (uint64_t)r->block_tokens;
    }
    if (r->running > alive) {
        inst->batch      = r->running - alive;
        inst->ctx_tokens = (uint64_t)((double)ctx / r->running * inst->batch);
    }
    for (uint32_t k = 0; k < inst->n_seqs; k++) {
        if (inst->seqs[k].start_s > r->now_s) {
            not_started += inst->seqs[k].kv_blocks;
        }
    }
    inst->kv_blocks_free = r->kv_blocks_free > not_started ? r->kv_blocks_free - not_started : 0;
}

moon_status_t moon_sched_view_report(moon_sched_view_t *view, uint32_t index,
                                     const moon_sched_report_t *report)
{
    if (view == NULL || view->inst == NULL || index >= view->n_inst || report == NULL ||
        !isfinite(report->now_s)) {
        MOON_ERROR("sched view report: bad argument");
        return MOON_ERR_INVALID_PARAM;
    }
    report_prefill(&view->inst[index], report);
    report_decode(&view->inst[index], report);
    return MOON_OK;
}
