// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `coll::hierarchical`: collectives in steps over the transport's locality, as C-MPI tuned
/// them for clusters of SMP nodes (seed 002): a node-local step among each node's ranks, a step
/// among the node leaders (the lowest rank of each node) with an inner policy, and a node-local
/// step back. Only the leaders' step crosses the network, once per node.
///
/// Sites (seed 004's CosmoGrid: supercomputers joined by a wide-area link): when the node
/// leaders are at more than one site (the transport's `site_of`), their step is itself
/// hierarchical one level up: among the node leaders of each site, then among the site leaders
/// (the lowest rank of each site), then back within each site. Only the site leaders' step
/// crosses the wide-area link: with the binomial inner policy and two sites, an allreduce
/// crosses it once each way, a bcast once, and a reduce once (twice when the root is not at the
/// first site: binomial folds onto its first rank, in rank order, and hands the result on).
///
/// barrier, bcast, reduce and allreduce go through every level; allgather through the node
/// level; the other collectives are the inner policy's over all ranks. Each level may have a
/// policy of its own: `hierarchical_over<Inner, SiteInner, WideInner>` (within nodes, among
/// node leaders within a site, among site leaders; ring across the wide-area link for large
/// messages, say); `hierarchical` is binomial at every level.
///
/// Reduction order: each node folds its ranks with the inner policy, then each site folds its
/// nodes in leader order, then the sites are folded in site-leader order. When every node and
/// every site holds a contiguous range of ranks (the usual block placement) that is rank
/// order, so any associative op is right. With other layouts, ops that are not
/// `commx::commutative` take the inner policy's path over all ranks (or over all node leaders,
/// when only the sites interleave). The order is fixed by the layout, never by timing, so the
/// bits are the same run to run.

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "commx/coll/binomial.hpp"
#include "commx/coll/concept.hpp"
#include "commx/coll/detail/blocks.hpp"
#include "commx/coll/detail/inline_list.hpp"
#include "commx/coll/detail/node_layout.hpp"
#include "commx/coll/detail/sub_port.hpp"
#include "commx/coll/detail/two_site_pipeline.hpp"
#include "commx/ops.hpp"

namespace commx::coll {

/// Collectives in steps over the transport's nodes and sites (within each node, among the node
/// leaders, within each node again; the leaders' step over sites likewise); see the file
/// comment. Each level has its own policy.
/// @tparam Inner the policy within each node, and for the collectives that do not go through
///   the hierarchy.
/// @tparam SiteInner the policy among the node leaders (within each site, when there are
///   several).
/// @tparam WideInner the policy among the site leaders, across the wide-area link.
template <class Inner, class SiteInner = Inner, class WideInner = SiteInner>
struct hierarchical_over : Inner {
  /// "hierarchical", as benches and examples print it.
  static constexpr std::string_view name = "hierarchical";
  /// How the policy works, in one line.
  static constexpr std::string_view description =
      "node-local step, a step among node leaders with an inner policy, node-local step back";

  /// A barrier within each node, one among the node leaders (through the site level when they
  /// are at several sites), and one within each node again; on one node, Inner's alone (the
  /// second only holds a node's ranks until the leaders' step is over).
  template <class Port>
  static void barrier(Port& p) {
    const detail::layout_of_port<Port> at(p);
    const detail::node_layout& nodes = *at;
    if (nodes.nodes() == 1) {
      Inner::barrier(p);
      return;
    }
    auto [local, leaders, is_leader] = split(p, nodes);
    Inner::barrier(local);
    if (is_leader) {
      among_leaders(leaders,
                    [](auto& port, auto policy) { decltype(policy)::type::barrier(port); });
    }
    Inner::barrier(local);
  }

  /// To the root's node leader, among the leaders, then within each node; on one node,
  /// Inner's from the root (not through rank 0, the node's leader, first).
  template <class Port, class E>
  static void bcast(Port& p, std::span<E> data, int root) {
    const detail::layout_of_port<Port> at(p);
    const detail::node_layout& nodes = *at;
    if (nodes.nodes() == 1) {
      Inner::bcast(p, data, root);
      return;
    }
    auto [local, leaders, is_leader] = split(p, nodes);
    const int root_leader = nodes.leader_of(root);
    if (root != root_leader) {  // the root hands the data to its node's leader first
      if (p.rank() == root) p.send(root_leader, std::span<const E>(data));
      if (p.rank() == root_leader) p.recv(root, data);
    }
    if (is_leader) {
      const int leader_root = nodes.node_of(root);           // (no structured binding in a
      among_leaders(leaders, [&](auto& port, auto policy) {  // lambda before clang 16)
        decltype(policy)::type::bcast(port, data, leader_root);
      });
    }
    Inner::bcast(local, data, 0);
  }

