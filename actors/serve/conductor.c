/* actors/serve/conductor.c - the conductor: every request enters here. It checks
 * the request, tokenizes a text prompt, computes the prompt's block keys
 * (the store's chained keys under the deployment's tag), looks up how much of
 * the prefix the store holds in its global prefix index (fed by the shards'
 * event streams) and each prefill (or colocated) instance's own prefix cache
 * holds (one index per instance, fed by its CACHE_EVENTS), and asks the
 * scheduler's policy for a (prefill, decode) pair from its view of the
 * cluster: every instance's fitted cost model (HELLO), its load reports
 * (LOAD) and the placements made since. A request whose predicted TTFT or TBT
 * breaks its SLO is rejected at arrival. The request's entry stays until its
 * decode instance releases it, so a CANCEL reaches both instances. Spawned
 * with MOON_SPAWN_CONTROL: never muted. Requests it cannot take are answered
 * at once with DONE (finish error or rejected) and a log line. */
#include "conductor.h"

#include "moonlet/alloc.h"
#include "moonlet/hash.h"
#include "moonlet/htab.h"
#include "moonlet/log.h"
#include "moonlet/kv_index.h"
#include "moonlet/sched_policy.h"
#include "moonlet/sys_msgs.h"
#include "plugin_hooks.h"
#include "serve_instance.h"
#include "moonlet/store_msgs.h"
#include "moonlet/weights_msgs.h"
#include "weights_serving.h"

#include <math.h>
#include <string.h>

#define COND_MAX_INSTANCES 64u
#define COND_SHARD_REF_BASE (1ull << 40) /* monitor refs of shards: base + shard id */

typedef struct {
    moon_addr_t       addr;
    int               hello; /* its cost model arrived */
    moon_serve_load_t last;  /* the latest report */
} cinst_t;

typedef struct {
    int         used;
    moon_addr_t reply_to;
    uint64_t    request_id;
    uint32_t    prefill, decode; /* view indices */
    uint32_t    n_tokens;
    uint32_t    n_choices; /* its ids: request_id .. + n_choices - 1 (1: one) */
    uint32_t    cancelled; /* bit i: choice i was cancelled */
    uint64_t    tag;
    uint64_t    version; /* the weights it runs on */
} creq_t;

typedef struct {
    moon_conductor_args_t   a;
    const moon_tokenizer_t *tok;
    uint32_t                vocab, seq_len;
    uint64_t                block_bytes;
    cinst_t                *inst; /* (n_inst): prefill instances, then decode ones */
    uint32_t                n_inst;
    moon_sched_view_t       view;
    moon_sched_policy_t    *policy;
    moon_kv_index_t        *index;                   /* NULL without a store */
    moon_kv_index_t *cached[2 * COND_MAX_INSTANCES]; /* by view index: an instance's own cache */
    moon_addr_t      shards[COND_MAX_INSTANCES];
    creq_t          *reqs; /* (max_requests) */
    uint32_t         n_reqs;
    moon_htab_t     *req_index; /* (reply_to, request_id) -> slot of reqs: a req_key_t set */
    uint32_t        *free_reqs; /* (max_requests) free slots of reqs, a stack */
    uint32_t         n_free_reqs;
    uint64_t         next_tag;
    struct {
        uint64_t n_submitted, n_placed, n_rejected, n_errors, n_finished[5];
        uint64_t n_index_resyncs;
    } stats;

    moon_weights_gate_t gate;    /* the weight version new requests get */
    moon_plugin_gate_t *plugins; /* request filters and observers; NULL: none loaded */
} conductor_t;

static double now_s(moon_actor_t *self)
{
    return (double)moon_now(moon_actor_runtime(self)) * 1e-9;
}

/* 1 when the instance at view index i keeps a prefix cache (and tells its
 * content): prefill instances, or colocated ones (which come after the
 * n_prefill = 0 prefill ones). */
static int keeps_cache(const conductor_t *c, uint32_t i)
{
    return c->a.colocated ? i < c->n_inst : i < c->a.n_prefill;
}

/* View index of an instance: prefill ones first. */
static int32_t view_index(const conductor_t *c, uint32_t role, uint32_t instance)
{
    if (role == MOON_SERVE_ROLE_DECODE || role == MOON_SERVE_ROLE_COLOCATED) {
        return instance < c->a.n_decode ? (int32_t)(c->a.n_prefill + instance) : -1;
    }
    return instance < c->a.n_prefill ? (int32_t)instance : -1;
}

/* A request's choices (SUBMIT n_choices): 1 for 0 or 1; a refused request
 * of too many is answered for the most there may be. */
static uint32_t choices_of(uint32_t n_choices)
{
    return n_choices > 1 ? MOON_MIN(n_choices, MOON_SERVE_MAX_CHOICES) : 1;
}

/* DONE to each of the n choices of request id (ids id .. id + n - 1). */
static void answer(moon_actor_t *self, moon_addr_t to, uint64_t id, uint32_t n, uint32_t finish,
                   moon_status_t status, uint32_t n_prompt, const char *why)
{
    for (uint32_t i = 0; i < choices_of(n); i++) {
        moon_serve_done_t *m = moon_msg_new(MOON_MSG_SERVE_DONE, strlen(why) + 2);

        if (m == NULL) {
            return;
        }
        m->request_id       = id + i;
        m->finish           = finish;
        m->status           = status;
        m->n_prompt         = n_prompt;
        m->prefill_instance = -1; /* never placed */
        m->decode_instance  = -1;
        moon_msg_set_str(m, &m->text, "");
        moon_msg_set_str(m, &m->message, why);
        moon_tell(self, to, &m->hdr);
    }
}

static void reject(moon_actor_t *self, conductor_t *c, const moon_serve_submit_t *m,
                   moon_status_t status, const char *why)
{
    /* per request: under overload one line a second, not one a request */
    MOON_LOG_LIMITED(MOON_LOG_INFO, "conductor: request %llu refused: %s",
                     (unsigned long long)m->request_id, why);
    c->stats.n_errors++;
    answer(self, m->reply_to, m->request_id, m->n_choices, MOON_FINISH_ERROR, status, 0, why);
    moon_plugin_gate_rejected(c->plugins, self, m, 0, status, 0, why);
}

/* The request table's index: a live request's key and its slot in reqs. */
typedef struct {
    moon_addr_t reply_to;
    uint64_t    request_id;
    uint32_t    slot;
} req_key_t;

