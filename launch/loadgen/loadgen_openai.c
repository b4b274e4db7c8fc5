/* launch/loadgen/loadgen_openai.c - request bodies and streamed chunks of the OpenAI
 * completions and chat completions APIs (loadgen_openai.h). */
#include "loadgen_openai.h"

#include "moonlet/alloc.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <string.h>

static const char *const role_names[] = {"system", "user", "assistant"};

/* The words of ids[0..n) joined by spaces, appended to a growing string. */
static char *words_text(const uint32_t *ids, uint32_t n)
{
    size_t bytes = 1;
    char  *text, *p;

    for (uint32_t i = 0; i < n; i++) {
        bytes += strlen(moon_loadgen_word(ids[i])) + 1;
    }
    text = moon_malloc(bytes);
    if (text == NULL) {
        return NULL;
    }
    p = text;
    for (uint32_t i = 0; i < n; i++) {
        const char *w = moon_loadgen_word(ids[i]);
        size_t      l = strlen(w);
        if (i > 0) {
            *p++ = ' ';
        }
        memcpy(p, w, l);
        p += l;
    }
    *p = '\0';
    return text;
}

static cJSON *completion_prompt(const moon_loadgen_workload_t *wl, const moon_loadgen_req_t *req)
{
    cJSON *prompt;
    char  *text, *joined, *p;
    size_t bytes = 1;

    if (!wl->words) {
        prompt = cJSON_CreateArray();
        for (uint32_t i = 0; prompt != NULL && i < req->n_ids; i++) {
            cJSON *id = cJSON_CreateNumber(req->ids[i]);
            if (id == NULL || !cJSON_AddItemToArray(prompt, id)) {
                cJSON_Delete(id);
                cJSON_Delete(prompt);
                return NULL;
            }
        }
        return prompt;
    }
    /* words: each message's text, joined by newlines */
    for (uint32_t m = 0; m < req->n_msgs; m++) {
        for (uint32_t i = 0; i < req->msgs[m].n_ids; i++) {
            bytes += strlen(moon_loadgen_word(req->ids[req->msgs[m].start + i])) + 1;
        }
    }
    joined = moon_malloc(bytes);
    if (joined == NULL) {
        return NULL;
    }
    p = joined;
    for (uint32_t m = 0; m < req->n_msgs; m++) {
        text = words_text(req->ids + req->msgs[m].start, req->msgs[m].n_ids);
        if (text == NULL) {
            moon_free(joined);
            return NULL;
        }
        if (m > 0) {
            *p++ = '\n';
        }
        memcpy(p, text, strlen(text));
        p += strlen(text);
        moon_free(text);
    }
    *p     = '\0';
    prompt = cJSON_CreateString(joined);
    moon_free(joined);
    return prompt;
}

static cJSON *chat_messages(const moon_loadgen_req_t *req)
{
    cJSON *msgs = cJSON_CreateArray();

    for (uint32_t m = 0; msgs != NULL && m < req->n_msgs; m++) {
        cJSON *msg  = cJSON_CreateObject();
        char  *text = words_text(req->ids + req->msgs[m].start, req->msgs[m].n_ids);
        int    ok   = msg != NULL && text != NULL &&
                 cJSON_AddStringToObject(msg, "role", role_names[req->msgs[m].role % 3]) != NULL &&
                 cJSON_AddStringToObject(msg, "content", text) != NULL &&
                 cJSON_AddItemToArray(msgs, msg);
        moon_free(text);
        if (!ok) {
            cJSON_Delete(msg);
            cJSON_Delete(msgs);
            return NULL;
        }
    }
    return msgs;
}

moon_status_t moon_loadgen_openai_body(const moon_loadgen_opts_t *opts, const char *model,
                                       const moon_loadgen_workload_t *wl,
                                       const moon_loadgen_req_t *req, char **body_p)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *so, *prompt;
    char  *printed, *body;
    int    chat = moon_loadgen_opts_is_chat(opts);
    int    ok   = root != NULL;

    ok     = ok && cJSON_AddStringToObject(root, "model", model) != NULL;
    prompt = ok ? (chat ? chat_messages(req) : completion_prompt(wl, req)) : NULL;
    ok = ok && prompt != NULL && cJSON_AddItemToObject(root, chat ? "messages" : "prompt", prompt);
    if (!ok) {
        cJSON_Delete(prompt);
    }
    ok = ok && cJSON_AddNumberToObject(root, "max_tokens", req->max_tokens) != NULL;
    ok = ok && cJSON_AddTrueToObject(root, "stream") != NULL;
    so = ok ? cJSON_AddObjectToObject(root, "stream_options") : NULL;
    ok = ok && so != NULL && cJSON_AddTrueToObject(so, "include_usage") != NULL;
    ok = ok && cJSON_AddNumberToObject(root, "temperature", opts->temperature) != NULL;
    if (opts->ignore_eos) {
        ok = ok && cJSON_AddTrueToObject(root, "ignore_eos") != NULL;
    }
    if (opts->details) {
        ok = ok && cJSON_AddTrueToObject(root, "moonlet_details") != NULL;
    }
    printed = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (printed == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    body = moon_strdup(printed);
    cJSON_free(printed);
    if (body == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    *body_p = body;
    return MOON_OK;
}

static void copy_text(char *out, size_t out_len, const char *s)
{
    snprintf(out, out_len, "%s", s != NULL ? s : "");
}

/* error: {"message": ...} or a plain string */
static void error_of(const cJSON *err, char *out, size_t out_len)
{
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");

    if (cJSON_IsString(err)) {
        copy_text(out, out_len, err->valuestring);
    } else if (cJSON_IsString(msg)) {
        copy_text(out, out_len, msg->valuestring);
    } else {
        copy_text(out, out_len, "error object without a message");
    }
}

/* Moonlet's usage extension (gw_format.h): where the request ran, its queue. */
static void details_of(const cJSON *d, moon_loadgen_chunk_t *chunk)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(d, "prefill_instance");
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(d, "decode_instance");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(d, "queue_s");

    if (cJSON_IsNumber(p) && cJSON_IsNumber(q) && cJSON_IsNumber(w) && p->valuedouble >= -1 &&
        p->valuedouble < 1e6 && q->valuedouble >= -1 && q->valuedouble < 1e6 &&
        w->valuedouble >= 0) {
        chunk->has_details      = 1;
        chunk->prefill_instance = (int32_t)p->valuedouble;
        chunk->decode_instance  = (int32_t)q->valuedouble;
        chunk->queue_s          = w->valuedouble;
    }
}

