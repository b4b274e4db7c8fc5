/* tests/support/moon_test_script.c - see moon_test_script.h. */
#include "moon_test_script.h"

#include "moon_test.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/moonlet.h"
#include "moonlet/serve_msgs.h"

#define MS 1000000ull

int moon_test_script_setup(const char *path, moon_model_t **model)
{
    moon_log_set_level(MOON_LOG_WARN);
    return moon_serve_msgs_register() == MOON_OK &&
                   moon_msg_register(moon_dist_msg_descs) == MOON_OK &&
                   moon_model_load(path, model) == MOON_OK
               ? 0
               : -1;
}

int moon_test_script_run(const moon_actor_ops_t *peer, const moon_actor_ops_t *instance_ops,
                         moon_serve_instance_args_t *args, int threaded, moon_trace_fn trace,
                         moon_addr_t *instance)
{
    moon_runtime_config_t cfg;
    moon_runtime_t       *rt = NULL;
    moon_addr_t           peer_addr;
    int                   rc;

    moon_runtime_config_default(&cfg);
    cfg.deterministic = !threaded;
    cfg.sim_max_ns    = 2000 * MS;
    cfg.n_workers     = 1;
    cfg.trace         = trace;
    CU_ASSERT_EQUAL_FATAL(moon_runtime_create(&cfg, &rt), MOON_OK);
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, peer, NULL, NULL, &peer_addr), MOON_OK);
    args->conductor = peer_addr;
    CU_ASSERT_EQUAL_FATAL(moon_spawn(rt, instance_ops, args, NULL, instance), MOON_OK);
    moon_log_set_level(MOON_LOG_ERROR); /* the error paths' warnings */
    rc = moon_runtime_run(rt);
    moon_log_set_level(MOON_LOG_WARN);
    moon_runtime_destroy(rt);
    return rc;
}

int moon_test_script_report(const moon_msg_hdr_t *msg, uint32_t *n_hello)
{
    switch (msg->type) {
    case MOON_MSG_SERVE_HELLO:
        (*n_hello)++;
        return 1;
    case MOON_MSG_SERVE_LOAD:
    case MOON_MSG_SERVE_CACHE_EVENTS:
        return 1;
    default:
        return 0;
    }
}
