# SPDX-License-Identifier: MIT
# stats::none must cost nothing: with it, the optimised send/receive/bcast path reads the clock
# only to resolve deadlines, and does no stats bookkeeping; with stats::counting it reads the
# clock more. Counting clock reads in the assembly of one function compiled both ways shows the
# difference is the policy's alone.
# cmake -DCXX= -DINCLUDE_DIR= -DSOURCE= -DWORK_DIR= -P check_stats_cost.cmake
file(MAKE_DIRECTORY ${WORK_DIR})
foreach(stats none counting)
  execute_process(
    COMMAND ${CXX} -std=c++20 -O2 -S -I${INCLUDE_DIR} -DSTATS=${stats} ${SOURCE} -o ${WORK_DIR}/${stats}.s
    RESULT_VARIABLE status ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "compiling with stats::${stats} failed:\n${err}")
  endif()
  file(STRINGS ${WORK_DIR}/${stats}.s clock_calls REGEX "call.*steady_clock3now")
  list(LENGTH clock_calls clock_${stats})
endforeach()
message(STATUS "clock reads: stats::none ${clock_none}, stats::counting ${clock_counting}")
if(NOT clock_none LESS clock_counting)
  message(FATAL_ERROR "stats::none reads the clock as often as stats::counting (${clock_none})")
endif()
file(READ ${WORK_DIR}/none.s none_asm)
# A hook or stopwatch of stats::none that survived as a symbol of its own.
if(none_asm MATCHES "stats4none[0-9]+(on_|add_)|stopwatchINS_5stats4none")
  message(FATAL_ERROR "stats::none left calls to its hooks in the optimised code")
endif()
