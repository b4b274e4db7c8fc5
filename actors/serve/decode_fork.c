/* actors/serve/decode_fork.c - the choices of one prompt on the decode
 * instance (SUBMIT n_choices, decode_state.h): the prompt's KV is pulled
 * once, then copied on write into one sequence per choice. */
#include "decode_state.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <string.h>

void moon_dec_emit_first(moon_actor_t *self, decode_t *d, dreq_t *r, uint32_t tok, float lp,
                         const uint32_t *top, uint32_t k)
{
    moon_serve_lp_t l = {.lp = lp, .k = MOON_MIN(k, MOON_LOGPROBS_MAX)};

    if (r->logprobs == 0) {
        moon_dec_emit(self, d, r, (int32_t)tok, NULL);
        return;
    }
    for (uint32_t i = 0; i < l.k; i++) {
        l.ids[i] = (int32_t)top[2 * i];
        memcpy(&l.lps[i], &top[2 * i + 1], 4);
    }
    moon_dec_emit(self, d, r, (int32_t)tok, &l);
}

int moon_dec_group_alive(const decode_t *d, const dreq_t *r)
{
    for (uint32_t i = 0; i < d->a.max_seqs; i++) {
        const dreq_t *o = &d->reqs[i];
        if (o != r && o->reply_to == r->reply_to && o->group_id == r->group_id &&
            (o->state == DREQ_PULLING || o->state == DREQ_RUNNING || o->state == DREQ_PREFILLING)) {
            return 1;
        }
    }
    return 0;
}

static dreq_t *free_slot(decode_t *d)
{
    for (uint32_t i = 0; i < d->a.max_seqs; i++) {
        if (d->reqs[i].state == DREQ_FREE) {
            return &d->reqs[i];
        }
    }
    return NULL;
}

/* c's sampling state: that of the message the request came in (a final
 * KV_READY, or colocated a PREFILL: the same fields at other places), with
 * seed. */
#define SETUP_FROM(_d, _c, _m, _seed)                                                              \
    do {                                                                                           \
        moon_serve_sampling_t _sp = MOON_SERVE_SAMPLING_OF(_m);                                    \
        _sp.seed                  = (_seed);                                                       \
        status = moon_dec_setup_sampling(_d, _c, &_sp, MOON_SPAN_PTR(_m, (_m)->tokens),            \
                                         (_m)->tokens.n, (_m)->n_resumed,                          \
                                         MOON_SPAN_PTR(_m, (_m)->stop_strs), (_m)->stop_strs.n,    \
                                         MOON_SPAN_PTR(_m, (_m)->grammar), (_m)->grammar.n);       \
    } while (0)

/* Choice i of leader r into slot c (free): its sequence forked from r's
 * prompt, its sampler seeded with seed. MOON_ERR_NO_RESOURCE (no block), or
 * the sampling setup's status; c is left FREE on failure. */
static moon_status_t open_choice(decode_t *d, dreq_t *r, dreq_t *c, uint32_t i, uint64_t seed)
{
    const moon_msg_hdr_t *msg  = r->final_msg;
    uint32_t              need = moon_dec_choice_blocks(d, r->n_prompt, r->max_tokens);
    moon_status_t         status;

    memset(c, 0, sizeof(*c));
    status = moon_kv_seq_fork(d->pool.kv, r->seq, r->n_prompt, &c->seq);
    if (status != MOON_OK) {
        return status;
    }
    c->reply_to         = r->reply_to;
    c->request_id       = r->group_id + i;
    c->group_id         = r->group_id;
    c->n_choices        = 1;
    c->forked           = 1;
    c->prefill          = MOON_ADDR_NONE; /* the leader tells the prefill */
    c->prefill_instance = r->prefill_instance;
    c->n_prompt         = r->n_prompt;
    c->max_tokens       = r->max_tokens;
    c->flags            = r->flags;
    c->version          = r->version;
    c->final            = 1;
    c->kv_done_sent     = 1;
    c->stop_ids         = r->stop_ids;
    c->n_stop_ids       = r->n_stop_ids;
    c->n_cached         = r->n_cached;
    c->arrival_ns       = r->arrival_ns;
    c->queue_ns         = r->queue_ns;
    c->prefill_ns       = r->prefill_ns;
    c->transfer_ns      = r->transfer_ns;
    c->ttft_ns          = r->ttft_ns;
    if (msg->type == MOON_MSG_SERVE_PREFILL) {
        SETUP_FROM(d, c, (const moon_serve_prefill_t *)msg, seed);
    } else {
        SETUP_FROM(d, c, (const moon_serve_kv_ready_t *)msg, seed);
    }
    if (status != MOON_OK) {
        if (c->text_ready) {
            moon_serve_text_fini(&c->text);
        }
        moon_sampler_fini(&c->smp);
        moon_kv_seq_destroy(d->pool.kv, c->seq);
        memset(c, 0, sizeof(*c));
        return status;
    }
    moon_msg_retain(r->final_msg); /* its stop ids and strings live there */
    c->final_msg = r->final_msg;
    /* its blocks move from the leader's budget to its own */
    c->budget = need;
    r->budget -= need;
    moon_dec_enter(c, DREQ_PULLING);
    moon_dec_enter(c, DREQ_RUNNING);
    return MOON_OK;
}

