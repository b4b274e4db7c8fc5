/* actors/gateway/gw_model.h - what an OpenAI front end needs of the model file:
 * its tokenizer (prompts are tokenized before they reach the cluster), its
 * context length and its chat template; and the model id a file serves
 * under by default. Shared by the gateway and the batch engine
 * (actors/batch), so both parse and answer requests the same way. Pure:
 * any thread. */
#ifndef MOON_ACTORS_GW_MODEL_H
#define MOON_ACTORS_GW_MODEL_H

#include "gw_template.h"
#include "moonlet/status.h"
#include "moonlet/tokenizer.h"

#include <stdint.h>

/* Opens the GGUF at path and reads its tokenizer (*tok_p, destroy it with
 * moon_tokenizer_destroy), the context length (*n_ctx_p) and the embedding
 * size (*dim_p, may be NULL; both left as they are when the file has no
 * model config) and the chat template family (tpl; a
 * template none of the families match is logged and rendered plain).
 * MOON_ERR_NOT_FOUND/CORRUPT/IO: the file (logged); the tokenizer's status;
 * on error nothing is set. */
moon_status_t moon_gw_model_load(const char *path, moon_tokenizer_t **tok_p,
                                 moon_gw_template_t *tpl, uint32_t *n_ctx_p, uint32_t *dim_p);

/* The model id of a file: "dir/stories260K.gguf" -> "stories260K",
 * moon_malloc'd (NULL: out of memory). */
char *moon_gw_model_stem(const char *path);

#endif /* MOON_ACTORS_GW_MODEL_H */
