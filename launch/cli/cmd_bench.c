/* launch/cli/cmd_bench.c - `moonlet bench`: options -> workload -> streamed
 * requests over libcurl -> metrics -> summary, JSON result, plots. The parts
 * live in bench_*.c; this file only joins them. Single-threaded. */
#include "cli.h"
#include "commands.h"

#include "loadgen_http.h"
#include "loadgen_opts.h"
#include "loadgen_plot.h"
#include "loadgen_report.h"
#include "loadgen_stats.h"
#include "loadgen_workload.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <curl/curl.h>

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

/* One socket per request in flight: lift the soft descriptor limit to the
 * hard one. */
static void raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* The first few distinct errors, so a failed run says why. */
static void print_errors(const moon_loadgen_result_t *results, uint32_t n)
{
    uint32_t shown = 0;

    for (uint32_t i = 0; i < n && shown < 5; i++) {
        int seen = 0;
        if (results[i].ok) {
            continue;
        }
        for (uint32_t j = 0; j < i && !seen; j++) {
            seen = !results[j].ok && strcmp(results[j].error, results[i].error) == 0;
        }
        if (!seen) {
            fprintf(stderr, "moonlet bench: request %u failed: %s\n", i, results[i].error);
            shown++;
        }
    }
}

static void print_plan(const moon_loadgen_opts_t *opts, const char *model,
                       const moon_loadgen_workload_t *wl)
{
    uint64_t ids = 0, out = 0;
    char     rate[64] = "inf";

    if (opts->workload == MOON_LOADGEN_WL_TRACE) {
        snprintf(rate, sizeof(rate), "trace timestamps x %.6g", opts->time_scale);
    } else if (opts->rate > 0) {
        snprintf(rate, sizeof(rate), "%.6g/s", opts->rate);
    }
    for (uint32_t i = 0; i < wl->n_reqs; i++) {
        ids += wl->reqs[i].n_ids;
        out += wl->reqs[i].max_tokens;
    }
    fprintf(stderr,
            "moonlet bench: %u requests (%s, %llu prompt %s, %llu output tokens asked) to %s "
            "(%s, model %s), rate %s, max concurrency %u\n",
            wl->n_reqs,
            opts->workload == MOON_LOADGEN_WL_RANDOM          ? "random"
            : opts->workload == MOON_LOADGEN_WL_SHARED_PREFIX ? "shared-prefix"
                                                              : "trace",
            (unsigned long long)ids, wl->words ? "words" : "tokens", (unsigned long long)out,
            opts->base_url, opts->endpoint, model, rate, opts->max_concurrency);
}

static int run(const moon_loadgen_opts_t *opts)
{
    char                    *model   = NULL;
    moon_loadgen_workload_t *wl      = NULL;
    moon_loadgen_result_t   *results = NULL;
    moon_loadgen_stats_t     stats;
    moon_loadgen_slo_t       slo      = {opts->slo_ttft_ms, opts->slo_tpot_ms, opts->slo_e2el_ms};
    double                   duration = 0;
    int                      rc       = 1;
    moon_status_t            status;

    status = moon_loadgen_workload_create(opts, &wl);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet bench: cannot build the workload: %s\n", moon_status_str(status));
        return 1;
    }
    model = moon_strdup(opts->model != NULL ? opts->model : "");
    if (model != NULL && opts->model == NULL) {
        moon_free(model);
        model  = NULL;
        status = moon_loadgen_http_first_model(opts, &model);
        if (status != MOON_OK) {
            fprintf(stderr, "moonlet bench: no model id from %s/v1/models (%s): pass --model\n",
                    opts->base_url, moon_status_str(status));
            goto out;
        }
    }
    results = moon_calloc(wl->n_reqs, sizeof(*results));
    if (model == NULL || results == NULL) {
        fprintf(stderr, "moonlet bench: out of memory\n");
        goto out;
    }
    print_plan(opts, model, wl);
    status = moon_loadgen_http_run(opts, model, wl, results, &duration);
    if (status == MOON_OK) {
        status = moon_loadgen_stats_compute(results, wl->n_reqs, duration, &slo, &stats);
    }
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet bench: %s\n", moon_status_str(status));
        goto out;
    }
    print_errors(results, wl->n_reqs);
    moon_loadgen_report_print(stdout, opts, model, &stats);
    fflush(stdout);
    rc = stats.completed > 0 ? 0 : 1;
    if (opts->result_file != NULL) {
        status =
            moon_loadgen_report_write(opts->result_file, opts, model, &stats, results, wl->n_reqs);
        if (status != MOON_OK) {
            fprintf(stderr, "moonlet bench: result file %s: %s\n", opts->result_file,
                    moon_status_str(status));
            rc = 1;
        }
    }
    if (opts->plot_dir != NULL) {
        status = moon_loadgen_plot(opts->plot_dir, results, wl->n_reqs, duration);
        if (status == MOON_ERR_UNSUPPORTED) {
            fprintf(stderr,
                    "moonlet bench: plots skipped: gnuplot not found (Debian: apt-get "
                    "install gnuplot-nox); data and script are in %s\n",
                    opts->plot_dir);
        } else if (status != MOON_OK) {
            fprintf(stderr, "moonlet bench: plots: %s\n", moon_status_str(status));
            rc = 1;
        } else {
            fprintf(stderr,
                    "moonlet bench: plots in %s (ttft_cdf.png tpot_cdf.png "
                    "throughput.png)\n",
                    opts->plot_dir);
        }
    }
out:
    if (results != NULL) {
        moon_loadgen_results_fini(results, wl->n_reqs);
    }
    moon_free(results);
    moon_free(model);
    moon_loadgen_workload_destroy(wl);
    return rc;
}

int moon_cmd_bench(int argc, char **argv)
{
    moon_loadgen_opts_t    opts;
    const moon_cli_table_t tables[] = {{&moon_loadgen_config_table, &opts},
                                       {&moon_loadgen_vllm_table, &opts}};
    moon_config_t         *cfg      = NULL;
    char                   err[256] = "";
    int                    rc;

    memset(&opts, 0, sizeof(opts));
    rc = moon_cli_parse("bench",
                        "usage: moonlet bench random|shared-prefix|trace FILE [options]\n"
                        "  drives an OpenAI-compatible server with streamed requests and "
                        "reports TTFT, TPOT,\n  ITL, E2EL, throughput and goodput as "
                        "`vllm bench serve` does\n",
                        tables, MOON_ARRAY_SIZE(tables), 2, argc, argv, &cfg);
    if (rc >= 0) {
        return rc;
    }
    if (moon_loadgen_opts_finish(cfg, &opts, err, sizeof(err)) != MOON_OK) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("bench", "%s", err);
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "moonlet bench: libcurl failed to initialise\n");
        moon_config_destroy(cfg);
        return 1;
    }
    raise_nofile();
    rc = run(&opts);
    curl_global_cleanup();
    moon_config_destroy(cfg); /* after the last use of opts' strings */
    return rc;
}
