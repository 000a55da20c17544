# SPDX-License-Identifier: MIT
#
# commx_add_variants(<name> SOURCES <src>... TRANSPORTS <t>... [COLLECTIVES <c>...]
#                    [STATS none|counting] [LIBRARIES <lib>...] [OUT_TARGETS <var>]
#                    [POLICY_IN_NAME | ANY_COLLECTIVES])
#
# Builds one executable per (transport, collectives) pair from the same sources. Each is named
# <name>_<transport> when one collectives policy is given (and not POLICY_IN_NAME),
# <name>_<transport>_<coll> otherwise,
# and sees the macros that <commx/variant.hpp> turns into `commx::variant::communicator`, so the
# application source never needs an #ifdef to pick its stack. Every stack <t> has a faulty_<t>
# too: <t> with the faults COMMX_FAULTS names (commx/transport/faulty.hpp). A policy that
# exists over some transports only (coll::native: MPI's own collectives, over transport::mpi)
# is built for those. Where commx::pmix is there, every stack with a network (tcp, wan) links it:
# started by mpirun or srun --mpi=pmix, its ranks need no COMMX_ROOT.
#
# ANY_COLLECTIVES: one executable per transport, <name>_<transport>, with every policy of
# COLLECTIVES (that the transport has) compiled in as its own communicator type; the program
# picks one at run time with commx::variant::with_collectives (<commx/variant_collectives.hpp>),
# and `commx::variant::communicator` is the one with tuned (or the first policy). One compiler
# run per stack instead of one per policy: the transport's code, most of the time, is compiled
# once.
include_guard(GLOBAL)

function(commx_add_variants name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "POLICY_IN_NAME;ANY_COLLECTIVES" "STATS;OUT_TARGETS"
                        "SOURCES;TRANSPORTS;COLLECTIVES;LIBRARIES")
  if(NOT arg_SOURCES OR NOT arg_TRANSPORTS)
    message(FATAL_ERROR "commx_add_variants(${name}): SOURCES and TRANSPORTS are required")
  endif()
  if(NOT arg_COLLECTIVES)
    set(arg_COLLECTIVES flat)
  endif()
  if(NOT arg_STATS)
    set(arg_STATS none)
  endif()
  list(LENGTH arg_COLLECTIVES n_coll)
  set(made "")
  foreach(transport IN LISTS arg_TRANSPORTS)
    set(stack ${transport})
    set(faulty "")
    if(transport MATCHES "^faulty_(.+)$")
      set(stack ${CMAKE_MATCH_1})
      set(faulty COMMX_VARIANT_FAULTY=1)
    endif()
    if(NOT TARGET commx::${stack})
      message(FATAL_ERROR "commx_add_variants(${name}): no stack target commx::${stack}")
    endif()
    set(colls "")
    foreach(coll IN LISTS arg_COLLECTIVES)
      if(coll STREQUAL "native" AND NOT transport STREQUAL "mpi")
        continue()
      endif()
      list(APPEND colls ${coll})
    endforeach()
    if(arg_ANY_COLLECTIVES)
      # One target; the list as C++ types (commas survive a definition, semicolons would not).
      set(types "")
      foreach(coll IN LISTS colls)
        list(APPEND types "commx::coll::${coll}")
      endforeach()
      list(JOIN types "," types)
      list(GET colls 0 default_coll)
      if("tuned" IN_LIST colls)
        set(default_coll tuned)
      endif()
      set(colls ${default_coll})
      set(any COMMX_VARIANT_ANY_COLLECTIVES=1 COMMX_VARIANT_COLLECTIVES_LIST=${types})
      if(transport STREQUAL "mpi" AND "native" IN_LIST arg_COLLECTIVES)
        list(APPEND any COMMX_VARIANT_NATIVE=1)
      endif()
    else()
      set(any "")
    endif()
    foreach(coll IN LISTS colls)
      if(arg_ANY_COLLECTIVES OR (n_coll EQUAL 1 AND NOT arg_POLICY_IN_NAME))
        set(target ${name}_${transport})
      else()
        set(target ${name}_${transport}_${coll})
      endif()
      add_executable(${target} ${arg_SOURCES})
      target_link_libraries(${target} PRIVATE commx::${stack} ${arg_LIBRARIES})
      if(TARGET commx::pmix AND stack MATCHES "tcp|wan")
        target_link_libraries(${target} PRIVATE commx::pmix)
      endif()
      target_compile_definitions(${target} PRIVATE ${faulty} ${any}
        COMMX_VARIANT_TRANSPORT=${stack}
        COMMX_VARIANT_TRANSPORT_HEADER="commx/transport/${stack}.hpp"
        COMMX_VARIANT_COLLECTIVES_HEADER="commx/coll/${coll}.hpp"
        COMMX_VARIANT_COLLECTIVES=${coll}
        COMMX_VARIANT_STATS=${arg_STATS}
        COMMX_VARIANT_NAME="${target}")
      list(APPEND made ${target})
    endforeach()
  endforeach()
  if(arg_OUT_TARGETS)
    set(${arg_OUT_TARGETS} ${made} PARENT_SCOPE)
  endif()
endfunction()
