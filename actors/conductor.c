/* actors/conductor.c - the conductor: every request enters here. It checks
 * the request, tokenizes a text prompt, computes the prompt's block keys
 * (the store's chained keys under the deployment's tag), places the request
 * on a (prefill, decode) pair from the instances' load reports, and keeps
 * the request's entry until its decode instance releases it, so a CANCEL
 * reaches both instances. Spawned with MOON_SPAWN_CONTROL: never muted.
 * Requests it cannot take are answered at once with DONE (finish error or
 * rejected) and a log line. */
#include "conductor.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "serve_instance.h"

#include <string.h>

#define COND_MAX_INSTANCES 64u

typedef struct {
    moon_addr_t addr;
    uint32_t    role;
    int         alive;
    moon_serve_load_t last; /* the latest report */
    uint32_t    placed;     /* placements since that report */
} cinst_t;

typedef struct {
    int         used;
    moon_addr_t reply_to;
    uint64_t    request_id;
    uint32_t    prefill, decode;
    uint32_t    n_tokens;
} creq_t;

typedef struct {
    moon_conductor_args_t   a;
    const moon_tokenizer_t *tok;
    uint32_t                vocab, seq_len;
    cinst_t                 prefill[COND_MAX_INSTANCES], decode[COND_MAX_INSTANCES];
    uint32_t                n_prefill, n_decode;
    creq_t                 *reqs; /* (max_requests) */
    uint32_t                n_reqs;
    struct {
        uint64_t n_submitted, n_placed, n_rejected, n_errors, n_finished[5];
    } stats;
} conductor_t;

static void answer(moon_actor_t *self, moon_addr_t to, uint64_t id, uint32_t finish,
                   moon_status_t status, uint32_t n_prompt, const char *why)
{
    moon_serve_done_t *m = moon_msg_new(MOON_MSG_SERVE_DONE, strlen(why) + 2);

    if (m == NULL) {
        return;
    }
    m->request_id = id;
    m->finish     = finish;
    m->status     = status;
    m->n_prompt   = n_prompt;
    moon_msg_set_str(m, &m->text, "");
    moon_msg_set_str(m, &m->message, why);
    moon_tell(self, to, &m->hdr);
}

static void reject(moon_actor_t *self, conductor_t *c, const moon_serve_submit_t *m,
                   moon_status_t status, const char *why)
{
    MOON_INFO("conductor: request %llu refused: %s", (unsigned long long)m->request_id, why);
    c->stats.n_errors++;
    answer(self, m->reply_to, m->request_id, MOON_FINISH_ERROR, status, 0, why);
}

/* Least loaded alive instance of a table (load: predicted tokens queued for
 * prefill, running sequences for decode, each counting placements since the
 * last report), round robin among equals. */
static int32_t pick(cinst_t *t, uint32_t n, int prefill, uint32_t *rr)
{
    int32_t  best      = -1;
    uint64_t best_load = UINT64_MAX;

    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (*rr + k) % n;
        uint64_t load;
        if (!t[i].alive) {
            continue;
        }
        load = prefill ? (uint64_t)t[i].last.queued_tokens + t[i].placed
                       : (uint64_t)t[i].last.running + t[i].last.queued_reqs + t[i].placed;
        if (load < best_load) {
            best      = (int32_t)i;
            best_load = load;
        }
    }
    *rr = (*rr + 1) % (n ? n : 1);
    return best;
}

static creq_t *find_req(conductor_t *c, moon_addr_t reply_to, uint64_t id)
{
    for (uint32_t i = 0; i < c->a.max_requests; i++) {
        if (c->reqs[i].used && c->reqs[i].reply_to == reply_to && c->reqs[i].request_id == id) {
            return &c->reqs[i];
        }
    }
    return NULL;
}

/* The prompt's tokens: the client's, or the text tokenized. Returns a
 * malloc'd array or NULL with *why set. */
