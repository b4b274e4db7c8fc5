/* actors/serve/decode_tokens.c - a decode instance's tokens on their way to
 * the clients: during a step's end (tok_batching) they queue and leave as one
 * TOKENS per reply address (a lone token as a TOKEN); a token with logprobs
 * leaves alone as a TOKEN; whatever is queued leaves before any DONE. While
 * the engine thread runs several steps (decode_steps.c) it queues and sends
 * on a queue of its own, from its thread. */
#include "decode_state.h"
#include "plugin_hooks.h"

#include "moonlet/log.h"

#include <string.h>

/* Sends m to `to` from the actor self, or (self NULL) from the engine thread. */
static void send_msg(moon_actor_t *self, moon_runtime_t *rt, moon_addr_t to, moon_msg_hdr_t *m)
{
    if (self != NULL) {
        moon_tell(self, to, m);
    } else if (moon_runtime_send(rt, to, m) != MOON_OK) {
        moon_msg_release(m); /* the client is gone */
    }
}

/* One TOKEN now. MOON_ERR_NO_MEMORY. */
static moon_status_t send_token(moon_actor_t *self, moon_runtime_t *rt, moon_addr_t to,
                                uint64_t request_id, uint32_t index, uint32_t tok, const char *text,
                                size_t n, uint64_t version, const moon_serve_lp_t *lp)
{
    moon_serve_token_t *m = moon_serve_token_new(request_id, index, tok, text, n, version, lp);

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    send_msg(self, rt, to, &m->hdr);
    return MOON_OK;
}

/* Sends the queue q: one TOKENS per reply address (a lone token as TOKEN),
 * in queue order per address. */
static void flush_queue(moon_actor_t *self, moon_runtime_t *rt, dec_tokq_t *q)
{
    uint32_t n = q->n;

    q->n      = 0;
    q->n_text = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct dec_tok      *o;
        moon_addr_t          to = q->pend[i].reply_to;
        uint32_t             m = 0, bytes = 0, k = 0, *idx = NULL, *tokv = NULL, *endv = NULL;
        uint64_t            *ids = NULL, *vers = NULL;
        char                *text = NULL;
        moon_serve_tokens_t *t;

        if (to == MOON_ADDR_NONE) {
            continue; /* sent with an earlier group */
        }
        for (uint32_t j = i; j < n; j++) {
            o = &q->pend[j];
            if (o->reply_to == to) {
                uint32_t start = j > 0 ? q->pend[j - 1].text_end : 0;
                m++;
                bytes += o->text_end - start;
            }
        }
        t = m > 1 ? moon_msg_new(MOON_MSG_SERVE_TOKENS, (size_t)m * 28 + bytes + 40) : NULL;
        if (t != NULL) {
            ids  = moon_msg_span_alloc(t, &t->request_id, m, 8, 0);
            idx  = moon_msg_span_alloc(t, &t->index, m, 4, 0);
            tokv = moon_msg_span_alloc(t, &t->token, m, 4, 0);
            endv = moon_msg_span_alloc(t, &t->text_end, m, 4, 0);
            text = moon_msg_span_alloc(t, &t->text, bytes, 1, 0);
            vers = moon_msg_span_alloc(t, &t->weight_version, m, 8, 0);
            if (ids == NULL || idx == NULL || tokv == NULL || endv == NULL || text == NULL ||
                vers == NULL) {
                moon_msg_release(&t->hdr);
                t = NULL;
            }
            bytes = 0;
        }
        for (uint32_t j = i; j < n; j++) {
            uint32_t start = j > 0 ? q->pend[j - 1].text_end : 0;
            o              = &q->pend[j];
            if (o->reply_to != to) {
                continue;
            }
            o->reply_to = MOON_ADDR_NONE;
            if (t == NULL) { /* a lone token (or no memory for the batch) */
                (void)send_token(self, rt, to, o->request_id, o->index, o->token, q->text + start,
                                 o->text_end - start - 1, o->version, NULL);
                continue;
            }
            ids[k]  = o->request_id;
            idx[k]  = o->index;
            tokv[k] = o->token;
            vers[k] = o->version;
            memcpy(text + bytes, q->text + start, o->text_end - start);
            bytes += o->text_end - start;
            endv[k++] = bytes;
        }
        if (t != NULL) {
            send_msg(self, rt, to, &t->hdr);
        }
    }
}

/* Called at a step's end and before any DONE leaves, so a request's tokens
 * always precede its end. */
void moon_dec_tokens_flush(moon_actor_t *self, decode_t *d)
{
    flush_queue(self, NULL, &d->tq);
    moon_plugin_tokens_flush(self); /* the observers' copy of the step, batched alike */
}

void moon_dec_tokens_flush_engine(decode_t *d)
{
    flush_queue(NULL, d->rt, &d->eq); /* no observers: moon_dec_steps_prepare saw to it */
}

/* Queues r's token on q (full: q leaves first); 0 when its text does not fit
 * an empty queue either. */
static int queue_token(moon_actor_t *self, moon_runtime_t *rt, decode_t *d, dec_tokq_t *q,
                       dreq_t *r, int32_t tok, const char *text, size_t n)
{
    struct dec_tok *e;

    if (q->n == d->cap_tok || q->n_text + n + 1 > d->cap_tok * DEC_TOK_TEXT_PER_SEQ) {
        flush_queue(self, rt, q); /* full: what is queued leaves first, in order */
    }
    if (q->n_text + n + 1 > d->cap_tok * DEC_TOK_TEXT_PER_SEQ) {
        return 0;
    }
    e = &q->pend[q->n++];
    memcpy(q->text + q->n_text, text, n);
    q->n_text += (uint32_t)n;
    q->text[q->n_text++] = '\0';
    *e                   = (struct dec_tok){r->reply_to,   r->request_id, r->n_gen++,
                                            (uint32_t)tok, q->n_text,     r->version};
    return 1;
}

void moon_dec_token_queue_engine(decode_t *d, dreq_t *r, int32_t tok, const char *text, size_t n)
{
    if (!queue_token(NULL, d->rt, d, &d->eq, r, tok, text, n)) {
        (void)send_token(NULL, d->rt, r->reply_to, r->request_id, r->n_gen++, (uint32_t)tok, text,
                         n, r->version, NULL);
    }
}

moon_status_t moon_dec_token_out(moon_actor_t *self, decode_t *d, dreq_t *r, int32_t tok,
                                 const char *text, size_t n, const moon_serve_lp_t *lp)
{
    if (r->first_sent) {
        /* the prefill sent it to the client already (KV_READY first_sent):
         * the same token, text and logprobs, from the same state */
        r->first_sent = 0;
        r->n_gen++;
        return MOON_OK;
    }
    if (lp != NULL) {
        /* a token with logprobs goes alone, as a TOKEN (TOKENS carry none) */
        return send_token(self, NULL, r->reply_to, r->request_id, r->n_gen++, (uint32_t)tok, text,
                          n, r->version, lp);
    }
    if (d->tok_batching && queue_token(self, NULL, d, &d->tq, r, tok, text, n)) {
        return MOON_OK;
    }
    return send_token(self, NULL, r->reply_to, r->request_id, r->n_gen++, (uint32_t)tok, text, n,
                      r->version, NULL);
}
