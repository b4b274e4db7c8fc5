/* actors/serve/decode.c - the decode instance: receives sequences from prefill
 * instances (KV_READY), pulls their KV blocks straight from the prefill's pool
 * into its own while the prefill still computes, admits each sequence into
 * its continuous batch once its KV has arrived, steps the whole batch on its
 * engine thread, samples per request, streams every token to the client (the
 * first one unless the prefill sent it: KV_READY first_sent) and stops on
 * EOS, stop ids, stop strings, max tokens or the context's end.
 *
 * The pulls are in decode_pull.c; colocated mode (the instance prefills its
 * own requests too) is in colocated.c; the state they share, and the
 * request's state diagram, in decode_state.h.
 *
 * Admission is budgeted: a request is taken only when the blocks it can ever
 * need (prompt + max_tokens) fit beside those of the requests already taken,
 * so a running sequence never finds the pool full; the others wait, in order
 * of SLO class (0, interactive, first), first come first served within one.
 * A request of a class above 0 (a batch's) also leaves a quarter of the pool
 * to class 0 while anything runs, so an interactive request arriving beside a
 * batch is taken at once, not after the batch's requests ahead of it. */
#include "decode.h"
#include "decode_state.h"
#include "prefill_rows.h"

#include "plugin_hooks.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/weights_msgs.h"

#include <string.h>

/* The one place a request changes state: the moves the diagram above draws
 * (staying put is no move). */
void moon_dec_enter(dreq_t *r, dreq_state_t to)
{
    static const uint8_t allowed[DREQ_N_STATES] = {
        [DREQ_FREE]       = 1u << DREQ_PULLING | 1u << DREQ_PREFILLING,
        [DREQ_PULLING]    = 1u << DREQ_RUNNING | 1u << DREQ_ENDED,
        [DREQ_PREFILLING] = 1u << DREQ_RUNNING | 1u << DREQ_ENDED,
        [DREQ_RUNNING]    = 1u << DREQ_ENDED,
        [DREQ_ENDED]      = 1u << DREQ_FREE,
    };

    MOON_CHECK(r->state == to || (allowed[r->state] & (1u << to)) != 0);
    r->state = to;
}

static dreq_t *find_req(decode_t *d, moon_addr_t reply_to, uint64_t id)
{
    for (uint32_t i = 0; i < d->a.max_seqs; i++) {
        if (d->reqs[i].state != DREQ_FREE && d->reqs[i].reply_to == reply_to &&
            d->reqs[i].request_id == id) {
            return &d->reqs[i];
        }
    }
    return NULL;
}

int moon_dec_take_cancel(decode_t *d, moon_addr_t reply_to, uint64_t id)
{
    for (uint32_t i = 0; i < MOON_MIN(d->n_cancels, DEC_CANCEL_RING); i++) {
        if (d->cancels[i].reply_to == reply_to && d->cancels[i].request_id == id) {
            d->cancels[i].reply_to = MOON_ADDR_NONE;
            return 1;
        }
    }
    return 0;
}

/* Blocks only the prefix cache (colocated) holds: free once given back. */
static uint32_t cache_idle(const decode_t *d)
{
    return d->cache != NULL ? moon_block_cache_idle(d->cache) : 0;
}

static uint32_t blocks_for(const decode_t *d, uint64_t n_tokens)
{
    uint64_t n = MOON_MIN(n_tokens, (uint64_t)d->seq_len);
    return (uint32_t)((n + d->a.block_tokens - 1) / d->a.block_tokens);
}

uint32_t moon_dec_choice_blocks(const decode_t *d, uint32_t n_prompt, uint32_t max_tokens)
{
    return blocks_for(d, (uint64_t)n_prompt % d->a.block_tokens + max_tokens);
}

void moon_dec_report_load(moon_actor_t *self, decode_t *d)
{
    uint32_t running = 0, queued = d->n_waiting, queued_tokens = 0;
    uint64_t counters[3] = {d->n_cache_hit_tokens, 0, d->n_computed_tokens};

    for (uint32_t i = 0; i < d->a.max_seqs; i++) {
        running += d->reqs[i].state == DREQ_RUNNING;
        if (d->reqs[i].state == DREQ_PREFILLING) {
            queued++;
            queued_tokens += d->reqs[i].n_prompt - d->reqs[i].n_done;
        }
    }
    /* the cache's blocks are free for the conductor: they go when room is needed */
    moon_serve_report_load(self, &d->a, &d->load_memo, queued_tokens, queued, running,
                           moon_kv_n_free_blocks(d->pool.kv) + cache_idle(d), counters);
}

static void send_done(moon_actor_t *self, decode_t *d, const dreq_t *r, uint32_t finish,
                      moon_status_t status, const char *text, const char *why)
{
    size_t             tl = text ? strlen(text) : 0, wl = why ? strlen(why) : 0;
    moon_serve_done_t *m;

    moon_dec_tokens_flush(self, d); /* the request's tokens before its end */
    m = moon_msg_new(MOON_MSG_SERVE_DONE, tl + wl + 2);

    if (m == NULL) {
        MOON_ERROR("decode: no memory for DONE of request %llu", (unsigned long long)r->request_id);
        return;
    }
    m->request_id       = r->request_id;
    m->finish           = finish;
    m->status           = status;
    m->n_prompt         = r->n_prompt - r->n_resumed;
    m->n_completion     = r->n_gen;
    m->n_cached         = r->n_cached;
    m->prefill_instance = r->prefill_instance;
    m->decode_instance  = (int32_t)d->a.instance;
    m->queue_ns         = r->queue_ns;
    m->prefill_ns       = r->prefill_ns;
    m->transfer_ns      = r->transfer_ns;
    m->ttft_ns          = r->ttft_ns;
    m->weight_version   = r->version;
    moon_msg_set_str(m, &m->text, text ? text : "");
    moon_msg_set_str(m, &m->message, why ? why : "");
    moon_tell(self, r->reply_to, &m->hdr);
}

