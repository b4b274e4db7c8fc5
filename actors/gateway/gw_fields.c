/* actors/gateway/gw_fields.c - the request fields' table (see gw_fields.h). */
#include "gw_fields.h"

#include "moonlet/alloc.h"

#include <string.h>

#define C MOON_GW_ROUTE_COMPLETIONS
#define H MOON_GW_ROUTE_CHAT
#define B MOON_GW_ROUTE_BOTH
#define READ MOON_GW_FIELD_READ
#define INERT MOON_GW_FIELD_INERT
#define NO MOON_GW_FIELD_REFUSED

/* OpenAI's fields of both routes, then vLLM's and llama.cpp's extensions
 * (those named here get a message saying what they are; any other key is
 * refused all the same). */
static const moon_gw_field_t fields[] = {
    /* OpenAI */
    {"model", B, READ, NULL},
    {"prompt", C, READ, NULL},
    {"messages", H, READ, NULL},
    {"max_tokens", B, READ, NULL},
    {"max_completion_tokens", B, READ, NULL},
    {"temperature", B, READ, NULL},
    {"top_p", B, READ, NULL},
    {"seed", B, READ, NULL},
    {"stop", B, READ, NULL},
    {"stream", B, READ, NULL},
    {"stream_options", B, READ, NULL},
    {"n", B, READ, NULL},
    {"best_of", C, READ, NULL},
    {"echo", C, READ, NULL},
    {"logprobs", B, READ, NULL},
    {"top_logprobs", H, READ, NULL},
    {"suffix", C, NO, "insertion (suffix)"},
    {"presence_penalty", B, READ, NULL},
    {"frequency_penalty", B, READ, NULL},
    {"logit_bias", B, READ, NULL},
    {"user", B, INERT, NULL}, /* an end-user id for the operator's monitoring */
    {"response_format", B, READ, NULL},
    {"tools", H, READ, NULL},
    {"tool_choice", H, READ, NULL},
    {"parallel_tool_calls", H, READ, NULL},
    {"functions", H, NO, "function calls (deprecated; use tools)"},
    {"function_call", H, NO, "function calls (deprecated; use tool_choice)"},
    {"audio", H, NO, "audio output"},
    {"modalities", H, NO, "output modalities"},
    {"prediction", H, NO, "predicted outputs"},
    {"reasoning_effort", H, NO, "reasoning models"},
    {"web_search_options", H, NO, "web search"},
    {"metadata", H, NO, "stored completions"},
    {"store", H, NO, "stored completions"},
    {"service_tier", B, NO, "service tiers"},
    /* vLLM */
    {"top_k", B, READ, NULL},
    {"min_p", B, READ, NULL},
    {"repetition_penalty", B, READ, NULL},
    {"min_tokens", B, READ, NULL},
    {"ignore_eos", B, READ, NULL},
    {"stop_token_ids", B, READ, NULL},
    {"include_stop_str_in_output", B, READ, NULL},
    {"guided_json", B, READ, NULL},
    {"guided_regex", B, NO, "structured output (vLLM's guided decoding)"},
    {"guided_choice", B, NO, "structured output (vLLM's guided decoding)"},
    {"guided_grammar", B, READ, NULL},
    {"guided_decoding_backend", B, NO, "structured output (vLLM's guided decoding)"},
    {"guided_whitespace_pattern", B, NO, "structured output (vLLM's guided decoding)"},
    {"structural_tag", B, NO, "structured output (vLLM's guided decoding)"},
    {"length_penalty", B, NO, "beam search"},
    {"use_beam_search", B, NO, "beam search"},
    {"prompt_logprobs", B, NO, "prompt logprobs (use echo with logprobs)"},
    {"allowed_token_ids", B, NO, "token allow-lists"},
    {"bad_words", B, NO, "bad-word lists"},
    {"skip_special_tokens", B, NO, "special-token output"},
    {"spaces_between_special_tokens", B, NO, "special-token output"},
    {"truncate_prompt_tokens", B, NO, "prompt truncation"},
    {"add_generation_prompt", H, READ, NULL},
    {"continue_final_message", H, NO, "chat-template options"},
    {"add_special_tokens", B, NO, "chat-template options"},
    {"chat_template", H, NO, "chat-template options"},
    {"chat_template_kwargs", H, NO, "chat-template options"},
    {"documents", H, NO, "chat-template options"},
    {"logits_processors", B, NO, "custom logits processors"},
    {"priority", B, NO, "request priorities"},
    {"return_tokens_as_token_ids", B, NO, "token-id output"},
    /* llama.cpp's server */
    {"grammar", B, READ, NULL},
    {"json_schema", B, NO, "structured output (llama.cpp's schema field)"},
    {"n_predict", B, NO, "llama.cpp's options (use max_tokens)"},
    {"n_probs", B, NO, "llama.cpp's options (use logprobs)"},
    {"repeat_penalty", B, NO, "llama.cpp's options (use repetition_penalty)"},
    {"repeat_last_n", B, NO, "llama.cpp's sampling options"},
    {"typical_p", B, NO, "llama.cpp's sampling options"},
    {"tfs_z", B, NO, "llama.cpp's sampling options"},
    {"mirostat", B, NO, "llama.cpp's sampling options"},
    {"mirostat_tau", B, NO, "llama.cpp's sampling options"},
    {"mirostat_eta", B, NO, "llama.cpp's sampling options"},
    {"cache_prompt", B, NO, "llama.cpp's options (the prefix cache is always on)"},
    /* Moonlet */
    {"moonlet_details", B, READ, NULL},
};

const moon_gw_field_t *moon_gw_field_find(const char *name)
{
    for (size_t i = 0; i < MOON_ARRAY_SIZE(fields); i++) {
        if (strcmp(fields[i].name, name) == 0) {
            return &fields[i];
        }
    }
    return NULL;
}

const moon_gw_field_t *moon_gw_fields(uint32_t *n_p)
{
    *n_p = (uint32_t)MOON_ARRAY_SIZE(fields);
    return fields;
}

moon_status_t moon_gw_fields_check(const cJSON *root, int chat, moon_gw_error_t *err)
{
    unsigned     route = chat ? H : C;
    const cJSON *f;

    cJSON_ArrayForEach(f, root)
    {
        const moon_gw_field_t *row = moon_gw_field_find(f->string);

        if (row == NULL || !(row->routes & route)) {
            moon_gw_error_set(err, 400, NULL, f->string,
                              "Unrecognized request argument supplied: %s (not a field of %s)",
                              f->string, chat ? "/v1/chat/completions" : "/v1/completions");
            return MOON_ERR_INVALID_PARAM;
        }
        if (row->how == NO && !cJSON_IsNull(f)) {
            moon_gw_error_set(err, 400, NULL, f->string,
                              "'%s' is not supported by this server (%s)", f->string, row->what);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    return MOON_OK;
}
