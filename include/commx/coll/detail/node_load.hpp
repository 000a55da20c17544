// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Whether the job's ranks take turns on this machine's cores. coll::tuned asks: a table
/// measured on a machine of C cores at more than C ranks measured ranks taking turns (a message
/// waits until its receiver is scheduled, so fewer, longer rounds win), and holds only where
/// ranks take turns too; on a node with a core per rank the cost model (cost_model.hpp) chooses
/// instead.
///
/// Every rank must choose alike, without talking: so the answer is yes only for a job wholly on
/// one machine with more ranks than its cores, which every rank of it sees the same way. The
/// launcher says how many of the job's ranks are on this machine:
///
/// | launcher | ranks here | ranks in the job |
/// |---|---|---|
/// | commxrun | COMMX_LOCAL_SIZE | COMMX_SIZE |
/// | Open MPI's mpirun | OMPI_COMM_WORLD_LOCAL_SIZE | OMPI_COMM_WORLD_SIZE |
/// | MPICH's Hydra | MPI_LOCALNRANKS | PMI_SIZE |
/// | none (inproc, by hand) | the communicator's ranks, all of them here | |
///
/// A job spread over nodes, or made of several launches (COMMX_JOB_SIZE), is taken as having a
/// core per rank, even where its nodes are oversubscribed (the nodes might not be alike). Cores
/// are the machine's online ones, not this process's affinity mask: a rank bound to one core has
/// a core of its own.

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <optional>

#include "commx/coll/concept.hpp"

namespace commx::coll::detail {

/// What the launcher says of this machine, read once per process.
struct node_load {
  std::optional<int> local_ranks;  ///< the job's ranks on this machine, if a launcher said
  int job_ranks = 0;               ///< the job's ranks, where it did
  int cores = 1;                   ///< online cores

  /// Whether ranks take turns on the cores, the same answer at every rank of a communicator
  /// of `ranks` ranks.
  [[nodiscard]] bool oversubscribed(int ranks) const {
    if (!local_ranks) return ranks > cores;
    return *local_ranks == job_ranks && job_ranks > cores;
  }

  /// How many of the job's ranks each core runs in turn (1 where it is not oversubscribed),
  /// the same at every rank of a communicator of `ranks` ranks.
  [[nodiscard]] int ranks_per_core(int ranks) const {
    if (!oversubscribed(ranks)) return 1;
    const int here = local_ranks.value_or(ranks);
    return (here + cores - 1) / cores;
  }

  static node_load from_env() {
    node_load load;
    struct pair {
      const char* here;
      const char* job;
    };
    for (const pair& p :
         std::array<pair, 3>{{{"COMMX_LOCAL_SIZE", "COMMX_SIZE"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE"},
                              {"MPI_LOCALNRANKS", "PMI_SIZE"}}}) {
      const auto here = count(p.here);
      const auto job = count(p.job);
      if (here && job) {
        load.local_ranks = *here;
        load.job_ranks = *job;
        break;
      }
    }
    // A job of several launches (one per site, bootstrap.hpp): the launch is not the job.
    if (const auto whole = count("COMMX_JOB_SIZE"); whole && load.local_ranks) {
      load.job_ranks = *whole;
    }
    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    load.cores = online > 0 ? static_cast<int>(online) : 1;
    return load;
  }

 private:
  static std::optional<int> count(const char* variable) {
    const char* text = std::getenv(variable);  // NOLINT(concurrency-mt-unsafe): read once
    if (text == nullptr) return std::nullopt;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || value < 1 || value >= (1L << 24)) return std::nullopt;
    return static_cast<int>(value);
  }
};

/// This process's machine, as its launcher described it.
inline const node_load& this_node() {
  static const node_load load = node_load::from_env();
  return load;
}

/// How many ranks each core runs in turn for a communicator of `ranks` ranks over port P:
/// this machine's load, or 1 on a simulated platform, whose ranks each have a core of a
/// simulated host whatever this machine has.
template <class P>
[[nodiscard]] int ranks_per_core_for(int ranks) {
  if constexpr (simulated_stack<P>()) {
    return 1;
  } else {
    return this_node().ranks_per_core(ranks);
  }
}

}  // namespace commx::coll::detail
