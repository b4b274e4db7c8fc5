/* actors/gateway/gw_openai.c - OpenAI request parsing and preparation (see gw_openai.h). */
#include "gw_openai.h"

#include "gw_buf.h"
#include "gw_chat_json.h"
#include "gw_fields.h"
#include "gw_json.h"
#include "moonlet/alloc.h"
#include "moonlet/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(_param, ...)                                                                           \
    do {                                                                                           \
        moon_gw_error_set(err, 400, NULL, _param, __VA_ARGS__);                                    \
        return MOON_ERR_INVALID_PARAM;                                                             \
    } while (0)

#define INT_MAX_F 2147483647.0

/* Token ids of a JSON array of integers (NULL *ids_p for an empty one). */
static moon_status_t parse_ids(const cJSON *arr, const char *param, uint32_t most, int32_t **ids_p,
                               uint32_t *n_p, moon_gw_error_t *err)
{
    int      n = cJSON_GetArraySize(arr);
    int32_t *ids;
    int      i = 0;
    cJSON   *e;

    if ((uint32_t)n > most) {
        BAD(param, "'%s' has %d token ids, more than the %u allowed", param, n, most);
    }
    ids = moon_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (ids == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    cJSON_ArrayForEach(e, arr)
    {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT_MAX_F ||
            e->valuedouble != (double)(int32_t)e->valuedouble) {
            moon_free(ids);
            BAD(param, "'%s' must be a list of token ids (non-negative integers)", param);
        }
        ids[i++] = (int32_t)e->valuedouble;
    }
    *ids_p = ids;
    *n_p   = (uint32_t)n;
    return MOON_OK;
}

static int all_numbers(const cJSON *arr)
{
    const cJSON *e;

    cJSON_ArrayForEach(e, arr)
    {
        if (!cJSON_IsNumber(e)) {
            return 0;
        }
    }
    return 1;
}

/* The prompt_index-th prompt: a string, a list of ids, or one of a list of
 * those. */
static moon_status_t parse_prompt(const cJSON *root, uint32_t prompt_index, moon_gw_request_t *req,
                                  moon_gw_error_t *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *e;

    if (p == NULL || cJSON_IsNull(p)) {
        BAD("prompt", "'prompt' is a required property");
    }
    req->n_prompts = 1;
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 && !all_numbers(p)) {
        int n = cJSON_GetArraySize(p);

        if ((uint32_t)n > MOON_GW_MAX_PROMPTS || (uint32_t)n * req->best_of > MOON_GW_MAX_SEQS) {
            BAD("prompt",
                "a list of %d prompts (x best_of %u) is more than the %u prompts and %u "
                "sequences allowed",
                n, req->best_of, MOON_GW_MAX_PROMPTS, MOON_GW_MAX_SEQS);
        }
        cJSON_ArrayForEach(e, p)
        {
            if (!cJSON_IsString(e) && !(cJSON_IsArray(e) && all_numbers(e))) {
                BAD("prompt", "'prompt' must be a string, a list of token ids, or a list of those");
            }
        }
        req->n_prompts = (uint32_t)n;
        p              = cJSON_GetArrayItem(p, (int)MOON_MIN(prompt_index, (uint32_t)n - 1));
    }
    if (cJSON_IsString(p)) {
        req->prompt = moon_strdup(p->valuestring);
        return req->prompt != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
    }
    if (cJSON_IsArray(p)) {
        if (cJSON_GetArraySize(p) == 0) {
            BAD("prompt", "'prompt' must not be empty");
        }
        return parse_ids(p, "prompt", MOON_GW_MAX_PROMPT_TOKENS, &req->tokens, &req->n_tokens, err);
    }
    BAD("prompt", "'prompt' must be a string, a list of token ids, or a list of one of those");
}

