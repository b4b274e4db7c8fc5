/* actors/serve/prefill.c - the prefill instance: for each placed request (FIFO
 * within its SLO class, one computing at a time) it reuses the prompt's
 * leading blocks its own prefix cache holds, fetches the next cached ones
 * from the KV store straight into its pool (RDMA get into the registered
 * pool), computes the rest in chunks on its engine
 * thread, puts the new full blocks into the store once the prompt is
 * computed (one two-phase put, zero-copy from the pool), and hands the sequence to the decode
 * instance the conductor chose: after every chunk a KV_READY names the blocks now final, which the
 * decode pulls from this pool while the next chunk computes; the last one carries the partial block
 * and the first sampled token, which goes to the client from here first when it may
 * (prefill_first.h). A request's blocks stay until the decode says KV_DONE and the store
 * puts from them have finished; its full blocks then stay in the prefix cache (least recently used
 * ones go when the pool needs room), whose content the conductor learns from CACHE_EVENTS
 * (cache_events.h). */
#include "prefill.h"
#include "prefill_first.h"
#include "prefill_rows.h"

#include "block_cache.h"
#include "cache_events.h"
#include "engine_runner.h"
#include "kv_pool.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "serve_grammar.h"
#include "serve_instance.h"
#include "moonlet/store_client.h"
#include "moonlet/weights_msgs.h"
#include "weights_serving.h"
#include "timer_kinds.h"

#include <math.h>
#include <string.h>

enum { PREQ_FREE = 0, PREQ_QUEUED, PREQ_FETCHING, PREQ_COMPUTING, PREQ_HANDED };
enum { OP_QUERY = 1, OP_GET = 2, OP_PUT = 3 };

#define PRE_COOKIE(_op, _slot, _i)                                                                 \
    (((uint64_t)(_op) << 56) | ((uint64_t)(_slot) << 32) | (uint32_t)(_i))
#define PRE_N_CLASSES 4u

typedef struct {
    uint32_t                    state;
    const moon_serve_prefill_t *msg; /* retained */
    uint32_t                    seq;
    int                         have_seq;
    uint32_t                    n_prompt, n_full, n_done, n_sent, n_fetched, n_cached;
    uint32_t                    n_local; /* leading blocks taken from the prefix cache */
    uint32_t                    n_gets, n_gets_done, n_puts;
    uint32_t                   *got; /* (n_full) blocks fetched from the store, by block index */
    uint8_t                    *got_ok;
    int                         kv_done, cancelled, handed;
    int                         decode_lost; /* its decode instance is gone: tell it nothing */
    int                         first_sent;  /* its first token went to the client from here */
    uint64_t                    start_ns, compute_ns, first_ns;
    uint32_t                    chunk_n;       /* tokens of the chunk in flight */
    int                         overhead_done; /* request_s charged (with its first chunk) */
    double  chunk_extra_s; /* request_s in the chunk in flight: not engine time */
    double *embed_sum;     /* (dim) MOON_SERVE_F_EMBED: the hidden rows summed so far */
} preq_t;

typedef struct {
    moon_serve_instance_args_t a;
    moon_addr_t               *shards;
    moon_engine_t             *engine;  /* version 0's, owned by weights */
    moon_weights_set_t         weights; /* the versions held (two while one drains) */
    moon_engine_runner_t      *runner;
    moon_kv_pool_t             pool;
    moon_store_client_t       *store;
    moon_block_cache_t        *cache;  /* the prompts' full blocks, kept for reuse */
    moon_cache_events_t        events; /* its changes, told to the conductor */
    uint32_t                   vocab, seq_len;
    preq_t                    *reqs; /* (max_seqs) */
    /* the final KV_READY's other choices (KV_READY choices), while it is built */
    uint32_t *ch_buf;
    uint32_t  ch_n;
    uint32_t *queue[PRE_N_CLASSES]; /* slots waiting, per class, FIFO */
    uint32_t  n_queued[PRE_N_CLASSES];
    int32_t   cur;     /* slot computing, -1: none */
    int       stalled; /* cur waits for pool blocks */
    float    *logits;
    float    *rows_logits, *rows_hidden; /* prefill_rows.h's requests: every row (lazily made) */
    uint32_t  dim;
    moon_serve_grammars_t *grammars; /* constrained first tokens; NULL until one comes */
    /* the chunk in flight */
    moon_engine_t *job_engine; /* of the request's weight version */
    const int32_t *job_tokens;
    uint32_t       job_seq, job_n;
    uint32_t       job_flags;   /* the request's: prefill_rows.h's give back every row */
    double         job_extra_s; /* modeled time charged with the chunk (a.request_s) */
    uint64_t       timer;
    uint64_t       n_cache_hit_tokens, n_store_hit_tokens, n_computed_tokens;

    moon_serve_load_memo_t load_memo; /* the last LOAD sent */
} prefill_t;

static void kick(moon_actor_t *self, prefill_t *p);
static void compute_next(moon_actor_t *self, prefill_t *p, preq_t *r);

static uint32_t slot_of(const prefill_t *p, const preq_t *r)
{
    return (uint32_t)(r - p->reqs);
}

static const int32_t *tokens_of(const preq_t *r)
{
    return MOON_SPAN_PTR(r->msg, r->msg->tokens);
}

/* Leading blocks of the prompt the instance may reuse or fetch: at least the
 * prompt's last token is computed (its logits give the first token). */
static uint32_t fetchable_blocks(const prefill_t *p, const preq_t *r)
{
    if (moon_prefill_rows_wanted(r->msg->flags)) {
        return 0; /* no cached block has its rows: the whole prompt is computed */
    }
    return MOON_MIN(r->msg->keys.n / 2, (r->n_prompt - 1) / p->a.block_tokens);
}

/* Tokens r still has to compute: a queued request's planned prefix counts
 * as done (so the conductor's queue estimate is not inflated by hits). */
static uint32_t tokens_to_compute(const prefill_t *p, const preq_t *r)
{
    uint32_t plan = 0;

    if (r->state == PREQ_QUEUED && r->msg->n_fetch != MOON_SERVE_FETCH_ASK) {
        plan =
            MOON_MIN(r->msg->n_local + r->msg->n_fetch, fetchable_blocks(p, r)) * p->a.block_tokens;
    }
    return r->n_prompt - MOON_MAX(r->n_done, plan);
}