static uint64_t req_hash(const void *key, void *arg)
{
    const req_key_t *k = key;

    (void)arg;
    return moon_hash_mix64(k->reply_to ^ moon_hash_mix64(k->request_id));
}

static const moon_htab_type_t req_index_type = {
    .elem_bytes = sizeof(req_key_t), .key_bytes = 2 * sizeof(uint64_t), .hash = req_hash};

static creq_t *find_req(conductor_t *c, moon_addr_t reply_to, uint64_t id)
{
    req_key_t        k = {reply_to, id, 0};
    const req_key_t *e = moon_htab_find(c->req_index, &k);

    return e != NULL ? &c->reqs[e->slot] : NULL;
}

/* The prompt's tokens: the client's, or the text tokenized, then the tokens
 * of a resumed request (SUBMIT resume). Returns a malloc'd array or NULL with
 * *why set. */
static int32_t *prompt_tokens(conductor_t *c, const moon_serve_submit_t *m, uint32_t *n_p,
                              const char **why)
{
    const uint32_t *res = MOON_SPAN_PTR(m, m->resume);
    int32_t        *ids;
    size_t          n = 0;

    if (m->tokens.n > 0) {
        const uint32_t *t = MOON_SPAN_PTR(m, m->tokens);
        ids               = moon_malloc(((size_t)m->tokens.n + m->resume.n) * sizeof(*ids));
        for (uint32_t i = 0; ids != NULL && i < m->tokens.n; i++) {
            if (t[i] >= c->vocab) {
                *why = "a prompt token id is outside the vocabulary";
                moon_free(ids);
                return NULL;
            }
            ids[i] = (int32_t)t[i];
        }
        n = m->tokens.n;
    } else {
        const char *text = MOON_SPAN_PTR(m, m->prompt);
        size_t      len  = m->prompt.n;
        ids              = moon_malloc((len + 2 + m->resume.n) * sizeof(*ids));
        if (ids != NULL && moon_tokenizer_encode(c->tok, text, len, m->flags & MOON_SERVE_F_ADD_BOS,
                                                 ids, len + 2, &n) != MOON_OK) {
            *why = "the prompt could not be tokenized";
            moon_free(ids);
            return NULL;
        }
    }
    if (ids == NULL) {
        *why = "out of memory";
        return NULL;
    }
    for (uint32_t i = 0; i < m->resume.n; i++) {
        if (res[i] >= c->vocab) {
            *why = "a resumed token id is outside the vocabulary";
            moon_free(ids);
            return NULL;
        }
        ids[n++] = (int32_t)res[i];
    }
    *n_p = (uint32_t)n;
    return ids;
}

static const char *check_params(const conductor_t *c, const moon_serve_submit_t *m, uint32_t n)
{
    const uint32_t *stop = MOON_SPAN_PTR(m, m->stop_ids);

    if (n <= m->resume.n) {
        return "the prompt is empty";
    }
    if (m->resume.n >= m->max_tokens) {
        return "a resumed request must have tokens left to generate";
    }
    n -= m->resume.n; /* the prompt alone: max_tokens counts the resumed ones */
    if (n >= c->seq_len) {
        return "the prompt does not fit the model's context";
    }
    if (m->max_tokens == 0) {
        return "max_tokens must be at least 1";
    }
    if ((uint64_t)n + m->max_tokens > c->seq_len) {
        return "prompt plus max_tokens exceed the model's context";
    }
    if (!(m->temperature >= 0.0f) || m->temperature > 100.0f || !(m->top_p >= 0.0f) ||
        m->top_p > 1.0f) {
        return "temperature must be in [0, 100] and top_p in [0, 1]";
    }
    for (uint32_t i = 0; i < m->stop_ids.n; i++) {
        if (stop[i] >= c->vocab) {
            return "a stop token id is outside the vocabulary";
        }
    }
    if (!(fabsf(m->presence_penalty) <= 2.0f) || !(fabsf(m->frequency_penalty) <= 2.0f) ||
        !(m->repetition_penalty >= 0.0f && isfinite(m->repetition_penalty)) ||
        !(m->min_p >= 0.0f && m->min_p <= 1.0f)) {
        return "presence and frequency penalties must be in [-2, 2], repetition_penalty > 0 "
               "and min_p in [0, 1]";
    }
    if ((m->flags & (MOON_SERVE_F_EMBED | MOON_SERVE_F_PROMPT_LOGPROBS)) && c->a.colocated) {
        return "embeddings and prompt logprobs need prefill instances (not --colocated)";
    }
    if ((m->flags & MOON_SERVE_F_PROMPT_LOGPROBS) && m->logprobs == 0) {
        return "prompt logprobs need logprobs";
    }
    if (m->logprobs > MOON_LOGPROBS_MAX + 1) {
        return "logprobs asks for more than 20 alternatives";
    }
    if (m->n_choices > MOON_SERVE_MAX_CHOICES) {
        return "n_choices is more than 16";
    }
    if (m->n_choices > 1 &&
        (m->resume.n > 0 || (m->flags & (MOON_SERVE_F_EMBED | MOON_SERVE_F_PROMPT_LOGPROBS)))) {
        return "several choices cannot be resumed, embedded or ask for prompt logprobs";
    }
    if (m->logit_bias.n % 2 != 0) {
        return "logit_bias must hold (id, bias) pairs";
    }
    for (uint32_t i = 0; i < m->logit_bias.n; i += 2) {
        const uint32_t *b = MOON_SPAN_PTR(m, m->logit_bias);
        float           v;
        memcpy(&v, &b[i + 1], 4);
        if (b[i] >= c->vocab || !isfinite(v)) {
            return "a logit_bias token id is outside the vocabulary (or its bias is not finite)";
        }
    }
    return NULL;
}

/* The PREFILL of a placed request; bkeys: its n / block_tokens block keys
 * (copied). */