static int known_role(const char *role)
{
    static const char *roles[] = {"system", "developer", "user", "assistant"};

    for (size_t i = 0; i < MOON_ARRAY_SIZE(roles); i++) {
        if (strcmp(role, roles[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A message's content: a string, null (an assistant turn without text), or a
 * list of {"type": "text", "text": ...} parts, joined. */
static moon_status_t parse_content(const cJSON *c, uint32_t i, char **text_p, moon_gw_error_t *err)
{
    moon_gw_buf_t b;
    const cJSON  *part;
    char          param[48];

    snprintf(param, sizeof(param), "messages[%u].content", i);
    if (c == NULL || cJSON_IsNull(c)) {
        *text_p = moon_strdup("");
        return *text_p != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
    }
    if (cJSON_IsString(c)) {
        *text_p = moon_strdup(c->valuestring);
        return *text_p != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
    }
    if (!cJSON_IsArray(c)) {
        BAD(param, "'%s' must be a string or a list of text parts", param);
    }
    moon_gw_buf_init(&b);
    moon_gw_buf_puts(&b, "");
    cJSON_ArrayForEach(part, c)
    {
        const char *type = NULL;
        const char *text = NULL;

        if (!cJSON_IsObject(part) || moon_gw_json_str(part, "type", &type) != 1 ||
            strcmp(type, "text") != 0 || moon_gw_json_str(part, "text", &text) != 1) {
            moon_gw_buf_fini(&b);
            BAD(param, "'%s': only parts of type 'text' with a string 'text' are supported", param);
        }
        moon_gw_buf_puts(&b, text);
    }
    return moon_gw_buf_take(&b, text_p, NULL);
}

static moon_status_t parse_messages(const cJSON *root, moon_gw_request_t *req, moon_gw_error_t *err)
{
    const cJSON  *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const cJSON  *m;
    moon_status_t status;
    int           n;

    if (msgs == NULL || cJSON_IsNull(msgs)) {
        BAD("messages", "'messages' is a required property");
    }
    if (!cJSON_IsArray(msgs)) {
        BAD("messages", "'messages' must be a list of messages");
    }
    n = cJSON_GetArraySize(msgs);
    if (n == 0) {
        BAD("messages", "'messages' must not be empty");
    }
    if ((uint32_t)n > MOON_GW_MAX_MESSAGES) {
        BAD("messages", "'messages' has %d turns, more than the %u allowed", n,
            MOON_GW_MAX_MESSAGES);
    }
    req->msgs = moon_calloc((size_t)n, sizeof(*req->msgs));
    if (req->msgs == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    cJSON_ArrayForEach(m, msgs)
    {
        uint32_t    i    = req->n_msgs;
        const char *role = NULL;
        char        param[48];
        char       *content = NULL;

        snprintf(param, sizeof(param), "messages[%u].role", i);
        if (!cJSON_IsObject(m)) {
            snprintf(param, sizeof(param), "messages[%u]", i);
            BAD(param, "'%s' must be an object with a role and a content", param);
        }
        if (moon_gw_json_str(m, "role", &role) != 1) {
            BAD(param, "'%s' is required and must be a string", param);
        }
        if (moon_gw_structured_is_tool_msg(m, role)) {
            status = moon_gw_structured_tool_msg(m, i, &req->msgs[i], err);
            if (status != MOON_OK) {
                return status;
            }
            req->n_msgs++;
            continue;
        }
        if (!known_role(role)) {
            BAD(param, "'%s' must be one of system, developer, user, assistant (got '%s')", param,
                role);
        }
        status = parse_content(cJSON_GetObjectItemCaseSensitive(m, "content"), i, &content, err);
        if (status != MOON_OK) {
            return status;
        }
        req->msgs[i].content = content;
        req->msgs[i].role    = moon_strdup(role);
        req->n_msgs++;
        if (req->msgs[i].role == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
    }
    return MOON_OK;
}

/* One stop string (an empty one is dropped). */
static moon_status_t add_stop(const char *text, moon_gw_request_t *req, moon_gw_error_t *err)
{
    size_t n = strlen(text);

    if (n == 0) {
        return MOON_OK;
    }
    if (n > MOON_GW_MAX_STOP_BYTES) {
        BAD("stop", "a stop string has %zu bytes, more than the %u allowed", n,
            MOON_GW_MAX_STOP_BYTES);
    }
    req->stop[req->n_stop] = moon_strdup(text);
    return req->stop[req->n_stop++] != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
}

static moon_status_t parse_stop(const cJSON *root, moon_gw_request_t *req, moon_gw_error_t *err)
{
    const cJSON  *s = cJSON_GetObjectItemCaseSensitive(root, "stop");
    const cJSON  *e;
    moon_status_t status;

    if (s == NULL || cJSON_IsNull(s)) {
        return MOON_OK;
    }
    if (cJSON_IsString(s)) {
        return add_stop(s->valuestring, req, err);
    }
    if (!cJSON_IsArray(s)) {
        BAD("stop", "'stop' must be a string or a list of strings");
    }
    if (cJSON_GetArraySize(s) > (int)MOON_GW_MAX_STOP) {
        BAD("stop", "'stop' has at most %u strings", MOON_GW_MAX_STOP);
    }
    cJSON_ArrayForEach(e, s)
    {
        if (!cJSON_IsString(e)) {
            BAD("stop", "'stop' must be a string or a list of strings");
        }
        status = add_stop(e->valuestring, req, err);
        if (status != MOON_OK) {
            return status;
        }
    }
    return MOON_OK;
}

/* Values other servers accept but this one does not implement. */
/* n and best_of (completions): how many sequences decode and how many are
 * answered; echo (completions). Checked against stream once that is known
 * (check_choices). */
static moon_status_t parse_choices(const cJSON *root, int chat, moon_gw_request_t *req,
                                   moon_gw_error_t *err)
{
    long long n    = 1;
    long long best = 0;

    if (moon_gw_json_int(root, "n", 1, MOON_GW_MAX_CHOICES, &n) < 0) {
        BAD("n", "'n' must be an integer in [1, %u]", MOON_GW_MAX_CHOICES);
    }
    req->n = (uint32_t)n;
    switch (moon_gw_json_int(root, "best_of", 1, MOON_GW_MAX_CHOICES, &best)) {
    case -1:
        BAD("best_of", "'best_of' must be an integer in [1, %u]", MOON_GW_MAX_CHOICES);
    case 1:
        if (best < n) {
            BAD("best_of", "'best_of' (%lld) must be greater than or equal to 'n' (%lld)", best, n);
        }
        break;
    default:
        best = n;
    }
    req->best_of = (uint32_t)best;
    if (!chat && moon_gw_json_bool(root, "echo", &req->echo) < 0) {
        BAD("echo", "'echo' must be a boolean");
    }
    return MOON_OK;
}

/* What the choices' fields cannot be combined with. */
static moon_status_t check_choices(moon_gw_request_t *req, moon_gw_error_t *err)
{
    if (req->stream && req->best_of > req->n) {
        BAD("best_of", "'best_of' (%u) > 'n' (%u) cannot be streamed", req->best_of, req->n);
    }
    if (req->stream && req->n > 1 && req->structured.tools) {
        BAD("n", "'n' > 1 with 'tools' cannot be streamed by this server");
    }
    if (req->echo && req->params.logprobs > 0) {
        /* the prompt's logprobs too, computed by the prefill (every choice
         * asks: none takes the prompt from the prefix cache) */
        req->params.flags |= MOON_SERVE_F_PROMPT_LOGPROBS;
    }
    return MOON_OK;
}

/* A number field in [lo, hi] (1: given, 0: absent or null). */
static int num_in(const cJSON *root, const char *name, double lo, double hi, const char *range,
                  float *v_p, moon_gw_error_t *err)
{
    double d = 0;

    switch (moon_gw_json_num(root, name, &d)) {
    case -1:
        moon_gw_error_set(err, 400, NULL, name, "'%s' must be a number", name);
        return -1;
    case 1:
        if (!(d >= lo && d <= hi)) {
            moon_gw_error_set(err, 400, NULL, name, "'%s' must be %s (got %g)", name, range, d);
            return -1;
        }
        *v_p = (float)d;
        return 1;
    }
    return 0;
}

/* OpenAI's logit_bias: {"token id": bias in [-100, 100], ...}. */
static moon_status_t parse_logit_bias(const cJSON *root, moon_gw_request_t *req,
                                      moon_gw_error_t *err)
{
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    const cJSON *e;
    int          n;

    if (lb == NULL || cJSON_IsNull(lb)) {
        return MOON_OK;
    }
    if (!cJSON_IsObject(lb)) {
        BAD("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
    }
    n = cJSON_GetArraySize(lb);
    if ((uint32_t)n > MOON_GW_MAX_BIAS) {
        BAD("logit_bias", "'logit_bias' has %d entries, more than the %u allowed", n,
            MOON_GW_MAX_BIAS);
    }
    req->bias_ids = moon_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    req->bias     = moon_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (req->bias_ids == NULL || req->bias == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    cJSON_ArrayForEach(e, lb)
    {
        char         *end = NULL;
        unsigned long id  = strtoul(e->string, &end, 10);

        if (e->string[0] < '0' || e->string[0] > '9' || *end != '\0' || id > INT32_MAX) {
            BAD("logit_bias", "'logit_bias' keys must be token ids (got '%.40s')", e->string);
        }
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100)) {
            BAD("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
        }
        req->bias_ids[req->n_bias] = (int32_t)id;
        req->bias[req->n_bias++]   = (float)e->valuedouble;
    }
    return MOON_OK;
}

/* logprobs: completions' integer N (0..20: the chosen token's and the N most
 * likely), chat's boolean with top_logprobs (0..20). */
static moon_status_t parse_logprobs(const cJSON *root, moon_gw_request_t *req, moon_gw_error_t *err)
{
    long long v  = 0;
    int       on = 0;

    if (!req->chat) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
        if (f == NULL || cJSON_IsNull(f) || cJSON_IsFalse(f)) {
            return MOON_OK;
        }
        if (moon_gw_json_int(root, "logprobs", 0, MOON_LOGPROBS_MAX, &v) != 1) {
            BAD("logprobs", "'logprobs' must be an integer in [0, %u]", MOON_LOGPROBS_MAX);
        }
        req->params.logprobs = (uint32_t)v + 1;
        return MOON_OK;
    }
    if (moon_gw_json_bool(root, "logprobs", &on) < 0) {
        BAD("logprobs", "'logprobs' must be a boolean");
    }
    switch (moon_gw_json_int(root, "top_logprobs", 0, MOON_LOGPROBS_MAX, &v)) {
    case -1:
        BAD("top_logprobs", "'top_logprobs' must be an integer in [0, %u]", MOON_LOGPROBS_MAX);
    case 1:
        if (!on) {
            BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        }
        break;
    }
    req->params.logprobs = on ? (uint32_t)v + 1 : 0;
    return MOON_OK;
}

/* Penalties, min_p, min_tokens, logit_bias, include_stop_str_in_output. */
static moon_status_t parse_controls(const cJSON *root, moon_gw_request_t *req, moon_gw_error_t *err)
{
    moon_serve_params_t *p = &req->params;
    long long            v = 0;
    int                  b = 0;

    if (num_in(root, "presence_penalty", -2, 2, "in [-2, 2]", &p->presence_penalty, err) < 0 ||
        num_in(root, "frequency_penalty", -2, 2, "in [-2, 2]", &p->frequency_penalty, err) < 0 ||
        num_in(root, "repetition_penalty", 1e-6, 1e6, "> 0", &p->repetition_penalty, err) < 0 ||
        num_in(root, "min_p", 0, 1, "in [0, 1]", &p->min_p, err) < 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    switch (moon_gw_json_int(root, "min_tokens", 0, INT_MAX_F, &v)) {
    case -1:
        BAD("min_tokens", "'min_tokens' must be an integer >= 0");
    case 1:
        p->min_tokens = (uint32_t)v;
        break;
    }
    if (moon_gw_json_bool(root, "include_stop_str_in_output", &b) < 0) {
        BAD("include_stop_str_in_output", "'include_stop_str_in_output' must be a boolean");
    }
    if (b) {
        p->flags |= MOON_SERVE_F_STOP_STR_OUT;
    }
    return parse_logit_bias(root, req, err);
}

static moon_status_t parse_sampling(const cJSON *root, moon_gw_request_t *req, moon_gw_error_t *err)
{
    moon_serve_params_t *p = &req->params;
    long long            v = 0;
    double               d = 0;
    int                  b = 0;
    const cJSON         *opts;
    const cJSON         *ids;
    moon_status_t        status;

    switch (moon_gw_json_int(root, "max_completion_tokens", 1, INT_MAX_F, &v)) {
    case -1:
        BAD("max_completion_tokens", "'max_completion_tokens' must be an integer >= 1");
    case 1:
        p->max_tokens       = (uint32_t)v;
        req->has_max_tokens = 1;
        break;
    }
    switch (moon_gw_json_int(root, "max_tokens", 1, INT_MAX_F, &v)) {
    case -1:
        BAD("max_tokens", "'max_tokens' must be an integer >= 1");
    case 1:
        p->max_tokens       = (uint32_t)v;
        req->has_max_tokens = 1;
        break;
    }
    p->temperature = 1.0f;
    switch (moon_gw_json_num(root, "temperature", &d)) {
    case -1:
        BAD("temperature", "'temperature' must be a number");
    case 1:
        if (d < 0 || d > 2) {
            BAD("temperature", "'temperature' must be between 0 and 2 (got %g)", d);
        }
        p->temperature = (float)d;
        break;
    }
    p->top_p = 1.0f;
    switch (moon_gw_json_num(root, "top_p", &d)) {
    case -1:
        BAD("top_p", "'top_p' must be a number");
    case 1:
        if (!(d > 0 && d <= 1)) {
            BAD("top_p", "'top_p' must be in (0, 1] (got %g)", d);
        }
        p->top_p = (float)d;
        break;
    }
    switch (moon_gw_json_int(root, "top_k", -1, INT_MAX_F, &v)) {
    case -1:
        BAD("top_k", "'top_k' must be an integer >= -1 (-1 or 0: off)");
    case 1:
        p->top_k = v > 0 ? (uint32_t)v : 0;
        break;
    }
    switch (moon_gw_json_int(root, "seed", -9.0e18, 9.0e18, &v)) {
    case -1:
        BAD("seed", "'seed' must be an integer (|seed| <= 9e18)");
    case 1:
        p->seed       = (uint64_t)v;
        req->has_seed = 1;
        break;
    }
    if (moon_gw_json_bool(root, "stream", &req->stream) < 0) {
        BAD("stream", "'stream' must be a boolean");
    }
    opts = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (opts != NULL && !cJSON_IsNull(opts)) {
        if (!cJSON_IsObject(opts) || moon_gw_json_bool(opts, "include_usage", &b) < 0) {
            BAD("stream_options", "'stream_options' must be an object with a boolean "
                                  "'include_usage'");
        }
        req->include_usage = b;
    }
    if (moon_gw_json_bool(root, "moonlet_details", &req->details) < 0) {
        BAD("moonlet_details", "'moonlet_details' must be a boolean");
    }
    if (moon_gw_json_bool(root, "ignore_eos", &b) < 0) {
        BAD("ignore_eos", "'ignore_eos' must be a boolean");
    }
    if (b) {
        p->flags |= MOON_SERVE_F_IGNORE_EOS;
    }
    status = parse_controls(root, req, err);
    if (status == MOON_OK) {
        status = parse_logprobs(root, req, err);
    }
    if (status != MOON_OK) {
        return status;
    }
    ids = cJSON_GetObjectItemCaseSensitive(root, "stop_token_ids");
    if (ids != NULL && !cJSON_IsNull(ids)) {
        if (!cJSON_IsArray(ids)) {
            BAD("stop_token_ids", "'stop_token_ids' must be a list of token ids");
        }
        return parse_ids(ids, "stop_token_ids", MOON_GW_MAX_STOP_IDS, &req->stop_ids,
                         &req->n_stop_ids, err);
    }
    return MOON_OK;
}

moon_status_t moon_gw_openai_parse(const char *body, size_t len, int chat, moon_gw_request_t *req,
                                   moon_gw_error_t *err)
{
    return moon_gw_openai_parse_at(body, len, chat, 0, req, err);
}

/* vLLM's add_generation_prompt (default true): false renders the
 * conversation as it stands, the assistant's turn not opened. */
static moon_status_t parse_template_options(const cJSON *root, moon_gw_request_t *req,
                                            moon_gw_error_t *err)
{
    int open_turn = 1;

    if (moon_gw_json_bool(root, "add_generation_prompt", &open_turn) < 0) {
        BAD("add_generation_prompt", "'add_generation_prompt' must be a boolean");
    }
    req->no_gen_prompt = !open_turn;
    return MOON_OK;
}

moon_status_t moon_gw_openai_parse_at(const char *body, size_t len, int chat, uint32_t prompt_index,
                                      moon_gw_request_t *req, moon_gw_error_t *err)
{
    cJSON        *root  = NULL;
    const char   *model = NULL;
    moon_status_t status;

    memset(req, 0, sizeof(*req));
    req->chat      = chat;
    req->n_prompts = 1;
    status         = moon_gw_json_parse_body(body, len, &root, err);
    if (status != MOON_OK) {
        return status;
    }
    status = moon_gw_fields_check(root, chat, err);
    if (status != MOON_OK) {
        goto out;
    }
    switch (moon_gw_json_str(root, "model", &model)) {
    case -1:
        moon_gw_error_set(err, 400, NULL, "model", "'model' must be a string");
        status = MOON_ERR_INVALID_PARAM;
        goto out;
    case 1:
        req->model = moon_strdup(model);
        if (req->model == NULL) {
            status = MOON_ERR_NO_MEMORY;
            goto out;
        }
        break;
    }
    status = parse_choices(root, chat, req, err);
    if (status == MOON_OK) {
        status = chat ? parse_messages(root, req, err) : parse_prompt(root, prompt_index, req, err);
    }
    if (status == MOON_OK) {
        status = parse_sampling(root, req, err);
    }
    if (status == MOON_OK) {
        status = parse_stop(root, req, err);
    }
    if (status == MOON_OK) {
        status = moon_gw_structured_parse(root, chat, &req->structured, err);
    }
    if (status == MOON_OK && chat) {
        status = moon_gw_structured_add_tools(&req->structured, &req->msgs, &req->n_msgs);
    }
    if (status == MOON_OK) {
        status = check_choices(req, err);
    }
    if (status == MOON_OK && chat) {
        status = parse_template_options(root, req, err);
    }
    if (status == MOON_OK && chat) {
        status = moon_gw_chat_json(root, &req->msgs_json, &req->tools_json);
    }
out:
    cJSON_Delete(root);
    return status;
}

static moon_status_t tokenize_prompt(moon_gw_request_t *req, const moon_gw_model_info_t *info,
                                     moon_gw_error_t *err)
{
    moon_gw_prompt_t prompt;
    moon_status_t    status;
    size_t           len;
    size_t           n = 0;

    if (req->chat) {
        if (info->tpl->kind == MOON_GW_TPL_JINJA && req->msgs_json != NULL) {
            moon_jinja_error_t why;
            /* the model's own template; Hermes' tools prompt is not used */
            status = moon_gw_template_render_jinja(info->tpl, req->msgs_json, req->tools_json,
                                                   !req->no_gen_prompt, &prompt, &why);
            if (status == MOON_ERR_INVALID_PARAM) {
                moon_gw_error_set(err, 400, NULL, "messages", "the chat template failed: %s",
                                  why.msg);
            }
        } else if (req->no_gen_prompt) {
            /* the built-in renderings always open the assistant's turn */
            BAD("add_generation_prompt", "'add_generation_prompt': false needs the model's own "
                                         "chat template (tokenizer.chat_template); this model "
                                         "is served with a built-in one");
        } else {
            status = moon_gw_template_render(info->tpl, req->msgs, req->n_msgs, &prompt);
        }
        if (status != MOON_OK) {
            return status;
        }
        if (info->tok != NULL) {
            status = moon_gw_prompt_tokenize(&prompt, info->tok, &req->tokens, &req->n_tokens);
        } else {
            status = moon_gw_prompt_text(&prompt, info->tpl, &req->prompt);
        }
        moon_gw_prompt_fini(&prompt);
        return status;
    }
    if (req->prompt == NULL || info->tok == NULL) {
        return MOON_OK;
    }
    len         = strlen(req->prompt);
    req->tokens = moon_malloc((len + 2) * sizeof(int32_t));
    if (req->tokens == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = moon_tokenizer_encode(info->tok, req->prompt, len, true, req->tokens, len + 2, &n);
    req->n_tokens = (uint32_t)n;
    return status;
}

moon_status_t moon_gw_openai_prepare(moon_gw_request_t *req, const moon_gw_model_info_t *info,
                                     uint64_t seed_salt, moon_gw_error_t *err)
{
    moon_serve_params_t *p = &req->params;
    moon_status_t        status;

    if (req->model != NULL && info->model_name != NULL && strcmp(req->model, info->model_name)) {
        moon_gw_error_set(err, 404, "model_not_found", "model", "The model `%s` does not exist.",
                          req->model);
        return MOON_ERR_INVALID_PARAM;
    }
    /* A text so long that even the vocabulary's longest pieces would not fit
     * it in the context is refused before tokenizing it (merging is not
     * linear in the text's length). */
    if (info->n_ctx > 0 && info->tok != NULL) {
        size_t bytes = req->prompt != NULL ? strlen(req->prompt) : 0;
        size_t most  = (size_t)info->n_ctx * (moon_tokenizer_max_piece(info->tok) + 1);

        for (uint32_t i = 0; i < req->n_msgs; i++) {
            bytes += strlen(req->msgs[i].content);
        }
        if (bytes > most) {
            moon_gw_error_set(err, 400, "context_length_exceeded",
                              req->chat ? "messages" : "prompt",
                              "This model's maximum context length is %u tokens. However, your "
                              "prompt of %zu bytes is longer than that.",
                              info->n_ctx, bytes);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    status = tokenize_prompt(req, info, err);
    if (status == MOON_OK && req->chat) {
        /* tool calls in the syntax of the template that showed the tools */
        status = moon_gw_structured_bind(&req->structured, info->tpl->tools, err);
    }
    if (status != MOON_OK) {
        return status;
    }
    if (req->tokens == NULL && req->prompt == NULL) {
        BAD("prompt", "the prompt is empty");
    }
    if (req->tokens != NULL && req->n_tokens == 0) {
        BAD(req->chat ? "messages" : "prompt", "the prompt is empty");
    }
    for (uint32_t i = 0; i < req->n_tokens && info->n_vocab > 0 && req->prompt == NULL; i++) {
        if ((uint32_t)req->tokens[i] >= info->n_vocab) {
            BAD("prompt", "token id %d is out of the vocabulary (%u tokens)", req->tokens[i],
                info->n_vocab);
        }
    }
    for (uint32_t i = 0; i < req->n_bias && info->n_vocab > 0; i++) {
        if ((uint32_t)req->bias_ids[i] >= info->n_vocab) {
            BAD("logit_bias", "token id %d is out of the vocabulary (%u tokens)", req->bias_ids[i],
                info->n_vocab);
        }
    }
    if (p->min_tokens > p->max_tokens && req->has_max_tokens) {
        BAD("min_tokens", "'min_tokens' (%u) must not exceed max_tokens (%u)", p->min_tokens,
            p->max_tokens);
    }
    for (uint32_t i = 0; i < req->n_stop_ids && info->n_vocab > 0; i++) {
        if ((uint32_t)req->stop_ids[i] >= info->n_vocab) {
            BAD("stop_token_ids", "token id %d is out of the vocabulary (%u tokens)",
                req->stop_ids[i], info->n_vocab);
        }
    }
    if (info->n_ctx > 0 && req->tokens != NULL) {
        if (req->n_tokens >= info->n_ctx) {
            moon_gw_error_set(err, 400, "context_length_exceeded",
                              req->chat ? "messages" : "prompt",
                              "This model's maximum context length is %u tokens. However, your "
                              "prompt has %u tokens.",
                              info->n_ctx, req->n_tokens);
            return MOON_ERR_INVALID_PARAM;
        }
        if (req->has_max_tokens && req->n_tokens + (uint64_t)p->max_tokens > info->n_ctx) {
            moon_gw_error_set(err, 400, "context_length_exceeded", "max_tokens",
                              "This model's maximum context length is %u tokens. However, you "
                              "requested %llu tokens (%u in the prompt, %u for the completion).",
                              info->n_ctx, (unsigned long long)req->n_tokens + p->max_tokens,
                              req->n_tokens, p->max_tokens);
            return MOON_ERR_INVALID_PARAM;
        }
    }
    if (!req->has_max_tokens) {
        p->max_tokens = req->chat ? UINT32_MAX : 16;
        if (info->n_ctx > 0 && req->tokens != NULL) {
            p->max_tokens = MOON_MIN(p->max_tokens, info->n_ctx - req->n_tokens);
        } else if (req->chat) {
            p->max_tokens = info->n_ctx > 0 ? info->n_ctx : 256;
        }
    }
    if (!req->has_seed && p->temperature > 0) {
        p->seed = seed_salt;
    }
    p->prompt      = req->tokens != NULL ? NULL : req->prompt;
    p->tokens      = req->tokens;
    p->n_tokens    = req->tokens != NULL ? req->n_tokens : 0;
    p->stop_ids    = req->stop_ids;
    p->n_stop_ids  = req->n_stop_ids;
    p->bias_ids    = req->bias_ids;
    p->bias        = req->bias;
    p->n_bias      = req->n_bias;
    p->stop        = (const char *const *)req->stop;
    p->n_stop      = req->n_stop;
    p->grammar     = req->structured.grammar;
    p->grammar_len = req->structured.grammar_len;
    /* Ids made here carry their BOS; a text prompt gets it from the cluster. */
    if (p->prompt != NULL) {
        p->flags |= MOON_SERVE_F_ADD_BOS;
    }
    return MOON_OK;
}

void moon_gw_request_fini(moon_gw_request_t *req)
{
    moon_free(req->model);
    moon_free(req->prompt);
    moon_free(req->tokens);
    for (uint32_t i = 0; i < req->n_msgs; i++) {
        moon_free((char *)req->msgs[i].role);
        moon_free((char *)req->msgs[i].content);
    }
    moon_free(req->msgs);
    cJSON_free(req->msgs_json);
    cJSON_free(req->tools_json);
    for (uint32_t i = 0; i < req->n_stop; i++) {
        moon_free(req->stop[i]);
    }
    moon_free(req->stop_ids);
    moon_free(req->bias_ids);
    moon_free(req->bias);
    moon_gw_structured_fini(&req->structured);
    memset(req, 0, sizeof(*req));
}
