/* tests/unit/gateway/test_gw_format.c - OpenAI bodies, SSE chunks and error
 * objects, byte for byte against OpenAI's format. */
#include "gw_errors.h"
#include "gw_format.h"
#include "moon_test.h"
#include "moonlet/alloc.h"
#include "moonlet/serve_msgs.h"

#include <string.h>

static const moon_gw_resp_meta_t cmpl = {
    .id = "cmpl-7", .model = "m", .fingerprint = "fp_1", .created = 1700000000, .chat = 0};
static const moon_gw_resp_meta_t chat = {
    .id = "chatcmpl-7", .model = "m", .fingerprint = "fp_1", .created = 1700000000, .chat = 1};
static const moon_gw_usage_t usage = {
    .prompt_tokens = 5, .completion_tokens = 3, .cached_tokens = 2, .weight_version = 4};

#define USAGE                                                                                      \
    "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8,"                   \
    "\"prompt_tokens_details\":{\"cached_tokens\":2},\"moonlet\":{\"weight_version\":4}}"
#define CMPL_HEAD                                                                                  \
    "\"id\":\"cmpl-7\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"m\","     \
    "\"system_fingerprint\":\"fp_1\""
#define CHUNK_HEAD                                                                                 \
    "\"id\":\"chatcmpl-7\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"           \
    "\"model\":\"m\",\"system_fingerprint\":\"fp_1\""

/* len_p is read here, after the call that wrote it returned. */
static void check(char *got, const size_t *len_p, const char *want)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_STRING_EQUAL(got, want);
    CU_ASSERT_EQUAL(*len_p, strlen(want));
    moon_free(got);
}

static void test_completion_body(void)
{
    size_t len = 0;
    char  *got = moon_gw_format_response(&cmpl, "Once \"upon\"\n", "length", &usage, &len);

    check(got, &len,
          "{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"Once \\\"upon\\\"\\n\","
          "\"logprobs\":null,\"finish_reason\":\"length\"}]," USAGE "}");
}

static void test_chat_body(void)
{
    size_t len = 0;
    char  *got = moon_gw_format_response(&chat, "Hi", "stop", &usage, &len);

    check(got, &len,
          "{\"id\":\"chatcmpl-7\",\"object\":\"chat.completion\",\"created\":1700000000,"
          "\"model\":\"m\",\"system_fingerprint\":\"fp_1\",\"choices\":[{\"index\":0,"
          "\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"logprobs\":null,"
          "\"finish_reason\":\"stop\"}]," USAGE "}");
}

/* The moonlet_details extension, asked for: after OpenAI's fields. */
static void test_usage_details(void)
{
    moon_gw_usage_t u   = usage;
    size_t          len = 0;
    char           *got;

    u.details          = 1;
    u.prefill_instance = 1;
    u.decode_instance  = -1;
    u.queue_s          = 0.25;
    u.prefill_s        = 0.5;
    u.transfer_s       = 0;
    u.ttft_s           = 1;
    got                = moon_gw_format_response(&cmpl, "x", "stop", &u, &len);
    check(got, &len,
          "{" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"x\",\"logprobs\":null,"
          "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,"
          "\"total_tokens\":8,\"prompt_tokens_details\":{\"cached_tokens\":2},"
          "\"moonlet\":{\"weight_version\":4},\"moonlet_details\":{\"prefill_instance\":1,\"decode_"
          "instance\":-1,\"queue_s\":0.25,"
          "\"prefill_s\":0.5,\"transfer_s\":0,\"ttft_s\":1}}}");
}

static void test_completion_chunks(void)
{
    moon_gw_resp_meta_t m   = cmpl;
    size_t              len = 0;

    check(moon_gw_format_chunk(&m, 0, " a", NULL, &len), &len,
          "data: {" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\" a\",\"logprobs\":null,"
          "\"finish_reason\":null}]}\n\n");
    check(moon_gw_format_chunk(&m, 0, NULL, "stop", &len), &len,
          "data: {" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
          "\"finish_reason\":\"stop\"}]}\n\n");
    m.include_usage = 1;
    check(moon_gw_format_chunk(&m, 0, " a", NULL, &len), &len,
          "data: {" CMPL_HEAD ",\"choices\":[{\"index\":0,\"text\":\" a\",\"logprobs\":null,"
          "\"finish_reason\":null}],\"usage\":null}\n\n");
    check(moon_gw_format_usage_chunk(&m, &usage, &len), &len,
          "data: {" CMPL_HEAD ",\"choices\":[]," USAGE "}\n\n");
    CU_ASSERT_STRING_EQUAL(MOON_GW_SSE_DONE, "data: [DONE]\n\n");
}

