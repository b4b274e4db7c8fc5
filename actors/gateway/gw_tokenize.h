/* actors/gateway/gw_tokenize.h - vLLM's /tokenize and /detokenize and the
 * /version body: pure functions of the model's tokenizer and chat template
 * (no cluster involved). Any thread.
 *
 * POST /tokenize: {"model"?, "prompt": text, "add_special_tokens"?: true}
 *   or {"model"?, "messages": [...], "tools"?: [...] (rendered with the chat
 *   template, as /v1/chat/completions does)} -> {"count", "max_model_len", "tokens"}.
 * POST /detokenize: {"model"?, "tokens": [ids]} -> {"prompt": text}.
 * Other keys are 400s naming them (as on the completion routes). */
#ifndef MOON_ACTORS_GW_TOKENIZE_H
#define MOON_ACTORS_GW_TOKENIZE_H

#include "gw_openai.h"

/* Answers a /tokenize (detok 0) or /detokenize (detok 1) body of len bytes:
 * MOON_OK with *json_p (moon_malloc'd, *len_p bytes) the 200 answer;
 * MOON_ERR_INVALID_PARAM with err filled (400, or 404 for another model,
 * 501 when the gateway has no tokenizer); MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_tokenize_answer(const char *body, size_t len, int detok,
                                      const moon_gw_model_info_t *info, char **json_p,
                                      size_t *len_p, moon_gw_error_t *err);

/* The /version body: {"version": version} (moon_malloc'd; NULL: no memory). */
char *moon_gw_version_json(const char *version, size_t *len_p);

#endif /* MOON_ACTORS_GW_TOKENIZE_H */