static moon_serve_prefill_t *build_prefill(conductor_t *c, const moon_serve_submit_t *m,
                                           const int32_t *ids, uint32_t n,
                                           const moon_kv_key_t *bkeys, moon_addr_t decode,
                                           uint64_t now)
{
    uint32_t n_keys = n / c->a.block_tokens;
    size_t tail = (size_t)n * 4 + (size_t)n_keys * 16 + (size_t)m->stop_ids.n * 4 + m->stop_strs.n +
                  64 + (size_t)m->logit_bias.n * 4 + m->grammar.n;
    moon_serve_prefill_t *p = moon_msg_new(MOON_MSG_SERVE_PREFILL, tail);
    uint32_t             *t;
    moon_kv_key_t        *keys;

    if (p == NULL) {
        return NULL;
    }
    p->reply_to   = m->reply_to;
    p->request_id = m->request_id;
    p->decode     = decode;
    p->slo_class  = m->slo_class;
    p->arrival_ns = now;
    p->n_resumed  = m->resume.n;
    MOON_SERVE_COPY_SAMPLING(p, m);
    p->weight_version = c->gate.serving;

    t    = moon_msg_span_alloc(p, &p->tokens, n, 4, 0);
    keys = n_keys ? moon_msg_span_alloc(p, &p->keys, 2 * n_keys, 8, 0) : NULL;
    if (t == NULL || (n_keys && keys == NULL) ||
        moon_serve_copy_span(p, &p->stop_ids, m, m->stop_ids, 4, 0) != MOON_OK ||
        moon_serve_copy_span(p, &p->logit_bias, m, m->logit_bias, 4, 0) != MOON_OK ||
        moon_serve_copy_span(p, &p->stop_strs, m, m->stop_strs, 1, 0) != MOON_OK ||
        moon_serve_copy_span(p, &p->grammar, m, m->grammar, 1, 0) != MOON_OK) {
        moon_msg_release(&p->hdr);
        return NULL;
    }
    memcpy(t, ids, (size_t)n * 4);
    if (n_keys) {
        memcpy(keys, bkeys, (size_t)n_keys * sizeof(*keys));
    }
    return p;
}

/* 1 when the prefix index has every shard's snapshot (and no gap since). */
static int index_synced(const conductor_t *c)
{
    for (uint32_t s = 0; c->index != NULL && s < c->a.n_shards; s++) {
        if (!moon_kv_index_synced(c->index, s)) {
            return 0;
        }
    }
    return c->index != NULL;
}

/* Asks the policy: the prompt's full blocks (keys: all n / block_tokens of
 * them, hashed once by the caller), how many the store holds (the index)
 * and each caching instance's cache holds (local, n_inst entries: as far as
 * its events told; the instance checks), the SLOs. */
static moon_status_t place(moon_actor_t *self, conductor_t *c, const moon_serve_submit_t *m,
                           const moon_kv_key_t *keys, uint32_t n, moon_sched_decision_t *d,
                           moon_sched_request_t *req, uint32_t *local)
{
    uint32_t n_blocks = n / c->a.block_tokens, store = 0;
    /* a request that wants every prompt position's rows computes its whole
     * prompt: no cached block helps it, so none weighs in its placement */
    size_t got = (m->flags & (MOON_SERVE_F_EMBED | MOON_SERVE_F_PROMPT_LOGPROBS)) ? 0 : n_blocks;

    if (c->index != NULL && got > 0) {
        store = moon_kv_index_prefix(c->index, keys, (uint32_t)got);
    }
    memset(local, 0, c->n_inst * sizeof(*local));
    for (uint32_t i = 0; i < c->n_inst; i++) {
        if (got > 0 && c->cached[i] != NULL && c->view.inst[i].alive &&
            moon_kv_index_synced(c->cached[i], 0)) {
            local[i] = moon_kv_index_prefix(c->cached[i], keys, (uint32_t)got);
        }
    }
    memset(req, 0, sizeof(*req));
    req->tag           = ++c->next_tag;
    req->prompt_tokens = n;
    req->block_tokens  = c->a.block_tokens;
    req->n_blocks      = n_blocks;
    req->store_blocks  = store;
    req->local_blocks  = local;
    req->max_tokens    = m->max_tokens;
    req->ttft_slo_s    = c->a.ttft_slo_s;
    req->tbt_slo_s     = c->a.tbt_slo_s;
    req->now_s         = now_s(self);
    req->affinity      = m->session.n > 0 ? moon_plugin_affinity(MOON_SPAN_PTR(m, m->session)) : 0;
    return moon_sched_policy_decide(c->policy, &c->view, req, d);
}

/* Blocks the prefill instance fetches from the store after its local ones.
 * A pull from another prefill instance's cache (fetch_from >= 0) is not
 * done: the store holds what every prefill instance computed (unless it
 * evicted it), so those blocks come from the store, the rest are computed. */
static uint32_t store_fetch(const moon_sched_request_t *req, const moon_sched_decision_t *d)
{
    uint32_t end = d->local_blocks + d->fetch_blocks;

    if (d->fetch_from >= 0) {
        end = MOON_MIN(end, req->store_blocks);
    }
    return end > d->local_blocks ? end - d->local_blocks : 0;
}

static void admit(moon_actor_t *self, conductor_t *c, const moon_serve_submit_t *m, int32_t *ids,
                  uint32_t n);

static moon_status_t conductor_on_submit(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t               *c   = moon_actor_state(self);
    const moon_serve_submit_t *m   = (const void *)msg;
    const char                *why = NULL;
    uint32_t                   n   = 0;
    int32_t                   *ids;
    moon_status_t              status;

    c->stats.n_submitted++;
    if (c->a.busy_ns != NULL) {
        atomic_store_explicit(c->a.busy_ns, moon_now(moon_actor_runtime(self)),
                              memory_order_relaxed);
    }
    if (m->reply_to == MOON_ADDR_NONE) {
        return MOON_OK; /* nobody to answer */
    }
    if (find_req(c, m->reply_to, m->request_id) != NULL) {
        reject(self, c, m, MOON_ERR_EXISTS, "a request with this id is already running");
        return MOON_OK;
    }
    ids = prompt_tokens(c, m, &n, &why);
    if (ids == NULL) {
        reject(self, c, m, MOON_ERR_INVALID_PARAM, why);
        return MOON_OK;
    }
    why = check_params(c, m, n);
    if (why != NULL) {
        reject(self, c, m, MOON_ERR_INVALID_PARAM, why);
        moon_free(ids);
        return MOON_OK;
    }
    status = moon_plugin_gate_filter(c->plugins, self, m, ids, n);
    if (status == MOON_INPROGRESS) {
        return MOON_OK; /* a request filter's verdict (or its deadline) goes on with it */
    }
    if (status != MOON_OK) {
        reject(self, c, m, MOON_ERR_NO_RESOURCE, "too many requests wait for request filters");
        moon_free(ids);
        return MOON_OK;
    }
    admit(self, c, m, ids, n);
    return MOON_OK;
}

/* Places a checked request (ids: its tokens, freed here) and sends it to its
 * prefill instance, or answers why not. */