void moon_dec_done_choice(moon_actor_t *self, decode_t *d, const dreq_t *r, uint64_t id,
                          uint32_t finish, moon_status_t status, const char *why)
{
    dreq_t tmp = *r;

    tmp.request_id = id;
    tmp.n_gen      = 0;
    send_done(self, d, &tmp, finish, status, "", why);
}

void moon_dec_send_kv_done(moon_actor_t *self, dreq_t *r, moon_status_t status)
{
    moon_serve_kv_done_t *m;

    if (r->kv_done_sent || r->prefill == MOON_ADDR_NONE) {
        return;
    }
    m = moon_msg_new(MOON_MSG_SERVE_KV_DONE, 0);
    if (m == NULL) {
        return; /* the prefill frees the sequence when it learns the request ended */
    }
    r->kv_done_sent = 1;
    m->reply_to     = r->reply_to;
    m->request_id   = r->request_id;
    m->status       = status;
    moon_tell(self, r->prefill, &m->hdr);
}

static void try_admit_waiting(moon_actor_t *self, decode_t *d);

/* Frees what r holds, once no pull writes into its blocks any more. */
void moon_dec_release_req(moon_actor_t *self, decode_t *d, dreq_t *r)
{
    moon_kv_cache_t *kv = d->pool.kv;

    if (r->n_arrived < r->n_issued || r->in_step) {
        return; /* comes back here when the last one lands */
    }
    moon_dec_send_kv_done(self, r, MOON_OK);
    for (uint32_t i = r->n_appended; i < r->n_full; i++) {
        if (r->local[i] != MOON_KV_NO_BLOCK) {
            moon_kv_block_unref(kv, r->local[i]);
        }
    }
    moon_kv_seq_destroy(kv, r->seq);
    if (r->text_ready) {
        moon_serve_text_fini(&r->text);
    }
    moon_sampler_fini(&r->smp);
    if (r->gram.fsm != NULL) {
        moon_serve_grammar_end(d->grammars, &r->gram);
        d->n_constrained--;
    }
    moon_msg_release(r->final_msg);
    moon_free(r->local);
    moon_free(r->arrived);
    d->committed -= r->budget;
    moon_dec_enter(r, DREQ_FREE);
    memset(r, 0, sizeof(*r));
    try_admit_waiting(self, d);
    moon_dec_report_load(self, d);
}

void moon_dec_finish(moon_actor_t *self, decode_t *d, dreq_t *r, uint32_t why, moon_status_t status,
                     const char *message)
{
    const char            *tail = "";
    size_t                 n    = 0;
    moon_serve_released_t *rel;

    if (r->state == DREQ_ENDED) {
        return;
    }
    moon_dec_enter(r, DREQ_ENDED);
    if ((why != MOON_FINISH_STOP || r->gram.fsm != NULL) && r->text_ready) {
        moon_serve_text_flush(&r->text, &tail, &n);
    }
    if (status != MOON_OK) {
        MOON_WARN("decode %u: request %llu ends: %s (%s)", d->a.instance,
                  (unsigned long long)r->request_id, message ? message : "",
                  moon_status_str(status));
    }
    send_done(self, d, r, why, status, tail, message);
    if (r->n_choices > 1 && !r->forked) {
        /* ended before its choices forked: they end alike (resumable too) */
        for (uint32_t i = 1; i < r->n_choices; i++) {
            moon_dec_done_choice(self, d, r, r->group_id + i, why, status, message);
        }
        d->reserved -= r->n_choices - 1;
        r->n_choices = 1;
    }
    /* the conductor's entry is the whole request's: its last choice ends it */
    rel = moon_dec_group_alive(d, r) ? NULL : moon_msg_new(MOON_MSG_SERVE_RELEASED, 0);
    if (rel != NULL) {
        rel->reply_to     = r->reply_to;
        rel->request_id   = r->group_id;
        rel->finish       = why;
        rel->n_completion = r->n_gen;
        moon_tell(self, d->a.conductor, &rel->hdr);
    }
    moon_dec_release_req(self, d, r);
}

int moon_dec_is_stop_id(const dreq_t *r, int32_t tok, const moon_tokenizer_t *t)
{
    return moon_serve_is_stop_id(r->flags, r->stop_ids, r->n_stop_ids, tok, t);
}

