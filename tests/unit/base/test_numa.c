/* tests/unit/base/test_numa.c - memory bound to the NUMA node of the cores
 * that use it: the kernel's policy for the range names that node afterwards
 * (read back through hwloc, independently of moon_numa_*), pages touched
 * before the call are on it too, and bad ranges are refused. On a machine
 * of one node the node is 0; the policy still shows the binding. */
#include "moonlet/alloc.h"
#include "moonlet/numa.h"

#include "moon_test.h"

#include <hwloc.h>
#include <stdio.h>
#include <string.h>

#define AREA (8u << 20)

static hwloc_topology_t topo;
static int              supported = -1; /* the kernel lets a process bind memory */

static int setup(void)
{
    return hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0;
}

static int teardown(void)
{
    hwloc_topology_destroy(topo);
    return 0;
}

/* The node of core 0, as hwloc sees it. */
static int core0_node(void)
{
    hwloc_obj_t     core  = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, 0);
    hwloc_nodeset_t nodes = hwloc_bitmap_alloc();
    int             node;

    hwloc_cpuset_to_nodeset(topo, core->cpuset, nodes);
    node = hwloc_bitmap_first(nodes);
    hwloc_bitmap_free(nodes);
    return node;
}

/* 1 when the policy of [p, p + len) is BIND to exactly node. */
static int bound_to(void *p, size_t len, int node)
{
    hwloc_nodeset_t        nodes  = hwloc_bitmap_alloc();
    hwloc_membind_policy_t policy = HWLOC_MEMBIND_DEFAULT;
    int                    ok;

    ok = hwloc_get_area_membind(topo, p, len, nodes, &policy, HWLOC_MEMBIND_BYNODESET) == 0 &&
         policy == HWLOC_MEMBIND_BIND && hwloc_bitmap_weight(nodes) == 1 &&
         hwloc_bitmap_first(nodes) == node;
    hwloc_bitmap_free(nodes);
    return ok;
}

/* Binds a fresh area to core 0's node; 0 (with a message) when the kernel
 * does not let this process bind memory at all. */
static char *bound_area(int touch_first)
{
    char   *p    = moon_aligned_alloc(4096, AREA);
    int32_t node = -2;

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    if (touch_first) {
        memset(p, 1, AREA);
    }
    moon_status_t st = moon_numa_bind(p, AREA, 0, &node);
    if (st == MOON_ERR_UNSUPPORTED && supported != 1) {
        supported = 0;
        printf("\n  skipped: this kernel or container refuses memory binding (mbind)\n");
        moon_free(p);
        return NULL;
    }
    supported = 1;
    CU_ASSERT_EQUAL(st, MOON_OK);
    CU_ASSERT_EQUAL(node, core0_node());
    return p;
}

static void test_fresh_area_is_bound_and_touched_there(void)
{
    char *p = bound_area(0);

    if (p == NULL) {
        return;
    }
    CU_ASSERT_TRUE(bound_to(p, AREA, core0_node()));
    memset(p, 2, AREA);
    CU_ASSERT_EQUAL(moon_numa_node_of(p, AREA), core0_node());
    moon_free(p);
}

static void test_touched_area_moves_to_the_node(void)
{
    char *p = bound_area(1);

    if (p == NULL) {
        return;
    }
    CU_ASSERT_TRUE(bound_to(p, AREA, core0_node()));
    CU_ASSERT_EQUAL(moon_numa_node_of(p, AREA), core0_node());
    CU_ASSERT_EQUAL(p[AREA - 1], 1); /* moving kept the bytes */
    moon_free(p);
}

static void test_unbound_area_has_the_default_policy(void)
{
    char *p = moon_aligned_alloc(4096, AREA);

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    memset(p, 0, AREA);
    CU_ASSERT_FALSE(bound_to(p, AREA, core0_node())); /* so bound_to tells the two apart */
    moon_free(p);
}

static void test_process_cores_node(void)
{
    char   *p    = moon_aligned_alloc(4096, AREA);
    int32_t node = -2;
    char    text[64];

    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    if (moon_numa_bind(p, AREA, -1, &node) == MOON_OK) {
        CU_ASSERT_TRUE(node >= 0);
        CU_ASSERT_TRUE(bound_to(p, AREA, node) ||
                       hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) > 1);
    }
    moon_numa_nodes_text(text, sizeof(text));
    CU_ASSERT_TRUE(text[0] >= '0' && text[0] <= '9');
    moon_free(p);
}

static void test_bad_ranges_are_refused(void)
{
    char    buf[64];
    int32_t node = -2;

    CU_ASSERT_EQUAL(moon_numa_bind(NULL, 4096, 0, &node), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(moon_numa_bind(buf, 0, 0, &node), MOON_ERR_INVALID_PARAM);
    CU_ASSERT_EQUAL(node, -2);
    CU_ASSERT_EQUAL(moon_numa_node_of(NULL, 4096), -1);
    moon_numa_nodes_text(buf, 0); /* no room: nothing written, no crash */
}

MOON_TEST_MAIN("numa", setup, teardown, test_fresh_area_is_bound_and_touched_there,
               test_touched_area_moves_to_the_node, test_unbound_area_has_the_default_policy,
               test_process_cores_node, test_bad_ranges_are_refused)
