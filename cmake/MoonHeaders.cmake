# MoonHeaders.cmake - each library exports only its own public headers
# (STYLE §1), so an include against the layering fails to compile.
#
# The headers stay in include/moonlet/ (one folder, one include path:
# "moonlet/x.h"); each library names its own with moon_export_headers(), which
# links them into ${PROJECT_BINARY_DIR}/include/<target>/moonlet/ and makes
# that folder the target's PUBLIC include directory. A target sees the headers
# of the libraries it links and nothing else: model/ including moonlet/actor.h
# fails with "No such file". tests/scripts/check_layering.sh reads the same
# lists from the CMakeLists.txt files.

set(MOON_HEADER_DIR ${PROJECT_SOURCE_DIR}/include/moonlet)

# moon_export_headers(TARGET header.h...): TARGET owns these include/moonlet/ headers.
function(moon_export_headers target)
  set(dir ${PROJECT_BINARY_DIR}/include/${target})
  file(REMOVE_RECURSE ${dir}) # a header dropped from the list disappears too
  file(MAKE_DIRECTORY ${dir}/moonlet)
  foreach(h ${ARGN})
    if(NOT EXISTS ${MOON_HEADER_DIR}/${h})
      message(FATAL_ERROR "moon_export_headers(${target}): include/moonlet/${h} does not exist")
    endif()
    get_property(owner GLOBAL PROPERTY MOON_HEADER_OWNER_${h})
    if(owner)
      message(FATAL_ERROR "include/moonlet/${h} is exported by both ${owner} and ${target}")
    endif()
    set_property(GLOBAL PROPERTY MOON_HEADER_OWNER_${h} ${target})
    file(CREATE_LINK ${MOON_HEADER_DIR}/${h} ${dir}/moonlet/${h} SYMBOLIC)
  endforeach()
  target_include_directories(${target} PUBLIC ${dir})
endfunction()

# Fails the configuration when a header of include/moonlet/ belongs to no
# library (nothing could include it). Called once, after every library.
function(moon_check_headers_owned)
  file(GLOB headers RELATIVE ${MOON_HEADER_DIR} ${MOON_HEADER_DIR}/*.h)
  foreach(h ${headers})
    get_property(owner GLOBAL PROPERTY MOON_HEADER_OWNER_${h})
    if(NOT owner)
      message(FATAL_ERROR "include/moonlet/${h} belongs to no library: add it to the "
                          "moon_export_headers() call in its library's CMakeLists.txt")
    endif()
  endforeach()
endfunction()