  /// Within each node onto its leader, among the leaders onto the root's, then to the root;
  /// Inner's over all ranks when the layout would break rank order for an op that is not
  /// commutative.
  template <class Port, class E, class Op>
  static void reduce(Port& p, std::span<E> data, Op op, int root) {
    const detail::layout_of_port<Port> at(p);
    const detail::node_layout& nodes = *at;
    if (!keeps_rank_order<E, Op>(nodes)) {
      Inner::reduce(p, data, op, root);
      return;
    }
    auto [local, leaders, is_leader] = split(p, nodes);
    // Leaders fold into a copy: their own data must come out unchanged unless they are root.
    // A root that leads its node folds into its own data.
    const bool folds_aside = is_leader && p.rank() != root;
    std::vector<E> partial;
    if (folds_aside) partial.assign(data.begin(), data.end());
    const std::span<E> acc = folds_aside ? std::span<E>(partial) : data;
    Inner::reduce(local, acc, op, 0);
    const int root_leader = nodes.leader_of(root);
    if (is_leader) {
      const int leader_root = nodes.node_of(root);
      among_leaders(leaders, [&](auto& port, auto policy) {
        decltype(policy)::type::reduce(port, acc, op, leader_root);
      });
    }
    if (root == root_leader) return;
    if (p.rank() == root_leader) p.send(root, std::span<const E>(acc));
    if (p.rank() == root) p.recv(root_leader, data);
  }

  /// reduce within each node, allreduce among the leaders, bcast within each node (Inner's over
  /// all ranks when that would break rank order for an op that is not commutative). Across two
  /// sites, a message of two segments or more (detail/two_site_pipeline.hpp) goes in segments,
  /// the site leaders exchanging each while the sites reduce the next. Within one site, a message
  /// of `binomial::by_halves_bytes` or more goes as binomial's over all ranks, by halves
  /// (detail/by_halves.hpp; in two waves where ranks crowd the cores, binomial::in_two_waves)
  /// where that folds as the node and leader steps do (folds_as_by_halves): the first rounds
  /// pair the ranks of each node, the last ones cross between nodes with every rank carrying its
  /// share, where the leaders alone would carry the whole message and fold it twice (MD on two
  /// nodes of two ranks: bench/HISTORY.md). Same grouping, same bits.
  template <class Port, class E, class Op>
  static void allreduce(Port& p, std::span<E> data, Op op) {
    const detail::layout_of_port<Port> at(p);
    const detail::node_layout& nodes = *at;
    if (!keeps_rank_order<E, Op>(nodes)) {
      Inner::allreduce(p, data, op);
      return;
    }
    if (data.size_bytes() >= 2 * detail::two_site_segment_bytes) {
      if (auto at = detail::two_site_layout(p)) {
        detail::two_site_allreduce<Inner, SiteInner>(p, *at, data, op);
        return;
      }
    }
    if (data.size_bytes() >= binomial::by_halves_bytes && folds_as_by_halves(p, nodes)) {
      binomial::allreduce(p, data, op);
      return;
    }
    auto [local, leaders, is_leader] = split(p, nodes);
    Inner::reduce(local, data, op, 0);
    if (is_leader) {
      among_leaders(leaders, [&](auto& port, auto policy) {
        decltype(policy)::type::allreduce(port, data, op);
      });
    }
    Inner::bcast(local, data, 0);
  }

  /// Each leader gathers its node's blocks, the leaders exchange whole nodes, and each leader
  /// hands the complete result to its node (on one node: Inner's allgather). When every node
  /// holds a contiguous range of ranks (the usual block placement), the blocks go where they
  /// belong in `out` at every step: no copy, no room besides `out`.
  template <class Port, class E>
  static void allgather(Port& p, std::span<const E> in, std::span<E> out) {
    const detail::layout_of_port<Port> at(p);
    const detail::node_layout& nodes = *at;
    if (nodes.nodes() == 1) {  // one node: its ranks are every rank, in rank order
      Inner::allgather(p, in, out);
      return;
    }
    auto [local, leaders, is_leader] = split(p, nodes);
    const std::size_t n = in.size();
    if (nodes.contiguous) {
      const auto node_first = static_cast<std::size_t>(local.parent_rank(0));
      const std::span<E> node_blocks =
          out.subspan(node_first * n, static_cast<std::size_t>(local.size()) * n);
      Inner::gather(local, in, node_blocks, 0);
      if (is_leader) {
        // Node l holds the ranks from its leader up to the next node's leader.
        std::vector<std::size_t> counts(static_cast<std::size_t>(leaders.size()));
        std::vector<std::size_t> displs(counts.size());
        for (std::size_t l = 0; l < counts.size(); ++l) {
          const int next =
              l + 1 < counts.size() ? leaders.parent_rank(static_cast<int>(l) + 1) : p.size();
          displs[l] = static_cast<std::size_t>(leaders.parent_rank(static_cast<int>(l))) * n;
          counts[l] = static_cast<std::size_t>(next) * n - displs[l];
        }
        SiteInner::allgatherv(leaders, std::span<const E>(node_blocks), out, counts, displs);
      }
      Inner::bcast(local, out, 0);
      return;
    }
    const detail::scratch<E> gathered(is_leader ? n * static_cast<std::size_t>(local.size()) : 0);
    const std::span<E> node_blocks = gathered.view();
    Inner::gather(local, in, node_blocks, 0);
    if (is_leader) {
      // Every node's blocks, node after node in leader order, then put back in rank order.
      std::vector<std::size_t> counts;
      std::vector<int> order;  // parent ranks in the order their blocks arrive
      for (int l = 0; l < leaders.size(); ++l) {
        const std::span<const int> members = nodes.members(l);
        counts.push_back(members.size() * n);
        order.insert(order.end(), members.begin(), members.end());
      }
      std::vector<std::size_t> displs(counts.size());
      for (std::size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
      const detail::scratch<E> all(static_cast<std::size_t>(p.size()) * n);
      SiteInner::allgatherv(leaders, std::span<const E>(node_blocks), all.view(), counts, displs);
      for (std::size_t i = 0; i < order.size(); ++i) {
        std::copy_n(
            all.view().begin() + static_cast<std::ptrdiff_t>(i * n), n,
            out.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(order[i]) * n));
      }
    }
    Inner::bcast(local, out, 0);
  }

