/* tests/serve/test_serve_start_fail.c - a serving cluster whose start fails on
 * one rank fails on every rank, with the same status, instead of leaving the
 * others waiting at a barrier (the CTest timeout catches a hang). Under
 * mpirun -np 4 (conductor on rank 0, store 1, prefill 2, decode 3):
 *   --fail model   rank 2 is given a model file that does not exist;
 *   --fail ssd     the store's SSD file lies in a folder that does not exist
 *                  (only the store's rank opens it). */
#include "moon_test.h"
#include "moonlet/dist.h"
#include "moonlet/runtime.h"
#include "moonlet/serve_cluster.h"

#include <stdio.h>
#include <string.h>

#ifndef MOON_TEST_DATA_DIR
#error "MOON_TEST_DATA_DIR must point at tests/data"
#endif
#define MODEL MOON_TEST_DATA_DIR "/../../examples/models/stories260K/stories260K.gguf"

static moon_dist_t    *g_dist;
static moon_runtime_t *g_rt;
static const char     *g_fail = "model";

static void test_start_fails_everywhere(void)
{
    moon_serve_config_t   cfg;
    moon_serve_cluster_t *cluster = NULL;
    moon_status_t         status;

    moon_serve_config_default(&cfg);
    cfg.model_path     = MODEL;
    cfg.store_dram_mib = 4;
    if (strcmp(g_fail, "model") == 0 && moon_dist_rank(g_dist) == 2) {
        cfg.model_path = MOON_TEST_DATA_DIR "/no-such-model.gguf";
    } else if (strcmp(g_fail, "ssd") == 0) {
        cfg.store_ssd     = MOON_TEST_DATA_DIR "/no-such-folder";
        cfg.store_ssd_mib = 4;
    }
    status = moon_serve_cluster_start(&cfg, g_rt, g_dist, &cluster);
    CU_ASSERT(status != MOON_OK);
    CU_ASSERT(cluster == NULL);
    /* every rank got the same answer: the minimum over the ranks is ours */
    CU_ASSERT_EQUAL(moon_dist_agree(g_dist, status), status);
    if (status == MOON_OK) {
        moon_serve_cluster_stop(cluster);
    }
}

/* Agreement itself: one rank's error reaches every rank; all OK stays OK. */
static void test_agree(void)
{
    uint32_t me = moon_dist_rank(g_dist);

    CU_ASSERT_EQUAL(moon_dist_agree(g_dist, MOON_OK), MOON_OK);
    CU_ASSERT_EQUAL(moon_dist_agree(g_dist, me == 1 ? MOON_ERR_NO_MEMORY : MOON_OK),
                    MOON_ERR_NO_MEMORY);
    CU_ASSERT_EQUAL(moon_dist_agree(g_dist, me == 0 ? MOON_ERR_IO : MOON_ERR_NO_MEMORY),
                    MOON_ERR_IO < MOON_ERR_NO_MEMORY ? MOON_ERR_IO : MOON_ERR_NO_MEMORY);
    CU_ASSERT_EQUAL(moon_dist_agree(NULL, MOON_ERR_IO), MOON_ERR_IO);
}

int main(int argc, char **argv)
{
    moon_runtime_config_t rcfg;
    int                   rc;

    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--fail") == 0) {
            g_fail = argv[i + 1];
        }
    }
    if (moon_dist_init(&argc, &argv, NULL, &g_dist) != MOON_OK) {
        return 1;
    }
    if (moon_dist_size(g_dist) != 4) {
        fprintf(stderr, "test_serve_start_fail: run under mpirun -np 4\n");
        return 1;
    }
    moon_runtime_config_default(&rcfg);
    rcfg.n_workers = 1;
    rcfg.rank      = moon_dist_rank(g_dist);
    if (moon_runtime_create(&rcfg, &g_rt) != MOON_OK || moon_dist_start(g_dist, g_rt) != MOON_OK ||
        moon_runtime_start(g_rt) != MOON_OK) {
        return 1;
    }
    rc = MOON_TEST_RUN("serve_start_fail", NULL, NULL, test_agree, test_start_fails_everywhere);
    moon_dist_barrier(g_dist);
    moon_runtime_shutdown(g_rt, 0);
    moon_runtime_wait(g_rt);
    moon_dist_stop(g_dist);
    moon_runtime_destroy(g_rt);
    moon_dist_finalize(g_dist);
    return rc;
}
