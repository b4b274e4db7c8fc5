/* tests/unit/runtime/test_dist_config.c - the distributed runtime's options:
 * table defaults, MOON_* variables read by moon_dist_config_default (and by
 * moon_dist_init without a config), a malformed one refused. Single rank, no
 * mpirun. */
#include "moonlet/dist.h"

#include "moon_test.h"

#include <stdlib.h>

static void test_defaults(void)
{
    moon_dist_config_t c;

    unsetenv("MOON_TRANSPORT");
    unsetenv("MOON_PEER_TIMEOUT_MS");
    CU_ASSERT_EQUAL_FATAL(moon_dist_config_default(&c), MOON_OK);
    CU_ASSERT_EQUAL(c.transport, MOON_DIST_TRANSPORT_AUTO);
    CU_ASSERT_EQUAL(c.credits, 1024);
    CU_ASSERT_EQUAL(c.batch_bytes, 16384);
    CU_ASSERT_EQUAL(c.peer_timeout_ms, 2000);
    CU_ASSERT_EQUAL(c.slice_bytes, 0);
    CU_ASSERT_PTR_NULL(c.trace_dir);
    CU_ASSERT_EQUAL(c.spin_passes, 256);
    CU_ASSERT(c.images && c.direct && c.worker_poll && c.shm_rings);
    CU_ASSERT_EQUAL(c.split_hosts, 0);
    CU_ASSERT_EQUAL(c.shm_ring_kib, 256);
    CU_ASSERT_EQUAL(moon_dist_config_default(NULL), MOON_ERR_INVALID_PARAM);
}

static void test_environment(void)
{
    moon_dist_config_t c;

    setenv("MOON_TRANSPORT", "mpi", 1);
    setenv("MOON_SLICE_BYTES", "256k", 1);
    setenv("MOON_DIST_IMAGES", "0", 1);
    CU_ASSERT_EQUAL_FATAL(moon_dist_config_default(&c), MOON_OK);
    CU_ASSERT_EQUAL(c.transport, MOON_DIST_TRANSPORT_MPI);
    CU_ASSERT_EQUAL(c.slice_bytes, 256u << 10);
    CU_ASSERT_EQUAL(c.images, 0);
    unsetenv("MOON_TRANSPORT");
    unsetenv("MOON_SLICE_BYTES");
    unsetenv("MOON_DIST_IMAGES");
}

static void test_malformed_variable_refused(void)
{
    moon_dist_config_t c;
    moon_dist_t       *d = NULL;

    setenv("MOON_PEER_TIMEOUT_MS", "20s", 1);
    CU_ASSERT_EQUAL(moon_dist_config_default(&c), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(c.peer_timeout_ms, 2000); /* the defaults only */
    CU_ASSERT_EQUAL(moon_dist_init(NULL, NULL, NULL, &d), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(d);
    unsetenv("MOON_PEER_TIMEOUT_MS");
    setenv("MOON_TRANSPORT", "tcp", 1);
    CU_ASSERT_EQUAL(moon_dist_config_default(&c), MOON_ERR_INVALID_PARAM);
    unsetenv("MOON_TRANSPORT");
}

MOON_TEST_MAIN("dist_config", NULL, NULL, test_defaults, test_environment,
               test_malformed_variable_refused)
