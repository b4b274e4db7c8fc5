/* actors/gateway/gw_chat_json.c - messages and tools for Jinja templates (see
 * gw_chat_json.h). */
#include "gw_chat_json.h"

#include <string.h>

/* content: text parts joined, null or missing as "". 0: out of memory. */
static int normalise_content(cJSON *m)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    cJSON *part, *text;
    size_t n = 0;
    char  *s;

    if (cJSON_IsString(c)) {
        return 1;
    }
    if (cJSON_IsArray(c)) {
        cJSON_ArrayForEach(part, c)
        {
            text = cJSON_GetObjectItemCaseSensitive(part, "text");
            n += cJSON_IsString(text) ? strlen(text->valuestring) : 0;
        }
    }
    s = cJSON_malloc(n + 1);
    if (s == NULL) {
        return 0;
    }
    s[0] = 0;
    if (cJSON_IsArray(c)) {
        cJSON_ArrayForEach(part, c)
        {
            text = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (cJSON_IsString(text)) {
                strcat(s, text->valuestring);
            }
        }
    }
    text = cJSON_CreateString(s);
    cJSON_free(s);
    if (text == NULL) {
        return 0;
    }
    if (c != NULL) {
        return cJSON_ReplaceItemInObjectCaseSensitive(m, "content", text) ? 1 : 0;
    }
    cJSON_AddItemToObject(m, "content", text);
    return 1;
}

/* tool_calls[].function.arguments: a JSON text becomes its value. */
static void parse_arguments(cJSON *m)
{
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *call;

    cJSON_ArrayForEach(call, calls)
    {
        cJSON *fn   = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        cJSON *parsed;

        if (!cJSON_IsString(args)) {
            continue;
        }
        parsed = cJSON_Parse(args->valuestring);
        if (parsed != NULL && !cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed)) {
            cJSON_Delete(parsed);
        }
    }
}

moon_status_t moon_gw_chat_json(const cJSON *root, char **msgs_p, char **tools_p)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    cJSON       *msgs  = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(root, "messages"), 1);
    cJSON       *m;

    *msgs_p  = NULL;
    *tools_p = NULL;
    if (msgs == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    cJSON_ArrayForEach(m, msgs)
    {
        if (!normalise_content(m)) {
            cJSON_Delete(msgs);
            return MOON_ERR_NO_MEMORY;
        }
        parse_arguments(m);
    }
    *msgs_p = cJSON_PrintUnformatted(msgs);
    cJSON_Delete(msgs);
    if (*msgs_p == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    if (cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0) {
        *tools_p = cJSON_PrintUnformatted(tools);
        if (*tools_p == NULL) {
            cJSON_free(*msgs_p);
            *msgs_p = NULL;
            return MOON_ERR_NO_MEMORY;
        }
    }
    return MOON_OK;
}
