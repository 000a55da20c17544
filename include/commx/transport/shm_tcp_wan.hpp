// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::shm_tcp_wan` ("shm+tcp+wan"): one job over nodes and sites, as CosmoGrid ran
/// over MPWide: shared memory between the ranks of a node, one tcp connection between ranks of
/// one site on different nodes, and wan's parallel streams between sites (through commx-relay
/// where compute nodes have no route), with one transport's semantics (node_and_network.hpp).
/// The network level is one wan endpoint whose paths within a site have no data streams
/// (detail/wan/config.hpp, streams_within_site): one matching engine for site and wide area.
/// A rank's site is COMMX_SITE, its node COMMX_NODE or its host address (`commxrun --nodes K
/// --sites S` simulates both on one host); the job starts as a wan job does.

#include <string_view>
#include <utility>

#include "commx/transport/concept.hpp"
#include "commx/transport/detail/layered/shm_on_node.hpp"
#include "commx/transport/node_and_network.hpp"
#include "commx/transport/shm.hpp"
#include "commx/transport/wan.hpp"

namespace commx::transport {

/// shm within a node, tcp between the nodes of a site, wan's streams between sites (see the file
/// comment).
class shm_tcp_wan : public node_and_network<shm, wan> {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "shm+tcp+wan";

  /// Joins over `net` (this rank's wan endpoint in the whole job): the node's ranks meet in a
  /// shm segment named after the job and the node.
  /// @throws commx::error as shm's constructor does.
  static shm_tcp_wan over(wan net) {
    return detail::layered::join_over<shm_tcp_wan>(std::move(net));
  }

  /// Joins the job the environment describes (as wan::from_env, with data streams between
  /// sites only, then shm per node).
  static shm_tcp_wan from_env() {
    wan::config cfg = detail::wan::config_from_env();
    cfg.streams_within_site = false;
    return over(wan(std::move(cfg)));
  }

 private:
  using node_and_network::node_and_network;
};

static_assert(transport<shm_tcp_wan>);

}  // namespace commx::transport
