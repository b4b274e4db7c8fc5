# serve suite: the serving cluster (prefix reuse, handover, decode batch,
# disaggregation's goodput) against engine anchors from the same run.
add_executable(bench_serve ${CMAKE_CURRENT_SOURCE_DIR}/bench_serve.c)
target_link_libraries(bench_serve PRIVATE moon_bench_util moon_actors m)