static void admit(moon_actor_t *self, conductor_t *c, const moon_serve_submit_t *m, int32_t *ids,
                  uint32_t n)
{
    creq_t               *r = NULL;
    moon_serve_prefill_t *p;
    moon_sched_decision_t d;
    moon_sched_request_t  req;
    moon_kv_key_t        *bkeys;
    uint32_t              local[2 * COND_MAX_INSTANCES], n_blocks;
    moon_status_t         status;
    uint64_t              now = moon_now(moon_actor_runtime(self));

    if (c->n_free_reqs > 0) {
        r = &c->reqs[c->free_reqs[c->n_free_reqs - 1]];
    }
    if (r == NULL) {
        c->stats.n_rejected++;
        answer(self, m->reply_to, m->request_id, m->n_choices, MOON_FINISH_REJECTED,
               MOON_ERR_NO_RESOURCE, n, "too many requests in flight");
        moon_plugin_gate_rejected(c->plugins, self, m, n, MOON_ERR_NO_RESOURCE, 429,
                                  "too many requests in flight");
        moon_free(ids);
        return;
    }
    /* the prompt's block keys, hashed once: the placement and the PREFILL */
    n_blocks = n / c->a.block_tokens;
    bkeys    = n_blocks > 0 ? moon_malloc((size_t)n_blocks * sizeof(*bkeys)) : NULL;
    if (n_blocks > 0) {
        size_t got = 0;
        if (bkeys == NULL) {
            reject(self, c, m, MOON_ERR_NO_MEMORY, "no memory for the prompt's block keys");
            moon_free(ids);
            return;
        }
        moon_kv_keys_of_tokens(&c->a.tag, c->a.block_tokens, ids, n, bkeys, n_blocks, &got);
    }
    status = place(self, c, m, bkeys, n, &d, &req, local);
    if (status != MOON_OK || d.rejected != MOON_SCHED_ADMIT) {
        const char *w = status != MOON_OK ? "no prefill or decode instance is up" : d.reason;
        c->stats.n_rejected++;
        MOON_LOG_LIMITED(MOON_LOG_INFO, "conductor: request %llu rejected: %s",
                         (unsigned long long)m->request_id, w);
        answer(self, m->reply_to, m->request_id, m->n_choices, MOON_FINISH_REJECTED,
               status != MOON_OK ? status : MOON_ERR_NO_RESOURCE, n, w);
        moon_plugin_gate_rejected(c->plugins, self, m, n, MOON_ERR_NO_RESOURCE, 429, w);
        moon_free(bkeys);
        moon_free(ids);
        return;
    }
    p = build_prefill(c, m, ids, n, bkeys, c->inst[d.decode].addr, now);
    moon_free(bkeys);
    moon_free(ids);
    if (p != NULL) {
        /* the plan when the index knows the store; else the instance asks */
        p->n_local = d.local_blocks;
        p->n_fetch = index_synced(c) ? store_fetch(&req, &d) : MOON_SERVE_FETCH_ASK;
    }
    if (p == NULL || moon_send(self, c->inst[d.prefill].addr, &p->hdr) != MOON_OK) {
        moon_msg_release(p ? &p->hdr : NULL);
        reject(self, c, m, MOON_ERR_NO_MEMORY, "the request could not be placed");
        return;
    }
    moon_sched_view_commit(&c->view, &req, &d);
    *r = (creq_t){.used       = 1,
                  .reply_to   = m->reply_to,
                  .request_id = m->request_id,
                  .prefill    = (uint32_t)d.prefill,
                  .decode     = (uint32_t)d.decode,
                  .n_tokens   = n,
                  .n_choices  = choices_of(m->n_choices),
                  .tag        = req.tag};
    {
        req_key_t k = {m->reply_to, m->request_id, (uint32_t)(r - c->reqs)};
        /* absent (checked above) in a table fixed at max_requests: cannot fail */
        MOON_CHECK(moon_htab_insert(c->req_index, &k, &k, NULL) == MOON_OK);
        c->n_free_reqs--;
    }
    c->n_reqs++;
    c->stats.n_placed++;
    r->version = c->gate.serving;
    moon_plugin_gate_admitted(c->plugins, self, m, n, d.prefill, d.decode);
}

/* A request filter decided (plugin_hooks.h): place the request, or answer
 * the filter's refusal with its HTTP status. */
static void filtered(moon_actor_t *self, conductor_t *c, moon_plugin_outcome_t *o)
{
    const moon_serve_submit_t *m = o->m;
    moon_serve_done_t         *d;

    if (!o->rejected) {
        admit(self, c, m, o->ids, o->n);
        o->ids = NULL; /* admit freed them */
        moon_plugin_outcome_fini(o);
        return;
    }
    c->stats.n_rejected++;
    MOON_LOG_LIMITED(MOON_LOG_INFO, "conductor: request %llu refused by a filter (%u): %s",
                     (unsigned long long)m->request_id, o->http_status, o->message);
    for (uint32_t i = 0; i < choices_of(m->n_choices); i++) {
        d = moon_msg_new(MOON_MSG_SERVE_DONE, strlen(o->message) + 2);
        if (d == NULL) {
            break;
        }
        d->request_id       = m->request_id + i;
        d->finish           = MOON_FINISH_REJECTED;
        d->status           = MOON_ERR_PEER_REJECTED;
        d->n_prompt         = o->n;
        d->prefill_instance = -1;
        d->decode_instance  = -1;
        d->http_status      = o->http_status;
        d->retry_after_s    = o->retry_after_s;
        moon_msg_set_str(d, &d->text, "");
        moon_msg_set_str(d, &d->message, o->message);
        moon_tell(self, m->reply_to, &d->hdr);
    }
    moon_plugin_gate_rejected(c->plugins, self, m, o->n, MOON_ERR_PEER_REJECTED, o->http_status,
                              o->message);
    moon_plugin_outcome_fini(o);
}

static moon_status_t conductor_on_verdict(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t          *c = moon_actor_state(self);
    moon_plugin_outcome_t o;

    if (moon_plugin_gate_on_verdict(c->plugins, self, msg, &o) == MOON_OK) {
        filtered(self, c, &o);
    }
    return MOON_OK;
}

static moon_status_t conductor_on_timer(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t          *c = moon_actor_state(self);
    moon_plugin_outcome_t o;

    if (moon_plugin_gate_on_timer(c->plugins, self, msg, &o) == MOON_OK) {
        filtered(self, c, &o);
    }
    return MOON_OK;
}

