# model suite: engine throughput (decode batch 1/8/32, 512-token prefill) and
# its anchors (streaming-read roofline, OpenBLAS sgemm) in one binary.
add_executable(bench_model ${CMAKE_CURRENT_SOURCE_DIR}/bench_model.c)
target_link_libraries(bench_model PRIVATE moon_bench_util moon_model Threads::Threads)
if(OPENBLAS_FOUND)
  target_compile_definitions(bench_model PRIVATE MOON_HAVE_OPENBLAS=1)
  target_link_libraries(bench_model PRIVATE PkgConfig::OPENBLAS)
endif()
if(MOON_WITH_CUDA)
  # the GPU anchors (cuda_roofline, cublas) beside the CUDA engine's figures
  target_sources(bench_model PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda_anchors.cu)
  target_link_libraries(bench_model PRIVATE CUDA::cublas CUDA::cudart)
endif()
