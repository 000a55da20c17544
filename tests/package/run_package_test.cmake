# SPDX-License-Identifier: MIT
# One packaging test: a consumer project uses commx's stacks COMPONENTS (a |-list) and runs a
# small job on each.
#   MODE=install           installs the build tree into PREFIX (the others' fixture)
#   MODE=find_package      find_package(commx COMPONENTS ...) from PREFIX; commxrun is the
#                          installed one
#   MODE=add_subdirectory  the consumer add_subdirectory()s the source tree; commxrun is COMMXRUN
#   MODE=pkg_config        a Makefile builds hello with `pkg-config commx-<stack>` from PREFIX
# cmake -DMODE= -DCOMPONENTS= -DCOMMX_SOURCE_DIR= -DCOMMX_BINARY_DIR= -DWORK_DIR= -DPREFIX=
#       -DCMAKE_CXX_COMPILER= -DGENERATOR= [-DCOMMXRUN=] [-DMPI_LAUNCH=<|-list with @N@>]
#       [-DPMIX_LAUNCH=<pmix_launch.sh|mpirun>]
#       -P run_package_test.cmake
cmake_minimum_required(VERSION 3.21)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 540)  # within CTest's 600: a cold, busy machine compiles slowly
  if(NOT status EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "failed (${status}): ${command}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# The Makefile consumer's own CXXFLAGS hold the same.
set(strict_flags "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Wpedantic -Werror")
string(REPLACE "|" ";" components "${COMPONENTS}")
string(REPLACE "|" " " stacks "${COMPONENTS}")  # the Makefile's list
string(REPLACE "|" ";" mpi_launch "${MPI_LAUNCH}")
string(REPLACE "|" ";" pmix_launch "${PMIX_LAUNCH}")
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(build ${WORK_DIR}/build)

if(MODE STREQUAL "install")
  # The install tree the find_package and pkg_config tests share (a CTest fixture): their
  # consumers then compile with the same flags, and ccache serves `all` what the singles built.
  file(REMOVE_RECURSE ${PREFIX})
  run(${CMAKE_COMMAND} --install ${COMMX_BINARY_DIR} --prefix ${PREFIX})
  foreach(installed include/commx/commx.hpp lib/cmake/commx/commxConfig.cmake
                    lib/cmake/commx/commxConfigVersion.cmake lib/cmake/commx/CommxVariants.cmake
                    lib/cmake/commx/commx-targets.cmake lib/pkgconfig/commx.pc bin/commxrun)
    if(NOT EXISTS ${PREFIX}/${installed})
      message(FATAL_ERROR "install tree lacks ${installed}")
    endif()
  endforeach()
  message(STATUS "installed into ${PREFIX}")
  return()
endif()

if(MODE STREQUAL "find_package" OR MODE STREQUAL "pkg_config")
  set(prefix ${PREFIX})
  set(commxrun ${prefix}/bin/commxrun)
else()
  set(commxrun ${COMMXRUN})
endif()

if(MODE STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S ${COMMX_SOURCE_DIR}/tests/package/consumer -B ${build} -G ${GENERATOR}
      -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} "${strict_flags}" -DCMAKE_PREFIX_PATH=${prefix}
      -DCOMMX_TEST_COMPONENTS=${COMPONENTS})
  run(${CMAKE_COMMAND} --build ${build})
elseif(MODE STREQUAL "add_subdirectory")
  run(${CMAKE_COMMAND} -S ${COMMX_SOURCE_DIR}/tests/package/subdir_consumer -B ${build}
      -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} "${strict_flags}"
      -DCOMMX_SOURCE_DIR=${COMMX_SOURCE_DIR} -DCOMMX_TEST_COMPONENTS=${COMPONENTS})
  run(${CMAKE_COMMAND} --build ${build})
  if(EXISTS ${build}/commx/tests)
    message(FATAL_ERROR "commx built its tests although it is not the top-level project")
  endif()
