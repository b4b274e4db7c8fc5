/* moonlet/serve_msgs.h - the serving protocol (ids 64..111 of the component
 * range): what clients send the conductor, what the conductor, prefill and
 * decode instances say to each other, and what comes back to the client.
 *
 * One request, disaggregated:
 *   client --SUBMIT--> conductor (validate, tokenize, keys, policy: p, d | reject)
 *   conductor --PREFILL--> p   (tokens, sampling, the chosen d, what to fetch)
 *   p: fetch cached prefix blocks from the store into its pool, compute the
 *      rest in chunks, put new full blocks to the store;
 *   p --KV_READY--> d after each chunk (pool block ids now valid; d pulls them
 *      with a one-sided get straight from p's pool while p computes on);
 *   p --TOKEN(index 0)--> client (reply_to), when it may (first_sent below),
 *   p --KV_READY(final: first token, partial block)--> d
 *   d --KV_DONE--> p (p frees the sequence), d admits the sequence into its
 *      batch, streams TOKEN... (from index 0 when p did not send it, else
 *      from 1) then DONE to the client, and
 *   d --RELEASED--> conductor (the request's entry and load accounting end).
 * Token 0 and the rest come from different senders: a client may receive
 * token 1 or DONE before token 0. Clients put the stream back in order
 * (moon_serve_order_t, serve_order.h): tokens by index, DONE after its
 * n_completion tokens, each wait with a deadline.
 * p keeps the prompt's full blocks in its own prefix cache (LRU over its
 * pool) and tells the conductor what enters and leaves it (CACHE_EVENTS).
 * Colocated: the conductor sends PREFILL with decode == the instance itself,
 * which then keeps the sequence in its own pool (no KV_READY).
 *
 * A request is named by (reply_to, request_id): request_id is the client's and
 * must be unique among its requests in flight. CANCEL may come at any point;
 * the request ends with DONE finish CANCELLED and its KV freed everywhere.
 * Every instance reports LOAD to the conductor (periodically and after each
 * admission or release). Bulk KV never travels in these messages. */
#ifndef MOON_ACTORS_SERVE_MSGS_H
#define MOON_ACTORS_SERVE_MSGS_H

#include "moonlet/msg.h"

/* DONE's finish reasons. */
typedef enum {
    MOON_FINISH_STOP      = 0, /* EOS, a stop id or a stop string */
    MOON_FINISH_LENGTH    = 1, /* max_tokens or the context's end */
    MOON_FINISH_CANCELLED = 2, /* CANCEL from the client */
    MOON_FINISH_REJECTED  = 3, /* early rejection: an SLO cannot be met (HTTP 429) */
    MOON_FINISH_ERROR     = 4, /* bad request or a failure: status and message say which */
} moon_finish_t;
/* "stop", "length", "cancelled", "rejected", "error"; "?" for others. */
MOON_API const char *moon_finish_str(uint32_t finish);

/* n_choices' bound (the sampling fields' comment). */
#define MOON_SERVE_MAX_CHOICES 16u
/* Choice i's sampler seed: seed for choice 0, else seed mixed with i
 * (distinct per choice, the same for the same request: a seeded request
 * with n > 1 repeats). The gateway and the instances sample with it. */
MOON_API uint64_t moon_serve_choice_seed(uint64_t seed, uint32_t i);

/* 1 when a DONE of (finish, status) says an instance serving the request was
 * lost and the request may be submitted again with resume (see SUBMIT). */
#define MOON_SERVE_RESUMABLE(_finish, _status)                                                     \
    ((_finish) == MOON_FINISH_ERROR && (_status) == MOON_ERR_PEER_LOST)

/* SUBMIT flags */
#define MOON_SERVE_F_ADD_BOS 0x1u    /* text prompt: prepend BOS (as moonlet generate does) */
#define MOON_SERVE_F_IGNORE_EOS 0x2u /* keep generating past EOS (benchmarks) */

#define MOON_SERVE_F_STOP_STR_OUT 0x4u /* a stop string that ends the text is kept in it */
/* The prompt's own logprobs (echo with logprobs): the prefill computes the
 * logits of every prompt position (recomputing the whole prompt: no cached
 * prefix has them) and sends PROMPT_LOGPROBS to the client, k = logprobs - 1
 * alternatives (logprobs > 0 needed), before the first token's handover. */
