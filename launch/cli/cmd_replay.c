/* launch/cli/cmd_replay.c - `moonlet replay`: loads a trace and a profile, runs
 * the simulated cluster once per policy (sim_run.h) and writes the outputs:
 * DIR/requests.csv, DIR/summary.json and the plots (with --compare, each
 * policy's CSV and summary in DIR/POLICY/ and the plots of all in DIR). */
#include "cli.h"
#include "cli_plugin.h"
#include "plugin_host.h"
#include "commands.h"
#include "profile.h"
#include "progress.h"
#include "replay_opts.h"
#ifdef MOON_WITH_BENCH
#include "replay_http.h"
#endif
#include "sim_plot.h"
#include "sim_report.h"
#include "sim_run.h"
#include "trace.h"

#include "moonlet/log.h"
#include "moonlet/sched_policy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p: the folders on the way are made too, as users of --out expect. */
static int make_dir(const char *dir)
{
    struct stat st;
    char        path[4096];
    size_t      len = strlen(dir);

    if (len == 0 || len >= sizeof(path)) {
        fprintf(stderr, "moonlet replay: --out: a folder name of 1 to %zu bytes\n",
                sizeof(path) - 1);
        return -1;
    }
    memcpy(path, dir, len + 1);
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            (void)mkdir(path, 0777); /* an error shows in the last mkdir */
            *p = '/';
        }
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "moonlet replay: cannot create %s: %s\n", dir, strerror(errno));
        return -1;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "moonlet replay: %s is not a folder\n", dir);
        return -1;
    }
    return 0;
}

/* dir/name into path (cap bytes); -1 with a message when it does not fit. */
static int join_path(char *path, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(path, cap, "%s/%s", dir, name);

    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "moonlet replay: output path %s/%s is too long\n", dir, name);
        return -1;
    }
    return 0;
}

/* requests.csv and summary.json of one run into dir. */
static int write_outputs(const char *dir, const char *label, const moon_sim_records_t *recs,
                         const moon_replay_opts_t *o, moon_sim_summary_t *s)
{
    char          path[1100];
    FILE         *f;
    moon_status_t status;

    if (join_path(path, sizeof(path), dir, "requests.csv") != 0) {
        return -1;
    }
    f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "moonlet replay: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    status = moon_sim_records_write_csv(recs, f);
    if (fclose(f) != 0 || status != MOON_OK) {
        fprintf(stderr, "moonlet replay: writing %s failed\n", path);
        return -1;
    }
    if (moon_sim_summarize(recs, o->ttft_slo_s, o->tbt_slo_s, s) != MOON_OK) {
        return -1;
    }
    if (join_path(path, sizeof(path), dir, "summary.json") != 0) {
        return -1;
    }
    f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "moonlet replay: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    status = moon_sim_summary_write_json(s, label, f);
    if (fclose(f) != 0 || status != MOON_OK) {
        fprintf(stderr, "moonlet replay: writing %s failed\n", path);
        return -1;
    }
    return 0;
}

static void print_line(const char *label, const moon_sim_summary_t *s)
{
    printf("%-20s requests %llu rejected %llu slo_attainment %.3f goodput %.3f rps "
           "ttft mean %.3f s p90 %.3f s tbt mean %.4f s p90 %.4f s hit %.3f\n",
           label, (unsigned long long)s->requests, (unsigned long long)s->rejected,
           s->slo_attainment, s->goodput_rps, s->ttft_mean_s, s->ttft_p90_s, s->tbt_mean_s,
           s->tbt_p90_s, s->cache_hit_ratio);
}

