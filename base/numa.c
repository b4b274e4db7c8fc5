/* base/numa.c - binding memory to the NUMA nodes of the cores that use it,
 * over the topology of topo.h. */
#include "moonlet/numa.h"

#include "moonlet/cpu.h"
#include "moonlet/log.h"
#include "topo.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The nodes of core (core >= 0) or of this process's cores into nodes;
 * 0 when they could not be found. */
static int nodes_of(hwloc_topology_t topo, int32_t core, hwloc_nodeset_t nodes)
{
    hwloc_cpuset_t cpus = hwloc_bitmap_alloc();
    int            ok   = 0;

    if (cpus == NULL) {
        return 0;
    }
    if (core >= 0) {
        hwloc_obj_t obj =
            hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)core % moon_cpu_count());
        ok = obj != NULL && hwloc_bitmap_copy(cpus, obj->cpuset) == 0;
    } else {
        ok = hwloc_get_cpubind(topo, cpus, HWLOC_CPUBIND_PROCESS) == 0;
    }
    if (ok) {
        hwloc_cpuset_to_nodeset(topo, cpus, nodes);
        ok = !hwloc_bitmap_iszero(nodes);
    }
    hwloc_bitmap_free(cpus);
    return ok;
}

moon_status_t moon_numa_bind(void *addr, size_t len, int32_t core, int32_t *node_p)
{
    hwloc_topology_t topo = moon_topo();
    hwloc_nodeset_t  nodes;
    int              rc;

    if (addr == NULL || len == 0) {
        return MOON_ERR_INVALID_PARAM;
    }
    if (topo == NULL || (nodes = hwloc_bitmap_alloc()) == NULL) {
        return MOON_ERR_UNSUPPORTED;
    }
    if (!nodes_of(topo, core, nodes)) {
        hwloc_bitmap_free(nodes);
        MOON_WARN("numa: no node found for %s %d: %zu bytes stay where they are",
                  core >= 0 ? "core" : "the process's cores", core, len);
        return MOON_ERR_UNSUPPORTED;
    }
    /* Moving pages that another process maps too (a shared-memory segment
     * a peer opened) can be refused: bind without moving them then, so at
     * least the pages touched from now on land on the node. */
    rc = hwloc_set_area_membind(topo, addr, len, nodes, HWLOC_MEMBIND_BIND,
                                HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_MIGRATE);
    if (rc != 0) {
        rc = hwloc_set_area_membind(topo, addr, len, nodes, HWLOC_MEMBIND_BIND,
                                    HWLOC_MEMBIND_BYNODESET);
    }
    if (rc != 0) {
        MOON_WARN("numa: binding %zu bytes to their node failed (%s): they stay where they are",
                  len, strerror(errno));
    } else if (node_p != NULL) {
        *node_p = hwloc_bitmap_first(nodes);
    }
    hwloc_bitmap_free(nodes);
    return rc == 0 ? MOON_OK : MOON_ERR_UNSUPPORTED;
}

int32_t moon_numa_node_of(const void *addr, size_t len)
{
    hwloc_topology_t topo = moon_topo();
    hwloc_nodeset_t  nodes;
    int32_t          node = -1;

    if (topo == NULL || addr == NULL || len == 0 || (nodes = hwloc_bitmap_alloc()) == NULL) {
        return -1;
    }
    if (hwloc_get_area_memlocation(topo, addr, len, nodes, HWLOC_MEMBIND_BYNODESET) == 0 &&
        hwloc_bitmap_weight(nodes) == 1) {
        node = hwloc_bitmap_first(nodes);
    }
    hwloc_bitmap_free(nodes);
    return node;
}

void moon_numa_nodes_text(char *buf, size_t cap)
{
    hwloc_topology_t topo  = moon_topo();
    hwloc_nodeset_t  nodes = topo != NULL ? hwloc_bitmap_alloc() : NULL;

    if (cap == 0) {
        hwloc_bitmap_free(nodes);
        return;
    }
    if (nodes == NULL || !nodes_of(topo, -1, nodes) ||
        hwloc_bitmap_list_snprintf(buf, cap, nodes) < 0) {
        snprintf(buf, cap, "?");
    }
    hwloc_bitmap_free(nodes);
}
