/* tests/mpi/dist_test.h - shared set-up for multi-rank tests: every rank runs
 * the same CUnit suite in the same order (tests are collective), and rank 0's
 * exit status reflects all ranks (MPI_Allreduce of failures). */
#ifndef MOON_TEST_DIST_TEST_H
#define MOON_TEST_DIST_TEST_H

#include "moon_test.h"

#include "moonlet/dist.h"
#include "moonlet/runtime.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static moon_dist_t    *g_dist;
static moon_runtime_t *g_rt;
static uint32_t        g_rank, g_size;

/* Starts MPI, a runtime with one worker and the distributed layer. */
static inline int dist_test_setup(int *argc, char ***argv, const moon_dist_config_t *dcfg,
                                  uint32_t mailbox_bound)
{
    moon_runtime_config_t cfg;

    if (moon_dist_init(argc, argv, dcfg, &g_dist) != MOON_OK) {
        fprintf(stderr, "moon_dist_init failed\n");
        return -1;
    }
    g_rank = moon_dist_rank(g_dist);
    g_size = moon_dist_size(g_dist);
    moon_runtime_config_default(&cfg);
    cfg.rank        = g_rank;
    cfg.n_workers   = 1;
    cfg.pin_workers = 0;
    cfg.max_actors  = 4096;
    if (mailbox_bound) {
        cfg.mailbox_bound = mailbox_bound;
    }
    if (moon_runtime_create(&cfg, &g_rt) != MOON_OK || moon_dist_start(g_dist, g_rt) != MOON_OK ||
        moon_runtime_start(g_rt) != MOON_OK) {
        fprintf(stderr, "rank %u: runtime or transport start failed\n", g_rank);
        return -1;
    }
    return 0;
}

/* A region a test leaves registered on purpose: moon_dist_stop must release
 * it (with a warning, not UCX's abort), and deregistering it afterwards only
 * frees it. */
static moon_dist_region_t *g_region_left_on_stop;

/* Ends everything; returns the job-wide failure flag (same on every rank). */
static inline int dist_test_teardown(int failures)
{
    int all = failures;

    if (moon_dist_size(g_dist) > 1) {
        MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_dist_stop(g_dist);
    moon_dist_region_deregister(g_dist, g_region_left_on_stop);
    moon_runtime_destroy(g_rt);
    moon_dist_finalize(g_dist);
    if (g_rank == 0) {
        printf("dist test: %s on all ranks\n", all ? "FAILED" : "passed");
    }
    return all != 0;
}

/* Waits until *flag is non-zero or timeout_s passes; 1 if set. */
static inline int dist_test_wait(_Atomic int *flag, double timeout_s)
{
    double end = moon_test_now_s() + timeout_s;

    while (!atomic_load(flag)) {
        struct timespec ts = {0, 1000000};
        if (moon_test_now_s() > end) {
            return 0;
        }
        nanosleep(&ts, NULL);
    }
    return 1;
}

/* 1 on every rank if cond held on every rank. */
static inline int dist_test_all(int cond)
{
    int all = cond;

    if (g_size > 1) {
        MPI_Allreduce(&cond, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    }
    return all;
}

#endif /* MOON_TEST_DIST_TEST_H */
