/* tests/e2e/gateway/test_gw_tools.c - tool calls in the syntax of the model's
 * own chat template, end to end: a model with stories260K's vocabulary
 * (random weights, a context long enough for the tools prompts) whose GGUF
 * carries the template named on the command line (tests/data/jinja:
 * qwen2_5 for Hermes' <tool_call>, llama31_style for Llama 3.1's JSON
 * calls, mistral_style for Mistral's [TOOL_CALLS]), behind an in-process
 * cluster and a gateway. tool_choice required and a named function always
 * give calls written in that syntax (the answer's tokens hold argv[2]) that
 * parse and match their parameters' schema, whole and
 * streamed as tool_calls deltas; a two-turn loop (the call and the tool's
 * result rendered back by the template, in its syntax) calls again; the npm
 * `openai` client does the same (tools_client.mjs; skipped without npm). */
#include "gateway.h"
#include "gw_buf.h"
#include "gw_curl.h"
#include "gw_local.h"
#include "moon_test.h"
#include "moonlet/alloc.h"
#include "moonlet/dist.h"
#include "moonlet/model.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#define DATA MOON_TEST_DATA_DIR "/jinja"

static const char *g_template; /* argv[1]: the template file */
static const char *g_written;  /* argv[2]: how the template writes a call ("[TOOL_CALLS]") */
static unsigned    g_port;
static char        g_model[512];

static const char *tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"weather\",\"description\":\"The "
    "weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\",\"maxLength\":6},\"days\":{\"type\":\"integer\",\"minimum\":1}},\"required\":"
    "[\"city\",\"days\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
    "\"boolean\"}},\"required\":[\"a\",\"b\"]}}}]";

static cJSON *post(const char *path, const char *body, int want)
{
    return gw_post_json(g_port, path, body, want);
}

static const cJSON *choice0(const cJSON *o)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
}

/* A call object matches its tool's schema; returns its name (borrowed). */
static const char *check_call(const cJSON *call)
{
    const cJSON *fn   = cJSON_GetObjectItem(call, "function");
    const char  *name = cJSON_GetStringValue(cJSON_GetObjectItem(fn, "name"));
    const char  *args = cJSON_GetStringValue(cJSON_GetObjectItem(fn, "arguments"));
    cJSON       *a    = cJSON_Parse(args != NULL ? args : "");

    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(call, "type")), "function");
    CU_ASSERT(cJSON_IsString(cJSON_GetObjectItem(call, "id")));
    CU_ASSERT_FATAL(name != NULL && cJSON_IsObject(a));
    if (strcmp(name, "weather") == 0) {
        const cJSON *city = cJSON_GetObjectItem(a, "city"), *days = cJSON_GetObjectItem(a, "days");
        CU_ASSERT(cJSON_IsString(city) && strlen(city->valuestring) <= 6);
        CU_ASSERT(cJSON_IsNumber(days) && days->valuedouble >= 1 &&
                  days->valuedouble == (double)(long long)days->valuedouble);
    } else {
        CU_ASSERT_STRING_EQUAL(name, "add");
        CU_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(a, "a")));
        CU_ASSERT(cJSON_IsBool(cJSON_GetObjectItem(a, "b")));
    }
    CU_ASSERT_EQUAL(cJSON_GetArraySize(a), 2); /* nothing but its properties */
    cJSON_Delete(a);
    return name;
}

/* The answer's tokens (its logprobs) spell the call in the template's
 * syntax: the grammar wrote that syntax, and it was parsed as such. */
static void check_written(const cJSON *o)
{
    const cJSON  *lp = cJSON_GetObjectItem(cJSON_GetObjectItem(choice0(o), "logprobs"), "content");
    const cJSON  *t;
    moon_gw_buf_t raw;

    moon_gw_buf_init(&raw);
    moon_gw_buf_puts(&raw, "");
    cJSON_ArrayForEach(t, lp)
    {
        moon_gw_buf_puts(&raw, cJSON_GetStringValue(cJSON_GetObjectItem(t, "token")));
    }
    if (strstr(raw.data, g_written) == NULL) {
        fprintf(stderr, "the answer '%s' does not hold %s\n", raw.data, g_written);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(raw.data, g_written));
    moon_gw_buf_fini(&raw);
}