/* One policy: simulate into recs (initialised here). */
static int run_one(const moon_replay_opts_t *o, const moon_trace_t *trace,
                   const moon_profile_t *profile, const char *policy, moon_sim_records_t *recs,
                   const moon_sim_faults_spec_t *faults, moon_sim_faults_report_t *faults_report)
{
    moon_progress_t       bar;
    moon_sim_run_config_t cfg = {
        .trace         = trace,
        .profile       = profile,
        .policy        = policy,
        .nodes_prefill = o->nodes_prefill,
        .nodes_decode  = o->nodes_decode,
        .colocated     = o->colocated,
        .block_tokens  = o->block_tokens,
        .ttft_slo_s    = o->ttft_slo_s,
        .tbt_slo_s     = o->tbt_slo_s,
        .shed_after    = o->shed_after,
        .shed_share    = o->shed_share,
        .time_scale    = o->time_scale,
        .seed          = o->seed,
        .progress      = &bar,
        .model_path    = o->model,
        .workers       = o->workers,
        .threads       = o->threads,
        .backend       = o->backend,
        .faults        = faults,
        .faults_report = faults_report,
    };
    moon_status_t status;

    if (moon_sim_records_init(recs, (uint32_t)trace->n_reqs) != MOON_OK) {
        fprintf(stderr, "moonlet replay: out of memory\n");
        return -1;
    }
    moon_progress_init(&bar, STDERR_FILENO, trace->n_reqs, 0);
    status = o->real ? moon_replay_real_run(&cfg, recs) : moon_replay_sim_run(&cfg, recs);
    moon_progress_finish(&bar);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet replay: policy %s: %s\n", policy, moon_status_str(status));
        moon_sim_records_fini(recs);
        return -1;
    }
    return 0;
}

static int replay(const moon_replay_opts_t *o)
{
    moon_trace_opts_t        topts = {.max_reqs = o->max_requests};
    moon_trace_t            *trace = NULL;
    moon_profile_t           profile;
    const char              *names[MOON_REPLAY_MAX_COMPARE];
    char                     buf[1024];
    moon_sim_records_t       recs[MOON_REPLAY_MAX_COMPARE];
    moon_sim_plot_run_t      runs[MOON_REPLAY_MAX_COMPARE];
    moon_sim_summary_t       s;
    moon_sim_faults_spec_t   faults;
    moon_sim_faults_report_t freport;
    int                      n = 1, done = 0, rc = 1;

    names[0] = o->policy ? o->policy : MOON_SCHED_POLICY_DEFAULT;
    if (o->faults != NULL && moon_sim_faults_parse(o->faults, &faults) != MOON_OK) {
        return 2; /* the parser named the item */
    }
    if (o->compare != NULL) {
        const char *all[MOON_REPLAY_MAX_COMPARE];
        uint32_t    n_all = 0;

        while (n_all < MOON_REPLAY_MAX_COMPARE && moon_sched_policy_name_at(n_all) != NULL) {
            all[n_all] = moon_sched_policy_name_at(n_all);
            n_all++;
        }
        n = moon_replay_split_compare(o->compare, buf, sizeof(buf), names, all, n_all);
        if (n < 0) {
            fprintf(stderr, "moonlet replay: --compare: a list of up to %d distinct names\n",
                    MOON_REPLAY_MAX_COMPARE);
            return 2;
        }
    }
    if (moon_trace_load(o->trace, &topts, &trace, NULL) != MOON_OK ||
        moon_profile_load(o->profile, NULL, &profile, NULL) != MOON_OK) {
        moon_trace_destroy(trace);
        return 1; /* the loaders logged why */
    }
    if (o->block_scale > 0 || o->max_context > 0) {
        moon_trace_t *scaled = NULL;

        if (moon_trace_scale(trace, o->block_scale ? o->block_scale : trace->block_tokens,
                             o->max_context, &scaled) != MOON_OK) {
            fprintf(stderr,
                    "moonlet replay: --block-scale must be at most the trace's block "
                    "(%u)\n",
                    trace->block_tokens);
            goto out;
        }
        moon_trace_destroy(trace);
        trace = scaled;
    }
    if (make_dir(o->out) != 0) {
        goto out;
    }
    for (; done < n; done++) {
        char dir[1100];

        if (run_one(o, trace, &profile, names[done], &recs[done], o->faults ? &faults : NULL,
                    &freport) != 0) {
            goto out;
        }
        snprintf(dir, sizeof(dir), "%s/%s", o->out, names[done]);
        if ((o->compare != NULL && make_dir(dir) != 0) ||
            write_outputs(o->compare != NULL ? dir : o->out, names[done], &recs[done], o, &s) !=
                0) {
            done++;
            goto out;
        }
        print_line(names[done], &s);
        runs[done] = (moon_sim_plot_run_t){names[done], &recs[done]};
        if (o->faults != NULL) {
            printf("%-20s faults ", names[done]);
            moon_sim_faults_report_print(&freport, stdout);
            printf("\n");
            if (!freport.holds) {
                fprintf(stderr, "moonlet replay: seed %llu broke an invariant (see faults)\n",
                        (unsigned long long)o->seed);
                rc = 3;
            }
        }
    }
    /* plots are a bonus: a missing gnuplot is a warning, not a failure */
    (void)moon_sim_plot(o->out, runs, (uint32_t)n, o->ttft_slo_s, o->tbt_slo_s, NULL);
    rc = rc == 3 ? 3 : 0;
out:
    for (int i = 0; i < done; i++) {
        moon_sim_records_fini(&recs[i]);
    }
    moon_trace_destroy(trace);
    return rc;
}

