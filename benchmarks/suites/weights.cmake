# weights suite: a weight push into a cluster under mpirun against MPI_Bcast.
add_executable(bench_weights ${CMAKE_CURRENT_SOURCE_DIR}/bench_weights.c)
target_link_libraries(bench_weights PRIVATE moon_actors moon_bench_util MPI::MPI_C)