static void test_forced_calls(void)
{
    for (int seed = 1; seed <= 6; seed++) {
        const char *choice =
            seed <= 3 ? "\"required\"" : "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}";
        int          parallel = seed % 2 == 0;
        char         body[4096];
        cJSON       *o;
        const cJSON *msg, *calls;

        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],"
                 "\"tools\":%s,\"tool_choice\":%s,\"parallel_tool_calls\":%s,"
                 "\"temperature\":0.9,\"seed\":%d,\"max_tokens\":300,\"logprobs\":true}",
                 tools, choice, parallel ? "true" : "false", seed);
        o     = post("/v1/chat/completions", body, 200);
        msg   = cJSON_GetObjectItem(choice0(o), "message");
        calls = cJSON_GetObjectItem(msg, "tool_calls");
        check_written(o);
        CU_ASSERT_FATAL(cJSON_IsArray(calls) && cJSON_GetArraySize(calls) >= 1);
        if (!parallel) { /* one call, the whole answer */
            CU_ASSERT_EQUAL(cJSON_GetArraySize(calls), 1);
            CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(msg, "content")));
            CU_ASSERT_STRING_EQUAL(
                cJSON_GetStringValue(cJSON_GetObjectItem(choice0(o), "finish_reason")),
                "tool_calls");
        }
        for (int k = 0; k < cJSON_GetArraySize(calls); k++) {
            const char *name = check_call(cJSON_GetArrayItem(calls, k));
            if (seed > 3) {
                CU_ASSERT_STRING_EQUAL(name, "add");
            }
        }
        cJSON_Delete(o);
    }
}

static void test_forced_call_streamed(void)
{
    char      body[4096];
    gw_http_t r;
    int       n_calls = 0, finish_tools = 0;

    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":%s,"
             "\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"temperature\":0.7,"
             "\"seed\":5,\"stream\":true}",
             tools);
    CU_ASSERT_EQUAL_FATAL(gw_post(&r, g_port, "/v1/chat/completions", body, NULL), 200);
    for (char *line = strtok(r.body, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        cJSON       *o;
        const cJSON *delta, *calls, *content, *finish;
        if (strncmp(line, "data: {", 7) != 0) {
            continue;
        }
        o       = cJSON_Parse(line + 6);
        delta   = cJSON_GetObjectItem(choice0(o), "delta");
        calls   = cJSON_GetObjectItem(delta, "tool_calls");
        content = cJSON_GetObjectItem(delta, "content");
        finish  = cJSON_GetObjectItem(choice0(o), "finish_reason");
        if (cJSON_IsArray(calls)) {
            const cJSON *c = cJSON_GetArrayItem(calls, 0);
            CU_ASSERT_EQUAL(cJSON_GetObjectItem(c, "index")->valueint, n_calls);
            check_call(c);
            n_calls++;
        }
        if (cJSON_IsString(content) && content->valuestring[0] != '\0') {
            fprintf(stderr, "content in a forced call: '%s'\n", content->valuestring);
            CU_FAIL("content in a forced call");
        }
        finish_tools |= cJSON_IsString(finish) && strcmp(finish->valuestring, "tool_calls") == 0;
        cJSON_Delete(o);
    }
    CU_ASSERT_EQUAL(n_calls, 1);
    CU_ASSERT(finish_tools);
    gw_http_fini(&r);
}

/* The second turn: the model's call and the tool's result, rendered back by
 * the template (in its syntax: the prompt holds g_written and the result),
 * and another forced call. */
