// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::shm_tcp` ("shm+tcp"): one job over many nodes, shared memory between the ranks
/// of a node and tcp between nodes, with one transport's semantics (node_and_network.hpp).
/// Which node a rank is on is tcp's answer: COMMX_NODE, or else the host address it listens on
/// (so `commxrun --nodes K` simulates K nodes on one host). The job is started as a tcp job is
/// (commxrun, srun, mpirun); each node's ranks then open a segment of their own.

#include <string_view>
#include <utility>

#include "commx/transport/concept.hpp"
#include "commx/transport/detail/layered/shm_on_node.hpp"
#include "commx/transport/node_and_network.hpp"
#include "commx/transport/shm.hpp"
#include "commx/transport/tcp.hpp"

namespace commx::transport {

/// shm within a node, tcp between nodes (see the file comment).
class shm_tcp : public node_and_network<shm, tcp> {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "shm+tcp";

  /// Joins over `net` (this rank's tcp endpoint in the whole job): the node's ranks meet in a
  /// shm segment named after the job and the node.
  /// @throws commx::error as shm's constructor does.
  static shm_tcp over(tcp net) { return detail::layered::join_over<shm_tcp>(std::move(net)); }

  /// Joins the job the environment describes (as tcp::from_env, then shm per node).
  static shm_tcp from_env() { return over(tcp::from_env()); }

 private:
  using node_and_network::node_and_network;
};

static_assert(transport<shm_tcp>);

}  // namespace commx::transport
