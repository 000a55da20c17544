// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `commx::init`: MPI initialised for as long as commx needs it, finalised only by whoever
/// initialised it.

#include <mpi.h>

#include <memory>

#include "commx/error.hpp"
#include "commx/transport/detail/mpi/call.hpp"

namespace commx {

/// Initialises MPI if the caller has not, and finalises it on destruction only if this guard
/// initialised it: a code that already runs MPI keeps control of MPI_Init and MPI_Finalize.
/// `transport::mpi::from_env()` holds one, shared, for as long as its endpoint lives.
///
/// @throws commx::error (errc::bootstrap_failed) when MPI was already finalised, or when the
///   library cannot give the thread level asked for.
/// Thread safety: construct and destroy it on the thread that runs MPI (the main thread).
class init {
 public:
  /// `required`: the MPI thread level commx needs. One endpoint is used by one thread at a time
  /// (MPI_THREAD_SERIALIZED); endpoints used from several threads at once need
  /// MPI_THREAD_MULTIPLE.
  explicit init(int required = MPI_THREAD_SERIALIZED) {
    int finalized = 0;
    detail::mpi::check(MPI_Finalized(&finalized), "MPI_Finalized");
    if (finalized != 0) throw error(errc::bootstrap_failed, "commx::init: MPI was finalised");
    int initialized = 0;
    detail::mpi::check(MPI_Initialized(&initialized), "MPI_Initialized");
    int provided = 0;
    if (initialized == 0) {
      detail::mpi::check(MPI_Init_thread(nullptr, nullptr, required, &provided), "MPI_Init_thread");
      owns_ = true;
    } else {
      detail::mpi::check(MPI_Query_thread(&provided), "MPI_Query_thread");
    }
    if (provided < required) {
      if (owns_) (void)MPI_Finalize();
      throw error(errc::bootstrap_failed,
                  fmt::format("commx::init: MPI provides thread level {}, commx needs {}", provided,
                              required));
    }
  }
  init(const init&) = delete;
  init& operator=(const init&) = delete;
  ~init() {
    int finalized = 1;
    if (owns_ && MPI_Finalized(&finalized) == MPI_SUCCESS && finalized == 0) (void)MPI_Finalize();
  }

  /// Whether this guard called MPI_Init_thread (and will call MPI_Finalize).
  [[nodiscard]] bool owns_mpi() const { return owns_; }

 private:
  bool owns_ = false;
};

}  // namespace commx
