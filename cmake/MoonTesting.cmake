# MoonTesting.cmake - helpers registering CUnit executables with CTest (STYLE §13).

# What mpirun needs in a test: root in containers, shared memory and loopback
# only (no network probing), more ranks than cores.
set(MOON_MPI_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_btl=self,vader;OMPI_MCA_oob_tcp_if_include=lo;OMPI_MCA_rmaps_base_oversubscribe=1;UCX_NET_DEVICES=lo")

set(MOON_TEST_TIMEOUT 300 CACHE STRING "default CTest timeout, seconds")

# moon_test_labels(OUT): the labels a test gets from its folder under tests/:
# its kind (unit, mpi, e2e, fuzz, soak) and its component, e.g. tests/unit/gateway
# -> "unit;gateway", tests/e2e/serve -> "e2e;serve", tests/mpi/kvstore ->
# "mpi;kvstore". Every test helper below adds them to the labels it is given.
function(moon_test_labels out)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/tests ${CMAKE_CURRENT_SOURCE_DIR})
  string(REPLACE "/" ";" parts "${rel}")
  list(LENGTH parts n)
  set(labels)
  if(n GREATER 0)
    list(GET parts 0 kind)
    list(APPEND labels ${kind})
  endif()
  if(n GREATER 1)
    list(GET parts 1 component)
    list(APPEND labels ${component})
  endif()
  set(${out} ${labels} PARENT_SCOPE)
endfunction()

# moon_label_test(NAME [labels...]): a test added with add_test() gets its
# folder's labels and these.
function(moon_label_test name)
  moon_test_labels(labels)
  list(APPEND labels ${ARGN})
  list(REMOVE_DUPLICATES labels)
  set_tests_properties(${name} PROPERTIES LABELS "${labels}")
endfunction()

# moon_add_test(NAME SOURCES... LIBS libs... LABELS labels... [TIMEOUT s])
# One CUnit executable per file, run directly.
function(moon_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE moon_test_support ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT ${MOON_TEST_TIMEOUT})
  endif()
  moon_test_labels(labels)
  list(APPEND labels ${T_LABELS})
  list(REMOVE_DUPLICATES labels)
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${labels}")
endfunction()

# moon_add_mpi_test(NAME NP n SOURCES... LIBS... LABELS... [ARGS...] [ENV...] [COST s])
# Runs under mpirun exactly as users launch it (as root on CI: env vars below).
# COST: its seconds in its slowest CI pass; CTest -j starts the highest first
# (a fresh build tree, as CI's, has no timings of its own to order by).
function(moon_add_mpi_test name)
  cmake_parse_arguments(T "" "NP;TIMEOUT;TARGET;COST" "SOURCES;LIBS;LABELS;ARGS;ENV;MPIARGS" ${ARGN})
  if(NOT T_TARGET)
    set(T_TARGET ${name})
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE moon_test_support ${T_LIBS})
  endif()
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${T_NP} ${T_MPIARGS}
                   $<TARGET_FILE:${T_TARGET}> ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT ${MOON_TEST_TIMEOUT})
  endif()
  moon_test_labels(labels)
  list(APPEND labels mpi ${T_LABELS}) # mpi: it runs under mpirun, wherever it lives
  list(REMOVE_DUPLICATES labels)
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${labels}"
    ENVIRONMENT "${MOON_MPI_TEST_ENV};${T_ENV}")
  if(T_COST)
    set_tests_properties(${name} PROPERTIES COST ${T_COST})
  endif()
endfunction()
