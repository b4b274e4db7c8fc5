/* launch/loadgen/loadgen_plot.c - data files, gnuplot script and the gnuplot run of
 * `moonlet bench --plot-dir` (loadgen_plot.h). */
#include "loadgen_plot.h"

#include "moonlet/alloc.h"
#include "moonlet/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y ? 1 : 0;
}

static FILE *open_in(const char *dir, const char *name)
{
    char  path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    if (f == NULL) {
        MOON_ERROR("bench: cannot write %s: %s", path, strerror(errno));
    }
    return f;
}

/* Writes the CDF of x[0..n) in ms; returns -1 on an I/O error. */
static int write_cdf(const char *dir, const char *name, double *x, size_t n)
{
    FILE *f = open_in(dir, name);
    int   bad;

    if (f == NULL) {
        return -1;
    }
    qsort(x, n, sizeof(*x), cmp_double);
    fprintf(f, "# ms fraction\n");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%.6f %.6f\n", x[i] * 1e3, (double)(i + 1) / (double)n);
    }
    bad = ferror(f);
    return fclose(f) != 0 || bad ? -1 : 0;
}

static int write_series(const char *dir, const double *rate, uint32_t n_buckets, double bucket_s)
{
    FILE *f = open_in(dir, "throughput.dat");
    int   bad;

    if (f == NULL) {
        return -1;
    }
    fprintf(f, "# seconds output_tokens_per_s\n");
    for (uint32_t b = 0; b < n_buckets; b++) {
        fprintf(f, "%.6f %.6f\n", (b + 0.5) * bucket_s, rate[b]);
    }
    bad = ferror(f);
    return fclose(f) != 0 || bad ? -1 : 0;
}

static void plot_cmd(FILE *f, const char *png, const char *title, const char *xlabel,
                     const char *dat, const char *style)
{
    fprintf(f,
            "set output '%s'\nset title '%s'\nset xlabel '%s'\n"
            "plot '%s' using 1:2 with %s lw 2\n",
            png, title, xlabel, dat, style);
}

static int write_script(const char *dir, size_t n_ttft, size_t n_tpot)
{
    FILE *f = open_in(dir, "plots.gp");
    int   bad;

    if (f == NULL) {
        return -1;
    }
    fprintf(f, "# moonlet bench plots: gnuplot plots.gp (in this folder)\n"
               "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "    set terminal pngcairo size 800,500 noenhanced\n"
               "} else {\n"
               "    set terminal png size 800,500 noenhanced\n"
               "}\n"
               "set grid\nset key off\nset ylabel 'fraction of requests'\nset yrange [0:1]\n");
    if (n_ttft > 0) {
        plot_cmd(f, "ttft_cdf.png", "Time to first token (CDF)", "TTFT (ms)", "ttft.dat", "steps");
    }
    if (n_tpot > 0) {
        plot_cmd(f, "tpot_cdf.png", "Time per output token (CDF)", "TPOT (ms)", "tpot.dat",
                 "steps");
    }
    fprintf(f, "set ylabel 'output tokens/s'\nset autoscale y\nset yrange [0:*]\n");
    plot_cmd(f, "throughput.png", "Output throughput over time", "time since start (s)",
             "throughput.dat", "lines");
    bad = ferror(f);
    return fclose(f) != 0 || bad ? -1 : 0;
}

static moon_status_t run_gnuplot(const char *dir)
{
    pid_t pid;
    int   wstatus;

    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        MOON_ERROR("bench: fork for gnuplot failed: %s", strerror(errno));
        return MOON_ERR_IO;
    }
    if (pid == 0) {
        int fd;
        if (chdir(dir) != 0) {
            _exit(126);
        }
        fd = open("gnuplot.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execlp("gnuplot", "gnuplot", "plots.gp", (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &wstatus, 0) < 0) {
        if (errno != EINTR) {
            MOON_ERROR("bench: waiting for gnuplot failed: %s", strerror(errno));
            return MOON_ERR_IO;
        }
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 127) {
        return MOON_ERR_UNSUPPORTED; /* exec found no gnuplot */
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        MOON_ERROR("bench: gnuplot failed (status %d): see %s/gnuplot.log",
                   WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1, dir);
        return MOON_ERR_IO;
    }
    return MOON_OK;
}

moon_status_t moon_loadgen_plot(const char *dir, const moon_loadgen_result_t *results, uint32_t n,
                                double duration_s)
{
    double   bucket_s  = duration_s >= 20 ? 1.0 : (duration_s > 0.2 ? duration_s / 20 : 0.01);
    uint32_t n_buckets = (uint32_t)(duration_s / bucket_s) + 1;
    double  *ttft      = moon_calloc(n + 1, sizeof(double));
    double  *tpot      = moon_calloc(n + 1, sizeof(double));
    double  *rate      = moon_calloc(n_buckets, sizeof(double));
    size_t   n_ttft = 0, n_tpot = 0;
    int      bad;

    if (ttft == NULL || tpot == NULL || rate == NULL) {
        moon_free(ttft);
        moon_free(tpot);
        moon_free(rate);
        return MOON_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (results[i].ok) {
            ttft[n_ttft++] = results[i].ttft_s;
            if (results[i].n_out > 1) {
                tpot[n_tpot++] = moon_loadgen_tpot(&results[i]);
            }
        }
    }
    moon_loadgen_throughput_series(results, n, bucket_s, rate, n_buckets);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        MOON_ERROR("bench: cannot make %s: %s", dir, strerror(errno));
        bad = 1;
    } else {
        bad = write_cdf(dir, "ttft.dat", ttft, n_ttft) != 0 ||
              write_cdf(dir, "tpot.dat", tpot, n_tpot) != 0 ||
              write_series(dir, rate, n_buckets, bucket_s) != 0 ||
              write_script(dir, n_ttft, n_tpot) != 0;
    }
    moon_free(ttft);
    moon_free(tpot);
    moon_free(rate);
    return bad ? MOON_ERR_IO : run_gnuplot(dir);
}
