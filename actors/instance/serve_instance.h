/* actors/instance/serve_instance.h - what prefill and decode instances share: their
 * spawn arguments, the engine they create, and their reports to the
 * conductor (HELLO with the fitted cost model at start, LOAD after changes
 * and periodically). */
#ifndef MOON_ACTORS_SERVE_INSTANCE_H
#define MOON_ACTORS_SERVE_INSTANCE_H

#include "moonlet/actor.h"
#include "moonlet/dist.h"
#include "moonlet/kv_key.h"
#include "moonlet/model.h"
#include "moonlet/serve_msgs.h"

#include <stdatomic.h>

#define MOON_SERVE_ROLE_PREFILL 0u
#define MOON_SERVE_ROLE_DECODE 1u
#define MOON_SERVE_ROLE_COLOCATED 2u

/* KV moves a simulation times (virtual time): the store's blocks fetched
 * into a prefill instance, a decode instance pulling blocks from a prefill. */
#define MOON_SERVE_XFER_FETCH 0u /* src: the store; dst: the prefill instance */
#define MOON_SERVE_XFER_PULL 1u  /* src: the prefill instance; dst: the decode instance */
/* Returns the move's duration from now_ns (booking it on the modeled
 * network). Called from the instance's turns. */
typedef uint64_t (*moon_serve_xfer_fn)(void *arg, uint64_t now_ns, uint32_t kind, uint32_t src,
                                       uint32_t dst, uint32_t n_blocks);

typedef struct {
    const moon_model_t  *model;    /* borrowed: outlives the actor */
    moon_engine_config_t engine;   /* backend, threads, max batch / chunk */
    uint32_t             role;     /* MOON_SERVE_ROLE_* */
    uint32_t             instance; /* index among the instances of its role */
    uint32_t             block_tokens;
    uint32_t             n_blocks; /* KV pool */
    moon_kv_type_t       kv_type;  /* its elements (resolved: F32 or F16) */
    uint32_t             max_seqs;
    uint32_t             prefill_chunk;       /* tokens per prefill call */
    uint32_t             prefill_chunk_alone; /* prefill role, no other request queued (0: same) */
    moon_dist_t         *dist;                /* borrowed; NULL: one process */
    moon_addr_t          conductor;
    const moon_addr_t   *shards; /* store shards (copied); n_shards 0: no store */
    uint32_t             n_shards;
    uint32_t             n_replicas;
    moon_kv_tag_t        tag;            /* store keys' tag: model id, weight version */
    int                  threaded;       /* 1: engine thread; 0: inline (deterministic executor) */
    uint64_t             load_period_ns; /* periodic LOAD (0: 50 ms) */
    moon_serve_xfer_fn   xfer_ns;        /* simulation only: KV moves take this long (NULL: as
                                            long as they take) */
    void *xfer_arg;
    int   virtual_kv; /* simulation (dist NULL, COST): KV of sizes and keys, no bytes
                         (kv_pool.h); the store's shards virtual too */
    double request_s; /* simulation only, prefill role: the modeled time a request costs
                         its instance outside the engine calls (a real one spends it:
                         0), charged with the request's first chunk */
    const char *calibration_cache; /* borrowed; NULL: calibrate at every start */
    int         numa;     /* the KV pool on the NUMA node(s) of the engine's cores (kv_pool.h) */
    int first_via_decode; /* prefill role: a request's first token goes to its client through
                             the decode instance (0: straight from here when it may,
                             prefill_first.h) */
    /* where the instance publishes, at each load report (after every change
     * and periodically), the last time (moon_now) it held requests, for its
     * weight receiver, which slows a push while that is recent (NULL: not
     * published) */
    _Atomic uint64_t *busy_ns;
} moon_serve_instance_args_t;

/* Where an instance's KV pool goes (moon_kv_pool_open's numa_core): near
 * the engine's first core when its threads are pinned, else near the
 * rank's cores; MOON_KV_POOL_NUMA_OFF without --numa or with no memory to
 * place (virtual KV). */
MOON_API int32_t moon_serve_numa_core(const moon_serve_instance_args_t *a);

/* The tag of a deployment's store keys: model id = XXH3 of the model file's
 * bytes mixed with the block size and the KV cache type (a block's bytes
 * differ with either), weight version 0 (the weight-sync step bumps it).
 * MOON_ERR_IO / NOT_FOUND reading path. */
MOON_API moon_status_t moon_serve_model_tag(const char *path, uint32_t block_tokens,
                                            moon_kv_type_t kv_type, moon_kv_tag_t *tag_p);

/* Times the engine (moon_serve_calibrate) and sends HELLO with the fit to
 * the conductor: prefill instances fit prefill, decode instances decode. */
MOON_API moon_status_t moon_serve_hello(moon_actor_t *self, const moon_serve_instance_args_t *a,
                                        moon_engine_t *engine, moon_kv_cache_t *kv);

/* The last steps of an instance's init, shared by both roles: its engine
 * runner (thread bound to the instance's first core when pinned), the
 * periodic LOAD timer, the engine's calibration and HELLO. On error what
 * was made here is set in *runner_p for the caller's fini to free. */
typedef struct moon_engine_runner moon_engine_runner_t;
MOON_API moon_status_t            moon_serve_instance_start(moon_actor_t                     *self,
                                                            const moon_serve_instance_args_t *a,
                                                            moon_engine_t *engine, moon_kv_cache_t *kv,
                                                            moon_engine_runner_t **runner_p,
                                                            uint64_t              *timer_p);

/* The last LOAD an instance sent (its own state; zero it at start). */
typedef struct {
    uint32_t queued_tokens, queued_reqs, running, free_blocks;
    uint64_t counters[3];
    uint64_t sent_ns; /* 0: none sent yet */
} moon_serve_load_memo_t;

