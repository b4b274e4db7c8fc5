# plugins suite: what a request filter and a token observer add, measured at
# the conductor's gate (bench_plugin_gate; loads tests/e2e/plugins' probe,
# whose host symbols the executable exports). The end-to-end figures are
# plugins.sh's (moonlet serve with and without the probe).
if(TARGET moon_plugin)
  add_executable(bench_plugin_gate ${CMAKE_CURRENT_SOURCE_DIR}/bench_plugin_gate.c)
  target_link_libraries(bench_plugin_gate PRIVATE moon_plugin moon_bench_util)
  set_target_properties(bench_plugin_gate PROPERTIES ENABLE_EXPORTS ON)
endif()