/* A sampled token: streamed (unless it stops), then the request goes on or ends. */
void moon_dec_emit(moon_actor_t *self, decode_t *d, dreq_t *r, int32_t tok,
                   const moon_serve_lp_t *lp)
{
    const char   *text = "";
    size_t        n    = 0;
    int           hit;
    moon_status_t status;

    if (moon_dec_is_stop_id(r, tok, d->tok) ||
        (r->gram.fsm != NULL && tok == moon_tokenizer_eos(d->tok))) {
        moon_dec_finish(self, d, r, MOON_FINISH_STOP, MOON_OK, NULL);
        return;
    }
    if (r->gram.fsm != NULL && (status = moon_serve_grammar_accept(&r->gram, tok)) != MOON_OK) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, status,
                        status == MOON_ERR_NO_RESOURCE
                            ? "the grammar's automaton reached its size limit"
                            : "a token that does not follow the grammar");
        return;
    }
    hit = moon_serve_text_push(&r->text, tok, &text, &n);
    if (moon_dec_token_out(self, d, r, tok, text, n, lp) != MOON_OK) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, MOON_ERR_NO_MEMORY, "out of memory");
        return;
    }
    moon_plugin_token(self, r->reply_to, r->request_id, r->n_gen - 1, (uint32_t)tok, r->ttft_ns);
    if (!d->tok_batching) {
        moon_plugin_tokens_flush(self); /* no step batch to leave with */
    }
    d->n_tokens_out++;
    r->last_token = tok;
    moon_sampler_accept(&r->smp, tok);
    if (hit || moon_serve_grammar_final(&r->gram)) {
        /* a stop string, or a complete document, ends it */
        moon_dec_finish(self, d, r, MOON_FINISH_STOP, MOON_OK, NULL);
    } else if (r->n_gen >= r->max_tokens || r->n_prompt - r->n_resumed + r->n_gen >= d->seq_len) {
        /* the next token would sit at position n_prompt + n_gen: past the context */
        moon_dec_finish(self, d, r, MOON_FINISH_LENGTH, MOON_OK, NULL);
    }
}

/* Samples a row of logits (changed in place: masked by the request's grammar
 * first) and emits the token; a request with logprobs gets them from the
 * (masked) row, copied before sampling. */
void moon_dec_sample_emit(moon_actor_t *self, decode_t *d, dreq_t *r, float *row)
{
    moon_serve_lp_t lp;
    int32_t         tok;

    if (moon_serve_grammar_mask(&r->gram, row, d->vocab) != MOON_OK) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, MOON_ERR_NO_MEMORY, "grammar mask failed");
        return;
    }
    if (r->logprobs == 0) {
        moon_dec_emit(self, d, r, moon_sampler_sample(&r->smp, row), NULL);
        return;
    }
    memcpy(d->lp_row, row, (size_t)d->vocab * sizeof(float));
    tok  = moon_sampler_sample(&r->smp, row);
    lp.k = MOON_MIN(r->logprobs - 1, MOON_LOGPROBS_MAX);
    moon_logprobs(d->lp_row, d->vocab, tok, lp.k, &lp.lp, lp.ids, lp.lps);
    moon_dec_emit(self, d, r, tok, &lp);
}

/* Computes the masks the next step's constrained requests will need while
 * that step runs (masks are cached per grammar state: mostly a lookup). */
void moon_dec_prefetch_masks(decode_t *d)
{
    for (uint32_t i = 0; i < d->a.max_seqs; i++) {
        dreq_t *r = &d->reqs[i];
        if (r->gram.fsm != NULL && r->state == DREQ_RUNNING) {
            moon_serve_grammar_prefetch(&r->gram);
        }
    }
}

/* Room for a request that may need `need` blocks, beside what the taken
 * ones may still need: blocks only the prefix cache holds count as room once
 * given back (least recently used first). A class above 0 also leaves
 * DEC_CLASS0_SHARE of the pool free while anything is taken (never more
 * than it could wait for: with nothing taken, it fits as class 0 would). */
#define DEC_CLASS0_SHARE 4u /* 1/4 of the blocks */
static int budget_allows(moon_actor_t *self, decode_t *d, uint32_t need, uint32_t slo_class)
{
    uint32_t idle = cache_idle(d);

    if (slo_class > 0 && d->committed > 0) {
        need += d->a.n_blocks / DEC_CLASS0_SHARE;
    }

    while (d->committed + need + idle > d->a.n_blocks && idle > 0) {
        moon_block_cache_make_room(d->cache, moon_kv_n_free_blocks(d->pool.kv) + 1);
        idle = moon_block_cache_idle(d->cache);
    }
    moon_cache_events_flush(&d->events, self); /* the evictions, if any */
    return d->committed + need + idle <= d->a.n_blocks;
}

