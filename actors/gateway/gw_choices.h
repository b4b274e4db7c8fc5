/* actors/gateway/gw_choices.h - the choices of one request (n > 1, best_of):
 * each choice is its own sequence in the cluster, with its own seed (the
 * request's, mixed with the choice's index, so a seeded request repeats),
 * and its own text, logprobs and usage gathered by the connection.
 *
 * The prompt's KV is computed once: the connection submits a prompt's
 * choices as one SUBMIT (n_choices, serve_msgs.h; choice i under the first
 * id + i): one prefill samples every first token, and the decode instance
 * forks the prompt's KV into one sequence per choice (full blocks shared,
 * the partial block copied). Only when the prompt's own logprobs are asked
 * (echo with logprobs: each choice's prefill sends them) do the choices
 * fan out: choice 0 alone, the others once its first event has come, its
 * full blocks then in the prefix cache. Pure helpers: any thread. */
#ifndef MOON_ACTORS_GW_CHOICES_H
#define MOON_ACTORS_GW_CHOICES_H

#include "gw_bridge.h"
#include "gw_buf.h"
#include "gw_format.h"
#include "gw_logprobs.h"
#include "gw_openai.h"

#include <stdint.h>

typedef struct {
    moon_gw_req_t        *breq;        /* NULL: not submitted yet */
    moon_gw_buf_t         acc;         /* a whole answer: its text so far */
    moon_gw_logprobs_t    lp;          /* logprobs asked: gathered since the last chunk */
    double                sum_lp;      /* its tokens' logprobs summed (best_of's ranking) */
    int                   role_sent;   /* stream: chat's role delta (or echo's prompt) is out */
    int                   got_done;    /* its DONE was read: nothing to cancel */
    const char           *finish;      /* its DONE's finish reason (static text) */
    moon_gw_usage_t       u;           /* its DONE's usage */
    const char           *echo;        /* echo: its prompt's text (borrowed); NULL: none */
    const moon_msg_hdr_t *rows;        /* embeddings: its EMBEDDING (held); NULL: none yet */
    uint32_t              prompt_next; /* echo with logprobs: the next prompt position expected */
} moon_gw_choice_t;

/* The usage of the whole request (choices in groups of per, one group per
 * prompt): each prompt counted once (its group's first choice's), every
 * choice's completion tokens summed. */
void moon_gw_choices_usage(const moon_gw_choice_t *ch, uint32_t n, uint32_t per,
                           moon_gw_usage_t *u);
/* best_of: the indexes of the n choices of highest summed logprob into
 * order (best first; ties: the lower index). */
void moon_gw_choices_rank(const moon_gw_choice_t *ch, uint32_t n_ch, uint32_t n, uint32_t *order);
/* One response body of n single-choice bodies (each with its own "index"):
 * the first body with the other bodies' choices appended. moon_malloc'd,
 * NULL when out of memory or a body does not parse. */
char *moon_gw_choices_merge(char *const *bodies, uint32_t n, size_t *len_p);
/* echo: the prompt's text (given, or the ids decoded; "" without a
 * tokenizer), moon_malloc'd; NULL when out of memory. */
char *moon_gw_echo_text(const moon_gw_request_t *req, const moon_tokenizer_t *tok);

#endif /* MOON_ACTORS_GW_CHOICES_H */