static void test_chat_chunks(void)
{
    size_t len = 0;

    check(moon_gw_format_chunk(&chat, 1, NULL, NULL, &len), &len,
          "data: {" CHUNK_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
          "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    check(moon_gw_format_chunk(&chat, 0, "\xc3\xa9t\xc3\xa9", NULL, &len), &len,
          "data: {" CHUNK_HEAD ",\"choices\":[{\"index\":0,\"delta\":{\"content\":"
          "\"\xc3\xa9t\xc3\xa9\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    check(moon_gw_format_chunk(&chat, 0, NULL, "length", &len), &len,
          "data: {" CHUNK_HEAD ",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
          "\"finish_reason\":\"length\"}]}\n\n");
}

static void test_models(void)
{
    size_t len = 0;

    check(moon_gw_format_models("stories260K", 1700000000, 512, -1, 1, &len), &len,
          "{\"object\":\"list\",\"data\":[{\"id\":\"stories260K\",\"object\":\"model\","
          "\"created\":1700000000,\"owned_by\":\"moonlet\",\"max_model_len\":512}]}");
    check(moon_gw_format_models("stories260K", 1700000000, 512, 3, 1, &len), &len,
          "{\"object\":\"list\",\"data\":[{\"id\":\"stories260K\",\"object\":\"model\","
          "\"created\":1700000000,\"owned_by\":\"moonlet\",\"max_model_len\":512,"
          "\"moonlet\":{\"weight_version\":3}}]}");
    check(moon_gw_format_models("stories260K", 1700000000, 0, -1, 0, &len), &len,
          "{\"id\":\"stories260K\",\"object\":\"model\",\"created\":1700000000,"
          "\"owned_by\":\"moonlet\"}");
}

static void test_error_objects(void)
{
    moon_gw_error_t err;
    size_t          len = 0;
    char           *json;

    moon_gw_error_set(&err, 400, NULL, "max_tokens", "'%s' must be >= %d", "max_tokens", 1);
    json = moon_gw_error_json(&err);
    len  = strlen(json);
    check(json, &len,
          "{\"error\":{\"message\":\"'max_tokens' must be >= 1\",\"type\":"
          "\"invalid_request_error\",\"param\":\"max_tokens\",\"code\":null}}");
    moon_gw_error_set(&err, 401, NULL, NULL, "no key");
    json = moon_gw_error_json(&err);
    len  = strlen(json);
    check(json, &len,
          "{\"error\":{\"message\":\"no key\",\"type\":\"invalid_request_error\",\"param\":null,"
          "\"code\":\"invalid_api_key\"}}");
    moon_gw_error_set(&err, 503, NULL, NULL, "down");
    check(moon_gw_format_error_event(&err, &len), &len,
          "data: {\"error\":{\"message\":\"down\",\"type\":\"server_error\",\"param\":null,"
          "\"code\":\"service_unavailable\"}}\n\n");
    moon_gw_error_set(&err, 429, NULL, NULL, "slow down");
    CU_ASSERT_EQUAL(err.retry_after_s, 1);
    CU_ASSERT_STRING_EQUAL(err.type, "rate_limit_error");
}

static void test_done_to_http(void)
{
    moon_gw_error_t err;

    CU_ASSERT_EQUAL(moon_gw_error_from_done(MOON_FINISH_STOP, MOON_OK, "", &err), 0);
    CU_ASSERT_EQUAL(moon_gw_error_from_done(MOON_FINISH_LENGTH, MOON_OK, "", &err), 0);
    CU_ASSERT_EQUAL(moon_gw_error_from_done(MOON_FINISH_REJECTED, MOON_OK, "slo", &err), 1);
    CU_ASSERT_EQUAL(err.http, 429);
    CU_ASSERT_EQUAL(
        moon_gw_error_from_done(MOON_FINISH_ERROR, MOON_ERR_INVALID_PARAM, "too long", &err), 1);
    CU_ASSERT_EQUAL(err.http, 400);
    CU_ASSERT_STRING_EQUAL(err.message, "too long");
    CU_ASSERT_EQUAL(moon_gw_error_from_done(MOON_FINISH_ERROR, MOON_ERR_PEER_LOST, NULL, &err), 1);
    CU_ASSERT_EQUAL(err.http, 503);
    CU_ASSERT_EQUAL(moon_gw_error_from_done(MOON_FINISH_ERROR, MOON_ERR_IO, NULL, &err), 1);
    CU_ASSERT_EQUAL(err.http, 500);
}

MOON_TEST_MAIN("gw_format", NULL, NULL, test_completion_body, test_chat_body, test_usage_details,
               test_completion_chunks, test_chat_chunks, test_models, test_error_objects,
               test_done_to_http)
