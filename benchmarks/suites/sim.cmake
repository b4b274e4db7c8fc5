# sim suite: the simulator's speed and memory (issue #16's targets).
add_executable(bench_sim ${CMAKE_CURRENT_SOURCE_DIR}/bench_sim.c)
target_link_libraries(bench_sim PRIVATE moon_bench_util moon_replay)