static void forward_cancel(moon_actor_t *self, moon_addr_t to, const moon_serve_cancel_t *m)
{
    moon_serve_cancel_t *f = moon_msg_new(MOON_MSG_SERVE_CANCEL, 0);

    if (f != NULL) {
        f->reply_to   = m->reply_to;
        f->request_id = m->request_id;
        moon_tell(self, to, &f->hdr);
    }
}

/* The request whose choice id is (choice i: request_id + i), NULL if none. */
static creq_t *find_choice(conductor_t *c, moon_addr_t reply_to, uint64_t id)
{
    for (uint32_t i = 0; i < MOON_SERVE_MAX_CHOICES && i <= id; i++) {
        creq_t *r = find_req(c, reply_to, id - i);
        if (r != NULL) {
            return r->n_choices > i ? r : NULL;
        }
    }
    return NULL;
}

/* CANCEL of one choice goes to the decode instance (which ends it alone,
 * the others go on); once every choice is cancelled, to the prefill too. */
static moon_status_t conductor_on_cancel(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t               *c = moon_actor_state(self);
    const moon_serve_cancel_t *m = (const void *)msg;
    creq_t                    *r = find_choice(c, m->reply_to, m->request_id);
    uint32_t                   n = 0;

    if (r == NULL &&
        moon_plugin_gate_cancel(c->plugins, self, m->reply_to, m->request_id, &n) == MOON_OK) {
        answer(self, m->reply_to, m->request_id, 1, MOON_FINISH_CANCELLED, MOON_ERR_CANCELED, n,
               "cancelled while request filters decided");
        return MOON_OK;
    }
    if (r == NULL) {
        return MOON_OK; /* already over (its DONE is on its way) or never placed */
    }
    r->cancelled |= 1u << (m->request_id - r->request_id);
    if (r->cancelled == (1u << r->n_choices) - 1) {
        moon_serve_cancel_t all = {.reply_to = m->reply_to, .request_id = r->request_id};
        forward_cancel(self, c->inst[r->prefill].addr, &all);
    }
    forward_cancel(self, c->inst[r->decode].addr, m);
    return MOON_OK;
}

/* Nothing runs on the old weights any more: every instance frees them,
 * and every store shard removes the KV blocks they computed. */
static void retire_old(moon_actor_t *self, conductor_t *c)
{
    for (uint32_t s = 0; c->index != NULL && s < c->a.n_shards; s++) {
        moon_store_retire_t *q = moon_msg_new(MOON_MSG_STORE_RETIRE, 0);
        if (q != NULL) {
            q->model_id = c->a.tag.model_id;
            q->version  = c->gate.serving;
            moon_tell(self, c->shards[s], &q->hdr);
        }
    }
    for (uint32_t i = 0; i < c->n_inst; i++) {
        moon_weights_retire_t *q =
            c->inst[i].hello ? moon_msg_new(MOON_MSG_WEIGHTS_RETIRE, 0) : NULL;
        if (q != NULL) {
            q->version = c->gate.old;
            moon_tell(self, c->inst[i].addr, &q->hdr);
        }
    }
}

/* The request's entry, its load accounting and its hold on its weight
 * version end (the last request on the old version retires it). */
static void end_req(moon_actor_t *self, conductor_t *c, creq_t *r, uint32_t finish)
{
    req_key_t k = {r->reply_to, r->request_id, 0};

    moon_sched_view_release(&c->view, r->decode, r->tag);
    MOON_CHECK(moon_htab_remove(c->req_index, &k) == MOON_OK);
    c->free_reqs[c->n_free_reqs++] = (uint32_t)(r - c->reqs);
    r->used                        = 0;
    c->n_reqs--;
    if (finish < MOON_ARRAY_SIZE(c->stats.n_finished)) {
        c->stats.n_finished[finish]++;
    }
    if (moon_weights_gate_release(&c->gate, r->version)) {
        retire_old(self, c);
    }
}

static moon_status_t conductor_on_released(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t                 *c = moon_actor_state(self);
    const moon_serve_released_t *m = (const void *)msg;
    creq_t                      *r = find_req(c, m->reply_to, m->request_id);

    if (r != NULL) {
        end_req(self, c, r, m->finish);
        moon_plugin_gate_finished(c->plugins, self, m->reply_to, m->request_id, m->finish,
                                  m->n_completion);
    }
    return MOON_OK;
}

/* The broadcaster: every instance holds version now. New requests run on
 * it (their keys salted with it, so no block of the old weights serves
 * them); the ones in flight finish on theirs. */
static moon_status_t conductor_on_flip(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t               *c = moon_actor_state(self);
    const moon_weights_flip_t *m = (const void *)msg;
    moon_weights_flipped_t    *q;
    uint32_t                   n_old = 0;
    uint64_t                   old   = c->gate.serving;

    if (m->version <= c->gate.serving || c->gate.draining) {
        MOON_WARN("conductor: flip to weight version %llu ignored (serving %llu%s)",
                  (unsigned long long)m->version, (unsigned long long)c->gate.serving,
                  c->gate.draining ? ", the previous one still drains" : "");
        return MOON_OK;
    }
    for (uint32_t i = 0; i < c->a.max_requests; i++) {
        n_old += c->reqs[i].used && c->reqs[i].version == old;
    }
    c->a.tag.weight_version = m->version;
    /* the prefix indexes count the new version's blocks only: none of the
     * old one is ever found for a new request */
    for (uint32_t i = 0; i <= 2 * COND_MAX_INSTANCES; i++) {
        moon_kv_index_t *x = i == 2 * COND_MAX_INSTANCES ? c->index : c->cached[i];
        if (x != NULL && moon_kv_index_set_tag(x, &c->a.tag) != MOON_OK) {
            MOON_WARN("conductor: no memory to switch a prefix index to weight version %llu: "
                      "it finds nothing until the next switch",
                      (unsigned long long)m->version);
        }
    }
    MOON_INFO("conductor: new requests run on weight version %llu (%u still on %llu)",
              (unsigned long long)m->version, n_old, (unsigned long long)old);
    if (moon_weights_gate_flip(&c->gate, m->version, n_old)) {
        retire_old(self, c);
    }
    q = moon_msg_new(MOON_MSG_WEIGHTS_FLIPPED, 0);
    if (q != NULL) {
        q->version     = m->version;
        q->old_version = old;
        moon_tell(self, msg->src, &q->hdr);
    }
    return MOON_OK;
}

