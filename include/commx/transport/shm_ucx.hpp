// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::shm_ucx` ("shm+ucx"): one job over many nodes, commx's shared memory between the
/// ranks of a node and UCX between nodes (a cluster's fabric: InfiniBand, RoCE), with one
/// transport's semantics (node_and_network.hpp). Which node a rank is on is ucx's answer, which
/// is its bootstrap's: COMMX_NODE, or else the host (so `commxrun --nodes K` simulates K nodes on
/// one host). The job starts as a ucx job does; each node's ranks then open a segment of their
/// own, and UCX endpoints are made only to ranks of other nodes.

#include <string_view>
#include <utility>

#include "commx/transport/concept.hpp"
#include "commx/transport/detail/layered/shm_on_node.hpp"
#include "commx/transport/node_and_network.hpp"
#include "commx/transport/shm.hpp"
#include "commx/transport/ucx.hpp"

namespace commx::transport {

/// shm within a node, ucx between nodes (see the file comment).
class shm_ucx : public node_and_network<shm, ucx> {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "shm+ucx";

  /// Joins over `net` (this rank's ucx endpoint in the whole job): the node's ranks meet in a
  /// shm segment named after the job and the node.
  /// @throws commx::error as shm's constructor does.
  static shm_ucx over(ucx net) { return detail::layered::join_over<shm_ucx>(std::move(net)); }

  /// Joins the job the environment describes (as ucx::from_env, then shm per node).
  static shm_ucx from_env() { return over(ucx::from_env()); }

 private:
  using node_and_network::node_and_network;
};

static_assert(transport<shm_ucx>);

}  // namespace commx::transport
