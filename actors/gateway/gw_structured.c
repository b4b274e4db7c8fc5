/* actors/gateway/gw_structured.c - response_format, grammars and tool calls
 * (see gw_structured.h). */
#include "gw_structured.h"

#include "moonlet/alloc.h"
#include "moonlet/grammar.h"
#include "moonlet/log.h"

#include <stdio.h>
#include <string.h>

#define BAD(_param, ...)                                                                           \
    do {                                                                                           \
        moon_gw_error_set(err, 400, NULL, _param, __VA_ARGS__);                                    \
        return MOON_ERR_INVALID_PARAM;                                                             \
    } while (0)

/* The Hermes prompt's syntax: what a past call is rendered back as by the
 * templates Moonlet writes by hand */
#define CALL_OPEN "<tool_call>"
#define CALL_CLOSE "</tool_call>"

/* s->grammar = kind "\n" body (body NULL: none), compiled once to check it. */
static moon_status_t set_grammar(moon_gw_structured_t *s, const char *param, const char *kind,
                                 const char *body, moon_gw_error_t *err)
{
    size_t          klen = strlen(kind), blen = body != NULL ? strlen(body) : 0;
    char            why[MOON_GRAMMAR_ERR_MAX];
    moon_grammar_t *g = NULL;
    moon_status_t   status;

    if (s->grammar != NULL) {
        BAD(param,
            "'%s' cannot be combined with another structured-output field (a "
            "response_format, grammar, guided_* or a required tool call)",
            param);
    }
    if (klen + 1 + blen > MOON_GW_MAX_GRAMMAR_BYTES) {
        BAD(param, "'%s' is %zu bytes, more than the %u allowed", param, blen,
            MOON_GW_MAX_GRAMMAR_BYTES);
    }
    s->grammar = moon_malloc(klen + 2 + blen);
    if (s->grammar == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    memcpy(s->grammar, kind, klen);
    s->grammar_len = (uint32_t)klen;
    if (body != NULL) {
        s->grammar[klen] = '\n';
        memcpy(s->grammar + klen + 1, body, blen);
        s->grammar_len += 1 + (uint32_t)blen;
    }
    s->grammar[s->grammar_len] = '\0';
    status = moon_grammar_from_spec(s->grammar, s->grammar_len, &g, why, sizeof(why));
    moon_grammar_destroy(g);
    if (status == MOON_ERR_NO_MEMORY) {
        return status;
    }
    if (status != MOON_OK) {
        MOON_INFO("gateway: '%s' refused: %s", param, why);
        BAD(param, "'%s' cannot be enforced: %s", param, why);
    }
    return MOON_OK;
}

static moon_status_t schema_grammar(moon_gw_structured_t *s, const char *param, const char *kind,
                                    const cJSON *schema, moon_gw_error_t *err)
{
    char         *text = cJSON_PrintUnformatted(schema);
    moon_status_t status;

    if (text == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    status = set_grammar(s, param, kind, text, err);
    cJSON_free(text);
    return status;
}

static moon_status_t parse_response_format(const cJSON *root, moon_gw_structured_t *s,
                                           moon_gw_error_t *err)
{
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    const cJSON *js, *schema;
    const char  *type = NULL;
    int          strict;

    if (rf == NULL || cJSON_IsNull(rf)) {
        return MOON_OK;
    }
    if (!cJSON_IsObject(rf) || moon_gw_json_str(rf, "type", &type) != 1) {
        BAD("response_format", "'response_format' must be an object with a string 'type'");
    }
    if (strcmp(type, "text") == 0) {
        return MOON_OK;
    }
    if (strcmp(type, "json_object") == 0) {
        return set_grammar(s, "response_format", "json_object", NULL, err);
    }
    if (strcmp(type, "json_schema") != 0) {
        BAD("response_format.type",
            "'response_format.type' must be one of text, json_object, json_schema (got '%s')",
            type);
    }
    js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    if (!cJSON_IsObject(js)) {
        BAD("response_format.json_schema", "'response_format.json_schema' must be an object");
    }
    if (moon_gw_json_bool(js, "strict", &strict) < 0) {
        BAD("response_format.json_schema.strict",
            "'response_format.json_schema.strict' must be a boolean");
    }
    schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (schema == NULL || cJSON_IsNull(schema)) {
        return set_grammar(s, "response_format", "json_object", NULL, err);
    }
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema)) {
        BAD("response_format.json_schema.schema",
            "'response_format.json_schema.schema' must be a JSON schema (an object)");
    }
    /* strict or not, the schema is enforced: that is what a client asks for */
    return schema_grammar(s, "response_format", "json_schema", schema, err);
}