/* A report equal to the last one is sent again at most this often: an idle
 * instance's periodic reports carry nothing new, and each woke rank 0 (20 a
 * second per instance: most of an idle rank 0's CPU). */
#define MOON_SERVE_LOAD_REFRESH_NS 1000000000ull

/* Sends LOAD to the conductor (fire and forget), unless it equals the last
 * one sent (memo) less than MOON_SERVE_LOAD_REFRESH_NS ago. */
MOON_API void moon_serve_report_load(moon_actor_t *self, const moon_serve_instance_args_t *a,
                                     moon_serve_load_memo_t *memo, uint32_t queued_tokens,
                                     uint32_t queued_reqs, uint32_t running, uint32_t free_blocks,
                                     const uint64_t counters[3]);

/* Packs stop ids and strings of a request (as sent in SUBMIT) into a message
 * of the sampling family: copies its scalar fields (max_tokens .. min_tokens) from src to dst
 * (the spans logit_bias, stop_ids, stop_strs are copied with moon_serve_copy_span)
 * (both MOON_SERVE_SAMPLING_FIELDS structs at offsets given). */
#define MOON_SERVE_COPY_SAMPLING(_dst, _src)                                                       \
    do {                                                                                           \
        (_dst)->max_tokens         = (_src)->max_tokens;                                           \
        (_dst)->temperature        = (_src)->temperature;                                          \
        (_dst)->top_p              = (_src)->top_p;                                                \
        (_dst)->top_k              = (_src)->top_k;                                                \
        (_dst)->seed               = (_src)->seed;                                                 \
        (_dst)->flags              = (_src)->flags;                                                \
        (_dst)->presence_penalty   = (_src)->presence_penalty;                                     \
        (_dst)->frequency_penalty  = (_src)->frequency_penalty;                                    \
        (_dst)->repetition_penalty = (_src)->repetition_penalty;                                   \
        (_dst)->min_p              = (_src)->min_p;                                                \
        (_dst)->min_tokens         = (_src)->min_tokens;                                           \
        (_dst)->logprobs           = (_src)->logprobs;                                             \
        (_dst)->n_choices          = (_src)->n_choices;                                            \
    } while (0)

/* A request's sampling, from any message of the sampling family (borrowed
 * views into it: MOON_SERVE_SAMPLING_OF). */
typedef struct {
    float           temperature, top_p;
    uint32_t        top_k, flags;
    uint64_t        seed;
    float           presence_penalty, frequency_penalty, repetition_penalty, min_p;
    uint32_t        min_tokens;
    const uint32_t *logit_bias; /* (2 n_bias): id, float bits */
    uint32_t        n_bias;
    const uint32_t *stop_ids;
    uint32_t        n_stop_ids;
    uint32_t        logprobs; /* 0: none; k + 1: logprob and top k of each token */
} moon_serve_sampling_t;

#define MOON_SERVE_SAMPLING_OF(_m)                                                                 \
    ((moon_serve_sampling_t){(_m)->temperature, (_m)->top_p, (_m)->top_k, (_m)->flags, (_m)->seed, \
                             (_m)->presence_penalty, (_m)->frequency_penalty,                      \
                             (_m)->repetition_penalty, (_m)->min_p, (_m)->min_tokens,              \
                             MOON_SPAN_PTR(_m, (_m)->logit_bias), (_m)->logit_bias.n / 2,          \
                             MOON_SPAN_PTR(_m, (_m)->stop_ids), (_m)->stop_ids.n, (_m)->logprobs})

/* Initializes s (fini it on MOON_OK only) for a request: its sampling sp,
 * tok's EOS and BOS (unless IGNORE_EOS) and its stop ids masked until
 * min_tokens, toks (n, borrowed): the prompt, whose last n_resumed were
 * generated before (they count for the penalties and min_tokens).
 * MOON_ERR_INVALID_PARAM: a value out of range; MOON_ERR_NO_MEMORY. */
MOON_API moon_status_t moon_serve_sampler_open(moon_sampler_t *s, uint32_t vocab,
                                               const moon_tokenizer_t      *tok,
                                               const moon_serve_sampling_t *sp,
                                               const uint32_t *toks, uint32_t n,
                                               uint32_t n_resumed);

/* A token's log-probabilities (moon_logprobs), for TOKEN and KV_READY. */
typedef struct {
    float    lp;
    uint32_t k; /* alternatives in top */
    int32_t  ids[MOON_LOGPROBS_MAX];
    float    lps[MOON_LOGPROBS_MAX];
} moon_serve_lp_t;

/* Writes lp's alternatives as (id, float bits) pairs into span of msg (room
 * reserved: 8 k bytes). MOON_ERR_NO_RESOURCE: no room. */
MOON_API moon_status_t moon_serve_lp_put(void *msg, moon_span_t *span, const moon_serve_lp_t *lp);

/* A TOKEN message (the caller's): text (NUL-terminated, n long) and lp (NULL: none). NULL
 * without memory. The decode's tokens and the prefill's first one alike. */
MOON_API moon_serve_token_t *moon_serve_token_new(uint64_t request_id, uint32_t index,
                                                  uint32_t token, const char *text, size_t n,
                                                  uint64_t version, const moon_serve_lp_t *lp);

/* Copies a span of src into the same-kind span of dst (room reserved by the
 * caller). MOON_ERR_NO_RESOURCE: no room. */
MOON_API moon_status_t moon_serve_copy_span(void *dst, moon_span_t *dspan, const void *src,
                                            moon_span_t sspan, uint32_t elem_bytes, int is_str);

#endif /* MOON_ACTORS_SERVE_INSTANCE_H */
