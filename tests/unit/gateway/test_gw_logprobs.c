/* tests/unit/gateway/test_gw_logprobs.c - a choice's logprobs object, token
 * by token: completions' four lists and text offsets, chat's entries with
 * bytes and alternatives, a stream's take emptying it, -inf made finite. */
#include "gw_logprobs.h"
#include "moon_test.h"
#include "moonlet/gguf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef MOON_TEST_MODEL
#error "MOON_TEST_MODEL must name stories260K.gguf"
#endif

static moon_tokenizer_t *g_tok;

static uint32_t bits(float v)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    return b;
}

static void test_completions(void)
{
    moon_gw_logprobs_t lp;
    uint32_t           top[4] = {403, bits(-0.5f), 407, bits(-1.5f)};
    char              *s;
    cJSON             *j;

    moon_gw_logprobs_init(&lp, 0, g_tok, 1);
    CU_ASSERT_PTR_NULL(moon_gw_logprobs_take(&lp)); /* nothing yet */
    CU_ASSERT_EQUAL(moon_gw_logprobs_add(&lp, 403, -0.5f, top, 2), MOON_OK);
    CU_ASSERT_EQUAL(moon_gw_logprobs_add(&lp, 407, -INFINITY, NULL, 0), MOON_OK);
    s = moon_gw_logprobs_take(&lp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    j = cJSON_Parse(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    /* after BOS the leading space goes: "Once", then " upon" at offset 4 */
    CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tokens"), 0)->valuestring,
                           "Once");
    CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tokens"), 1)->valuestring,
                           " upon");
    CU_ASSERT_EQUAL(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "text_offset"), 1)->valueint, 4);
    CU_ASSERT_DOUBLE_EQUAL(
        cJSON_GetArrayItem(cJSON_GetObjectItem(j, "token_logprobs"), 0)->valuedouble, -0.5, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(
        cJSON_GetArrayItem(cJSON_GetObjectItem(j, "token_logprobs"), 1)->valuedouble, -9999, 1e-6);
    CU_ASSERT_EQUAL(
        cJSON_GetArraySize(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "top_logprobs"), 0)), 2);
    CU_ASSERT_EQUAL(
        cJSON_GetArraySize(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "top_logprobs"), 1)), 0);
    cJSON_Delete(j);
    free(s);
    CU_ASSERT_PTR_NULL(moon_gw_logprobs_take(&lp)); /* taken: empty again */
    moon_gw_logprobs_fini(&lp);
}

static void test_chat(void)
{
    moon_gw_logprobs_t lp;
    uint32_t           top[2] = {261, bits(-0.25f)};
    char              *s;
    cJSON             *j, *e;

    moon_gw_logprobs_init(&lp, 1, g_tok, -1);
    CU_ASSERT_EQUAL(moon_gw_logprobs_add(&lp, 261, -0.25f, top, 1), MOON_OK);
    s = moon_gw_logprobs_take(&lp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    j = cJSON_Parse(s);
    e = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "content"), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(j, "refusal")));
    CU_ASSERT_DOUBLE_EQUAL(cJSON_GetObjectItem(e, "logprob")->valuedouble, -0.25, 1e-6);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(e, "bytes")),
                    (int)strlen(cJSON_GetObjectItem(e, "token")->valuestring));
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(e, "top_logprobs")), 1);
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "top_logprobs"), 0), "token")
            ->valuestring,
        cJSON_GetObjectItem(e, "token")->valuestring);
    cJSON_Delete(j);
    free(s);
    moon_gw_logprobs_fini(&lp);
}

int main(void)
{
    moon_gguf_t *gguf = NULL;
    int          rc;

    if (moon_gguf_open(MOON_TEST_MODEL, &gguf) != MOON_OK ||
        moon_tokenizer_create(gguf, &g_tok) != MOON_OK) {
        fprintf(stderr, "test_gw_logprobs: cannot load %s\n", MOON_TEST_MODEL);
        return 1;
    }
    moon_gguf_close(gguf);
    rc = MOON_TEST_RUN("gw_logprobs", NULL, NULL, test_completions, test_chat);
    moon_tokenizer_destroy(g_tok);
    return rc;
}
