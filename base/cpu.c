/* base/cpu.c - core count and thread binding over one hwloc topology, loaded
 * once for the process (topo.h shares it with numa.c). */
#include "moonlet/cpu.h"

#include "moonlet/log.h"
#include "topo.h"

#include <pthread.h>

static pthread_once_t   g_once = PTHREAD_ONCE_INIT;
static hwloc_topology_t g_topo;
static int              g_loaded;

static void load(void)
{
    if (hwloc_topology_init(&g_topo) == 0) {
        if (hwloc_topology_load(g_topo) == 0) {
            g_loaded = 1;
        } else {
            hwloc_topology_destroy(g_topo);
        }
    }
}

hwloc_topology_t moon_topo(void)
{
    pthread_once(&g_once, load);
    return g_loaded ? g_topo : NULL;
}

uint32_t moon_cpu_count(void)
{
    int n;

    pthread_once(&g_once, load);
    n = g_loaded ? hwloc_get_nbobjs_by_type(g_topo, HWLOC_OBJ_CORE) : 0;
    return n > 0 ? (uint32_t)n : 1;
}

moon_status_t moon_cpu_pin_self(uint32_t core)
{
    hwloc_obj_t obj;

    pthread_once(&g_once, load);
    if (!g_loaded) {
        return MOON_ERR_UNSUPPORTED;
    }
    obj = hwloc_get_obj_by_type(g_topo, HWLOC_OBJ_CORE, core % moon_cpu_count());
    if (obj == NULL || hwloc_set_cpubind(g_topo, obj->cpuset, HWLOC_CPUBIND_THREAD) != 0) {
        MOON_DEBUG_LOG("cpu: binding a thread to core %u failed", core);
        return MOON_ERR_UNSUPPORTED;
    }
    return MOON_OK;
}
