/* tests/unit/model/test_sampler.c - greedy, temperature, top-k and top-p
 * sampling: determinism under a seed and the support of each mode; the
 * logit controls (penalties, bias, min_tokens, min_p) and their ranges. */
#include "moon_test.h"
#include "moonlet/model.h"

#include <string.h>

#define V 8

static const float base[V] = {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f, -5.0f, 0.5f};

static int32_t draw(moon_sampler_t *s)
{
    float l[V];
    memcpy(l, base, sizeof(l));
    return moon_sampler_sample(s, l);
}

static void test_greedy(void)
{
    moon_sampler_t s;
    CU_ASSERT_EQUAL_FATAL(moon_sampler_init(&s, V, 0.0f, 1.0f, 0, 1), MOON_OK);
    for (int i = 0; i < 10; i++) {
        CU_ASSERT_EQUAL(draw(&s), 1);
    }
    moon_sampler_fini(&s);
    CU_ASSERT_EQUAL(moon_argmax(base, V), 1);
}

static void test_seeded_is_deterministic(void)
{
    moon_sampler_t a, b;
    int            differs = 0;
    CU_ASSERT_EQUAL_FATAL(moon_sampler_init(&a, V, 1.0f, 1.0f, 0, 42), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_sampler_init(&b, V, 1.0f, 1.0f, 0, 42), MOON_OK);
    for (int i = 0; i < 200; i++) {
        int32_t x = draw(&a), y = draw(&b);
        CU_ASSERT_EQUAL(x, y);
        differs |= x != 1;
    }
    CU_ASSERT(differs); /* temperature 1 does not always pick the argmax */
    moon_sampler_fini(&a);
    moon_sampler_fini(&b);
}

static void test_top_k_and_top_p_restrict_support(void)
{
    moon_sampler_t s;
    int            seen[V] = {0};

    CU_ASSERT_EQUAL_FATAL(moon_sampler_init(&s, V, 2.0f, 1.0f, 3, 7), MOON_OK);
    for (int i = 0; i < 2000; i++) {
        seen[draw(&s)]++;
    }
    /* top-3: ids 1 (3.0), 5 (2.9), 2 (2.5) only */
    CU_ASSERT(seen[1] > 0 && seen[5] > 0 && seen[2] > 0);
    CU_ASSERT_EQUAL(seen[0] + seen[3] + seen[4] + seen[6] + seen[7], 0);
    moon_sampler_fini(&s);

    memset(seen, 0, sizeof(seen));
    CU_ASSERT_EQUAL_FATAL(moon_sampler_init(&s, V, 1.0f, 0.5f, 0, 9), MOON_OK);
    for (int i = 0; i < 2000; i++) {
        seen[draw(&s)]++;
    }
    /* p(1) ~ 0.36, p(5) ~ 0.33: the nucleus of mass 0.5 is {1, 5} */
    CU_ASSERT(seen[1] > 0 && seen[5] > 0);
    CU_ASSERT_EQUAL(seen[0] + seen[2] + seen[3] + seen[4] + seen[6] + seen[7], 0);
    moon_sampler_fini(&s);
    CU_ASSERT_EQUAL(moon_sampler_init(&s, V, -1.0f, 1.0f, 0, 1), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sampler_init(&s, V, 1.0f, 0.0f, 0, 1), MOON_ERR_INVALID_PARAM);
}