/* llama.cpp's grammar, vLLM's guided_json and guided_grammar. */
static moon_status_t parse_other_grammars(const cJSON *root, moon_gw_structured_t *s,
                                          moon_gw_error_t *err)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "grammar");

    if (f != NULL && !cJSON_IsNull(f)) {
        if (!cJSON_IsString(f)) {
            BAD("grammar", "'grammar' must be a GBNF grammar (a string)");
        }
        return set_grammar(s, "grammar", "gbnf", f->valuestring, err);
    }
    f = cJSON_GetObjectItemCaseSensitive(root, "guided_grammar");
    if (f != NULL && !cJSON_IsNull(f)) {
        if (!cJSON_IsString(f)) {
            BAD("guided_grammar", "'guided_grammar' must be a GBNF grammar (a string)");
        }
        return set_grammar(s, "guided_grammar", "gbnf", f->valuestring, err);
    }
    f = cJSON_GetObjectItemCaseSensitive(root, "guided_json");
    if (f != NULL && !cJSON_IsNull(f)) {
        if (cJSON_IsString(f)) {
            return set_grammar(s, "guided_json", "json_schema", f->valuestring, err);
        }
        if (!cJSON_IsObject(f)) {
            BAD("guided_json", "'guided_json' must be a JSON schema (an object or its text)");
        }
        return schema_grammar(s, "guided_json", "json_schema", f, err);
    }
    return MOON_OK;
}

