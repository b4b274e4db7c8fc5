add_executable(bench_actors ${CMAKE_CURRENT_SOURCE_DIR}/bench_actors.c)
target_link_libraries(bench_actors PRIVATE moon_runtime moon_bench_util)
