/* tests/unit/sim/test_sim_net.c - the network model against durations
 * computed by hand: 4 NICs of 25 GB/s per node, 10 us latency, store DRAM at
 * 10 GB/s and SSD at 2 GB/s. 100 MB striped over 4 NICs = 1 ms of wire. */
#include "moon_test.h"
#include "sim_net.h"

#include "moonlet/log.h"

#define MB 1000000ull
#define MS 1000000ull /* ns */
#define US 1000ull

static moon_sim_net_t *make(uint32_t nodes, double ssd)
{
    moon_sim_net_config_t c   = {.n_nodes          = nodes,
                                 .nics_per_node    = 4,
                                 .nic_bytes_per_s  = 25e9,
                                 .latency_s        = 10e-6,
                                 .dram_bytes_per_s = 10e9,
                                 .ssd_bytes_per_s  = ssd};
    moon_sim_net_t       *net = NULL;

    CU_ASSERT_EQUAL_FATAL(moon_sim_net_create(&c, &net), MOON_OK);
    return net;
}

static uint64_t xfer(moon_sim_net_t *net, uint64_t now, uint32_t src, moon_sim_media_t sm,
                     uint32_t dst, moon_sim_media_t dm, uint64_t bytes)
{
    uint64_t done = 0;

    CU_ASSERT_EQUAL(moon_sim_net_transfer(net, now, src, sm, dst, dm, bytes, &done), MOON_OK);
    return done;
}

#define HBM MOON_SIM_MEDIA_HBM
#define DRAM MOON_SIM_MEDIA_DRAM
#define SSD MOON_SIM_MEDIA_SSD

static void test_idle_handover(void)
{
    moon_sim_net_t *net = make(4, 2e9);

    /* 25 MB per NIC at 25 GB/s = 1 ms, + 10 us */
    CU_ASSERT_EQUAL(moon_sim_net_idle_ns(net, 0, HBM, HBM, 100 * MB), 1 * MS + 10 * US);
    CU_ASSERT_EQUAL(xfer(net, 0, 0, HBM, 1, HBM, 100 * MB), 1 * MS + 10 * US);
    /* another pair is independent */
    CU_ASSERT_EQUAL(xfer(net, 0, 2, HBM, 3, HBM, 100 * MB), 1 * MS + 10 * US);
    /* a later start on free lanes */
    CU_ASSERT_EQUAL(xfer(net, 5 * MS, 0, HBM, 1, HBM, 100 * MB), 6 * MS + 10 * US);
    /* 0 bytes: now, nothing booked */
    CU_ASSERT_EQUAL(xfer(net, 7 * MS, 0, HBM, 1, HBM, 0), 7 * MS);
    moon_sim_net_destroy(net);
}

static void test_nic_contention(void)
{
    moon_sim_net_t *net = make(4, 2e9);

    /* node 0 sends to 1, then to 2: node 0's egress is busy for the first ms */
    CU_ASSERT_EQUAL(xfer(net, 0, 0, HBM, 1, HBM, 100 * MB), 1 * MS + 10 * US);
    CU_ASSERT_EQUAL(xfer(net, 0, 0, HBM, 2, HBM, 100 * MB), 2 * MS + 10 * US);
    /* node 3 sends to 2: node 2's ingress is busy until 2 ms */
    CU_ASSERT_EQUAL(xfer(net, 0, 3, HBM, 2, HBM, 100 * MB), 3 * MS + 10 * US);
    moon_sim_net_destroy(net);
    /* eight moves between one pair take eight times one: bandwidth is shared */
    net = make(2, 0);
    for (uint64_t i = 1; i <= 8; i++) {
        CU_ASSERT_EQUAL(xfer(net, 0, 0, HBM, 1, HBM, 100 * MB), i * MS + 10 * US);
    }
    /* a half-size move: four stripes of 12.5 MB (0.5 ms each) on lanes free
     * at 8 ms */
    CU_ASSERT_EQUAL(xfer(net, 0, 0, HBM, 1, HBM, 50 * MB), 8 * MS + 500 * US + 10 * US);
    moon_sim_net_destroy(net);
}