/* The schema of one call to tool fn: {"name": const, args_key: params}. */
static cJSON *call_schema(const cJSON *fn, const char *args_key)
{
    const cJSON *name   = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    cJSON       *o      = cJSON_CreateObject(), *props, *nm, *req;

    if (o == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(o, "type", "object");
    props = cJSON_AddObjectToObject(o, "properties");
    nm    = props != NULL ? cJSON_AddObjectToObject(props, "name") : NULL;
    if (nm != NULL) {
        cJSON_AddStringToObject(nm, "const", name->valuestring);
    }
    if (props != NULL) {
        cJSON *args = params != NULL && !cJSON_IsNull(params) ? cJSON_Duplicate(params, 1)
                                                              : cJSON_CreateObject();
        if (args != NULL && (params == NULL || cJSON_IsNull(params))) {
            cJSON_AddStringToObject(args, "type", "object");
        }
        cJSON_AddItemToObject(props, args_key, args);
    }
    req = cJSON_AddArrayToObject(o, "required");
    if (req != NULL) {
        cJSON_AddItemToArray(req, cJSON_CreateString("name"));
        cJSON_AddItemToArray(req, cJSON_CreateString(args_key));
    }
    return o;
}

/* A forced call's grammar in syn's form: one call of s->forced's functions
 * (or one or more), as that syntax writes it. */
static moon_status_t forced_grammar(moon_gw_structured_t *s, const moon_gw_tool_syntax_t *syn,
                                    moon_gw_error_t *err)
{
    cJSON       *any = cJSON_CreateObject(), *wrap, *one, *schema = NULL;
    const cJSON *fn;
    const char  *kind =
        s->forced_many && syn->grammar_many != NULL ? syn->grammar_many : syn->grammar_one;
    moon_status_t status;

    wrap = any != NULL ? cJSON_AddArrayToObject(any, "anyOf") : NULL;
    cJSON_ArrayForEach(fn, s->forced)
    {
        cJSON_AddItemToArray(wrap, call_schema(fn, syn->args_key));
    }
    one = cJSON_GetArraySize(wrap) == 1 ? cJSON_GetArrayItem(wrap, 0) : any;
    if (wrap != NULL && syn->grammar_array) {
        schema = cJSON_CreateObject();
        if (schema != NULL) {
            cJSON_AddStringToObject(schema, "type", "array");
            cJSON_AddItemReferenceToObject(schema, "items", one);
            cJSON_AddNumberToObject(schema, "minItems", 1);
            if (!s->forced_many || syn->grammar_many == NULL) {
                cJSON_AddNumberToObject(schema, "maxItems", 1);
            }
        }
    }
    status = wrap == NULL || (syn->grammar_array && schema == NULL)
                 ? MOON_ERR_NO_MEMORY
                 : schema_grammar(s, "tool_choice", kind, schema != NULL ? schema : one, err);
    cJSON_Delete(schema);
    cJSON_Delete(any);
    return status;
}

static moon_status_t parse_tools(const cJSON *root, moon_gw_structured_t *s, moon_gw_error_t *err)
{
    const cJSON  *tools  = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON  *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const cJSON  *t;
    const char   *mode = "auto", *only = NULL;
    int           parallel = 1, found = 0;
    uint32_t      i    = 0;
    cJSON        *list = NULL;
    char         *text;
    moon_gw_buf_t b;
    moon_status_t status = MOON_OK;

    if (moon_gw_json_bool(root, "parallel_tool_calls", &parallel) < 0) {
        BAD("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    }
    if (choice != NULL && !cJSON_IsNull(choice)) {
        if (cJSON_IsString(choice)) {
            mode = choice->valuestring;
            if (strcmp(mode, "auto") && strcmp(mode, "none") && strcmp(mode, "required")) {
                BAD("tool_choice",
                    "'tool_choice' must be none, auto, required or a named function (got '%s')",
                    mode);
            }
        } else {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
            if (!cJSON_IsObject(choice) || !cJSON_IsObject(fn) ||
                moon_gw_json_str(fn, "name", &only) != 1) {
                BAD("tool_choice", "'tool_choice' must be none, auto, required or "
                                   "{\"type\":\"function\",\"function\":{\"name\":...}}");
            }
            mode = "required";
        }
    }
    if (tools == NULL || cJSON_IsNull(tools)) {
        if (choice != NULL && !cJSON_IsNull(choice) && strcmp(mode, "none") != 0 &&
            strcmp(mode, "auto") != 0) {
            BAD("tool_choice", "'tool_choice' needs 'tools'");
        }
        return MOON_OK;
    }
    if (!cJSON_IsArray(tools)) {
        BAD("tools", "'tools' must be a list of tools");
    }
    cJSON_ArrayForEach(t, tools)
    {
        const char  *type = NULL, *name = NULL;
        const cJSON *fn     = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char         param[40];

        snprintf(param, sizeof(param), "tools[%u]", i++);
        if (!cJSON_IsObject(t) || moon_gw_json_str(t, "type", &type) != 1 ||
            strcmp(type, "function") != 0 || !cJSON_IsObject(fn) ||
            moon_gw_json_str(fn, "name", &name) != 1 || name[0] == '\0') {
            BAD(param, "'%s' must be {\"type\":\"function\",\"function\":{\"name\":...}}", param);
        }
        if (params != NULL && !cJSON_IsNull(params) && !cJSON_IsObject(params)) {
            BAD(param, "'%s.function.parameters' must be a JSON schema (an object)", param);
        }
        found |= only != NULL && strcmp(name, only) == 0;
    }
    if (only != NULL && !found) {
        BAD("tool_choice", "'tool_choice' names '%s', which is not in 'tools'", only);
    }
    if (i == 0 || strcmp(mode, "none") == 0) {
        return MOON_OK; /* the tools stay unknown to the model */
    }
    /* the prompt: the tools as OpenAI describes them, one JSON list */
    list      = cJSON_CreateArray();
    s->forced = cJSON_CreateArray();
    if (list == NULL || s->forced == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *fn    = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name  = cJSON_GetObjectItemCaseSensitive(fn, "name");
        cJSON       *shown = cJSON_Duplicate(fn, 1);
        /* "$schema" says nothing to a model: not worth its context */
        cJSON_DeleteItemFromObjectCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(shown, "parameters"), "$schema");
        cJSON_AddItemToArray(list, shown);
        if (only == NULL || strcmp(name->valuestring, only) == 0) {
            cJSON_AddItemToArray(s->forced, cJSON_Duplicate(fn, 1)); /* root goes */
        }
    }
    text = cJSON_PrintUnformatted(list);
    if (text == NULL) {
        status = MOON_ERR_NO_MEMORY;
        goto out;
    }
    moon_gw_buf_init(&b);
    moon_gw_buf_printf(&b,
                       "Tools: <tools>%s</tools> Call: "
                       "<tool_call>{\"name\":...,\"arguments\":{...}}</tool_call>%s",
                       text, parallel ? " (one a line)" : "");
    cJSON_free(text);
    status = moon_gw_buf_take(&b, &s->tools_prompt, NULL);
    if (status != MOON_OK) {
        goto out;
    }
    s->tools = 1;
    if (strcmp(mode, "required") == 0) {
        /* a named function is called once; required: one or more when parallel.
         * Checked here in Hermes' form, built again by bind in the model's. */
        s->forced_many = parallel && only == NULL;
        s->syntax      = moon_gw_tool_syntax_default();
        status         = forced_grammar(s, s->syntax, err);
    } else {
        cJSON_Delete(s->forced);
        s->forced = NULL;
    }
out:
    cJSON_Delete(list);
    return status;
}

moon_status_t moon_gw_structured_parse(const cJSON *root, int chat, moon_gw_structured_t *s,
                                       moon_gw_error_t *err)
{
    moon_status_t status;

    memset(s, 0, sizeof(*s));
    status = parse_response_format(root, s, err);
    if (status == MOON_OK) {
        status = parse_other_grammars(root, s, err);
    }
    if (status == MOON_OK && chat) {
        status = parse_tools(root, s, err);
    } else if (status == MOON_OK) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tools");
        if (t != NULL && !cJSON_IsNull(t)) {
            BAD("tools", "'tools' is for /v1/chat/completions");
        }
    }
    return status;
}

void moon_gw_structured_fini(moon_gw_structured_t *s)
{
    moon_free(s->grammar);
    moon_free(s->tools_prompt);
    cJSON_Delete(s->forced);
    if (s->parsing) {
        moon_gw_tool_parser_fini(&s->parser);
    }
    memset(s, 0, sizeof(*s));
}

moon_status_t moon_gw_structured_bind(moon_gw_structured_t *s, const moon_gw_tool_syntax_t *syn,
                                      moon_gw_error_t *err)
{
    const moon_gw_tool_syntax_t *was =
        s->syntax != NULL ? s->syntax : moon_gw_tool_syntax_default();

    s->syntax = syn != NULL ? syn : moon_gw_tool_syntax_default();
    if (s->forced == NULL || s->syntax == was) {
        return MOON_OK;
    }
    moon_free(s->grammar); /* Hermes' form: it passed parse's checks */
    s->grammar     = NULL;
    s->grammar_len = 0;
    return forced_grammar(s, s->syntax, err);
}

/* ---- messages --------------------------------------------------------------- */

int moon_gw_structured_is_tool_msg(const cJSON *m, const char *role)
{
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");

    return strcmp(role, "tool") == 0 ||
           (strcmp(role, "assistant") == 0 && calls != NULL && !cJSON_IsNull(calls));
}

/* Text of a content field: a string or text parts (NULL: none). */
static int content_text(const cJSON *c, moon_gw_buf_t *b)
{
    const cJSON *part;

    if (c == NULL || cJSON_IsNull(c)) {
        return 1;
    }
    if (cJSON_IsString(c)) {
        moon_gw_buf_puts(b, c->valuestring);
        return 1;
    }
    if (!cJSON_IsArray(c)) {
        return 0;
    }
    cJSON_ArrayForEach(part, c)
    {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(text)) {
            return 0;
        }
        moon_gw_buf_puts(b, text->valuestring);
    }
    return 1;
}

