/* tests/e2e/gateway/test_gw_structured.c - structured output and tool calls
 * end to end: an in-process cluster on stories260K behind a gateway.
 * json_object and json_schema answers always parse and validate (200 random
 * schemas from a fixed seed, structured_schemas.py, on both routes), schemas
 * the engine cannot enforce are 400s naming the field, tool calls (required,
 * named, auto, none; streamed as deltas; role "tool" turns rendered back),
 * and the npm clients (AI SDK generateObject with Zod, a two-turn agent loop,
 * LangChain withStructuredOutput: structured_clients.mjs; skipped when npm or
 * its registry is unreachable). With stories260K the content is nonsense; the
 * structure is what is checked. */
#include "gateway.h"
#include "gw_curl.h"
#include "gw_local.h"
#include "moon_test.h"
#include "moonlet/dist.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#ifndef MOON_TEST_MODEL
#error "MOON_TEST_MODEL must name stories260K.gguf"
#endif

static unsigned g_port;

static cJSON *post_json(const char *path, const char *body, int want)
{
    return gw_post_json(g_port, path, body, want);
}

/* choices[0].message (chat) */
static const cJSON *message_of(const cJSON *o)
{
    return cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
}

static const char *finish_of(const cJSON *o)
{
    const cJSON *f = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0),
                                         "finish_reason");
    return cJSON_IsString(f) ? f->valuestring : "";
}

static void test_json_object(void)
{
    for (int seed = 1; seed <= 4; seed++) {
        char   body[512];
        cJSON *o, *doc;
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"A JSON story\"}],"
                 "\"response_format\":{\"type\":\"json_object\"},\"max_tokens\":300,"
                 "\"temperature\":%s,\"seed\":%d}",
                 seed == 1 ? "0" : "0.9", seed);
        o                    = post_json("/v1/chat/completions", body, 200);
        const cJSON *content = cJSON_GetObjectItem(message_of(o), "content");
        CU_ASSERT_FATAL(cJSON_IsString(content));
        /* complete (stop) documents parse; one cut by max_tokens may not */
        if (strcmp(finish_of(o), "stop") == 0) {
            doc = cJSON_Parse(content->valuestring);
            CU_ASSERT(cJSON_IsObject(doc));
            cJSON_Delete(doc);
        } else {
            CU_ASSERT_STRING_EQUAL(finish_of(o), "length");
            CU_ASSERT_EQUAL(content->valuestring[0], '{');
        }
        cJSON_Delete(o);
    }
}

static void test_schema_and_grammar(void)
{
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
        "\"n\":{\"type\":\"integer\",\"minimum\":0},\"ok\":{\"type\":\"boolean\"},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"blue\"]},\"maxItems\":3}},"
        "\"required\":[\"name\",\"n\",\"ok\",\"tags\"],\"additionalProperties\":false}";
    char   body[2048];
    cJSON *o, *doc;

    snprintf(body, sizeof(body),
             "{\"prompt\":\"Once\",\"max_tokens\":200,\"temperature\":0,"
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
             "\"strict\":true,\"schema\":%s}}}",
             schema);
    o = post_json("/v1/completions", body, 200);
    const cJSON *text =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "text");
    CU_ASSERT_FATAL(cJSON_IsString(text));
    CU_ASSERT_STRING_EQUAL(finish_of(o), "stop");
    doc = cJSON_Parse(text->valuestring);
    CU_ASSERT(cJSON_IsString(cJSON_GetObjectItem(doc, "name")));
    CU_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(doc, "n")));
    CU_ASSERT(cJSON_IsBool(cJSON_GetObjectItem(doc, "ok")));
    CU_ASSERT(cJSON_IsArray(cJSON_GetObjectItem(doc, "tags")));
    cJSON_Delete(doc);
    cJSON_Delete(o);

    /* llama.cpp's grammar field through the same engine */
    o    = post_json("/v1/completions",
                     "{\"prompt\":\"Once\",\"max_tokens\":50,\"temperature\":0.8,\"seed\":3,"
                        "\"grammar\":\"root ::= (\\\"yes\\\" | \\\"no\\\") \\\" \\\" [a-z]{1,3}\"}",
                     200);
    text = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "text");
    CU_ASSERT_FATAL(cJSON_IsString(text));
    CU_ASSERT(strncmp(text->valuestring, "yes ", 4) == 0 ||
              strncmp(text->valuestring, "no ", 3) == 0);
    CU_ASSERT_STRING_EQUAL(finish_of(o), "stop");
    cJSON_Delete(o);
}

