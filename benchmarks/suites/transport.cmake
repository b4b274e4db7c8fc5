# transport suite: the distributed runtime between two ranks (round trip,
# stream, bulk get/put) with an MPI ping-pong anchor in the same binary; the
# ucx_perftest anchors are run by suites/transport.sh.
add_executable(bench_transport ${CMAKE_CURRENT_SOURCE_DIR}/bench_transport.c)
target_link_libraries(bench_transport PRIVATE moon_runtime moon_bench_util MPI::MPI_C)