moon_status_t moon_gw_structured_tool_msg(const cJSON *m, uint32_t i, moon_gw_chat_msg_t *out,
                                          moon_gw_error_t *err)
{
    const char   *role = NULL;
    moon_gw_buf_t b;
    char          param[48];
    char         *content = NULL;
    moon_status_t status;

    moon_gw_json_str(m, "role", &role);
    moon_gw_buf_init(&b);
    snprintf(param, sizeof(param), "messages[%u].content", i);
    if (strcmp(role, "tool") == 0) {
        /* Hermes/Qwen: a tool's answer is a user turn */
        moon_gw_buf_puts(&b, "<tool_response>");
        if (!content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), &b)) {
            moon_gw_buf_fini(&b);
            BAD(param, "'%s' must be a string or text parts", param);
        }
        moon_gw_buf_puts(&b, "</tool_response>");
        role = "user";
    } else {
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
        uint32_t     k     = 0;
        if (!content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), &b)) {
            moon_gw_buf_fini(&b);
            BAD(param, "'%s' must be a string, text parts or null", param);
        }
        snprintf(param, sizeof(param), "messages[%u].tool_calls", i);
        if (!cJSON_IsArray(calls)) {
            moon_gw_buf_fini(&b);
            BAD(param, "'%s' must be a list of tool calls", param);
        }
        cJSON_ArrayForEach(c, calls)
        {
            const cJSON *fn   = cJSON_GetObjectItemCaseSensitive(c, "function");
            const char  *name = NULL, *args = NULL;
            cJSON       *call, *parsed;
            char        *text;

            if (!cJSON_IsObject(fn) || moon_gw_json_str(fn, "name", &name) != 1 ||
                moon_gw_json_str(fn, "arguments", &args) != 1) {
                moon_gw_buf_fini(&b);
                BAD(param, "'%s' must hold {\"function\":{\"name\":...,\"arguments\":\"...\"}}",
                    param);
            }
            parsed = cJSON_Parse(args);
            call   = cJSON_CreateObject();
            if (call == NULL) {
                cJSON_Delete(parsed);
                moon_gw_buf_fini(&b);
                return MOON_ERR_NO_MEMORY;
            }
            cJSON_AddStringToObject(call, "name", name);
            cJSON_AddItemToObject(call, "arguments",
                                  parsed != NULL ? parsed : cJSON_CreateString(args));
            text = cJSON_PrintUnformatted(call);
            cJSON_Delete(call);
            if (text == NULL) {
                moon_gw_buf_fini(&b);
                return MOON_ERR_NO_MEMORY;
            }
            moon_gw_buf_printf(&b, "%s" CALL_OPEN "%s" CALL_CLOSE, k++ > 0 ? "\n" : "", text);
            cJSON_free(text);
        }
        role = "assistant";
    }
    status = moon_gw_buf_take(&b, &content, NULL);
    if (status != MOON_OK) {
        return status;
    }
    out->role    = moon_strdup(role);
    out->content = content;
    return out->role != NULL ? MOON_OK : MOON_ERR_NO_MEMORY;
}