static void expect_400(const char *path, const char *body, const char *param)
{
    cJSON       *o   = post_json(path, body, 400);
    const cJSON *err = cJSON_GetObjectItem(o, "error");
    const cJSON *p   = cJSON_GetObjectItem(err, "param");

    CU_ASSERT(cJSON_IsString(p) && strcmp(p->valuestring, param) == 0);
    if (!(cJSON_IsString(p) && strcmp(p->valuestring, param) == 0)) {
        fprintf(stderr, "expected param %s for %s\n", param, body);
    }
    cJSON_Delete(o);
}

static void test_unenforceable_is_400(void)
{
    expect_400(
        "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
        "\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"string\",\"pattern\":\"a+\"}}}}",
        "response_format");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"response_format\":{\"type\":\"yaml\"}}",
               "response_format.type");
    expect_400("/v1/completions", "{\"prompt\":\"x\",\"grammar\":\"root ::= foo\"}", "grammar");
    expect_400(
        "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":{\"type\":\"function\","
        "\"function\":{\"name\":\"b\"}}}",
        "tool_choice");
    expect_400(
        "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"x\"}]}",
        "tools[0]");
}

static const char *tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"weather\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":6},\"days\":"
    "{\"type\":\"integer\",\"minimum\":1}},\"required\":[\"city\",\"days\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
    "\"required\":[\"a\",\"b\"]}}}]";

/* Checks a tool call object; returns its function name (borrowed). */
static const char *check_call(const cJSON *call)
{
    const cJSON *fn   = cJSON_GetObjectItem(call, "function");
    const cJSON *name = cJSON_GetObjectItem(fn, "name");
    const cJSON *args = cJSON_GetObjectItem(fn, "arguments");
    cJSON       *a;

    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(call, "type")), "function");
    CU_ASSERT(cJSON_IsString(cJSON_GetObjectItem(call, "id")));
    CU_ASSERT_FATAL(cJSON_IsString(name) && cJSON_IsString(args));
    a = cJSON_Parse(args->valuestring);
    CU_ASSERT_FATAL(cJSON_IsObject(a));
    if (strcmp(name->valuestring, "weather") == 0) {
        CU_ASSERT(cJSON_IsString(cJSON_GetObjectItem(a, "city")));
        CU_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(a, "days")) &&
                  cJSON_GetObjectItem(a, "days")->valuedouble >= 1);
    } else {
        CU_ASSERT_STRING_EQUAL(name->valuestring, "add");
        CU_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(a, "a")));
        CU_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(a, "b")));
    }
    cJSON_Delete(a);
    return name->valuestring;
}

static void test_tool_calls(void)
{
    char   body[4096];
    cJSON *o;

    for (int seed = 1; seed <= 6; seed++) {
        const char *choice =
            seed <= 3 ? "\"required\"" : "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}";
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],"
                 "\"tools\":%s,\"tool_choice\":%s,\"parallel_tool_calls\":%s,"
                 "\"temperature\":0.9,\"seed\":%d}",
                 tools, choice, seed % 2 ? "false" : "true", seed);
        o                 = post_json("/v1/chat/completions", body, 200);
        const cJSON *msg  = message_of(o);
        const cJSON *call = cJSON_GetObjectItem(msg, "tool_calls");
        /* parallel: more calls may follow until EOS or the context's end */
        if (seed % 2) {
            CU_ASSERT_STRING_EQUAL(finish_of(o), "tool_calls");
        }
        CU_ASSERT_FATAL(cJSON_IsArray(call) && cJSON_GetArraySize(call) >= 1);
        if (seed % 2) { /* else a call cut by the context's end stays text */
            CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(msg, "content")));
            CU_ASSERT_EQUAL(cJSON_GetArraySize(call), 1);
        }
        for (int k = 0; k < cJSON_GetArraySize(call); k++) {
            const char *name = check_call(cJSON_GetArrayItem(call, k));
            if (seed > 3) {
                CU_ASSERT_STRING_EQUAL(name, "add");
            }
        }
        cJSON_Delete(o);
    }
    /* the second turn: the call and the tool's answer rendered back, no tools forced */
    snprintf(
        body, sizeof(body),
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\","
        "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
        "{\"name\":\"weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"days\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}],"
        "\"tools\":%s,\"tool_choice\":\"none\",\"max_tokens\":8,\"temperature\":0}",
        tools);
    o = post_json("/v1/chat/completions", body, 200);
    CU_ASSERT(cJSON_IsString(cJSON_GetObjectItem(message_of(o), "content")));
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(message_of(o), "tool_calls"));
    cJSON_Delete(o);
}

