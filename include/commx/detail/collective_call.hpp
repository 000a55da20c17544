// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// One collective call as the communicator prepares it for a blocking or a nonblocking run
/// (detail/communicator_collectives.hpp).

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "commx/coll/detail/inline_list.hpp"
#include "commx/detail/call_check.hpp"

namespace commx::detail {

/// One collective call, checked and ready to run: what it is (for the cross-rank check),
/// whether it reduces (so reduction_order applies), and `body(port, policy)`, which runs the
/// policy's collective on the call's buffers. The body owns what it needs but the caller's
/// buffers, so a nonblocking call can outlive the function that started it.
/// `moves_nothing`: every rank knows that no rank has an element to send or receive (the sizes
/// that say so are the same on every rank), so the call ends where it starts, as MPI's
/// collectives of count 0 do.
template <bool Reduces, class Body>
struct collective_call {
  static constexpr bool reduces = Reduces;
  call_signature signature;
  Body body;
  bool moves_nothing = false;
};

template <bool Reduces, class Body>
collective_call<Reduces, Body> make_call(const call_signature& signature, Body body,
                                         bool moves_nothing = false) {
  return {signature, std::move(body), moves_nothing};
}

/// The body's own copy of a call's counts or displacements; none for a call that moves
/// nothing, whose body never runs (a count-0 call allocates nothing).
inline std::vector<std::size_t> owned(std::span<const std::size_t> values,
                                      bool moves_nothing = false) {
  if (moves_nothing) return {};
  return {values.begin(), values.end()};
}

/// Counts or displacements a call makes for itself live in place up to 64 ranks (512 bytes):
/// a packed-layout call, or a count-0 one, allocates nothing for them.
inline constexpr std::size_t in_place_counts = 512;

/// The displacements that lay blocks of `counts` back to back.
class packed_displacements {
 public:
  explicit packed_displacements(std::span<const std::size_t> counts) : displs_(counts.size()) {
    std::size_t offset = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      displs_.view()[r] = offset;
      offset += counts[r];
    }
  }
  [[nodiscard]] std::span<const std::size_t> view() const { return displs_.view(); }

 private:
  coll::detail::scratch<std::size_t, in_place_counts> displs_;
};

}  // namespace commx::detail