static int32_t *prompt_tokens(conductor_t *c, const moon_serve_submit_t *m, uint32_t *n_p,
                              const char **why)
{
    int32_t *ids;
    size_t   n = 0;

    if (m->tokens.n > 0) {
        const uint32_t *t = MOON_SPAN_PTR(m, m->tokens);
        ids               = moon_malloc(m->tokens.n * sizeof(*ids));
        for (uint32_t i = 0; ids != NULL && i < m->tokens.n; i++) {
            if (t[i] >= c->vocab) {
                *why = "a prompt token id is outside the vocabulary";
                moon_free(ids);
                return NULL;
            }
            ids[i] = (int32_t)t[i];
        }
        *n_p = m->tokens.n;
    } else {
        const char *text = MOON_SPAN_PTR(m, m->prompt);
        size_t      len  = m->prompt.n;
        ids              = moon_malloc((len + 2) * sizeof(*ids));
        if (ids != NULL && moon_tokenizer_encode(c->tok, text, len, m->flags & MOON_SERVE_F_ADD_BOS,
                                                 ids, len + 2, &n) != MOON_OK) {
            *why = "the prompt could not be tokenized";
            moon_free(ids);
            return NULL;
        }
        *n_p = (uint32_t)n;
    }
    if (ids == NULL) {
        *why = "out of memory";
    }
    return ids;
}

static const char *check_params(const conductor_t *c, const moon_serve_submit_t *m, uint32_t n)
{
    const uint32_t *stop = MOON_SPAN_PTR(m, m->stop_ids);

    if (n == 0) {
        return "the prompt is empty";
    }
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
    return NULL;
}

static moon_serve_prefill_t *build_prefill(conductor_t *c, const moon_serve_submit_t *m,
                                           const int32_t *ids, uint32_t n, moon_addr_t decode,
                                           uint64_t now)
{
    uint32_t              n_keys = n / c->a.block_tokens;
    size_t                tail   = (size_t)n * 4 + (size_t)n_keys * 16 + (size_t)m->stop_ids.n * 4 +
                    m->stop_strs.n + 64;
    moon_serve_prefill_t *p      = moon_msg_new(MOON_MSG_SERVE_PREFILL, tail);
    uint32_t             *t;
    moon_kv_key_t        *keys;
    size_t                got = 0;

    if (p == NULL) {
        return NULL;
    }
    p->reply_to   = m->reply_to;
    p->request_id = m->request_id;
    p->decode     = decode;
    p->slo_class  = m->slo_class;
    p->arrival_ns = now;
    MOON_SERVE_COPY_SAMPLING(p, m);
    t    = moon_msg_span_alloc(p, &p->tokens, n, 4, 0);
    keys = n_keys ? moon_msg_span_alloc(p, &p->keys, 2 * n_keys, 8, 0) : NULL;
    if (t == NULL || (n_keys && keys == NULL) ||
        moon_serve_copy_span(p, &p->stop_ids, m, m->stop_ids, 4, 0) != MOON_OK ||
        moon_serve_copy_span(p, &p->stop_strs, m, m->stop_strs, 1, 0) != MOON_OK) {
        moon_msg_release(&p->hdr);
        return NULL;
    }
    memcpy(t, ids, (size_t)n * 4);
    if (n_keys) {
        moon_kv_keys_of_tokens(&c->a.tag, c->a.block_tokens, ids, n, keys, n_keys, &got);
    }
    return p;
}

