// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// coll::hierarchical's allreduce of a large message on nodes of equal size: every rank of a
/// node carries a share across the network, not only the node's leader (the multi-leader
/// scheme of MVAPICH2 and of Open MPI's HAN). With k ranks a node, the message is cut in k
/// blocks; the node reduce-scatters them (rank i gets block i, summed over its node), each
/// block is allreduced among the ranks that hold it on every node (a *column*: the i-th rank of
/// each node, in node order), and the node allgathers the blocks. The leader no longer folds
/// and sends the whole message alone: each rank folds and sends 1/k of it, the node's links
/// carry k exchanges at once, and the network sees the same bytes per node.
///
/// Order: within a node the contributions fold in the binomial tree's grouping, lower ranks on
/// the left (as binomial::reduce folds a node), then across nodes as the column policy folds,
/// in node order. With nodes of contiguous ranks that is the unsplit path's order, bit for bit.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "commx/coll/detail/combine.hpp"
#include "commx/coll/detail/sub_port.hpp"

namespace commx::coll::detail {

/// Bytes from which an allreduce goes by columns: below it, the k-1 extra messages a rank sends
/// within its node cost more than the parallel folding saves.
inline constexpr std::size_t node_column_min_bytes = std::size_t{256} << 10;

template <class Port>
struct node_columns {
  sub_port<Port> local;   ///< this rank's node, in rank order
  sub_port<Port> column;  ///< the ranks with this rank's place in their node, in node order
};

/// The column layout of `p`, when it has one: one site, two nodes or more, every node the same
/// number (two or more) of contiguous ranks.
template <class Port>
std::optional<node_columns<Port>> node_column_layout(Port& p) {
  if constexpr (requires { p.site_of(0); }) {
    for (int r = 1; r < p.size(); ++r) {
      if (p.site_of(r) != p.site_of(0)) return std::nullopt;
    }
  }
  std::vector<int> starts{0};
  for (int r = 1; r < p.size(); ++r) {
    if (p.node_of(r) != p.node_of(r - 1)) starts.push_back(r);
  }
  const auto nodes = static_cast<int>(starts.size());
  if (nodes < 2 || p.size() % nodes != 0) return std::nullopt;
  const int k = p.size() / nodes;
  if (k < 2) return std::nullopt;
  for (int n = 0; n < nodes; ++n) {
    if (starts[static_cast<std::size_t>(n)] != n * k) return std::nullopt;
    for (int m = 0; m < n; ++m) {  // a node id seen before: not contiguous
      if (p.node_of(m * k) == p.node_of(n * k)) return std::nullopt;
    }
  }
  const int node = p.rank() / k;
  const int place = p.rank() % k;
  std::vector<int> local;
  std::vector<int> column;
  for (int i = 0; i < k; ++i) local.push_back(node * k + i);
  for (int n = 0; n < nodes; ++n) column.push_back(n * k + place);
  return node_columns<Port>{sub_port<Port>(p, std::move(local), place),
                            sub_port<Port>(p, std::move(column), node)};
}

/// The allreduce by columns (see the file comment), ColumnInner among each column.
template <class ColumnInner, class Port, class E, class Op>
void column_allreduce(node_columns<Port>& at, std::span<E> data, Op op) {
  auto& local = at.local;
  const auto k = static_cast<std::size_t>(local.size());
  const auto me = static_cast<std::size_t>(local.rank());
  const auto block = [&](std::span<E> of, std::size_t j) {
    const std::size_t base = of.size() / k;
    const std::size_t extra = of.size() % k;  // the first `extra` blocks hold one more
    const std::size_t begin = j * base + std::min(j, extra);
    return of.subspan(begin, base + (j < extra ? 1 : 0));
  };
  const std::size_t mine = block(data, me).size();

  // Reduce-scatter within the node: every rank's block `me` comes here, into row j of `rows`.
  std::vector<E> rows(k * mine);
  const auto row = [&](std::size_t j) { return std::span<E>(rows).subspan(j * mine, mine); };
  std::vector<typename Port::pending> pending;
  for (std::size_t j = 0; j < k; ++j) {
    if (j == me) continue;
    pending.push_back(local.irecv(static_cast<int>(j), row(j)));
    pending.push_back(local.isend(static_cast<int>(j), std::span<const E>(block(data, j))));
  }
  local.wait_all(std::span(pending));
  std::ranges::copy(block(data, me), row(me).begin());
  // binomial::reduce's grouping over the node's ranks: (x0 op x1) op (x2 op x3), ...
  for (std::size_t step = 1; step < k; step *= 2) {
    for (std::size_t j = 0; j + step < k; j += 2 * step) {
      combine_into(row(j), std::span<const E>(row(j + step)), op);
    }
  }
  std::ranges::copy(row(0), block(data, me).begin());

  ColumnInner::allreduce(at.column, block(data, me), op);

  // Allgather within the node.
  pending.clear();
  for (std::size_t j = 0; j < k; ++j) {
    if (j == me) continue;
    pending.push_back(local.irecv(static_cast<int>(j), block(data, j)));
    pending.push_back(local.isend(static_cast<int>(j), std::span<const E>(block(data, me))));
  }
  local.wait_all(std::span(pending));
}

}  // namespace commx::coll::detail
