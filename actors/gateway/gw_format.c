/* actors/gateway/gw_format.c - OpenAI response bodies and SSE chunks (see gw_format.h),
 * built with cJSON (which keeps insertion order and prints compactly). */
#include "gw_format.h"

#include "gw_json.h"
#include "moonlet/alloc.h"

#include <string.h>

/* id, object, created, model, system_fingerprint */
static cJSON *head(const moon_gw_resp_meta_t *m, const char *object)
{
    cJSON *o = cJSON_CreateObject();

    if (o == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(o, "id", m->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)m->created);
    cJSON_AddStringToObject(o, "model", m->model);
    cJSON_AddStringToObject(o, "system_fingerprint", m->fingerprint);
    return o;
}

static void add_str_or_null(cJSON *o, const char *name, const char *v)
{
    if (v != NULL) {
        cJSON_AddStringToObject(o, name, v);
    } else {
        cJSON_AddNullToObject(o, name);
    }
}

static void add_usage(cJSON *o, const moon_gw_usage_t *u)
{
    cJSON *usage = cJSON_AddObjectToObject(o, "usage");
    cJSON *details;

    if (usage == NULL) {
        return;
    }
    cJSON_AddNumberToObject(usage, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(usage, "completion_tokens", u->completion_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens",
                            (double)u->prompt_tokens + (double)u->completion_tokens);
    details = cJSON_AddObjectToObject(usage, "prompt_tokens_details");
    if (details != NULL) {
        cJSON_AddNumberToObject(details, "cached_tokens", u->cached_tokens);
    }
    details = cJSON_AddObjectToObject(usage, "moonlet");
    if (details != NULL) {
        cJSON_AddNumberToObject(details, "weight_version", (double)u->weight_version);
    }
    details = u->details ? cJSON_AddObjectToObject(usage, "moonlet_details") : NULL;
    if (details != NULL) {
        cJSON_AddNumberToObject(details, "prefill_instance", u->prefill_instance);
        cJSON_AddNumberToObject(details, "decode_instance", u->decode_instance);
        cJSON_AddNumberToObject(details, "queue_s", u->queue_s);
        cJSON_AddNumberToObject(details, "prefill_s", u->prefill_s);
        cJSON_AddNumberToObject(details, "transfer_s", u->transfer_s);
        cJSON_AddNumberToObject(details, "ttft_s", u->ttft_s);
    }
}

/* Prints o (deleting it), optionally framed as an SSE event. */
static char *finish_text(cJSON *o, int sse, size_t *len_p)
{
    char *out;

    if (o == NULL) {
        return NULL;
    }
    out = moon_gw_json_print_wrapped(o, sse ? "data: " : "", sse ? "\n\n" : "", len_p);
    cJSON_Delete(o);
    return out;
}

/* The response object with its one choice (m->index): returns the choice and
 * sets *o_p to the object; NULL when out of memory. */
static cJSON *head_with_choice(const moon_gw_resp_meta_t *m, const char *object, cJSON **o_p)
{
    cJSON *o = head(m, object);
    cJSON *choices;
    cJSON *c;

    if (o == NULL || (choices = cJSON_AddArrayToObject(o, "choices")) == NULL ||
        (c = cJSON_CreateObject()) == NULL) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", m->index);
    *o_p = o;
    return c;
}

char *moon_gw_format_response(const moon_gw_resp_meta_t *m, const char *text, const char *finish,
                              const moon_gw_usage_t *u, size_t *len_p)
{
    cJSON *o = NULL;
    cJSON *c = head_with_choice(m, m->chat ? "chat.completion" : "text_completion", &o);

    if (c == NULL) {
        return NULL;
    }
    if (m->chat) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        if (msg != NULL) {
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddStringToObject(msg, "content", text);
        }
    } else {
        cJSON_AddStringToObject(c, "text", text);
    }
    if (m->logprobs != NULL) {
        cJSON_AddRawToObject(c, "logprobs", m->logprobs);
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
    add_str_or_null(c, "finish_reason", finish);
    add_usage(o, u);
    return finish_text(o, 0, len_p);
}

char *moon_gw_format_chunk(const moon_gw_resp_meta_t *m, int role, const char *text,
                           const char *finish, size_t *len_p)
{
    cJSON *o = NULL;
    cJSON *c = head_with_choice(m, m->chat ? "chat.completion.chunk" : "text_completion", &o);

    if (c == NULL) {
        return NULL;
    }
    if (m->chat) {
        cJSON *delta = cJSON_AddObjectToObject(c, "delta");
        if (delta != NULL && role) {
            cJSON_AddStringToObject(delta, "role", "assistant");
            cJSON_AddStringToObject(delta, "content", "");
        } else if (delta != NULL && text != NULL) {
            cJSON_AddStringToObject(delta, "content", text);
        }
    } else {
        cJSON_AddStringToObject(c, "text", text != NULL ? text : "");
    }
    if (m->logprobs != NULL) {
        cJSON_AddRawToObject(c, "logprobs", m->logprobs);
    } else {
        cJSON_AddNullToObject(c, "logprobs");
    }
    add_str_or_null(c, "finish_reason", finish);
    if (m->include_usage) {
        cJSON_AddNullToObject(o, "usage");
    }
    return finish_text(o, 1, len_p);
}

char *moon_gw_format_usage_chunk(const moon_gw_resp_meta_t *m, const moon_gw_usage_t *u,
                                 size_t *len_p)
{
    cJSON *o = head(m, m->chat ? "chat.completion.chunk" : "text_completion");

    if (o == NULL || cJSON_AddArrayToObject(o, "choices") == NULL) {
        cJSON_Delete(o);
        return NULL;
    }
    add_usage(o, u);
    return finish_text(o, 1, len_p);
}

char *moon_gw_format_error_event(const moon_gw_error_t *err, size_t *len_p)
{
    char *json = moon_gw_error_json(err);
    char *out;

    if (json == NULL) {
        return NULL;
    }
    out = moon_gw_json_wrap("data: ", json, strlen(json), "\n\n", len_p);
    moon_free(json);
    return out;
}

char *moon_gw_format_models(const char *model, int64_t created, uint32_t n_ctx,
                            int64_t weight_version, int list, size_t *len_p)
{
    cJSON *m = cJSON_CreateObject();
    cJSON *o;
    cJSON *data;

    if (m == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(m, "id", model);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)created);
    cJSON_AddStringToObject(m, "owned_by", "moonlet");
    if (n_ctx > 0) {
        cJSON_AddNumberToObject(m, "max_model_len", n_ctx);
    }
    if (weight_version >= 0) {
        cJSON *ml = cJSON_AddObjectToObject(m, "moonlet");
        if (ml != NULL) {
            cJSON_AddNumberToObject(ml, "weight_version", (double)weight_version);
        }
    }
    if (!list) {
        return finish_text(m, 0, len_p);
    }
    o = cJSON_CreateObject();
    if (o == NULL || cJSON_AddStringToObject(o, "object", "list") == NULL ||
        (data = cJSON_AddArrayToObject(o, "data")) == NULL) {
        cJSON_Delete(o);
        cJSON_Delete(m);
        return NULL;
    }
    cJSON_AddItemToArray(data, m);
    return finish_text(o, 0, len_p);
}
