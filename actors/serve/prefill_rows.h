/* actors/serve/prefill_rows.h - what a prefill gives back for every prompt
 * position, when a request asks (MOON_SERVE_F_PROMPT_LOGPROBS,
 * MOON_SERVE_F_EMBED): the engine's rows (moon_engine_prefill_rows) turned
 * into PROMPT_LOGPROBS messages, or summed into the prompt's embedding, which
 * ends the request at the prefill (EMBEDDING, DONE, RELEASED). Requests
 * without those flags never come here and pay nothing. */
#ifndef MOON_ACTORS_PREFILL_ROWS_H
#define MOON_ACTORS_PREFILL_ROWS_H

#include "moonlet/actor.h"
#include "moonlet/serve_msgs.h"

/* Rows of logits per engine call for prompt logprobs (the logits buffer is
 * this many rows of the vocabulary: 16 MiB at a 128k vocabulary). */
#define MOON_PREFILL_ROWS_LOGITS 32u

/* 1 when the request needs the engine's rows (and so the whole prompt computed). */
static inline int moon_prefill_rows_wanted(uint32_t flags)
{
    return (flags & (MOON_SERVE_F_PROMPT_LOGPROBS | MOON_SERVE_F_EMBED)) != 0;
}

/* Sends q's client (through q's decode instance) the logprobs of the prompt positions that the rows
 * of the chunk [start, start + n) predict (row j: position start + j + 1, while in the prompt):
 * logits (n, vocab). MOON_ERR_NO_MEMORY, or the send's status. */
moon_status_t moon_prefill_rows_logprobs(moon_actor_t *self, const moon_serve_prefill_t *q,
                                         const float *logits, uint32_t vocab, uint32_t start,
                                         uint32_t n);

/* The decode instance's part: a PROMPT_LOGPROBS passed on to its client
 * (copied), ahead of the request's TOKENs on the same pair. */
moon_status_t moon_prefill_rows_forward(moon_actor_t *self, const moon_msg_hdr_t *msg);

/* sum (dim) += the chunk's hidden rows (n, dim). */
void moon_prefill_rows_embed_add(double *sum, const float *hidden, uint32_t n, uint32_t dim);

/* The embedding is complete (sum over the prompt's n_prompt rows): sends the
 * client EMBEDDING (the mean, L2-normalised) and DONE (stop, times in ns, the
 * instance's index), and the conductor RELEASED. MOON_ERR_NO_MEMORY. */
moon_status_t moon_prefill_rows_embed_end(moon_actor_t *self, moon_addr_t conductor,
                                          const moon_serve_prefill_t *q, const double *sum,
                                          uint32_t dim, uint32_t n_prompt, int32_t instance,
                                          uint64_t queue_ns, uint64_t prefill_ns);

#endif /* MOON_ACTORS_PREFILL_ROWS_H */