static moon_status_t conductor_on_submit(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t               *c   = moon_actor_state(self);
    const moon_serve_submit_t *m   = (const void *)msg;
    const char                *why = NULL;
    uint32_t                   n   = 0;
    int32_t                   *ids;
    int32_t                    pi, di;
    creq_t                    *r = NULL;
    moon_serve_prefill_t      *p;
    uint64_t                   now = moon_now(moon_actor_runtime(self));

    c->stats.n_submitted++;
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
    pi = pick(c->prefill, c->n_prefill, 1, &c->a.rr_prefill);
    di = pick(c->decode, c->n_decode, 0, &c->a.rr_decode);
    for (uint32_t i = 0; i < c->a.max_requests && r == NULL; i++) {
        r = c->reqs[i].used ? NULL : &c->reqs[i];
    }
    if (pi < 0 || di < 0 || r == NULL) {
        const char *w = r == NULL ? "too many requests in flight" : "no prefill or decode instance is up";
        c->stats.n_rejected++;
        MOON_INFO("conductor: request %llu rejected: %s", (unsigned long long)m->request_id, w);
        answer(self, m->reply_to, m->request_id, MOON_FINISH_REJECTED, MOON_ERR_NO_RESOURCE, n, w);
        moon_free(ids);
        return MOON_OK;
    }
    p = build_prefill(c, m, ids, n, c->decode[di].addr, now);
    moon_free(ids);
    if (p == NULL || moon_send(self, c->prefill[pi].addr, &p->hdr) != MOON_OK) {
        moon_msg_release(p ? &p->hdr : NULL);
        reject(self, c, m, MOON_ERR_NO_MEMORY, "the request could not be placed");
        return MOON_OK;
    }
    *r = (creq_t){1, m->reply_to, m->request_id, (uint32_t)pi, (uint32_t)di, n};
    c->n_reqs++;
    c->prefill[pi].placed += n;
    c->decode[di].placed++;
    c->stats.n_placed++;
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

static moon_status_t conductor_on_cancel(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t               *c = moon_actor_state(self);
    const moon_serve_cancel_t *m = (const void *)msg;
    creq_t                    *r = find_req(c, m->reply_to, m->request_id);

    if (r == NULL) {
        return MOON_OK; /* already over (its DONE is on its way) or never placed */
    }
    forward_cancel(self, c->prefill[r->prefill].addr, m);
    forward_cancel(self, c->decode[r->decode].addr, m);
    return MOON_OK;
}

static moon_status_t conductor_on_released(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t                 *c = moon_actor_state(self);
    const moon_serve_released_t *m = (const void *)msg;
    creq_t                      *r = find_req(c, m->reply_to, m->request_id);

    if (r != NULL) {
        r->used = 0;
        c->n_reqs--;
        if (m->finish < MOON_ARRAY_SIZE(c->stats.n_finished)) {
            c->stats.n_finished[m->finish]++;
        }
    }
    return MOON_OK;
}

static moon_status_t conductor_on_load(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t             *c = moon_actor_state(self);
    const moon_serve_load_t *m = (const void *)msg;
    cinst_t                 *t = m->role == MOON_SERVE_ROLE_DECODE ? c->decode : c->prefill;
    uint32_t                *n = m->role == MOON_SERVE_ROLE_DECODE ? &c->n_decode : &c->n_prefill;

    if (m->instance >= COND_MAX_INSTANCES) {
        MOON_WARN("conductor: load report of instance %u ignored (at most %u)", m->instance,
                  COND_MAX_INSTANCES);
        return MOON_OK;
    }
    if (!t[m->instance].alive) {
        MOON_INFO("conductor: %s instance %u is up", m->role == MOON_SERVE_ROLE_DECODE ? "decode" : "prefill",
                  m->instance);
        moon_monitor(self, msg->src, ((uint64_t)m->role << 32) | m->instance);
    }
    t[m->instance].addr   = msg->src;
    t[m->instance].role   = m->role;
    t[m->instance].alive  = 1;
    t[m->instance].last   = *m;
    t[m->instance].placed = 0;
    *n                    = MOON_MAX(*n, m->instance + 1);
    return MOON_OK;
}

static moon_status_t conductor_on_down(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t            *c    = moon_actor_state(self);
    const moon_sys_down_t  *m    = (const void *)msg;
    uint32_t                role = (uint32_t)(m->ref >> 32), i = (uint32_t)m->ref;
    cinst_t                *t    = role == MOON_SERVE_ROLE_DECODE ? c->decode : c->prefill;

    if (i < COND_MAX_INSTANCES && t[i].addr == m->actor) {
        MOON_WARN("conductor: instance %u (role %u) is down: %s", i, role,
                  moon_status_str(m->reason));
        t[i].alive = 0;
    }
    return MOON_OK;
}

static void sum_instances(const cinst_t *t, uint32_t n, moon_serve_stats_reply_t *m,
                          uint32_t *used, uint32_t *total, uint32_t *up)
{
    for (uint32_t i = 0; i < n; i++) {
        used[i]  = t[i].last.total_blocks - t[i].last.free_blocks;
        total[i] = t[i].last.total_blocks;
        *up += t[i].alive;
        m->running += t[i].last.running;
        m->waiting += t[i].last.queued_reqs;
        m->store_hit_tokens += t[i].last.n_store_hit_tokens;
        m->computed_tokens += t[i].last.n_computed_tokens;
    }
}

static moon_status_t conductor_on_stats(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    conductor_t              *c = moon_actor_state(self);
    uint32_t                  n = c->n_prefill + c->n_decode;
    moon_serve_stats_reply_t *m = moon_msg_new(MOON_MSG_SERVE_STATS_REPLY, 8 * 8 + (size_t)n * 8 + 16);
    uint64_t                 *fin;
    uint32_t                 *used, *total;

    if (m == NULL) {
        return MOON_OK;
    }
    m->req         = ((const moon_serve_stats_req_t *)msg)->req;
    m->n_submitted = c->stats.n_submitted;
    m->n_placed    = c->stats.n_placed;
    m->n_rejected  = c->stats.n_rejected;
    m->n_errors    = c->stats.n_errors;
    m->in_flight   = c->n_reqs;
    m->n_prefill   = c->n_prefill;
    fin            = moon_msg_span_alloc(m, &m->finished, 5, 8, 0);
    used           = moon_msg_span_alloc(m, &m->blocks_used, n, 4, 0);
    total          = moon_msg_span_alloc(m, &m->blocks_total, n, 4, 0);
    memcpy(fin, c->stats.n_finished, sizeof(c->stats.n_finished));
    sum_instances(c->prefill, c->n_prefill, m, used, total, &m->n_prefill_up);
    sum_instances(c->decode, c->n_decode, m, used + c->n_prefill, total + c->n_prefill,
                  &m->n_decode_up);
    moon_tell(self, msg->src, &m->hdr);
    return MOON_OK;
}

static moon_status_t conductor_init(moon_actor_t *self, const void *args)
{
    conductor_t *c = moon_actor_state(self);

    c->a   = *(const moon_conductor_args_t *)args;
    c->tok = moon_model_tokenizer(c->a.model);
    if (c->a.max_requests == 0) {
        c->a.max_requests = 4096;
    }
    if (c->tok == NULL || c->a.block_tokens == 0) {
        MOON_ERROR("conductor: the model needs a tokenizer and the deployment a block size");
        return MOON_ERR_INVALID_PARAM;
    }
    c->vocab   = moon_model_config(c->a.model)->vocab_size;
    c->seq_len = moon_model_config(c->a.model)->seq_len;
    c->reqs    = moon_calloc(c->a.max_requests, sizeof(*c->reqs));
    return c->reqs != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
}

static void conductor_fini(moon_actor_t *self)
{
    conductor_t *c = moon_actor_state(self);
    moon_free(c->reqs);
}

const moon_actor_ops_t moon_conductor_ops = {
    .name        = "conductor",
    .state_bytes = sizeof(conductor_t),
    .init        = conductor_init,
    .fini        = conductor_fini,
    .on_msg =
        {
            [MOON_MSG_SERVE_SUBMIT]   = conductor_on_submit,
            [MOON_MSG_SERVE_CANCEL]   = conductor_on_cancel,
            [MOON_MSG_SERVE_RELEASED] = conductor_on_released,
            [MOON_MSG_SERVE_LOAD]     = conductor_on_load,
            [MOON_MSG_SYS_DOWN]       = conductor_on_down,
            [MOON_MSG_SERVE_STATS]    = conductor_on_stats,
        },
};