static void report_load(moon_actor_t *self, prefill_t *p)
{
    uint32_t queued_tokens = 0, queued = 0;
    uint64_t counters[3] = {p->n_cache_hit_tokens, p->n_store_hit_tokens, p->n_computed_tokens};

    for (uint32_t i = 0; i < p->a.max_seqs; i++) {
        const preq_t *r = &p->reqs[i];
        if (r->state == PREQ_QUEUED || r->state == PREQ_FETCHING || r->state == PREQ_COMPUTING) {
            queued_tokens += tokens_to_compute(p, r);
            queued++;
        }
    }
    /* blocks only the cache holds are room: it gives them back on demand */
    moon_serve_report_load(self, &p->a, &p->load_memo, queued_tokens, queued, 0,
                           moon_kv_n_free_blocks(p->pool.kv) + moon_block_cache_idle(p->cache),
                           counters);
}

/* Room for want more free blocks in the pool, evicting idle cached blocks
 * (least recently used first; the conductor hears of it). 1 when freed any. */
static int make_room(moon_actor_t *self, prefill_t *p, uint32_t want)
{
    uint32_t before = moon_kv_n_free_blocks(p->pool.kv);

    if (moon_block_cache_make_room(p->cache, before + want) == before) {
        return 0;
    }
    moon_cache_events_flush(&p->events, self);
    return 1;
}

/* The prompt's full blocks enter the prefix cache (those taken from it are
 * only touched): computed or fetched, they serve the next prompt sharing
 * them. */
static void keep_blocks(moon_actor_t *self, prefill_t *p, const preq_t *r)
{
    const moon_kv_key_t *keys = MOON_SPAN_PTR(r->msg, r->msg->keys);
    uint32_t             n    = MOON_MIN(r->msg->keys.n / 2, r->n_prompt / p->a.block_tokens);

    for (uint32_t i = 0; i < n; i++) {
        moon_block_cache_put(p->cache, keys[i], moon_kv_seq_block(p->pool.kv, r->seq, i));
    }
    moon_cache_events_flush(&p->events, self);
}

static void free_req(moon_actor_t *self, prefill_t *p, preq_t *r)
{
    if (r->n_gets_done < r->n_gets || r->n_puts > 0 || !r->kv_done) {
        return; /* a transfer still reads or writes its blocks, or the decode pulls them */
    }
    for (uint32_t i = 0; r->got != NULL && i < r->n_full; i++) {
        if (r->got[i] != MOON_KV_NO_BLOCK) {
            moon_kv_block_unref(p->pool.kv, r->got[i]);
        }
    }
    if (r->have_seq) {
        moon_kv_seq_destroy(p->pool.kv, r->seq);
    }
    moon_msg_release(&r->msg->hdr);
    moon_free(r->got);
    moon_free(r->got_ok);
    moon_free(r->embed_sum);
    memset(r, 0, sizeof(*r));
    if (p->stalled && p->cur >= 0) {
        p->stalled = 0;
        compute_next(self, p, &p->reqs[p->cur]);
    }
    report_load(self, p);
}

/* KV_READY to the decode: blocks [first, first + n) of the sequence;
 * final also carries the first token and the sampling state. */
static moon_status_t send_ready(moon_actor_t *self, prefill_t *p, preq_t *r, uint32_t first,
                                uint32_t n, int final, moon_status_t status, int32_t token,
                                uint64_t rng, const moon_serve_lp_t *lp, const char *why)
{
    const moon_serve_prefill_t *q = r->msg;
    size_t tail = moon_kv_pool_desc_bytes(&p->pool) + (size_t)n * 4 + 64 + (why ? strlen(why) : 0);
    moon_serve_kv_ready_t *m;
    moon_status_t          st = MOON_OK;

    if (final) {
        tail += (size_t)q->stop_ids.n * 4 + q->stop_strs.n + (size_t)q->tokens.n * 4 +
                (size_t)q->logit_bias.n * 4 + 8 * MOON_LOGPROBS_MAX + 8 + q->grammar.n +
                (size_t)p->ch_n * 4 + 8;
    }
    m = moon_msg_new(MOON_MSG_SERVE_KV_READY, tail);
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->reply_to         = q->reply_to;
    m->request_id       = q->request_id;
    m->prefill          = moon_actor_addr(self);
    m->prefill_instance = p->a.instance;
    m->status           = status;
    m->first_block      = first;
    m->final            = final;
    m->n_tokens         = r->n_prompt;
    m->token            = (uint32_t)token;
    m->n_cached         = r->n_cached;
    m->arrival_ns       = q->arrival_ns;
    m->queue_ns         = r->start_ns - q->arrival_ns;
    m->prefill_ns       = r->compute_ns;
    m->n_resumed        = q->n_resumed;
    m->slo_class        = q->slo_class;
    m->weight_version   = q->weight_version;
    MOON_SERVE_COPY_SAMPLING(m, q);
    m->seed = rng;
    if (n > 0) {
        uint32_t *b = moon_msg_span_alloc(m, &m->blocks, n, 4, 0);
        for (uint32_t i = 0; i < n; i++) {
            b[i] = moon_kv_seq_block(p->pool.kv, r->seq, first + i);
        }
        st = moon_kv_pool_describe(&p->pool, m, &m->desc, &m->base);
    }
    if (st == MOON_OK && final) {
        st = moon_serve_copy_span(m, &m->stop_ids, q, q->stop_ids, 4, 0);
        if (st == MOON_OK) {
            st = moon_serve_copy_span(m, &m->logit_bias, q, q->logit_bias, 4, 0);
        }
        if (st == MOON_OK) {
            st = moon_serve_copy_span(m, &m->stop_strs, q, q->stop_strs, 1, 0);
        }
        if (st == MOON_OK) {
            st = moon_serve_copy_span(m, &m->grammar, q, q->grammar, 1, 0);
        }
        if (st == MOON_OK) {
            st = moon_serve_copy_span(m, &m->tokens, q, q->tokens, 4, 0);
        }
        if (st == MOON_OK && lp != NULL) {
            m->first_logprob = lp->lp;
            st               = moon_serve_lp_put(m, &m->first_top, lp);
        }
        if (st == MOON_OK && p->ch_n > 0) {
            uint32_t *c = moon_msg_span_alloc(m, &m->choices, p->ch_n, 4, 0);
            st          = c != NULL ? MOON_OK : MOON_ERR_NO_RESOURCE;
            if (c != NULL) {
                memcpy(c, p->ch_buf, (size_t)p->ch_n * 4);
            }
        }
        m->first_sent = (uint32_t)r->first_sent;
        m->first_ns   = r->first_ns;
    }
    if (st == MOON_OK) {
        st = moon_msg_set_str(m, &m->message, why ? why : "");
    }
    if (st != MOON_OK) {
        moon_msg_release(&m->hdr);
        return st;
    }
    return moon_send(self, q->decode, &m->hdr) == MOON_OK
               ? MOON_OK
               : (moon_msg_release(&m->hdr), MOON_ERR_NO_ACTOR);
}

