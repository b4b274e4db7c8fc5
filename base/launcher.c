/* base/launcher.c - the launcher's word on this process's host
 * (moonlet/launcher.h). */
#include "moonlet/launcher.h"

#include "moonlet/config.h"

#include <stdlib.h>

/* The first of the variables set to a whole number in [min, UINT32_MAX],
 * else dflt. */
static uint32_t first_u32(const char *const *names, size_t n, uint32_t min, uint32_t dflt)
{
    for (size_t i = 0; i < n; i++) {
        const char   *v   = moon_config_foreign_env(names[i]);
        char         *end = NULL;
        unsigned long x   = v != NULL && v[0] >= '0' && v[0] <= '9' ? strtoul(v, &end, 10) : 0;
        if (end != NULL && *end == '\0' && x >= min && x <= UINT32_MAX) {
            return (uint32_t)x;
        }
    }
    return dflt;
}

uint32_t moon_launcher_local_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                        "SLURM_LOCALID"};

    return first_u32(names, sizeof(names) / sizeof(names[0]), 0, 0);
}

uint32_t moon_launcher_local_size(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                        "SLURM_NTASKS_PER_NODE"};

    return first_u32(names, sizeof(names) / sizeof(names[0]), 1, 1);
}
