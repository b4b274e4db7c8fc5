/* launch/cli/cmd_serve.c - `moonlet serve`: runs a serving cluster's actors on
 * this rank (every rank of an mpirun job runs it with the same flags; alone,
 * the whole cluster in one process) until SIGINT or SIGTERM, or for
 * --seconds. Rank 0 also runs the OpenAI-compatible gateway (--host,
 * --port); programs reach the conductor through the client API too (an
 * mpirun MPMD job's client ranks, see examples/serve_driver.c). */
#include "cli.h"
#include "commands.h"
#include "profile.h"

#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "gateway.h"
#include "serve_cluster.h"
#include "serve_instance.h"

#include <signal.h>
#include <stdio.h>
#include <time.h>

typedef struct {
    uint32_t    workers;
    uint64_t    seconds;
    int         gateway;
    const char *profile;
} serve_run_t;

#define SR(_f) MOON_CONFIG_AT(serve_run_t, _f)
static const moon_config_field_t run_fields[] = {
    {"workers", MOON_CONFIG_U32, SR(workers), "1", "actor worker threads per rank", 1, 1024, 0, 0,
     NULL},
    {"seconds", MOON_CONFIG_U64, SR(seconds), "0", "stop after this long (0: on a signal)", 0,
     UINT64_MAX, 0, 0, NULL},
    {"gateway", MOON_CONFIG_BOOL, SR(gateway), "1",
     "run the openai http gateway on rank 0 (--no-gateway: the client api only)", 0, 1, 0, 0, NULL},
    {"profile", MOON_CONFIG_STRING, SR(profile), NULL,
     "--backend cost: the hardware/model profile it models (a name in launch/sim/profiles or a "
     "file)",
     0, 0, 0, 0, NULL},
    MOON_CONFIG_END,
};
#undef SR
static const moon_config_table_t run_table = {"run", "the serving process", "MOON_SERVE_",
                                              run_fields};

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* The gateway on rank 0, its fingerprint the deployment's model id and
 * weight version. */
static moon_status_t
start_gateway(moon_runtime_t *rt, moon_dist_t *dist, const moon_serve_cluster_t *cluster,
              const moon_serve_config_t *scfg, const moon_gateway_config_t *gcfg,
              moon_weights_client_t *weights, moon_addr_t *gateway_p, uint16_t *port_p)
{
    moon_kv_tag_t       tag;
    char                fp[64];
    moon_gateway_args_t ga = {
        .conductor  = moon_serve_cluster_conductor(cluster),
        .model_path = scfg->model_path,
        .config     = *gcfg,
        .dist       = moon_dist_size(dist) > 1 ? dist : NULL,
        .wait_roles = scfg->colocated ? "colocated" : NULL,
        .port_p     = port_p,
        .weights    = weights,
    };
    moon_spawn_opts_t opts = {.name = "gateway"};

    if (moon_serve_model_tag(scfg->model_path, scfg->block_tokens, &tag) == MOON_OK) {
        /* the gateway appends each answer's weight version: "_v<version>" */
        snprintf(fp, sizeof(fp), "fp_%016llx", (unsigned long long)tag.model_id);
        ga.fingerprint = fp;
    }
    return moon_spawn(rt, &moon_gateway_ops, &ga, &opts, gateway_p);
}

