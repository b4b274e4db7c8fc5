/* tests/unit/gateway/test_gw_tool_parse.c - the tool-call syntaxes: which
 * one each real template picks (tests/data/jinja), each syntax's parser on
 * well-formed, malformed and cut-off answers (content and calls as
 * expected, whole or fed a byte at a time or in pieces of 3 alike), random
 * answers from each syntax's pieces (never a crash, stream and whole
 * agree), and a forced call's grammar in each syntax's form. */
#include "gw_structured.h"
#include "gw_tool_parse.h"
#include "gw_tool_syntax.h"
#include "moon_test.h"
#include "moonlet/alloc.h"
#include "moonlet/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a parser passed on: content, and the calls as "name args" lines. */
typedef struct {
    moon_gw_buf_t content, calls;
} got_t;

static void on_content(void *arg, const char *text, size_t n)
{
    CU_ASSERT(n > 0);
    moon_gw_buf_append(&((got_t *)arg)->content, text, n);
}

static void on_call(void *arg, const char *name, const char *args)
{
    moon_gw_buf_printf(&((got_t *)arg)->calls, "%s %s\n", name, args);
}

/* The answer fed in pieces of step bytes (0: whole); g's text NUL-terminated. */
static void run(const char *syntax, const char *answer, size_t step, got_t *g)
{
    moon_gw_tool_parser_t p;
    size_t                n = strlen(answer);

    memset(g, 0, sizeof(*g));
    moon_gw_buf_init(&g->content);
    moon_gw_buf_init(&g->calls);
    moon_gw_buf_puts(&g->content, "");
    moon_gw_buf_puts(&g->calls, "");
    moon_gw_tool_parser_init(&p, moon_gw_tool_syntax_find(syntax), on_content, on_call, g);
    for (size_t i = 0; i < n; i += step != 0 ? step : n) {
        size_t k = step != 0 && step < n - i ? step : n - i;
        CU_ASSERT_TRUE(moon_gw_tool_parser_feed(&p, answer + i, k));
    }
    moon_gw_tool_parser_end(&p);
    moon_gw_tool_parser_fini(&p);
}

static void got_fini(got_t *g)
{
    moon_gw_buf_fini(&g->content);
    moon_gw_buf_fini(&g->calls);
}

