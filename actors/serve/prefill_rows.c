/* actors/serve/prefill_rows.c - prompt logprobs and embeddings from a
 * prefill's rows (prefill_rows.h). */
#include "prefill_rows.h"

#include "serve_instance.h"

#include "moonlet/log.h"
#include "moonlet/model.h"

#include <math.h>
#include <string.h>

moon_status_t moon_prefill_rows_logprobs(moon_actor_t *self, const moon_serve_prefill_t *q,
                                         const float *logits, uint32_t vocab, uint32_t start,
                                         uint32_t n)
{
    const uint32_t *toks     = MOON_SPAN_PTR(q, q->tokens);
    uint32_t        n_prompt = q->tokens.n;
    uint32_t        k        = q->logprobs > 0 ? MOON_MIN(q->logprobs - 1, MOON_LOGPROBS_MAX) : 0;
    /* row j predicts position start + j + 1: the last row of the prompt
     * predicts the first generated token, which its TOKEN carries */
    uint32_t                      rows = start + n < n_prompt ? n : n_prompt - 1 - start;
    moon_serve_prompt_logprobs_t *m;
    uint32_t                     *lp, *top;

    m = moon_msg_new(MOON_MSG_SERVE_PROMPT_LOGPROBS, (size_t)rows * (1 + 2 * k) * 4 + 16);
    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->reply_to   = q->reply_to;
    m->request_id = q->request_id;
    m->first      = start + 1;
    m->k          = k;
    m->last       = start + n == n_prompt;
    m->n_prompt   = n_prompt;
    lp            = moon_msg_span_alloc(m, &m->lp, rows, 4, 0);
    top           = k > 0 ? moon_msg_span_alloc(m, &m->top, (size_t)rows * 2 * k, 4, 0) : NULL;
    if ((rows > 0 && lp == NULL) || (rows > 0 && k > 0 && top == NULL)) {
        moon_msg_release(&m->hdr);
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t j = 0; j < rows; j++) {
        int32_t ids[MOON_LOGPROBS_MAX];
        float   lps[MOON_LOGPROBS_MAX], v;

        moon_logprobs(logits + (size_t)j * vocab, vocab, (int32_t)toks[start + j + 1], k, &v, ids,
                      lps);
        memcpy(&lp[j], &v, 4);
        for (uint32_t i = 0; i < k; i++) {
            top[(size_t)j * 2 * k + 2 * i] = (uint32_t)ids[i];
            memcpy(&top[(size_t)j * 2 * k + 2 * i + 1], &lps[i], 4);
        }
    }
    return moon_tell(self, q->decode, &m->hdr);
}

moon_status_t moon_prefill_rows_forward(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    const moon_serve_prompt_logprobs_t *in = (const void *)msg;
    moon_serve_prompt_logprobs_t       *m =
        moon_msg_new(MOON_MSG_SERVE_PROMPT_LOGPROBS, ((size_t)in->lp.n + in->top.n) * 4 + 16);
    moon_status_t status;

    if (m == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    m->reply_to   = in->reply_to;
    m->request_id = in->request_id;
    m->first      = in->first;
    m->k          = in->k;
    m->last       = in->last;
    m->n_prompt   = in->n_prompt;
    status        = moon_serve_copy_span(m, &m->lp, in, in->lp, 4, 0);
    if (status == MOON_OK) {
        status = moon_serve_copy_span(m, &m->top, in, in->top, 4, 0);
    }
    if (status != MOON_OK) {
        moon_msg_release(&m->hdr);
        return status;
    }
    return moon_tell(self, in->reply_to, &m->hdr);
}

void moon_prefill_rows_embed_add(double *sum, const float *hidden, uint32_t n, uint32_t dim)
{
    for (uint32_t j = 0; j < n; j++) {
        for (uint32_t i = 0; i < dim; i++) {
            sum[i] += hidden[(size_t)j * dim + i];
        }
    }
}

moon_status_t moon_prefill_rows_embed_end(moon_actor_t *self, moon_addr_t conductor,
                                          const moon_serve_prefill_t *q, const double *sum,
                                          uint32_t dim, uint32_t n_prompt, int32_t instance,
                                          uint64_t queue_ns, uint64_t prefill_ns)
{
    moon_serve_embedding_t *e    = moon_msg_new(MOON_MSG_SERVE_EMBEDDING, (size_t)dim * 4 + 8);
    moon_serve_done_t      *d    = moon_msg_new(MOON_MSG_SERVE_DONE, 8);
    moon_serve_released_t  *rel  = moon_msg_new(MOON_MSG_SERVE_RELEASED, 0);
    uint32_t               *vec  = e != NULL ? moon_msg_span_alloc(e, &e->vec, dim, 4, 0) : NULL;
    double                  norm = 0.0;

    if (vec == NULL || d == NULL || rel == NULL) {
        moon_msg_release(e != NULL ? &e->hdr : NULL);
        moon_msg_release(d != NULL ? &d->hdr : NULL);
        moon_msg_release(rel != NULL ? &rel->hdr : NULL);
        return MOON_ERR_NO_MEMORY;
    }
    /* the mean's direction: the 1 / n_prompt cancels in the normalisation */
    for (uint32_t i = 0; i < dim; i++) {
        norm += sum[i] * sum[i];
    }
    norm = norm > 0.0 ? 1.0 / sqrt(norm) : 0.0;
    for (uint32_t i = 0; i < dim; i++) {
        float v = (float)(sum[i] * norm);
        memcpy(&vec[i], &v, 4);
    }
    e->request_id       = q->request_id;
    e->n_prompt         = n_prompt;
    d->request_id       = q->request_id;
    d->finish           = MOON_FINISH_STOP;
    d->n_prompt         = n_prompt;
    d->prefill_instance = instance;
    d->decode_instance  = -1;
    d->queue_ns         = queue_ns;
    d->prefill_ns       = prefill_ns;
    d->weight_version   = q->weight_version;
    moon_msg_set_str(d, &d->text, "");
    moon_msg_set_str(d, &d->message, "");
    rel->reply_to   = q->reply_to;
    rel->request_id = q->request_id;
    rel->finish     = MOON_FINISH_STOP;
    /* the same pair's messages keep their order: EMBEDDING before DONE */
    moon_tell(self, q->reply_to, &e->hdr);
    moon_tell(self, q->reply_to, &d->hdr);
    moon_tell(self, conductor, &rel->hdr);
    return MOON_OK;
}