int moon_cmd_serve(int argc, char **argv)
{
    moon_serve_config_t    scfg;
    serve_run_t            run;
    moon_dist_config_t     dcfg; /* --transport, --peer-timeout-ms... and MOON_* */
    moon_gateway_config_t  gcfg; /* --host, --port, --model-name, --api-key... */
    const moon_cli_table_t tables[] = {{&moon_serve_config_table, &scfg},
                                       {&run_table, &run},
                                       {&moon_gateway_config_table, &gcfg},
                                       {&moon_dist_config_table, &dcfg}};
    moon_addr_t            gateway  = MOON_ADDR_NONE;
    uint16_t               port     = 0;
    moon_config_t         *cfg      = NULL;
    moon_dist_t           *dist     = NULL;
    moon_runtime_t        *rt       = NULL;
    moon_serve_cluster_t  *cluster  = NULL;
    moon_runtime_config_t  rcfg;
    moon_status_t          up = MOON_OK; /* the gateway's start, agreed by every rank */
    int                    rc = 1;

    moon_weights_client_t *weights = NULL; /* the admin route's pushes */

    moon_serve_config_default(&scfg);
    if (moon_gateway_config_default(&gcfg) != MOON_OK) {
        return 2;
    }
    rc = moon_cli_parse("serve", "usage: [mpirun -np N] moonlet serve --model M.gguf [options]\n",
                        tables, MOON_ARRAY_SIZE(tables), 0, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    rc = 1;
    if (scfg.model_path == NULL) {
        rc = moon_cli_usage_error("serve", "--model is required");
        goto out;
    }
    if ((scfg.backend == MOON_BACKEND_COST) != (run.profile != NULL)) {
        rc = moon_cli_usage_error("serve", "%s",
                                  run.profile == NULL
                                      ? "--backend cost needs --profile NAME (the "
                                        "modeled hardware: launch/sim/profiles or a file)"
                                      : "--profile is for --backend cost");
        goto out;
    }
    if (run.profile != NULL) {
        moon_profile_t profile;
        if (moon_profile_load(run.profile, NULL, &profile, NULL) != MOON_OK) {
            fprintf(stderr, "moonlet serve: profile %s did not load (see the log above)\n",
                    run.profile);
            goto out;
        }
        scfg.cost = moon_profile_cost(&profile);
    }
    if (moon_dist_init(&argc, &argv, &dcfg, &dist) != MOON_OK) {
        goto out;
    }
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = run.workers;
    rcfg.rank      = moon_dist_rank(dist);
    if (moon_runtime_create(&rcfg, &rt) != MOON_OK ||
        (moon_dist_size(dist) > 1 && moon_dist_start(dist, rt) != MOON_OK) ||
        moon_runtime_start(rt) != MOON_OK) {
        fprintf(stderr, "moonlet serve: the runtime did not start\n");
        goto out;
    }
    if (moon_serve_cluster_start(&scfg, rt, moon_dist_size(dist) > 1 ? dist : NULL, &cluster) !=
        MOON_OK) {
        fprintf(stderr, "moonlet serve: the cluster did not start (see the log above)\n");
        goto out;
    }
    if (moon_dist_rank(dist) == 0 && run.gateway && gcfg.admin_key != NULL) {
        if (moon_serve_cluster_weights(cluster) == MOON_ADDR_NONE) {
            MOON_WARN("serve: --admin-key given but weight pushes need a cluster under mpirun: "
                      "the admin route is off");
        } else {
            up = moon_weights_client_create(rt, moon_serve_cluster_weights(cluster), &weights);
        }
    }
    if (moon_dist_rank(dist) == 0 && run.gateway && up == MOON_OK) {
        up = start_gateway(rt, dist, cluster, &scfg, &gcfg, weights, &gateway, &port);
        if (up != MOON_OK) {
            fprintf(stderr,
                    "moonlet serve: the gateway did not start on %s:%u (see the log above)\n",
                    gcfg.host, gcfg.port);
        }
    }
    /* every rank (a serve_driver's too) learns whether the gateway started:
     * without it the others would serve on until a signal */
    if (moon_dist_size(dist) > 1) {
        up = moon_dist_agree(dist, up);
    }
    if (up != MOON_OK) {
        goto out;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (moon_dist_rank(dist) == 0) {
        fprintf(stderr, "moonlet serve: %u prefill, %u decode, %u store on %u rank(s); serving",
                scfg.n_prefill, scfg.n_decode, scfg.n_store, moon_dist_size(dist));
        if (gateway != MOON_ADDR_NONE) {
            fprintf(stderr, " on http://%s:%u/v1", gcfg.host, port);
        }
        fprintf(stderr, "\n");
    }
    for (uint64_t ms = 0; !g_stop && (run.seconds == 0 || ms < run.seconds * 1000); ms += 10) {
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    rc = 0;
out:
    if (gateway != MOON_ADDR_NONE) {
        moon_stop(rt, gateway, MOON_OK); /* no new request while the cluster stops */
    }
    if (dist != NULL && rt != NULL && moon_dist_size(dist) > 1) {
        moon_dist_barrier(dist); /* every rank is done (clients first) */
    }
    moon_serve_cluster_stop(cluster);
    moon_weights_client_destroy(weights); /* after the gateway that used it */
    if (rt != NULL) {
        moon_runtime_shutdown(rt, 0);
        moon_runtime_wait(rt);
    }
    moon_dist_stop(dist);
    moon_runtime_destroy(rt);
    moon_dist_finalize(dist);
    moon_config_destroy(cfg);
    return rc;
}
