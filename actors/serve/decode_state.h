/* actors/serve/decode_state.h - the decode instance's state, shared by
 * decode.c (handover, admission, the batch) and colocated.c (the instance
 * prefilling its own requests). Internal to moon_serve: nothing outside the
 * two files includes it. */
#ifndef MOON_DECODE_STATE_H
#define MOON_DECODE_STATE_H

#include "block_cache.h"
#include "cache_events.h"
#include "engine_runner.h"
#include "kv_pool.h"
#include "serve_grammar.h"
#include "serve_instance.h"
#include "moonlet/serve_msgs.h"
#include "serve_text.h"
#include "weights_serving.h"

#include <stdatomic.h>

/* A request's life on this instance: one dreq_t, one state, changed only by
 * moon_dec_enter (which refuses any move not drawn here).
 *
 *          KV_READY taken            all its KV in
 *   FREE -----------------> PULLING ---------------------> RUNNING <---+
 *   |  ^                       |                            |  |  |     | a step:
 *   |  |  PREFILL taken        |         last chunk:        |  |  +-----+ a token
 *   |  |  (colocated)          |         first token        |  |
 *   +--|-------> PREFILLING ---|--------------------------->+  |
 *      |             |         |                               |
 *      |             | error,  | error, cancel, LOST,          | stop, length,
 *      |             | cancel  | bad handover, version         | error, cancel
 *      |             v         v   not held                    |
 *      +------------------- ENDED <----------------------------+
 *        moon_dec_release_req: no pull in flight,
 *        no pass holding it
 *
 * ENDED: DONE, RELEASED (and KV_DONE, once its pulls landed) are sent; the
 * slot waits there for the pulls still writing into its blocks and for the
 * forward pass that holds it (in_step). Beside the state: in_step (a pass in
 * flight holds it: PREFILLING or RUNNING; a step job may run several steps,
 * decode_steps.c, and its request stays RUNNING through them) and cancel_pending (a CANCEL that
 * came during that pass: it ends the request when the pass ends). A request
 * not taken yet is no dreq_t: its KV_READY or PREFILL waits in d->waiting. */
typedef enum {
    DREQ_FREE = 0,
    DREQ_PULLING,    /* taken; its blocks move from the prefill's pool */
    DREQ_PREFILLING, /* colocated: its prompt computes here, chunk by chunk */
    DREQ_RUNNING,    /* in the batch: one token a step */
    DREQ_ENDED,      /* answered; freed once nothing writes into it */
    DREQ_N_STATES
} dreq_state_t;
enum { JOB_STEP = 0, JOB_CHUNK = 1 };
#define DEC_TOK_TEXT_PER_SEQ 64u /* text room per batch entry of a step's token batch */

#define DEC_CANCEL_RING 64u
#define DEC_LOST_RING 16u
typedef struct {
    dreq_state_t    state; /* moved by moon_dec_enter only */
    moon_addr_t     reply_to, prefill;
    uint64_t        request_id;
    uint32_t        seq;
    uint32_t        n_prompt, n_full, max_tokens, n_gen, flags;
    uint32_t        n_resumed; /* the prompt's last ones: tokens streamed before a loss */
    int32_t         last_token;
    uint32_t       *local;   /* (n_full) local block of each full prompt block */
    uint8_t        *arrived; /* (n_full + 1) the last entry: the partial block */
    uint32_t        n_issued, n_arrived, n_appended;
    uint32_t        budget;
    int             final, partial_issued, in_step, cancel_pending, kv_done_sent;
    int             first_sent; /* the prefill sent the first token: not sent again */
    moon_msg_hdr_t *final_msg; /* retained: stop ids, strings (and a colocated prompt) live in it */
    const uint32_t *stop_ids;
    uint32_t        n_stop_ids;
    uint32_t        n_done; /* colocated: prompt tokens in the KV */
    moon_sampler_t  smp;
    uint32_t        logprobs; /* 0: none; k + 1: each token's logprob and top k */
    moon_serve_text_t    text;
    int                  text_ready;
    uint32_t             n_cached;
    int32_t              prefill_instance; /* who computed the prompt (DONE tells the client) */
    uint64_t             arrival_ns, queue_ns, prefill_ns, xfer_start_ns, transfer_ns, ttft_ns;
    uint64_t             version; /* its weights, from its first step to its last */
    int                  ended;   /* multi-step: the engine thread saw it end ... */
    uint32_t             end_why; /* ... with this finish */
    moon_serve_grammar_t gram;    /* constrained decoding (gram.fsm NULL: none) */
    /* choices (SUBMIT n_choices, decode_fork.c): choice i is request_id =
     * group_id + i; choice 0 (the leader) pulls the KV, n_choices > 1 on it
     * until it forked the others (forked), 1 on every forked choice */
    uint64_t group_id;
    uint32_t n_choices;
    int      forked;
    int      leader_cancelled; /* choice 0 alone cancelled before the fork: it ends there */
} dreq_t;

