/* actors/serve/decode_pull.c - the handover on the decode instance: the
 * KV_READY messages of a taken request (decode_state.h) pull its KV blocks
 * straight from the prefill's pool into this one, full blocks in runs with
 * one completion each, the partial last block once the full ones are
 * appended; the request runs when all of its KV is in. */
#include "decode_state.h"

#include "moonlet/log.h"

#define DEC_COOKIE(_slot, _idx) (((uint64_t)(_slot) << 32) | (uint32_t)(_idx))
/* A run of n blocks from _idx pulled with one completion (take_blocks). */
#define DEC_RUN_FLAG (1u << 31)
#define DEC_RUN_MAX_IDX 0xffffu
#define DEC_RUN_MAX_N 0x7fffu
#define DEC_COOKIE_RUN(_slot, _idx, _n)                                                            \
    (((uint64_t)(_slot) << 32) | DEC_RUN_FLAG | ((uint32_t)(_n) << 16) | (uint32_t)(_idx))

/* Appends the full blocks that arrived in order; runs the request when all
 * of its KV is in. */
static void progress_pull(moon_actor_t *self, decode_t *d, dreq_t *r)
{
    moon_kv_cache_t *kv = d->pool.kv;
    uint32_t         rem;

    while (r->n_appended < r->n_full && r->arrived[r->n_appended]) {
        MOON_CHECK(moon_kv_seq_append_block(kv, r->seq, r->local[r->n_appended]) == MOON_OK);
        moon_kv_block_unref(kv, r->local[r->n_appended]); /* the sequence holds it now */
        r->local[r->n_appended++] = MOON_KV_NO_BLOCK;
    }
    if (!r->final || r->n_appended < r->n_full) {
        return;
    }
    rem = r->n_prompt - r->n_full * d->a.block_tokens;
    if (rem > 0 && !r->arrived[r->n_full]) {
        return;
    }
    if (rem > 0 && moon_kv_seq_len(kv, r->seq) < r->n_prompt) {
        moon_kv_seq_advance(kv, r->seq, rem);
    }
    moon_dec_send_kv_done(self, r, MOON_OK);
    r->transfer_ns = moon_now(moon_actor_runtime(self)) - r->xfer_start_ns;
    if (r->state == DREQ_PULLING) {
        moon_dec_enter(r, DREQ_RUNNING);
        if (r->n_choices > 1 && !r->forked) {
            moon_dec_fork(self, d, r); /* the other choices, and every first token */
        }
        moon_dec_maybe_step(self, d);
        moon_dec_report_load(self, d);
    }
}

/* Simulation: the modeled time n blocks from m's prefill take to arrive,
 * booked as one move (0 for real moves). */
static uint64_t pull_delay(moon_actor_t *self, decode_t *d, const moon_serve_kv_ready_t *m,
                           uint32_t n)
{
    if (d->a.xfer_ns == NULL || n == 0) {
        return 0;
    }
    return d->a.xfer_ns(d->a.xfer_arg, moon_now(moon_actor_runtime(self)), MOON_SERVE_XFER_PULL,
                        m->prefill_instance, d->a.instance, n);
}

static moon_status_t start_pull(moon_actor_t *self, decode_t *d, dreq_t *r,
                                const moon_serve_kv_ready_t *m, uint32_t i, uint32_t local,
                                uint32_t remote, uint64_t delay)
{
    moon_status_t status =
        moon_kv_pool_pull(&d->pool, self, local, MOON_SPAN_PTR(m, m->desc), m->desc.n, m->base,
                          remote, DEC_COOKIE(r - d->reqs, i), delay);
    if (status == MOON_OK) {
        r->n_issued++;
    }
    return status;
}

/* Pulls blocks [i, i + n) of r (local[], remote[]) with one completion. */
static moon_status_t start_pull_run(moon_actor_t *self, decode_t *d, dreq_t *r,
                                    const moon_serve_kv_ready_t *m, uint32_t i,
                                    const uint32_t *remote, uint32_t n, uint64_t delay)
{
    moon_status_t status;

    if (n == 1 || i + n - 1 > DEC_RUN_MAX_IDX || n > DEC_RUN_MAX_N) {
        for (uint32_t k = 0; k < n; k++) {
            status = start_pull(self, d, r, m, i + k, r->local[i + k], remote[k], delay);
            if (status != MOON_OK) {
                return status;
            }
        }
        return MOON_OK;
    }
    status = moon_kv_pool_pullv(&d->pool, self, &r->local[i], remote, n, MOON_SPAN_PTR(m, m->desc),
                                m->desc.n, m->base, DEC_COOKIE_RUN(r - d->reqs, i, n), delay);
    if (status == MOON_OK) {
        r->n_issued += n;
    }
    return status;
}

