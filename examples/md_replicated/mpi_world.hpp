// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The few calls the MD kernel makes of its communicator, written directly against MPI, with
/// no commx between: what md_replicated_mpi_raw runs, the baseline the main job compares every
/// stack and policy with (what commx's abstraction costs). MPI's default error handler ends
/// the job on a failure, as a hand-written MPI code's would.

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <span>
#include <type_traits>
#include <vector>

namespace md {

class mpi_world {
 public:
  /// No counters: the kernel's `if constexpr (stats_type::enabled)` drops what would use them.
  struct stats_type {
    static constexpr bool enabled = false;
  };

  explicit mpi_world(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] stats_type stats() const { return {}; }

  void barrier() { MPI_Barrier(comm_); }

  /// The force sum: MPI_Allreduce in place, MPI_SUM.
  void allreduce(std::span<double> data, std::plus<>) {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_DOUBLE, MPI_SUM,
                  comm_);
  }

  /// Each rank's figures to the root, as bytes.
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void gather(const T& mine, std::vector<T>& all, int root) {
    MPI_Gather(&mine, sizeof(T), MPI_BYTE, all.data(), sizeof(T), MPI_BYTE, root, comm_);
  }

  /// Equal blocks of doubles to the root.
  void gather(const std::vector<double>& mine, std::vector<double>& all, int root) {
    const int n = static_cast<int>(mine.size());
    MPI_Gather(mine.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, root, comm_);
  }

  void allgather(std::uint64_t mine, std::vector<std::uint64_t>& all) {
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_);
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace md
