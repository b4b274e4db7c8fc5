/* base/topo.h - the process's one hwloc topology, loaded on first use, for
 * base's modules that place threads (cpu.c) and memory (numa.c). Internal
 * to moon_base. */
#ifndef MOON_BASE_TOPO_H
#define MOON_BASE_TOPO_H

#include <hwloc.h>

/* The loaded topology; NULL when hwloc could not load one. Read-only after
 * the load, so any thread may use it. */
hwloc_topology_t moon_topo(void);

#endif /* MOON_BASE_TOPO_H */
