/* tests/unit/model/test_sampler.c - greedy, temperature, top-k and top-p
 * sampling: determinism under a seed and the support of each mode. */
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

MOON_TEST_MAIN("sampler", NULL, NULL, test_greedy, test_seeded_is_deterministic,
               test_top_k_and_top_p_restrict_support)
