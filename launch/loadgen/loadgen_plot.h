/* launch/loadgen/loadgen_plot.h - PNG plots of a `moonlet bench` run, drawn by gnuplot
 * (Debian's gnuplot-nox): TTFT and TPOT CDFs and output throughput over time.
 * The data files and the script stay beside the images so a plot can be
 * redrawn or restyled. Single-threaded; runs gnuplot as a child process. */
#ifndef MOON_LAUNCH_BENCH_PLOT_H
#define MOON_LAUNCH_BENCH_PLOT_H

#include "loadgen_stats.h"

#include "moonlet/status.h"

/* Writes ttft.dat, tpot.dat, throughput.dat and plots.gp into dir (made if
 * missing, one level), then runs gnuplot there to draw ttft_cdf.png,
 * tpot_cdf.png and throughput.png (gnuplot's messages go to gnuplot.log).
 * Errors: MOON_ERR_UNSUPPORTED (no gnuplot to run: data and script are
 * written, no image), MOON_ERR_IO (a file could not be written, or gnuplot
 * failed; logged), MOON_ERR_NO_MEMORY. */
moon_status_t moon_loadgen_plot(const char *dir, const moon_loadgen_result_t *results, uint32_t n,
                                double duration_s);

#endif /* MOON_LAUNCH_BENCH_PLOT_H */
