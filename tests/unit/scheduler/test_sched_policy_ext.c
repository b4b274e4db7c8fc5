/* tests/unit/scheduler/test_sched_policy_ext.c - policies of one's own
 * (moon_sched_policy_register): found by name and listed after the
 * built-in ones, their pick used with the frame's predictions and early
 * rejection, a bad pick placed as least-loaded, bad registrations refused. */
#include "sched_test_util.h"

#include <string.h>

typedef struct {
    int32_t       prefill, decode;
    moon_status_t status;
    uint32_t      n_calls;
    uint64_t      last_affinity;
} pick_arg_t;

static moon_status_t fixed_pick(void *arg, const moon_sched_view_t *view,
                                const moon_sched_request_t *req, moon_sched_pick_t *pick_p)
{
    pick_arg_t *a = arg;

    (void)view;
    a->n_calls++;
    a->last_affinity = req->affinity;
    pick_p->prefill  = a->prefill;
    pick_p->decode   = a->decode;
    return a->status;
}

static pick_arg_t g_arg;

static void test_registered_policy_is_found_and_listed(void)
{
    moon_sched_policy_def_t def = {
        .name = "fixed", .doc = "the test's", .pick = fixed_pick, .arg = &g_arg};
    int                  listed = 0;
    moon_sched_policy_t *p      = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_sched_policy_register(&def), MOON_OK);
    for (uint32_t i = 0; moon_sched_policy_name_at(i) != NULL; i++) {
        listed += strcmp(moon_sched_policy_name_at(i), "fixed") == 0 &&
                  strcmp(moon_sched_policy_doc_at(i), "the test's") == 0;
    }
    CU_ASSERT_EQUAL(listed, 1);
    CU_ASSERT_EQUAL(moon_sched_policy_create("fixed+reject", NULL, &p), MOON_OK);
    CU_ASSERT_STRING_EQUAL(moon_sched_policy_name(p), "fixed");
    CU_ASSERT_EQUAL(moon_sched_policy_early_reject(p), 1);
    moon_sched_policy_destroy(p);
}

static void test_pick_is_used_with_predictions(void)
{
    moon_sched_view_t     view;
    uint32_t              local[4] = {0, 2, 0, 0};
    moon_sched_request_t  req      = sched_test_request(4, local);
    moon_sched_policy_t  *p        = sched_test_policy("fixed");
    moon_sched_decision_t d;

    sched_test_view(&view, 2, 2);
    req.store_blocks = 3;
    req.affinity     = 77;
    g_arg            = (pick_arg_t){.prefill = 1, .decode = 3, .status = MOON_OK};
    CU_ASSERT_EQUAL_FATAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_OK);
    CU_ASSERT_EQUAL(g_arg.n_calls, 1);
    CU_ASSERT_EQUAL(g_arg.last_affinity, 77);
    CU_ASSERT_EQUAL(d.prefill, 1);
    CU_ASSERT_EQUAL(d.decode, 3);
    CU_ASSERT_EQUAL(d.local_blocks, 2); /* its own cache, then the store's third block */
    CU_ASSERT_EQUAL(d.fetch_blocks, 1);
    CU_ASSERT(d.ttft_s > 0.0);
    CU_ASSERT_EQUAL(d.rejected, MOON_SCHED_ADMIT);
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_bad_pick_places_as_least_loaded(void)
{
    moon_sched_view_t     view;
    moon_sched_request_t  req = sched_test_request(2, NULL);
    moon_sched_policy_t  *p   = sched_test_policy("fixed");
    moon_sched_decision_t d;

    sched_test_view(&view, 2, 2);
    view.inst[0].alive = 0;
    /* a dead instance, a decode index as prefill, an error: all placed anyway */
    pick_arg_t bad[] = {{.prefill = 0, .decode = 2},
                        {.prefill = 2, .decode = 3},
                        {.prefill = 1, .decode = 2, .status = MOON_ERR_NO_RESOURCE},
                        {.prefill = 9, .decode = -1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        g_arg = bad[i];
        CU_ASSERT_EQUAL_FATAL(moon_sched_policy_decide(p, &view, &req, &d), MOON_OK);
        CU_ASSERT_EQUAL(d.prefill, 1); /* the one alive prefill instance */
        CU_ASSERT(d.decode == 2 || d.decode == 3);
    }
    moon_sched_policy_destroy(p);
    moon_sched_view_fini(&view);
}

static void test_bad_registrations_are_refused(void)
{
    moon_sched_policy_def_t def = {.name = "fixed", .pick = fixed_pick};

    CU_ASSERT_EQUAL(moon_sched_policy_register(&def), MOON_ERR_EXISTS);
    def.name = "moonlet";
    CU_ASSERT_EQUAL(moon_sched_policy_register(&def), MOON_ERR_EXISTS);
    def.name = "Bad Name";
    CU_ASSERT_EQUAL(moon_sched_policy_register(&def), MOON_ERR_INVALID_PARAM);
    def.name = "nopick";
    def.pick = NULL;
    CU_ASSERT_EQUAL(moon_sched_policy_register(&def), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sched_policy_register(NULL), MOON_ERR_INVALID_PARAM);
}

MOON_TEST_MAIN("sched_policy_ext", NULL, NULL, test_registered_policy_is_found_and_listed,
               test_pick_is_used_with_predictions, test_bad_pick_places_as_least_loaded,
               test_bad_registrations_are_refused)
