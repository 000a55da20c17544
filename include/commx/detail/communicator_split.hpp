// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// communicator's sub-communicators (communicator.hpp), out of line: `split` agrees on colors,
/// keys and fresh context ids through an allgather, unless the transport makes communicators
/// itself (MPI_Comm_split), whose result is adopted.

#include <algorithm>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"

namespace commx {

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline communicator<T, C, S> communicator<T, C, S>::split(int color, int key, deadline until) {
  check_valid("split");
  if (color < 0 && color != undefined_color) {
    throw_error(errc::invalid_argument, where("split", unknown, unknown, 0),
                fmt::format("color {} is negative", color));
  }
  // A transport that makes communicators itself (MPI_Comm_split) is asked to.
  if constexpr (requires(T & t) { t.split(ctx_, color, key, context_id{}); }) {
    if constexpr (S::enabled) state_->stats.on_call(stats::op::split);
    return adopt(state_->endpoint.split(ctx_, color, key, state_->next_context));
  }
  struct entry {
    int color;
    int key;
    context_id next_context;
  };
  const entry mine{color, key, state_->next_context};
  std::vector<entry> all(as_size(size()));
  run(detail::make_call<false>(
          detail::signature_of<entry>(stats::op::split, -1, detail::call_signature::not_compared),
          [&](auto& port, auto policy) {
            policy.allgather(port, std::span<const entry>(&mine, 1), std::span<entry>(all));
          }),
      until);

  context_id fresh = 0;
  for (const entry& e : all) fresh = std::max(fresh, e.next_context);
  state_->next_context = fresh + 2;
  if (color == undefined_color) return {};

  std::vector<int> members;  // parent ranks, then world ranks
  for (int r = 0; r < size(); ++r) {
    if (all[as_size(r)].color == color) members.push_back(r);
  }
  std::ranges::stable_sort(members, {}, [&](int r) { return all[as_size(r)].key; });
  const int new_rank = static_cast<int>(std::ranges::find(members, rank_) - members.begin());
  for (int& r : members) r = group_->world_of(r);

  return child(fresh, std::move(members), new_rank);
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline communicator<T, C, S> communicator<T, C, S>::split_by_node(deadline until) {
  check_valid("split_by_node");
  if constexpr (requires(T & t) { t.split_by_node(ctx_, rank_, context_id{}); }) {
    if constexpr (S::enabled) state_->stats.on_call(stats::op::split);
    return adopt(state_->endpoint.split_by_node(ctx_, rank_, state_->next_context));
  }
  return split(state_->endpoint.node_of(group_->world_of(rank_)), rank_, until);
}

// A new communicator of `members` (world ranks, in rank order) on contexts fresh, fresh + 1.
// It keeps this one's endpoint and settings (timeout, checks, reduction order).
template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline communicator<T, C, S> communicator<T, C, S>::child(context_id fresh,
                                                          std::vector<int> members,
                                                          int new_rank) const {
  communicator made = *this;
  made.group_ = detail::local_shared<const detail::group>::make(std::move(members),
                                                                state_->endpoint.size(), fresh);
  made.ctx_ = fresh;
  made.rank_ = new_rank;
  made.collective_calls_ = std::make_shared<std::uint32_t>(0);
  made.lease_.reset();  // adopt() gives it a lease of its own when its transport needs one
  return made;
}

// What a transport's own split made (see transport/concept.hpp). When the transport frees
// what it made for a context (`release`), the last handle onto the new communicator tells it.
template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class Made>
inline communicator<T, C, S> communicator<T, C, S>::adopt(Made&& made) {
  state_->next_context = made.context + 2;
  if (made.members.empty()) return {};
  communicator fresh = child(made.context, std::move(made.members), made.rank);
  if constexpr (requires(T & t) { t.release(made.context); }) {
    fresh.lease_ = std::shared_ptr<void>(
        nullptr, [state = state_, ctx = made.context](void*) { state->endpoint.release(ctx); });
  }
  return fresh;
}

}  // namespace commx