  /// reduce through the hierarchy onto rank 0, which sends each rank its block.
  template <class Port, class E, class Op>
  static void reduce_scatter(Port& p, std::span<E> data, std::span<const std::size_t> counts,
                             Op op) {
    detail::reduce_scatter_through_zero<hierarchical_over>(p, data, counts, op);
  }

 private:
  // Whether folding node by node, then among the leaders, is the binomial tree over all ranks
  // that an allreduce by halves folds: binomial at both levels, one site, a power of two of
  // ranks, in nodes of one power-of-two size that each hold a contiguous range of ranks.
  template <class Port>
  static bool folds_as_by_halves(Port& p, const detail::node_layout& nodes) {
    if constexpr (!std::is_same_v<Inner, binomial> || !std::is_same_v<SiteInner, binomial>) {
      return false;
    } else {
      const auto power_of_two = [](int n) { return n > 0 && (n & (n - 1)) == 0; };
      if (!power_of_two(p.size()) || !nodes.contiguous) return false;
      if constexpr (requires { p.site_of(0); }) {
        for (int r = 1; r < p.size(); ++r) {
          if (p.site_of(r) != p.site_of(0)) return false;
        }
      }
      const std::size_t node_size = nodes.members(0).size();
      if (!power_of_two(static_cast<int>(node_size))) return false;
      for (int l = 1; l < nodes.nodes(); ++l) {
        if (nodes.members(l).size() != node_size) return false;
      }
      return true;
    }
  }

  // Runs `step(port, policy)` among the node leaders: with `policy` this hierarchy one level
  // up (nodes become sites: SiteInner within each site, WideInner between them) when the
  // leaders are at several sites, else with SiteInner. `policy` is a std::type_identity of the
  // policy to call.
  template <class Leaders, class Step>
  static void among_leaders(Leaders& leaders, Step&& step) {
    if constexpr (requires { leaders.site_of(0); }) {
      for (int r = 1; r < leaders.size(); ++r) {
        if (leaders.site_of(r) != leaders.site_of(0)) {
          detail::site_level_port<Leaders> sites(leaders);
          step(sites, std::type_identity<hierarchical_over<SiteInner, WideInner, WideInner>>{});
          return;
        }
      }
    }
    step(leaders, std::type_identity<SiteInner>{});
  }

  template <class Port>
  struct layout {
    detail::sub_port<Port> local;
    detail::sub_port<Port> leaders;
    bool is_leader;
  };

  // Folding node by node is rank order when every node holds a contiguous range of ranks; for
  // other layouts only a commutative op may be folded that way. Every rank decides alike.
  template <class E, class Op>
  static bool keeps_rank_order(const detail::node_layout& nodes) {
    if constexpr (commutative<Op, E>) {
      return true;
    } else {
      return nodes.contiguous;
    }
  }

  // This rank's node and the node leaders, as ports over `nodes`' lists (no copy).
  template <class Port>
  static layout<Port> split(Port& p, const detail::node_layout& nodes) {
    const int node = nodes.node_of(p.rank());
    const std::span<const int> local = nodes.members(node);
    const auto me_local =
        static_cast<int>(std::ranges::lower_bound(local, p.rank()) - local.begin());
    const bool is_leader = local.front() == p.rank();
    return {detail::sub_port<Port>(p, local, me_local),
            detail::sub_port<Port>(p, std::span<const int>(nodes.leaders), is_leader ? node : 0),
            is_leader};
  }
};

/// The hierarchical policy with binomial algorithms at every level.
using hierarchical = hierarchical_over<binomial>;

}  // namespace commx::coll
