// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// communicator's recovery after a failure (communicator.hpp), out of line: revoke
/// (detail/recovery.hpp), agree (detail/agreement.hpp) and shrink, an agreement on the lost
/// ranks and a fresh context, then a second one on the new communicator, repeated while ranks
/// die during it, so that every member of what shrink returns reached its end.
///
/// Only for transports that tell failures and take any context (`detail::recovers`): on mpi
/// and mpi+wan a failure ends the job (Debian's MPIs have no ULFM), and these calls do not
/// compile there. acknowledge_failures (detail/failures.hpp) compiles everywhere.

#include <algorithm>
#include <chrono>
#include <concepts>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"

namespace commx {

namespace detail {
template <class T>
constexpr void require_failure_knowledge() {
  static_assert(recovers<T>,
                "commx: revoke, agree and shrink need a transport that tells failures and takes "
                "any context (inproc, shm, tcp, wan, shm+tcp, shm+tcp+wan, faulty<T> over "
                "them); on mpi and mpi+wan a failure ends the job (Debian's MPIs have no ULFM)");
}
}  // namespace detail

// On every stack: where failures are not told (mpi) none is known, and nothing changes.
template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline std::vector<int> communicator<T, C, S>::acknowledge_failures() {
  std::vector<int> lost = known_lost();
  for (const int local : lost) group_->acknowledge(group_->world_of(local));
  return lost;
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::revoke() {
  detail::require_failure_knowledge<T>();
  check_valid("revoke");
  if (!group_->mark_revoked()) return;
  std::vector<int> everyone(as_size(size()));
  for (int r = 0; r < size(); ++r) everyone[as_size(r)] = r;
  detail::send_revocations(*state_, *group_, everyone);
  detail::look_for_recovery(*state_, group_.get(), clock::now());  // sends what it can now
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline bool communicator<T, C, S>::is_revoked() {
  detail::require_failure_knowledge<T>();
  check_valid("is_revoked");
  if (!group_->revoked()) {
    if constexpr (requires(T & t) { t.progress(); }) state_->endpoint.progress();
    detail::look_for_recovery(*state_, group_.get(), clock::now());
  }
  return group_->revoked();
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <std::integral V, agreement_op Op>
inline agreement<V> communicator<T, C, S>::agree(V value, Op op, deadline until) {
  detail::require_failure_knowledge<T>();
  check_valid("agree");
  [[maybe_unused]] const auto inside = detail::library_call(state_->endpoint);
  detail::agreement_run<T, S, V, Op> run(*state_, *group_, rank_, group_->next_agreement(), value,
                                         op, until, timeout_);
  return run.run();
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline communicator<T, C, S> communicator<T, C, S>::shrink(shrink_quorum quorum, deadline until) {
  detail::require_failure_knowledge<T>();
  check_valid("shrink");
  const clock::time_point when = until.resolve(timeout_);
  const agreement<context_id> agreed = agree(state_->next_context, op::max{}, when);
  const context_id fresh = agreed.value;
  state_->next_context = std::max(state_->next_context, fresh + 2);
  if (std::ranges::binary_search(agreed.lost, rank_)) {
    // Some survivor could not reach this rank (a broken connection, a partition that healed,
    // a stall): the others go on without it, and it must not go on as a job of its own.
    throw_error(errc::excluded, where("shrink", unknown, unknown, 0),
                "the survivors agreed this rank lost (some of them could not reach it); they "
                "go on without it");
  }

  std::vector<int> members;  // world ranks, in this communicator's order
  int new_rank = -1;
  // The old communicator's nodes, not the survivors': a rank cut off from every other node
  // keeps only its own, and must not go on alone. Within a node a network transport can cut a
  // rank off too (a stall on tcp: transport::splits_within_node).
  const bool partition_possible = detail::network_joins(state_->endpoint, *group_);
  for (int r = 0; r < size(); ++r) {
    if (std::ranges::binary_search(agreed.lost, r)) continue;
    if (r == rank_) new_rank = static_cast<int>(members.size());
    members.push_back(group_->world_of(r));
  }
  const int kept = static_cast<int>(members.size());
  if (quorum == shrink_quorum::majority && partition_possible && 2 * kept <= size()) {
    throw_error(errc::no_majority, where("shrink", unknown, unknown, 0),
                fmt::format("{} of {} ranks survive, not a majority: on a network a partition "
                            "or a stall must not leave two working halves "
                            "(shrink(shrink_quorum::any) goes on without one)",
                            kept, size()));
  }
  communicator made = child(fresh, std::move(members), new_rank);
  // Ranks that died after reporting are in `made`: one more agreement among its members
  // finds them, and shrinks again until none is lost (a rank, being lost, is not waited for).
  // The caller's quorum holds at each step: every member of `made` agreed on it, so only one
  // side of a partition that forms between the two agreements holds a majority of it.
  const agreement<int> settled = made.agree(0, op::max{}, when);
  if (settled.lost.empty()) return made;
  return made.shrink(quorum, when);
}

}  // namespace commx
