# SPDX-License-Identifier: MIT
# cmake -DPROGRAM=<exe> -DARGS=<;-list> -DEXPECT_CODE=<n> -DEXPECT_REGEX=<regex> [-DSTREAM=stderr|stdout]
#   [-DOUTPUT_FILE=<file>] -P expect_failure.cmake
# Runs the program and passes only if it exits with EXPECT_CODE and its output (stderr unless
# STREAM says otherwise) matches EXPECT_REGEX. CTest alone cannot check both: with
# PASS_REGULAR_EXPRESSION set, it ignores the exit code. PROGRAM may be a launcher followed by
# the program (commxrun -n 2 app); OUTPUT_FILE keeps stdout for a later test to compare.
if(NOT DEFINED STREAM)
  set(STREAM stderr)
endif()
execute_process(COMMAND ${PROGRAM} ${ARGS}
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(DEFINED OUTPUT_FILE)
  file(WRITE "${OUTPUT_FILE}" "${out}")
endif()
if(STREAM STREQUAL "stdout")
  set(text "${out}")
else()
  set(text "${err}")
endif()
if(NOT code STREQUAL "${EXPECT_CODE}")
  message(FATAL_ERROR "exit status '${code}', expected ${EXPECT_CODE}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT text MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "${STREAM} does not match '${EXPECT_REGEX}'\nstdout:\n${out}\nstderr:\n${err}")
endif()
message(STATUS "exit ${code}, ${STREAM} matches '${EXPECT_REGEX}'")