moon_status_t moon_gw_structured_add_tools(const moon_gw_structured_t *s,
                                           moon_gw_chat_msg_t **msgs_p, uint32_t *n_p)
{
    moon_gw_chat_msg_t *msgs = *msgs_p, *grown;
    uint32_t            n    = *n_p;
    moon_gw_buf_t       b;
    char               *text;
    moon_status_t       status;

    if (s->tools_prompt == NULL) {
        return MOON_OK;
    }
    moon_gw_buf_init(&b);
    moon_gw_buf_puts(&b, s->tools_prompt);
    if (n > 0 && strcmp(msgs[0].role, "system") == 0) {
        moon_gw_buf_printf(&b, "\n%s", msgs[0].content);
        status = moon_gw_buf_take(&b, &text, NULL);
        if (status != MOON_OK) {
            return status;
        }
        moon_free((char *)msgs[0].content);
        msgs[0].content = text;
        return MOON_OK;
    }
    status = moon_gw_buf_take(&b, &text, NULL);
    grown  = status == MOON_OK ? moon_realloc(msgs, (n + 1) * sizeof(*msgs)) : NULL;
    if (grown == NULL) {
        moon_free(text);
        return MOON_ERR_NO_MEMORY;
    }
    memmove(grown + 1, grown, n * sizeof(*grown));
    grown[0].role    = moon_strdup("system");
    grown[0].content = text;
    *msgs_p          = grown;
    *n_p             = n + 1;
    if (grown[0].role == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    return MOON_OK;
}

/* ---- answers ---------------------------------------------------------------- */

/* A tool call object of the answer: call k, name and its arguments' JSON
 * text. NULL: out of memory. */
static cJSON *call_object(const moon_gw_resp_meta_t *m, const char *name, const char *args,
                          uint32_t k, int with_index)
{
    cJSON *out = cJSON_CreateObject(), *fn;
    char   id[96];

    if (out == NULL) {
        return NULL;
    }
    /* ids unique within the answer and across answers: the response id's number */
    snprintf(id, sizeof(id), "call_%s_%u", strchr(m->id, '-') ? strchr(m->id, '-') + 1 : m->id, k);
    if (with_index) {
        cJSON_AddNumberToObject(out, "index", k);
    }
    cJSON_AddStringToObject(out, "id", id);
    cJSON_AddStringToObject(out, "type", "function");
    fn = cJSON_AddObjectToObject(out, "function");
    if (fn != NULL) {
        cJSON_AddStringToObject(fn, "name", name);
        cJSON_AddStringToObject(fn, "arguments", args);
    }
    return out;
}

static int all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r') {
            return 0;
        }
    }
    return 1;
}

