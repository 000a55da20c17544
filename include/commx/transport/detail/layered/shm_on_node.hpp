// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The node level of a layered stack (node_and_network.hpp): a shm endpoint among the ranks
/// that the network transport puts on this rank's node, in a segment of their own.

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/bootstrap.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/layered/on_network.hpp"
#include "commx/transport/detail/shm/segment_name.hpp"
#include "commx/transport/node_and_network.hpp"
#include "commx/transport/shm.hpp"

namespace commx::detail::layered {

/// `net`'s node's shm endpoint: its ranks are `members` (world ranks, ascending), numbered
/// 0..k-1, and its segment is named after the job and the node, so that the nodes simulated on
/// one host (COMMX_NODE) get a segment each.
/// @throws commx::error errc::bootstrap_failed without a job identity in the environment.
template <class Net>
transport::shm shm_on_node(const Net& net, const std::vector<int>& members,
                           const bootstrap::lookup& get = bootstrap::process_env) {
  const auto job = shm::job_identity(get);
  if (!job) {
    throw error(errc::bootstrap_failed,
                fmt::format("rank {}: no job identity in the environment (COMMX_TOKEN, "
                            "SLURM_JOB_ID, ...) to name the node's shared-memory segment",
                            net.rank()));
  }
  int local = 0;
  while (members[static_cast<std::size_t>(local)] != net.rank()) ++local;
  const std::string name =
      shm::segment_name(fmt::format("{}:node:{}", *job, net.node_of(net.rank())));
  return transport::shm(name, local, static_cast<int>(members.size()),
                        transport::shm::options::from_env());
}

/// A layered stack `Stack` (a node_and_network<shm, Net>) over `net`: every rank meets over
/// the network first, then the node's ranks open their segment.
/// @throws commx::error as node_and_network::meet and shm_on_node do.
template <class Stack, class Net>
Stack join_over(Net net) {
  return join_with<Stack>(std::move(net), [](const Net& n, const std::vector<int>& members) {
    return shm_on_node(n, members);
  });
}

}  // namespace commx::detail::layered