static void test_bias_and_penalties(void)
{
    moon_sampler_t     s;
    moon_sampler_ctl_t c        = {0};
    int32_t            ids[]    = {1, 6};
    float              b[]      = {-100.0f, 100.0f};
    int32_t            prompt[] = {2};

    CU_ASSERT_EQUAL_FATAL(moon_sampler_init(&s, V, 0.0f, 1.0f, 0, 1), MOON_OK);
    /* all off: no state, the plain path */
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_OK);
    CU_ASSERT_PTR_NULL(s.ctl);
    /* +100 forces id 6, -100 bans the argmax */
    c.bias_ids = ids;
    c.bias     = b;
    c.n_bias   = 2;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(draw(&s), 6);
    c.n_bias = 1;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(draw(&s), 5);
    /* presence: 1 (3.0) once generated drops below 5 (2.9) */
    memset(&c, 0, sizeof(c));
    c.presence_penalty = 0.5f;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(draw(&s), 1);
    moon_sampler_accept(&s, 1);
    CU_ASSERT_EQUAL(draw(&s), 5);
    /* frequency grows per occurrence: 2.9 - 0.1 k */
    memset(&c, 0, sizeof(c));
    c.frequency_penalty = 0.1f;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_OK);
    moon_sampler_accept(&s, 1);
    CU_ASSERT_EQUAL(draw(&s), 1); /* 2.9 vs 2.9: the lower id wins the tie */
    moon_sampler_accept(&s, 1);
    CU_ASSERT_EQUAL(draw(&s), 5);
    /* repetition 4: the prompt's 2 and the generated 1 and 5 fall below 0 (1.0) */
    memset(&c, 0, sizeof(c));
    c.repetition_penalty = 4.0f;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, prompt, 1), MOON_OK);
    moon_sampler_accept(&s, 1);
    moon_sampler_accept(&s, 5);
    CU_ASSERT_EQUAL(draw(&s), 0); /* 1.0 beats 3/4, 2.5/4, 2.9/4 */
    /* ranges */
    memset(&c, 0, sizeof(c));
    c.presence_penalty = 2.5f;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_ERR_INVALID_PARAM);
    c.presence_penalty = 0.0f;
    c.min_p            = 1.5f;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_ERR_INVALID_PARAM);
    c.min_p    = 0.0f;
    ids[0]     = V;
    c.bias_ids = ids;
    c.bias     = b;
    c.n_bias   = 1;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_ERR_INVALID_PARAM);
    moon_sampler_fini(&s);
}

static void test_min_tokens_and_min_p(void)
{
    moon_sampler_t     s;
    moon_sampler_ctl_t c       = {0};
    int32_t            ban     = 1;
    int                seen[V] = {0};

    CU_ASSERT_EQUAL_FATAL(moon_sampler_init(&s, V, 0.0f, 1.0f, 0, 1), MOON_OK);
    c.min_tokens = 2;
    c.ban_ids    = &ban;
    c.n_ban      = 1;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_OK);
    CU_ASSERT_EQUAL(draw(&s), 5);
    moon_sampler_accept(&s, 5);
    CU_ASSERT_EQUAL(draw(&s), 5);
    moon_sampler_accept(&s, 5);
    CU_ASSERT_EQUAL(draw(&s), 1); /* two accepted: no more mask */
    moon_sampler_fini(&s);
    /* min_p 0.8 at temperature 1: p(x) >= 0.8 p(1) keeps 1 (3.0) and 5 (2.9) only */
    CU_ASSERT_EQUAL_FATAL(moon_sampler_init(&s, V, 1.0f, 1.0f, 0, 5), MOON_OK);
    memset(&c, 0, sizeof(c));
    c.min_p = 0.8f;
    CU_ASSERT_EQUAL(moon_sampler_set_ctl(&s, &c, NULL, 0), MOON_OK);
    for (int i = 0; i < 2000; i++) {
        seen[draw(&s)]++;
    }
    CU_ASSERT(seen[1] > 0 && seen[5] > 0);
    CU_ASSERT_EQUAL(seen[0] + seen[2] + seen[3] + seen[4] + seen[6] + seen[7], 0);
    moon_sampler_fini(&s);
}

MOON_TEST_MAIN("sampler", NULL, NULL, test_greedy, test_seeded_is_deterministic,
               test_top_k_and_top_p_restrict_support, test_bias_and_penalties,
               test_min_tokens_and_min_p)
