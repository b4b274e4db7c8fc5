/* moonlet/launcher.h - what the launcher that started this process (mpirun,
 * mpiexec, srun) says of its place on its host, read from the launcher's
 * own environment (Open MPI's, MPICH's, then Slurm's variables). */
#ifndef MOONLET_LAUNCHER_H
#define MOONLET_LAUNCHER_H

#include "moonlet/defs.h"

MOON_EXTERN_C_BEGIN

/* This process's rank among the launcher's processes on its host (0 when
 * no launcher says). */
MOON_API uint32_t moon_launcher_local_rank(void);
/* How many of the launcher's processes share this host (1 when no launcher
 * says). */
MOON_API uint32_t moon_launcher_local_size(void);

MOON_EXTERN_C_END

#endif /* MOONLET_LAUNCHER_H */