static void test_pick_from_templates(void)
{
    static const struct {
        const char *file, *syntax;
    } cases[] = {
        {"qwen2_5.jinja", "hermes"},        {"qwen3.jinja", "hermes"},
        {"mistral_style.jinja", "mistral"}, {"llama31_style.jinja", "llama3"},
        {"llama3.jinja", "hermes"}, /* Llama 3.0's: no tools, so the default */
        {"smollm_style.jinja", "hermes"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char   path[512];
        size_t len = 0;
        char  *tpl;
        snprintf(path, sizeof(path), "%s/jinja/%s", MOON_TEST_DATA_DIR, cases[i].file);
        tpl = moon_test_read_file(path, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(tpl);
        CU_ASSERT_STRING_EQUAL(moon_gw_tool_syntax_pick(tpl, len)->name, cases[i].syntax);
        free(tpl);
    }
    CU_ASSERT_STRING_EQUAL(moon_gw_tool_syntax_pick(NULL, 0)->name, "hermes");
    CU_ASSERT_STRING_EQUAL(moon_gw_tool_syntax_pick("x <|python_tag|>", 16)->name, "llama3");
    CU_ASSERT_PTR_EQUAL(moon_gw_tool_syntax_default(), moon_gw_tool_syntax_find("hermes"));
    CU_ASSERT_PTR_NULL(moon_gw_tool_syntax_find("nope"));
}

static const struct {
    const char *syntax, *answer, *content, *calls;
} answers[] = {
    /* Hermes */
    {"hermes",
     "<tool_call>{\"name\":\"a\",\"arguments\":{\"x\":1}}</tool_call>\n"
     "<tool_call>{\"name\":\"b\",\"arguments\":{}}</tool_call>",
     "", "a {\"x\":1}\nb {}\n"},
    {"hermes",
     "Sure <tool_call>\n{\"name\": \"a\", \"arguments\": \"{\\\"y\\\":2}\"}\n</tool_call> bye",
     "Sure bye", "a {\"y\":2}\n"},
    {"hermes", "hi <tool_call>{oops</tool_call>", "hi <tool_call>{oops</tool_call>", ""},
    {"hermes", "hi <tool_call>{\"name\":\"a\",\"arguments\":{}}",
     "hi <tool_call>{\"name\":\"a\",\"arguments\":{}}", ""},
    {"hermes", "<tool_call>[\"x\"]</tool_call>", "<tool_call>[\"x\"]</tool_call>", ""},
    {"hermes", "<tool_call>{\"name\":\"\",\"arguments\":{}}</tool_call>",
     "<tool_call>{\"name\":\"\",\"arguments\":{}}</tool_call>", ""},
    {"hermes", "a <tool_ca", "a <tool_ca", ""},
    {"hermes", "{\"name\":\"a\",\"arguments\":{}}", "{\"name\":\"a\",\"arguments\":{}}", ""},
    /* Llama 3.1 */
    {"llama3", "{\"name\": \"get\", \"parameters\": {\"city\": \"Paris\"}}", "",
     "get {\"city\":\"Paris\"}\n"},
    {"llama3", "  <|python_tag|>{\"name\":\"get\",\"parameters\":{}}", "", "get {}\n"},
    {"llama3",
     "{\"name\":\"a\",\"parameters\":{}}; {\"name\":\"b\",\"arguments\":{\"k\":[1,\"]}\"]}}\n", "",
     "a {}\nb {\"k\":[1,\"]}\"]}\n"},
    {"llama3", "Hello {\"name\":\"a\",\"parameters\":{}}",
     "Hello {\"name\":\"a\",\"parameters\":{}}", ""},
    {"llama3", "{\"answer\": 42}", "{\"answer\": 42}", ""},
    {"llama3",
     " {\"name\":\"a\",\"parameters\":{\"x\":", " {\"name\":\"a\",\"parameters\":{\"x\":", ""},
    {"llama3", "The weather <|python_tag|>{\"name\":\"w\",\"parameters\":{}}", "The weather",
     "w {}\n"},
    {"llama3", "{\"name\":\"a\",\"parameters\":{}} and more", " and more", "a {}\n"},
    {"llama3", "<|python_tag|>oops", "<|python_tag|>oops", ""},
    {"llama3", "<|python_", "<|python_", ""},
    {"llama3", "{\"name\":\"a\",\"parameters\":7}", "{\"name\":\"a\",\"parameters\":7}", ""},
    /* Mistral */
    {"mistral",
     "[TOOL_CALLS][{\"name\":\"a\",\"arguments\":{\"x\":1}},{\"name\":\"b\",\"arguments\":{}}]", "",
     "a {\"x\":1}\nb {}\n"},
    {"mistral", "[{\"name\":\"a\",\"arguments\":{}}]", "", "a {}\n"},
    {"mistral", "Let me check. [TOOL_CALLS] [{\"name\":\"a\",\"arguments\":{}}]", "Let me check.",
     "a {}\n"},
    {"mistral", "[TOOL_CALLS][{\"name\":\"a\"}]", "[TOOL_CALLS][{\"name\":\"a\"}]", ""},
    {"mistral", "[TOOL_CALLS][]", "[TOOL_CALLS][]", ""},
    {"mistral", "[TOOL_CALLS][{\"name\":\"a\",\"arguments\":{}},3]",
     "[TOOL_CALLS][{\"name\":\"a\",\"arguments\":{}},3]", ""},
    {"mistral", "[1, 2]", "[1, 2]", ""},
    {"mistral", "[TOOL_CALLS][{\"name\":\"a\",\"arguments\":{}}",
     "[TOOL_CALLS][{\"name\":\"a\",\"arguments\":{}}", ""},
    {"mistral", "[TOOL_CALLS] oops", "[TOOL_CALLS] oops", ""},
    {"mistral", "[TOOL", "[TOOL", ""},
    {"mistral", "Plain words.", "Plain words.", ""},
    {"mistral", "", "", ""},
};

static void test_parse_each_syntax(void)
{
    static const size_t steps[] = {0, 1, 3};

    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++) {
        for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
            got_t g;
            run(answers[i].syntax, answers[i].answer, steps[s], &g);
            if (strcmp(g.content.data, answers[i].content) != 0 ||
                strcmp(g.calls.data, answers[i].calls) != 0) {
                fprintf(stderr, "\n%s '%s' (step %zu): content '%s' calls '%s'\n",
                        answers[i].syntax, answers[i].answer, steps[s], g.content.data,
                        g.calls.data);
            }
            CU_ASSERT_STRING_EQUAL(g.content.data, answers[i].content);
            CU_ASSERT_STRING_EQUAL(g.calls.data, answers[i].calls);
            got_fini(&g);
        }
    }
}

/* Answers glued from each syntax's pieces, a fixed seed: whole and fed a
 * byte at a time give the same content and calls, and nothing is lost but
 * what the calls and the whitespace around them stood for. */