#define MOON_SERVE_F_PROMPT_LOGPROBS 0x8u
/* An embedding: the prefill computes the prompt (no cached prefix, nothing
 * kept or stored), sends EMBEDDING and then DONE (stop, no completion token)
 * to the client and RELEASED to the conductor; no decode instance takes part
 * (one is placed: it answers the request only if the prefill is lost). */
#define MOON_SERVE_F_EMBED 0x10u

/* Sampling and stopping, shared by SUBMIT, PREFILL and KV_READY. stop_strs is
 * a bytes span of NUL-terminated strings one after the other. The controls
 * (moon_sampler_ctl_t; zero: off): presence, frequency and repetition
 * penalties, min_p, min_tokens (EOS and stop ids masked until then), and
 * logit_bias: pairs (token id, the bias's float bits). logprobs: 0 none; k + 1:
 * each TOKEN carries its log-probability and the k most likely (k <= 20).
 * grammar: empty, or a constrained-decoding spec (moon_grammar_from_spec:
 * "json_schema\n{...}", "gbnf\n...", ...), compiled and cached by the
 * instances that sample. n_choices (0 or 1: one; at most MOON_SERVE_MAX_CHOICES):
 * choices of the one prompt (OpenAI n / best_of), choice i named request_id + i
 * (the client keeps those ids free) and sampled with moon_serve_choice_seed(seed,
 * i): one prefill, one handover, and the decode instance forks the prompt's KV
 * (full blocks shared, the partial block copied) into one sequence per choice,
 * each streaming TOKEN and DONE under its own id. */
#define MOON_SERVE_SAMPLING_FIELDS(F, T)                                                           \
    F(T, u32, max_tokens)                                                                          \
    F(T, f32, temperature)                                                                         \
    F(T, f32, top_p)                                                                               \
    F(T, u32, top_k)                                                                               \
    F(T, u64, seed)                                                                                \
    F(T, u32, flags)                                                                               \
    F(T, f32, presence_penalty)                                                                    \
    F(T, f32, frequency_penalty)                                                                   \
    F(T, f32, repetition_penalty)                                                                  \
    F(T, f32, min_p)                                                                               \
    F(T, u32, min_tokens)                                                                          \
    F(T, u32, logprobs)                                                                            \
    F(T, u32, n_choices)                                                                           \
    F(T, u32s, logit_bias) F(T, u32s, stop_ids) F(T, bytes, stop_strs) F(T, bytes, grammar)
/* What names a request everywhere. */
#define MOON_SERVE_REQ_FIELDS(F, T) F(T, addr, reply_to) F(T, u64, request_id)

/* client -> conductor. prompt (text) is used when tokens is empty. resume:
 * a request resumed after the loss of an instance that served it (see
 * MOON_SERVE_RESUMABLE): the tokens its client already received (their
 * TOKEN indices 0..n-1), appended to the prompt; the stream goes on at
 * index n, max_tokens still counts from the first one. key: the client's API key,
 * session: its session field (OpenAI `user`), both "" when none: what request
 * filters and policies of one's own (plugin.h) may read. */
#define MOON_SERVE_SUBMIT_FIELDS(F, T)                                                             \
    MOON_SERVE_REQ_FIELDS(F, T)                                                                    \
    F(T, u32, slo_class)                                                                           \
    MOON_SERVE_SAMPLING_FIELDS(F, T)                                                               \
    F(T, str, prompt) F(T, u32s, tokens) F(T, u32s, resume) F(T, str, key) F(T, str, session)
/* client -> conductor, conductor -> instances. */
#define MOON_SERVE_CANCEL_FIELDS(F, T) MOON_SERVE_REQ_FIELDS(F, T)
/* decode (the first: prefill; or conductor, prefill on failure) -> client: one per token. text is
 * the token's printable piece: stop strings never appear in it (text that
 * could start one is held back until it cannot). Asked for logprobs: logprob
 * (of the raw logits) and top: pairs (id, logprob's float bits), most likely
 * first; else 0 and empty. */