static void test_two_turns(void)
{
    char         msgs[2048], body[16384], *ids;
    cJSON       *o, *text;
    const cJSON *calls;

    snprintf(msgs, sizeof(msgs),
             "[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\","
             "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":"
             "{\"name\":\"weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"days\\\":1}\"}}"
             "]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"},"
             "{\"role\":\"user\",\"content\":\"And 2 + 2?\"}]");
    snprintf(body, sizeof(body), "{\"messages\":%s,\"tools\":%s}", msgs, tools);
    o   = post("/tokenize", body, 200);
    ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(o, "tokens"));
    CU_ASSERT_FATAL(ids != NULL && strlen(ids) < sizeof(body) - 16);
    snprintf(body, sizeof(body), "{\"tokens\":%s}", ids);
    cJSON_free(ids);
    cJSON_Delete(o);
    o    = post("/detokenize", body, 200);
    text = cJSON_GetObjectItem(o, "prompt");
    CU_ASSERT_FATAL(cJSON_IsString(text));
    CU_ASSERT_PTR_NOT_NULL(strstr(text->valuestring, g_written));
    CU_ASSERT_PTR_NOT_NULL(strstr(text->valuestring, "sunny"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text->valuestring, "Paris"));
    cJSON_Delete(o);
    snprintf(body, sizeof(body),
             "{\"messages\":%s,\"tools\":%s,\"tool_choice\":\"required\","
             "\"parallel_tool_calls\":false,\"temperature\":0.8,\"seed\":3}",
             msgs, tools);
    o     = post("/v1/chat/completions", body, 200);
    calls = cJSON_GetObjectItem(cJSON_GetObjectItem(choice0(o), "message"), "tool_calls");
    CU_ASSERT_FATAL(cJSON_GetArraySize(calls) == 1);
    check_call(cJSON_GetArrayItem(calls, 0));
    cJSON_Delete(o);
}

static void test_npm_openai(void)
{
    gw_run_npm_openai(MOON_TEST_NPM_SCRIPT, "client.mjs", g_port);
}

/* stories260K's vocabulary, random weights, 2048 positions, the template. */
static int write_model(const char *name)
{
    char                    path[512];
    char                   *tpl;
    moon_model_config_t     c = {.dim        = 64,
                                 .hidden_dim = 128,
                                 .n_layers   = 2,
                                 .n_heads    = 4,
                                 .n_kv_heads = 2,
                                 .vocab_size = 512,
                                 .seq_len    = 2048,
                                 .norm_eps   = 1e-5f,
                                 .rope_theta = 10000.0f};
    moon_model_write_opts_t o = {.type = MOON_GGML_F32, .seed = 29, .vocab_path = MOON_TEST_MODEL};
    int                     ok;

    snprintf(path, sizeof(path), "%s/%s", DATA, g_template);
    tpl             = moon_test_read_file(path, NULL);
    o.chat_template = tpl;
    snprintf(g_model, sizeof(g_model), "%s/%s.gguf", gw_tmp_dir(), name);
    ok = tpl != NULL && moon_model_write_random_ex(&c, &o, g_model) == MOON_OK;
    free(tpl);
    return ok;
}

int main(int argc, char **argv)
{
    gw_local_t l;
    char       name[64];
    int        rc = 1;

    if (argc != 3) {
        fprintf(stderr, "usage: test_gw_tools TEMPLATE.jinja CALL-MARKER\n");
        return 2;
    }
    g_template = argv[1];
    g_written  = argv[2];
    snprintf(name, sizeof(name), "gw_tools_%.*s", (int)strcspn(g_template, "."), g_template);
    gw_tmp_name(name);
    if (!write_model(name)) {
        fprintf(stderr, "test_gw_tools: cannot write the model\n");
        return 1;
    }
    if (gw_local_start(&l, "test_gw_tools", g_model)) {
        g_port = l.port;
        rc     = MOON_TEST_RUN(name, NULL, NULL, test_forced_calls, test_forced_call_streamed,
                               test_two_turns, test_npm_openai);
    }
    gw_local_stop(&l);
    remove(g_model);
    return rc;
}
