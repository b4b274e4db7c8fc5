/* launch/cli/placement.h - where a serving rank's actors and threads run:
 * `moonlet serve --print-placement` prints it, and every start checks that
 * the rank's threads (runtime workers + its instances' engine threads) fit
 * the cores it has, warning with the counts that would fit when they do not
 * (the demo's 4 ranks on 2 cores). Main thread. */
#ifndef MOON_LAUNCH_CLI_PLACEMENT_H
#define MOON_LAUNCH_CLI_PLACEMENT_H

#include "moonlet/serve_cluster.h"

#include <stdint.h>
#include <stdio.h>

typedef struct {
    uint32_t rank, n_ranks;
    uint32_t split_hosts; /* --split-hosts (> 1: pseudo-host rank % N) */
    uint32_t workers;     /* the runtime's worker threads */
    int      pin_workers; /* the runtime pins worker i to core i */
} moon_cli_placement_t;

/* Checks this rank's threads against its cores (a warning naming what fits
 * when they oversubscribe them) and, with out, prints its placement line:
 * rank, host, local rank, actors, cores of its workers and engine threads,
 * device. Returns 1 when oversubscribed. */
int moon_cli_placement_report(const moon_serve_config_t *scfg, const moon_cli_placement_t *pl,
                              FILE *out);

#endif /* MOON_LAUNCH_CLI_PLACEMENT_H */