/* Tokens waiting for the end of a step (decode_tokens.c). */
struct dec_tok {
    moon_addr_t reply_to;
    uint64_t    request_id;
    uint32_t    index, token, text_end; /* text_end: one past its NUL in text */
    uint64_t    version;                /* the weights that computed it */
};
typedef struct {
    struct dec_tok *pend; /* (cap_tok) */
    char           *text; /* (cap_tok * DEC_TOK_TEXT_PER_SEQ) */
    uint32_t        n, n_text;
} dec_tokq_t;

typedef struct {
    moon_serve_instance_args_t a;
    moon_addr_t                shards_copy[1]; /* decode uses no store */
    moon_engine_t             *engine;         /* version 0's, owned by weights */
    moon_weights_set_t         weights;        /* the versions held (two while one drains) */
    moon_engine_runner_t      *runner;
    moon_kv_pool_t             pool;
    const moon_tokenizer_t    *tok;
    uint32_t                   vocab, seq_len;
    dreq_t                    *reqs;      /* (max_seqs) */
    uint32_t                   committed; /* blocks promised to taken requests */
    uint32_t                   reserved;  /* slots promised to choices not forked yet */
    /* KV_READY messages of requests not yet taken, in arrival order */
    moon_msg_hdr_t **waiting;
    uint32_t         n_waiting;
    int              admitting; /* try_admit_waiting runs (a cancel taken on admission
                                   finishes, and finishing admits: not again inside) */
    /* the step in flight */
    uint32_t           *b_slot, *b_seq;
    int32_t            *b_tok;
    float              *b_logits; /* (max_batch, vocab) */
    float              *lp_row;   /* (vocab) a row's raw logits, for a request's logprobs */
    uint32_t            b_n;
    uint32_t            job_kind;  /* JOB_STEP or JOB_CHUNK in flight */
    dreq_t             *chunk_req; /* colocated: the request of the chunk in flight */
    uint32_t            chunk_n;
    float              *c_logits; /* (vocab) the chunk's last logits */
    int                 last_was_chunk;
    moon_block_cache_t *cache;  /* colocated: the instance's own prefix cache */
    moon_cache_events_t events; /* colocated: its changes, told to the conductor */
    uint64_t            timer;
    uint64_t            n_cache_hit_tokens, n_computed_tokens;

    moon_serve_load_memo_t load_memo; /* the last LOAD sent */

    /* cancels that came before their request */
    struct {
        moon_addr_t reply_to;
        uint64_t    request_id;
    } cancels[DEC_CANCEL_RING];
    uint32_t n_cancels;
    /* prefill instances the conductor said are lost: their late KV_READYs are dropped */
    moon_addr_t            lost[DEC_LOST_RING];
    uint32_t               n_lost;
    uint64_t               n_tokens_out;
    moon_serve_grammars_t *grammars;      /* NULL until a constrained request comes */
    uint32_t               n_constrained; /* requests with a grammar */
    char                   gram_err[MOON_GRAMMAR_ERR_MAX + 32];

    /* the step's groups, one per weight version: [b_end[g-1], b_end[g]) on b_engine[g] */
    moon_engine_t *b_engine[MOON_WEIGHTS_MAX_HELD];
    uint32_t       b_end[MOON_WEIGHTS_MAX_HELD];
    uint32_t       b_groups;
    moon_engine_t *chunk_engine; /* colocated: the chunk's version */
    /* a step's tokens, sent at its end as one TOKENS per reply address: the
     * actor's queue, and the engine thread's while it runs several steps */
    dec_tokq_t      tq, eq;
    uint32_t        cap_tok;      /* entries of each queue (max_batch) */
    int             tok_batching; /* inside on_step_done: emit queues */
    moon_runtime_t *rt;           /* the engine thread sends with it */

    /* multi-step (decode_steps.c): set by the actor before a step job */
    int steps_ok; /* the job may sample and run the next steps itself */
    /* set by the actor while a job runs: new work or a cancel waits for it */
    _Atomic int steps_yield;
    /* set by the engine thread, read after the completion */
    int      b_emitted; /* the last step's tokens went out already */
    uint64_t b_tokens;  /* tokens the job sent */
} decode_t;

/* ---- shared by decode.c (handover, batch) and colocated.c (prefill here) */

/* Moves r to state `to`: one of the moves drawn above (staying is no move),
 * else a panic (a bug, not an input). */
