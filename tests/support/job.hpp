// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Runs a test job on the transport under test, so one test source checks every transport.
///
/// The build picks the transport (tests/CMakeLists.txt, commx_add_transport_tests): it defines
/// COMMX_TEST_TRANSPORT (`shm`, `tcp`, ...) and COMMX_TEST_TRANSPORT_HEADER. Without them the
/// transport is inproc and a job is n threads of this process, as inproc_job runs it.
///
/// On any other transport this process is one rank of a job that a launcher (commxrun,
/// mpirun) started, and every rank runs the same Catch2 test cases in the same order. A job of
/// n ranks then runs on the first n ranks of the launched world (the others skip it), on a
/// communicator of its own, so no test's messages meet another's. A failing rank prints why
/// and ends its process at once: the launcher stops the others, so a broken check fails the
/// test promptly instead of leaving its peers to wait out their deadlines.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/transport/inproc.hpp"
#include "support/inproc_job.hpp"

#if defined(COMMX_TEST_TRANSPORT) != defined(COMMX_TEST_TRANSPORT_HEADER)
#error "define both COMMX_TEST_TRANSPORT and COMMX_TEST_TRANSPORT_HEADER, or neither"
#endif
#ifdef COMMX_TEST_TRANSPORT_HEADER
#include COMMX_TEST_TRANSPORT_HEADER
#endif
#ifdef COMMX_TEST_FAULTY
#include "commx/transport/faulty.hpp"
#endif

namespace commx::test {

#ifdef COMMX_TEST_TRANSPORT
using transport_under_faults = commx::transport::COMMX_TEST_TRANSPORT;
#else
using transport_under_faults = commx::transport::inproc;
#endif
/// The transport the build names, or with COMMX_TEST_FAULTY, it under transport::faulty (the
/// faults COMMX_FAULTS says: the suites check that they bend time and break no semantics).
#ifdef COMMX_TEST_FAULTY
using transport_under_test = commx::transport::faulty<transport_under_faults>;
#else
using transport_under_test = transport_under_faults;
#endif

/// The stats policy of every communicator a test program's jobs use: COMMX_TEST_STATS, else
/// none. A launched process joins one world, of one type, and splits every job from it.
#ifdef COMMX_TEST_STATS
using stats_under_test = stats::COMMX_TEST_STATS;
#else
using stats_under_test = stats::none;
#endif

/// True when the transport runs a job's ranks itself, inside this process (a simulation).
inline constexpr bool own_jobs = runs_own_jobs<transport_under_test>;

/// True when the ranks of a job are the processes a launcher started.
inline constexpr bool multi_process = !on_threads<transport_under_test> && !own_jobs;

namespace job_internals {

inline options process_options() {
  options opts;
  opts.timeout = std::chrono::seconds(60);
  return opts;
}

[[noreturn]] inline void fail_rank(int rank, const char* what) {
  fmt::print(stderr, "rank {}: test job failed: {}\n", rank, what);
  std::fflush(stderr);
  std::_Exit(1);
}

/// This process's world, joined once: a second rendezvous in one process would be a second
/// job. Every communicator a test uses is split from it, whatever its collectives policy.
/// A rank that cannot join ends at once: retrying in the next test case would be a second
/// rendezvous that its peers, already past the first, never join.
template <class Stats>
communicator<transport_under_test, coll::flat, Stats>& process_world() {
  static auto world = [] {
    try {
      return communicator<transport_under_test, coll::flat, Stats>::from_env(process_options());
    } catch (const std::exception& e) {
      fail_rank(unknown, e.what());
    }
  }();
  return world;
}

}  // namespace job_internals

/// The rank counts a test sweeps: the launched world's size on a multi-process transport,
/// else test_rank_counts().
inline std::vector<int> job_rank_counts() {
  if constexpr (multi_process) {
    return {job_internals::process_world<stats_under_test>().size()};
  } else {
    return test_rank_counts();
  }
}

/// Runs `fn(comm)` on n ranks. `nodes` and `sites` lay out inproc ranks on nodes and sites; a
/// multi-process job has the ones its transport reports.
template <class Comm, class Fn>
void job(int n, Fn&& fn, std::vector<int> nodes = {}, std::vector<int> sites = {}) {
  static_assert(std::is_same_v<typename Comm::transport_type, transport_under_test>,
                "a test job runs on the transport under test");
  static_assert(!multi_process || std::is_same_v<typename Comm::stats_type, stats_under_test>,
                "a launched test's jobs use the stats policy under test (COMMX_TEST_STATS)");
  if constexpr (own_jobs) {
    // A simulated job has the sites its platform has; nodes name hosts.
    using runner = typename Comm::transport_type::job_runner;
    runner::template run<Comm>(n, std::forward<Fn>(fn), nodes, job_options().comm);
  } else if constexpr (!multi_process) {
    inproc_job<Comm>(n, std::forward<Fn>(fn), std::move(nodes), std::move(sites));
  } else {
    auto& world = job_internals::process_world<typename Comm::stats_type>();
    if (n > world.size()) {
      if (world.rank() == 0) {
        fmt::print("skipped: a job of {} ranks in a world of {}\n", n, world.size());
      }
      return;
    }
    try {
      auto parent = world.template with_collectives<typename Comm::collectives_type>();
      Comm ranks = parent.split(world.rank() < n ? 0 : undefined_color, world.rank());
      if (!ranks.is_null()) fn(ranks);
    } catch (const std::exception& e) {
      job_internals::fail_rank(world.rank(), e.what());
    }
  }
}

/// Runs `fn(world)` on every launched rank, then ends every process but rank 0's, so that rank
/// 0 sees its peers gone (a real exit: the transport closes as the process ends). For
/// multi-process transports only.
template <class Comm, class Fn>
void job_then_leave(Fn&& fn) {
  auto& world = job_internals::process_world<typename Comm::stats_type>();
  const int rank = world.rank();
  try {
    auto whole = world.template with_collectives<typename Comm::collectives_type>();
    fn(whole);
  } catch (const std::exception& e) {
    job_internals::fail_rank(rank, e.what());
  }
  if (rank != 0) std::exit(0);  // NOLINT(concurrency-mt-unsafe): the test's only thread
}

}  // namespace commx::test