#define MOON_SERVE_TOKEN_FIELDS(F, T)                                                              \
    F(T, u64, request_id)                                                                          \
    F(T, u32, index)                                                                               \
    F(T, u32, token)                                                                               \
    F(T, str, text) F(T, u64, weight_version) F(T, f32, logprob) F(T, u32s, top)
/* decode -> client: the tokens of one decode step bound for one reply
 * address, n entries, each meaning what a TOKEN would: request_id, index,
 * token and weight_version (n each); text holds the entries' texts one after
 * another, each with its NUL, text_end[i] one past entry i's NUL. Read it
 * with moon_serve_tokens_event (serve_client.h). */
#define MOON_SERVE_TOKENS_FIELDS(F, T)                                                             \
    F(T, u64s, request_id)                                                                         \
    F(T, u32s, index)                                                                              \
    F(T, u32s, token) F(T, u32s, text_end) F(T, bytes, text) F(T, u64s, weight_version)
/* prefill -> decode -> client (MOON_SERVE_F_PROMPT_LOGPROBS): the logprobs of prompt
 * positions [first, first + n), n = lp.n, each of the raw logits of the
 * position before (position 0 has none: first >= 1): lp the prompt token's
 * (float bits), top k (id, float bits) pairs per position, most likely
 * first. last: the prompt's last ones (n_prompt: its length). One message per
 * computed chunk; they travel through the request's decode instance (the
 * same pair as KV_READY, which it forwards them to the client as they come),
 * so the client has all of them before the first TOKEN. */
#define MOON_SERVE_PROMPT_LOGPROBS_FIELDS(F, T)                                                    \
    F(T, addr, reply_to)                                                                           \
    F(T, u64, request_id)                                                                          \
    F(T, u32, first)                                                                               \
    F(T, u32, k) F(T, u32, last) F(T, u32, n_prompt) F(T, u32s, lp) F(T, u32s, top)
/* prefill -> client (MOON_SERVE_F_EMBED): the prompt's embedding, the mean
 * of its final normed hidden states, L2-normalised (vec: dim float bits),
 * then DONE follows. */
#define MOON_SERVE_EMBEDDING_FIELDS(F, T) F(T, u64, request_id) F(T, u32, n_prompt) F(T, u32s, vec)
/* -> client: the end. DONE with finish ERROR and a status that
 * MOON_SERVE_RESUMABLE accepts means an instance serving the request was
 * lost: nothing runs it any more, and the client may submit it again under a
 * new id with resume = the tokens it received (the gateway does). text: held-back text released at
 * the end (never a stop string). prefill_instance / decode_instance: the instances (indices within
 * their role, as in LOAD) that served it, -1 when it was never placed. Times
 * are the server's, in ns: queue = arrival to prefill start, prefill =
 * compute, transfer = KV handover, ttft = arrival to first token.
 * http_status, retry_after_s: a request filter's refusal (plugin.h), else 0. */
#define MOON_SERVE_DONE_FIELDS(F, T)                                                               \
    F(T, u64, request_id)                                                                          \
    F(T, u32, finish)                                                                              \
    F(T, i32, status)                                                                              \
    F(T, u32, n_prompt)                                                                            \
    F(T, u32, n_completion)                                                                        \
    F(T, u32, n_cached)                                                                            \
    F(T, i32, prefill_instance)                                                                    \
    F(T, i32, decode_instance)                                                                     \
    F(T, u64, queue_ns)                                                                            \
    F(T, u64, prefill_ns)                                                                          \
    F(T, u64, transfer_ns)                                                                         \
    F(T, u64, ttft_ns)                                                                             \
    F(T, str, text)                                                                                \
    F(T, str, message) F(T, u64, weight_version) F(T, u32, http_status) F(T, u32, retry_after_s)

/* weight_version (PREFILL, KV_READY, TOKEN, DONE): the weights the request runs on
 * from its first step to its last, stamped by the conductor (weights_msgs.h). */
/* conductor -> prefill (or a colocated instance). The policy's plan, from
 * the conductor's prefix indexes: n_local leading blocks of the prompt are in
 * the instance's own prefix cache, the next n_fetch it reads from the store.
 * The instance reuses what its cache really holds and fetches the rest of
 * the plan's prefix (blocks [held, n_local + n_fetch)); a block gone
 * meanwhile is computed. n_fetch MOON_SERVE_FETCH_ASK: ask the store how many
 * it holds. keys: 2 u64 per full block of the prompt. */
