/* launch/cli/cmd_serve.c - `moonlet serve`: runs a serving cluster's actors on
 * this rank (every rank of an mpirun job runs it with the same flags; alone,
 * the whole cluster in one process) until SIGINT or SIGTERM, or for
 * --seconds. Rank 0 also runs the OpenAI-compatible gateway (--host,
 * --port); programs reach the conductor through the client API too (an
 * mpirun MPMD job's client ranks, see examples/serve_driver.c).
 *
 * Stopping: a signal (or --seconds) on rank 0 drains its gateway (new
 * requests get 503, those in flight finish, at most --drain-seconds), then
 * rank 0 tells every rank's control actor ("serve/ctl/<rank>") to stop. A
 * signal on another rank (mpirun forwards SIGTERM to all) waits for that
 * word, at most --drain-seconds plus a grace, so its instances finish the
 * requests rank 0 drains. No wait without a deadline: the closing barrier is
 * only taken with every rank alive and client ranks to wait for. */
#include "cli.h"
#include "cli_plugin.h"
#include "commands.h"
#include "profile.h"

#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "gateway.h"
#include "gw_batches.h"
#include "placement.h"
#include "plugin_host.h"
#include "moonlet/serve_cluster.h"
#include "serve_instance.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define SERVE_STOP_GRACE_MS 5000u /* a rank's wait for rank 0's word beyond the drain */

typedef struct {
    uint32_t    workers;
    uint64_t    seconds;
    int         gateway;
    const char *profile;
    uint32_t    drain_seconds;
    int         print_placement;
    double      start_time;
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
    {"drain-seconds", MOON_CONFIG_U32, SR(drain_seconds), "30",
     "on sigterm/sigint: seconds rank 0 lets requests in flight finish (new ones get 503) "
     "before every rank stops",
     0, 86400, 0, 0, NULL},
    {"print-placement", MOON_CONFIG_BOOL, SR(print_placement), "0",
     "print where each rank's actors and threads run (rank, host, cores, device)", 0, 1, 0, 0,
     NULL},
    {"start-time", MOON_CONFIG_DOUBLE, SR(start_time), "0",
     "the job's start, unix seconds (0: this process's start): the first token served is "
     "reported from it",
     0, 0, 0, 1e12, NULL},
    MOON_CONFIG_END,
};
#undef SR
static const moon_config_table_t run_table = {"run", "the serving process", "MOON_SERVE_",
                                              run_fields};

static volatile sig_atomic_t g_stop;
static atomic_int            g_stop_all;       /* rank 0's STOP arrived */
static atomic_int            g_drained;        /* the gateway drained (gateway.h drained_p) */
static _Atomic uint64_t      g_first_token_ns; /* the gateway's first token (moon_now) */

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* The control actor. On rank 0: another rank got a signal, which stops the
 * deployment as one on rank 0 does. Elsewhere: rank 0's STOP ends the wait. */
static moon_status_t ctl_on_stop(moon_actor_t *self, const moon_msg_hdr_t *msg)
{
    if (moon_addr_rank(moon_actor_addr(self)) == 0) {
        MOON_WARN("serve: rank %u got a signal: the deployment drains and stops",
                  ((const moon_serve_stop_t *)msg)->rank);
        g_stop = 1;
        return MOON_OK;
    }
    MOON_INFO("serve: rank 0 says stop (drained or after %u ms)",
              ((const moon_serve_stop_t *)msg)->drain_ms);
    atomic_store(&g_stop_all, 1);
    return MOON_OK;
}

/* A rank other than 0 got a signal: asks rank 0 to drain and stop all. */
static void ask_stop(moon_runtime_t *rt, moon_dist_t *dist)
{
    moon_addr_t        a;
    moon_serve_stop_t *m;

    if (moon_dist_whereis(dist, "serve/ctl/0", 100000000ull, &a) != MOON_OK ||
        (m = moon_msg_new(MOON_MSG_SERVE_STOP, 0)) == NULL) {
        return; /* rank 0 is gone or never had one: stop alone */
    }
    m->rank = moon_dist_rank(dist);
    if (moon_runtime_send(rt, a, &m->hdr) != MOON_OK) {
        moon_msg_release(&m->hdr);
    }
}

