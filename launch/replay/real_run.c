/* launch/replay/real_run.c - a replay against a real serving cluster in this
 * process: moon_serve_cluster_start on a threaded runtime (the CPU engine on
 * a GGUF, one store shard), the replay driver submitting at the trace's
 * times on the wall clock, placements watched as in the simulator. The main
 * thread waits for the driver's last request, then stops the cluster. */
#include "replay_watch.h"
#include "moonlet/serve_cluster.h"
#include "sim_driver.h"
#include "sim_run.h"

#include "moonlet/log.h"
#include "moonlet/model.h"
#include "moonlet/runtime.h"

#include <string.h>
#include <time.h>

#define REAL_START_NS 200000000ull /* the instances' HELLO and LOAD are in by then */

moon_status_t moon_replay_real_run(const moon_sim_run_config_t *cfg, moon_sim_records_t *recs)
{
    moon_serve_config_t    sc;
    moon_runtime_config_t  rc;
    moon_runtime_t        *rt      = NULL;
    moon_serve_cluster_t  *cluster = NULL;
    moon_replay_watch_t    watch;
    moon_sim_driver_args_t da;
    moon_addr_t            driver;
    _Atomic int            done = 0;
    char                   policy[96];
    moon_status_t          status;

    if (cfg == NULL || recs == NULL || cfg->trace == NULL || cfg->model_path == NULL ||
        recs->n != cfg->trace->n_reqs || !(cfg->time_scale > 0.0) ||
        (cfg->policy != NULL && strlen(cfg->policy) > 64)) {
        MOON_ERROR("replay: bad configuration for a real cluster (a model, records, a time "
                   "scale > 0)");
        return MOON_ERR_INVALID_PARAM;
    }
    moon_replay_watch_init(&watch, recs);
    moon_serve_config_default(&sc);
    snprintf(policy, sizeof(policy), "%s%s", cfg->policy ? cfg->policy : "moonlet",
             cfg->policy && strchr(cfg->policy, '+') ? "" : "+noreject");
    sc.model_path   = cfg->model_path;
    sc.n_prefill    = cfg->nodes_prefill;
    sc.n_decode     = cfg->nodes_decode;
    sc.colocated    = cfg->colocated;
    sc.block_tokens = cfg->block_tokens;
    sc.threads      = cfg->threads ? cfg->threads : 1;
    sc.backend      = (moon_backend_kind_t)cfg->backend;
    if (sc.backend == MOON_BACKEND_COST && cfg->profile != NULL) {
        sc.cost = moon_profile_cost(cfg->profile);
    }
    sc.policy      = policy;
    sc.ttft_slo_ms = cfg->ttft_slo_s * 1e3;
    sc.tbt_slo_ms  = cfg->tbt_slo_s * 1e3;
    sc.shed_after  = cfg->shed_after;
    sc.shed_share  = cfg->shed_share;
    sc.seed        = cfg->seed;
    moon_runtime_config_default(&rc);
    rc.n_workers = cfg->workers ? cfg->workers : 1;
    rc.trace     = moon_replay_watch_hook;
    rc.trace_arg = &watch;
    status       = moon_runtime_create(&rc, &rt);
    if (status == MOON_OK) {
        status = moon_runtime_start(rt);
    }
    if (status == MOON_OK) {
        status = moon_serve_cluster_start(&sc, rt, NULL, &cluster);
    }
    if (status == MOON_OK) {
        const moon_model_config_t *mc = moon_model_config(moon_serve_cluster_model(cluster));

        da     = (moon_sim_driver_args_t){.trace          = cfg->trace,
                                          .time_scale     = cfg->time_scale,
                                          .conductor      = moon_serve_cluster_conductor(cluster),
                                          .first_token_id = 3,
                                          .vocab_size     = mc->vocab_size,
                                          .seed           = cfg->seed,
                                          .recs           = recs,
                                          .progress       = cfg->progress,
                                          .start_ns       = REAL_START_NS,
                                          .done           = &done};
        status = moon_spawn(rt, &moon_sim_driver_ops, &da, NULL, &driver);
    }
    while (status == MOON_OK && !atomic_load(&done)) { /* acquire: pairs with the driver's store */
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    moon_serve_cluster_stop(cluster);
    if (rt != NULL) {
        moon_runtime_shutdown(rt, 0);
        moon_runtime_wait(rt);
    }
    moon_runtime_destroy(rt);
    moon_replay_watch_fini(&watch);
    if (status != MOON_OK) {
        MOON_ERROR("replay: the real cluster did not run: %s", moon_status_str(status));
    }
    return status;
}