/* A whole answer split: its content and its calls. */
typedef struct {
    const moon_gw_resp_meta_t *m;
    moon_gw_buf_t              content;
    cJSON                     *calls;
    uint32_t                   k;
    int                        failed;
} whole_t;

static void whole_content(void *arg, const char *text, size_t n)
{
    moon_gw_buf_append(&((whole_t *)arg)->content, text, n);
}

static void whole_call(void *arg, const char *name, const char *args)
{
    whole_t *w    = arg;
    cJSON   *call = call_object(w->m, name, args, w->k++, 0);

    if (call == NULL || !cJSON_AddItemToArray(w->calls, call)) {
        cJSON_Delete(call);
        w->failed = 1;
    }
}

char *moon_gw_structured_response(const moon_gw_structured_t *s, const moon_gw_resp_meta_t *m,
                                  const char *text, const char *finish, const moon_gw_usage_t *u,
                                  size_t *len_p)
{
    moon_gw_tool_parser_t p;
    whole_t               w = {.m = m};
    cJSON                *o, *msg;
    char                 *body, *out;
    size_t                len;

    if (!s->tools || text == NULL) {
        return moon_gw_format_response(m, text != NULL ? text : "", finish, u, len_p);
    }
    w.calls = cJSON_CreateArray();
    moon_gw_buf_init(&w.content);
    moon_gw_tool_parser_init(&p, s->syntax, whole_content, whole_call, &w);
    w.failed |= !moon_gw_tool_parser_feed(&p, text, strlen(text));
    moon_gw_tool_parser_end(&p);
    moon_gw_tool_parser_fini(&p);
    if (w.calls == NULL || w.failed || w.content.failed) {
        cJSON_Delete(w.calls);
        moon_gw_buf_fini(&w.content);
        return NULL;
    }
    body = moon_gw_format_response(
        m, w.content.data != NULL ? w.content.data : "",
        w.k > 0 && finish != NULL && strcmp(finish, "stop") == 0 ? "tool_calls" : finish, u, &len);
    o   = body != NULL ? cJSON_Parse(body) : NULL;
    msg = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0), "message");
    if (msg == NULL || w.k == 0) {
        cJSON_Delete(o);
        cJSON_Delete(w.calls);
        moon_gw_buf_fini(&w.content);
        if (len_p != NULL) {
            *len_p = len;
        }
        return body;
    }
    moon_free(body);
    if (w.content.data == NULL || all_space(w.content.data, w.content.len)) {
        cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateNull());
    }
    cJSON_AddItemToObject(msg, "tool_calls", w.calls);
    moon_gw_buf_fini(&w.content);
    out = moon_gw_json_print_wrapped(o, "", "", len_p);
    cJSON_Delete(o);
    return out;
}

