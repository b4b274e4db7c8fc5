/* actors/gateway/gw_openai.h - OpenAI request bodies to serving parameters:
 * POST /v1/completions and /v1/chat/completions parsed (cJSON), checked
 * field by field (wrong types, missing fields and unsupported values are 400s
 * naming the field), then prepared against the model: chat messages rendered
 * with its template, text tokenized (BOS first, as `moonlet generate` does),
 * the prompt's length checked against the context.
 *
 * Fields read: model, prompt (string, token ids, or a one-element list of
 * either) or messages (role + content string or text parts), max_tokens /
 * max_completion_tokens, temperature (default 1, as OpenAI), top_p, top_k,
 * seed, stop (string or list of up to 16, each at most 512 bytes), n (1 only), stream,
 * stream_options.include_usage, vLLM's ignore_eos and stop_token_ids, and
 * moonlet_details (placement and server times in the usage: gw_format.h),
 * what gw_structured.h reads (response_format, grammar, guided_json,
 * guided_grammar, tools, tool_choice, parallel_tool_calls; role "tool" turns
 * and assistant turns with tool_calls),
 * presence/frequency/repetition penalties, logit_bias, min_p, min_tokens,
 * include_stop_str_in_output, logprobs (completions: 0..20; chat: logprobs +
 * top_logprobs), echo (with logprobs: the prompt's too, as vLLM's), n and best_of; every key is
 * first checked against the field table (gw_fields.h): unknown or unimplemented fields are 400s
 * naming them, never ignored. max_tokens defaults to 16 for completions and to the rest of the
 * context for chat. Pure functions: any thread. */
#ifndef MOON_ACTORS_GW_OPENAI_H
#define MOON_ACTORS_GW_OPENAI_H

#include "gw_errors.h"
#include "gw_structured.h"
#include "gw_template.h"
#include "moonlet/serve_client.h"

#include <stddef.h>
#include <stdint.h>

/* Caps on what travels between ranks in every message of a request (the
 * SUBMIT, and the placement and handover copies): more is a 400 naming the
 * field. A prompt is capped by the model's context (or, context unknown, by
 * MOON_GW_MAX_PROMPT_TOKENS ids). */
#define MOON_GW_MAX_STOP 16u              /* stop strings */
#define MOON_GW_MAX_STOP_BYTES 512u       /* bytes in one stop string */
#define MOON_GW_MAX_STOP_IDS 256u         /* stop_token_ids */
#define MOON_GW_MAX_MESSAGES 4096u        /* chat turns */
#define MOON_GW_MAX_PROMPT_TOKENS 131072u /* token ids of a prompt, no context known */
#define MOON_GW_MAX_BIAS 1024u            /* logit_bias entries */
#define MOON_GW_MAX_CHOICES 16u           /* n and best_of: sequences of one prompt */
#define MOON_GW_MAX_PROMPTS 64u           /* a completion's list of prompts */
#define MOON_GW_MAX_SEQS 256u             /* prompts x best_of: sequences of one request */

typedef struct {
    int                 chat; /* 1: /v1/chat/completions */
    int                 stream;
    int                 include_usage;  /* stream_options.include_usage */
    int                 details;        /* "moonlet_details": placement and server times in usage */
    int                 has_max_tokens; /* given by the client */
    int                 has_seed;
    int                 echo;          /* completions: the prompt's text before the answer */
    int                 no_gen_prompt; /* chat: add_generation_prompt false (Jinja only) */
    uint32_t            n;             /* choices answered (1..MOON_GW_MAX_CHOICES) */
    uint32_t            best_of;       /* sequences decoded (>= n): the n of highest logprob win */
    uint32_t            n_prompts;     /* completions: prompts in the list (1: one prompt) */
    char               *model;         /* NULL: not given */
    char               *prompt;        /* completions text; NULL with token ids */
    int32_t            *tokens;        /* the prompt's ids: given, or set by prepare */
    uint32_t            n_tokens;
    moon_gw_chat_msg_t *msgs; /* chat: n_msgs turns (strings owned) */
    uint32_t            n_msgs;
    char    *msgs_json;  /* chat: the messages for a Jinja template (gw_chat_json.h; cJSON_free) */
    char    *tools_json; /* chat: the tools list, NULL: none (cJSON_free) */
    char    *stop[MOON_GW_MAX_STOP];
    uint32_t n_stop;
    int32_t *stop_ids;
    uint32_t n_stop_ids;
    int32_t *bias_ids; /* logit_bias: n_bias ids and their biases */
    float   *bias;
    uint32_t n_bias;
    moon_gw_structured_t structured; /* grammar and tools */
    moon_serve_params_t  params;     /* after prepare: points into this struct */
} moon_gw_request_t;

/* What prepare checks against. Borrowed. */
typedef struct {
    const char               *model_name; /* the one id /v1/models lists */
    const moon_gw_template_t *tpl;
    const moon_tokenizer_t   *tok;     /* NULL: text prompts go to the cluster as text */
    uint32_t                  n_ctx;   /* context length; 0: unknown (not checked) */
    uint32_t                  n_vocab; /* 0: ids not checked */
    uint32_t                  dim;     /* embedding size (/v1/embeddings); 0: unknown */
} moon_gw_model_info_t;

/* Parses len bytes of body into req (caller's memory; fini it whatever the
 * result). The body must be one JSON object and nothing else: a key twice in
 * an object, data after the value, a raw control character or a \u0000 in
 * a string are 400s (gw_json.h). MOON_ERR_INVALID_PARAM with err filled
 * (400), MOON_ERR_NO_MEMORY. */
moon_status_t moon_gw_openai_parse(const char *body, size_t len, int chat, moon_gw_request_t *req,
                                   moon_gw_error_t *err);
/* The same for the prompt_index-th prompt of a completion's list of prompts
 * (req->n_prompts says how many; each prompt is its own request). */
moon_status_t moon_gw_openai_parse_at(const char *body, size_t len, int chat, uint32_t prompt_index,
                                      moon_gw_request_t *req, moon_gw_error_t *err);
/* Checks the model (404 model_not_found), renders and tokenizes the prompt,
 * checks it against the context (400 context_length_exceeded) and fills
 * req->params. seed_salt seeds sampled requests that gave no seed. */
moon_status_t moon_gw_openai_prepare(moon_gw_request_t *req, const moon_gw_model_info_t *info,
                                     uint64_t seed_salt, moon_gw_error_t *err);
void          moon_gw_request_fini(moon_gw_request_t *req);

#endif /* MOON_ACTORS_GW_OPENAI_H */