/* Opens the choices 1..n-1 of r into kids (NULL: ended already). seeds:
 * the prefill's sampler states (ch, stride apart), or with ch NULL each
 * choice's own seed. */
static void open_choices(moon_actor_t *self, decode_t *d, dreq_t *r, const uint32_t *ch,
                         uint32_t n_ch, uint32_t stride, dreq_t **kids)
{
    uint32_t n    = r->n_choices;
    uint64_t base = ch == NULL ? ((const moon_serve_prefill_t *)r->final_msg)->seed : 0;

    r->forked = 1;
    d->reserved -= n - 1;

    for (uint32_t i = 1; i < n && i < MOON_SERVE_MAX_CHOICES; i++) {
        const uint32_t *e = ch + (size_t)(i - 1) * stride;
        dreq_t         *c = free_slot(d);
        moon_status_t   status;
        const char     *why;

        kids[i] = NULL;
        if (ch != NULL && n_ch < i * stride) {
            status = MOON_ERR_INVALID_PARAM;
            why    = "decode: bad handover (a choice's first token is missing)";
        } else if (c == NULL) {
            status = MOON_ERR_NO_RESOURCE; /* not reached: slots are reserved at admission */
            why    = "decode: no slot for the choice";
        } else {
            status = open_choice(d, r, c, i,
                                 ch != NULL ? (uint64_t)e[1] | (uint64_t)e[2] << 32
                                            : moon_serve_choice_seed(base, i));
            why    = d->gram_err[0] ? d->gram_err : "decode: the choice could not fork";
        }
        if (status != MOON_OK) {
            MOON_WARN("decode %u: choice %u of request %llu ends: %s (%s)", d->a.instance, i,
                      (unsigned long long)r->group_id, why, moon_status_str(status));
            moon_dec_done_choice(self, d, r, r->group_id + i, MOON_FINISH_ERROR, status, why);
            continue;
        }
        if (moon_dec_take_cancel(d, c->reply_to, c->request_id)) {
            moon_dec_finish(self, d, c, MOON_FINISH_CANCELLED, MOON_OK, NULL);
            continue;
        }
        kids[i] = c;
    }
}

void moon_dec_fork(moon_actor_t *self, decode_t *d, dreq_t *r)
{
    const moon_serve_kv_ready_t *m  = (const void *)r->final_msg;
    const uint32_t              *ch = MOON_SPAN_PTR(m, m->choices);
    uint32_t                     k = m->first_top.n / 2, stride = MOON_SERVE_CHOICE_U32S(k);
    uint32_t                     n                            = r->n_choices;
    dreq_t                      *kids[MOON_SERVE_MAX_CHOICES] = {NULL};

    r->ttft_ns =
        moon_now(moon_actor_runtime(self)) - r->arrival_ns; /* all first tokens leave now */
    open_choices(self, d, r, ch, m->choices.n, stride, kids);
    /* the first tokens last: one that ends its choice frees its sequence */
    if (r->leader_cancelled) {
        moon_dec_finish(self, d, r, MOON_FINISH_CANCELLED, MOON_OK, NULL);
    } else {
        moon_dec_emit_first(self, d, r, m->token, m->first_logprob, MOON_SPAN_PTR(m, m->first_top),
                            k);
    }
    for (uint32_t i = 1; i < n && i < MOON_SERVE_MAX_CHOICES; i++) {
        const uint32_t *e = ch + (size_t)(i - 1) * stride;
        float           lp;

        if (kids[i] == NULL || kids[i]->state != DREQ_RUNNING) {
            continue;
        }
        memcpy(&lp, &e[3], 4);
        moon_dec_emit_first(self, d, kids[i], e[0], lp, e + 4, k);
    }
}

void moon_dec_fork_sample(moon_actor_t *self, decode_t *d, dreq_t *r, float *row)
{
    dreq_t  *kids[MOON_SERVE_MAX_CHOICES] = {NULL};
    uint32_t n                            = r->n_choices;
    float   *copy = n > 1 ? moon_malloc((size_t)d->vocab * sizeof(float)) : NULL;

    if (n > 1 && copy == NULL) {
        moon_dec_finish(self, d, r, MOON_FINISH_ERROR, MOON_ERR_NO_MEMORY, "out of memory");
        return;
    }
    if (n > 1) {
        open_choices(self, d, r, NULL, 0, 0, kids);
    }
    for (uint32_t i = n - 1; i >= 1 && i < MOON_SERVE_MAX_CHOICES; i--) {
        if (kids[i] != NULL && kids[i]->state == DREQ_RUNNING) {
            kids[i]->ttft_ns = r->ttft_ns;
            memcpy(copy, row, (size_t)d->vocab * sizeof(float)); /* sampling changes it */
            moon_dec_sample_emit(self, d, kids[i], copy);
        }
    }
    moon_free(copy);
    if (r->leader_cancelled) {
        moon_dec_finish(self, d, r, MOON_FINISH_CANCELLED, MOON_OK, NULL);
        return;
    }
    moon_dec_sample_emit(self, d, r, row);
}
