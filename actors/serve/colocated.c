/* actors/serve/colocated.c - colocated mode (MOON_SERVE_ROLE_COLOCATED, the
 * vLLM-like baseline): the decode instance also takes PREFILL itself, reuses
 * the prompt's leading blocks from its own prefix cache (block_cache.h),
 * computes the rest in chunks that alternate with the batch's decode steps on
 * the same engine (moon_dec_maybe_step), and then runs the sequence in its
 * batch; no store, no transfer. Like a prefill instance, it tells the
 * conductor its cache's content as CACHE_EVENTS (cache_events.h), so
 * placement can send a prompt where its prefix is. Everything after the
 * prompt (admission, sampling, streaming, the end) is decode.c's. */
#include "decode_state.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

moon_status_t moon_dec_colocated_open(decode_t *d)
{
    moon_status_t status;

    if (d->a.prefill_chunk == 0) {
        d->a.prefill_chunk = 128;
    }
    d->c_logits = moon_calloc(d->vocab, sizeof(float));
    status      = d->c_logits ? moon_block_cache_create(d->pool.kv, d->a.n_blocks, &d->cache)
                              : MOON_ERR_NO_MEMORY;
    if (status == MOON_OK) {
        moon_cache_events_init(&d->events, d->cache, d->a.instance, &d->a.tag, d->a.conductor);
    }
    return status;
}

void moon_dec_colocated_close(decode_t *d)
{
    moon_block_cache_destroy(d->cache); /* its references, before the pool goes */
    moon_cache_events_fini(&d->events);
    moon_free(d->c_logits);
    d->cache    = NULL;
    d->c_logits = NULL;
}

/* Colocated: a PREFILL for this instance itself. Returns 0 when it waits. */
int moon_dec_take_prefill(moon_actor_t *self, decode_t *d, const moon_serve_prefill_t *m)
{
    moon_serve_kv_ready_t shape = {.reply_to       = m->reply_to,
                                   .request_id     = m->request_id,
                                   .n_tokens       = m->tokens.n,
                                   .max_tokens     = m->max_tokens,
                                   .slo_class      = m->slo_class,
                                   .flags          = m->flags,
                                   .n_choices      = m->n_choices,
                                   .weight_version = m->weight_version};
    const uint32_t       *tok   = MOON_SPAN_PTR(m, m->tokens);
    dreq_t               *r;
    moon_status_t         status;
    uint32_t              hits;
    moon_serve_sampling_t sp;
    int                   cancelled;

    if (m->tokens.n == 0 || m->tokens.n >= d->seq_len || m->max_tokens == 0) {
        MOON_WARN("instance %u: request %llu with %u tokens refused", d->a.instance,
                  (unsigned long long)m->request_id, m->tokens.n);
        return 1;
    }
    status = moon_dec_open(self, d, &shape, DREQ_PREFILLING, &r);
    if (status == MOON_ERR_NO_RESOURCE) {
        return 0;
    }
    if (status == MOON_ERR_UNSUPPORTED) {
        moon_dec_answer_untaken(self, d, m->reply_to, m->request_id, m->n_choices, MOON_ADDR_NONE,
                                status, "the pool cannot hold this many choices of the request");
    }
    if (status != MOON_OK) {
        return 1;
    }
    moon_msg_retain(&m->hdr);
    r->final_msg        = (moon_msg_hdr_t *)&m->hdr;
    r->final            = 1;
    r->prefill          = MOON_ADDR_NONE;
    r->prefill_instance = (int32_t)d->a.instance; /* colocated: it prefills too */
    r->arrival_ns       = m->arrival_ns;
    r->stop_ids         = MOON_SPAN_PTR(m, m->stop_ids);
    r->n_stop_ids       = m->stop_ids.n;
    /* the prompt's last token is always computed: its logits give the first token */
    hits          = moon_block_cache_take(d->cache, MOON_SPAN_PTR(m, m->keys),
                                          MOON_MIN(m->keys.n / 2, (m->tokens.n - 1) / d->a.block_tokens),
                                          r->seq);
    r->n_done     = hits * d->a.block_tokens;
    r->n_cached   = r->n_done;
    r->n_appended = r->n_full; /* nothing to pull */
    d->n_cache_hit_tokens += r->n_done;
    sp        = MOON_SERVE_SAMPLING_OF(m);
    status    = moon_dec_setup_sampling(d, r, &sp, tok, m->tokens.n, m->n_resumed,
                                        MOON_SPAN_PTR(m, m->stop_strs), m->stop_strs.n,
                                        MOON_SPAN_PTR(m, m->grammar), m->grammar.n);
    cancelled = status == MOON_OK && moon_dec_take_cancel(d, m->reply_to, m->request_id);
    if (status != MOON_OK) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, status,
                        d->gram_err[0] ? d->gram_err : "bad sampling parameters");
    } else if (cancelled && r->n_choices == 1) {
        moon_dec_finish(self, d, r, MOON_FINISH_CANCELLED, MOON_OK, NULL);
    } else {
        /* choice 0 of several cancelled: it ends at the fork, the others go on */
        r->leader_cancelled = cancelled;
        moon_dec_maybe_step(self, d);
    }
    moon_dec_report_load(self, d);
    return 1;
}

