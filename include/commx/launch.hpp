// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Starting a job: `run_inproc(n, fn)` runs fn on n threads of this process;
/// `run<Comm>(fn)` runs fn however Comm's stack runs, so one `main` serves every stack.

#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "commx/communicator.hpp"
#include "commx/options.hpp"
#include "commx/transport/inproc.hpp"

namespace commx {

/// How `run_inproc` runs a job: the communicator's options and the hub's.
struct inproc_options {
  /// Node id per rank, to make one process look like several nodes; empty: all on node 0.
  std::vector<int> nodes;
  /// Site id per rank, to make it look like several sites; empty: all at site 0. A node is at
  /// one site.
  std::vector<int> sites;
  /// The communicator's options (timeout, checks, reduction).
  options comm;
};

/// A transport whose ranks are threads of one process: inproc, or a wrapper over it
/// (transport::faulty<inproc>) made from an inproc endpoint, which can mark its rank failed.
template <class T>
concept on_threads = std::is_constructible_v<T, transport::inproc&&> && requires(T& t) {
  t.fail();
};

/// A transport whose ranks run inside this process by means of its own (transport::simgrid:
/// actors of a simulation): `T::job_runner::run<Comm>(n, fn, nodes, options, report)` runs a job
/// of n ranks and returns when it ends, `T::job_runner::ranks_from_env()` says how many ranks
/// `commx::run` starts.
template <class T>
concept runs_own_jobs = requires {
  typename T::job_runner;
};

/// Runs `fn(world)` on `n` threads, one rank each, and returns when all have returned. If a
/// rank throws, its peers stop waiting for it (their pending operations on it raise
/// errc::peer_lost), and once every thread has finished the first exception thrown is rethrown.
template <class Comm = communicator<transport::inproc>, class Fn>
requires on_threads<typename Comm::transport_type>
void run_inproc(int n, Fn&& fn, inproc_options opts = {}) {
  transport::inproc::hub_options layout;
  layout.nodes = std::move(opts.nodes);
  layout.sites = std::move(opts.sites);
  auto hub = std::make_shared<transport::inproc::hub>(n, std::move(layout));
  std::mutex failure_mutex;
  std::exception_ptr first_failure;
  {
    std::vector<std::jthread> ranks;
    ranks.reserve(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        Comm world(typename Comm::transport_type(transport::inproc(hub, r)), opts.comm);
        try {
          fn(world);
        } catch (...) {
          {
            // Recorded before the peers are released, so the cause wins over its echoes.
            std::lock_guard lock(failure_mutex);
            if (!first_failure) first_failure = std::current_exception();
          }
          world.transport().fail();
        }
      });
    }
  }
  if (first_failure) std::rethrow_exception(first_failure);
}

namespace detail {
inline int inproc_ranks_from_env() {
  const char* text = std::getenv("COMMX_INPROC_RANKS");
  if (text == nullptr || *text == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (*end != '\0' || n < 1 || n > 4096) {
    throw error(errc::invalid_argument,
                fmt::format("COMMX_INPROC_RANKS='{}' is not a rank count in [1, 4096]", text));
  }
  return static_cast<int>(n);
}
}  // namespace detail

/// Runs `fn(world)` as Comm's stack runs: on COMMX_INPROC_RANKS threads (default 1) for the
/// in-process transport, as the job a transport that runs its own starts (a simulation of
/// COMMX_SIMGRID_RANKS ranks), or as this process's rank of a job started by commxrun, srun or
/// mpirun for the others.
template <class Comm, class Fn>
void run(Fn&& fn, options opts = {}) {
  using T = typename Comm::transport_type;
  if constexpr (on_threads<T>) {
    inproc_options job;
    job.comm = opts;
    run_inproc<Comm>(detail::inproc_ranks_from_env(), std::forward<Fn>(fn), std::move(job));
  } else if constexpr (runs_own_jobs<T>) {
    T::job_runner::template run<Comm>(T::job_runner::ranks_from_env(), std::forward<Fn>(fn), {},
                                      opts, /*report=*/true);
  } else {
    Comm world = Comm::from_env(opts);
    fn(world);
  }
}

}  // namespace commx