#define MOON_SERVE_FETCH_ASK UINT32_MAX
#define MOON_SERVE_PREFILL_FIELDS(F, T)                                                            \
    MOON_SERVE_REQ_FIELDS(F, T)                                                                    \
    F(T, addr, decode)                                                                             \
    F(T, u32, slo_class)                                                                           \
    F(T, u32, n_local)                                                                             \
    F(T, u32, n_fetch)                                                                             \
    F(T, u64, arrival_ns)                                                                          \
    F(T, u32, n_resumed)                                                                           \
    MOON_SERVE_SAMPLING_FIELDS(F, T) F(T, u32s, tokens) F(T, u64s, keys) F(T, u64, weight_version)
/* prefill -> decode (slo_class: the PREFILL's, for the decode's admission
 * order): status != 0 (final): the request ended at the prefill
 * (MOON_ERR_CANCELED: cancelled; else an error, message says why): the decode
 * instance answers the client with DONE. Otherwise blocks[] of the prefill pool (ids in its region
 * desc) hold prompt tokens [first_block * block_tokens, ...). final: the prompt is done; then
 * n_tokens = prompt length, token = the first sampled token, and the sampling fields and tokens are
 * set (the decode instance's sequence state; first_logprob and first_top: the
 * first token's, as TOKEN's, when logprobs are asked). n_choices > 1: token,
 * seed (its sampler's state) and first_* are choice 0's; choices holds the
 * others' in order, MOON_SERVE_CHOICE_U32S(k) u32 each (k: first_top's pairs):
 * token, sampler state lo, hi, logprob's float bits, then k (id, float bits). desc: the prefill
 * pool's region descriptor (empty in one process: base then holds the pool's address).
 * first_sent (final): the prefill sent the first token to reply_to itself (index n_resumed, its
 * text and logprobs, the request's weight_version): the decode feeds it to its state but does
 * not send it again; first_ns: then arrival to that send (the request's TTFT). The prefill
 * sends it unless the token ends the request (EOS, a stop id or string), prompt logprobs must
 * come first, or the request has several choices (the decode sends each choice's first): then
 * the decode does. */
#define MOON_SERVE_KV_READY_FIELDS(F, T)                                                           \
    MOON_SERVE_REQ_FIELDS(F, T)                                                                    \
    F(T, addr, prefill)                                                                            \
    F(T, u32, prefill_instance)                                                                    \
    F(T, i32, status)                                                                              \
    F(T, u32, first_block)                                                                         \
    F(T, u32, final)                                                                               \
    F(T, u32, n_tokens)                                                                            \
    F(T, u32, token)                                                                               \
    F(T, u32, n_cached)                                                                            \
    F(T, u64, arrival_ns)                                                                          \
    F(T, u64, queue_ns)                                                                            \
    F(T, u64, prefill_ns)                                                                          \
    F(T, u64, base)                                                                                \
    F(T, u32, n_resumed)                                                                           \
    F(T, u32, slo_class)                                                                           \
    MOON_SERVE_SAMPLING_FIELDS(F, T)                                                               \
    F(T, u32s, blocks)                                                                             \
    F(T, bytes, desc)                                                                              \
    F(T, u32s, tokens)                                                                             \
    F(T, str, message)                                                                             \
    F(T, u64, weight_version)                                                                      \
    F(T, f32, first_logprob)                                                                       \
    F(T, u32s, first_top) F(T, u32s, choices) F(T, u32, first_sent) F(T, u64, first_ns)
#define MOON_SERVE_CHOICE_U32S(_k) (4u + 2u * (_k))
/* decode -> prefill: the request's blocks were pulled (or the request ended):
 * the prefill instance may free its sequence. status != 0: the decode gave up. */
#define MOON_SERVE_KV_DONE_FIELDS(F, T) MOON_SERVE_REQ_FIELDS(F, T) F(T, i32, status)
/* instance -> conductor: the request left the instance for good. */
#define MOON_SERVE_RELEASED_FIELDS(F, T)                                                           \
    MOON_SERVE_REQ_FIELDS(F, T) F(T, u32, finish) F(T, u32, n_completion)