moon_status_t moon_dec_open(moon_actor_t *self, decode_t *d, const moon_serve_kv_ready_t *m,
                            dreq_state_t first, dreq_t **r_p)
{
    uint32_t n_ch = m->n_choices > 1 ? m->n_choices : 1;
    /* the other choices: the partial block's copy and their own tokens */
    uint32_t need = blocks_for(d, (uint64_t)m->n_tokens + m->max_tokens) +
                    (n_ch - 1) * moon_dec_choice_blocks(d, m->n_tokens, m->max_tokens);
    uint32_t n_free = 0;
    dreq_t  *r      = NULL;

    if (n_ch > 1 && (need > d->a.n_blocks || n_ch > d->a.max_seqs)) {
        return MOON_ERR_UNSUPPORTED; /* would wait for ever */
    }
    for (uint32_t i = 0; i < d->a.max_seqs; i++) {
        n_free += d->reqs[i].state == DREQ_FREE;
    }
    if (n_free < d->reserved + n_ch) {
        return MOON_ERR_NO_RESOURCE; /* the slots left are promised to forks */
    }
    if (!budget_allows(self, d, need, m->slo_class)) {
        return MOON_ERR_NO_RESOURCE;
    }
    /* a virtual cache's metadata grows on use: reserve it for the budget
     * now, so the "budgeted at admission" calls below cannot fail */
    if (moon_kv_cache_reserve_meta(d->pool.kv, d->committed + need + cache_idle(d)) != MOON_OK) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < d->a.max_seqs && r == NULL; i++) {
        r = d->reqs[i].state == DREQ_FREE ? &d->reqs[i] : NULL;
    }
    if (r == NULL) {
        return MOON_ERR_NO_RESOURCE;
    }
    memset(r, 0, sizeof(*r));
    if (moon_kv_seq_create(d->pool.kv, &r->seq) != MOON_OK) {
        return MOON_ERR_NO_RESOURCE;
    }
    r->n_prompt = m->n_tokens;
    r->n_full   = m->n_tokens / d->a.block_tokens;
    r->local    = moon_malloc((r->n_full + 1) * sizeof(*r->local));
    r->arrived  = moon_calloc(r->n_full + 1, 1);
    if (r->local == NULL || r->arrived == NULL) {
        moon_kv_seq_destroy(d->pool.kv, r->seq);
        moon_free(r->local);
        moon_free(r->arrived);
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i <= r->n_full; i++) {
        r->local[i] = MOON_KV_NO_BLOCK;
    }
    moon_dec_enter(r, first);
    r->reply_to   = m->reply_to;
    r->request_id = m->request_id;
    r->group_id   = m->request_id;
    r->n_choices  = n_ch;
    d->reserved += n_ch - 1;
    r->prefill          = m->prefill;
    r->prefill_instance = (int32_t)m->prefill_instance;
    r->max_tokens       = m->max_tokens;
    r->flags            = m->flags;
    r->budget           = need;
    r->version          = m->weight_version;
    r->xfer_start_ns    = moon_now(moon_actor_runtime(self));
    d->committed += need;
    *r_p = r;
    return MOON_OK;
}

/* Sampling and text state. toks (n): the prompt, whose last n_resumed
 * tokens were streamed before (a resumed request): they go through the text
 * state unsent, so its held-back text and stop-string matching continue
 * where the lost instance was, and the next token gets index n_resumed. */
moon_status_t moon_dec_setup_sampling(decode_t *d, dreq_t *r, const moon_serve_sampling_t *sp,
                                      const uint32_t *toks, uint32_t n, uint32_t n_resumed,
                                      const char *stops, uint32_t stops_len, const char *grammar,
                                      uint32_t grammar_len)
{
    int32_t       prev;
    moon_status_t status;

    if (n_resumed >= n || n_resumed >= r->max_tokens) {
        return MOON_ERR_INVALID_PARAM;
    }
    prev        = (int32_t)toks[n - n_resumed - 1];
    status      = moon_serve_sampler_open(&r->smp, d->vocab, d->tok, sp, toks, n, n_resumed);
    r->logprobs = sp->logprobs;
    if (status == MOON_OK) {
        status            = moon_serve_text_init(&r->text, d->tok, prev, stops, stops_len);
        r->text_ready     = status == MOON_OK;
        r->text.keep_stop = (sp->flags & MOON_SERVE_F_STOP_STR_OUT) != 0;
    }
    for (uint32_t i = n - n_resumed; status == MOON_OK && i < n; i++) {
        const char *unsent;
        size_t      len;
        moon_serve_text_push(&r->text, (int32_t)toks[i], &unsent, &len);
    }
    d->gram_err[0] = '\0';
    if (status == MOON_OK) {
        status = moon_serve_grammar_begin(&d->grammars, d->tok, grammar, grammar_len,
                                          toks + n - n_resumed, n_resumed, &r->gram, d->gram_err,
                                          sizeof(d->gram_err));
        d->n_constrained += r->gram.fsm != NULL;
    }
    r->n_resumed = n_resumed;
    r->n_gen     = n_resumed;
    return status;
}

/* Takes a KV_READY: for a request already taken, or a new one if the budget
 * allows; otherwise it waits. Returns 0 when it had to wait. */
/* A request that is not taken here ends: DONE error to its client, RELEASED
 * to the conductor (its entry ends), KV_DONE to its prefill instance (if
 * any: it frees the sequence), so nobody waits for it. */
void moon_dec_answer_untaken(moon_actor_t *self, decode_t *d, moon_addr_t reply_to, uint64_t id,
                             uint32_t n_choices, moon_addr_t prefill, moon_status_t status,
                             const char *why)
{
    moon_serve_released_t *rel;
    dreq_t                 tmp;

    memset(&tmp, 0, sizeof(tmp));
    tmp.reply_to         = reply_to;
    tmp.request_id       = id;
    tmp.prefill          = prefill;
    tmp.prefill_instance = -1;
    tmp.state            = DREQ_ENDED; /* nothing of it runs here */
    send_done(self, d, &tmp, MOON_FINISH_ERROR, status, "", why);
    for (uint32_t i = 1; i < n_choices; i++) {
        moon_dec_done_choice(self, d, &tmp, id + i, MOON_FINISH_ERROR, status, why);
    }
    moon_dec_send_kv_done(self, &tmp, status);
    rel = moon_msg_new(MOON_MSG_SERVE_RELEASED, 0);
    if (rel != NULL) {
        rel->reply_to   = reply_to;
        rel->request_id = id;
        rel->finish     = MOON_FINISH_ERROR;
        moon_tell(self, d->a.conductor, &rel->hdr);
    }
}

