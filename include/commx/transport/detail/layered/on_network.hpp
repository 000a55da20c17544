// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The layered stacks' own traffic on their network level (the start-up meeting, agreeing on a
/// split) and their joining (`join_with`): small messages on context ids no communicator uses, each bounded by the network
/// transport's timeout, so that a rank that never comes is named rather than waited for.

#include <chrono>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/error.hpp"
#include "commx/transport/concept.hpp"

namespace commx::detail::layered {

/// Context ids of the layered stacks' own messages on the network level: communicators count
/// up from 0, so these are never theirs.
inline constexpr context_id meeting_context = ~context_id{0};
/// See meeting_context; the tag is the parent communicator's context.
inline constexpr context_id splitting_context = ~context_id{0} - 1;

/// How long the network level waits for a peer: its COMMX_TIMEOUT (tcp and wan say it), else
/// 2 minutes.
template <class Net>
clock::duration network_timeout(const Net& net) {
  if constexpr (requires { net.timeout(); }) {
    return net.timeout();
  } else {
    return std::chrono::minutes(2);
  }
}

/// Waits for `r`, one of the layered stack's own requests on `net` with `peer`, until `until`
/// (`limit` after it began), and says how it ended; `doing` says what for, in the error.
/// @throws commx::error errc::timeout naming `peer` (the request withdrawn); the request's own
///   error (errc::peer_lost, ...).
template <class Net>
transport::op_result finish_on(Net& net, typename Net::request r, int peer, clock::time_point until,
                               clock::duration limit, std::string_view doing) {
  while (!net.test(r)) {
    if (clock::now() >= until) {
      net.cancel(r);
      throw error(errc::timeout,
                  fmt::format("rank {}: {}: rank {} did not answer within {} s", net.rank(), doing,
                              peer, std::chrono::duration<double>(limit).count()));
    }
    net.wait_for_event(net.event_count(), until);
  }
  const transport::op_result& done = net.result(r);
  if (done.error) {
    throw error(done.error, fmt::format("rank {}: {}: rank {}: {}", net.rank(), doing, peer,
                                        done.error.message()));
  }
  return done;
}

/// A layered stack `Stack` over `net`: every rank meets over the network first, then the ranks
/// that share this rank's inner level (`Stack::inner_members`) make that level's endpoint,
/// `make_inner(net, members)`.
/// @throws commx::error as Stack::meet and `make_inner` do.
template <class Stack, class Net, class MakeInner>
Stack join_with(Net net, MakeInner&& make_inner) {
  Stack::meet(net);
  std::vector<int> members = Stack::inner_members(net);
  auto inner = make_inner(std::as_const(net), std::as_const(members));
  return Stack(std::move(net), std::move(inner), std::move(members));
}

}  // namespace commx::detail::layered
