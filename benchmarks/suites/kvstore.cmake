# kvstore suite: in-process shard library costs.
add_executable(bench_kvstore_ops ${CMAKE_CURRENT_SOURCE_DIR}/bench_kvstore_ops.c)
target_link_libraries(bench_kvstore_ops PRIVATE moon_bench_util moon_kvstore)
# The distributed store under mpirun: store shard actor + client library over
# the bulk lane (benchmarks/suites/kvstore.sh runs it beside its anchors).
add_executable(bench_kvstore_dist ${CMAKE_CURRENT_SOURCE_DIR}/bench_kvstore_dist.c)
target_link_libraries(bench_kvstore_dist PRIVATE moon_actors moon_bench_util MPI::MPI_C)
# The copy ceiling of the store's bulk access patterns (beside their anchor's).
add_executable(bench_copy ${CMAKE_CURRENT_SOURCE_DIR}/bench_copy.c)
target_link_libraries(bench_copy PRIVATE moon_bench_util moon_base)