/* The request ends here (cancelled or failed): the decode answers the client. */
static void abort_req(moon_actor_t *self, prefill_t *p, preq_t *r, moon_status_t status,
                      const char *why)
{
    if (status != MOON_ERR_CANCELED) {
        MOON_WARN("prefill %u: request %llu: %s (%s)", p->a.instance,
                  (unsigned long long)r->msg->request_id, why, moon_status_str(status));
    }
    if (!r->handed && !r->decode_lost &&
        send_ready(self, p, r, 0, 0, 1, status, 0, 0, NULL, why) != MOON_OK) {
        MOON_ERROR("prefill %u: could not tell decode of request %llu's end", p->a.instance,
                   (unsigned long long)r->msg->request_id);
    }
    r->handed  = 1;
    r->kv_done = 1; /* the decode pulls nothing of an aborted request */
    r->state   = PREQ_HANDED;
    if (p->cur == (int32_t)slot_of(p, r)) {
        p->cur     = -1;
        p->stalled = 0;
    }
    free_req(self, p, r);
    kick(self, p);
}

/* ---- store: fetch the cached prefix, put the new blocks ------------------- */

static void put_new_blocks(prefill_t *p, preq_t *r, uint32_t from, uint32_t to)
{
    const uint64_t *keys = MOON_SPAN_PTR(r->msg, r->msg->keys);
    size_t          bb   = moon_kv_block_bytes(p->pool.kv);

    if (p->store == NULL) {
        return;
    }
    /* one reserve (then one commit) per shard for the whole span */
    moon_store_client_batch_begin(p->store);
    for (uint32_t i = MOON_MAX(from, r->n_fetched); i < to; i++) {
        moon_kv_key_t key = {keys[2 * i], keys[2 * i + 1]};
        uint32_t      blk = moon_kv_seq_block(p->pool.kv, r->seq, i);
        if (i >= r->msg->keys.n / 2) {
            break;
        }
        if (moon_store_client_put(p->store, key, moon_kv_block_data(p->pool.kv, blk), bb,
                                  p->pool.reg, PRE_COOKIE(OP_PUT, slot_of(p, r), i)) == MOON_OK) {
            r->n_puts++;
        }
    }
    moon_store_client_batch_end(p->store);
}

/* Appends the fetched blocks that landed (after the cached ones), in order
 * up to the first miss. */
static void fetch_finished(moon_actor_t *self, prefill_t *p, preq_t *r)
{
    uint32_t n = r->n_local;

    while (n < r->n_local + r->n_gets && r->got_ok[n]) {
        MOON_CHECK(moon_kv_seq_append_block(p->pool.kv, r->seq, r->got[n]) == MOON_OK);
        moon_kv_block_unref(p->pool.kv, r->got[n]);
        r->got[n++] = MOON_KV_NO_BLOCK;
    }
    r->n_fetched = n;
    r->n_done    = n * p->a.block_tokens;
    r->n_cached  = r->n_done;
    p->n_store_hit_tokens += (uint64_t)(n - r->n_local) * p->a.block_tokens;
    if (r->cancelled) {
        abort_req(self, p, r, MOON_ERR_CANCELED, "cancelled");
        return;
    }
    r->state = PREQ_COMPUTING;
    if (p->a.xfer_ns != NULL && n > r->n_local) {
        /* simulation: the fetch takes its modeled time before compute starts */
        uint64_t timer,
            delay = p->a.xfer_ns(p->a.xfer_arg, moon_now(moon_actor_runtime(self)),
                                 MOON_SERVE_XFER_FETCH, 0, p->a.instance, n - r->n_local);
        if (delay > 0 && moon_timer_start_kind(self, MOON_TIMER_KIND_SERVE_XFER, delay, 0,
                                               slot_of(p, r), &timer) == MOON_OK) {
            return;
        }
    }
    compute_next(self, p, r);
}

/* Gets blocks [r->n_local, end) from the store. */
static void start_fetch(moon_actor_t *self, prefill_t *p, preq_t *r, uint32_t end)
{
    const uint64_t *keys = MOON_SPAN_PTR(r->msg, r->msg->keys);
    size_t          bb   = moon_kv_block_bytes(p->pool.kv);

    if (end > r->n_local && moon_kv_n_free_blocks(p->pool.kv) < end - r->n_local) {
        make_room(self, p, end - r->n_local);
    }
    /* one GETV per shard for the whole prefix */
    moon_store_client_batch_begin(p->store);
    for (uint32_t i = r->n_local; i < end; i++) {
        moon_kv_key_t key = {keys[2 * i], keys[2 * i + 1]};
        if (moon_kv_block_alloc(p->pool.kv, &r->got[i]) != MOON_OK) {
            r->got[i] = MOON_KV_NO_BLOCK;
            break; /* pool full: compute the rest */
        }
        if (moon_store_client_get(p->store, key, moon_kv_block_data(p->pool.kv, r->got[i]), bb,
                                  p->pool.reg, PRE_COOKIE(OP_GET, slot_of(p, r), i)) != MOON_OK) {
            moon_kv_block_unref(p->pool.kv, r->got[i]);
            r->got[i] = MOON_KV_NO_BLOCK;
            break;
        }
        moon_kv_block_mark_written(p->pool.kv, r->got[i]);
        r->n_gets++;
    }
    moon_store_client_batch_end(p->store);
    if (r->n_gets == 0) {
        fetch_finished(self, p, r);
    }
}

static void on_store_done(moon_actor_t *self, void *arg, const moon_store_done_t *done)
{
    prefill_t *p    = arg;
    uint32_t   op   = (uint32_t)(done->cookie >> 56);
    uint32_t   slot = (uint32_t)(done->cookie >> 32) & 0xffffffu, i = (uint32_t)done->cookie;
    preq_t    *r;

    if (slot >= p->a.max_seqs || p->reqs[slot].state == PREQ_FREE) {
        return;
    }
    r = &p->reqs[slot];
    switch (op) {
    case OP_QUERY:
        start_fetch(self, p, r, done->status == MOON_OK ? done->n_hit : 0);
        break;
    case OP_GET:
        r->got_ok[i] = done->status == MOON_OK;
        if (done->status != MOON_OK) {
            MOON_DEBUG_LOG("prefill %u: store get of block %u: %s (computing it)", p->a.instance, i,
                           moon_status_str(done->status));
        }
        if (++r->n_gets_done == r->n_gets) {
            fetch_finished(self, p, r);
        }
        break;
    case OP_PUT:
        r->n_puts--;
        if (done->status != MOON_OK && done->status != MOON_ERR_EXISTS) {
            MOON_DEBUG_LOG("prefill %u: store put of block %u: %s", p->a.instance, i,
                           moon_status_str(done->status));
        }
        free_req(self, p, r);
        break;
    default:
        break;
    }
}

