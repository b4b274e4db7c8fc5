/* tests/unit/launch/test_bench_sse.c - SSE framing of OpenAI streams (split
 * anywhere, CRLF/CR/LF, comments, multi-line data, [DONE]), decoding of
 * completions and chat chunks, and the request bodies `moonlet bench` sends. */
#include "loadgen_openai.h"
#include "loadgen_opts.h"
#include "loadgen_sse.h"
#include "loadgen_workload.h"

#include "moonlet/alloc.h"

#include "moon_test.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

typedef struct {
    char events[16][256];
    int  n;
    int  stop_at; /* stop after this many events (0: never) */
} got_t;

static int collect(void *arg, const char *data, size_t len)
{
    got_t *g = arg;

    CU_ASSERT_EQUAL(strlen(data), len); /* NUL-terminated */
    if (g->n < 16) {
        snprintf(g->events[g->n], sizeof(g->events[0]), "%s", data);
    }
    g->n++;
    return g->stop_at != 0 && g->n >= g->stop_at;
}

/* A vLLM-style completions stream with the framing variants servers use. */
static const char stream[] =
    ": keep-alive comment\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"Once\",\"finish_reason\":null}]}\n\n"
    "event: message\r\n"
    "id: 7\r\n"
    "data: {\"choices\":[{\"index\":0,\r\n"
    "data: \"text\":\" upon\"}]}\r\n\r\n"
    "data:{\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\r\r"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
    "\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n"
    "data: [DONE]\n\n";

static const char *const expected[] = {
    "{\"choices\":[{\"index\":0,\"text\":\"Once\",\"finish_reason\":null}]}",
    "{\"choices\":[{\"index\":0,\n\"text\":\" upon\"}]}",
    "{\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}",
    "{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
    "\"prompt_tokens_details\":{\"cached_tokens\":4}}}",
    "[DONE]",
};

static void check_events(const got_t *g)
{
    CU_ASSERT_EQUAL_FATAL(g->n, 5);
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_STRING_EQUAL(g->events[i], expected[i]);
    }
}

static void test_whole_stream_in_one_read(void)
{
    moon_loadgen_sse_t sse;
    got_t              g = {0};

    moon_loadgen_sse_init(&sse, 0, collect, &g);
    CU_ASSERT_EQUAL(moon_loadgen_sse_feed(&sse, stream, strlen(stream)), MOON_OK);
    CU_ASSERT_EQUAL(moon_loadgen_sse_finish(&sse), MOON_OK);
    check_events(&g);
    moon_loadgen_sse_fini(&sse);
}

static void test_split_reads_anywhere(void)
{
    size_t   len  = strlen(stream);
    uint64_t seed = 5;

    /* byte by byte, then every split into two, then random splits */
    for (size_t step = 1; step <= 2; step++) {
        moon_loadgen_sse_t sse;
        got_t              g = {0};
        moon_loadgen_sse_init(&sse, 0, collect, &g);
        for (size_t i = 0; i < len; i += step) {
            size_t n = i + step <= len ? step : len - i;
            CU_ASSERT_EQUAL_FATAL(moon_loadgen_sse_feed(&sse, stream + i, n), MOON_OK);
        }
        CU_ASSERT_EQUAL(moon_loadgen_sse_finish(&sse), MOON_OK);
        check_events(&g);
        moon_loadgen_sse_fini(&sse);
    }
    for (size_t cut = 0; cut <= len; cut++) {
        moon_loadgen_sse_t sse;
        got_t              g = {0};
        moon_loadgen_sse_init(&sse, 0, collect, &g);
        CU_ASSERT_EQUAL(moon_loadgen_sse_feed(&sse, stream, cut), MOON_OK);
        CU_ASSERT_EQUAL(moon_loadgen_sse_feed(&sse, stream + cut, len - cut), MOON_OK);
        check_events(&g);
        moon_loadgen_sse_fini(&sse);
    }
    for (int round = 0; round < 200; round++) {
        moon_loadgen_sse_t sse;
        got_t              g = {0};
        moon_loadgen_sse_init(&sse, 0, collect, &g);
        for (size_t i = 0; i < len;) {
            size_t n = 1 + moon_test_rand(&seed) % 13;
            n        = n < len - i ? n : len - i;
            CU_ASSERT_EQUAL_FATAL(moon_loadgen_sse_feed(&sse, stream + i, n), MOON_OK);
            i += n;
        }
        check_events(&g);
        moon_loadgen_sse_fini(&sse);
    }
}