static moon_status_t conductor_on_hello(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t              *c = moon_actor_state(self);
    const moon_serve_hello_t *m = (const void *)msg;
    int32_t                   i = view_index(c, m->role, m->instance);
    moon_sched_instance_t    *v;

    if (i < 0) {
        MOON_WARN("conductor: hello of instance %u (role %u) ignored: not in the deployment",
                  m->instance, m->role);
        return MOON_OK;
    }
    v                            = &c->view.inst[i];
    v->id                        = m->instance;
    v->role                      = m->role == MOON_SERVE_ROLE_DECODE      ? MOON_SCHED_ROLE_DECODE
                                   : m->role == MOON_SERVE_ROLE_COLOCATED ? MOON_SCHED_ROLE_COLOCATED
                                                                          : MOON_SCHED_ROLE_PREFILL;
    v->alive                     = 1;
    v->max_batch                 = m->max_batch;
    v->kv_blocks_total           = m->total_blocks;
    v->kv_blocks_free            = m->total_blocks;
    v->cost.a0                   = m->a0;
    v->cost.a1                   = m->a1;
    v->cost.a2                   = m->a2;
    v->cost.d0                   = m->d0;
    v->cost.d1                   = m->d1;
    v->cost.d2                   = m->d2;
    v->cost.block_bytes          = c->block_bytes;
    v->cost.xfer_bytes_per_s     = c->a.kv_link_bytes_per_s;
    v->cost.xfer_latency_s       = 20e-6;
    c->inst[i].addr              = msg->src;
    c->inst[i].hello             = 1;
    c->inst[i].last.instance     = m->instance;
    c->inst[i].last.role         = m->role;
    c->inst[i].last.total_blocks = m->total_blocks;
    c->inst[i].last.free_blocks  = m->total_blocks;
    moon_monitor(self, msg->src, (uint64_t)i);
    MOON_INFO("conductor: %s instance %u is up",
              m->role == MOON_SERVE_ROLE_DECODE      ? "decode"
              : m->role == MOON_SERVE_ROLE_COLOCATED ? "colocated"
                                                     : "prefill",
              m->instance);
    return MOON_OK;
}

static moon_status_t conductor_on_load(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t             *c = moon_actor_state(self);
    const moon_serve_load_t *m = (const void *)msg;
    int32_t                  i = view_index(c, m->role, m->instance);
    moon_sched_report_t      rep;

    if (i < 0 || !c->inst[i].hello || c->inst[i].addr != msg->src) {
        return MOON_OK; /* before its HELLO, or from an instance not in the deployment */
    }
    c->inst[i].last = *m;
    memset(&rep, 0, sizeof(rep));
    rep.now_s           = now_s(self);
    rep.queue_s         = -1.0;
    rep.queue_reqs      = m->queued_reqs;
    rep.queue_tokens    = m->queued_tokens;
    rep.running         = m->running;
    rep.block_tokens    = c->a.block_tokens;
    rep.kv_blocks_free  = m->free_blocks;
    rep.kv_blocks_total = m->total_blocks;
    moon_sched_view_report(&c->view, (uint32_t)i, &rep);
    return MOON_OK;
}

static void subscribe(moon_actor_t *self, conductor_t *c, uint32_t shard, int unsubscribe_first)
{
    for (int k = unsubscribe_first ? 0 : 1; k < 2; k++) {
        moon_store_subscribe_t *q = moon_msg_new(MOON_MSG_STORE_SUBSCRIBE, 0);
        if (q == NULL) {
            return; /* the next gap asks again */
        }
        q->unsubscribe = k == 0;
        moon_tell(self, c->shards[shard], &q->hdr);
    }
}

static moon_status_t conductor_on_events(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t               *c = moon_actor_state(self);
    const moon_store_events_t *m = (const void *)msg;
    moon_status_t              status;

    if (c->index == NULL || m->shard_id >= c->a.n_shards || msg->src != c->shards[m->shard_id]) {
        return MOON_OK;
    }
    status = moon_kv_index_apply(c->index, m->shard_id, m->seq, m->snapshot,
                                 MOON_SPAN_PTR(m, m->ev), m->ev.n / MOON_STORE_EVENT_U64S);
    if (m->snapshot == 0) { /* live events only: a snapshot repeats what was told */
        moon_plugin_gate_store(c->plugins, self, MOON_SPAN_PTR(m, m->ev),
                               m->ev.n / MOON_STORE_EVENT_U64S, MOON_STORE_EVENT_U64S);
    }
    if (status == MOON_ERR_CORRUPT || status == MOON_ERR_NO_MEMORY) {
        /* a lost message: the shard's part is dropped; its new snapshot rebuilds it */
        MOON_WARN("conductor: events of store shard %u lost (%s): subscribing again", m->shard_id,
                  moon_status_str(status));
        c->stats.n_index_resyncs++;
        subscribe(self, c, m->shard_id, 1);
    }
    return MOON_OK;
}

/* A prefill (or colocated) instance's cache changed: its index follows; a
 * gap asks the instance for a snapshot. */
static moon_status_t conductor_on_cache_events(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t                     *c = moon_actor_state(self);
    const moon_serve_cache_events_t *m = (const void *)msg;
    int32_t i = view_index(c, c->a.colocated ? MOON_SERVE_ROLE_COLOCATED : MOON_SERVE_ROLE_PREFILL,
                           m->instance);
    moon_serve_cache_sync_t *q;
    moon_status_t            status;

    if (i < 0 || c->cached[i] == NULL || !c->inst[i].hello || c->inst[i].addr != msg->src) {
        return MOON_OK; /* not (yet) known: its next events show a gap, then it resyncs */
    }
    status = moon_kv_index_apply(c->cached[i], 0, m->seq, m->snapshot, MOON_SPAN_PTR(m, m->ev),
                                 m->ev.n / MOON_STORE_EVENT_U64S);
    if (status != MOON_ERR_CORRUPT && status != MOON_ERR_NO_MEMORY) {
        return MOON_OK;
    }
    MOON_WARN("conductor: cache events of %s %u lost (%s): asking for a snapshot",
              c->a.colocated ? "colocated instance" : "prefill", m->instance,
              moon_status_str(status));
    c->stats.n_index_resyncs++;
    q = moon_msg_new(MOON_MSG_SERVE_CACHE_SYNC, 0);
    if (q != NULL) {
        q->instance = m->instance;
        moon_tell(self, msg->src, &q->hdr);
    }
    return MOON_OK;
}

static moon_status_t conductor_on_store_reply(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    (void)self;
    (void)msg; /* subscription acknowledgements: the snapshot that follows is what counts */
    return MOON_OK;
}

