/* tests/unit/actors/test_weights_pace.c - a weight receiver's pace
 * (weights_pace.h): full speed while its instance is idle, one chunk at a
 * time with a rest of took * (1 - share) / share after each while it
 * serves (capped), the linger after the last request, and share 1 (never
 * paced). The rests' timers run in the multi-rank weight tests. */
#include "moon_test.h"
#include "weights_pace.h"

#define MS 1000000ull

static _Atomic uint64_t g_busy;

static void test_idle_full_speed(void)
{
    moon_weights_pace_t p;

    moon_weights_pace_init(&p, NULL, 0.125);
    CU_ASSERT_EQUAL(moon_weights_pace_window(&p, NULL, 1000 * MS, 16), 16);
    CU_ASSERT_EQUAL(moon_weights_pace_rest(&p, 1000 * MS, 5 * MS), 0);
    atomic_store(&g_busy, 0); /* never held a request */
    moon_weights_pace_init(&p, &g_busy, 0.125);
    CU_ASSERT_EQUAL(moon_weights_pace_window(&p, NULL, 1000 * MS, 16), 16);
    /* the last request is older than the linger */
    atomic_store(&g_busy, 1000 * MS - WEIGHTS_PACE_LINGER_NS);
    CU_ASSERT_EQUAL(moon_weights_pace_window(&p, NULL, 1000 * MS, 16), 16);
    moon_weights_pace_issued(&p, 1000 * MS);
    moon_weights_pace_done(&p, 1004 * MS);
    CU_ASSERT_EQUAL(p.rest_until, 0);
    CU_ASSERT_EQUAL(p.n_rests, 0);
}

static void test_busy_rests(void)
{
    moon_weights_pace_t p;

    atomic_store(&g_busy, 990 * MS); /* a request 10 ms ago */
    moon_weights_pace_init(&p, &g_busy, 0.125);
    CU_ASSERT_EQUAL(moon_weights_pace_window(&p, NULL, 1000 * MS, 16), 1);
    moon_weights_pace_issued(&p, 1000 * MS);
    moon_weights_pace_done(&p, 1002 * MS); /* 2 ms of copy and check: 14 ms of rest */
    CU_ASSERT_EQUAL(p.rest_until, 1016 * MS);
    CU_ASSERT_EQUAL(p.n_rests, 1);
    CU_ASSERT_EQUAL(p.rest_ns, 14 * MS);
    /* after the rest, one chunk again */
    CU_ASSERT_EQUAL(moon_weights_pace_window(&p, NULL, 1016 * MS, 16), 1);
    /* a long chunk's rest is capped */
    CU_ASSERT_EQUAL(moon_weights_pace_rest(&p, 1020 * MS, 1000 * MS), WEIGHTS_PACE_MAX_REST_NS);
    CU_ASSERT_EQUAL(p.n_rests, 2);
    moon_weights_pace_reset(&p);
    CU_ASSERT_EQUAL(p.n_rests, 0);
    CU_ASSERT_EQUAL(p.rest_ns, 0);
    CU_ASSERT_EQUAL(p.rest_until, 0);
    CU_ASSERT_PTR_EQUAL(p.busy_ns, &g_busy); /* kept for the next push */
}

static void test_share_one_never_paced(void)
{
    moon_weights_pace_t p;

    atomic_store(&g_busy, 999 * MS);
    moon_weights_pace_init(&p, &g_busy, 1);
    CU_ASSERT_EQUAL(moon_weights_pace_window(&p, NULL, 1000 * MS, 16), 16);
    CU_ASSERT_EQUAL(moon_weights_pace_rest(&p, 1000 * MS, 5 * MS), 0);
    moon_weights_pace_init(&p, &g_busy, 0.5); /* half: rest = took */
    CU_ASSERT_EQUAL(moon_weights_pace_rest(&p, 1000 * MS, 5 * MS), 5 * MS);
}

int main(void)
{
    return MOON_TEST_RUN("weights_pace", NULL, NULL, test_idle_full_speed, test_busy_rests,
                         test_share_one_never_paced);
}
