/* moonlet/numa.h - memory placed on the NUMA node(s) of the cores that use
 * it (hwloc): an instance's KV pool near its engine threads, a store
 * shard's arena near its rank. On a machine of one node every call
 * succeeds and changes nothing a program can time. Thread-safe. */
#ifndef MOONLET_NUMA_H
#define MOONLET_NUMA_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

#include <stddef.h>

MOON_EXTERN_C_BEGIN

/* Binds the pages of [addr, addr + len) to the NUMA node(s) of core (modulo
 * moon_cpu_count()) or, core < 0, of the cores this process may run on.
 * Pages already touched move there where the kernel can move them. *node_p
 * (may be NULL): the first node bound to. MOON_ERR_INVALID_PARAM: addr NULL
 * or len 0; MOON_ERR_UNSUPPORTED: no topology, or the kernel refused (the
 * memory stays where it was; a log line says why). */
MOON_API moon_status_t moon_numa_bind(void *addr, size_t len, int32_t core, int32_t *node_p);

/* The NUMA node of the touched pages of [addr, addr + len): -1 when unknown
 * or when they lie on several. */
MOON_API int32_t moon_numa_node_of(const void *addr, size_t len);

/* The NUMA nodes of the cores this process may run on, as a list ("0",
 * "0-1", "0,2"); "?" when unknown. */
MOON_API void moon_numa_nodes_text(char *buf, size_t cap);

MOON_EXTERN_C_END

#endif /* MOONLET_NUMA_H */