/* Tells the instance at view index `to` (if alive) that `lost`, which
 * served request r with it, is gone. */
static void tell_lost(moon_actor_t *self, conductor_t *c, const creq_t *r, uint32_t to,
                      moon_addr_t lost)
{
    moon_serve_lost_t *m;

    if (to >= c->n_inst || !c->view.inst[to].alive) {
        return; /* gone too: its own loss ends the request */
    }
    m = moon_msg_new(MOON_MSG_SERVE_LOST, 0);
    if (m == NULL) {
        MOON_ERROR("conductor: out of memory telling an instance of request %llu's loss",
                   (unsigned long long)r->request_id);
        return; /* the gateway's request deadline ends it */
    }
    m->reply_to   = r->reply_to;
    m->request_id = r->request_id;
    m->lost       = lost;
    m->n_choices  = r->n_choices;
    moon_tell(self, c->inst[to].addr, &m->hdr);
}

static moon_status_t conductor_on_down(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t           *c = moon_actor_state(self);
    const moon_sys_down_t *m = (const void *)msg;

    if (m->ref >= COND_SHARD_REF_BASE) {
        uint32_t s = (uint32_t)(m->ref - COND_SHARD_REF_BASE);
        if (c->index != NULL && s < c->a.n_shards) {
            MOON_WARN("conductor: store shard %u is down: its blocks leave the prefix index", s);
            moon_kv_index_drop_shard(c->index, s);
        }
        return MOON_OK;
    }
    if (m->ref < c->n_inst && c->inst[m->ref].addr == m->actor) {
        uint32_t i = (uint32_t)m->ref, n_ended = 0, n_told = 0;

        c->view.inst[i].alive = 0;
        c->inst[i].hello      = 0;
        if (c->cached[i] != NULL) {
            moon_kv_index_drop_shard(c->cached[i], 0); /* its cache went with it */
        }
        /* No request that touched it may wait for it. A decode instance's
         * requests end here (resumable: the gateway submits them again
         * with the tokens it got); their prefill instance drops them. A
         * prefill instance's requests are ended or kept by their decode
         * instance, which alone knows whether all of their KV is in. */
        for (uint32_t k = 0; k < c->a.max_requests; k++) {
            creq_t *r = &c->reqs[k];

            if (!r->used) {
                continue;
            }
            if (r->decode == i) {
                /* every choice: the conductor does not know which ended */
                answer(self, r->reply_to, r->request_id, r->n_choices, MOON_FINISH_ERROR,
                       MOON_ERR_PEER_LOST, r->n_tokens,
                       "the decode instance serving the request was lost");
                if (r->prefill != i) {
                    tell_lost(self, c, r, r->prefill, m->actor);
                }
                end_req(self, c, r, MOON_FINISH_ERROR);
                n_ended++;
            } else if (r->prefill == i) {
                tell_lost(self, c, r, r->decode, m->actor);
                n_told++;
            }
        }
        MOON_WARN("conductor: instance %u (role %u) is down (%s): %u requests ended, %u handed "
                  "to their decode instance",
                  c->inst[i].last.instance, c->inst[i].last.role, moon_status_str(m->reason),
                  n_ended, n_told);
    }
    return MOON_OK;
}

/* Sums the reports of the instances up (a lost one's last report is stale:
 * it runs nothing any more). */
static void sum_instances(const cinst_t *t, uint32_t n, moon_serve_stats_reply_t *m, uint32_t *used,
                          uint32_t *total, uint32_t *alive, uint32_t *up)
{
    for (uint32_t i = 0; i < n; i++) {
        alive[i] = t[i].hello != 0;
        used[i]  = alive[i] ? t[i].last.total_blocks - t[i].last.free_blocks : 0;
        total[i] = alive[i] ? t[i].last.total_blocks : 0;
        *up += alive[i];
        m->store_hit_tokens += t[i].last.n_store_hit_tokens;
        m->computed_tokens += t[i].last.n_computed_tokens;
        if (alive[i]) {
            m->running += t[i].last.running;
            m->waiting += t[i].last.queued_reqs;
        }
    }
}

static moon_status_t conductor_on_stats(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t              *c = moon_actor_state(self);
    uint32_t                  n = c->n_inst;
    moon_serve_stats_reply_t *m =
        moon_msg_new(MOON_MSG_SERVE_STATS_REPLY, 8 * 8 + (size_t)n * 12 + 24);
    uint64_t *fin;
    uint32_t *used, *total, *alive;

    if (m == NULL) {
        return MOON_OK;
    }
    m->req         = ((const moon_serve_stats_req_t *)msg)->req;
    m->n_submitted = c->stats.n_submitted;
    m->n_placed    = c->stats.n_placed;
    m->n_rejected  = c->stats.n_rejected;
    m->n_errors    = c->stats.n_errors;
    m->in_flight   = c->n_reqs;
    m->n_prefill   = c->a.n_prefill;
    fin            = moon_msg_span_alloc(m, &m->finished, 5, 8, 0);
    used           = moon_msg_span_alloc(m, &m->blocks_used, n, 4, 0);
    total          = moon_msg_span_alloc(m, &m->blocks_total, n, 4, 0);
    alive          = moon_msg_span_alloc(m, &m->inst_up, n, 4, 0);
    if (fin == NULL || used == NULL || total == NULL || alive == NULL) {
        moon_msg_release(&m->hdr);
        return MOON_OK;
    }
    memcpy(fin, c->stats.n_finished, sizeof(c->stats.n_finished));
    sum_instances(c->inst, c->a.n_prefill, m, used, total, alive, &m->n_prefill_up);
    sum_instances(c->inst + c->a.n_prefill, c->a.n_decode, m, used + c->a.n_prefill,
                  total + c->a.n_prefill, alive + c->a.n_prefill, &m->n_decode_up);
    moon_tell(self, msg->src, &m->hdr);
    return MOON_OK;
}

static void conductor_fini(moon_actor_t *self);

