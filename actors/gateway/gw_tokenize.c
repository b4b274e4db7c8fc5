/* actors/gateway/gw_tokenize.c - /tokenize, /detokenize, /version (see gw_tokenize.h). */
#include "gw_tokenize.h"

#include "gw_json.h"
#include "moonlet/alloc.h"

#include <string.h>

#define BAD(_http, _param, ...)                                                                    \
    do {                                                                                           \
        moon_gw_error_set(err, _http, NULL, _param, __VA_ARGS__);                                  \
        status = MOON_ERR_INVALID_PARAM;                                                           \
        goto out;                                                                                  \
    } while (0)

static int key_allowed(const char *k, int detok)
{
    static const char *tok_keys[] = {
        "model", "prompt", "messages", "tools", "add_generation_prompt", "add_special_tokens"};
    static const char *detok_keys[] = {"model", "tokens"};
    const char       **keys         = detok ? detok_keys : tok_keys;
    size_t             n = detok ? MOON_ARRAY_SIZE(detok_keys) : MOON_ARRAY_SIZE(tok_keys);

    for (size_t i = 0; i < n; i++) {
        if (strcmp(k, keys[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The ids of the messages form: the body's messages (and tools and
 * add_generation_prompt where given) through the chat route's own parsing
 * and template. */
static moon_status_t chat_ids(const cJSON *root, const moon_gw_model_info_t *info,
                              moon_gw_request_t *req, moon_gw_error_t *err)
{
    static const char *const chat_keys[] = {"messages", "tools", "add_generation_prompt"};
    cJSON                   *sub         = cJSON_CreateObject();
    char                    *text;
    size_t                   n = 0;
    moon_status_t            status;

    memset(req, 0, sizeof(*req));
    for (size_t i = 0; sub != NULL && i < MOON_ARRAY_SIZE(chat_keys); i++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(root, chat_keys[i]);
        if (v != NULL && !cJSON_AddItemReferenceToObject(sub, chat_keys[i], v)) {
            cJSON_Delete(sub);
            sub = NULL;
        }
    }
    if (sub == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    text = moon_gw_json_print(sub, &n);
    cJSON_Delete(sub);
    if (text == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = moon_gw_openai_parse(text, n, 1, req, err);
    moon_free(text);
    if (status == MOON_OK) {
        status = moon_gw_openai_prepare(req, info, 0, err);
    }
    return status;
}

moon_status_t moon_gw_tokenize_answer(const char *body, size_t len, int detok,
                                      const moon_gw_model_info_t *info, char **json_p,
                                      size_t *len_p, moon_gw_error_t *err)
{
    cJSON            *root = NULL, *out = NULL, *arr;
    const cJSON      *f;
    const char       *model = NULL, *prompt = NULL;
    int32_t          *ids     = NULL;
    size_t            n       = 0;
    char             *text    = NULL;
    int               special = 1;
    moon_gw_request_t req;
    moon_status_t     status;

    memset(&req, 0, sizeof(req));
    status = moon_gw_json_parse_body(body, len, &root, err);
    if (status != MOON_OK) {
        return status;
    }
    cJSON_ArrayForEach(f, root)
    {
        if (!key_allowed(f->string, detok)) {
            BAD(400, f->string, "Unrecognized request argument supplied: %s (not a field of %s)",
                f->string, detok ? "/detokenize" : "/tokenize");
        }
    }
    if (moon_gw_json_str(root, "model", &model) < 0) {
        BAD(400, "model", "'model' must be a string");
    }
    if (model != NULL && info->model_name != NULL && strcmp(model, info->model_name) != 0) {
        moon_gw_error_set(err, 404, "model_not_found", "model", "The model `%s` does not exist.",
                          model);
        status = MOON_ERR_INVALID_PARAM;
        goto out;
    }
    if (info->tok == NULL) {
        BAD(501, NULL, "this gateway has no tokenizer (started without the model file)");
    }
    out = cJSON_CreateObject();
    if (out == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    if (detok) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
        const cJSON *e;
        size_t       cap;
        uint32_t     i = 0;

        if (!cJSON_IsArray(t)) {
            BAD(400, "tokens", "'tokens' is required: a list of token ids");
        }
        n    = (size_t)cJSON_GetArraySize(t);
        ids  = moon_malloc((n > 0 ? n : 1) * sizeof(int32_t));
        cap  = n * (moon_tokenizer_max_piece(info->tok) + 1) + 1;
        text = moon_malloc(cap);
        if (ids == NULL || text == NULL) {
            status = MOON_ERR_NO_MEMORY;
            goto out;
        }
        cJSON_ArrayForEach(e, t)
        {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 ||
                e->valuedouble >= (double)moon_tokenizer_n_vocab(info->tok) ||
                e->valuedouble != (double)(int32_t)e->valuedouble) {
                BAD(400, "tokens", "'tokens' must be token ids in [0, %u)",
                    moon_tokenizer_n_vocab(info->tok));
            }
            ids[i++] = (int32_t)e->valuedouble;
        }
        text[0] = '\0';
        if (n > 0 && moon_tokenizer_decode(info->tok, -1, ids, n, text, cap, &n) != MOON_OK) {
            BAD(400, "tokens", "'tokens' could not be decoded");
        }
        if (cJSON_AddStringToObject(out, "prompt", text) == NULL) {
            status = MOON_ERR_NO_MEMORY;
            goto out;
        }
    } else {
        const int32_t *got;
        size_t         n_got;

        if (moon_gw_json_bool(root, "add_special_tokens", &special) < 0) {
            BAD(400, "add_special_tokens", "'add_special_tokens' must be a boolean");
        }
        if (cJSON_GetObjectItemCaseSensitive(root, "messages") != NULL) {
            status = chat_ids(root, info, &req, err);
            if (status != MOON_OK) {
                goto out;
            }
            got   = req.tokens;
            n_got = req.n_tokens;
        } else {
            size_t plen;
            if (moon_gw_json_str(root, "prompt", &prompt) != 1) {
                BAD(400, "prompt", "'prompt' (a string) or 'messages' is required");
            }
            plen = strlen(prompt);
            ids  = moon_malloc((plen + 2) * sizeof(int32_t));
            if (ids == NULL) {
                status = MOON_ERR_NO_MEMORY;
                goto out;
            }
            status = moon_tokenizer_encode(info->tok, prompt, plen, special, ids, plen + 2, &n);
            if (status != MOON_OK) {
                goto out;
            }
            got   = ids;
            n_got = n;
        }
        arr = cJSON_AddArrayToObject(out, "tokens");
        if (cJSON_AddNumberToObject(out, "count", (double)n_got) == NULL ||
            cJSON_AddNumberToObject(out, "max_model_len", info->n_ctx) == NULL || arr == NULL) {
            status = MOON_ERR_NO_MEMORY;
            goto out;
        }
        for (size_t i = 0; i < n_got; i++) {
            if (!cJSON_AddItemToArray(arr, cJSON_CreateNumber(got[i]))) {
                status = MOON_ERR_NO_MEMORY;
                goto out;
            }
        }
    }
    *json_p = moon_gw_json_print(out, len_p);
    status  = *json_p != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
out:
    moon_gw_request_fini(&req);
    moon_free(ids);
    moon_free(text);
    cJSON_Delete(out);
    cJSON_Delete(root);
    return status;
}

char *moon_gw_version_json(const char *version, size_t *len_p)
{
    cJSON *o = cJSON_CreateObject();
    char  *s = NULL;

    if (o != NULL && cJSON_AddStringToObject(o, "version", version) != NULL) {
        s = moon_gw_json_print(o, len_p);
    }
    cJSON_Delete(o);
    return s;
}
