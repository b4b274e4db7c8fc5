/* launch/sim/sim_plot.h - the replay's plots, drawn by gnuplot (Debian
 * gnuplot-nox) from data files this module writes into the output folder:
 *   ttft_cdf.png        TTFT CDF, one line per run (policy), log-scale x
 *   tbt_cdf.png         TBT CDF per run
 *   slo_attainment.png  share of requests meeting TTFT <= the TTFT SLO and
 *                       TBT <= x, against the TBT threshold x (Mooncake's
 *                       Figure 11 style)
 *   cache_hit.png       cache hit ratio per 60 s arrival window
 * The data files are LABEL.ttft.dat, LABEL.tbt.dat, LABEL.slo.dat,
 * LABEL.hit.dat and the script plots.gp; they stay for other tools.
 * Single-threaded; runs gnuplot as a child process and waits for it. */
#ifndef MOON_LAUNCH_SIM_PLOT_H
#define MOON_LAUNCH_SIM_PLOT_H

#include "sim_report.h"

typedef struct {
    const char               *label; /* [A-Za-z0-9_.+-], the run's policy */
    const moon_sim_records_t *recs;  /* borrowed */
} moon_sim_plot_run_t;

/* Writes the data files and the script into dir (which must exist), then
 * runs gnuplot (the program gnuplot; NULL: "gnuplot" on PATH).
 * MOON_ERR_INVALID_PARAM: no runs, a bad label or a dir with a quote;
 * MOON_ERR_IO: a file could not be written; MOON_ERR_UNSUPPORTED (logged as
 * a warning): gnuplot is missing or failed (the data files are there). */
moon_status_t moon_sim_plot(const char *dir, const moon_sim_plot_run_t *runs, uint32_t n_runs,
                            double ttft_slo_s, double tbt_slo_s, const char *gnuplot);

#endif /* MOON_LAUNCH_SIM_PLOT_H */
