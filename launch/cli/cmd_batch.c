/* launch/cli/cmd_batch.c - `moonlet batch`: answers an OpenAI batch file (JSONL)
 * through a serving cluster run in this job (the batch engine,
 * actors/batch/batch.h). Every rank of an mpirun or srun job runs it with the
 * same flags; alone, the whole cluster runs in one process. Rank 0 reads the
 * input and writes the output; the other ranks serve until rank 0 is done.
 * SIGTERM or SIGINT (scancel, a Slurm time limit's --signal) stops it
 * cleanly: no new request, those in flight finish (--drain-timeout), the
 * answers are synced, exit status 3; run it again to go on. Progress: a bar
 * on a terminal, else a line every --progress-interval seconds. */
#include "cli.h"
#include "commands.h"

#include "moonlet/config.h"
#include "moonlet/dist.h"
#include "moonlet/log.h"
#include "moonlet/runtime.h"
#include "batch.h"
#include "moonlet/serve_client.h"
#include "moonlet/serve_cluster.h"
#include "serve_instance.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DONE_NAME "batch/done" /* registered by rank 0 when the batch is over */

typedef struct {
    const char *model_name;
    uint32_t    max_inflight;
    uint32_t    workers;
    uint32_t    ready_timeout_s;
    uint32_t    progress_s;
} batch_run_t;

#define BR(_f) MOON_CONFIG_AT(batch_run_t, _f)
static const moon_config_field_t run_fields[] = {
    {"model-name", MOON_CONFIG_STRING, BR(model_name), .dflt = NULL,
     .doc = "model id the requests name, as the gateway's (default: the model file's stem)"},
    {"max-inflight", MOON_CONFIG_U32, BR(max_inflight), .dflt = "64", .min = 1, .max = 1u << 16,
     .doc = "requests in the cluster at once"},
    {"workers", MOON_CONFIG_U32, BR(workers), .dflt = "1", .min = 1, .max = 1024,
     .doc = "actor worker threads per rank"},
    {"ready-timeout", MOON_CONFIG_U32, BR(ready_timeout_s), .dflt = "600", .min = 1,
     .doc = "seconds to wait for the cluster's instances to come up"},
    {"progress-interval", MOON_CONFIG_U32, BR(progress_s), .dflt = "5", .min = 1,
     .doc = "seconds between progress lines when stderr is no terminal"},
    MOON_CONFIG_END,
};
#undef BR
static const moon_config_table_t run_table = {"run", "the batch process", "MOON_BATCH_RUN_",
                                              run_fields};

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

typedef struct {
    int      tty;
    uint32_t interval_s;
    double   last_s;    /* when the last line or bar went out */
    double   first_s;   /* when the first answer came; <0: none yet */
    uint64_t last_done; /* the bar: redrawn when it moves */
} progress_t;

static void fmt_eta(char *buf, size_t n, double s)
{
    if (s < 0 || s > 1e7) {
        snprintf(buf, n, "--:--");
    } else {
        snprintf(buf, n, "%d:%02d:%02d", (int)(s / 3600), (int)(s / 60) % 60, (int)s % 60);
    }
}

static void on_progress(void *arg, const moon_batch_progress_t *p)
{
    progress_t *pr   = arg;
    uint64_t    sent = p->done - p->resumed;
    uint64_t    left = p->total - p->done;
    double      tps  = p->elapsed_s > 0 ? (double)p->completion_tokens / p->elapsed_s : 0;
    double      eta  = sent > 0 ? p->elapsed_s / (double)sent * (double)left : -1;
    char        etas[32];

    if (pr->first_s < 0 && p->n_ok > 0) {
        pr->first_s = p->elapsed_s;
    }
    fmt_eta(etas, sizeof(etas), eta);
    if (pr->tty) {
        char   bar[31];
        double frac = p->total ? (double)p->done / (double)p->total : 1.0;
        int    fill = (int)(frac * 30);

        if (p->done == pr->last_done && p->elapsed_s - pr->last_s < 1.0) {
            return;
        }
        memset(bar, '#', (size_t)fill);
        memset(bar + fill, '.', (size_t)(30 - fill));
        bar[30] = '\0';
        fprintf(stderr, "\r[%s] %llu/%llu  %.1f tok/s  %u in flight  ETA %s   ", bar,
                (unsigned long long)p->done, (unsigned long long)p->total, tps, p->in_flight, etas);
        pr->last_done = p->done;
        pr->last_s    = p->elapsed_s;
        return;
    }
    if (p->done == pr->last_done ||
        (p->elapsed_s - pr->last_s < pr->interval_s && p->done < p->total)) {
        return; /* a line when it moved, every interval and at the end */
    }
    pr->last_s    = p->elapsed_s;
    pr->last_done = p->done;
    fprintf(stderr,
            "moonlet batch: %llu/%llu done (%llu ok, %llu failed, %llu resumed), %.1f tok/s, "
            "%u in flight, ETA %s\n",
            (unsigned long long)p->done, (unsigned long long)p->total, (unsigned long long)p->n_ok,
            (unsigned long long)p->n_failed, (unsigned long long)p->resumed, tps, p->in_flight,
            etas);
}

