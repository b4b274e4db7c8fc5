/* tests/e2e/plugins/test_plugin_gate.c - the conductor's gate with a filter
 * that never answers (the probe plugin, filter=silent,fail=closed, a 300 ms
 * deadline), in one process: a request is refused 503 at the deadline with
 * the reason; a request cancelled while it waits ends CANCELLED at once (no
 * refusal after), and the next request is still decided. */
#include "moonlet/plugin.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"

#include "moon_test.h"

#include <string.h>

#define WAIT_NS 30000000000ull

static moon_runtime_t       *g_rt;
static moon_serve_cluster_t *g_cluster;
static moon_serve_client_t  *g_client;

static int setup(void)
{
    moon_runtime_config_t rc;
    moon_serve_config_t   sc;

    moon_serve_config_default(&sc);
    sc.model_path = MOON_TEST_MODEL;
    moon_runtime_config_default(&rc);
    rc.n_workers = 2;
    if (moon_plugin_load(MOON_TEST_PROBE ":filter=silent,fail=closed") != MOON_OK ||
        moon_runtime_create(&rc, &g_rt) != MOON_OK || moon_runtime_start(g_rt) != MOON_OK ||
        moon_serve_cluster_start(&sc, g_rt, NULL, &g_cluster) != MOON_OK ||
        moon_plugin_start(g_rt, NULL, NULL) != MOON_OK) {
        return 1;
    }
    return moon_serve_client_create(
               g_rt,
               &(moon_serve_client_config_t){.conductor = moon_serve_cluster_conductor(g_cluster)},
               &g_client) != MOON_OK;
}

static int teardown(void)
{
    moon_serve_client_destroy(g_client);
    moon_plugin_stop();
    moon_serve_cluster_stop(g_cluster);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_runtime_destroy(g_rt);
    moon_plugin_unload();
    return 0;
}

/* Submits; returns the DONE's finish (its http status in *http_p), cancelling
 * first when cancel. */
static uint32_t run_one(int cancel, uint32_t *http_p, char *why, size_t cap)
{
    moon_serve_params_t p;
    moon_serve_event_t  ev;
    uint64_t            id     = 0;
    uint32_t            finish = UINT32_MAX;

    moon_serve_params_default(&p);
    p.prompt     = "Once upon a time";
    p.max_tokens = 4;
    p.key        = "tenant";
    CU_ASSERT_EQUAL_FATAL(moon_serve_client_submit(g_client, &p, &id), MOON_OK);
    if (cancel) {
        CU_ASSERT_EQUAL(moon_serve_client_cancel(g_client, id), MOON_OK);
    }
    while (moon_serve_client_next(g_client, WAIT_NS, &ev) == MOON_OK) {
        int done = ev.kind == MOON_SERVE_EV_DONE && ev.request_id == id;
        if (done) {
            finish  = ev.finish;
            *http_p = ev.http_status;
            snprintf(why, cap, "%s", ev.message);
        }
        moon_serve_event_fini(&ev);
        if (done) {
            break;
        }
    }
    return finish;
}

static void test_silent_filter_fails_closed_at_its_deadline(void)
{
    uint32_t http = 0;
    char     why[256];

    CU_ASSERT_EQUAL(run_one(0, &http, why, sizeof(why)), MOON_FINISH_REJECTED);
    CU_ASSERT_EQUAL(http, 503);
    CU_ASSERT_STRING_EQUAL(why, "a request filter did not answer in time");
}

static void test_cancel_while_filtering_ends_it_at_once(void)
{
    uint32_t http = 0;
    char     why[256];

    CU_ASSERT_EQUAL(run_one(1, &http, why, sizeof(why)), MOON_FINISH_CANCELLED);
    CU_ASSERT_EQUAL(http, 0);
    CU_ASSERT_STRING_EQUAL(why, "cancelled while request filters decided");
    /* the slot was freed and its timer cancelled: the next one is decided */
    CU_ASSERT_EQUAL(run_one(0, &http, why, sizeof(why)), MOON_FINISH_REJECTED);
    CU_ASSERT_EQUAL(http, 503);
}

MOON_TEST_MAIN("plugin_gate", setup, teardown, test_silent_filter_fails_closed_at_its_deadline,
               test_cancel_while_filtering_ends_it_at_once)