/* Takes the blocks of one KV_READY of a taken request: each run of
 * consecutive new full blocks moves as one pull with one completion. */
static moon_status_t take_blocks(moon_actor_t *self, decode_t *d, dreq_t *r,
                                 const moon_serve_kv_ready_t *m)
{
    const uint32_t  *blocks = MOON_SPAN_PTR(m, m->blocks);
    moon_kv_cache_t *kv     = d->pool.kv;
    moon_status_t    status = MOON_OK;
    uint32_t         n_full = 0, run_i = 0, run_j = 0, run_n = 0;
    uint64_t         delay;

    for (uint32_t j = 0; j < m->blocks.n; j++) {
        n_full += m->first_block + j < r->n_full;
    }
    delay = pull_delay(self, d, m, n_full); /* the message's full blocks move together */
    for (uint32_t j = 0; j < m->blocks.n; j++) {
        uint32_t i = m->first_block + j;
        if (i < r->n_full) {
            if (r->local[i] != MOON_KV_NO_BLOCK || r->arrived[i]) {
                /* sent twice: ends the run */
                status = run_n > 0
                             ? start_pull_run(self, d, r, m, run_i, &blocks[run_j], run_n, delay)
                             : MOON_OK;
                run_n  = 0;
            } else {
                /* budgeted at admission: cannot fail */
                MOON_CHECK(moon_kv_block_alloc(kv, &r->local[i]) == MOON_OK);
                if (run_n == 0) {
                    run_i = i;
                    run_j = j;
                }
                run_n++;
            }
        } else if (i == r->n_full && m->final) {
            continue; /* the partial block: pull_partial, once the full ones are in */
        } else {
            status = MOON_ERR_INVALID_PARAM;
        }
        if (status != MOON_OK) {
            return status;
        }
    }
    return run_n > 0 ? start_pull_run(self, d, r, m, run_i, &blocks[run_j], run_n, delay) : MOON_OK;
}

/* The final KV_READY: sampling state, first token (streamed now: TTFT). */
static void take_final(moon_actor_t *self, decode_t *d, dreq_t *r, const moon_serve_kv_ready_t *m)
{
    const uint32_t       *toks = MOON_SPAN_PTR(m, m->tokens);
    moon_status_t         status;
    uint32_t              rem = r->n_prompt - r->n_full * d->a.block_tokens;
    moon_serve_sampling_t sp;

    moon_msg_retain(&m->hdr);
    r->final_msg  = (moon_msg_hdr_t *)&m->hdr;
    r->final      = 1;
    r->n_cached   = m->n_cached;
    r->arrival_ns = m->arrival_ns;
    r->queue_ns   = m->queue_ns;
    r->prefill_ns = m->prefill_ns;
    r->first_sent = m->first_sent != 0;
    r->ttft_ns  = m->first_sent ? m->first_ns : moon_now(moon_actor_runtime(self)) - m->arrival_ns;
    r->stop_ids = MOON_SPAN_PTR(m, m->stop_ids);
    r->n_stop_ids = m->stop_ids.n;
    sp            = MOON_SERVE_SAMPLING_OF(m);
    status        = moon_dec_setup_sampling(d, r, &sp, toks, m->tokens.n, m->n_resumed,
                                            MOON_SPAN_PTR(m, m->stop_strs), m->stop_strs.n,
                                            MOON_SPAN_PTR(m, m->grammar), m->grammar.n);
    if (status != MOON_OK) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, status,
                        d->gram_err[0] ? d->gram_err : "decode: sampler setup failed");
        return;
    }
    (void)rem;
    if (r->n_choices > 1) {
        return; /* its first token leaves with the others' once the KV is in (fork) */
    }
    moon_dec_emit_first(self, d, r, m->token, m->first_logprob, MOON_SPAN_PTR(m, m->first_top),
                        m->first_top.n / 2);
}

