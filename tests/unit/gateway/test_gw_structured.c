/* tests/unit/gateway/test_gw_structured.c - structured output and tool
 * calls in the gateway, without a cluster: which fields become which grammar
 * spec and which are 400s (param named), tool turns rendered back, the tools
 * prompt, tool calls split out of an answer (also one that is no call), and
 * the stream's parser with tags cut across pieces. */
#include "gw_structured.h"
#include "moon_test.h"
#include "moonlet/alloc.h"

#include <string.h>

static const moon_gw_resp_meta_t chat = {
    .id = "chatcmpl-7", .model = "m", .fingerprint = "fp", .created = 1, .chat = 1};

static moon_status_t parse(const char *body, int is_chat, moon_gw_structured_t *s,
                           moon_gw_error_t *err)
{
    cJSON        *root = cJSON_Parse(body);
    moon_status_t status;

    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    memset(err, 0, sizeof(*err));
    status = moon_gw_structured_parse(root, is_chat, s, err);
    cJSON_Delete(root);
    return status;
}

static void test_fields_to_specs(void)
{
    static const struct {
        const char *body;
        const char *spec_prefix; /* NULL: no grammar */
    } cases[] = {
        {"{}", NULL},
        {"{\"response_format\":{\"type\":\"text\"}}", NULL},
        {"{\"response_format\":{\"type\":\"json_object\"}}", "json_object"},
        {"{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
         "\"schema\":{\"type\":\"object\"}}}}",
         "json_schema\n{\"type\":\"object\"}"},
        {"{\"grammar\":\"root ::= \\\"a\\\"\"}", "gbnf\nroot ::= \"a\""},
        {"{\"guided_json\":{\"type\":\"integer\"}}", "json_schema\n{\"type\":\"integer\"}"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
         "\"tool_choice\":\"required\"}",
         "tool_calls\n"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
         "\"tool_choice\":\"required\",\"parallel_tool_calls\":false}",
         "tool_call\n"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\","
         "\"function\":{\"name\":\"g\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":"
         "{\"name\":\"g\"}}}",
         "tool_call\n{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"g\"}"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        moon_gw_structured_t s;
        moon_gw_error_t      err;
        CU_ASSERT_EQUAL(parse(cases[i].body, 1, &s, &err), MOON_OK);
        if (cases[i].spec_prefix == NULL) {
            CU_ASSERT_PTR_NULL(s.grammar);
        } else {
            CU_ASSERT_PTR_NOT_NULL_FATAL(s.grammar);
            CU_ASSERT_EQUAL(strncmp(s.grammar, cases[i].spec_prefix, strlen(cases[i].spec_prefix)),
                            0);
            CU_ASSERT_EQUAL(s.grammar_len, strlen(s.grammar));
        }
        moon_gw_structured_fini(&s);
    }
}

static void test_refusals_name_the_field(void)
{
    static const struct {
        const char *body;
        int         chat;
        const char *param;
    } cases[] = {
        {"{\"response_format\":\"json\"}", 1, "response_format"},
        {"{\"response_format\":{\"type\":\"xml\"}}", 1, "response_format.type"},
        {"{\"response_format\":{\"type\":\"json_schema\"}}", 1, "response_format.json_schema"},
        {"{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":"
         "\"string\",\"format\":\"hostname\"}}}}",
         1, "response_format"},
        {"{\"response_format\":{\"type\":\"json_object\"},\"grammar\":\"root ::= \\\"a\\\"\"}", 1,
         "grammar"},
        {"{\"grammar\":7}", 0, "grammar"},
        {"{\"tools\":{}}", 1, "tools"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", 0, "tools"},
        {"{\"tool_choice\":\"required\"}", 1, "tool_choice"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":"
         "\"sometimes\"}",
         1, "tool_choice"},
        {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":3}}]}", 1,
         "tools[0]"},
        {"{\"parallel_tool_calls\":\"yes\"}", 1, "parallel_tool_calls"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        moon_gw_structured_t s;
        moon_gw_error_t      err;
        CU_ASSERT_EQUAL(parse(cases[i].body, cases[i].chat, &s, &err), MOON_ERR_INVALID_PARAM);
        CU_ASSERT_EQUAL(err.http, 400);
        CU_ASSERT_STRING_EQUAL(err.param, cases[i].param);
        moon_gw_structured_fini(&s);
    }
}

static void test_tool_turns_rendered(void)
{
    cJSON *tool = cJSON_Parse("{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"sunny\"}");
    cJSON *asst = cJSON_Parse("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
                              "\"c\",\"type\":\"function\",\"function\":{\"name\":\"w\","
                              "\"arguments\":\"{\\\"city\\\": \\\"P\\\"}\"}}]}");
    cJSON *user = cJSON_Parse("{\"role\":\"user\",\"content\":\"hi\"}");
    moon_gw_chat_msg_t m;
    moon_gw_error_t    err;

    CU_ASSERT_TRUE(moon_gw_structured_is_tool_msg(tool, "tool"));
    CU_ASSERT_TRUE(moon_gw_structured_is_tool_msg(asst, "assistant"));
    CU_ASSERT_FALSE(moon_gw_structured_is_tool_msg(user, "user"));
    CU_ASSERT_EQUAL_FATAL(moon_gw_structured_tool_msg(tool, 2, &m, &err), MOON_OK);
    CU_ASSERT_STRING_EQUAL(m.role, "user");
    CU_ASSERT_STRING_EQUAL(m.content, "<tool_response>sunny</tool_response>");
    moon_free((char *)m.role);
    moon_free((char *)m.content);
    CU_ASSERT_EQUAL_FATAL(moon_gw_structured_tool_msg(asst, 1, &m, &err), MOON_OK);
    CU_ASSERT_STRING_EQUAL(m.role, "assistant");
    CU_ASSERT_STRING_EQUAL(
        m.content, "<tool_call>{\"name\":\"w\",\"arguments\":{\"city\":\"P\"}}</tool_call>");
    moon_free((char *)m.role);
    moon_free((char *)m.content);
    cJSON_Delete(tool);
    cJSON_Delete(asst);
    cJSON_Delete(user);
}

static void test_tools_prompt_in_system_turn(void)
{
    moon_gw_structured_t s;
    moon_gw_error_t      err;
    moon_gw_chat_msg_t  *msgs = moon_calloc(1, sizeof(*msgs));
    uint32_t             n    = 1;

    msgs[0].role    = moon_strdup("user");
    msgs[0].content = moon_strdup("hi");
    CU_ASSERT_EQUAL_FATAL(parse("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                                "\"f\",\"parameters\":{\"$schema\":\"x\",\"type\":\"object\"}}}]}",
                                1, &s, &err),
                          MOON_OK);
    CU_ASSERT_TRUE(s.tools);
    CU_ASSERT_EQUAL(moon_gw_structured_add_tools(&s, &msgs, &n), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_STRING_EQUAL(msgs[0].role, "system");
    CU_ASSERT_PTR_NOT_NULL(strstr(msgs[0].content, "<tools>[{\"name\":\"f\""));
    CU_ASSERT_PTR_NULL(strstr(msgs[0].content, "$schema"));
    CU_ASSERT_STRING_EQUAL(msgs[1].content, "hi");
    for (uint32_t i = 0; i < n; i++) {
        moon_free((char *)msgs[i].role);
        moon_free((char *)msgs[i].content);
    }
    moon_free(msgs);
    moon_gw_structured_fini(&s);
}

static void test_answer_split(void)
{
    moon_gw_structured_t s;
    moon_gw_usage_t      u = {0};
    size_t               len;
    char                *body;
    cJSON               *o, *msg, *calls;

    memset(&s, 0, sizeof(s));
    s.tools = 1;
    body    = moon_gw_structured_response(
           &s, &chat,
           "<tool_call>{\"name\":\"a\",\"arguments\":{\"x\":1}}</tool_call>\n"
              "<tool_call>{\"name\":\"b\",\"arguments\":{}}</tool_call>",
           "stop", &u, &len);
    o   = cJSON_Parse(body);
    msg = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    calls = cJSON_GetObjectItem(msg, "tool_calls");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(calls), 2);
    CU_ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(msg, "content")));
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0),
                            "finish_reason")
            ->valuestring,
        "tool_calls");
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function"),
                            "arguments")
            ->valuestring,
        "{\"x\":1}");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 1), "id")->valuestring,
                           "call_7_1");
    cJSON_Delete(o);
    moon_free(body);
    /* no call: text, and a broken call stays text too */
    body =
        moon_gw_structured_response(&s, &chat, "hi <tool_call>{oops</tool_call>", "stop", &u, &len);
    o   = cJSON_Parse(body);
    msg = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(msg, "tool_calls"));
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(msg, "content")->valuestring,
                           "hi <tool_call>{oops</tool_call>");
    cJSON_Delete(o);
    moon_free(body);
}