void moon_dec_enter(dreq_t *r, dreq_state_t to);
/* Takes a slot, a sequence and the budget of blocks for the request m
 * describes (n_tokens, max_tokens, slo_class, weight_version, request name):
 * r in state first (PULLING, or PREFILLING for a colocated PREFILL). MOON_ERR_NO_RESOURCE: no room
 * now (it waits); MOON_ERR_NO_MEMORY. */
moon_status_t moon_dec_open(moon_actor_t *self, decode_t *d, const moon_serve_kv_ready_t *m,
                            dreq_state_t first, dreq_t **r_p);
/* Sampler, text and grammar state of r from the prompt toks (n), whose last
 * n_resumed tokens were streamed before a loss. MOON_ERR_INVALID_PARAM,
 * MOON_ERR_NO_MEMORY, or a grammar's error (d->gram_err says why). */
moon_status_t moon_dec_setup_sampling(decode_t *d, dreq_t *r, const moon_serve_sampling_t *sp,
                                      const uint32_t *toks, uint32_t n, uint32_t n_resumed,
                                      const char *stops, uint32_t stops_len, const char *grammar,
                                      uint32_t grammar_len);
/* 1 (and forgotten) when a CANCEL of this request came before it. */
int moon_dec_take_cancel(decode_t *d, moon_addr_t reply_to, uint64_t id);
/* Ends r (once): DONE to its client, RELEASED to the conductor, ENDED; its
 * slot is freed when nothing writes into it any more. */
void moon_dec_finish(moon_actor_t *self, decode_t *d, dreq_t *r, uint32_t why, moon_status_t status,
                     const char *message);
/* Samples a row of r's logits (changed in place) and streams the token. */
void moon_dec_sample_emit(moon_actor_t *self, decode_t *d, dreq_t *r, float *row);
/* Starts the next forward pass if the engine is idle: a decode step, or a
 * prefill chunk (colocated), taking turns. */
void moon_dec_maybe_step(moon_actor_t *self, decode_t *d);
/* A pass holding r ended with status: 1 when r ended (or ends now: it was
 * cancelled meanwhile, or the pass failed), 0 when it goes on. */
int moon_dec_after_pass(moon_actor_t *self, decode_t *d, dreq_t *r, moon_status_t status,
                        const char *what);
/* The instance's LOAD to the conductor. */
void moon_dec_report_load(moon_actor_t *self, decode_t *d);
/* KV_DONE (status) to r's prefill, once: it may free the sequence. */
void moon_dec_send_kv_done(moon_actor_t *self, dreq_t *r, moon_status_t status);
/* Frees what the ENDED r holds once no pull writes into its blocks and no
 * pass holds it (else a later landing or pass end calls again). */
void moon_dec_release_req(moon_actor_t *self, decode_t *d, dreq_t *r);
/* Grammar masks of the running constrained requests, while a pass runs. */
void moon_dec_prefetch_masks(decode_t *d);
/* Streams r's sampled token tok (lp: its logprobs or NULL); r then goes on
 * or ends (a stop, its length). */
void moon_dec_emit(moon_actor_t *self, decode_t *d, dreq_t *r, int32_t tok,
                   const moon_serve_lp_t *lp);
/* DONE of r's choice id (r's figures, no completion tokens) to r's client. */
void moon_dec_done_choice(moon_actor_t *self, decode_t *d, const dreq_t *r, uint64_t id,
                          uint32_t finish, moon_status_t status, const char *why);
/* The blocks one forked choice needs: its copy of the prompt's partial
 * block and room for max_tokens. */
uint32_t moon_dec_choice_blocks(const decode_t *d, uint32_t n_prompt, uint32_t max_tokens);

/* ---- decode_fork.c: the choices of one prompt (SUBMIT n_choices) */

/* Streams the first token tok a prefill sampled for r (its logprob lp and
 * k (id, float bits) pairs top when r asked for logprobs). */
void moon_dec_emit_first(moon_actor_t *self, decode_t *d, dreq_t *r, uint32_t tok, float lp,
                         const uint32_t *top, uint32_t k);
/* The leader r (choice 0, RUNNING, all of the prompt's KV in) forks its
 * other choices: one sequence each sharing the prompt's full blocks (its
 * partial block copied), sampled with its own state, the first tokens the
 * final KV_READY brought streamed, r's first. A choice that cannot fork, or
 * was cancelled before, ends alone (DONE) and the others go on. */
void moon_dec_fork(moon_actor_t *self, decode_t *d, dreq_t *r);
/* Colocated: the leader r, its prompt computed here (row: its last logits,
 * changed), forks its other choices (seeds moon_serve_choice_seed) and
 * every choice samples its first token from row, r's last. */