/* instance -> conductor: load report. role: 0 prefill, 1 decode, 2 colocated.
 * queued_tokens: prompt tokens waiting or computing; running: sequences in
 * the batch; free_blocks / total_blocks: the KV pool. */
#define MOON_SERVE_LOAD_FIELDS(F, T)                                                               \
    F(T, u32, instance)                                                                            \
    F(T, u32, role)                                                                                \
    F(T, u32, queued_tokens)                                                                       \
    F(T, u32, queued_reqs)                                                                         \
    F(T, u32, running)                                                                             \
    F(T, u32, free_blocks)                                                                         \
    F(T, u32, total_blocks)                                                                        \
    F(T, u64, n_cache_hit_tokens) F(T, u64, n_store_hit_tokens) F(T, u64, n_computed_tokens)
/* instance -> conductor at start: who it is, and what the engine costs
 * (fitted at start-up by timing it): prefill_s(n) = a0 + a1 n + a2 n^2,
 * decode step_s(b, ctx) = d0 + d1 b + d2 ctx (ctx: tokens in the batch). */
#define MOON_SERVE_HELLO_FIELDS(F, T)                                                              \
    F(T, u32, instance)                                                                            \
    F(T, u32, role)                                                                                \
    F(T, u32, total_blocks)                                                                        \
    F(T, u32, max_batch)                                                                           \
    F(T, f64, a0) F(T, f64, a1) F(T, f64, a2) F(T, f64, d0) F(T, f64, d1) F(T, f64, d2)
/* prefill -> conductor: its own prefix cache changed, as the store shards'
 * EVENTS say it (same fields and event layout, MOON_STORE_EVENT_U64S u64 per
 * event: kind STORED or EVICTED, key lo, key hi, model id, weight version):
 * snapshot 0: live events numbered from seq; 1: the first part of a snapshot
 * of the whole cache (the conductor forgets what it knew of it), 2: a later
 * part. The first one after HELLO is a snapshot. */
#define MOON_SERVE_CACHE_EVENTS_FIELDS(F, T)                                                       \
    F(T, u32, instance) F(T, u64, seq) F(T, u32, snapshot) F(T, u64s, ev)
/* conductor -> an instance of the request: the instance `lost` that served
 * it with this one is gone. A decode instance ends the request (DONE
 * resumable, RELEASED) unless all of its KV is in (then it goes on); a
 * prefill instance drops the request's sequence (nobody will pull it).
 * n_choices: the request's (SUBMIT's, at least 1). */
#define MOON_SERVE_LOST_FIELDS(F, T)                                                               \
    MOON_SERVE_REQ_FIELDS(F, T) F(T, addr, lost) F(T, u32, n_choices)
/* `moonlet serve`'s rank 0 -> every rank's control actor: the deployment
 * stops (rank 0 drained its gateway, or gave up after drain_ms); another
 * rank -> rank 0's: that rank got a signal (the deployment drains and
 * stops). rank: the sender's. */
#define MOON_SERVE_STOP_FIELDS(F, T) F(T, u32, drain_ms) F(T, u32, rank)
/* conductor -> prefill: a gap in its events (a lost message): send a snapshot. */
#define MOON_SERVE_CACHE_SYNC_FIELDS(F, T) F(T, u32, instance)
/* engine thread -> its instance: a forward pass finished (job echoes the
 * instance's id for it). */
#define MOON_SERVE_ENGINE_DONE_FIELDS(F, T) F(T, u64, job) F(T, i32, status) F(T, f64, duration_s)

/* anyone -> conductor: counters and the instances' last reports. */
#define MOON_SERVE_STATS_FIELDS(F, T) F(T, u64, req)
/* finished: requests released per finish reason (moon_finish_t order);
 * blocks: per instance (prefill ones, then decode ones) used and total;
 * inst_up: per instance (same order) 1 up, 0 not (yet) or no more. */
