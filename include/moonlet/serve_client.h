/* moonlet/serve_client.h - the programmatic client of a serving cluster: what
 * the gateway, the tests, the benchmarks and the examples use to submit
 * requests to the conductor and read their token streams.
 *
 * Two ways in:
 *  - From an actor: moon_serve_submit() sends SUBMIT with reply_to = self; the
 *    actor receives MOON_MSG_SERVE_TOKEN, MOON_MSG_SERVE_TOKENS (a decode
 *    step's tokens for it: moon_serve_tokens_event) and MOON_MSG_SERVE_DONE
 *    and reads them with moon_serve_event_of(). moon_serve_cancel() cancels.
 *  - From a plain thread: moon_serve_client_create() spawns a small client
 *    actor in the runtime; submit/cancel are safe from any thread, and events
 *    come either to a callback (on a runtime worker: it must not block) or to
 *    a queue read with moon_serve_client_next() (blocking with a timeout).
 * Events of one request arrive in order: TOKEN index 0, 1, ... then one DONE
 * (the first token comes from another instance than the rest: the thread
 * client puts each stream in order, moonlet/serve_order.h; an actor of one's
 * own does the same with it);
 * an embedding request (MOON_SERVE_F_EMBED) gets one EMBEDDING, then DONE.
 * When an instance serving a request is lost, its DONE says so
 * (MOON_SERVE_RESUMABLE: finish ERROR, MOON_ERR_PEER_LOST); this client
 * passes it on (the gateway submits such a request again with its tokens so
 * far, see SUBMIT's resume). */
#ifndef MOON_ACTORS_SERVE_CLIENT_H
#define MOON_ACTORS_SERVE_CLIENT_H

#include "moonlet/actor.h"
#include "moonlet/dist.h"
#include "moonlet/serve_msgs.h"

/* What a request asks for. Pointers are borrowed for the call. */
typedef struct {
    const char        *prompt; /* text (tokenized by the conductor), or NULL with tokens */
    const int32_t     *tokens; /* token ids (no BOS added), used when n_tokens > 0 */
    uint32_t           n_tokens;
    uint32_t           max_tokens;  /* > 0 */
    float              temperature; /* 0: greedy */
    float              top_p;       /* 0 or 1: off */
    uint32_t           top_k;       /* 0: off */
    uint64_t           seed;
    const int32_t     *stop_ids; /* besides EOS */
    uint32_t           n_stop_ids;
    const char *const *stop; /* stop strings */
    uint32_t           n_stop;
    uint32_t           slo_class; /* 0: default */
    uint32_t           flags;     /* MOON_SERVE_F_* (ADD_BOS for text like `moonlet generate`) */
    /* logit controls (moon_sampler_ctl_t's meanings; zero: off) */
    float          presence_penalty, frequency_penalty, repetition_penalty, min_p;
    uint32_t       min_tokens;
    uint32_t       logprobs; /* 0: none; k + 1: each token's logprob and top k (k <= 20) */
    const int32_t *bias_ids; /* (n_bias) with bias[i] */
    const float   *bias;
    uint32_t       n_bias;
    const char    *key;     /* the client's API key, for request filters (NULL: none) */
    const char    *session; /* its session field, for filters and policies (NULL: none) */
    const char    *grammar; /* constrained decoding spec (serve_msgs.h), NULL: none */
    uint32_t       grammar_len;
    /* choices of the prompt (0, 1: one), ids request_id .. + n_choices - 1
     * (serve_msgs.h): keep them free; each gets its own TOKENs and DONE */
    uint32_t n_choices;
} moon_serve_params_t;

/* Defaults: max_tokens 16, greedy, top_p 1, flags ADD_BOS. */
MOON_API void moon_serve_params_default(moon_serve_params_t *p);

typedef enum {
    MOON_SERVE_EV_TOKEN     = 1,
    MOON_SERVE_EV_DONE      = 2,
    MOON_SERVE_EV_EMBEDDING = 3 /* the prompt's embedding: moon_serve_event_embedding */
} moon_serve_ev_kind_t;

/* One event; text and message point into the message it was read from (or
 * into the event's own copy for moon_serve_client_next: valid until the next
 * call to next or moon_serve_event_fini). */
typedef struct {
    uint32_t    kind; /* moon_serve_ev_kind_t */
    uint64_t    request_id;
    uint32_t    index;   /* TOKEN */
    int32_t     token;   /* TOKEN */
    const char *text;    /* TOKEN: its piece; DONE: text released at the end ("" if none) */
    float       logprob; /* TOKEN of a request with logprobs: its log-probability */
    /* DONE */
    uint32_t      finish; /* moon_finish_t */
    moon_status_t status;
    uint32_t      n_prompt, n_completion, n_cached;
    int32_t       prefill_instance, decode_instance; /* where it ran; -1: not placed */
    uint64_t      queue_ns, prefill_ns, transfer_ns, ttft_ns;
    const char   *message;        /* DONE with an error: why */
    uint64_t      weight_version; /* TOKEN: its weights; DONE: those of every token */
    uint32_t      http_status;    /* DONE: a request filter's status for a refusal, else 0 */
    uint32_t      retry_after_s;  /* DONE: with http_status, seconds to wait (0: none) */
    /* EMBEDDING: its size (the model's dim) and float32 bits (read them with
     * moon_serve_event_embedding); n_prompt is set too */
    uint32_t        n_embedding;
    const uint32_t *embedding_bits;
    /* private: owned copy for moon_serve_client_next */
    moon_msg_hdr_t *msg_;
} moon_serve_event_t;

