/* actors/gateway/gw_logprobs.h - the "logprobs" object of a choice, built
 * token by token from TOKEN events: completions' {"tokens", "token_logprobs",
 * "top_logprobs", "text_offset"} or chat's {"content": [{"token",
 * "logprob", "bytes", "top_logprobs": [...]}], "refusal": null}. A stream
 * takes what gathered since its last chunk (moon_gw_logprobs_take). One per
 * request, one thread at a time. */
#ifndef MOON_ACTORS_GW_LOGPROBS_H
#define MOON_ACTORS_GW_LOGPROBS_H

#include "moonlet/status.h"
#include "moonlet/tokenizer.h"

#include <cjson/cJSON.h>

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int                     chat;
    const moon_tokenizer_t *tok;    /* borrowed */
    int32_t                 prev;   /* the token before the next one (-1: none) */
    uint32_t                offset; /* completions' text_offset of the next token */
    uint32_t                n;      /* tokens gathered since the last take */
    cJSON                  *root;   /* NULL until the first token */
} moon_gw_logprobs_t;

/* prev: the prompt's last token (-1 if not known). tok borrowed for lp's life. */
void moon_gw_logprobs_init(moon_gw_logprobs_t *lp, int chat, const moon_tokenizer_t *tok,
                           int32_t prev);
void moon_gw_logprobs_fini(moon_gw_logprobs_t *lp);
/* One token: its id, logprob and k alternatives (top: k (id, float bits)
 * pairs, borrowed). MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_logprobs_add(moon_gw_logprobs_t *lp, int32_t token, float logprob,
                                   const uint32_t *top, uint32_t k);
/* echo: the prompt's first token, which has no logprob (null, as OpenAI's). */
moon_status_t moon_gw_logprobs_add_first(moon_gw_logprobs_t *lp, int32_t token);
/* echo: a PROMPT_LOGPROBS message's positions (serve_msgs.h), the prompt's
 * ids being prompt (n_prompt): the first message (first == 1) adds the null
 * of position 0. Positions past n_prompt (a resumed request's) are left out.
 * MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_logprobs_add_prompt(moon_gw_logprobs_t *lp, const int32_t *prompt,
                                          uint32_t n_prompt, const void *msg);
/* The JSON of what was gathered since the last take (moon_malloc'd), and
 * lp emptied; NULL when nothing was gathered or out of memory. */
char *moon_gw_logprobs_take(moon_gw_logprobs_t *lp);

#endif /* MOON_ACTORS_GW_LOGPROBS_H */