void moon_dec_fork_sample(moon_actor_t *self, decode_t *d, dreq_t *r, float *row);
/* Ends a request not taken here: DONE (error status, why) to each of its
 * n_choices, KV_DONE to its prefill (if any), RELEASED to the conductor. */
void moon_dec_answer_untaken(moon_actor_t *self, decode_t *d, moon_addr_t reply_to, uint64_t id,
                             uint32_t n_choices, moon_addr_t prefill, moon_status_t status,
                             const char *why);
/* 1 when another choice of r's request still runs here (so RELEASED,
 * which ends the conductor's entry, waits for the last). */
int moon_dec_group_alive(const decode_t *d, const dreq_t *r);

/* ---- decode_pull.c: the handover, KV blocks pulled from the prefill */

/* A KV_READY m of the taken request r: its blocks pulled (the final one:
 * sampling state and first token too); r runs once all of its KV is in. */
void moon_dec_take_kv_ready(moon_actor_t *self, decode_t *d, dreq_t *r,
                            const moon_serve_kv_ready_t *m);
/* A pull (cookie: slot and block, or a run of blocks) landed (st MOON_OK)
 * or its transfer failed. */
void moon_dec_block_arrived(moon_actor_t *self, decode_t *d, uint64_t cookie, moon_status_t st);

/* ---- decode_tokens.c: the tokens to the clients */

/* Streams r's token tok (text: its printable piece, n bytes; lp: its
 * logprobs or NULL) as index r->n_gen++: queued while a step ends
 * (tok_batching), else sent now; not at all when the prefill sent it
 * (first_sent). MOON_ERR_NO_MEMORY. */
moon_status_t moon_dec_token_out(moon_actor_t *self, decode_t *d, dreq_t *r, int32_t tok,
                                 const char *text, size_t n, const moon_serve_lp_t *lp);
/* Sends the queued tokens: one TOKENS per reply address (a lone one as
 * TOKEN), in queue order per address. */
void moon_dec_tokens_flush(moon_actor_t *self, decode_t *d);

/* Queues r's token tok (text: n bytes) on the engine thread's queue as index
 * r->n_gen++ (multi-step; sent by moon_dec_tokens_flush_engine). */
void moon_dec_token_queue_engine(decode_t *d, dreq_t *r, int32_t tok, const char *text, size_t n);
/* Sends the engine thread's queue, from the engine thread. */
void moon_dec_tokens_flush_engine(decode_t *d);
/* 1 when tok ends r without being streamed (EOS, BOS, a stop id). */
int moon_dec_is_stop_id(const dreq_t *r, int32_t tok, const moon_tokenizer_t *t);

/* ---- decode_steps.c: several decode steps per engine job */

/* Actor, a step batch built: whether its job may run the next steps on the
 * engine thread (then each request's KV room is reserved ahead). */
void moon_dec_steps_prepare(decode_t *d, int prefill_waits);
/* The step job (engine thread): one step, and the next ones while
 * moon_dec_steps_prepare allowed it and the batch stays as it is. */
moon_status_t moon_dec_steps_job(void *arg, double *duration_s_p);
/* Actor: a job runs, and something (new work, a cancel) wants the batch
 * back: the job stops after its current step. */
void moon_dec_steps_yield(decode_t *d);

/* ---- colocated.c: the instance prefills too (MOON_SERVE_ROLE_COLOCATED) */

/* Opens the prefix cache and its events (d->cache set). MOON_ERR_NO_MEMORY. */
moon_status_t moon_dec_colocated_open(decode_t *d);
/* Closes what moon_dec_colocated_open opened (any part of it). */
void moon_dec_colocated_close(decode_t *d);
/* A PREFILL for this instance: r in PREFILLING, its cached prefix reused.
 * 0 when it must wait for room, 1 when taken or answered. */
int moon_dec_take_prefill(moon_actor_t *self, decode_t *d, const moon_serve_prefill_t *m);
/* The oldest request still prefilling, NULL if none. */
dreq_t *moon_dec_next_prefill(decode_t *d);
/* Submits r's next prefill chunk to the engine (or ends r: version gone). */
void moon_dec_start_chunk(moon_actor_t *self, decode_t *d, dreq_t *r);
/* The chunk in flight ended: the last one makes its request RUNNING with its
 * first token, and its full blocks go into the prefix cache. */
void moon_dec_chunk_done(moon_actor_t *self, decode_t *d, moon_status_t status, double dur);
/* CACHE_SYNC handler: the conductor lost some events: the whole cache. */
moon_status_t moon_dec_on_cache_sync(moon_actor_t *self, const moon_msg_hdr_t *msg);

#endif
