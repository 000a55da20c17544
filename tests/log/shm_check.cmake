# SPDX-License-Identifier: MIT
# Runs log_shm_job ${MODE} (peer-lost, timeout, probe-timeout, agree-lost or large-ways) as 2
# ranks under commxrun with COMMX_LOG=${LEVEL} and checks rank 0's lines on stderr (MODE
# large-shape: the job's large-ways under COMMX_SHM_LARGE=shape, both ranks' lines):
#   cmake -DCOMMXRUN=... -DJOB=... -DMODE=... -DLEVEL=... -P shm_check.cmake
set(large copy)
set(job_mode ${MODE})
if(MODE STREQUAL "large-ways")
  set(large auto)  # the measured choice between cma and pieces, which logs what it measured
elseif(MODE STREQUAL "large-shape")
  set(large shape)  # pieces one way, cma in an exchange
  set(job_mode large-ways)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env COMMX_LOG=${LEVEL} COMMX_SHM_LARGE=${large}
                        ${COMMXRUN} -n 2 --timeout 30 ${JOB} ${job_mode}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the job failed (${rc}): rank 0 did not see the error it waited for\n"
                      "${out}${err}")
endif()

if(MODE STREQUAL "large-shape")
  # Each rank received its 40 ping-pong replies one way, in pieces, and its 40 exchanges by cma.
  foreach(rank 0 1)
    set(line "\\[${rank}\\] commx\\[rank ${rank} shm\\] debug: large messages received: ")
    if(NOT err MATCHES "${line}40 in pieces, 40 by cma\n")
      message(FATAL_ERROR "rank ${rank} did not take pieces one way and cma in exchanges:\n${err}")
    endif()
  endforeach()
  return()
endif()
if(MODE STREQUAL "large-ways")
  # Both shapes told apart (an exchange: the offer crossed a large send of the receiver's own),
  # both ways measured in each; in an exchange rank 1 takes the way rank 0 publishes, so it
  # measures only the ping-pongs.
  set(size "262144-524287 B")
  set(costs "pieces [0-9.]+ ns, cma [0-9.]+ ns -> (pieces|cma)")
  set(line "commx\\[rank [01] shm\\] debug: large messages, what each way cost per byte: ")
  string(REGEX MATCH "\\[0\\] ${line}[^\n]*" zero "${err}")
  string(REGEX MATCH "\\[1\\] ${line}[^\n]*" one "${err}")
  if(NOT zero MATCHES "\\[${size} one way: ${costs}\\]" OR
     NOT zero MATCHES "\\[${size} exchange: ${costs}\\]")
    message(FATAL_ERROR "rank 0 did not measure both ways one way and in an exchange:\n${err}")
  endif()
  if(NOT one MATCHES "\\[${size} one way: ${costs}\\]" OR one MATCHES "exchange")
    message(FATAL_ERROR "rank 1 did not measure the ping-pongs alone:\n${err}")
  endif()
  return()
endif()

# commxrun puts "[rank] " before each line a rank writes.
string(REGEX MATCH "\\[0\\] what: ([^\n]*)\n" found "${out}")
if(NOT found)
  message(FATAL_ERROR "rank 0 printed no exception text:\n${out}${err}")
endif()
set(what "${CMAKE_MATCH_1}")

if(MODE STREQUAL "agree-lost")
  # Rank 0's agreement, told at debug: it falls back (rank 1 found lost in the rounds, or
  # before them), coordinates, and decides rank 1 lost.
  if(NOT what STREQUAL "agreed 1 without [1]")
    message(FATAL_ERROR "rank 0 did not agree on rank 1 lost: ${what}")
  endif()
  set(me "\\[0\\] commx\\[rank 0 shm\\] debug: agreement [0-9]+")
  set(why "(rank 1 lost|ranks \\[1\\] known lost before it began)")
  foreach(step "${me}: falls back to a coordinator: ${why}\n"
               "${me}: coordinates, proposes the reports' outcome: lost \\[1\\]\n"
               "${me} decided \\(ballot 1\\): lost \\[1\\]\n")
    if(NOT err MATCHES "${step}")
      message(FATAL_ERROR "COMMX_LOG=debug: no line matching '${step}' on stderr:\n${err}")
    endif()
  endforeach()
elseif(MODE STREQUAL "peer-lost")
  # Found by rank 0's own look at rank 1's process.
  set(lost "\\[0\\] commx\\[rank 0 shm\\] warn: lost rank 1: its process ended without leaving "
           "the job \\(kill\\(pid, 0\\), /proc\\)\n")
  string(CONCAT lost ${lost})
  if(NOT err MATCHES "${lost}")
    message(FATAL_ERROR "COMMX_LOG=${LEVEL}: no peer-loss line from rank 0 on stderr:\n${err}")
  endif()
  if(err MATCHES " info: ")
    message(FATAL_ERROR "COMMX_LOG=${LEVEL}: an info line on stderr:\n${err}")
  endif()
elseif(MODE MATCHES "timeout$")
  if(MODE STREQUAL "probe-timeout" AND NOT what MATCHES ": probe ")
    message(FATAL_ERROR "the exception is not the probe's: ${what}")
  endif()
  # The line says what the exception says, word for word.
  string(FIND "${err}" "[0] commx[rank 0 shm] info: ${what}\n" at)
  if(LEVEL STREQUAL "info" AND at EQUAL -1)
    message(FATAL_ERROR "COMMX_LOG=info: no timeout line saying '${what}' on stderr:\n${err}")
  endif()
  if(LEVEL STREQUAL "warn" AND NOT at EQUAL -1)
    message(FATAL_ERROR "COMMX_LOG=warn: the timeout (an info line) printed:\n${err}")
  endif()
endif()
