/* actors/gateway/gw_embed.c - /v1/embeddings' body and answer (gw_embed.h). */
#include "gw_embed.h"

#include "gw_buf.h"
#include "gw_json.h"
#include "moonlet/alloc.h"

#include <math.h>
#include <string.h>

#define BAD(_param, ...)                                                                           \
    do {                                                                                           \
        moon_gw_error_set(err, 400, NULL, _param, __VA_ARGS__);                                    \
        return MOON_ERR_INVALID_PARAM;                                                             \
    } while (0)

static int key_allowed(const char *k)
{
    static const char *keys[] = {"input", "model", "encoding_format", "dimensions", "user"};

    for (size_t i = 0; i < MOON_ARRAY_SIZE(keys); i++) {
        if (strcmp(k, keys[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* 1 when v is an array of numbers only (token ids), 0 otherwise. */
static int is_ids(const cJSON *v)
{
    const cJSON *e;

    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0) {
        return 0;
    }
    cJSON_ArrayForEach(e, v)
    {
        if (!cJSON_IsNumber(e)) {
            return 0;
        }
    }
    return 1;
}

/* Input i's ids from v (a string or an array of ids) into req. */
static moon_status_t take_input(const cJSON *v, uint32_t i, const moon_gw_model_info_t *info,
                                moon_gw_embed_req_t *req, moon_gw_error_t *err)
{
    size_t        n = 0, len;
    moon_status_t status;

    if (cJSON_IsString(v)) {
        len = strlen(v->valuestring);
        if (len == 0) {
            BAD("input", "input %u is empty", i);
        }
        if (info->tok == NULL) {
            moon_gw_error_set(err, 501, NULL, "input",
                              "this gateway has no tokenizer: give the input as token ids");
            return MOON_ERR_INVALID_PARAM;
        }
        /* as a completion's prompt: the longest pieces could not fit more */
        if (info->n_ctx > 0 &&
            len > (size_t)info->n_ctx * (moon_tokenizer_max_piece(info->tok) + 1)) {
            moon_gw_error_set(err, 400, "context_length_exceeded", "input",
                              "This model's maximum context length is %u tokens. However, input "
                              "%u of %zu bytes is longer than that.",
                              info->n_ctx, i, len);
            return MOON_ERR_INVALID_PARAM;
        }
        req->tokens[i] = moon_malloc((len + 2) * sizeof(int32_t));
        if (req->tokens[i] == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        status = moon_tokenizer_encode(info->tok, v->valuestring, len, true, req->tokens[i],
                                       len + 2, &n);
        if (status != MOON_OK) {
            return status;
        }
    } else if (is_ids(v)) {
        const cJSON *e;
        uint32_t     cap = (uint32_t)cJSON_GetArraySize(v);

        if (cap > MOON_GW_MAX_PROMPT_TOKENS) {
            BAD("input", "input %u has more than %u token ids", i, MOON_GW_MAX_PROMPT_TOKENS);
        }
        req->tokens[i] = moon_malloc((size_t)cap * sizeof(int32_t));
        if (req->tokens[i] == NULL) {
            return MOON_ERR_NO_MEMORY;
        }
        cJSON_ArrayForEach(e, v)
        {
            double d = e->valuedouble;
            if (d < 0 || d != floor(d) || (info->n_vocab > 0 && d >= info->n_vocab) ||
                d > INT32_MAX) {
                BAD("input", "input %u: token id %g is out of the vocabulary (%u tokens)", i, d,
                    info->n_vocab);
            }
            req->tokens[i][n++] = (int32_t)d;
        }
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0) {
        BAD("input", "input %u is empty", i);
    } else {
        BAD("input", "'input' must be a string, an array of strings, an array of token ids or "
                     "an array of arrays of token ids");
    }
    req->n_tokens[i] = (uint32_t)n;
    if (n == 0) {
        BAD("input", "input %u is empty", i);
    }
    if (info->n_ctx > 0 && n >= info->n_ctx) {
        moon_gw_error_set(err, 400, "context_length_exceeded", "input",
                          "This model's maximum context length is %u tokens. However, input %u "
                          "has %zu tokens.",
                          info->n_ctx, i, n);
        return MOON_ERR_INVALID_PARAM;
    }
    return MOON_OK;
}

static moon_status_t parse_root(const cJSON *root, const moon_gw_model_info_t *info,
                                moon_gw_embed_req_t *req, moon_gw_error_t *err)
{
    const cJSON *f, *input = cJSON_GetObjectItemCaseSensitive(root, "input");
    const char  *model = NULL, *format = NULL, *user = NULL;
    long long    dims = 0;
    int          many;

    cJSON_ArrayForEach(f, root)
    {
        if (!key_allowed(f->string)) {
            BAD(f->string,
                "Unrecognized request argument supplied: %s (not a field of "
                "/v1/embeddings)",
                f->string);
        }
    }
    if (moon_gw_json_str(root, "model", &model) < 0) {
        BAD("model", "'model' must be a string");
    }
    if (model != NULL && info->model_name != NULL && strcmp(model, info->model_name) != 0) {
        moon_gw_error_set(err, 404, "model_not_found", "model", "The model `%s` does not exist.",
                          model);
        return MOON_ERR_INVALID_PARAM;
    }
    if (moon_gw_json_str(root, "user", &user) < 0) {
        BAD("user", "'user' must be a string");
    }
    if (moon_gw_json_str(root, "encoding_format", &format) < 0 ||
        (format != NULL && strcmp(format, "float") != 0 && strcmp(format, "base64") != 0)) {
        BAD("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    }
    req->base64 = format != NULL && strcmp(format, "base64") == 0;
    if (moon_gw_json_int(root, "dimensions", 1, 1e9, &dims) < 0 ||
        (dims != 0 && info->dim > 0 && (uint64_t)dims != info->dim)) {
        BAD("dimensions",
            "'dimensions' must be this model's embedding size, %u (it cannot be "
            "shortened)",
            info->dim);
    }
    if (input == NULL || cJSON_IsNull(input)) {
        BAD("input", "'input' is required");
    }
    /* one input: a string or ids; many: an array of strings or of id arrays */
    many          = cJSON_IsArray(input) && !is_ids(input) && cJSON_GetArraySize(input) > 0;
    req->n_inputs = many ? (uint32_t)cJSON_GetArraySize(input) : 1;
    if (req->n_inputs > MOON_GW_EMBED_MAX_INPUTS) {
        BAD("input", "'input' has more than %u inputs", MOON_GW_EMBED_MAX_INPUTS);
    }
    req->tokens   = moon_calloc(req->n_inputs, sizeof(*req->tokens));
    req->n_tokens = moon_calloc(req->n_inputs, sizeof(*req->n_tokens));
    if (req->tokens == NULL || req->n_tokens == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    if (!many) {
        return take_input(input, 0, info, req, err);
    }
    for (uint32_t i = 0; i < req->n_inputs; i++) {
        moon_status_t status = take_input(cJSON_GetArrayItem(input, (int)i), i, info, req, err);
        if (status != MOON_OK) {
            return status;
        }
    }
    return MOON_OK;
}

moon_status_t moon_gw_embed_parse(const char *body, size_t len, const moon_gw_model_info_t *info,
                                  moon_gw_embed_req_t *req, moon_gw_error_t *err)
{
    cJSON        *root = NULL;
    moon_status_t status;

    memset(req, 0, sizeof(*req));
    status = moon_gw_json_parse_body(body, len, &root, err);
    if (status != MOON_OK) {
        return status;
    }
    status = parse_root(root, info, req, err);
    cJSON_Delete(root);
    return status;
}

void moon_gw_embed_fini(moon_gw_embed_req_t *req)
{
    for (uint32_t i = 0; req->tokens != NULL && i < req->n_inputs; i++) {
        moon_free(req->tokens[i]);
    }
    moon_free(req->tokens);
    moon_free(req->n_tokens);
    memset(req, 0, sizeof(*req));
}

void moon_gw_embed_params(const moon_gw_embed_req_t *req, uint32_t i, moon_serve_params_t *p)
{
    moon_serve_params_default(p);
    p->tokens     = req->tokens[i];
    p->n_tokens   = req->n_tokens[i];
    p->max_tokens = 1; /* nothing is generated: the prefill answers */
    p->flags      = MOON_SERVE_F_EMBED;
}

/* RFC 4648 base64 of n bytes. */
static void put_base64(moon_gw_buf_t *b, const uint8_t *s, size_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char              q[5]  = {0};

    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        q[0] = abc[v >> 18 & 63];
        q[1] = abc[v >> 12 & 63];
        q[2] = i + 1 < n ? abc[v >> 6 & 63] : '=';
        q[3] = i + 2 < n ? abc[v & 63] : '=';
        moon_gw_buf_puts(b, q);
    }
}

char *moon_gw_embed_response(const moon_gw_embed_req_t *req, const char *model,
                             const uint32_t *const *vecs, uint32_t dim, size_t *len_p)
{
    moon_gw_buf_t b;
    uint64_t      n_tokens  = 0;
    cJSON        *name      = cJSON_CreateString(model != NULL ? model : "");
    char         *name_json = name != NULL ? cJSON_PrintUnformatted(name) : NULL;
    char         *text      = NULL;

    cJSON_Delete(name);
    if (name_json == NULL) {
        return NULL;
    }
    moon_gw_buf_init(&b);
    moon_gw_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (uint32_t i = 0; i < req->n_inputs; i++) {
        moon_gw_buf_printf(
            &b, "%s{\"object\":\"embedding\",\"index\":%u,\"embedding\":", i > 0 ? "," : "", i);
        n_tokens += req->n_tokens[i];
        if (req->base64) { /* little-endian float32s, as OpenAI's */
            moon_gw_buf_puts(&b, "\"");
            put_base64(&b, (const uint8_t *)vecs[i], (size_t)dim * 4);
            moon_gw_buf_puts(&b, "\"}");
            continue;
        }
        if (dim == 0) {
            moon_gw_buf_puts(&b, "[");
        }
        for (uint32_t j = 0; j < dim; j++) {
            float v;
            memcpy(&v, &vecs[i][j], 4);
            moon_gw_buf_printf(&b, "%s%.9g", j > 0 ? "," : "[", (double)v);
        }
        moon_gw_buf_puts(&b, "]}");
    }
    moon_gw_buf_printf(&b,
                       "],\"model\":%s,\"usage\":{\"prompt_tokens\":%llu,\"total_tokens\":%llu}}",
                       name_json, (unsigned long long)n_tokens, (unsigned long long)n_tokens);
    cJSON_free(name_json);
    return moon_gw_buf_take(&b, &text, len_p) == MOON_OK ? text : NULL;
}
