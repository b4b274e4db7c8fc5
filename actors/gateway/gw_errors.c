/* actors/gateway/gw_errors.c - OpenAI error objects (see gw_errors.h). */
#include "gw_errors.h"

#include "gw_json.h"
#include "moonlet/serve_msgs.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
    int         http;
    const char *type;
    const char *code;
} kinds[] = {
    {400, "invalid_request_error", NULL},
    {401, "invalid_request_error", "invalid_api_key"},
    {404, "invalid_request_error", "not_found"},
    {403, "invalid_request_error", "forbidden"},
    {405, "invalid_request_error", "method_not_allowed"},
    {408, "invalid_request_error", "request_timeout"},
    {413, "invalid_request_error", "request_too_large"},
    {429, "rate_limit_error", "rate_limit_exceeded"},
    {500, "server_error", "internal_error"},
    {501, "invalid_request_error", "not_implemented"},
    {503, "server_error", "service_unavailable"},
};

void moon_gw_error_set(moon_gw_error_t *err, int http, const char *code, const char *param,
                       const char *fmt, ...)
{
    va_list ap;
    char    text[sizeof(err->message)];

    memset(err, 0, sizeof(*err));
    err->http = http;
    err->type = "server_error";
    for (size_t i = 0; i < MOON_ARRAY_SIZE(kinds); i++) {
        if (kinds[i].http == http) {
            err->type = kinds[i].type;
            err->code = kinds[i].code;
        }
    }
    if (code != NULL) {
        err->code = code;
    }
    if (param != NULL) {
        moon_gw_utf8_copy(err->param, sizeof(err->param), param);
    }
    if (http == 429) {
        err->retry_after_s = 1;
    }
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    /* messages echo what the client sent (a url, a model name): errors are
     * JSON, so always valid UTF-8 */
    moon_gw_utf8_copy(err->message, sizeof(err->message), text);
}

char *moon_gw_error_json(const moon_gw_error_t *err)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *obj  = cJSON_AddObjectToObject(root, "error");
    char  *out;

    if (obj == NULL || cJSON_AddStringToObject(obj, "message", err->message) == NULL ||
        cJSON_AddStringToObject(obj, "type", err->type) == NULL ||
        (err->param[0] ? cJSON_AddStringToObject(obj, "param", err->param)
                       : cJSON_AddNullToObject(obj, "param")) == NULL ||
        (err->code ? cJSON_AddStringToObject(obj, "code", err->code)
                   : cJSON_AddNullToObject(obj, "code")) == NULL) {
        cJSON_Delete(root);
        return NULL;
    }
    out = moon_gw_json_print(root, NULL);
    cJSON_Delete(root);
    return out;
}

int moon_gw_error_from_done(uint32_t finish, moon_status_t status, const char *message,
                            moon_gw_error_t *err)
{
    const char *why = message != NULL && message[0] ? message : moon_status_str(status);

    switch (finish) {
    case MOON_FINISH_REJECTED:
        moon_gw_error_set(err, 429, NULL, NULL,
                          "the server cannot meet the latency objective now: %s", why);
        return 1;
    case MOON_FINISH_ERROR:
        if (status == MOON_ERR_INVALID_PARAM) {
            moon_gw_error_set(err, 400, NULL, NULL, "%s", why);
        } else if (status == MOON_ERR_NO_RESOURCE || status == MOON_ERR_NO_ACTOR ||
                   moon_status_is_peer(status)) {
            moon_gw_error_set(err, 503, NULL, NULL, "the serving cluster is unavailable: %s", why);
        } else {
            moon_gw_error_set(err, 500, NULL, NULL, "the request failed: %s", why);
        }
        return 1;
    default:
        return 0;
    }
}