/* Without --sim: against the server at --url (replay_http.h). */
static int replay_http(const moon_replay_opts_t *o)
{
#ifdef MOON_WITH_BENCH
    moon_sim_records_t  recs;
    moon_sim_summary_t  s;
    moon_sim_plot_run_t run = {"http", &recs};
    moon_status_t       status;
    int                 rc = 1;

    if (make_dir(o->out) != 0) {
        return 1;
    }
    status = moon_replay_http_run(o, &recs);
    if (status != MOON_OK) {
        fprintf(stderr, "moonlet replay: %s: %s\n", o->url, moon_status_str(status));
        return status == MOON_ERR_INVALID_PARAM ? 2 : 1;
    }
    if (write_outputs(o->out, "http", &recs, o, &s) == 0) {
        print_line("http", &s);
        (void)moon_sim_plot(o->out, &run, 1, o->ttft_slo_s, o->tbt_slo_s, NULL);
        rc = s.completed > 0 ? 0 : 1;
    }
    moon_sim_records_fini(&recs);
    return rc;
#else
    fprintf(stderr, "moonlet replay: over HTTP needs the bench client (libcurl; "
                    "launch/install_deps.sh); use --sim to simulate\n");
    (void)o;
    return 2;
#endif
}

static int run(const moon_replay_opts_t *po);

int moon_cmd_replay(int argc, char **argv)
{
    moon_replay_opts_t     o;
    moon_cli_plugins_t     plugins; /* --plugin, --place: --sim only */
    moon_config_t         *cfg      = NULL;
    const moon_cli_table_t tables[] = {{&moon_replay_config_table, &o},
                                       {&moon_cli_plugin_table, &plugins}};
    char                   err[256];
    int                    rc;

    memset(&o, 0, sizeof(o));
    rc = moon_cli_plugin_take("replay", &argc, argv, &plugins);
    if (rc < 0) {
        rc = moon_cli_parse("replay", moon_replay_usage, tables, MOON_ARRAY_SIZE(tables), 0, argc,
                            argv, &cfg);
    }
    if (rc >= 0) {
        return rc; /* --help, or a bad flag (named on stderr) */
    }
    if (moon_replay_opts_finish(&o, err, sizeof(err)) != 0) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("replay", "%s", err);
    }
    if (plugins.n_plugins > 0 && !o.sim) {
        moon_config_destroy(cfg);
        return moon_cli_usage_error("replay", "--plugin is for --sim (a real cluster loads its "
                                              "plugins with moonlet serve --plugin)");
    }
    if (moon_cli_plugin_load(&plugins) != MOON_OK) {
        moon_config_destroy(cfg);
        fprintf(stderr, "moonlet replay: a plugin did not load (see the log above)\n");
        return 1;
    }
    rc = run(&o);
    moon_config_destroy(cfg); /* the string options borrowed argv until here */
    moon_plugin_unload();
    return rc;
}

static int run(const moon_replay_opts_t *po)
{
    moon_replay_opts_t o = *po;

    if (o.list_policies) {
        for (uint32_t i = 0; moon_sched_policy_name_at(i) != NULL; i++) {
            printf("%-14s %s\n", moon_sched_policy_name_at(i), moon_sched_policy_doc_at(i));
        }
        printf("(NAME+reject: the same with early rejection at the SLOs; default %s)\n",
               MOON_SCHED_POLICY_DEFAULT);
        return 0;
    }
    if (!o.sim && !o.real) {
        return replay_http(&o);
    }
    return replay(&o);
}
