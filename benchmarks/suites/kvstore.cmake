# kvstore suite: in-process shard library costs (the distributed get/put
# bandwidth benchmark comes with the store shard actor).
add_executable(bench_kvstore_ops ${CMAKE_CURRENT_SOURCE_DIR}/bench_kvstore_ops.c)
target_link_libraries(bench_kvstore_ops PRIVATE moon_bench_util moon_kvstore)
