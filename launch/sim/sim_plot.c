/* launch/sim/sim_plot.c - data files and a gnuplot script per replay output
 * folder; gnuplot runs as a child (posix_spawnp) and is waited for. */
#include "sim_plot.h"

#include "moonlet/log.h"

#include <errno.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

static int good_label(const char *s)
{
    if (s == NULL || s[0] == '\0' || strlen(s) > 64) {
        return 0;
    }
    for (; *s; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("_.+-", *s) != NULL)) {
            return 0;
        }
    }
    return 1;
}

typedef moon_status_t (*series_fn)(const moon_sim_plot_run_t *run, double ttft_slo_s,
                                   double tbt_slo_s, FILE *f);

static moon_status_t ttft_series(const moon_sim_plot_run_t *run, double a, double b, FILE *f)
{
    (void)a;
    (void)b;
    return moon_sim_write_cdf(run->recs, MOON_SIM_SERIES_TTFT, f);
}

static moon_status_t tbt_series(const moon_sim_plot_run_t *run, double a, double b, FILE *f)
{
    (void)a;
    (void)b;
    return moon_sim_write_cdf(run->recs, MOON_SIM_SERIES_TBT, f);
}

static moon_status_t slo_series(const moon_sim_plot_run_t *run, double ttft_slo_s, double tbt_slo_s,
                                FILE *f)
{
    double to = tbt_slo_s * 2 > 0.5 ? tbt_slo_s * 2 : 0.5;

    return moon_sim_write_slo_curve(run->recs, ttft_slo_s, 0.01, to, 0.01, f);
}

static moon_status_t hit_series(const moon_sim_plot_run_t *run, double a, double b, FILE *f)
{
    (void)a;
    (void)b;
    return moon_sim_write_hit_series(run->recs, 60.0, f);
}

static const struct {
    const char *ext, *png, *title, *xlabel, *ylabel, *setup;
    series_fn   fn;
} plots[] = {
    {"ttft", "ttft_cdf", "TTFT CDF", "TTFT (s)", "fraction of requests",
     "set logscale x\nset yrange [0:1]\n", ttft_series},
    {"tbt", "tbt_cdf", "TBT CDF (mean of the slowest 10% of gaps)", "TBT (s)",
     "fraction of requests", "set yrange [0:1]\n", tbt_series},
    {"slo", "slo_attainment", "SLO attainment against the TBT threshold", "TBT threshold (ms)",
     "share of requests meeting both SLOs", "set yrange [0:1]\n", slo_series},
    {"hit", "cache_hit", "cache hit ratio over time (60 s windows)", "arrival time (s)",
     "prefix-hit tokens / prompt tokens", "set yrange [0:1]\n", hit_series},
};
#define N_PLOTS (sizeof(plots) / sizeof(plots[0]))

static moon_status_t write_data(const char *dir, const moon_sim_plot_run_t *runs, uint32_t n_runs,
                                double ttft_slo_s, double tbt_slo_s)
{
    char path[1200];

    for (size_t p = 0; p < N_PLOTS; p++) {
        for (uint32_t i = 0; i < n_runs; i++) {
            FILE         *f;
            moon_status_t status;

            snprintf(path, sizeof(path), "%s/%s.%s.dat", dir, runs[i].label, plots[p].ext);
            f = fopen(path, "w");
            if (f == NULL) {
                MOON_ERROR("replay: cannot write %s: %s", path, strerror(errno));
                return MOON_ERR_IO;
            }
            status = plots[p].fn(&runs[i], ttft_slo_s, tbt_slo_s, f);
            if (fclose(f) != 0 && status == MOON_OK) {
                status = MOON_ERR_IO;
            }
            if (status != MOON_OK) {
                MOON_ERROR("replay: writing %s failed: %s", path, moon_status_str(status));
                return status;
            }
        }
    }
    return MOON_OK;
}

