# weights suite: a weight push into a cluster under mpirun against MPI_Bcast.
add_executable(bench_weights ${CMAKE_CURRENT_SOURCE_DIR}/bench_weights.c)
target_link_libraries(bench_weights PRIVATE moon_actors moon_bench_util MPI::MPI_C)
# the GPU path on one device: pinned staging + NCCL against a pinned cudaMemcpy
add_executable(bench_gpu_stage ${CMAKE_CURRENT_SOURCE_DIR}/bench_gpu_stage.c)
target_link_libraries(bench_gpu_stage PRIVATE moon_gpu moon_bench_util)
if(MOON_WITH_CUDA)
  target_sources(bench_gpu_stage PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda_anchors.cu)
  target_link_libraries(bench_gpu_stage PRIVATE CUDA::cublas CUDA::cudart)
endif()
