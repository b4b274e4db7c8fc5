/* actors/serve/decode_steps.c - multi-step decoding (vLLM's multi-step
 * scheduling): while a batch stays as it is and nothing waits for the actor,
 * the engine thread samples each step's tokens, sends them (one TOKENS per
 * reply address, as the actor would) and runs the next step itself, so the
 * actor hears from the engine once per change of the batch instead of once
 * per step.
 *
 * Who owns what while such a job runs: the batch's requests are in_step (the
 * actor leaves their sampler, text and counters alone; a CANCEL only marks
 * them), the engine thread has a token queue of its own, and KV room for the
 * next steps is reserved by the actor before the job (the engine thread
 * allocates nothing). The job stops after a step when a request ends (the
 * actor sends its DONE), its KV room runs out, or the actor asks for the
 * batch back (moon_dec_steps_yield: new work, a cancel, a weight change).
 * Requests with logprobs or a grammar, plugins observing tokens, a prefill
 * waiting for its turn (colocated) and the inline runner (virtual time) keep
 * one step per job, sampled by the actor. */
#include "decode_state.h"
#include "plugin_hooks.h"

#include "moonlet/log.h"

/* Tokens of KV room reserved ahead per request: the most steps one job runs
 * (a request's budget holds them: admission counted its max_tokens). */
#define DEC_STEPS_AHEAD 32u

void moon_dec_steps_prepare(decode_t *d, int prefill_waits)
{
    d->steps_ok  = 0;
    d->b_emitted = 0;
    atomic_store_explicit(&d->steps_yield, 0, memory_order_relaxed); /* submit publishes it */
    if (prefill_waits || !moon_engine_runner_threaded(d->runner) ||
        moon_plugin_observes(MOON_PLUGIN_EV_TOKEN | MOON_PLUGIN_EV_FIRST_TOKEN)) {
        return;
    }
    for (uint32_t b = 0; b < d->b_n; b++) {
        const dreq_t *r = &d->reqs[d->b_slot[b]];
        if (r->logprobs != 0 || r->gram.fsm != NULL || r->cancel_pending) {
            return;
        }
    }
    for (uint32_t b = 0; b < d->b_n; b++) {
        dreq_t  *r    = &d->reqs[d->b_slot[b]];
        uint32_t used = r->n_prompt - r->n_resumed + r->n_gen;
        uint32_t left =
            MOON_MIN(r->max_tokens - r->n_gen, used < d->seq_len ? d->seq_len - used : 0);
        /* best effort: without the room the job stops earlier */
        (void)moon_kv_seq_reserve(d->pool.kv, r->seq, MOON_MIN(left, DEC_STEPS_AHEAD));
    }
    d->steps_ok = 1;
}

void moon_dec_steps_yield(decode_t *d)
{
    atomic_store_explicit(&d->steps_yield, 1, memory_order_relaxed);
}

/* One step of the batch: one engine call per weight version in it (two
 * while one drains). */
static moon_status_t run_step(decode_t *d, double *duration_s_p)
{
    moon_status_t status = MOON_OK;
    uint32_t      from   = 0;
    double        total = 0.0, dur = 0.0;

    for (uint32_t g = 0; g < d->b_groups && status == MOON_OK; g++) {
        status =
            moon_engine_decode(d->b_engine[g], d->pool.kv, d->b_seq + from, d->b_tok + from,
                               d->b_end[g] - from, d->b_logits + (size_t)from * d->vocab, &dur);
        total += dur;
        from = d->b_end[g];
    }
    *duration_s_p = total;
    return status;
}

/* Engine thread: samples r's token from row and queues it, as emit() in
 * decode.c does for a request without logprobs or grammar; r->ended when it
 * ends with it (the actor finishes it). */
static void sample_queue(decode_t *d, dreq_t *r, float *row)
{
    int32_t     tok = moon_sampler_sample(&r->smp, row);
    const char *text;
    size_t      n;
    int         hit;

    if (moon_dec_is_stop_id(r, tok, d->tok)) {
        r->ended   = 1;
        r->end_why = MOON_FINISH_STOP;
        return;
    }
    hit = moon_serve_text_push(&r->text, tok, &text, &n);
    moon_dec_token_queue_engine(d, r, tok, text, n);
    d->b_tokens++;
    r->last_token = tok;
    moon_sampler_accept(&r->smp, tok);
    if (hit) {
        r->ended   = 1;
        r->end_why = MOON_FINISH_STOP;
    } else if (r->n_gen >= r->max_tokens || r->n_prompt - r->n_resumed + r->n_gen >= d->seq_len) {
        r->ended   = 1;
        r->end_why = MOON_FINISH_LENGTH;
    }
}

/* Engine thread, a step's tokens sent: 1 when the same batch steps again
 * (inputs set), 0 when the actor takes over. */
static int next_step(decode_t *d)
{
    if (atomic_load_explicit(&d->steps_yield, memory_order_relaxed)) {
        return 0;
    }
    for (uint32_t b = 0; b < d->b_n; b++) {
        const dreq_t *r = &d->reqs[d->b_slot[b]];
        if (r->ended || moon_kv_seq_len(d->pool.kv, r->seq) >=
                            moon_kv_seq_n_blocks(d->pool.kv, r->seq) * d->a.block_tokens) {
            return 0;
        }
    }
    for (uint32_t b = 0; b < d->b_n; b++) {
        d->b_tok[b] = d->reqs[d->b_slot[b]].last_token;
    }
    return 1;
}

moon_status_t moon_dec_steps_job(void *arg, double *duration_s_p)
{
    decode_t     *d = arg;
    moon_status_t status;
    double        total = 0.0, dur = 0.0;

    for (;;) {
        d->b_emitted = 0;
        status       = run_step(d, &dur);
        total += dur;
        /* a yield before sampling: the actor samples this step, as it always did */
        if (status != MOON_OK || !d->steps_ok ||
            atomic_load_explicit(&d->steps_yield, memory_order_relaxed)) {
            break;
        }
        for (uint32_t b = 0; b < d->b_n; b++) {
            sample_queue(d, &d->reqs[d->b_slot[b]], d->b_logits + (size_t)b * d->vocab);
        }
        moon_dec_tokens_flush_engine(d); /* a token still leaves every step */
        d->b_emitted = 1;
        if (!next_step(d)) {
            break;
        }
    }
    *duration_s_p = total;
    return status;
}