/* ---- compute ---------------------------------------------------------------- */

static moon_status_t chunk_job(void *arg, double *duration_s_p)
{
    prefill_t    *p = arg;
    moon_status_t status;

    if (moon_prefill_rows_wanted(p->job_flags)) {
        int lp = (p->job_flags & MOON_SERVE_F_PROMPT_LOGPROBS) != 0;
        status = moon_engine_prefill_rows(p->job_engine, p->pool.kv, p->job_seq, p->job_tokens,
                                          p->job_n, lp ? p->rows_logits : NULL,
                                          lp ? NULL : p->rows_hidden, duration_s_p);
        if (status == MOON_OK && lp) { /* the last row gives the first token */
            memcpy(p->logits, p->rows_logits + (size_t)(p->job_n - 1) * p->vocab,
                   (size_t)p->vocab * sizeof(float));
        }
    } else {
        status = moon_engine_prefill(p->job_engine, p->pool.kv, p->job_seq, p->job_tokens, p->job_n,
                                     p->logits, duration_s_p);
    }

    if (status == MOON_OK) {
        *duration_s_p += p->job_extra_s; /* an inline runner waits for it too */
    }
    return status;
}

static int others_hold_blocks(const prefill_t *p, const preq_t *r)
{
    for (uint32_t i = 0; i < p->a.max_seqs; i++) {
        if (&p->reqs[i] != r && p->reqs[i].state == PREQ_HANDED) {
            return 1;
        }
    }
    return 0;
}

/* Tokens of the next chunk. With nothing queued behind the request its
 * chunks are longer: the first token comes from the last chunk's logits, so
 * the chunks only pace the decode's pulls (which overlap the next chunk),
 * and a longer call costs less: each chunk gathers the whole prefix's KV
 * again, pays an engine hand-off and a KV_READY with its pulls (110M F32, a
 * 2,048-token prompt, one thread: 7.95 s of CPU in chunks of 512, 8.07 s in
 * chunks of 128, 8.69 s in one call; 4 KV_READYs instead of 16). Queued
 * requests keep the calibrated --prefill-chunk (the conductor's estimates). */
static uint32_t chunk_tokens(const prefill_t *p, const preq_t *r)
{
    uint32_t chunk = p->a.prefill_chunk_alone;

    for (uint32_t c = 0; c < PRE_N_CLASSES; c++) {
        chunk = p->n_queued[c] > 0 ? p->a.prefill_chunk : chunk;
    }
    return MOON_MIN(chunk, r->n_prompt - r->n_done);
}

/* The rows buffers a request of prefill_rows.h needs (made at its first
 * chunk, kept for the next ones); its chunk's length (logits rows are
 * capped). MOON_ERR_NO_MEMORY. */
static moon_status_t rows_prepare(prefill_t *p, preq_t *r, uint32_t *n_p)
{
    if (r->msg->flags & MOON_SERVE_F_PROMPT_LOGPROBS) {
        *n_p = MOON_MIN(*n_p, MOON_PREFILL_ROWS_LOGITS);
        if (p->rows_logits == NULL) {
            p->rows_logits =
                moon_malloc((size_t)MOON_PREFILL_ROWS_LOGITS * p->vocab * sizeof(float));
        }
        return p->rows_logits != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
    }
    /* hidden rows: at most --prefill-chunk of them (a lone request's chunk
     * may be longer: chunk_tokens) */
    *n_p = MOON_MIN(*n_p, p->a.prefill_chunk);
    if (p->rows_hidden == NULL) {
        p->rows_hidden = moon_malloc((size_t)p->a.prefill_chunk * p->dim * sizeof(float));
    }
    if (r->embed_sum == NULL) {
        r->embed_sum = moon_calloc(p->dim, sizeof(double));
    }
    return p->rows_hidden != NULL && r->embed_sum != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
}

static void compute_next(moon_actor_t *self, prefill_t *p, preq_t *r)
{
    uint32_t      n = chunk_tokens(p, r);
    moon_status_t status;

    if (r->cancelled) {
        abort_req(self, p, r, MOON_ERR_CANCELED, "cancelled");
        return;
    }
    p->job_flags = r->msg->flags & (MOON_SERVE_F_PROMPT_LOGPROBS | MOON_SERVE_F_EMBED);
    if (moon_prefill_rows_wanted(p->job_flags) && rows_prepare(p, r, &n) != MOON_OK) {
        abort_req(self, p, r, MOON_ERR_NO_MEMORY, "out of memory for the prompt's rows");
        return;
    }
    p->job_engine = moon_weights_set_engine(&p->weights, r->msg->weight_version);
    if (p->job_engine == NULL) {
        abort_req(self, p, r, MOON_ERR_NOT_FOUND, "the request's weight version is not held");
        return;
    }
    /* the reused and fetched prefix is final already: the decode pulls it
     * while the rest computes, not all after a short suffix (a long cached
     * prefix would otherwise make the first token gap its whole transfer) */
    if (r->n_sent < r->n_fetched && send_ready(self, p, r, r->n_sent, r->n_fetched - r->n_sent, 0,
                                               MOON_OK, 0, 0, NULL, NULL) == MOON_OK) {
        r->n_sent = r->n_fetched;
    }
    /* the actor reserves the blocks (the engine thread then finds them there
     * and touches no shared pool state) */
    status = moon_kv_seq_reserve(p->pool.kv, r->seq, n);
    while (status == MOON_ERR_NO_RESOURCE &&
           make_room(self, p, (n + p->a.block_tokens - 1) / p->a.block_tokens + 1)) {
        status = moon_kv_seq_reserve(p->pool.kv, r->seq, n);
    }
    if (status == MOON_ERR_NO_RESOURCE && others_hold_blocks(p, r)) {
        p->stalled = 1; /* a KV_DONE or a put's end frees blocks: free_req retries */
        return;
    }
    if (status != MOON_OK) {
        abort_req(self, p, r, status, "the prompt does not fit the prefill KV pool");
        return;
    }
    p->job_seq       = r->seq;
    p->job_tokens    = tokens_of(r) + r->n_done;
    p->job_n         = n;
    r->chunk_extra_s = r->overhead_done ? 0.0 : p->a.request_s; /* the first chunk */
    r->overhead_done = 1;
    p->job_extra_s   = r->chunk_extra_s;
    r->chunk_n       = n;
    status           = moon_engine_runner_submit(p->runner, self, chunk_job, p, slot_of(p, r));
    MOON_CHECK(status == MOON_OK);
}