static void test_finish_flushes_an_unterminated_event(void)
{
    moon_loadgen_sse_t sse;
    got_t              g = {0};

    moon_loadgen_sse_init(&sse, 0, collect, &g);
    CU_ASSERT_EQUAL(moon_loadgen_sse_feed(&sse, "data: a\n\ndata: [DONE]", 21), MOON_OK);
    CU_ASSERT_EQUAL(g.n, 1);
    CU_ASSERT_EQUAL(moon_loadgen_sse_finish(&sse), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(g.n, 2);
    CU_ASSERT_STRING_EQUAL(g.events[1], "[DONE]");
    /* blank lines without data dispatch nothing */
    CU_ASSERT_EQUAL(moon_loadgen_sse_feed(&sse, "\n\n\r\n: x\n\n", 9), MOON_OK);
    CU_ASSERT_EQUAL(moon_loadgen_sse_finish(&sse), MOON_OK);
    CU_ASSERT_EQUAL(g.n, 2);
    moon_loadgen_sse_fini(&sse);
}

static void test_oversized_event_and_stop(void)
{
    moon_loadgen_sse_t sse;
    got_t              g = {0};
    char               big[300];

    memset(big, 'x', sizeof(big));
    moon_loadgen_sse_init(&sse, 100, collect, &g);
    CU_ASSERT_EQUAL(moon_loadgen_sse_feed(&sse, "data: ", 6), MOON_OK);
    CU_ASSERT_EQUAL(moon_loadgen_sse_feed(&sse, big, sizeof(big)), MOON_ERR_INVALID_PARAM);
    moon_loadgen_sse_fini(&sse);
    g.stop_at = 1;
    moon_loadgen_sse_init(&sse, 0, collect, &g);
    CU_ASSERT_EQUAL(moon_loadgen_sse_feed(&sse, stream, strlen(stream)), MOON_ERR_CANCELED);
    CU_ASSERT_EQUAL(g.n, 1);
    moon_loadgen_sse_fini(&sse);
}

static void test_completion_and_chat_chunks(void)
{
    moon_loadgen_chunk_t c;
    const char          *chat = "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
                                "\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}";
    const char *role_only     = "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}";
    const char *err =
        "{\"error\":{\"message\":\"prompt too long\",\"type\":\"invalid_request_error\"}}";

    CU_ASSERT_EQUAL(moon_loadgen_openai_chunk(expected[0], strlen(expected[0]), &c), MOON_OK);
    CU_ASSERT_TRUE(c.has_text);
    CU_ASSERT_EQUAL(c.text_len, 4);
    CU_ASSERT_FALSE(c.has_usage);
    CU_ASSERT_STRING_EQUAL(c.finish_reason, "");
    CU_ASSERT_EQUAL(moon_loadgen_openai_chunk(expected[2], strlen(expected[2]), &c), MOON_OK);
    CU_ASSERT_FALSE(c.has_text); /* empty text is no token */
    CU_ASSERT_STRING_EQUAL(c.finish_reason, "length");
    CU_ASSERT_EQUAL(moon_loadgen_openai_chunk(expected[3], strlen(expected[3]), &c), MOON_OK);
    CU_ASSERT_TRUE(c.has_usage);
    CU_ASSERT_EQUAL(c.prompt_tokens, 5);
    CU_ASSERT_EQUAL(c.completion_tokens, 2);
    CU_ASSERT_EQUAL(c.cached_tokens, 4);
    CU_ASSERT_EQUAL(moon_loadgen_openai_chunk("[DONE]", 6, &c), MOON_OK);
    CU_ASSERT_TRUE(c.done);
    CU_ASSERT_EQUAL(moon_loadgen_openai_chunk(chat, strlen(chat), &c), MOON_OK);
    CU_ASSERT_TRUE(c.has_text);
    CU_ASSERT_EQUAL(c.text_len, 2);
    CU_ASSERT_EQUAL(moon_loadgen_openai_chunk(role_only, strlen(role_only), &c), MOON_OK);
    CU_ASSERT_FALSE(c.has_text);
    CU_ASSERT_EQUAL(moon_loadgen_openai_chunk(err, strlen(err), &c), MOON_OK);
    CU_ASSERT_TRUE(c.has_error);
    CU_ASSERT_STRING_EQUAL(c.error, "prompt too long");
    CU_ASSERT_EQUAL(moon_loadgen_openai_chunk("{oops", 5, &c), MOON_ERR_CORRUPT);
    CU_ASSERT_EQUAL(moon_loadgen_openai_chunk("42", 2, &c), MOON_ERR_CORRUPT);
}

static void test_error_bodies_and_model_lists(void)
{
    char        text[64];
    char       *model = NULL;
    const char *list  = "{\"object\":\"list\",\"data\":[{\"id\":\"stories260K\"},{\"id\":\"b\"}]}";

    const char *eb = "{\"error\":{\"message\":\"bad key\"}}";

    moon_loadgen_openai_error_text(eb, strlen(eb), text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "bad key");
    moon_loadgen_openai_error_text("Not Found\n", 10, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "Not Found ");
    CU_ASSERT_EQUAL(moon_loadgen_openai_first_model(list, strlen(list), &model), MOON_OK);
    CU_ASSERT_STRING_EQUAL(model, "stories260K");
    moon_free(model);
    CU_ASSERT_EQUAL(moon_loadgen_openai_first_model("{\"data\":[]}", 11, &model),
                    MOON_ERR_NOT_FOUND);
    CU_ASSERT_EQUAL(moon_loadgen_openai_first_model("<html>", 6, &model), MOON_ERR_NOT_FOUND);
}

static cJSON *body_of(const char *endpoint, const char *workload)
{
    char *argv[] = {"bench",     (char *)workload, (char *)endpoint,   "--num-prompts=8",
                    "--turns=2", "--prefix-len=4", "--question-len=2", "--output-len=3"};
    moon_loadgen_opts_t      o;
    moon_loadgen_workload_t *wl   = NULL;
    char                    *body = NULL;
    char                     err[128];
    cJSON                   *json;

    CU_ASSERT_EQUAL_FATAL(moon_loadgen_opts_parse(8, argv, &o, err, sizeof(err)), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_workload_create(&o, &wl), MOON_OK);
    /* the last request: a second turn */
    CU_ASSERT_EQUAL_FATAL(moon_loadgen_openai_body(&o, "m", wl, &wl->reqs[7], &body), MOON_OK);
    json = cJSON_Parse(body);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    moon_free(body);
    moon_loadgen_workload_destroy(wl);
    return json;
}

static void test_completion_body_sends_token_ids(void)
{
    cJSON       *j      = body_of("--endpoint=completions", "shared-prefix");
    const cJSON *prompt = cJSON_GetObjectItem(j, "prompt");
    const cJSON *so     = cJSON_GetObjectItem(j, "stream_options");

    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "model")->valuestring, "m");
    CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(j, "stream")));
    CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(so, "include_usage")));
    CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(j, "ignore_eos")));
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "max_tokens")->valueint, 3);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "temperature")->valuedouble, 0);
    CU_ASSERT_TRUE_FATAL(cJSON_IsArray(prompt));
    CU_ASSERT_EQUAL(cJSON_GetArraySize(prompt), 4 + 2 + 3 + 2);
    CU_ASSERT(cJSON_GetArrayItem(prompt, 0)->valueint >= 3);
    cJSON_Delete(j);
}

static void test_chat_body_sends_roles(void)
{
    cJSON       *j       = body_of("--endpoint=chat", "shared-prefix");
    const cJSON *msgs    = cJSON_GetObjectItem(j, "messages");
    const char  *roles[] = {"system", "user", "assistant", "user"};

    CU_ASSERT_TRUE_FATAL(cJSON_IsArray(msgs));
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(msgs), 4);
    for (int i = 0; i < 4; i++) {
        const cJSON *m       = cJSON_GetArrayItem(msgs, i);
        const char  *content = cJSON_GetObjectItem(m, "content")->valuestring;
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(m, "role")->valuestring, roles[i]);
        CU_ASSERT(strlen(content) > 0);
    }
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(j, "prompt"));
    cJSON_Delete(j);
    j = body_of("--prompt-format=words", "random");
    CU_ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(j, "prompt")));
    cJSON_Delete(j);
}

MOON_TEST_MAIN("bench_sse", NULL, NULL, test_whole_stream_in_one_read, test_split_reads_anywhere,
               test_finish_flushes_an_unterminated_event, test_oversized_event_and_stop,
               test_completion_and_chat_chunks, test_error_bodies_and_model_lists,
               test_completion_body_sends_token_ids, test_chat_body_sends_roles)