/* ---- from an actor ---------------------------------------------------------- */
/* Sends SUBMIT {request_id, params} to the conductor from self. MOON_OK: TOKEN
 * and DONE messages will follow to self. MOON_ERR_INVALID_PARAM (bad params:
 * nothing sent), MOON_ERR_NO_MEMORY, or moon_send's status. */
MOON_API moon_status_t moon_serve_submit(moon_actor_t *self, moon_addr_t conductor,
                                         uint64_t request_id, const moon_serve_params_t *params);
/* Asks the conductor to cancel (self's request request_id). */
MOON_API moon_status_t moon_serve_cancel(moon_actor_t *self, moon_addr_t conductor,
                                         uint64_t request_id);
/* Reads a TOKEN, DONE or EMBEDDING message into ev (pointers into msg).
 * MOON_ERR_INVALID_PARAM: another type. */
MOON_API moon_status_t moon_serve_event_of(const moon_msg_hdr_t *msg, moon_serve_event_t *ev);
/* An EMBEDDING event's vector: min(n_embedding, cap) floats into out (L2
 * norm 1). Returns n_embedding (0: not an EMBEDDING event). */
MOON_API uint32_t moon_serve_event_embedding(const moon_serve_event_t *ev, float *out,
                                             uint32_t cap);
/* A TOKENS message (one decode step's tokens for one reply address): its
 * number of entries, 0 when msg is not a well-formed TOKENS (logged). */
MOON_API uint32_t moon_serve_tokens_count(const moon_msg_hdr_t *msg);
/* Entry i (< moon_serve_tokens_count) of a TOKENS message as a token event,
 * as moon_serve_event_of reads a TOKEN (text points into msg).
 * MOON_ERR_INVALID_PARAM: i out of range or msg malformed. */
MOON_API moon_status_t moon_serve_tokens_event(const moon_msg_hdr_t *msg, uint32_t i,
                                               moon_serve_event_t *ev);
/* Entry i as a new TOKEN message (the caller's; NULL without memory or for
 * a bad i): for code that keeps messages (queues, the gateway's bridge). */
MOON_API moon_serve_token_t *moon_serve_tokens_split(const moon_msg_hdr_t *msg, uint32_t i);
/* Builds a SUBMIT message (for the gateway and the thread client). */
MOON_API moon_status_t moon_serve_submit_build(moon_addr_t reply_to, uint64_t request_id,
                                               const moon_serve_params_t *params,
                                               moon_serve_submit_t      **msg_p);

/* ---- from a plain thread ---------------------------------------------------- */
typedef struct moon_serve_client moon_serve_client_t;

/* Called on a runtime worker thread for every event (borrowed for the call);
 * must not block. */
typedef void (*moon_serve_event_fn)(void *arg, const moon_serve_event_t *ev);

typedef struct {
    moon_addr_t         conductor; /* where SUBMITs go */
    moon_serve_event_fn on_event;  /* NULL: events queue for moon_serve_client_next */
    void               *arg;
} moon_serve_client_config_t;

/* Spawns the client actor in rt (running or about to run). Any thread but
 * not from a handler. */
MOON_API moon_status_t moon_serve_client_create(moon_runtime_t                   *rt,
                                                const moon_serve_client_config_t *cfg,
                                                moon_serve_client_t             **client_p);
/* Stops the client actor (requests still running are cancelled) and frees. */
MOON_API void moon_serve_client_destroy(moon_serve_client_t *client);
/* Submits; *request_id_p gets the id its events carry (choice i's: + i).
 * Any thread. */
MOON_API moon_status_t moon_serve_client_submit(moon_serve_client_t       *client,
                                                const moon_serve_params_t *params,
                                                uint64_t                  *request_id_p);
MOON_API moon_status_t moon_serve_client_cancel(moon_serve_client_t *client, uint64_t request_id);
/* Next event of any request (queue mode). MOON_ERR_TIMED_OUT after timeout_ns.
 * Release it with moon_serve_event_fini. */
MOON_API moon_status_t moon_serve_client_next(moon_serve_client_t *client, uint64_t timeout_ns,
                                              moon_serve_event_t *ev);
MOON_API void          moon_serve_event_fini(moon_serve_event_t *ev);

/* The cluster's counters as the conductor sees them (from the instances'
 * latest load reports). */
typedef struct {
    uint64_t n_submitted, n_placed, n_rejected, n_errors;
    uint64_t n_finished[5]; /* released by decode instances, per moon_finish_t */
    uint32_t in_flight;     /* requests placed and not yet released */
    uint32_t n_prefill_up, n_decode_up;
    uint64_t running, waiting;
    uint64_t store_hit_tokens, computed_tokens;
    uint64_t blocks_used_prefill, blocks_used_decode; /* KV pool blocks in use, summed */
    uint64_t blocks_total_prefill, blocks_total_decode;
} moon_serve_stats_t;
/* Asks the conductor (blocking, at most timeout_ns). MOON_ERR_TIMED_OUT. */
MOON_API moon_status_t moon_serve_client_stats(moon_serve_client_t *client, uint64_t timeout_ns,
                                               moon_serve_stats_t *stats_p);
/* Waits until the conductor knows at least n_prefill prefill and n_decode
 * decode instances up. MOON_ERR_TIMED_OUT. */
MOON_API moon_status_t moon_serve_client_wait_ready(moon_serve_client_t *client, uint32_t n_prefill,
                                                    uint32_t n_decode, uint64_t timeout_ns);
/* Reads a STATS_REPLY (for actors that ask themselves). */
MOON_API void moon_serve_stats_of(const moon_serve_stats_reply_t *m, moon_serve_stats_t *stats_p);

#endif /* MOON_ACTORS_SERVE_CLIENT_H */