static void test_store_media(void)
{
    moon_sim_net_t      *net = make(3, 2e9);
    moon_sim_net_stats_t st;

    /* store DRAM of node 1 -> prefill on node 0: DRAM's 10 ms dominate */
    CU_ASSERT_EQUAL(moon_sim_net_idle_ns(net, 0, DRAM, HBM, 100 * MB), 10 * MS + 10 * US);
    CU_ASSERT_EQUAL(xfer(net, 0, 1, DRAM, 0, HBM, 100 * MB), 10 * MS + 10 * US);
    /* a second read of the same DRAM waits its turn: 20 ms */
    CU_ASSERT_EQUAL(xfer(net, 0, 1, DRAM, 2, HBM, 100 * MB), 20 * MS + 10 * US);
    /* SSD at 2 GB/s: 50 ms; on the same node: no NIC, no latency */
    CU_ASSERT_EQUAL(xfer(net, 0, 2, SSD, 0, HBM, 100 * MB), 50 * MS + 10 * US);
    CU_ASSERT_EQUAL(xfer(net, 0, 0, DRAM, 0, HBM, 100 * MB), 10 * MS);
    CU_ASSERT_EQUAL(moon_sim_net_idle_ns(net, 1, HBM, DRAM, 100 * MB), 10 * MS);
    /* a put into a store's DRAM from prefill's HBM: write lane of node 2 */
    CU_ASSERT_EQUAL(xfer(net, 0, 0, HBM, 2, DRAM, 100 * MB), 10 * MS + 10 * US);
    moon_sim_net_stats(net, &st);
    CU_ASSERT_EQUAL(st.n_transfers, 5);
    CU_ASSERT_EQUAL(st.bytes_between_nodes, 400 * MB);
    CU_ASSERT_EQUAL(st.bytes_within_nodes, 100 * MB);
    moon_sim_net_destroy(net);
}

static void test_bad_input(void)
{
    moon_sim_net_t       *net = make(2, 0);
    moon_sim_net_config_t c   = {
          .n_nodes = 2, .nics_per_node = 0, .nic_bytes_per_s = 1, .dram_bytes_per_s = 1};
    moon_sim_net_t *bad  = NULL;
    uint64_t        done = 42;

    CU_ASSERT_EQUAL(moon_sim_net_transfer(net, 0, 2, HBM, 0, HBM, 10, &done),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_sim_net_transfer(net, 0, 0, SSD, 1, HBM, 10, &done),
                    MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(done, 42);
    CU_ASSERT_EQUAL(moon_sim_net_idle_ns(net, 0, SSD, HBM, 10), UINT64_MAX);
    moon_log_set_level(0);
    CU_ASSERT_EQUAL(moon_sim_net_create(&c, &bad), MOON_ERR_INVALID_PARAM);
    c.nics_per_node = 1;
    c.latency_s     = -1;
    CU_ASSERT_EQUAL(moon_sim_net_create(&c, &bad), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_PTR_NULL(bad);
    moon_log_set_level(MOON_LOG_WARN);
    moon_sim_net_destroy(net);
}

/* The profile's fabric: 4 x 200 Gbps at 87 % = 87 GB/s per node; one 512-token
 * block of LLaMA3-70B (160 MiB) crosses in 1.93 ms + 20 us. */
static void test_from_profile(void)
{
    moon_profile_t        p;
    moon_sim_net_config_t c;
    moon_sim_net_t       *net   = NULL;
    uint64_t              block = 512ull * 327680;

    CU_ASSERT_EQUAL_FATAL(moon_profile_load(MOON_PROFILE_DEFAULT, MOON_PROFILE_DIR, &p, NULL),
                          MOON_OK);
    c = moon_sim_net_config_from_profile(&p, 16);
    CU_ASSERT_EQUAL(c.n_nodes, 16);
    CU_ASSERT_EQUAL(c.nics_per_node, 4);
    CU_ASSERT_DOUBLE_EQUAL(c.nic_bytes_per_s, 21.75e9, 1.0);
    CU_ASSERT_EQUAL_FATAL(moon_sim_net_create(&c, &net), MOON_OK);
    CU_ASSERT_EQUAL(moon_sim_net_idle_ns(net, 0, HBM, HBM, block),
                    (uint64_t)(block / 4 / 21.75e9 * 1e9 + 0.5) + 20 * US);
    moon_sim_net_destroy(net);
}

MOON_TEST_MAIN("sim_net", NULL, NULL, test_idle_handover, test_nic_contention, test_store_media,
               test_bad_input, test_from_profile)