#define MOON_SERVE_STATS_REPLY_FIELDS(F, T)                                                        \
    F(T, u64, req)                                                                                 \
    F(T, u64, n_submitted)                                                                         \
    F(T, u64, n_placed)                                                                            \
    F(T, u64, n_rejected)                                                                          \
    F(T, u64, n_errors)                                                                            \
    F(T, u32, in_flight)                                                                           \
    F(T, u32, n_prefill)                                                                           \
    F(T, u32, n_prefill_up)                                                                        \
    F(T, u32, n_decode_up)                                                                         \
    F(T, u64, running)                                                                             \
    F(T, u64, waiting)                                                                             \
    F(T, u64, store_hit_tokens)                                                                    \
    F(T, u64, computed_tokens)                                                                     \
    F(T, u64s, finished) F(T, u32s, blocks_used) F(T, u32s, blocks_total) F(T, u32s, inst_up)

#define MOON_SERVE_MSGS(X)                                                                         \
    X(MOON_MSG_SERVE_SUBMIT, moon_serve_submit_t, MOON_SERVE_SUBMIT_FIELDS)                        \
    X(MOON_MSG_SERVE_CANCEL, moon_serve_cancel_t, MOON_SERVE_CANCEL_FIELDS)                        \
    X(MOON_MSG_SERVE_TOKEN, moon_serve_token_t, MOON_SERVE_TOKEN_FIELDS)                           \
    X(MOON_MSG_SERVE_DONE, moon_serve_done_t, MOON_SERVE_DONE_FIELDS)                              \
    X(MOON_MSG_SERVE_PREFILL, moon_serve_prefill_t, MOON_SERVE_PREFILL_FIELDS)                     \
    X(MOON_MSG_SERVE_KV_READY, moon_serve_kv_ready_t, MOON_SERVE_KV_READY_FIELDS)                  \
    X(MOON_MSG_SERVE_KV_DONE, moon_serve_kv_done_t, MOON_SERVE_KV_DONE_FIELDS)                     \
    X(MOON_MSG_SERVE_RELEASED, moon_serve_released_t, MOON_SERVE_RELEASED_FIELDS)                  \
    X(MOON_MSG_SERVE_LOAD, moon_serve_load_t, MOON_SERVE_LOAD_FIELDS)                              \
    X(MOON_MSG_SERVE_HELLO, moon_serve_hello_t, MOON_SERVE_HELLO_FIELDS)                           \
    X(MOON_MSG_SERVE_ENGINE_DONE, moon_serve_engine_done_t, MOON_SERVE_ENGINE_DONE_FIELDS)         \
    X(MOON_MSG_SERVE_STATS, moon_serve_stats_req_t, MOON_SERVE_STATS_FIELDS)                       \
    X(MOON_MSG_SERVE_STATS_REPLY, moon_serve_stats_reply_t, MOON_SERVE_STATS_REPLY_FIELDS)         \
    X(MOON_MSG_SERVE_CACHE_EVENTS, moon_serve_cache_events_t, MOON_SERVE_CACHE_EVENTS_FIELDS)      \
    X(MOON_MSG_SERVE_CACHE_SYNC, moon_serve_cache_sync_t, MOON_SERVE_CACHE_SYNC_FIELDS)            \
    X(MOON_MSG_SERVE_LOST, moon_serve_lost_t, MOON_SERVE_LOST_FIELDS)                              \
    X(MOON_MSG_SERVE_STOP, moon_serve_stop_t, MOON_SERVE_STOP_FIELDS)                              \
    X(MOON_MSG_SERVE_TOKENS, moon_serve_tokens_t, MOON_SERVE_TOKENS_FIELDS)                        \
    X(MOON_MSG_SERVE_PROMPT_LOGPROBS, moon_serve_prompt_logprobs_t,                                \
      MOON_SERVE_PROMPT_LOGPROBS_FIELDS)                                                           \
    X(MOON_MSG_SERVE_EMBEDDING, moon_serve_embedding_t, MOON_SERVE_EMBEDDING_FIELDS)

MOON_MSG_DECLARE_IN(MOON_SERVE_MSGS, SERVE, MOON_MSG_SERVE_END)
_Static_assert(MOON_MSG_SERVE_END <= 112, "serving ids are 64..111");

MOON_API extern const moon_msg_desc_t moon_serve_msg_descs[];

/* Registers the serving messages (idempotent; every rank, before any traffic). */
MOON_API moon_status_t moon_serve_msgs_register(void);

#endif /* MOON_ACTORS_SERVE_MSGS_H */
