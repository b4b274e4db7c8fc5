/* tests/unit/base/test_launcher.c - the launcher's word on this process's
 * host: Open MPI's variables first, then MPICH's, then Slurm's; anything
 * but a whole number is passed over; none at all reads as rank 0 of 1. */
#include "moonlet/launcher.h"

#include "moon_test.h"

#include <stdlib.h>

static void unset_all(void)
{
    static const char *const names[] = {
        "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
        "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        unsetenv(names[i]);
    }
}

static void test_no_launcher_is_rank_0_of_1(void)
{
    unset_all();
    CU_ASSERT_EQUAL(moon_launcher_local_rank(), 0);
    CU_ASSERT_EQUAL(moon_launcher_local_size(), 1);
}

static void test_launchers_in_order(void)
{
    unset_all();
    setenv("SLURM_LOCALID", "5", 1);
    setenv("SLURM_NTASKS_PER_NODE", "8", 1);
    CU_ASSERT_EQUAL(moon_launcher_local_rank(), 5);
    CU_ASSERT_EQUAL(moon_launcher_local_size(), 8);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1); /* mpirun inside an allocation: its word */
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
    CU_ASSERT_EQUAL(moon_launcher_local_rank(), 2);
    CU_ASSERT_EQUAL(moon_launcher_local_size(), 4);
    unset_all();
}

static void test_malformed_values_are_passed_over(void)
{
    unset_all();
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "two", 1);
    setenv("MPI_LOCALRANKID", "3x", 1);
    setenv("SLURM_LOCALID", "1", 1);
    CU_ASSERT_EQUAL(moon_launcher_local_rank(), 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "0", 1); /* no host has 0 processes */
    setenv("MPI_LOCALNRANKS", "-3", 1);
    CU_ASSERT_EQUAL(moon_launcher_local_size(), 1);
    unset_all();
}

MOON_TEST_MAIN("launcher", NULL, NULL, test_no_launcher_is_rank_0_of_1, test_launchers_in_order,
               test_malformed_values_are_passed_over)
