# SPDX-License-Identifier: MIT
# cmake -DMODE=find_package|add_subdirectory -DCOMMX_SOURCE_DIR= -DCOMMX_BINARY_DIR=
#       -DWORK_DIR= -DCMAKE_CXX_COMPILER= -DGENERATOR= -P run_package_test.cmake
cmake_minimum_required(VERSION 3.21)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "failed (${status}): ${command}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

if(MODE STREQUAL "find_package")
  set(prefix ${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install ${COMMX_BINARY_DIR} --prefix ${prefix})
  foreach(installed include/commx/commx.hpp lib/cmake/commx/commxConfig.cmake
                    lib/cmake/commx/commxConfigVersion.cmake lib/cmake/commx/CommxVariants.cmake
                    bin/commxrun)
    if(NOT EXISTS ${prefix}/${installed})
      message(FATAL_ERROR "install tree lacks ${installed}")
    endif()
  endforeach()
  set(project_dir ${COMMX_SOURCE_DIR}/tests/package/consumer)
  set(extra -DCMAKE_PREFIX_PATH=${prefix})
else()
  set(project_dir ${COMMX_SOURCE_DIR}/tests/package/subdir_consumer)
  set(extra -DCOMMX_SOURCE_DIR=${COMMX_SOURCE_DIR})
endif()

run(${CMAKE_COMMAND} -S ${project_dir} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} ${extra})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/hello_inproc)
if(NOT last_output MATCHES "sum of ranks 0..3 = 6")
  message(FATAL_ERROR "the consumer printed:\n${last_output}")
endif()
if(MODE STREQUAL "add_subdirectory" AND EXISTS ${WORK_DIR}/build/commx/tests)
  message(FATAL_ERROR "commx built its tests although it is not the top-level project")
endif()
message(STATUS "package test (${MODE}) passed")
