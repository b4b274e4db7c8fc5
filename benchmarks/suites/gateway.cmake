# gateway suite: what the OpenAI HTTP gateway costs beside the client API.
if(TARGET moon_gateway AND CURL_FOUND)
  add_executable(bench_gateway ${CMAKE_CURRENT_SOURCE_DIR}/bench_gateway.c)
  target_link_libraries(bench_gateway PRIVATE moon_gateway moon_actors moon_bench_util PkgConfig::CURL)
endif()
