/* moonlet/cpu.h - cores of this machine and binding the calling thread to
 * one (hwloc), for the threads that are not runtime workers: an instance's
 * engine thread and its pool. Thread-safe. */
#ifndef MOONLET_CPU_H
#define MOONLET_CPU_H

#include "moonlet/defs.h"
#include "moonlet/status.h"

MOON_EXTERN_C_BEGIN

/* Cores this process may run on (at least 1). */
MOON_API uint32_t moon_cpu_count(void);
/* Binds the calling thread to core % moon_cpu_count(). MOON_ERR_UNSUPPORTED
 * when the topology or the binding is not available (the thread runs on). */
MOON_API moon_status_t moon_cpu_pin_self(uint32_t core);

MOON_EXTERN_C_END

#endif /* MOONLET_CPU_H */