static void emit_content(void *arg, const char *text, size_t n)
{
    moon_gw_structured_t *s = arg;
    char                 *piece, *chunk;
    size_t                len;

    if (n == 0) {
        return;
    }
    piece = moon_malloc(n + 1);
    if (piece == NULL) {
        s->sout->failed = 1;
        return;
    }
    memcpy(piece, text, n);
    piece[n] = '\0';
    chunk    = moon_gw_format_chunk(s->sm, 0, piece, NULL, &len);
    moon_free(piece);
    if (chunk == NULL) {
        s->sout->failed = 1;
        return;
    }
    moon_gw_buf_append(s->sout, chunk, len);
    moon_free(chunk);
}

/* A tool_calls delta with a call, whole. */
static void emit_call(void *arg, const char *name, const char *args)
{
    moon_gw_structured_t *s    = arg;
    cJSON                *call = call_object(s->sm, name, args, s->parser.n_calls, 1), *o, *delta;
    char                 *chunk, *text;
    size_t                len;

    chunk = call != NULL ? moon_gw_format_chunk(s->sm, 0, "", NULL, &len) : NULL;
    /* the chunk is an SSE event: "data: {...}\n\n" */
    o     = chunk != NULL ? cJSON_Parse(chunk + 6) : NULL;
    delta = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0), "delta");
    moon_free(chunk);
    if (delta == NULL) {
        cJSON_Delete(call);
        cJSON_Delete(o);
        s->sout->failed = 1;
        return;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(delta, "content");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(delta, "tool_calls"), call);
    text = moon_gw_json_print_wrapped(o, "data: ", "\n\n", &len);
    cJSON_Delete(o);
    if (text == NULL) {
        s->sout->failed = 1;
        return;
    }
    moon_gw_buf_append(s->sout, text, len);
    moon_free(text);
}

void moon_gw_structured_stream(moon_gw_structured_t *s, const moon_gw_resp_meta_t *m,
                               const char *text, moon_gw_buf_t *out)
{
    s->sm   = m;
    s->sout = out;
    if (!s->tools) {
        emit_content(s, text, strlen(text));
        return;
    }
    if (!s->parsing) {
        moon_gw_tool_parser_init(&s->parser, s->syntax, emit_content, emit_call, s);
        s->parsing = 1;
    }
    if (!moon_gw_tool_parser_feed(&s->parser, text, strlen(text))) {
        out->failed = 1;
    }
}

void moon_gw_structured_stream_end(moon_gw_structured_t *s, const moon_gw_resp_meta_t *m,
                                   const char *finish, moon_gw_buf_t *out)
{
    char  *chunk;
    size_t len;

    s->sm   = m;
    s->sout = out;
    if (s->parsing) {
        moon_gw_tool_parser_end(&s->parser);
        if (s->parser.n_calls > 0 && finish != NULL && strcmp(finish, "stop") == 0) {
            finish = "tool_calls";
        }
    }
    chunk = moon_gw_format_chunk(m, 0, NULL, finish, &len);
    if (chunk == NULL) {
        out->failed = 1;
        return;
    }
    moon_gw_buf_append(out, chunk, len);
    moon_free(chunk);
}
