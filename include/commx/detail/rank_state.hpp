// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What every communicator of one rank shares: the transport endpoint, the stats, the next
/// free context id and what recovery keeps (recovery_state.hpp); and a communicator's group,
/// mapping its ranks to world ranks and back, with its recovery channel and whether this rank
/// has seen it revoked.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "commx/coll/detail/node_layout.hpp"
#include "commx/detail/collective_task.hpp"
#include "commx/detail/convert_layout.hpp"
#include "commx/detail/local_shared.hpp"
#include "commx/detail/recovery_state.hpp"
#include "commx/stats.hpp"
#include "commx/transport/concept.hpp"

#include <fmt/format.h>

namespace commx::detail {

/// Where a transport cannot tell layouts apart, there is nothing to remember (and no byte).
struct one_layout {};

template <transport::transport T, stats::policy S>
struct rank_state {
  explicit rank_state(T&& joined) : endpoint(std::move(joined)) {
    if constexpr (transport::knows_layouts<T>) mixed_layouts = layouts_differ(endpoint);
  }
  rank_state(const rank_state&) = delete;
  rank_state& operator=(const rank_state&) = delete;
  ~rank_state() { recovery.abandon(endpoint); }

  T endpoint;
  // Whether some rank's machine lays out values otherwise than this one's: then raw data
  // received is converted (convert_layout.hpp); else nothing is looked at. Only for a
  // transport that knows layouts: others pay nothing, not even a byte.
  [[no_unique_address]] std::conditional_t<transport::knows_layouts<T>, bool, one_layout>
      mixed_layouts{};
  [[no_unique_address]] S stats;
  // Context ids come in pairs (point-to-point, collectives). Every new communicator takes the
  // largest next_context of its members, so no rank is ever in two communicators with one id.
  context_id next_context = 2;
  // The nonblocking collectives in flight on any of this rank's communicators.
  running_collectives running;
  // Revocation notices on their way and agreements this rank may still have to answer.
  recovery_state<T> recovery;
};

/// A communicator's members, as world ranks, and the reverse map.
class group {
 public:
  /// The world group of `size` ranks (contexts 0 and 1).
  explicit group(int size)
      : world_of_(static_cast<std::size_t>(size)),
        local_of_(world_of_.size()),
        channel_(recovery_channel(0)) {
    for (int r = 0; r < size; ++r) world_of_[index(r)] = local_of_[index(r)] = r;
  }

  /// The group of a communicator on contexts `ctx`, `ctx` + 1.
  group(std::vector<int> members, int world_size, context_id ctx)
      : world_of_(std::move(members)),
        local_of_(static_cast<std::size_t>(world_size), -1),
        channel_(recovery_channel(ctx)) {
    for (std::size_t local = 0; local < world_of_.size(); ++local) {
      local_of_[index(world_of_[local])] = static_cast<int>(local);
    }
  }

  [[nodiscard]] int size() const { return static_cast<int>(world_of_.size()); }
  [[nodiscard]] int world_of(int local) const { return world_of_[index(local)]; }
  /// -1 for a world rank outside the group.
  [[nodiscard]] int local_of(int world) const {
    return world < 0 ? world : local_of_[index(world)];
  }

  /// "peer 3", or "world rank 5 (not in this communicator)" for a rank outside the group.
  [[nodiscard]] std::string describe(int world) const {
    const int local = local_of(world);
    if (local >= 0) return fmt::format("peer {}", local);
    return fmt::format("world rank {} (not in this communicator)", world);
  }

  /// The context of this communicator's revocation notices and agreements (recovery_state.hpp).
  [[nodiscard]] context_id channel() const { return channel_; }
  /// Whether this rank has seen the communicator revoked (here or by a notice), or the one it
  /// is revoked along with (revoke_along).
  [[nodiscard]] bool revoked() const {
    return revoked_ || (revoked_along_ && revoked_along_->revoked());
  }
  /// Makes this group revoked whenever `parent` is: the own communicator of a window or of
  /// active messages, duplicated from the one they were made over, whose revocation must end
  /// their traffic too (a plain dup or split is not revoked with its parent).
  void revoke_along(local_shared<const group> parent) const { revoked_along_ = std::move(parent); }
  /// The group this one is revoked along with, if any (its notices are looked for too).
  [[nodiscard]] const group* revoked_along() const { return revoked_along_.get(); }
  /// Marks it revoked; true the first time. Every handle onto the communicator shares its
  /// group, so each sees it (a rank uses its communicators from one thread).
  bool mark_revoked() const { return !std::exchange(revoked_, true); }
  /// The number of this rank's next agreement on the communicator (every survivor calls agree
  /// alike, whatever collectives a failure cut short, so agreements are numbered apart).
  std::uint32_t next_agreement() const { return agreements_++; }
  /// Whether this communicator acknowledged world rank `world`'s failure (acknowledge_failures).
  [[nodiscard]] bool acknowledged(int world) const {
    return std::find(acknowledged_.begin(), acknowledged_.end(), world) != acknowledged_.end();
  }
  void acknowledge(int world) const {
    if (!acknowledged(world)) acknowledged_.push_back(world);
  }
  /// The members by node (coll/detail/node_layout.hpp), `find()`'s the first time it is asked:
  /// the members and the nodes they are on never change.
  template <class Find>
  const coll::detail::node_layout& node_layout(Find&& find) const {
    if (!nodes_) nodes_ = std::make_shared<const coll::detail::node_layout>(find());
    return *nodes_;
  }

 private:
  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }

  std::vector<int> world_of_;
  std::vector<int> local_of_;
  context_id channel_;
  mutable bool revoked_ = false;
  mutable std::uint32_t agreements_ = 0;
  mutable std::vector<int> acknowledged_;  // world ranks; one entry per failure acknowledged
  mutable local_shared<const group> revoked_along_;
  mutable std::shared_ptr<const coll::detail::node_layout> nodes_;  // made by node_layout()
};

/// Whether a network joins some of `members` (world ranks of `endpoint`'s job), rather than
/// memory joining them all: only then can a partition or a stall cut one off for good (shrink's
/// majority rule; agreement.hpp's single exchange at 2 ranks), and only then does each message
/// cost system calls (agreement.hpp's radix). Within a node a transport joins ranks by memory
/// only where it says `node_cannot_split`.
template <transport::transport T>
bool network_joins(const T& endpoint, const group& members) {
  if constexpr (transport::splits_within_node<T>) return true;
  const int node = endpoint.node_of(members.world_of(0));
  for (int r = 1; r < members.size(); ++r) {
    if (endpoint.node_of(members.world_of(r)) != node) return true;
  }
  return false;
}

}  // namespace commx::detail