static void test_tool_calls_streamed(void)
{
    char      body[4096];
    gw_http_t r;
    int       n_calls = 0, finish_tools = 0;

    snprintf(
        body, sizeof(body),
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":%s,"
        "\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"temperature\":0.7,\"seed\":5,"
        "\"stream\":true}",
        tools);
    CU_ASSERT_EQUAL_FATAL(gw_post(&r, g_port, "/v1/chat/completions", body, NULL), 200);
    for (char *line = strtok(r.body, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        cJSON       *o;
        const cJSON *choice, *delta, *calls;
        if (strncmp(line, "data: {", 7) != 0) {
            continue;
        }
        o      = cJSON_Parse(line + 6);
        choice = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        delta  = cJSON_GetObjectItem(choice, "delta");
        calls  = cJSON_GetObjectItem(delta, "tool_calls");
        if (cJSON_IsArray(calls)) {
            const cJSON *c = cJSON_GetArrayItem(calls, 0);
            CU_ASSERT_EQUAL(cJSON_GetObjectItem(c, "index")->valueint, n_calls);
            check_call(c);
            n_calls++;
        }
        CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(delta, "content") != NULL &&
                                   cJSON_GetStringValue(cJSON_GetObjectItem(delta, "content"))[0]
                               ? "content in a required tool call"
                               : NULL);
        finish_tools |=
            cJSON_IsString(cJSON_GetObjectItem(choice, "finish_reason")) &&
            strcmp(cJSON_GetObjectItem(choice, "finish_reason")->valuestring, "tool_calls") == 0;
        cJSON_Delete(o);
    }
    CU_ASSERT(n_calls >= 1);
    CU_ASSERT(finish_tools);
    gw_http_fini(&r);
}

/* Runs a script; exit 77 means its tool or registry is unreachable (skip). */
static void run_script(const char *cmd, const char *unreachable)
{
    int ret = system(cmd);

    if (WEXITSTATUS(ret) == 77) {
        moon_test_skip(unreachable);
        return;
    }
    CU_ASSERT_EQUAL(WEXITSTATUS(ret), 0);
}

static void test_random_schemas(void)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd),
             "command -v python3 >/dev/null || exit 77; MOON_GW_URL=http://127.0.0.1:%u "
             "timeout 300 python3 '%s' 200 29",
             g_port, MOON_TEST_SCHEMAS_SCRIPT);
    run_script(cmd, "python3 or its jsonschema module is missing: random schemas did not run");
}

static void test_npm_clients(void)
{
    char cmd[2048];

    snprintf(cmd, sizeof(cmd),
             "command -v npm >/dev/null && command -v node >/dev/null || exit 77; "
             "d='%s/npm'; mkdir -p \"$d\"; cd \"$d\" && "
             "( [ -d node_modules/@langchain/openai ] || timeout 240 npm install --silent "
             "--no-audit --no-fund ai@4 @ai-sdk/openai-compatible@0 zod@3 @langchain/openai@0 "
             "@langchain/core@0 >npm.log 2>&1 ) || exit 77; "
             "cp '%s' client.mjs && MOON_GW_URL=http://127.0.0.1:%u/v1 timeout 120 node client.mjs",
             gw_tmp_dir(), MOON_TEST_CLIENTS_SCRIPT, g_port);
    run_script(cmd, "npm or the npm registry is unreachable: the AI SDK / LangChain tests did not "
                    "run");
}

int main(void)
{
    gw_local_t l;
    int        rc = 1;

    gw_tmp_name("gw_structured");
    if (gw_local_start(&l, "test_gw_structured", MOON_TEST_MODEL)) {
        g_port = l.port;
        rc = MOON_TEST_RUN("gw_structured", NULL, NULL, test_json_object, test_schema_and_grammar,
                           test_unenforceable_is_400, test_tool_calls, test_tool_calls_streamed,
                           test_random_schemas, test_npm_clients);
    }
    gw_local_stop(&l);
    return rc;
}