static const moon_actor_ops_t ctl_ops = {
    .name   = "serve_ctl",
    .on_msg = {[MOON_MSG_SERVE_STOP] = ctl_on_stop},
};

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ms(void)
{
    return clock_ns(CLOCK_MONOTONIC) / 1000000u;
}

/* The job's start on the monotonic clock (moon_now's): start_time (unix
 * seconds, a job script's start) or, when 0 or not yet come, now (this
 * process's start: the caller's first act). */
static uint64_t job_start_ns(double start_time)
{
    uint64_t mono = clock_ns(CLOCK_MONOTONIC), real = clock_ns(CLOCK_REALTIME);
    double   ago = start_time > 0.0 ? (double)real - start_time * 1e9 : 0.0;

    return ago > 0.0 && ago < (double)mono ? mono - (uint64_t)ago : mono;
}

/* Rank 0's start-up report, once: the first token served (a job's figure:
 * start-up, model load and the first request). */
static void report_first_token(uint64_t job_start, uint64_t cluster_ns, int *done)
{
    uint64_t t = atomic_load_explicit(&g_first_token_ns, memory_order_acquire);

    if (*done || t == 0) {
        return;
    }
    *done = 1;
    fprintf(stderr,
            "moonlet serve: first token served %.2f s after the job's start (the cluster, "
            "model load included, started in %.2f s)\n",
            t > job_start ? (double)(t - job_start) * 1e-9 : 0.0, (double)cluster_ns * 1e-9);
}

/* Rank 0: tells every other live rank's control actor to stop. */
static void stop_all(moon_runtime_t *rt, moon_dist_t *dist, uint32_t drain_ms)
{
    for (uint32_t r = 1; r < moon_dist_size(dist); r++) {
        char               name[32];
        moon_addr_t        a;
        moon_serve_stop_t *m;

        snprintf(name, sizeof(name), "serve/ctl/%u", r);
        if (!moon_dist_peer_alive(dist, r) ||
            moon_dist_whereis(dist, name, 100000000ull, &a) != MOON_OK) {
            continue; /* lost, or a client rank (it stops on its own) */
        }
        m = moon_msg_new(MOON_MSG_SERVE_STOP, 0);
        if (m == NULL) {
            continue;
        }
        m->drain_ms = drain_ms;
        m->rank     = 0;
        if (moon_runtime_send(rt, a, &m->hdr) != MOON_OK) {
            moon_msg_release(&m->hdr);
        }
    }
}

/* Rank 0 on a signal: stop the batch runner (its batch saved, to go on at
 * the next start), drain the gateway (at most drain_s), then stop all. */
static void drain_and_stop(moon_runtime_t *rt, moon_dist_t *dist, moon_addr_t gateway,
                           moon_gw_batches_t *batches, uint32_t drain_s)
{
    uint64_t t0 = mono_ms(), waited = 0;

    moon_gw_batches_stop(batches);

    if (gateway != MOON_ADDR_NONE && moon_gateway_drain(rt, gateway) == MOON_OK) {
        fprintf(stderr, "moonlet serve: draining (at most %u s): new requests get 503\n", drain_s);
        /* acquire: pairs with the gateway's release store in check_drained() */
        while (!atomic_load_explicit(&g_drained, memory_order_acquire) &&
               (waited = mono_ms() - t0) < (uint64_t)drain_s * 1000u) {
            nanosleep(&(struct timespec){0, 10000000}, NULL);
        }
        fprintf(stderr, "moonlet serve: %s after %.1f s; stopping every rank\n",
                atomic_load(&g_drained) ? "drained" : "drain deadline reached",
                (double)(mono_ms() - t0) / 1000.0);
    }
    if (moon_dist_size(dist) > 1) {
        stop_all(rt, dist, (uint32_t)waited);
    }
}

/* 1 when every rank is alive. */
static int all_alive(moon_dist_t *dist)
{
    for (uint32_t r = 0; r < moon_dist_size(dist); r++) {
        if (r != moon_dist_rank(dist) && !moon_dist_peer_alive(dist, r)) {
            return 0;
        }
    }
    return 1;
}

/* The gateway on rank 0, its fingerprint the deployment's model id and
 * weight version. */