else()
  file(MAKE_DIRECTORY ${build})
  # The compiler launcher the CMake consumers take from the environment (ccache in the test
  # command), given to make as CMake would give it.
  set(cxx ${CMAKE_CXX_COMPILER})
  if(DEFINED ENV{CMAKE_CXX_COMPILER_LAUNCHER})
    set(cxx "$ENV{CMAKE_CXX_COMPILER_LAUNCHER} ${CMAKE_CXX_COMPILER}")
  endif()
  run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/lib/pkgconfig "CXX=${cxx}"
      make -C ${build} -f ${COMMX_SOURCE_DIR}/tests/package/makefile_consumer/Makefile
      SOURCE_DIR=${COMMX_SOURCE_DIR}/tests/package "STACKS=${stacks}")
endif()

# The consumer built the layered stacks with their network stack (consumer/CMakeLists.txt),
# all but shm+tcp.
if(MODE STREQUAL "find_package")
  if("wan" IN_LIST components)
    list(APPEND components shm_tcp_wan)
    if("mpi" IN_LIST components)
      list(APPEND components mpi_wan)
    endif()
  endif()
  list(REMOVE_DUPLICATES components)
endif()

# Each job: inproc on 4 threads, the layered stacks as 4 processes on 2 simulated nodes, the
# others as 2 processes under their launcher.
foreach(stack IN LISTS components)
  set(program ${build}/hello_${stack})
  if(stack STREQUAL "inproc")
    run(${CMAKE_COMMAND} -E env COMMX_INPROC_RANKS=4 ${program})
    set(expected "sum of ranks 0..3 = 6")
  elseif(stack STREQUAL "simgrid")
    # 4 simulated ranks on the shipped fat tree, named: find_package's target says where the
    # platforms are installed; pkg-config's flags cannot carry a path, so its user says.
    set(platforms "")
    if(MODE STREQUAL "pkg_config")
      set(platforms COMMX_SIMGRID_PLATFORM_DIR=${PREFIX}/share/commx/simgrid)
    endif()
    run(${CMAKE_COMMAND} -E env COMMX_SIMGRID_RANKS=4 COMMX_SIMGRID_PLATFORM=fat-tree ${platforms}
        ${program})
    set(expected "sum of ranks 0..3 = 6")
  elseif(stack STREQUAL "mpi")
    if(NOT mpi_launch)
      message(FATAL_ERROR "MPI_LAUNCH is needed to run hello_mpi")
    endif()
    list(TRANSFORM mpi_launch REPLACE "@N@" "2" OUTPUT_VARIABLE launch)
    run(${launch} ${program})
    set(expected "sum of ranks 0..1 = 1")
  elseif(stack STREQUAL "pmix")
    # tcp's program, linked with commx::pmix, under mpirun with no COMMX_ROOT.
    set(program ${build}/hello_tcp)
    run(${pmix_launch} 2 0 ${program})
    set(expected "sum of ranks 0..1 = 1")
    set(stack tcp)
  elseif(stack STREQUAL "mpi_wan")
    # Two sites, each its own mpirun (the launch line's first word).
    list(GET mpi_launch 0 mpiexec)
    run(${COMMX_SOURCE_DIR}/tests/transport/sites_by_launch.sh ${mpiexec} 4 ${program})
    set(expected "sum of ranks 0..3 = 6")
  elseif(stack MATCHES "^shm_(tcp|ucx)")
    run(${commxrun} -n 4 --nodes 2 --timeout 120 ${program})
    set(expected "sum of ranks 0..3 = 6")
  else()
    run(${commxrun} -n 2 --timeout 120 ${program})
    set(expected "sum of ranks 0..1 = 1")
  endif()
  if(NOT last_output MATCHES "hello_${stack}: ${expected}")
    message(FATAL_ERROR "hello_${stack} printed:\n${last_output}")
  endif()
  message(STATUS "hello_${stack}: ${expected}")
endforeach()
message(STATUS "package test (${MODE}: ${COMPONENTS}) passed")