moon_status_t moon_loadgen_openai_chunk(const char *data, size_t len, moon_loadgen_chunk_t *chunk)
{
    cJSON       *root;
    const cJSON *choices, *choice, *text, *delta, *usage, *n, *fr, *err;

    memset(chunk, 0, sizeof(*chunk));
    while (len > 0 && (data[0] == ' ' || data[0] == '\t')) {
        data++;
        len--;
    }
    if (len >= 6 && strncmp(data, "[DONE]", 6) == 0) {
        chunk->done = 1;
        return MOON_OK;
    }
    root = cJSON_ParseWithLength(data, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        copy_text(chunk->error, sizeof(chunk->error), "stream chunk is not a JSON object");
        return MOON_ERR_CORRUPT;
    }
    err = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (err != NULL && !cJSON_IsNull(err)) {
        chunk->has_error = 1;
        error_of(err, chunk->error, sizeof(chunk->error));
    }
    choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    choice  = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    if (choice != NULL) {
        text  = cJSON_GetObjectItemCaseSensitive(choice, "text");
        delta = cJSON_GetObjectItemCaseSensitive(choice, "delta");
        if (!cJSON_IsString(text) && delta != NULL) {
            text = cJSON_GetObjectItemCaseSensitive(delta, "content");
            if (!cJSON_IsString(text) || text->valuestring[0] == '\0') {
                const cJSON *reasoning =
                    cJSON_GetObjectItemCaseSensitive(delta, "reasoning_content");
                if (cJSON_IsString(reasoning)) {
                    text = reasoning;
                }
            }
        }
        if (cJSON_IsString(text) && text->valuestring[0] != '\0') {
            chunk->has_text = 1;
            chunk->text_len = strlen(text->valuestring);
        }
        fr = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
        if (cJSON_IsString(fr)) {
            copy_text(chunk->finish_reason, sizeof(chunk->finish_reason), fr->valuestring);
        }
    }
    usage = cJSON_GetObjectItemCaseSensitive(root, "usage");
    if (cJSON_IsObject(usage)) {
        n = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
        if (cJSON_IsNumber(n) && n->valuedouble >= 0) {
            chunk->has_usage         = 1;
            chunk->completion_tokens = (uint32_t)n->valuedouble;
        }
        n = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
        if (cJSON_IsNumber(n) && n->valuedouble >= 0) {
            chunk->prompt_tokens = (uint32_t)n->valuedouble;
        }
        n = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens_details"), "cached_tokens");
        if (cJSON_IsNumber(n) && n->valuedouble >= 0) {
            chunk->cached_tokens = (uint32_t)n->valuedouble;
        }
        details_of(cJSON_GetObjectItemCaseSensitive(usage, "moonlet_details"), chunk);
    }
    cJSON_Delete(root);
    return MOON_OK;
}

void moon_loadgen_openai_error_text(const char *body, size_t len, char *out, size_t out_len)
{
    cJSON       *root = body != NULL ? cJSON_ParseWithLength(body, len) : NULL;
    const cJSON *err  = cJSON_GetObjectItemCaseSensitive(root, "error");

    if (err != NULL) {
        error_of(err, out, out_len);
    } else {
        size_t n = len < out_len - 1 ? len : out_len - 1;
        if (body != NULL) {
            memcpy(out, body, n);
        }
        out[n] = '\0';
        /* one line in a summary */
        for (size_t i = 0; i < n; i++) {
            if (out[i] == '\n' || out[i] == '\r') {
                out[i] = ' ';
            }
        }
    }
    cJSON_Delete(root);
}

moon_status_t moon_loadgen_openai_first_model(const char *body, size_t len, char **model_p)
{
    cJSON        *root   = body != NULL ? cJSON_ParseWithLength(body, len) : NULL;
    const cJSON  *data   = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON  *id     = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, 0), "id");
    moon_status_t status = MOON_ERR_NOT_FOUND;

    if (cJSON_IsString(id) && id->valuestring[0] != '\0') {
        *model_p = moon_strdup(id->valuestring);
        status   = *model_p != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
    }
    cJSON_Delete(root);
    return status;
}