static int prefill_lost(const decode_t *d, moon_addr_t prefill)
{
    for (uint32_t i = 0; i < MOON_MIN(d->n_lost, DEC_LOST_RING); i++) {
        if (d->lost[i] == prefill) {
            return 1;
        }
    }
    return 0;
}

static int handle_kv_ready(moon_actor_t *self, decode_t *d, const moon_serve_kv_ready_t *m)
{
    dreq_t       *r;
    moon_status_t status;

    if (prefill_lost(d, m->prefill)) {
        return 1; /* sent before its loss: the conductor's LOST ended the request here */
    }
    r = find_req(d, m->reply_to, m->request_id);
    if (r != NULL) {
        moon_dec_take_kv_ready(self, d, r, m);
        return 1;
    }
    if (m->n_tokens == 0 || m->n_tokens >= d->seq_len || m->max_tokens == 0) {
        MOON_WARN("decode %u: handover of request %llu with %u tokens refused", d->a.instance,
                  (unsigned long long)m->request_id, m->n_tokens);
        moon_dec_answer_untaken(self, d, m->reply_to, m->request_id, m->n_choices, m->prefill,
                                MOON_ERR_INVALID_PARAM, "decode: handover refused (bad length)");
        return 1;
    }
    status = moon_dec_open(self, d, m, DREQ_PULLING, &r);
    if (status == MOON_ERR_NO_RESOURCE) {
        return 0;
    }
    if (status != MOON_OK) { /* out of memory (logged by the allocator), or too many choices */
        moon_dec_answer_untaken(
            self, d, m->reply_to, m->request_id, m->n_choices, m->prefill, status,
            status == MOON_ERR_UNSUPPORTED
                ? "decode: the pool cannot hold this many choices of the request"
                : "decode: out of memory taking the request");
        return 1;
    }
    if (moon_weights_set_engine(&d->weights, r->version) == NULL) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, MOON_ERR_NOT_FOUND,
                        "the request's weight version is not held");
        return 1;
    }
    if (moon_dec_take_cancel(d, m->reply_to, m->request_id)) {
        if (r->n_choices == 1) {
            moon_dec_finish(self, d, r, MOON_FINISH_CANCELLED, MOON_OK, NULL);
            return 1;
        }
        r->leader_cancelled = 1; /* choice 0 alone: the others go on */
    }
    moon_dec_take_kv_ready(self, d, r, m);
    return 1;
}

/* The SLO class a waiting KV_READY or PREFILL carries. */
static uint32_t class_of(const moon_msg_hdr_t *msg)
{
    return msg->type == MOON_MSG_SERVE_PREFILL ? ((const moon_serve_prefill_t *)msg)->slo_class
                                               : ((const moon_serve_kv_ready_t *)msg)->slo_class;
}

/* 1 when a request of slo_class must queue behind those waiting: one of its
 * class or a lower one waits (a request's later messages stay behind its first). */
static int must_wait(const decode_t *d, uint32_t slo_class)
{
    for (uint32_t i = 0; i < d->n_waiting; i++) {
        if (class_of(d->waiting[i]) <= slo_class) {
            return 1;
        }
    }
    return 0;
}

static int handle_incoming(moon_actor_t *self, decode_t *d, const moon_msg_hdr_t *msg)
{
    return msg->type == MOON_MSG_SERVE_PREFILL
               ? moon_dec_take_prefill(self, d, (const moon_serve_prefill_t *)msg)
               : handle_kv_ready(self, d, (const moon_serve_kv_ready_t *)msg);
}

/* KV_READY from a prefill instance, or (colocated) PREFILL from the
 * conductor: both begin with the request's name. */
static moon_status_t decode_on_kv_ready(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    decode_t                    *d = moon_actor_state(self);
    const moon_serve_kv_ready_t *m = (const void *)msg;

    if (msg->type == MOON_MSG_SERVE_PREFILL && d->cache == NULL) {
        MOON_WARN("decode %u: a prefill request for a decode-only instance dropped", d->a.instance);
        return MOON_OK;
    }
    /* first come, first served: a new request that would fit does not pass
     * the ones already waiting for room (a long one would starve behind a
     * stream of short ones); the head always fits an empty pool at last, as
     * init asks for one full context */
    int queued = find_req(d, m->reply_to, m->request_id) == NULL && must_wait(d, class_of(msg));
    if (queued || !handle_incoming(self, d, msg)) {
        moon_msg_hdr_t **w = moon_realloc(d->waiting, (d->n_waiting + 1) * sizeof(*w));
        if (w == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        moon_msg_retain(msg);
        d->waiting                 = w;
        d->waiting[d->n_waiting++] = (moon_msg_hdr_t *)msg;
    }
    return MOON_OK;
}

/* A prefill's prompt logprobs: on to the client at once, ahead of the
 * request's first TOKEN (prefill_rows.h). */
static moon_status_t decode_on_prompt_logprobs(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    moon_status_t status = moon_prefill_rows_forward(self, msg);

    if (status != MOON_OK) {
        MOON_WARN("decode: prompt logprobs of request %llu not passed on: %s",
                  (unsigned long long)((const moon_serve_prompt_logprobs_t *)msg)->request_id,
                  moon_status_str(status));
    }
    return MOON_OK;
}

static void try_admit_waiting(moon_actor_t *self, decode_t *d)
{
    uint32_t c = 0;

    if (d->admitting) {
        return; /* the outer loop goes on admitting */
    }
    d->admitting = 1;
    /* Class by class, lowest first; in order within one (a request's later
     * messages stay behind its first, of the same class). The first that
     * does not fit stops its class and every class above it. */
    for (;;) {
        uint32_t i = 0, next = UINT32_MAX;
        int      blocked = 0;
        while (i < d->n_waiting) {
            uint32_t k = class_of(d->waiting[i]);
            if (k != c) {
                next = k > c && k < next ? k : next;
                i++;
                continue;
            }
            if (!handle_incoming(self, d, d->waiting[i])) {
                blocked = 1;
                break;
            }
            moon_msg_release(d->waiting[i]);
            memmove(&d->waiting[i], &d->waiting[i + 1],
                    (d->n_waiting - i - 1) * sizeof(*d->waiting));
            d->n_waiting--;
        }
        if (blocked || next == UINT32_MAX) {
            break;
        }
        c = next;
    }
    d->admitting = 0;
}

static moon_status_t decode_on_bulk_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_dist_bulk_done_t *m = (const void *)msg;

    moon_dec_block_arrived(self, moon_actor_state(self), m->cookie, m->status);
    return MOON_OK;
}