/* The rows of the chunk just computed (prefill_rows.h): prompt logprobs go
 * to the client, hidden rows add to the embedding, whose last chunk ends
 * the request here. 1 when the request ended. */
static int rows_taken(moon_actor_t *self, prefill_t *p, preq_t *r)
{
    uint32_t      start = r->n_done - r->chunk_n;
    moon_status_t status;

    if (r->msg->flags & MOON_SERVE_F_PROMPT_LOGPROBS) {
        if (r->decode_lost) {
            return 0; /* ends at this chunk's end: nobody would forward them */
        }
        status =
            moon_prefill_rows_logprobs(self, r->msg, p->rows_logits, p->vocab, start, r->chunk_n);
        if (status != MOON_OK) {
            abort_req(self, p, r, status, "the prompt's logprobs could not be sent");
            return 1;
        }
        return 0;
    }
    if (!(r->msg->flags & MOON_SERVE_F_EMBED)) {
        return 0;
    }
    moon_prefill_rows_embed_add(r->embed_sum, p->rows_hidden, r->chunk_n, p->dim);
    if (r->n_done < r->n_prompt) {
        compute_next(self, p, r); /* no decode takes part: no KV_READY */
        return 1;
    }
    if (r->cancelled) {
        abort_req(self, p, r, MOON_ERR_CANCELED, "cancelled");
        return 1;
    }
    status = moon_prefill_rows_embed_end(self, p->a.conductor, r->msg, r->embed_sum, p->dim,
                                         r->n_prompt, (int32_t)p->a.instance,
                                         r->start_ns - r->msg->arrival_ns, r->compute_ns);
    if (status != MOON_OK) {
        abort_req(self, p, r, status, "the embedding could not be sent");
        return 1;
    }
    /* nothing is kept, stored or handed over: the sequence goes now */
    r->handed  = 1;
    r->kv_done = 1;
    r->state   = PREQ_HANDED;
    p->cur     = -1;
    free_req(self, p, r);
    kick(self, p);
    return 1;
}

/* Choice i's first token from base (the prompt's last logits, masked),
 * sampled in row: *tok_p, its sampler's state after it and its logprobs
 * (when asked). */
static moon_status_t sample_choice(prefill_t *p, preq_t *r, uint32_t i, const float *base,
                                   float *row, int32_t *tok_p, uint64_t *rng_p, moon_serve_lp_t *lp)
{
    moon_serve_sampling_t sp = MOON_SERVE_SAMPLING_OF(r->msg);
    moon_sampler_t        smp;
    moon_status_t         status;

    sp.seed = moon_serve_choice_seed(sp.seed, i);
    status  = moon_serve_sampler_open(&smp, p->vocab, moon_model_tokenizer(p->a.model), &sp,
                                      MOON_SPAN_PTR(r->msg, r->msg->tokens), r->msg->tokens.n,
                                      r->msg->n_resumed);
    if (status != MOON_OK) {
        return status;
    }
    if (row != base) {
        memcpy(row, base, (size_t)p->vocab * sizeof(float)); /* sampling changes it */
    }
    *tok_p = moon_sampler_sample(&smp, row);
    *rng_p = smp.rng;
    moon_sampler_fini(&smp);
    if (r->msg->logprobs > 0) {
        lp->k = MOON_MIN(r->msg->logprobs - 1, MOON_LOGPROBS_MAX);
        moon_logprobs(base, p->vocab, *tok_p, lp->k, &lp->lp, lp->ids, lp->lps);
    }
    return MOON_OK;
}

/* Every choice's first token from p->logits (masked; changed): choice 0's
 * into *tok_p, *rng_p and *lp, the others' packed into p->ch_buf (KV_READY
 * choices). */
static moon_status_t sample_first(prefill_t *p, preq_t *r, int32_t *tok_p, uint64_t *rng_p,
                                  moon_serve_lp_t *lp)
{
    uint32_t      n = MOON_MAX(r->msg->n_choices, 1u);
    uint32_t      k = r->msg->logprobs > 0 ? MOON_MIN(r->msg->logprobs - 1, MOON_LOGPROBS_MAX) : 0;
    uint32_t      w = MOON_SERVE_CHOICE_U32S(k);
    int           copy = n > 1 || r->msg->logprobs > 0; /* logprobs: of the unsampled row */
    float        *base = copy ? moon_malloc((size_t)p->vocab * sizeof(float)) : p->logits;
    moon_status_t status;

    p->ch_n   = 0;
    p->ch_buf = n > 1 ? moon_malloc((size_t)(n - 1) * w * 4) : NULL;
    if (base == NULL || (n > 1 && p->ch_buf == NULL)) {
        if (copy) {
            moon_free(base);
        }
        moon_free(p->ch_buf);
        p->ch_buf = NULL;
        return MOON_ERR_NO_MEMORY;
    }
    if (copy) {
        memcpy(base, p->logits, (size_t)p->vocab * sizeof(float));
    }
    status = sample_choice(p, r, 0, base, p->logits, tok_p, rng_p, lp);
    for (uint32_t i = 1; i < n && status == MOON_OK; i++) {
        uint32_t       *e = p->ch_buf + (size_t)(i - 1) * w;
        moon_serve_lp_t l = {0};
        int32_t         tok;
        uint64_t        rng;

        status = sample_choice(p, r, i, base, p->logits, &tok, &rng, &l);
        e[0]   = (uint32_t)tok;
        e[1]   = (uint32_t)rng;
        e[2]   = (uint32_t)(rng >> 32);
        memcpy(&e[3], &l.lp, 4);
        for (uint32_t j = 0; j < k; j++) {
            e[4 + 2 * j] = (uint32_t)(j < l.k ? l.ids[j] : 0);
            memcpy(&e[5 + 2 * j], j < l.k ? &l.lps[j] : &l.lp, 4);
        }
        p->ch_n += w;
    }
    if (copy) {
        moon_free(base);
    }
    if (status != MOON_OK) {
        moon_free(p->ch_buf);
        p->ch_buf = NULL;
        p->ch_n   = 0;
    }
    return status;
}

