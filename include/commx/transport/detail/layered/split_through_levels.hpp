// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Splitting a layered stack whose inner level makes its communicators itself (MPI inside a
/// site knows only the contexts it made with MPI_Comm_split): the ranks of the parent agree on
/// colors, keys and a fresh context id over the network level, then the inner level splits the
/// same way among this rank's inner peers, so that the new context exists on both levels under
/// one id. The network level takes any context id and needs no such step.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/error.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/detail/layered/on_network.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::layered {

/// The members (world ranks, in rank order) of every communicator a layered stack has made, and
/// the split that makes one (see the file comment).
class communicators_through_levels {
 public:
  /// The world's contexts (0 and 1) hold ranks 0..`world_size` - 1.
  explicit communicators_through_levels(int world_size) {
    std::vector<int> world(static_cast<std::size_t>(world_size));
    std::iota(world.begin(), world.end(), 0);
    members_.emplace(0, world);
    members_.emplace(1, std::move(world));
  }

  /// Collective over `parent`'s ranks: a new communicator of the ranks with this rank's
  /// `color` (none for a negative one), ordered by `key` then parent rank, on the largest
  /// `next_free` of them; made on `inner` (whose own `split` is collective over this rank's
  /// inner peers in the parent) under the same id.
  /// @throws commx::error errc::invalid_argument for a context this stack did not make;
  ///   errc::timeout naming a rank that did not take part within the network's timeout;
  ///   errc::peer_lost; errc::protocol_violation if the levels disagree.
  template <class Net, class Inner>
  transport::context_split split(Net& net, Inner& inner, context_id parent, int color, int key,
                                 context_id next_free) {
    const std::vector<int>& group = members_of(parent, net.rank());  // map entries stay put
    std::vector<entry> all = gather(net, group, parent, entry{color, key, next_free});
    context_id fresh = 0;
    for (const entry& e : all) fresh = std::max(fresh, e.next_context);
    transport::context_split below = inner.split(parent, color, key, fresh);
    if (below.context != fresh) {
      throw error(errc::protocol_violation,
                  fmt::format("rank {}: split: the inner level made context {}, the ranks agreed "
                              "on {}",
                              net.rank(), below.context, fresh));
    }
    transport::context_split made;
    made.context = fresh;
    if (color < 0) return made;
    std::vector<std::size_t> chosen;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i].color == color) chosen.push_back(i);
    }
    std::ranges::stable_sort(chosen, {}, [&](std::size_t i) { return all[i].key; });
    for (const std::size_t i : chosen) made.members.push_back(group[i]);
    made.rank =
        static_cast<int>(std::ranges::find(made.members, net.rank()) - made.members.begin());
    members_[fresh] = made.members;
    members_[fresh + 1] = made.members;
    return made;
  }

  /// Forgets a communicator made by `split` (`ctx` and `ctx + 1`).
  void forget(context_id ctx) noexcept {
    members_.erase(ctx);
    members_.erase(ctx + 1);
  }

 private:
  struct entry {
    std::int32_t color;
    std::int32_t key;
    context_id next_context;
  };

  [[nodiscard]] const std::vector<int>& members_of(context_id ctx, int rank) const {
    const auto found = members_.find(ctx);
    if (found == members_.end()) {
      throw error(errc::invalid_argument,
                  fmt::format("rank {}: split: context {} is not a communicator of this "
                              "endpoint",
                              rank, ctx));
    }
    return found->second;
  }

  // Every rank of `group` learns every rank's entry: the first gathers them and sends the
  // table back, on a context of the stack's own with the parent's context as the tag (splits
  // of one parent come in the same order on all its ranks).
  template <class Net>
  static std::vector<entry> gather(Net& net, const std::vector<int>& group, context_id parent,
                                   entry mine) {
    const clock::duration limit = network_timeout(net);
    const clock::time_point until = clock::now() + limit;
    const int tag = static_cast<int>(parent % (static_cast<context_id>(max_tag) + 1));
    std::vector<entry> all(group.size());
    const auto receive = [&](int from, std::span<entry> into) {
      const transport::op_result got =
          finish_on(net,
                    net.irecv(from, splitting_context, tag,
                              transport::recv_buffer(std::as_writable_bytes(into))),
                    from, until, limit, "splitting a communicator");
      if (got.bytes != into.size_bytes()) {
        throw error(errc::protocol_violation,
                    fmt::format("rank {}: split: rank {} sent {} bytes, {} expected", net.rank(),
                                from, got.bytes, into.size_bytes()));
      }
    };
    const auto send = [&](int to, std::span<const entry> what) {
      finish_on(net, net.isend(to, splitting_context, tag, std::as_bytes(what)), to, until, limit,
                "splitting a communicator");
    };
    if (net.rank() == group.front()) {
      all.front() = mine;
      for (std::size_t i = 1; i < group.size(); ++i) receive(group[i], std::span(&all[i], 1));
      for (std::size_t i = 1; i < group.size(); ++i) send(group[i], all);
    } else {
      send(group.front(), std::span(&mine, 1));
      receive(group.front(), all);
    }
    return all;
  }

  std::map<context_id, std::vector<int>> members_;
};

}  // namespace commx::detail::layered
