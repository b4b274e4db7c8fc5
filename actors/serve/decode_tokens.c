/* actors/serve/decode_tokens.c - a decode instance's tokens on their way to
 * the clients: during a step's end (tok_batching) they queue and leave as one
 * TOKENS per reply address (a lone token as a TOKEN); a token with logprobs
 * leaves alone as a TOKEN; whatever is queued leaves before any DONE. */
#include "decode_state.h"
#include "plugin_hooks.h"

#include "moonlet/log.h"

#include <string.h>

/* One TOKEN now. MOON_ERR_NO_MEMORY. */
static moon_status_t send_token(moon_actor_t *self, moon_addr_t to, uint64_t request_id,
                                uint32_t index, uint32_t tok, const char *text, size_t n,
                                uint64_t version, const moon_serve_lp_t *lp)
{
    moon_serve_token_t *m =
        moon_msg_new(MOON_MSG_SERVE_TOKEN, n + 1 + (lp != NULL ? 8 * lp->k + 8 : 0));

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    if (lp != NULL) {
        m->logprob = lp->lp;
        moon_serve_lp_put(m, &m->top, lp); /* room reserved above */
    }
    m->request_id = request_id;
    m->index      = index;
    m->token      = tok;
    moon_msg_set_str(m, &m->text, text);
    m->weight_version = version;
    moon_tell(self, to, &m->hdr);
    return MOON_OK;
}

/* Sends the queued tokens: one TOKENS per reply address (a lone token as
 * TOKEN), in queue order per address. Called at a step's end and before any
 * DONE leaves, so a request's tokens always precede its end. */
void moon_dec_tokens_flush(moon_actor_t *self, decode_t *d)
{
    uint32_t n = d->n_tok_pend;

    d->n_tok_pend = 0;
    d->n_tok_text = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct dec_tok      *o;
        moon_addr_t          to = d->tok_pend[i].reply_to;
        uint32_t             m = 0, bytes = 0, k = 0, *idx = NULL, *tokv = NULL, *endv = NULL;
        uint64_t            *ids = NULL, *vers = NULL;
        char                *text = NULL;
        moon_serve_tokens_t *t;

        if (to == MOON_ADDR_NONE) {
            continue; /* sent with an earlier group */
        }
        for (uint32_t j = i; j < n; j++) {
            o = &d->tok_pend[j];
            if (o->reply_to == to) {
                uint32_t start = j > 0 ? d->tok_pend[j - 1].text_end : 0;
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
            uint32_t start = j > 0 ? d->tok_pend[j - 1].text_end : 0;
            o              = &d->tok_pend[j];
            if (o->reply_to != to) {
                continue;
            }
            o->reply_to = MOON_ADDR_NONE;
            if (t == NULL) { /* a lone token (or no memory for the batch) */
                (void)send_token(self, to, o->request_id, o->index, o->token, d->tok_text + start,
                                 o->text_end - start - 1, o->version, NULL);
                continue;
            }
            ids[k]  = o->request_id;
            idx[k]  = o->index;
            tokv[k] = o->token;
            vers[k] = o->version;
            memcpy(text + bytes, d->tok_text + start, o->text_end - start);
            bytes += o->text_end - start;
            endv[k++] = bytes;
        }
        if (t != NULL) {
            moon_tell(self, to, &t->hdr);
        }
    }
    moon_plugin_tokens_flush(self); /* the observers' copy of the step, batched alike */
}

moon_status_t moon_dec_token_out(moon_actor_t *self, decode_t *d, dreq_t *r, int32_t tok,
                                 const char *text, size_t n, const moon_serve_lp_t *lp)
{
    if (lp != NULL) {
        /* a token with logprobs goes alone, as a TOKEN (TOKENS carry none) */
        return send_token(self, r->reply_to, r->request_id, r->n_gen++, (uint32_t)tok, text, n,
                          r->version, lp);
    }
    if (d->tok_batching && (d->n_tok_pend == d->cap_tok ||
                            d->n_tok_text + n + 1 > d->cap_tok * DEC_TOK_TEXT_PER_SEQ)) {
        moon_dec_tokens_flush(self, d); /* full: what is queued leaves first, in order */
    }
    if (d->tok_batching && d->n_tok_text + n + 1 <= d->cap_tok * DEC_TOK_TEXT_PER_SEQ) {
        struct dec_tok *e = &d->tok_pend[d->n_tok_pend++];
        memcpy(d->tok_text + d->n_tok_text, text, n);
        d->n_tok_text += (uint32_t)n;
        d->tok_text[d->n_tok_text++] = '\0';
        *e                           = (struct dec_tok){r->reply_to,   r->request_id, r->n_gen++,
                                                        (uint32_t)tok, d->n_tok_text, r->version};
        return MOON_OK;
    }
    return send_token(self, r->reply_to, r->request_id, r->n_gen++, (uint32_t)tok, text, n,
                      r->version, NULL);
}