/* ---- the batch ------------------------------------------------------------ */

/* The next forward pass: a decode step of the whole batch, or (colocated) a
 * prefill chunk, taking turns while both have work. */
void moon_dec_maybe_step(moon_actor_t *self, decode_t *d)
{
    moon_status_t status;
    dreq_t       *pre;

    if (moon_engine_runner_busy(d->runner)) {
        moon_dec_steps_yield(d); /* several steps in flight: the next boundary is ours */
        return;
    }
    pre    = d->cache != NULL ? moon_dec_next_prefill(d) : NULL;
    d->b_n = 0;
    if (pre != NULL && d->last_was_chunk == 0) {
        moon_dec_start_chunk(self, d, pre);
        return;
    }
    d->b_groups = 0;
    for (uint32_t h = 0; h < d->weights.n_held; h++) {
        uint32_t start = d->b_n;
        for (uint32_t i = 0; i < d->a.max_seqs && d->b_n < d->a.engine.max_batch; i++) {
            dreq_t *r = &d->reqs[i];
            if (r->state != DREQ_RUNNING || r->version != d->weights.held[h].version) {
                continue;
            }
            /* budgeted at admission: the room for one more token is there */
            MOON_CHECK(moon_kv_seq_reserve(d->pool.kv, r->seq, 1) == MOON_OK);
            r->in_step        = 1;
            d->b_slot[d->b_n] = i;
            d->b_seq[d->b_n]  = r->seq;
            d->b_tok[d->b_n]  = r->last_token;
            d->b_n++;
        }
        if (d->b_n > start) {
            d->b_engine[d->b_groups] = d->weights.held[h].engine;
            d->b_end[d->b_groups++]  = d->b_n;
        }
    }
    if (d->b_n == 0) {
        if (pre != NULL) {
            moon_dec_start_chunk(self, d, pre);
        }
        return;
    }
    d->job_kind       = JOB_STEP;
    d->last_was_chunk = 0;
    moon_dec_steps_prepare(d, pre != NULL);
    status = moon_engine_runner_submit(d->runner, self, moon_dec_steps_job, d, 0);
    MOON_CHECK(status == MOON_OK);
}

/* A forward pass with r in it ended: r ends now if it ended or was
 * cancelled meanwhile, or if the pass failed (1); else it goes on (0). */
int moon_dec_after_pass(moon_actor_t *self, decode_t *d, dreq_t *r, moon_status_t status,
                        const char *what)
{
    r->in_step = 0;
    if (r->state == DREQ_ENDED) {
        moon_dec_release_req(self, d, r);
    } else if (r->cancel_pending) {
        moon_dec_finish(self, d, r, MOON_FINISH_CANCELLED, MOON_OK, NULL);
    } else if (status != MOON_OK) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, status, what);
    } else {
        return 0;
    }
    return 1;
}

/* The step job ended: its last step's tokens are sampled here unless the
 * engine thread sent them (b_emitted); a request it saw end finishes here. */
static void on_step_done(moon_actor_t *self, decode_t *d, moon_status_t status)
{
    d->n_tokens_out += d->b_tokens;
    d->b_tokens     = 0;
    d->tok_batching = 1; /* the step's tokens leave together, one message per reply address */
    for (uint32_t b = 0; b < d->b_n; b++) {
        dreq_t *r = &d->reqs[d->b_slot[b]];
        if (moon_dec_after_pass(self, d, r, status, "decode step failed")) {
            continue;
        }
        if (!d->b_emitted) {
            moon_dec_sample_emit(self, d, r, d->b_logits + (size_t)b * d->vocab);
        } else if (r->ended) {
            moon_dec_finish(self, d, r, r->end_why, MOON_OK, NULL);
        }
    }
    d->b_emitted = 0;
    moon_dec_tokens_flush(self, d);
    d->tok_batching = 0;
    d->b_n          = 0;
    moon_dec_maybe_step(self, d);
    if (d->n_constrained > 0) {
        moon_dec_prefetch_masks(d);
    }
}