static moon_status_t write_script(const char *dir, const char *script,
                                  const moon_sim_plot_run_t *runs, uint32_t n_runs,
                                  double ttft_slo_s, double tbt_slo_s)
{
    FILE *f = fopen(script, "w");
    int   bad;

    if (f == NULL) {
        MOON_ERROR("replay: cannot write %s: %s", script, strerror(errno));
        return MOON_ERR_IO;
    }
    bad = fprintf(f,
                  "# moonlet replay plots (gnuplot); TTFT SLO %.3f s, TBT SLO %.3f s\n"
                  "set terminal pngcairo size 900,600 noenhanced\n",
                  ttft_slo_s, tbt_slo_s) < 0;
    for (size_t p = 0; p < N_PLOTS && !bad; p++) {
        bad = fprintf(f,
                      "reset\nset grid\nset key bottom right\nset output '%s/%s.png'\n"
                      "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\n%splot ",
                      dir, plots[p].png, plots[p].title, plots[p].xlabel, plots[p].ylabel,
                      plots[p].setup) < 0;
        for (uint32_t i = 0; i < n_runs && !bad; i++) {
            bad = fprintf(f, "%s'%s/%s.%s.dat' using 1:2 with %s title '%s'",
                          i ? ", \\\n     " : "", dir, runs[i].label, plots[p].ext,
                          plots[p].fn == slo_series ? "linespoints" : "lines", runs[i].label) < 0;
        }
        bad = bad || fprintf(f, "\nset output\n") < 0;
    }
    if (fclose(f) != 0 || bad) {
        MOON_ERROR("replay: writing %s failed", script);
        return MOON_ERR_IO;
    }
    return MOON_OK;
}

/* An empty data file makes gnuplot fail on its plot: true when any is. */
static int any_empty(const moon_sim_plot_run_t *runs, uint32_t n_runs)
{
    for (uint32_t i = 0; i < n_runs; i++) {
        uint32_t ok = 0;
        for (uint32_t k = 0; k < runs[i].recs->n; k++) {
            ok += runs[i].recs->recs[k].status == MOON_SIM_REQ_OK;
        }
        if (ok == 0) {
            return 1;
        }
    }
    return 0;
}

moon_status_t moon_sim_plot(const char *dir, const moon_sim_plot_run_t *runs, uint32_t n_runs,
                            double ttft_slo_s, double tbt_slo_s, const char *gnuplot)
{
    char          script[1100];
    char         *argv[3];
    pid_t         pid;
    int           ret, wstatus = 0;
    moon_status_t status;

    if (dir == NULL || runs == NULL || n_runs == 0 || strchr(dir, '\'') != NULL ||
        strlen(dir) > 1000) {
        return MOON_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < n_runs; i++) {
        if (!good_label(runs[i].label) || runs[i].recs == NULL) {
            MOON_ERROR("replay: bad plot label '%s'", runs[i].label ? runs[i].label : "(null)");
            return MOON_ERR_INVALID_PARAM;
        }
    }
    status = write_data(dir, runs, n_runs, ttft_slo_s, tbt_slo_s);
    if (status != MOON_OK) {
        return status;
    }
    snprintf(script, sizeof(script), "%s/plots.gp", dir);
    status = write_script(dir, script, runs, n_runs, ttft_slo_s, tbt_slo_s);
    if (status != MOON_OK) {
        return status;
    }
    if (any_empty(runs, n_runs)) {
        MOON_WARN("replay: a run completed no request: no plots drawn (data in %s)", dir);
        return MOON_ERR_UNSUPPORTED;
    }
    argv[0] = (char *)(gnuplot ? gnuplot : "gnuplot");
    argv[1] = script;
    argv[2] = NULL;
    ret     = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
    if (ret != 0) {
        MOON_WARN("replay: cannot run %s (%s): no plots drawn; install gnuplot-nox", argv[0],
                  strerror(ret));
        return MOON_ERR_UNSUPPORTED;
    }
    while (waitpid(pid, &wstatus, 0) < 0) {
        if (errno != EINTR) {
            MOON_WARN("replay: waiting for gnuplot failed: %s", strerror(errno));
            return MOON_ERR_UNSUPPORTED;
        }
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        MOON_WARN("replay: gnuplot failed on %s", script);
        return MOON_ERR_UNSUPPORTED;
    }
    return MOON_OK;
}
