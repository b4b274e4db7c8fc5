/* actors/serve/prefill_first.c - see prefill_first.h. */
#include "prefill_first.h"

#include "serve_text.h"

/* The text the decode would stream with tok: its text state fed what it will
 * be fed (the prompt's last token as prev, the tokens a resumed request
 * already streamed, then tok). Text held back (a possible stop string's
 * start, incomplete UTF-8) stays back here as there: the decode's own state
 * releases it with a later token. Returns 1 with *msg_p built, 0 when tok
 * completes a stop string or memory runs out. */
static int first_token_msg(const moon_tokenizer_t *tk, const moon_serve_prefill_t *q, int32_t tok,
                           const moon_serve_lp_t *lp, moon_serve_token_t **msg_p)
{
    const uint32_t   *toks = MOON_SPAN_PTR(q, q->tokens);
    uint32_t          n = q->tokens.n, from = n - q->n_resumed;
    moon_serve_text_t text;
    const char       *out = "";
    size_t            len = 0;
    int               hit;

    if (moon_serve_text_init(&text, tk, (int32_t)toks[from - 1], MOON_SPAN_PTR(q, q->stop_strs),
                             q->stop_strs.n) != MOON_OK) {
        return 0;
    }
    text.keep_stop = (q->flags & MOON_SERVE_F_STOP_STR_OUT) != 0;
    for (uint32_t i = from; i < n; i++) {
        moon_serve_text_push(&text, (int32_t)toks[i], &out, &len);
    }
    hit    = moon_serve_text_push(&text, tok, &out, &len);
    *msg_p = hit ? NULL
                 : moon_serve_token_new(q->request_id, q->n_resumed, (uint32_t)tok, out, len,
                                        q->weight_version, lp);
    moon_serve_text_fini(&text);
    return *msg_p != NULL;
}

int moon_prefill_first_send(moon_actor_t *self, const moon_tokenizer_t *tk,
                            const moon_serve_prefill_t *q, int32_t tok, const moon_serve_lp_t *lp)
{
    moon_serve_token_t *m = NULL;

    if ((q->flags & (MOON_SERVE_F_PROMPT_LOGPROBS | MOON_SERVE_F_EMBED)) ||
        q->n_resumed >= q->tokens.n ||
        moon_serve_is_stop_id(q->flags, MOON_SPAN_PTR(q, q->stop_ids), q->stop_ids.n, tok, tk) ||
        (q->grammar.n > 0 && tok == moon_tokenizer_eos(tk))) { /* a complete document: decode.c */
        return 0;
    }
    if (!first_token_msg(tk, q, tok, lp, &m)) {
        return 0;
    }
    if (moon_send(self, q->reply_to, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr); /* the decode tries */
        return 0;
    }
    return 1;
}
