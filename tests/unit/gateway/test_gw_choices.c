/* tests/unit/gateway/test_gw_choices.c - the choices of one request: seeds
 * per choice, best_of's ranking, the usage of several prompts, one body of
 * several choices, echo's text. */
#include "gw_choices.h"
#include "moon_test.h"
#include "moonlet/alloc.h"

#include <cjson/cJSON.h>

#include <string.h>

static void test_seeds(void)
{
    CU_ASSERT_EQUAL(moon_serve_choice_seed(42, 0), 42); /* n = 1 as before */
    CU_ASSERT_EQUAL(moon_serve_choice_seed(42, 3), moon_serve_choice_seed(42, 3));
    CU_ASSERT_NOT_EQUAL(moon_serve_choice_seed(42, 1), moon_serve_choice_seed(42, 2));
    CU_ASSERT_NOT_EQUAL(moon_serve_choice_seed(42, 1), moon_serve_choice_seed(43, 1));
    CU_ASSERT_NOT_EQUAL(moon_serve_choice_seed(42, 1), 43);
}

static void test_rank_and_usage(void)
{
    moon_gw_choice_t ch[6];
    uint32_t         order[3];
    moon_gw_usage_t  u;

    memset(ch, 0, sizeof(ch));
    ch[0].sum_lp = -5;
    ch[1].sum_lp = -1;
    ch[2].sum_lp = -3;
    ch[3].sum_lp = -1; /* a tie with 1: the lower index first */
    moon_gw_choices_rank(ch, 4, 3, order);
    CU_ASSERT_EQUAL(order[0], 1);
    CU_ASSERT_EQUAL(order[1], 3);
    CU_ASSERT_EQUAL(order[2], 2);
    /* two prompts of three choices: each prompt once, every completion */
    for (int i = 0; i < 6; i++) {
        ch[i].u.prompt_tokens     = i < 3 ? 10 : 7;
        ch[i].u.cached_tokens     = i < 3 ? 0 : 4;
        ch[i].u.completion_tokens = (uint32_t)i + 1;
    }
    moon_gw_choices_usage(ch, 6, 3, &u);
    CU_ASSERT_EQUAL(u.prompt_tokens, 17);
    CU_ASSERT_EQUAL(u.cached_tokens, 4);
    CU_ASSERT_EQUAL(u.completion_tokens, 21);
}

static void test_merge(void)
{
    char *bodies[3] = {
        moon_strdup("{\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"a\"}],\"usage\":{}}"),
        moon_strdup("{\"id\":\"x\",\"choices\":[{\"index\":1,\"text\":\"b\"}],\"usage\":{}}"),
        moon_strdup("{\"id\":\"x\",\"choices\":[{\"index\":2,\"text\":\"c\"}],\"usage\":{}}"),
    };
    size_t len = 0;
    char  *out = moon_gw_choices_merge(bodies, 3, &len);
    cJSON *j   = out != NULL ? cJSON_Parse(out) : NULL;
    cJSON *c   = cJSON_GetObjectItem(j, "choices");

    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(c), 3);
    CU_ASSERT_EQUAL(strlen(out), len);
    for (int i = 0; i < 3; i++) {
        char want[2] = {(char)('a' + i), 0};
        CU_ASSERT_EQUAL(cJSON_GetArrayItem(c, i)->child->valueint, i);
        CU_ASSERT_STRING_EQUAL(
            cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(c, i), "text")), want);
    }
    cJSON_Delete(j);
    moon_free(out);
    moon_free(bodies[1]);
    bodies[1] = moon_strdup("not json");
    CU_ASSERT_PTR_NULL(moon_gw_choices_merge(bodies, 3, &len));
    for (int i = 0; i < 3; i++) {
        moon_free(bodies[i]);
    }
}

static void test_echo_text(void)
{
    moon_gw_request_t req;
    int32_t           ids[2] = {1, 2};
    char             *t;

    memset(&req, 0, sizeof(req));
    req.prompt = "Once";
    t          = moon_gw_echo_text(&req, NULL);
    CU_ASSERT_STRING_EQUAL(t, "Once");
    moon_free(t);
    req.prompt   = NULL;
    req.tokens   = ids;
    req.n_tokens = 2;
    t            = moon_gw_echo_text(&req, NULL); /* no tokenizer: nothing to decode with */
    CU_ASSERT_STRING_EQUAL(t, "");
    moon_free(t);
}

MOON_TEST_MAIN("gw_choices", NULL, NULL, test_seeds, test_rank_and_usage, test_merge,
               test_echo_text)