static moon_status_t start_gateway(moon_runtime_t *rt, moon_dist_t *dist,
                                   const moon_serve_cluster_t  *cluster,
                                   const moon_serve_config_t   *scfg,
                                   const moon_gateway_config_t *gcfg,
                                   moon_weights_client_t *weights, moon_gw_batches_t *batches,
                                   uint64_t job_start, moon_addr_t *gateway_p, uint16_t *port_p)
{
    moon_kv_tag_t       tag;
    char                fp[64];
    moon_gateway_args_t ga = {
        .conductor        = moon_serve_cluster_conductor(cluster),
        .model_path       = scfg->model_path,
        .config           = *gcfg,
        .dist             = moon_dist_size(dist) > 1 ? dist : NULL,
        .wait_roles       = scfg->colocated ? "colocated" : NULL,
        .port_p           = port_p,
        .drained_p        = &g_drained,
        .weights          = weights,
        .batches          = batches,
        .job_start_ns     = job_start,
        .first_token_ns_p = &g_first_token_ns,
    };
    moon_spawn_opts_t opts = {.name = "gateway"};

    if (moon_serve_config_kv(scfg, NULL, &tag) == MOON_OK) {
        /* the gateway appends each answer's weight version: "_v<version>" */
        snprintf(fp, sizeof(fp), "fp_%016llx", (unsigned long long)tag.model_id);
        ga.fingerprint = fp;
    }
    return moon_spawn(rt, &moon_gateway_ops, &ga, &opts, gateway_p);
}

/* The batch api's service on rank 0 (--data-dir): its batches run through
 * the same cluster, as the gateway's requests do. */
static moon_status_t open_batches(moon_runtime_t *rt, const moon_serve_cluster_t *cluster,
                                  const moon_serve_config_t      *scfg,
                                  const moon_gateway_config_t    *gcfg,
                                  const moon_gw_batches_config_t *bcfg,
                                  moon_gw_batches_t             **batches_p)
{
    moon_kv_tag_t          tag;
    char                   fp[64];
    moon_gw_batches_args_t a = {
        .rt         = rt,
        .conductor  = moon_serve_cluster_conductor(cluster),
        .model_path = scfg->model_path,
        .model_name = gcfg->model_name,
        .n_prefill  = scfg->colocated ? 0 : scfg->n_prefill,
        .n_decode   = scfg->n_decode,
    };
    moon_status_t status;

    if (moon_serve_config_kv(scfg, NULL, &tag) == MOON_OK) {
        snprintf(fp, sizeof(fp), "fp_%016llx_v%llu", (unsigned long long)tag.model_id,
                 (unsigned long long)tag.weight_version);
        a.fingerprint = fp;
    }
    status = moon_gw_batches_open(bcfg, &a, batches_p);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet serve: --data-dir %s cannot be used (see the log above)\n",
                bcfg->data_dir);
    }
    return status;
}

