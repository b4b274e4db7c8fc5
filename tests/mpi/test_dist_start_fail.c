/* tests/mpi/test_dist_start_fail.c - moon_dist_start's error paths. Each
 * allocation it makes before its first collective fails in turn, on every
 * rank alike (so no rank waits in a collective the others skipped): each
 * failure returns MOON_ERR_NO_MEMORY, leaves no file descriptor open (the
 * wake eventfd, the trace file) and leaves the runtime startable, so the next
 * start succeeds and runs. Before the fix, start set `started` first (a retry
 * was refused) and its one error label leaked the eventfd and the trace. */
#include "dist_test.h"

#include "moonlet/alloc.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

static char g_trace_dir[64];
static int  g_rt_started;

static int count_fds(void)
{
    DIR           *dir = opendir("/proc/self/fd");
    struct dirent *e;
    int            n = 0;

    if (dir == NULL) {
        return -1;
    }
    while ((e = readdir(dir)) != NULL) {
        n += e->d_name[0] != '.';
    }
    closedir(dir);
    return n;
}

static void test_each_failure_unwinds_and_retry_starts(void)
{
    moon_runtime_config_t cfg;
    int                   fds;
    uint32_t              n_allocs = 2 + g_size; /* peers, ready bits, one gate per rank */
    moon_status_t         status;
    char                  path[128];

    moon_runtime_config_default(&cfg);
    cfg.rank        = g_rank;
    cfg.n_workers   = 1;
    cfg.pin_workers = 0;
    CU_ASSERT_EQUAL_FATAL(moon_runtime_create(&cfg, &g_rt), MOON_OK);
    fds = count_fds();
    CU_ASSERT(fds > 0);
    for (uint32_t n = 1; n <= n_allocs; n++) {
        moon_fault_fail_after_here(n);
        status = moon_dist_start(g_dist, g_rt);
        moon_fault_reset();
        CU_ASSERT_EQUAL(status, MOON_ERR_NO_MEMORY);
        CU_ASSERT_EQUAL(count_fds(), fds); /* eventfd and trace closed again */
        if (status != MOON_ERR_NO_MEMORY || count_fds() != fds) {
            printf("rank %u: allocation %u: %s, %d fds (%d before)\n", g_rank, n,
                   moon_status_str(status), count_fds(), fds);
        }
    }
    /* a failed start changed nothing: this one succeeds, and messages flow */
    CU_ASSERT_EQUAL_FATAL(moon_dist_start(g_dist, g_rt), MOON_OK);
    CU_ASSERT_EQUAL(moon_dist_start(g_dist, g_rt), MOON_ERR_INVALID_PARAM); /* started */
    CU_ASSERT_EQUAL_FATAL(moon_runtime_start(g_rt), MOON_OK);
    g_rt_started = 1;
    snprintf(path, sizeof(path), "%s/trace.%u.log", g_trace_dir, g_rank);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    moon_dist_barrier(g_dist);
}

int main(int argc, char **argv)
{
    moon_dist_config_t dcfg;
    int                failures, all;
    char               path[128];

    if (moon_dist_config_default(&dcfg) != MOON_OK) {
        return 1;
    }
    snprintf(g_trace_dir, sizeof(g_trace_dir), "/tmp/moon_start_fail_XXXXXX");
    if (mkdtemp(g_trace_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    dcfg.trace_dir = g_trace_dir;
    if (moon_dist_init(&argc, &argv, &dcfg, &g_dist) != MOON_OK) {
        return 1;
    }
    g_rank = moon_dist_rank(g_dist);
    g_size = moon_dist_size(g_dist);
    if (g_size < 2) {
        moon_test_skip("needs 2 ranks (mpirun -n 2)");
        moon_dist_finalize(g_dist);
        rmdir(g_trace_dir);
        return 0;
    }
    failures =
        MOON_TEST_RUN("dist_start_fail", NULL, NULL, test_each_failure_unwinds_and_retry_starts);
    all = failures;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_rt_started) {
        moon_runtime_shutdown(g_rt, 0);
        moon_runtime_wait(g_rt);
    }
    moon_dist_stop(g_dist);
    moon_runtime_destroy(g_rt);
    moon_dist_finalize(g_dist);
    snprintf(path, sizeof(path), "%s/trace.%u.log", g_trace_dir, g_rank);
    unlink(path);
    rmdir(g_trace_dir);
    return all != 0;
}
