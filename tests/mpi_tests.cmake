# SPDX-License-Identifier: MIT
# transport::mpi and coll::native under the MPI that commx::mpi was built with: Open MPI (CI's
# default) or MPICH (the "mpich" preset). Every test starts its own mpiexec, set up here so the
# tests run anywhere, also as root in a container.
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE commx_mpiexec_version
                ERROR_VARIABLE commx_mpiexec_version TIMEOUT 30)
if(commx_mpiexec_version MATCHES "Open MPI|OpenRTE")
  # --oversubscribe: 4 ranks on 2 cores. btl self,vader: this machine only, no network probing.
  # No single-copy (CMA needs ptrace rights containers often lack) and no core binding
  # (other jobs share the cores); ranks yield while MPI waits, as oversubscribed ranks must.
  set(commx_mpi_launch ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} @N@ --oversubscribe
      --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none
      --mca mpi_yield_when_idle 1)
  set(commx_mpi_environment OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      OMPI_MCA_rmaps_base_oversubscribe=1)
else()
  # MPICH's Hydra runs as root without asking and oversubscribes by itself. Its ranks spin in
  # blocking calls: yield after every poll, or 4 ranks starve each other on 2 cores.
  set(commx_mpi_launch ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} @N@)
  set(commx_mpi_environment MPIR_CVAR_POLLS_BEFORE_YIELD=1)
endif()

commx_add_transport_tests(mpi LINK commx::mpi RANKS 1 2 3 4 LAUNCH ${commx_mpi_launch}
                          ENVIRONMENT ${commx_mpi_environment} NO_PEER_LOSS COLLECTIVES native
                          IN_REST)

# The endpoint's posting order, in one process (no MPI call: no launcher).
add_executable(transport.mpi_receive_order transport/mpi_receive_order_test.cpp)
target_link_libraries(transport.mpi_receive_order PRIVATE commx::mpi commx_catch_main
                                                          commx_warnings)
add_test(NAME transport.mpi_receive_order COMMAND transport.mpi_receive_order --warn NoTests)
set_tests_properties(transport.mpi_receive_order PROPERTIES TIMEOUT 60)

# What only MPI has: wrapping a communicator, init and finalize, splitting through MPI, MPI's
# errors, user ops through MPI_Op_create.
add_executable(transport.mpi transport/mpi_test.cpp)
target_link_libraries(transport.mpi PRIVATE commx::mpi commx_catch_main commx_warnings)
target_include_directories(transport.mpi PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
function(commx_add_mpi_test name ranks)
  list(TRANSFORM commx_mpi_launch REPLACE "@N@" "${ranks}" OUTPUT_VARIABLE launch)
  add_test(NAME ${name} COMMAND ${launch} $<TARGET_FILE:transport.mpi> --warn NoTests ${ARGN})
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 ENVIRONMENT "${commx_mpi_environment}")
endfunction()
foreach(n 1 3 4)
  commx_add_mpi_test(transport.mpi.np${n} ${n})
endforeach()
# A process that initialises MPI through commx::init has it finalised; one that initialised MPI
# itself keeps it running. Each needs a process of its own (MPI starts once per process).
commx_add_mpi_test(transport.mpi.init_owned 2 "[.init_owned]")
commx_add_mpi_test(transport.mpi.init_borrowed 2 "[.init_borrowed]")

# Receives matched rather than posted to MPI (COMMX_MPI_RECEIVES=matched): the default posts
# them; both must keep every semantic.
foreach(suite conformance p2p coll.collectives)
  list(TRANSFORM commx_mpi_launch REPLACE "@N@" "3" OUTPUT_VARIABLE launch)
  add_test(NAME ${suite}.mpi.matched.np3
           COMMAND ${launch} $<TARGET_FILE:${suite}.mpi> --warn NoTests "~[.]~[inproc]~[ending]")
  set_tests_properties(${suite}.mpi.matched.np3 PROPERTIES TIMEOUT 300
                       ENVIRONMENT "${commx_mpi_environment};COMMX_MPI_RECEIVES=matched")
endforeach()

