// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// coll::hierarchical's allreduce of a large message across two sites, pipelined: the message
/// goes in segments, and the site leaders' exchange of a segment over the wide-area link runs
/// while the segments after it are still being reduced within the site, and while the segments
/// before it are handed back down. Done in one piece, each level waits for the one before:
/// the link idles while the sites reduce, and the sites idle while it carries the whole
/// message. In segments, the link is busy from the first segment's reduce to the last one's
/// arrival, and what the sites do besides hides behind it (at 64 MiB over 1 Gbit/s, 50 ms:
/// bench/HISTORY.md).
///
/// Each rank calls the same sequence of node- and site-level collectives (every segment's
/// reduce, then every segment's bcast), so the levels match segment by segment. Results are
/// those of the unsegmented path bit for bit: every element is reduced within its node, then
/// among its site's nodes, then first site's partial on the left, whatever segment it is in.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "commx/coll/detail/combine.hpp"
#include "commx/coll/detail/inline_list.hpp"
#include "commx/coll/detail/sub_port.hpp"

namespace commx::coll::detail {

/// Bytes a segment holds: small enough that several fit a wide-area path's window for data
/// sent without a clear-to-send (wan's COMMX_WAN_EAGER, 16 MiB), large enough that a segment's
/// collectives cost little beside its time on the link.
inline constexpr std::size_t two_site_segment_bytes = std::size_t{4} << 20;

/// Where a rank stands when its port's ranks are at exactly two sites, each a contiguous range
/// of ranks: its node, its site's node leaders, and (for a site leader) the other site's.
template <class Port>
struct two_sites {
  sub_port<Port> local;       ///< this rank's node
  sub_port<Port> site_nodes;  ///< the node leaders of this rank's site (meaningful for them)
  bool node_leader;
  bool site_leader;
  int other_site_leader;  ///< port rank of the other site's leader
  bool first_site;        ///< this rank's site holds the lower ranks
};

/// The two-site layout of `p`, when it has one: two sites, each a contiguous range of ranks,
/// no node in both.
template <class Port>
std::optional<two_sites<Port>> two_site_layout(Port& p) {
  if constexpr (!requires { p.site_of(0); }) {
    return std::nullopt;
  } else {
    std::vector<int> site_starts{0};
    for (int r = 1; r < p.size(); ++r) {
      if (p.site_of(r) == p.site_of(r - 1)) continue;
      if (p.node_of(r) == p.node_of(r - 1)) return std::nullopt;  // a node at two sites
      site_starts.push_back(r);
    }
    if (site_starts.size() != 2 || p.site_of(0) == p.site_of(p.size() - 1)) return std::nullopt;
    const int me = p.rank();
    const bool first = p.site_of(me) == p.site_of(0);
    const int lo = first ? 0 : site_starts[1];
    const int hi = first ? site_starts[1] : p.size();
    std::vector<int> node;
    std::vector<int> leaders;  // of this site's nodes, lowest rank first
    std::vector<int> seen;
    for (int r = lo; r < hi; ++r) {
      if (p.node_of(r) == p.node_of(me)) node.push_back(r);
      if (std::ranges::find(seen, p.node_of(r)) != seen.end()) continue;
      seen.push_back(p.node_of(r));
      leaders.push_back(r);
    }
    const auto index_of = [](const std::vector<int>& v, int r) {
      return static_cast<int>(std::ranges::find(v, r) - v.begin());
    };
    const bool node_leader = node.front() == me;
    return two_sites<Port>{sub_port<Port>(p, node, index_of(node, me)),
                           sub_port<Port>(p, leaders, node_leader ? index_of(leaders, me) : 0),
                           node_leader,
                           me == lo,
                           first ? site_starts[1] : 0,
                           first};
  }
}

/// The pipelined allreduce (see the file comment), NodeInner within nodes and SiteInner among
/// a site's node leaders.
template <class NodeInner, class SiteInner, class Port, class E, class Op>
void two_site_allreduce(Port& p, two_sites<Port>& at, std::span<E> data, Op op) {
  const std::size_t per = std::max<std::size_t>(1, two_site_segment_bytes / sizeof(E));
  const std::size_t segments = (data.size() + per - 1) / per;
  const auto segment = [&](auto of, std::size_t k) {
    return of.subspan(k * per, std::min(per, of.size() - k * per));
  };
  const scratch<E> arriving(at.site_leader ? data.size() : 0);
  const std::span<E> theirs = arriving.view();
  std::vector<typename Port::pending> exchange(2 * segments);
  for (std::size_t k = 0; k < segments; ++k) {
    NodeInner::reduce(at.local, segment(data, k), op, 0);
    if (at.node_leader) SiteInner::reduce(at.site_nodes, segment(data, k), op, 0);
    if (at.site_leader) {
      exchange[2 * k] = p.irecv(at.other_site_leader, segment(theirs, k));
      exchange[2 * k + 1] = p.isend(at.other_site_leader, std::span<const E>(segment(data, k)));
    }
  }
  for (std::size_t k = 0; k < segments; ++k) {
    if (at.site_leader) {
      p.wait_all(std::span(exchange).subspan(2 * k, 2));
      const std::span<const E> other = segment(std::span<const E>(theirs), k);
      if (at.first_site) {
        combine_into(segment(data, k), other, op);
      } else {
        combine_from_left(other, segment(data, k), op);
      }
    }
    if (at.node_leader) SiteInner::bcast(at.site_nodes, segment(data, k), 0);
    NodeInner::bcast(at.local, segment(data, k), 0);
  }
}

}  // namespace commx::coll::detail