static void test_random_answers_agree(void)
{
    static const char *const bits[]     = {"<tool_call>",
                                           "</tool_call>",
                                           "[TOOL_CALLS]",
                                           "<|python_tag|>",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"",
                                           "\\",
                                           ":",
                                           ",",
                                           ";",
                                           " ",
                                           "\n",
                                           "\"name\"",
                                           "\"arguments\"",
                                           "\"parameters\"",
                                           "\"a\"",
                                           "{}",
                                           "1",
                                           "x",
                                           "<",
                                           "<tool",
                                           "[TOOL"};
    static const char *const syntaxes[] = {"hermes", "llama3", "mistral"};
    unsigned                 seed       = 29;
    int                      with_calls = 0;

    for (int round = 0; round < 3000; round++) {
        char  answer[512] = "";
        int   n           = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 24;
        got_t whole, bytes;

        for (int k = 0; k < n; k++) {
            seed = seed * 1103515245u + 12345u;
            strcat(answer, bits[(seed >> 16) % (sizeof(bits) / sizeof(bits[0]))]);
        }
        if (round % 7 == 0) { /* now and then a well-formed call inside */
            strcat(answer, round % 2 ? "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>"
                                     : "[TOOL_CALLS][{\"name\":\"f\",\"arguments\":{}}]");
        }
        run(syntaxes[round % 3], answer, 0, &whole);
        run(syntaxes[round % 3], answer, 1, &bytes);
        if (strcmp(whole.content.data, bytes.content.data) != 0 ||
            strcmp(whole.calls.data, bytes.calls.data) != 0) {
            fprintf(stderr, "\n%s '%s': whole '%s' '%s', bytes '%s' '%s'\n", syntaxes[round % 3],
                    answer, whole.content.data, whole.calls.data, bytes.content.data,
                    bytes.calls.data);
        }
        CU_ASSERT_STRING_EQUAL(whole.content.data, bytes.content.data);
        CU_ASSERT_STRING_EQUAL(whole.calls.data, bytes.calls.data);
        CU_ASSERT(whole.content.len <= strlen(answer));
        if (whole.calls.len == 0) { /* no call: nothing is lost but whitespace */
            size_t want = 0, got = 0;
            for (const char *c = answer; *c; c++) {
                want += !strchr(" \n", *c);
            }
            for (const char *c = whole.content.data; *c; c++) {
                got += !strchr(" \n", *c);
            }
            CU_ASSERT_EQUAL(got, want);
        }
        with_calls += whole.calls.len > 0;
        got_fini(&whole);
        got_fini(&bytes);
    }
    printf("\n  %d of 3000 random answers held calls\n", with_calls);
    CU_ASSERT(with_calls > 60); /* the well-formed calls were found */
}

/* A forced call's grammar after bind: the syntax's form, and it compiles. */
static void test_forced_grammar_per_syntax(void)
{
    static const struct {
        const char *syntax, *choice, *parallel, *prefix, *has, *lacks;
    } cases[] = {
        {"hermes", "\"required\"", "true", "tool_calls\n", "\"arguments\"", NULL},
        {"hermes", "\"required\"", "false", "tool_call\n", "\"arguments\"", NULL},
        {"llama3", "\"required\"", "true", "json_schema\n", "\"parameters\"", "\"arguments\""},
        {"llama3", "{\"type\":\"function\",\"function\":{\"name\":\"b\"}}", "true",
         "json_schema\n{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"b\"}",
         "\"parameters\"", "\"anyOf\""},
        {"mistral", "\"required\"", "true", "mistral_calls\n{\"type\":\"array\"", "\"minItems\":1",
         "\"maxItems\""},
        {"mistral", "\"required\"", "false", "mistral_calls\n", "\"maxItems\":1", NULL},
        {"mistral", "{\"type\":\"function\",\"function\":{\"name\":\"a\"}}", "true",
         "mistral_calls\n", "\"maxItems\":1", "\"anyOf\""},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char                 body[1024], why[MOON_GRAMMAR_ERR_MAX];
        cJSON               *root;
        moon_gw_structured_t s;
        moon_gw_error_t      err;
        moon_grammar_t      *g = NULL;

        snprintf(body, sizeof(body),
                 "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":"
                 "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}}},"
                 "{\"type\":\"function\",\"function\":{\"name\":\"b\"}}],"
                 "\"tool_choice\":%s,\"parallel_tool_calls\":%s}",
                 cases[i].choice, cases[i].parallel);
        root = cJSON_Parse(body);
        memset(&err, 0, sizeof(err));
        CU_ASSERT_EQUAL_FATAL(moon_gw_structured_parse(root, 1, &s, &err), MOON_OK);
        cJSON_Delete(root);
        CU_ASSERT_EQUAL(
            moon_gw_structured_bind(&s, moon_gw_tool_syntax_find(cases[i].syntax), &err), MOON_OK);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s.grammar);
        if (strncmp(s.grammar, cases[i].prefix, strlen(cases[i].prefix)) != 0) {
            fprintf(stderr, "\n%s: %s\n", cases[i].syntax, s.grammar);
        }
        CU_ASSERT_EQUAL(strncmp(s.grammar, cases[i].prefix, strlen(cases[i].prefix)), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(s.grammar, cases[i].has));
        if (cases[i].lacks != NULL) {
            CU_ASSERT_PTR_NULL(strstr(s.grammar, cases[i].lacks));
        }
        CU_ASSERT_EQUAL(moon_grammar_from_spec(s.grammar, s.grammar_len, &g, why, sizeof(why)),
                        MOON_OK);
        moon_grammar_destroy(g);
        moon_gw_structured_fini(&s);
    }
}

MOON_TEST_MAIN("gw_tool_parse", NULL, NULL, test_pick_from_templates, test_parse_each_syntax,
               test_random_answers_agree, test_forced_grammar_per_syntax)