static void test_stream_parser(void)
{
    static const char *const pieces[] = {
        "Sure",        " <tool", "_call>{\"name\":\"a\",", "\"arguments\":{\"y\":2}}</tool_",
        "call> bye <", "x"};
    moon_gw_structured_t s;
    moon_gw_buf_t        out;
    int                  n_calls      = 0;
    char                 content[256] = "";

    memset(&s, 0, sizeof(s));
    s.tools = 1;
    moon_gw_buf_init(&out);
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
        moon_gw_structured_stream(&s, &chat, pieces[i], &out);
    }
    moon_gw_structured_stream_end(&s, &chat, "stop", &out);
    CU_ASSERT_FALSE_FATAL(out.failed);
    for (char *line = strtok(out.data, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        cJSON       *o     = cJSON_Parse(line + 6);
        cJSON       *ch    = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        cJSON       *delta = cJSON_GetObjectItem(ch, "delta");
        const cJSON *calls = cJSON_GetObjectItem(delta, "tool_calls");
        const cJSON *c     = cJSON_GetObjectItem(delta, "content");
        if (cJSON_IsString(c)) {
            strncat(content, c->valuestring, sizeof(content) - strlen(content) - 1);
        }
        if (calls != NULL) {
            n_calls++;
            CU_ASSERT_EQUAL(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "index")->valueint,
                            0);
        }
        if (cJSON_IsString(cJSON_GetObjectItem(ch, "finish_reason"))) {
            CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(ch, "finish_reason")->valuestring,
                                   "tool_calls");
        }
        cJSON_Delete(o);
    }
    CU_ASSERT_EQUAL(n_calls, 1);
    CU_ASSERT_STRING_EQUAL(content, "Sure bye <x"); /* the space before the call dropped */
    moon_gw_buf_fini(&out);
    moon_gw_structured_fini(&s);
}

MOON_TEST_MAIN("gw_structured", NULL, NULL, test_fields_to_specs, test_refusals_name_the_field,
               test_tool_turns_rendered, test_tools_prompt_in_system_turn, test_answer_split,
               test_stream_parser)