static void on_chunk_done(moon_actor_t *self, prefill_t *p, preq_t *r, moon_status_t status,
                          double dur)
{
    uint32_t             full;
    uint64_t             rng = 0;
    moon_serve_lp_t      lp  = {0};
    int32_t              tok = 0;
    moon_serve_grammar_t gram;
    char                 err[MOON_GRAMMAR_ERR_MAX + 32];

    if (status != MOON_OK) {
        abort_req(self, p, r, status, "prefill failed");
        return;
    }
    r->n_done += r->chunk_n;
    r->compute_ns += (uint64_t)(fmax(0.0, dur - r->chunk_extra_s) * 1e9);
    r->chunk_extra_s = 0.0;
    p->n_computed_tokens += r->chunk_n;
    if (rows_taken(self, p, r)) {
        return;
    }
    full = r->n_done / p->a.block_tokens;
    if (r->n_done < r->n_prompt) {
        /* chunk k's blocks travel to the decode while chunk k + 1 computes
         * (the store gets them all at the end: one put, not one per chunk) */
        if (full > r->n_sent && send_ready(self, p, r, r->n_sent, full - r->n_sent, 0, MOON_OK, 0,
                                           0, NULL, NULL) == MOON_OK) {
            r->n_sent = full;
        }
        compute_next(self, p, r);
        return;
    }
    if (r->cancelled) {
        abort_req(self, p, r, MOON_ERR_CANCELED, "cancelled");
        return;
    }
    err[0] = '\0';
    /* a constrained request's first token: masked by its grammar, from the
     * state after the tokens a resumed request already produced */
    status = moon_serve_grammar_begin(
        &p->grammars, moon_model_tokenizer(p->a.model), MOON_SPAN_PTR(r->msg, r->msg->grammar),
        r->msg->grammar.n, MOON_SPAN_PTR(r->msg, r->msg->tokens) + r->n_prompt - r->msg->n_resumed,
        r->msg->n_resumed, &gram, err, sizeof(err));
    if (status == MOON_OK) {
        status = moon_serve_grammar_mask(&gram, p->logits, p->vocab);
    }
    moon_serve_grammar_end(p->grammars, &gram);
    if (status != MOON_OK) {
        abort_req(self, p, r, status, err[0] ? err : "grammar failed");
        return;
    }
    status = sample_first(p, r, &tok, &rng, &lp);
    if (status != MOON_OK) {
        abort_req(self, p, r, status, "bad sampling parameters");
        return;
    }
    /* the first token to the client before the handover: it does not wait
     * for the KV_READY's hop and the decode instance's turn (several
     * choices: the decode sends each choice's first when it forks them) */
    r->first_sent = !p->a.first_via_decode && r->msg->n_choices <= 1 &&
                    moon_prefill_first_send(self, moon_model_tokenizer(p->a.model), r->msg, tok,
                                            r->msg->logprobs > 0 ? &lp : NULL);
    r->first_ns = moon_now(moon_actor_runtime(self)) - r->msg->arrival_ns;
    status = send_ready(self, p, r, r->n_sent, moon_kv_seq_n_blocks(p->pool.kv, r->seq) - r->n_sent,
                        1, MOON_OK, tok, rng, r->msg->logprobs > 0 ? &lp : NULL, NULL);
    moon_free(p->ch_buf);
    p->ch_buf = NULL;
    p->ch_n   = 0;
    if (status != MOON_OK) {
        abort_req(self, p, r, status, "handover to the decode instance failed");
        return;
    }
    /* the prompt's new blocks go to the store in one put (a reserve, a grant
     * and a commit per shard and replica for the whole prompt): no reader
     * needs them sooner, the decode pulls from this pool; after the handover,
     * so the first token does not queue behind the put's messages */
    put_new_blocks(p, r, 0, full);
    r->handed = 1;
    r->state  = PREQ_HANDED;
    p->cur    = -1;
    keep_blocks(self, p, r);
    report_load(self, p);
    kick(self, p);
}

/* ---- queue ------------------------------------------------------------------ */

static void start_req(moon_actor_t *self, prefill_t *p, preq_t *r)
{
    const moon_serve_prefill_t *m = r->msg;
    uint32_t                    fetchable;

    r->start_ns = moon_now(moon_actor_runtime(self));
    if (moon_kv_seq_create(p->pool.kv, &r->seq) != MOON_OK) {
        abort_req(self, p, r, MOON_ERR_NO_RESOURCE, "no free sequence in the prefill pool");
        return;
    }
    r->have_seq = 1;
    r->state    = PREQ_FETCHING;
    fetchable   = fetchable_blocks(p, r);
    /* what the cache really holds, whatever the conductor believed */
    r->n_local   = moon_block_cache_take(p->cache, MOON_SPAN_PTR(m, m->keys), fetchable, r->seq);
    r->n_fetched = r->n_local;
    p->n_cache_hit_tokens += (uint64_t)r->n_local * p->a.block_tokens;
    if (p->store != NULL && fetchable > r->n_local && m->n_fetch != MOON_SERVE_FETCH_ASK) {
        /* the conductor's plan: straight to the gets, no query round trip; a
         * planned local block the cache lost meanwhile is fetched too (or
         * computed if the store lacks it) */
        uint32_t end = MOON_MIN((uint64_t)m->n_local + m->n_fetch, fetchable);
        if (end > r->n_local) {
            start_fetch(self, p, r, end);
            return;
        }
    } else if (p->store != NULL && fetchable > r->n_local) {
        moon_kv_key_t   keys[MOON_STORE_CLIENT_MAX_KEYS];
        const uint64_t *k = MOON_SPAN_PTR(r->msg, r->msg->keys);
        uint32_t        n = MOON_MIN(fetchable, MOON_STORE_CLIENT_MAX_KEYS);
        for (uint32_t i = 0; i < n; i++) {
            keys[i].lo = k[2 * i];
            keys[i].hi = k[2 * i + 1];
        }
        if (moon_store_client_query(p->store, MOON_STORE_OP_PREFIX, keys, n,
                                    PRE_COOKIE(OP_QUERY, slot_of(p, r), 0)) == MOON_OK) {
            return;
        }
    }
    fetch_finished(self, p, r); /* no store, or it is unreachable: compute the rest */
}