static moon_status_t conductor_init(moon_actor_t *self, const void *args)
{
    conductor_t               *c = moon_actor_state(self);
    const moon_model_config_t *mc;
    moon_sched_config_t        sc;
    moon_status_t              status;

    c->a   = *(const moon_conductor_args_t *)args;
    c->tok = moon_model_tokenizer(c->a.model);
    if (c->a.max_requests == 0) {
        c->a.max_requests = 4096;
    }
    if (c->a.kv_link_bytes_per_s <= 0.0) {
        c->a.kv_link_bytes_per_s = 10e9;
    }
    if (c->tok == NULL || c->a.block_tokens == 0 || (c->a.n_prefill == 0 && !c->a.colocated) ||
        c->a.n_decode == 0 || c->a.n_prefill + c->a.n_decode > 2 * COND_MAX_INSTANCES ||
        c->a.n_shards > COND_MAX_INSTANCES) {
        MOON_ERROR("conductor: the model needs a tokenizer, the deployment a block size, 1-%u "
                   "instances of each role and at most %u shards",
                   COND_MAX_INSTANCES, COND_MAX_INSTANCES);
        return MOON_ERR_INVALID_PARAM;
    }
    mc             = moon_model_config(c->a.model);
    c->vocab       = mc->vocab_size;
    c->seq_len     = mc->seq_len;
    c->block_bytes = c->a.kv_block_bytes > 0 ? c->a.kv_block_bytes
                                             : 2ull * mc->n_layers * mc->n_kv_heads * mc->head_dim *
                                                   c->a.block_tokens * 4;
    c->n_inst      = c->a.n_prefill + c->a.n_decode;
    c->a.shards    = NULL;
    if (c->a.n_shards > 0) { /* a colocated cluster may have none (and shards NULL) */
        memcpy(c->shards, ((const moon_conductor_args_t *)args)->shards,
               c->a.n_shards * sizeof(moon_addr_t));
    }
    moon_sched_config_default(&sc);
    sc.seed         = c->a.seed;
    sc.early_reject = c->a.ttft_slo_s > 0.0 || c->a.tbt_slo_s > 0.0;
    if (c->a.balance_threshold > 0.0) {
        sc.balance_threshold = c->a.balance_threshold;
    }
    if (c->a.shed_after != 0.0) { /* out of [0, 1]: the policy refuses it */
        sc.shed_after = c->a.shed_after;
    }
    if (c->a.shed_share != 0.0) {
        sc.shed_share = c->a.shed_share;
    }
    c->reqs      = moon_calloc(c->a.max_requests, sizeof(*c->reqs));
    c->free_reqs = moon_calloc(c->a.max_requests, sizeof(*c->free_reqs));
    c->inst      = moon_calloc(c->n_inst, sizeof(*c->inst));
    status       = c->reqs && c->free_reqs && c->inst ? moon_sched_view_init(&c->view, c->n_inst)
                                                      : MOON_ERR_NO_MEMORY;
    if (status == MOON_OK) {
        status = moon_htab_create(&req_index_type, NULL, c->a.max_requests, MOON_HTAB_FIXED,
                                  &c->req_index);
    }
    for (uint32_t i = 0; status == MOON_OK && i < c->a.max_requests; i++) {
        c->free_reqs[c->n_free_reqs++] = c->a.max_requests - 1 - i; /* slot 0 first */
    }
    if (status == MOON_OK) {
        const char *policy = c->a.policy != NULL ? c->a.policy : MOON_SCHED_POLICY_DEFAULT;

        status = moon_sched_policy_create(policy, &sc, &c->policy);
        if (status != MOON_OK) {
            MOON_ERROR("conductor: policy '%s' refused (%s): an unknown name or an "
                       "out-of-range option",
                       policy, moon_status_str(status));
        }
    }
    if (status == MOON_OK && c->a.n_shards > 0) {
        status = moon_store_msgs_register(); /* no other store user may run on this rank */
    }
    if (status == MOON_OK && c->a.n_shards > 0) {
        status = moon_kv_index_create(c->a.n_shards, &c->a.tag, &c->index);
    }
    for (uint32_t i = 0; status == MOON_OK && keeps_cache(c, i); i++) {
        status = moon_kv_index_create(1, &c->a.tag, &c->cached[i]);
    }
    if (status == MOON_OK) {
        status = moon_plugin_gate_create(c->a.max_requests, &c->plugins);
    }
    for (uint32_t s = 0; status == MOON_OK && s < c->a.n_shards; s++) {
        moon_monitor(self, c->shards[s], COND_SHARD_REF_BASE + s);
        subscribe(self, c, s, 0);
    }
    if (status != MOON_OK) {
        conductor_fini(self);
        return status;
    }
    MOON_INFO("conductor: policy %s, ttft slo %.3f s, tbt slo %.3f s",
              moon_sched_policy_name(c->policy), c->a.ttft_slo_s, c->a.tbt_slo_s);
    return MOON_OK;
}

static void conductor_fini(moon_actor_t *self)
{
    conductor_t *c = moon_actor_state(self);

    moon_kv_index_destroy(c->index);
    for (uint32_t i = 0; i < MOON_ARRAY_SIZE(c->cached); i++) {
        moon_kv_index_destroy(c->cached[i]);
        c->cached[i] = NULL;
    }
    moon_sched_policy_destroy(c->policy);
    moon_plugin_gate_destroy(c->plugins);
    c->plugins = NULL;
    moon_sched_view_fini(&c->view);
    moon_htab_destroy(c->req_index);
    moon_free(c->free_reqs);
    moon_free(c->reqs);
    moon_free(c->inst);
    c->req_index = NULL;
    c->free_reqs = NULL;
    c->index     = NULL;
    c->policy    = NULL;
    c->reqs      = NULL;
    c->inst      = NULL;
}

const moon_actor_ops_t moon_conductor_ops = {
    .name        = "conductor",
    .state_bytes = sizeof(conductor_t),
    .init        = conductor_init,
    .fini        = conductor_fini,
    .on_msg =
        {
            [MOON_MSG_SERVE_SUBMIT]       = conductor_on_submit,
            [MOON_MSG_SERVE_CANCEL]       = conductor_on_cancel,
            [MOON_MSG_SERVE_RELEASED]     = conductor_on_released,
            [MOON_MSG_WEIGHTS_FLIP]       = conductor_on_flip,
            [MOON_MSG_SERVE_LOAD]         = conductor_on_load,
            [MOON_MSG_SERVE_HELLO]        = conductor_on_hello,
            [MOON_MSG_STORE_EVENTS]       = conductor_on_events,
            [MOON_MSG_SERVE_CACHE_EVENTS] = conductor_on_cache_events,
            [MOON_MSG_STORE_REPLY]        = conductor_on_store_reply,
            [MOON_MSG_SYS_DOWN]           = conductor_on_down,
            [MOON_MSG_SERVE_STATS]        = conductor_on_stats,
            [MOON_MSG_PLUGIN_VERDICT]     = conductor_on_verdict,
            [MOON_MSG_SYS_TIMER]          = conductor_on_timer,
        },
};