/* Rank 0: the batch itself. */
static moon_status_t run_batch(moon_runtime_t *rt, const moon_serve_cluster_t *cluster,
                               const moon_serve_config_t *scfg, const moon_batch_config_t *bcfg,
                               const batch_run_t *run, double t_start_s)
{
    moon_serve_client_config_t ccfg   = {.conductor = moon_serve_cluster_conductor(cluster)};
    moon_serve_client_t       *client = NULL;
    moon_batch_progress_t      res;
    progress_t                 pr = {
                        .tty = isatty(2), .interval_s = run->progress_s, .first_s = -1, .last_done = UINT64_MAX};
    moon_kv_tag_t    tag;
    char             fp[64];
    moon_batch_env_t env = {
        .model_path = scfg->model_path, .progress = on_progress, .arg = &pr, .stop = &g_stop};
    moon_status_t   status;
    struct timespec ts;

    status = moon_serve_client_create(rt, &ccfg, &client);
    if (status == MOON_OK) {
        status = moon_serve_client_wait_ready(client, scfg->colocated ? 0 : scfg->n_prefill,
                                              scfg->n_decode,
                                              (uint64_t)run->ready_timeout_s * 1000000000ull);
        if (status != MOON_OK) {
            fprintf(stderr, "moonlet batch: the cluster did not come up in %u s\n",
                    run->ready_timeout_s);
        }
    }
    if (status != MOON_OK) {
        moon_serve_client_destroy(client);
        return status;
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(stderr, "moonlet batch: cluster up %.1f s after start (%u prefill, %u decode)\n",
            (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t_start_s, scfg->n_prefill, scfg->n_decode);
    /* the gateway's system_fingerprint for the same deployment (cmd_serve.c) */
    if (moon_serve_config_kv(scfg, NULL, &tag) == MOON_OK) {
        snprintf(fp, sizeof(fp), "fp_%016llx_v%llu", (unsigned long long)tag.model_id,
                 (unsigned long long)tag.weight_version);
        env.fingerprint = fp;
    }
    env.client = client;
    status     = moon_batch_run(bcfg, &env, &res);
    if (pr.tty) {
        fprintf(stderr, "\n");
    }
    moon_serve_client_destroy(client);
    if (status == MOON_OK || status == MOON_ERR_CANCELED) {
        fprintf(stderr,
                "moonlet batch: %llu/%llu answered (%llu ok, %llu failed, %llu from an earlier "
                "run) in %.1f s; %llu completion tokens, %.1f tok/s",
                (unsigned long long)res.done, (unsigned long long)res.total,
                (unsigned long long)res.n_ok, (unsigned long long)res.n_failed,
                (unsigned long long)res.resumed, res.elapsed_s,
                (unsigned long long)res.completion_tokens,
                res.elapsed_s > 0 ? (double)res.completion_tokens / res.elapsed_s : 0.0);
        if (pr.first_s >= 0) {
            clock_gettime(CLOCK_MONOTONIC, &ts);
            fprintf(stderr, "; first answer %.1f s after start",
                    (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t_start_s - res.elapsed_s + pr.first_s);
        }
        fprintf(stderr, "%s\n",
                status == MOON_ERR_CANCELED ? "; stopped: run again to answer the rest" : "");
    }
    return status;
}

/* The other ranks: serve until rank 0 says the batch is over (or is lost). */
static void serve_until_done(moon_dist_t *dist)
{
    moon_addr_t addr;

    while (moon_dist_peer_alive(dist, 0) &&
           moon_dist_whereis(dist, DONE_NAME, 200000000ull, &addr) != MOON_OK) {
    }
}

int moon_cmd_batch(int argc, char **argv)
{
    moon_serve_config_t    scfg;
    moon_batch_config_t    bcfg;
    batch_run_t            run;
    moon_dist_config_t     dcfg;
    const moon_cli_table_t tables[] = {{&moon_batch_config_table, &bcfg},
                                       {&run_table, &run},
                                       {&moon_serve_config_table, &scfg},
                                       {&moon_dist_config_table, &dcfg}};
    moon_config_t         *cfg      = NULL;
    moon_dist_t           *dist     = NULL;
    moon_runtime_t        *rt       = NULL;
    moon_serve_cluster_t  *cluster  = NULL;
    moon_runtime_config_t  rcfg;
    moon_status_t          status = MOON_ERR_INVALID_PARAM;
    struct timespec        ts;
    double                 t_start_s;
    int                    rc;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    t_start_s = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    moon_serve_config_default(&scfg);
    memset(&bcfg, 0, sizeof(bcfg));
    rc = moon_cli_parse("batch",
                        "usage: [mpirun -np N | srun] moonlet batch --model M.gguf --input "
                        "in.jsonl --output out.jsonl [options]\n",
                        tables, MOON_ARRAY_SIZE(tables), 0, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    rc                = 1;
    bcfg.model_name   = run.model_name;
    bcfg.max_inflight = run.max_inflight;
    if (scfg.model_path == NULL || bcfg.input_path == NULL || bcfg.output_path == NULL) {
        rc = moon_cli_usage_error("batch", "--model, --input and --output are required");
        goto out;
    }
    if (scfg.backend == MOON_BACKEND_COST) {
        rc = moon_cli_usage_error("batch", "--backend cost models times and writes no text: "
                                           "use cpu or cuda");
        goto out;
    }
    if (moon_dist_init(&argc, &argv, &dcfg, &dist) != MOON_OK) {
        goto out;
    }
    /* after MPI's init, which may install its own */
    moon_cli_on_stop_signals(on_signal);
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = run.workers;
    rcfg.rank      = moon_dist_rank(dist);
    if (moon_runtime_create(&rcfg, &rt) != MOON_OK ||
        (moon_dist_size(dist) > 1 && moon_dist_start(dist, rt) != MOON_OK) ||
        moon_runtime_start(rt) != MOON_OK) {
        fprintf(stderr, "moonlet batch: the runtime did not start\n");
        goto out;
    }
    status = moon_serve_cluster_start(&scfg, rt, moon_dist_size(dist) > 1 ? dist : NULL, &cluster);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet batch: the cluster did not start (see the log above)\n");
        goto out;
    }
    if (moon_dist_rank(dist) == 0) {
        status = run_batch(rt, cluster, &scfg, &bcfg, &run, t_start_s);
        if (moon_dist_size(dist) > 1) {
            moon_dist_register(dist, DONE_NAME, moon_serve_cluster_conductor(cluster));
        }
    } else {
        serve_until_done(dist);
        status = MOON_OK;
    }
    if (moon_dist_size(dist) > 1) {
        status = moon_dist_agree(dist, status);
    }
    rc = status == MOON_OK ? 0 : status == MOON_ERR_CANCELED ? 3 : 1;
out:
    /* stopping: a second SIGTERM (a job script passing on the one Slurm sent
     * to every process) must not kill the teardown; MPI's finalize may put
     * the default action back, so once more after it */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    moon_serve_cluster_stop(cluster);
    if (rt != NULL) {
        moon_runtime_shutdown(rt, 0);
        moon_runtime_wait(rt);
    }
    moon_dist_stop(dist);
    moon_runtime_destroy(rt);
    moon_dist_finalize(dist);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    moon_config_destroy(cfg);
    return rc;
}
