/* actors/serve/prefill_first.h - a request's first token straight from its
 * prefill instance to its client, one hop and the decode instance's turn
 * sooner than through the decode (which still gets it in the final KV_READY
 * for its sequence state, with first_sent set: it does not send it again).
 * Only when the client then sees exactly what the decode would have sent it:
 * else the decode sends it, as it did before. */
#ifndef MOON_ACTORS_PREFILL_FIRST_H
#define MOON_ACTORS_PREFILL_FIRST_H

#include "serve_instance.h"

/* Sends q's first sampled token tok (lp: its logprobs, NULL without) to
 * q->reply_to as TOKEN index q->n_resumed, with the text the decode's text
 * state would release for it and q's weight version, unless the token ends
 * the request (EOS, BOS, a stop id, a stop string it completes: the decode
 * answers with DONE), the prompt's logprobs must reach the client first
 * (they travel through the decode), or the request is an embedding. Returns
 * 1 when sent, 0 when the decode must send it. */
int moon_prefill_first_send(moon_actor_t *self, const moon_tokenizer_t *tk,
                            const moon_serve_prefill_t *q, int32_t tok, const moon_serve_lp_t *lp);

#endif /* MOON_ACTORS_PREFILL_FIRST_H */