static void kick(moon_actor_t *self, prefill_t *p)
{
    while (p->cur < 0) {
        uint32_t c = 0;
        while (c < PRE_N_CLASSES && p->n_queued[c] == 0) {
            c++;
        }
        if (c == PRE_N_CLASSES) {
            return;
        }
        p->cur = (int32_t)p->queue[c][0];
        memmove(p->queue[c], p->queue[c] + 1, (p->n_queued[c] - 1) * sizeof(uint32_t));
        p->n_queued[c]--;
        start_req(self, p, &p->reqs[p->cur]);
    }
}

static moon_status_t prefill_on_prefill(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    prefill_t                  *p = moon_actor_state(self);
    const moon_serve_prefill_t *m = (const void *)msg;
    preq_t                     *r = NULL;
    uint32_t                    c = MOON_MIN(m->slo_class, PRE_N_CLASSES - 1), slot;

    for (slot = 0; slot < p->a.max_seqs && r == NULL; slot++) {
        r = p->reqs[slot].state == PREQ_FREE ? &p->reqs[slot] : NULL;
    }
    if (r == NULL || m->tokens.n == 0 || m->tokens.n >= p->seq_len) {
        preq_t tmp = {.msg = m, .n_prompt = m->tokens.n, .start_ns = m->arrival_ns};
        /* full (or a malformed placement): the decode tells the client */
        send_ready(self, p, &tmp, 0, 0, 1,
                   r == NULL ? MOON_ERR_NO_RESOURCE : MOON_ERR_INVALID_PARAM, 0, 0, NULL,
                   r == NULL ? "prefill instance full" : "bad prompt length");
        return MOON_OK;
    }
    memset(r, 0, sizeof(*r));
    r->n_prompt = m->tokens.n;
    r->n_full   = r->n_prompt / p->a.block_tokens;
    r->got      = moon_malloc((r->n_full + 1) * sizeof(*r->got));
    r->got_ok   = moon_calloc(r->n_full + 1, 1);
    if (r->got == NULL || r->got_ok == NULL) {
        moon_free(r->got);
        moon_free(r->got_ok);
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i <= r->n_full; i++) {
        r->got[i] = MOON_KV_NO_BLOCK;
    }
    moon_msg_retain(msg);
    r->msg                        = m;
    r->state                      = PREQ_QUEUED;
    p->queue[c][p->n_queued[c]++] = slot_of(p, r);
    kick(self, p);
    report_load(self, p);
    return MOON_OK;
}

static preq_t *find_req(prefill_t *p, moon_addr_t reply_to, uint64_t id)
{
    for (uint32_t i = 0; i < p->a.max_seqs; i++) {
        preq_t *r = &p->reqs[i];
        if (r->state != PREQ_FREE && r->msg->reply_to == reply_to && r->msg->request_id == id) {
            return r;
        }
    }
    return NULL;
}

/* Ends r at once if it waits in a queue, else at its fetch's or chunk's end. */
static void cancel_req(moon_actor_t *self, prefill_t *p, preq_t *r)
{
    if (r->state == PREQ_QUEUED) {
        for (uint32_t c = 0; c < PRE_N_CLASSES; c++) {
            for (uint32_t i = 0; i < p->n_queued[c]; i++) {
                if (p->queue[c][i] == slot_of(p, r)) {
                    memmove(&p->queue[c][i], &p->queue[c][i + 1],
                            (p->n_queued[c] - i - 1) * sizeof(uint32_t));
                    p->n_queued[c]--;
                    break;
                }
            }
        }
        abort_req(self, p, r, MOON_ERR_CANCELED, "cancelled");
        return;
    }
    r->cancelled = 1; /* ends at the next chunk's or fetch's end */
}

static moon_status_t prefill_on_cancel(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    prefill_t                 *p = moon_actor_state(self);
    const moon_serve_cancel_t *m = (const void *)msg;
    preq_t                    *r = find_req(p, m->reply_to, m->request_id);

    if (r == NULL || r->handed) {
        return MOON_OK; /* done here already: the decode has it */
    }
    cancel_req(self, p, r);
    return MOON_OK;
}

/* The request's decode instance is gone (the conductor answered its client):
 * nobody pulls its blocks any more, and nothing is told to the decode. */
static moon_status_t prefill_on_lost(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    prefill_t               *p = moon_actor_state(self);
    const moon_serve_lost_t *m = (const void *)msg;
    preq_t                  *r = find_req(p, m->reply_to, m->request_id);

    if (r == NULL || msg->src != p->a.conductor || r->msg->decode != m->lost) {
        return MOON_OK;
    }
    r->decode_lost = 1;
    if (r->handed) {
        r->kv_done = 1;
        free_req(self, p, r);
    } else {
        cancel_req(self, p, r);
    }
    return MOON_OK;
}

static moon_status_t prefill_on_kv_done(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    prefill_t                  *p = moon_actor_state(self);
    const moon_serve_kv_done_t *m = (const void *)msg;
    preq_t                     *r = find_req(p, m->reply_to, m->request_id);

    if (r != NULL && r->handed) {
        r->kv_done = 1;
        free_req(self, p, r);
    }
    return MOON_OK;
}

/* The conductor lost some of our cache events: it gets the whole cache. */
static moon_status_t prefill_on_cache_sync(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    prefill_t *p = moon_actor_state(self);

    if (msg->src == p->a.conductor) {
        moon_cache_events_snapshot(&p->events, self, p->cache);
    }
    return MOON_OK;
}

static moon_status_t prefill_on_weights(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    prefill_t *p = moon_actor_state(self);

    moon_weights_set_handle(&p->weights, self, p->runner, msg);
    return MOON_OK;
}

static moon_status_t prefill_on_other(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    prefill_t    *p = moon_actor_state(self);
    uint64_t      job;
    moon_status_t status;
    double        dur;

    if (p->store != NULL && moon_store_client_handle(p->store, msg)) {
        return MOON_OK;
    }
    if (msg->type == MOON_MSG_SYS_TIMER &&
        ((const moon_sys_timer_t *)msg)->kind == MOON_TIMER_KIND_SERVE_XFER) {
        uint64_t slot = ((const moon_sys_timer_t *)msg)->cookie; /* a modeled fetch ended */
        if (slot < p->a.max_seqs && p->reqs[slot].state == PREQ_COMPUTING) {
            compute_next(self, p, &p->reqs[slot]);
        }
        return MOON_OK;
    }
    if (moon_engine_runner_done(p->runner, msg, &job, &status, &dur)) {
        moon_weights_set_poll(&p->weights, self, p->runner);
        if (job < p->a.max_seqs && p->reqs[job].state == PREQ_COMPUTING) {
            on_chunk_done(self, p, &p->reqs[job], status, dur);
        }
        return MOON_OK;
    }
    if (msg->type == MOON_MSG_SYS_TIMER) {
        report_load(self, p);
    }
    return MOON_OK;
}