int moon_cmd_serve(int argc, char **argv)
{
    moon_serve_config_t      scfg;
    serve_run_t              run;
    moon_dist_config_t       dcfg;    /* --transport, --peer-timeout-ms... and MOON_* */
    moon_gateway_config_t    gcfg;    /* --host, --port, --model-name, --api-key... */
    moon_gw_batches_config_t bcfg;    /* --data-dir, --batch-inflight... */
    moon_cli_plugins_t       plugins; /* --plugin, --place */
    const moon_cli_table_t   tables[] = {
          {&moon_serve_config_table, &scfg},   {&run_table, &run},
          {&moon_gateway_config_table, &gcfg}, {&moon_gw_batches_config_table, &bcfg},
          {&moon_dist_config_table, &dcfg},    {&moon_cli_plugin_table, &plugins}};
    moon_gw_batches_t    *batches = NULL; /* the batch api (--data-dir) */
    moon_addr_t           gateway = MOON_ADDR_NONE;
    moon_addr_t           ctl     = MOON_ADDR_NONE;
    uint16_t              port    = 0;
    moon_config_t        *cfg     = NULL;
    moon_dist_t          *dist    = NULL;
    moon_runtime_t       *rt      = NULL;
    moon_serve_cluster_t *cluster = NULL;
    moon_runtime_config_t rcfg;
    moon_status_t         up = MOON_OK; /* the gateway's start, agreed by every rank */
    int                   rc = 1;

    moon_weights_client_t *weights    = NULL;                      /* the admin route's pushes */
    uint64_t               start_ns   = clock_ns(CLOCK_MONOTONIC); /* this process's start */
    uint64_t               cluster_ns = 0;                         /* its cluster's start-up */
    int                    reported   = 0;                         /* the first token's line */

    moon_serve_config_default(&scfg);
    if (moon_gateway_config_default(&gcfg) != MOON_OK ||
        moon_gw_batches_config_default(&bcfg) != MOON_OK) {
        return 2;
    }
    rc = moon_cli_plugin_take("serve", &argc, argv, &plugins);
    if (rc < 0) {
        rc = moon_cli_parse("serve",
                            "usage: [mpirun -np N] moonlet serve --model M.gguf [options]\n",
                            tables, MOON_ARRAY_SIZE(tables), 0, argc, argv, &cfg);
    }
    if (rc >= 0) {
        return rc;
    }
    rc = 1;
    if (scfg.model_path == NULL) {
        rc = moon_cli_usage_error("serve", "--model is required");
        goto out;
    }
    {
        /* a Hugging Face folder: served from its converted copy, DIR/moonlet.gguf */
        static char converted[4096];
        scfg.model_path =
            moon_cli_model_path("serve", scfg.model_path, converted, sizeof(converted));
        if (scfg.model_path == NULL) {
            goto out;
        }
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
    if (moon_cli_plugin_load(&plugins) != MOON_OK) {
        fprintf(stderr, "moonlet serve: a plugin did not load (see the log above)\n");
        goto out;
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
    cluster_ns = clock_ns(CLOCK_MONOTONIC);
    if (moon_serve_cluster_start(&scfg, rt, moon_dist_size(dist) > 1 ? dist : NULL, &cluster) !=
        MOON_OK) {
        fprintf(stderr, "moonlet serve: the cluster did not start (see the log above)\n");
        goto out;
    }
    cluster_ns = clock_ns(CLOCK_MONOTONIC) - cluster_ns;
    if (run.start_time > 0.0) {
        start_ns = job_start_ns(run.start_time);
    }
    {
        moon_cli_placement_t pl = {.rank        = moon_dist_rank(dist),
                                   .n_ranks     = moon_dist_size(dist),
                                   .split_hosts = dcfg.split_hosts,
                                   .workers     = run.workers,
                                   .pin_workers = rcfg.pin_workers};
        moon_cli_placement_report(&scfg, &pl, run.print_placement ? stderr : NULL);
    }
    if (moon_plugin_loaded()) {
        moon_plugin_roles_t roles = {.spec      = moon_serve_cluster_spec(cluster),
                                     .n_prefill = scfg.colocated ? 0 : scfg.n_prefill,
                                     .n_decode  = scfg.colocated ? scfg.n_prefill + scfg.n_decode
                                                                 : scfg.n_decode,
                                     .n_store   = scfg.colocated ? 0 : scfg.n_store,
                                     .n_ranks   = moon_dist_size(dist)};
        up = moon_plugin_start(rt, moon_dist_size(dist) > 1 ? dist : NULL, &roles);
        if (moon_dist_size(dist) > 1) {
            up = moon_dist_agree(dist, up); /* every rank's plugin actors, or none serves */
        }
        if (up != MOON_OK) {
            fprintf(stderr, "moonlet serve: the plugins' actors did not start (see the log)\n");
            goto out;
        }
    }
    if (moon_dist_rank(dist) == 0 && run.gateway && gcfg.admin_key != NULL) {
        if (moon_serve_cluster_weights(cluster) == MOON_ADDR_NONE) {
            MOON_WARN("serve: --admin-key given but weight pushes need a cluster under mpirun: "
                      "the admin route is off");
        } else {
            up = moon_weights_client_create(rt, moon_serve_cluster_weights(cluster), &weights);
        }
    }
    if (moon_dist_rank(dist) == 0 && run.gateway && up == MOON_OK && bcfg.data_dir != NULL) {
        up = open_batches(rt, cluster, &scfg, &gcfg, &bcfg, &batches);
    }
    if (moon_dist_rank(dist) == 0 && run.gateway && up == MOON_OK) {
        up = start_gateway(rt, dist, cluster, &scfg, &gcfg, weights, batches, start_ns, &gateway,
                           &port);
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
    moon_cli_on_stop_signals(on_signal);
    /* a file size limit (ulimit -f) fails a write (EFBIG: the upload gets its
     * error) instead of killing the server */
    signal(SIGXFSZ, SIG_IGN);
    if (moon_dist_size(dist) > 1) {
        char              name[32];
        moon_spawn_opts_t copts = {.flags = MOON_SPAWN_CONTROL};

        snprintf(name, sizeof(name), "serve/ctl/%u", moon_dist_rank(dist));
        if (moon_spawn(rt, &ctl_ops, NULL, &copts, &ctl) != MOON_OK ||
            moon_dist_register(dist, name, ctl) != MOON_OK) {
            MOON_WARN("serve: no control actor on rank %u: it stops on its own signal only",
                      moon_dist_rank(dist));
        }
    }
    if (moon_dist_rank(dist) == 0) {
        fprintf(stderr, "moonlet serve: %u prefill, %u decode, %u store on %u rank(s); serving",
                scfg.n_prefill, scfg.n_decode, scfg.n_store, moon_dist_size(dist));
        if (gateway != MOON_ADDR_NONE) {
            fprintf(stderr, " on http://%s:%u/v1", gcfg.host, port);
        }
        fprintf(stderr, "; rank 0 is pid %ld (SIGTERM drains and stops every rank)\n",
                (long)getpid());
    }
    /* a rank other than 0 also stops once rank 0 is lost: with the gateway
     * and the conductor gone nothing reaches it, and a rank left running
     * would keep mpirun (and so the deployment's supervisor) from seeing
     * the failure and starting the deployment again */
    for (uint64_t t0 = mono_ms(); !g_stop && !atomic_load(&g_stop_all) &&
                                  (moon_dist_rank(dist) == 0 || moon_dist_peer_alive(dist, 0)) &&
                                  (run.seconds == 0 || mono_ms() - t0 < run.seconds * 1000);) {
        nanosleep(&(struct timespec){0, 10000000}, NULL);
        report_first_token(start_ns, cluster_ns, &reported);
    }
    if (moon_dist_rank(dist) == 0) {
        drain_and_stop(rt, dist, gateway, batches, run.drain_seconds);
    } else if (!moon_dist_peer_alive(dist, 0)) {
        MOON_WARN("serve: rank 0 (gateway, conductor) is lost: this rank stops");
        rc = 1;
        goto out;
    } else if (!atomic_load(&g_stop_all)) {
        /* rank 0 drains the requests our instances serve: wait for its word */
        uint64_t t0 = mono_ms(), limit = (uint64_t)run.drain_seconds * 1000u + SERVE_STOP_GRACE_MS;

        ask_stop(rt, dist);
        while (!atomic_load(&g_stop_all) && moon_dist_peer_alive(dist, 0) &&
               mono_ms() - t0 < limit) {
            nanosleep(&(struct timespec){0, 10000000}, NULL);
        }
    }
    rc = 0;
out:
    /* stopping: a second SIGTERM (a job script passing on the one Slurm sent
     * to every process) must not kill the teardown; MPI's finalize may put
     * the default action back, so once more after it */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    moon_gw_batches_stop(batches); /* before the cluster it sends to stops */
    if (gateway != MOON_ADDR_NONE) {
        moon_stop(rt, gateway, MOON_OK); /* no new request while the cluster stops */
    }
    /* every rank is done (client ranks first): only with client ranks to
     * wait for and every rank alive (MPI_Barrier has no deadline) */
    if (dist != NULL && rt != NULL && moon_dist_size(dist) > 1 && scfg.client_ranks > 0 &&
        all_alive(dist)) {
        moon_dist_barrier(dist);
    }
    if (ctl != MOON_ADDR_NONE) {
        moon_stop(rt, ctl, MOON_OK);
    }
    /* after the gateway that used it, before the cluster its batches run on
     * and the runtime its client lives in are gone */
    moon_gw_batches_close(batches);
    moon_plugin_stop();
    moon_serve_cluster_stop(cluster);
    moon_weights_client_destroy(weights); /* after the gateway that used it */
    if (rt != NULL) {
        moon_runtime_shutdown(rt, 0);
        moon_runtime_wait(rt);
    }
    moon_dist_stop(dist);
    moon_runtime_destroy(rt);
    moon_dist_finalize(dist);
    moon_plugin_unload();
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    moon_config_destroy(cfg);
    return rc;
}
