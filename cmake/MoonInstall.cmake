# MoonInstall.cmake - `cmake --install build [--prefix P]` installs:
#   bin/moonlet                      the executable (it exports MOON_API for plugins)
#   lib/libmoonlet.so                the runtime and serving stack, one shared library
#   include/moonlet/*.h              the public headers (MOON_API marks what is public),
#                                    the serving and store client APIs and cluster assembly
#                                    among them
#   lib/pkgconfig/moonlet.pc         pkg-config --cflags --libs moonlet
#   lib/cmake/Moonlet/               find_package(Moonlet): Moonlet::moonlet (link a
#                                    program), Moonlet::plugin (build a plugin: headers only)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Every static library of the stack, whole, into one shared library; their
# dependencies (MPI, UCX, msgpack, hwloc, ck...) follow as shared ones.
set(MOON_LIB_PARTS moon_serve moon_instance moon_plugin moon_serve_proto moon_store moon_scheduler
                   moon_kvstore moon_model moon_gguf moon_rt_dist moon_rt_core moon_rt_msg moon_gpu
                   moon_base)
add_library(moonlet_shared SHARED ${PROJECT_SOURCE_DIR}/launch/lib/libmoonlet.c)
target_compile_definitions(moonlet_shared PRIVATE MOON_VERSION="${PROJECT_VERSION}")
set(_moon_whole "")
foreach(_lib ${MOON_LIB_PARTS})
  list(APPEND _moon_whole "$<TARGET_FILE:${_lib}>")
endforeach()
# the archives whole (every MOON_API function, used here or not), then the
# targets again for their own dependencies
target_link_libraries(moonlet_shared PRIVATE -Wl,--whole-archive ${_moon_whole} -Wl,--no-whole-archive
                                             ${MOON_LIB_PARTS})
set_target_properties(moonlet_shared PROPERTIES OUTPUT_NAME moonlet VERSION ${PROJECT_VERSION}
                                                SOVERSION ${PROJECT_VERSION_MAJOR}
                                                LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)

install(TARGETS moonlet RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS moonlet_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/moonlet DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

configure_file(${PROJECT_SOURCE_DIR}/cmake/moonlet.pc.in ${PROJECT_BINARY_DIR}/moonlet.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/moonlet.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/MoonletConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/MoonletConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Moonlet
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/MoonletConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/MoonletConfig.cmake ${PROJECT_BINARY_DIR}/MoonletConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Moonlet)