/* The partial last block is pulled into the sequence's own last block, which
 * exists once the full blocks are appended and its room is reserved. */
static void pull_partial(moon_actor_t *self, decode_t *d, dreq_t *r)
{
    const moon_serve_kv_ready_t *f = (const void *)r->final_msg;
    const uint32_t              *blocks;
    uint32_t                     rem = r->n_prompt - r->n_full * d->a.block_tokens, j;

    if (r->state == DREQ_PREFILLING) {
        return; /* colocated: its KV is computed here */
    }
    moon_status_t status;

    if (rem == 0 || r->partial_issued == 1 || r->n_appended < r->n_full || f == NULL) {
        return;
    }
    blocks = MOON_SPAN_PTR(f, f->blocks);
    j      = r->n_full - f->first_block; /* the partial is the final message's last entry */
    if (f->blocks.n == 0 || j != f->blocks.n - 1) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, MOON_ERR_INVALID_PARAM,
                        "decode: bad handover");
        return;
    }
    r->partial_issued = 1;
    status            = moon_kv_seq_reserve(d->pool.kv, r->seq, rem);
    if (status == MOON_OK) {
        uint32_t local = moon_kv_seq_block(d->pool.kv, r->seq, r->n_full);
        status = start_pull(self, d, r, f, r->n_full, local, blocks[j], pull_delay(self, d, f, 1));
    }
    if (status != MOON_OK) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, status,
                        "decode: pulling the last block failed");
    }
}

void moon_dec_take_kv_ready(moon_actor_t *self, decode_t *d, dreq_t *r,
                            const moon_serve_kv_ready_t *m)
{
    moon_status_t status;

    if (m->status != MOON_OK) {
        if (m->status == MOON_ERR_CANCELED) {
            moon_dec_finish(self, d, r, MOON_FINISH_CANCELLED, MOON_OK, NULL);
        } else {
            moon_dec_finish(self, d, r, MOON_FINISH_ERROR, m->status, MOON_SPAN_PTR(m, m->message));
        }
        return;
    }
    /* the first token leaves before the final message's blocks move: a pull
     * in this process is a copy on this thread (the last chunk's blocks, 37
     * MB for 512 tokens of the 110M model), and the token needs none of them */
    if (m->final) {
        moon_addr_t reply_to = r->reply_to;
        uint64_t    id       = r->request_id;
        take_final(self, d, r, m);
        /* ended at its first token: nothing more to pull (with no pull in
         * flight it is freed already, and the slot may hold another) */
        if (r->state == DREQ_ENDED || r->state == DREQ_FREE || r->reply_to != reply_to ||
            r->request_id != id) {
            return;
        }
    }
    status = take_blocks(self, d, r, m);
    if (status != MOON_OK) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, status, "decode: bad handover");
        return;
    }
    if (m->final) {
        pull_partial(self, d, r);
        progress_pull(self, d, r);
    }
}

/* A pulled block landed (status MOON_OK) or its transfer failed. */
void moon_dec_block_arrived(moon_actor_t *self, decode_t *d, uint64_t cookie, moon_status_t st)
{
    uint32_t slot = (uint32_t)(cookie >> 32), i = (uint32_t)cookie, n = 1;
    dreq_t  *r;

    if (slot >= d->a.max_seqs || d->reqs[slot].state == DREQ_FREE) {
        return;
    }
    if (i & DEC_RUN_FLAG) { /* a run of blocks: one completion */
        n = (i >> 16) & DEC_RUN_MAX_N;
        i &= DEC_RUN_MAX_IDX;
    }
    r = &d->reqs[slot];
    r->n_arrived += n;
    for (uint32_t k = 0; k < n && i + k <= r->n_full; k++) {
        r->arrived[i + k] = st == MOON_OK;
    }
    if (r->state == DREQ_ENDED) {
        moon_dec_release_req(self, d, r); /* the last pull in flight of an ended request */
        return;
    }
    if (st != MOON_OK) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, st, "decode: KV transfer failed");
        return;
    }
    progress_pull(self, d, r);
    if (r->state != DREQ_ENDED) {
        pull_partial(self, d, r);
    }
}