static moon_status_t decode_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    decode_t     *d = moon_actor_state(self);
    uint64_t      job;
    moon_status_t status;
    double        dur;

    uint64_t cookie;

    if (moon_kv_pool_timer(msg, &cookie)) {
        moon_dec_block_arrived(self, d, cookie, MOON_OK); /* a modeled pull ended (simulation) */
    } else if (moon_engine_runner_done(d->runner, msg, &job, &status, &dur)) {
        moon_weights_set_poll(&d->weights, self, d->runner);
        if (d->job_kind == JOB_CHUNK) {
            moon_dec_chunk_done(self, d, status, dur);
        } else {
            on_step_done(self, d, status);
        }
    } else {
        moon_dec_report_load(self, d);
    }
    return MOON_OK;
}

static moon_status_t decode_on_cancel(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    decode_t                  *d = moon_actor_state(self);
    const moon_serve_cancel_t *m = (const void *)msg;
    dreq_t                    *r = find_req(d, m->reply_to, m->request_id);

    if (r != NULL && r->n_choices > 1 && !r->forked) {
        r->leader_cancelled = 1; /* the others go on: it ends when they fork */
        return MOON_OK;
    }
    if (r != NULL) {
        r->cancel_pending = 1;
        if (!r->in_step) {
            moon_dec_finish(self, d, r, MOON_FINISH_CANCELLED, MOON_OK, NULL);
        } else {
            moon_dec_steps_yield(d); /* it ends after the step in flight, as before */
        }
        return MOON_OK;
    }
    /* not here yet (it may be queued behind the budget, or still at the
     * prefill): remember it for when it comes */
    d->cancels[d->n_cancels % DEC_CANCEL_RING].reply_to   = m->reply_to;
    d->cancels[d->n_cancels % DEC_CANCEL_RING].request_id = m->request_id;
    d->n_cancels++;
    return MOON_OK;
}

/* The request's prefill instance is lost. All of its KV in: it goes on.
 * Otherwise (its KV still arriving, waiting for room, or not here yet) it
 * ends with a resumable DONE and RELEASED, and later KV_READYs of that
 * prefill are dropped. */
static moon_status_t decode_on_lost(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    decode_t                *d = moon_actor_state(self);
    const moon_serve_lost_t *m = (const void *)msg;
    dreq_t                  *r;
    static const char        why[] = "the prefill instance serving the request was lost";

    if (msg->src != d->a.conductor) {
        return MOON_OK;
    }
    if (!prefill_lost(d, m->lost)) {
        d->lost[d->n_lost++ % DEC_LOST_RING] = m->lost;
    }
    r = find_req(d, m->reply_to, m->request_id);
    if (r == NULL) {
        /* its leader ended, forked choices run on (all of their KV is in) */
        dreq_t tmp = {.reply_to = m->reply_to, .group_id = m->request_id};
        if (moon_dec_group_alive(d, &tmp)) {
            return MOON_OK;
        }
    }
    if (r != NULL) {
        if (r->state == DREQ_PULLING && r->prefill == m->lost) {
            moon_dec_finish(self, d, r, MOON_FINISH_ERROR, MOON_ERR_PEER_LOST, why);
        }
        return MOON_OK;
    }
    for (uint32_t i = 0; i < d->n_waiting;) {
        const moon_serve_kv_ready_t *w = (const void *)d->waiting[i];
        if (w->reply_to == m->reply_to && w->request_id == m->request_id) {
            moon_msg_release(d->waiting[i]);
            memmove(&d->waiting[i], &d->waiting[i + 1],
                    (d->n_waiting - i - 1) * sizeof(*d->waiting));
            d->n_waiting--;
        } else {
            i++;
        }
    }
    /* not taken here: answer for it (nothing of it runs here) */
    moon_dec_answer_untaken(self, d, m->reply_to, m->request_id, m->n_choices, MOON_ADDR_NONE,
                            MOON_ERR_PEER_LOST, why);
    moon_dec_report_load(self, d);
    return MOON_OK;
}

static moon_status_t decode_on_weights(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    decode_t *d = moon_actor_state(self);

    moon_dec_steps_yield(d); /* a version comes or goes: the batch regroups */
    moon_weights_set_handle(&d->weights, self, d->runner, msg);
    return MOON_OK;
}

/* ---- life ------------------------------------------------------------------ */

static void decode_fini(moon_actor_t *self);