/* ---- life ------------------------------------------------------------------ */

static void prefill_fini(moon_actor_t *self);

static moon_status_t prefill_init(moon_actor_t *self, const void *args)
{
    prefill_t                 *p = moon_actor_state(self);
    const moon_model_config_t *mc;
    moon_kv_config_t           kcfg;
    moon_status_t              status = MOON_OK;

    p->a       = *(const moon_serve_instance_args_t *)args;
    p->cur     = -1;
    mc         = moon_model_config(p->a.model);
    p->vocab   = mc->vocab_size;
    p->dim     = mc->dim;
    p->seq_len = mc->seq_len;
    if (p->a.prefill_chunk == 0) {
        p->a.prefill_chunk = 128;
    }
    if (p->a.prefill_chunk_alone < p->a.prefill_chunk) {
        p->a.prefill_chunk_alone = p->a.prefill_chunk; /* 0: the same */
    }
    if (p->a.engine.max_chunk == 0 || p->a.engine.max_chunk < p->a.prefill_chunk_alone) {
        p->a.engine.max_chunk = p->a.prefill_chunk_alone;
    }
    if (p->a.block_tokens == 0 || p->a.max_seqs == 0 ||
        (uint64_t)p->a.n_blocks * p->a.block_tokens < p->seq_len) {
        MOON_ERROR("prefill: a block size and a pool of at least one full context are needed");
        return MOON_ERR_INVALID_PARAM;
    }
    kcfg           = moon_model_kv_config(mc, p->a.block_tokens, p->a.n_blocks, p->a.max_seqs);
    kcfg.elem_type = p->a.kv_type;
    status         = moon_engine_create(p->a.model, &p->a.engine, &p->engine);
    moon_weights_set_init(&p->weights, p->a.dist, &p->a.engine, 0, p->engine);
    if (status == MOON_OK) {
        status = moon_kv_pool_open(&p->pool, p->a.dist, &kcfg, p->a.virtual_kv,
                                   moon_serve_numa_core(&p->a));
    }
    p->reqs   = moon_calloc(p->a.max_seqs, sizeof(*p->reqs));
    p->logits = moon_calloc(p->vocab, sizeof(float));
    for (uint32_t c = 0; c < PRE_N_CLASSES; c++) {
        p->queue[c] = moon_calloc(p->a.max_seqs, sizeof(uint32_t));
        if (p->queue[c] == NULL) {
            status = MOON_ERR_NO_MEMORY;
        }
    }
    if (status == MOON_OK && (p->reqs == NULL || p->logits == NULL)) {
        status = MOON_ERR_NO_MEMORY;
    }
    if (status == MOON_OK) {
        status = moon_block_cache_create(p->pool.kv, p->a.n_blocks, &p->cache);
    }
    if (status == MOON_OK) {
        moon_cache_events_init(&p->events, p->cache, p->a.instance, &p->a.tag, p->a.conductor);
    }
    if (status == MOON_OK && p->a.n_shards > 0) {
        moon_store_client_config_t sc = {
            .dist          = p->a.dist,
            .shards        = p->a.shards,
            .n_shards      = p->a.n_shards,
            .n_replicas    = p->a.n_replicas ? p->a.n_replicas : 1,
            .tag           = p->a.tag,
            .skip_checksum = 1,
            .on_done       = on_store_done,
            .arg           = p,
        };
        status = moon_store_client_create(self, &sc, &p->store);
    }
    p->a.shards = NULL; /* copied by the store client */
    if (status == MOON_OK) {
        status =
            moon_serve_instance_start(self, &p->a, p->engine, p->pool.kv, &p->runner, &p->timer);
    }
    if (status != MOON_OK) {
        MOON_ERROR("prefill %u: setup failed: %s", p->a.instance, moon_status_str(status));
        prefill_fini(self); /* the runtime does not call fini after a failed init */
        return status;
    }
    moon_cache_events_snapshot(&p->events, self, p->cache); /* after HELLO: empty */
    report_load(self, p);
    return MOON_OK;
}

static void prefill_fini(moon_actor_t *self)
{
    prefill_t *p = moon_actor_state(self);

    moon_engine_runner_destroy(p->runner);
    moon_store_client_destroy(p->store);
    for (uint32_t i = 0; p->reqs != NULL && i < p->a.max_seqs; i++) {
        if (p->reqs[i].state != PREQ_FREE) {
            moon_msg_release(&p->reqs[i].msg->hdr);
            moon_free(p->reqs[i].got);
            moon_free(p->reqs[i].got_ok);
            moon_free(p->reqs[i].embed_sum);
        }
    }
    for (uint32_t c = 0; c < PRE_N_CLASSES; c++) {
        moon_free(p->queue[c]);
    }
    moon_serve_grammars_destroy(p->grammars);
    moon_block_cache_destroy(p->cache); /* its references, before the pool goes */
    moon_cache_events_fini(&p->events);
    moon_kv_pool_close(&p->pool);
    moon_weights_set_fini(&p->weights);
    moon_free(p->reqs);
    moon_free(p->logits);
    moon_free(p->rows_logits);
    moon_free(p->rows_hidden);
}

const moon_actor_ops_t moon_prefill_ops = {
    .name        = "prefill",
    .state_bytes = sizeof(prefill_t),
    .init        = prefill_init,
    .fini        = prefill_fini,
    .on_msg =
        {
            MOON_STORE_CLIENT_ON_MSG(prefill_on_other),
            [MOON_MSG_SYS_DOWN]          = prefill_on_other,
            [MOON_MSG_SERVE_ENGINE_DONE] = prefill_on_other,
            [MOON_MSG_SERVE_PREFILL]     = prefill_on_prefill,
            [MOON_MSG_SERVE_CANCEL]      = prefill_on_cancel,
            [MOON_MSG_SERVE_LOST]        = prefill_on_lost,
            [MOON_MSG_SERVE_KV_DONE]     = prefill_on_kv_done,
            [MOON_MSG_SERVE_CACHE_SYNC]  = prefill_on_cache_sync,
            [MOON_MSG_WEIGHTS_INSTALL]   = prefill_on_weights,
            [MOON_MSG_WEIGHTS_RETIRE]    = prefill_on_weights,
        },
};
