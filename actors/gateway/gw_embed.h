/* actors/gateway/gw_embed.h - POST /v1/embeddings: OpenAI's body parsed and
 * checked (input: a string, an array of strings, an array of token ids or an
 * array of arrays of ids; model; encoding_format "float" or "base64";
 * dimensions only equal to the model's size; user), each input tokenized
 * (text: BOS first, as a completion's prompt) and checked against the
 * context; and the answer formatted ({"object":"list","data":[{"object":
 * "embedding","index","embedding"}],"model","usage"}). Each input goes to
 * the cluster as its own request with MOON_SERVE_F_EMBED (serve_msgs.h): a
 * prefill instance computes it and answers EMBEDDING. Pure: any thread. */
#ifndef MOON_ACTORS_GW_EMBED_H
#define MOON_ACTORS_GW_EMBED_H

#include "gw_errors.h"
#include "gw_openai.h"
#include "moonlet/serve_client.h"

#include <stddef.h>
#include <stdint.h>

/* Inputs of one request at most (each its own sequence in the cluster). */
#define MOON_GW_EMBED_MAX_INPUTS MOON_GW_MAX_SEQS

typedef struct {
    int       base64;   /* encoding_format "base64" */
    uint32_t  n_inputs; /* 1..MOON_GW_EMBED_MAX_INPUTS */
    int32_t **tokens;   /* (n_inputs) each input's ids, moon_malloc'd */
    uint32_t *n_tokens; /* (n_inputs) */
} moon_gw_embed_req_t;

/* Parses and prepares len bytes of body into req (caller's memory; fini it
 * whatever the result) against info (its tok, n_ctx, n_vocab, dim,
 * model_name). MOON_ERR_INVALID_PARAM with err filled (400 naming the
 * field, 404 for another model, 501 without a tokenizer for text input);
 * MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_embed_parse(const char *body, size_t len, const moon_gw_model_info_t *info,
                                  moon_gw_embed_req_t *req, moon_gw_error_t *err);
void          moon_gw_embed_fini(moon_gw_embed_req_t *req);

/* The serving parameters of input i (pointers into req). */
void moon_gw_embed_params(const moon_gw_embed_req_t *req, uint32_t i, moon_serve_params_t *p);

/* The answer: vecs[i] (dim float bits each, as EMBEDDING carries them) in
 * input order, usage prompt_tokens = total_tokens = the inputs' tokens.
 * moon_malloc'd JSON, NULL when out of memory. */
char *moon_gw_embed_response(const moon_gw_embed_req_t *req, const char *model,
                             const uint32_t *const *vecs, uint32_t dim, size_t *len_p);

#endif /* MOON_ACTORS_GW_EMBED_H */
