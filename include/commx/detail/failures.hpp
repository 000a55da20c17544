// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What a communicator knows of its members' failures, and the one rule it applies itself
/// rather than its transport (ULFM's "failure pending"): an `any_source` receive or probe on a
/// communicator one of whose members failed cannot tell whether that member would have been the
/// sender, so, while nothing queued matches it, it ends with errc::peer_lost, until the
/// communicator acknowledges the failure (`acknowledge_failures()`); from then on such calls
/// wait as before, for the others. A failure outside the communicator (a rank a shrink left
/// out, one a split did not take) is no concern of its wildcards. The transport ends receives
/// naming a lost peer; an `any_source` one it leaves posted, so the order receives were posted
/// in is the order they match, and a wait on it looks here when the transport's event count
/// moves (a failure moves it). Nothing is withdrawn that matched: a message queued from a
/// live sender is received whatever failed.
///
/// Cost: one scan of the transport's failed ranks per `any_source` call or wake-up of its wait
/// (none when nothing failed), and per communicator a list of the world ranks it acknowledged.

#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commx/detail/rank_state.hpp"
#include "commx/error.hpp"
#include "commx/transport/concept.hpp"

namespace commx::detail {

/// The ranks of `members` that `endpoint` knows failed, in the order it learned of them (world
/// ranks outside `members` are left out); none where the transport does not tell.
template <class Endpoint>
std::vector<int> known_lost_ranks(const Endpoint& endpoint, const group& members) {
  std::vector<int> lost;
  if constexpr (transport::knows_failures<Endpoint>) {
    for (const int world : endpoint.failed_peers()) {
      const int local = members.local_of(world);
      if (local >= 0) lost.push_back(local);
    }
  }
  return lost;
}

/// For an errc::peer_lost message: every rank `endpoint` knows failed, in the order it learned
/// of them, so that a rank that failed because another did does not hide the first (a survivor
/// waiting on rank 1, which died of rank 2's loss, reads of rank 2 too). Empty when none is
/// known.
template <class Endpoint>
std::string known_lost_note(const Endpoint& endpoint, const group& members) {
  std::string note;
  if constexpr (transport::knows_failures<Endpoint>) {
    for (const int world : endpoint.failed_peers()) {
      note += note.empty() ? "; failed so far, in the order this rank learned: " : ", ";
      note += members.describe(world);
    }
  }
  return note;
}

/// The first member of `members` (a world rank) that `endpoint` knows failed and the
/// communicator has not acknowledged: while there is one, its `any_source` calls that nothing
/// queued matches end with errc::peer_lost.
template <class Endpoint>
std::optional<int> pending_failure(const Endpoint& endpoint, const group& members) {
  if constexpr (transport::knows_failures<Endpoint>) {
    for (const int world : endpoint.failed_peers()) {
      if (members.local_of(world) >= 0 && !members.acknowledged(world)) return world;
    }
  }
  return std::nullopt;
}

/// Raises the peer_lost of an `any_source` call (`where`) that `world`'s unacknowledged
/// failure ends.
template <class Endpoint>
[[noreturn]] void throw_failure_pending(const Endpoint& endpoint, int world,
                                        const error_context& where, const group& members) {
  throw_error(errc::peer_lost, where,
              fmt::format("{} failed and this communicator has not acknowledged it, so an "
                          "any_source call cannot wait (that peer might have been the sender): "
                          "acknowledge_failures() lets it wait for the others{}",
                          members.describe(world), known_lost_note(endpoint, members)));
}

}  // namespace commx::detail