static moon_status_t decode_init(moon_actor_t *self, const void *args)
{
    decode_t                  *d = moon_actor_state(self);
    const moon_model_config_t *mc;
    moon_kv_config_t           kcfg;
    moon_status_t              status;
    uint32_t                   mb;

    d->a          = *(const moon_serve_instance_args_t *)args;
    d->a.shards   = NULL;
    d->a.n_shards = 0;
    mc            = moon_model_config(d->a.model);
    d->tok        = moon_model_tokenizer(d->a.model);
    d->vocab      = mc->vocab_size;
    d->seq_len    = mc->seq_len;
    if (d->tok == NULL || d->a.block_tokens == 0 || d->a.max_seqs == 0 ||
        d->a.n_blocks < blocks_for(d, d->seq_len)) {
        MOON_ERROR("decode: a tokenizer, a block size and a pool of at least one full context "
                   "(%u blocks) are needed",
                   d->a.block_tokens ? blocks_for(d, d->seq_len) : 0);
        return MOON_ERR_INVALID_PARAM;
    }
    mb                    = d->a.engine.max_batch ? d->a.engine.max_batch : 64;
    d->a.engine.max_batch = mb;
    kcfg           = moon_model_kv_config(mc, d->a.block_tokens, d->a.n_blocks, d->a.max_seqs);
    kcfg.elem_type = d->a.kv_type;
    status         = moon_engine_create(d->a.model, &d->a.engine, &d->engine);
    moon_weights_set_init(&d->weights, d->a.dist, &d->a.engine, 0, d->engine);
    if (status == MOON_OK) {
        status = moon_kv_pool_open(&d->pool, d->a.dist, &kcfg, d->a.virtual_kv,
                                   moon_serve_numa_core(&d->a));
    }
    d->reqs     = moon_calloc(d->a.max_seqs, sizeof(*d->reqs));
    d->b_slot   = moon_calloc(mb, sizeof(*d->b_slot));
    d->b_seq    = moon_calloc(mb, sizeof(*d->b_seq));
    d->b_tok    = moon_calloc(mb, sizeof(*d->b_tok));
    d->b_logits = moon_calloc((size_t)mb * d->vocab, sizeof(float));
    d->cap_tok  = mb;
    d->rt       = moon_actor_runtime(self);
    d->tq.pend  = moon_calloc(mb, sizeof(*d->tq.pend));
    d->tq.text  = moon_calloc((size_t)mb * DEC_TOK_TEXT_PER_SEQ, 1);
    d->eq.pend  = moon_calloc(mb, sizeof(*d->eq.pend));
    d->eq.text  = moon_calloc((size_t)mb * DEC_TOK_TEXT_PER_SEQ, 1);
    d->lp_row   = moon_calloc(d->vocab, sizeof(float));
    if (d->a.role == MOON_SERVE_ROLE_COLOCATED && status == MOON_OK) {
        status = moon_dec_colocated_open(d);
    }
    if (status == MOON_OK &&
        (!d->reqs || !d->b_slot || !d->b_seq || !d->b_tok || !d->b_logits || !d->tq.pend ||
         !d->tq.text || !d->eq.pend || !d->eq.text || !d->lp_row)) {
        status = MOON_ERR_NO_MEMORY;
    }
    if (status == MOON_OK) {
        status =
            moon_serve_instance_start(self, &d->a, d->engine, d->pool.kv, &d->runner, &d->timer);
    }
    if (status != MOON_OK) {
        MOON_ERROR("decode %u: setup failed: %s", d->a.instance, moon_status_str(status));
        decode_fini(self); /* the runtime does not call fini after a failed init */
        return status;
    }
    if (d->cache != NULL) {
        moon_cache_events_snapshot(&d->events, self, d->cache); /* after HELLO: empty */
    }
    moon_dec_report_load(self, d);
    return MOON_OK;
}

static void decode_fini(moon_actor_t *self)
{
    decode_t *d = moon_actor_state(self);

    moon_engine_runner_destroy(d->runner); /* first: no step touches the pool after this */
    for (uint32_t i = 0; d->reqs != NULL && i < d->a.max_seqs; i++) {
        dreq_t *r = &d->reqs[i];
        if (r->state != DREQ_FREE) {
            if (r->text_ready) {
                moon_serve_text_fini(&r->text);
            }
            moon_sampler_fini(&r->smp);
            moon_serve_grammar_end(d->grammars, &r->gram);
            moon_msg_release(r->final_msg);
            moon_free(r->local);
            moon_free(r->arrived);
        }
    }
    moon_serve_grammars_destroy(d->grammars);
    for (uint32_t i = 0; i < d->n_waiting; i++) {
        moon_msg_release(d->waiting[i]);
    }
    moon_free(d->waiting);
    moon_dec_colocated_close(d); /* the cache's references, before the pool goes */
    moon_kv_pool_close(&d->pool);
    moon_weights_set_fini(&d->weights);
    moon_free(d->reqs);
    moon_free(d->b_slot);
    moon_free(d->b_seq);
    moon_free(d->b_tok);
    moon_free(d->b_logits);
    moon_free(d->tq.pend);
    moon_free(d->tq.text);
    moon_free(d->eq.pend);
    moon_free(d->eq.text);
    moon_free(d->lp_row);
}

const moon_actor_ops_t moon_decode_ops = {
    .name        = "decode",
    .state_bytes = sizeof(decode_t),
    .init        = decode_init,
    .fini        = decode_fini,
    .on_msg =
        {
            [MOON_MSG_SERVE_KV_READY]        = decode_on_kv_ready,
            [MOON_MSG_SERVE_PROMPT_LOGPROBS] = decode_on_prompt_logprobs,
            [MOON_MSG_SERVE_PREFILL]         = decode_on_kv_ready,
            [MOON_MSG_SERVE_CANCEL]          = decode_on_cancel,
            [MOON_MSG_SERVE_LOST]            = decode_on_lost,
            [MOON_MSG_DIST_BULK_DONE]        = decode_on_bulk_done,
            [MOON_MSG_SERVE_ENGINE_DONE]     = decode_on_timer,
            [MOON_MSG_SYS_TIMER]             = decode_on_timer,
            [MOON_MSG_SERVE_CACHE_SYNC]      = moon_dec_on_cache_sync,
            [MOON_MSG_WEIGHTS_INSTALL]       = decode_on_weights,
            [MOON_MSG_WEIGHTS_RETIRE]        = decode_on_weights,
        },
};