/* ---- chunks ------------------------------------------------------------- */

static moon_status_t chunk_job(void *arg, double *duration_s_p)
{
    decode_t                   *d   = arg;
    dreq_t                     *r   = d->chunk_req;
    const moon_serve_prefill_t *m   = (const void *)r->final_msg;
    const int32_t              *tok = (const int32_t *)MOON_SPAN_PTR(m, m->tokens) + r->n_done;

    return moon_engine_prefill(d->chunk_engine, d->pool.kv, r->seq, tok, d->chunk_n, d->c_logits,
                               duration_s_p);
}

/* Colocated: the oldest request still prefilling. */
dreq_t *moon_dec_next_prefill(decode_t *d)
{
    dreq_t *best = NULL;

    for (uint32_t i = 0; i < d->a.max_seqs; i++) {
        dreq_t *r = &d->reqs[i];
        if (r->state == DREQ_PREFILLING && (best == NULL || r->arrival_ns < best->arrival_ns)) {
            best = r;
        }
    }
    return best;
}

void moon_dec_start_chunk(moon_actor_t *self, decode_t *d, dreq_t *r)
{
    uint32_t n = MOON_MIN(d->a.prefill_chunk, r->n_prompt - r->n_done);

    if (r->n_done == r->n_cached && r->prefill_ns == 0) {
        r->queue_ns = moon_now(moon_actor_runtime(self)) - r->arrival_ns;
    }
    d->chunk_engine = moon_weights_set_engine(&d->weights, r->version);
    if (d->chunk_engine == NULL) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, MOON_ERR_NOT_FOUND,
                        "the request's weight version is not held");
        return;
    }
    /* budgeted at admission: the blocks are there */
    MOON_CHECK(moon_kv_seq_reserve(d->pool.kv, r->seq, n) == MOON_OK);
    r->in_step        = 1;
    d->chunk_req      = r;
    d->chunk_n        = n;
    d->job_kind       = JOB_CHUNK;
    d->last_was_chunk = 1;
    MOON_CHECK(moon_engine_runner_submit(d->runner, self, chunk_job, d, 0) == MOON_OK);
}

/* A prefill chunk ended. */
void moon_dec_chunk_done(moon_actor_t *self, decode_t *d, moon_status_t status, double dur)
{
    dreq_t                     *r      = d->chunk_req;
    const moon_serve_prefill_t *m      = (const void *)r->final_msg;
    const moon_kv_key_t        *keys   = MOON_SPAN_PTR(m, m->keys);
    uint32_t                    n_keys = m->keys.n / 2;

    d->chunk_req = NULL;
    if (!moon_dec_after_pass(self, d, r, status, "prefill failed")) {
        r->n_done += d->chunk_n;
        r->prefill_ns += (uint64_t)(dur * 1e9);
        d->n_computed_tokens += d->chunk_n;
        if (r->n_done == r->n_prompt) {
            for (uint32_t i = 0; i < MOON_MIN(n_keys, r->n_prompt / d->a.block_tokens); i++) {
                moon_block_cache_put(d->cache, keys[i], moon_kv_seq_block(d->pool.kv, r->seq, i));
            }
            moon_cache_events_flush(&d->events, self);
            moon_dec_enter(r, DREQ_RUNNING);
            r->ttft_ns = moon_now(moon_actor_runtime(self)) - r->arrival_ns;
            moon_dec_fork_sample(self, d, r, d->c_logits); /* its choices, if several */
        }
    }
    moon_dec_maybe_step(self, d);
    if (d->n_constrained > 0) {
        moon_dec_prefetch_masks(d); /* while the step just submitted runs */
    }
    moon_dec_report_load(self, d);
}

/* Colocated: the conductor lost some of our cache events: it gets the whole cache. */
moon_status_t moon_dec_on_cache_sync(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    decode_t *d = moon_actor_state(self);

    if (d->cache != NULL && msg->src == d->a.conductor) {
        moon_cache_events_snapshot(&d->events, self, d->cache);
    }
    return MOON_OK;
}
