// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Persistent receives (MPI_Recv_init) for the blocking receives an endpoint posts to MPI that
/// repeat themselves (the same buffer, size, source, tag and communicator, as a loop's receives
/// do). MPI_Start and MPI_Test on one cost less than MPI_Irecv and MPI_Test on a fresh request:
/// with Open MPI 4.1 no request is taken from MPI's free list and returned to it, and a
/// repeated 8-byte receive costs fewer instructions than MPI_Recv. A few are kept, the least
/// recently used one is replaced. A persistent receive that is not started touches no memory,
/// so a buffer freed meanwhile does no harm; its communicator must not be freed before it
/// (`forget`).

#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace commx::detail::mpi {

class persistent_receives {
 public:
  static constexpr std::size_t kept = 4;

  persistent_receives() = default;
  persistent_receives(const persistent_receives&) = delete;
  persistent_receives& operator=(const persistent_receives&) = delete;
  ~persistent_receives() { clear(); }

  /// An inactive persistent receive of `count` bytes into `data` from `source` with `tag` on
  /// `comm` (MPI's ranks and tags), made now unless one is kept; MPI_REQUEST_NULL with `code`
  /// set when MPI_Recv_init fails. Start it, and complete it (or cancel it) before asking for
  /// another.
  MPI_Request find(void* data, int count, int source, int tag, MPI_Comm comm, int& code) {
    ++uses_;
    entry* oldest = entries_.data();
    for (entry& e : entries_) {
      if (e.data == data && e.count == count && e.source == source && e.tag == tag &&
          e.comm == comm && e.request != MPI_REQUEST_NULL) [[likely]] {
        e.used = uses_;
        return e.request;
      }
      if (e.used < oldest->used) oldest = &e;
    }
    drop(*oldest);
    MPI_Request made = MPI_REQUEST_NULL;
    code = MPI_Recv_init(data, count, MPI_BYTE, source, tag, comm, &made);
    if (code != MPI_SUCCESS) return MPI_REQUEST_NULL;
    *oldest = {data, count, source, tag, comm, made, uses_};
    return made;
  }

  /// Forgets `request`, one of these, which ended in an error or was withdrawn: MPI may not
  /// start it again. `still_allocated`: whether MPI left it allocated (MPICH does; Open MPI
  /// frees a request whose MPI_Test or MPI_Wait reports an error, persistent or not, and sets
  /// the caller's handle to MPI_REQUEST_NULL), so it is freed here. Never throws.
  void discard(MPI_Request request, bool still_allocated) noexcept {
    for (entry& e : entries_) {
      if (e.request != request) continue;
      if (still_allocated) {
        drop(e);
      } else {
        e = entry{};
      }
    }
  }

  /// Frees those on `comm`, which is about to be freed. Never throws.
  void forget(MPI_Comm comm) noexcept {
    for (entry& e : entries_) {
      if (e.comm == comm) drop(e);
    }
  }

  /// Frees them all (while MPI runs). Never throws.
  void clear() noexcept {
    int finalized = 1;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized != 0) return;
    for (entry& e : entries_) drop(e);
  }

 private:
  struct entry {
    void* data = nullptr;
    int count = 0;
    int source = 0;
    int tag = 0;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Request request = MPI_REQUEST_NULL;
    std::uint64_t used = 0;
  };

  static void drop(entry& e) noexcept {
    if (e.request != MPI_REQUEST_NULL) (void)MPI_Request_free(&e.request);
    e = entry{};
  }

  std::array<entry, kept> entries_{};
  std::uint64_t uses_ = 0;
};

}  // namespace commx::detail::mpi
