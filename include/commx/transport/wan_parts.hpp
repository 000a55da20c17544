// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// MPWide's per-stream buffers (MPW_PSend / MPW_PRecv) on a communicator over transport::wan:
/// a message in parts, part k carried by data stream k of the path (mod its streams) while the
/// other parts travel on the others at the same time, and received into a buffer of its own.
/// Each part is one message with the same tag, so parts arrive in order, and each receive
/// follows the communicator's rules: a resizable buffer (std::vector) takes a part of a size
/// it did not know; a part too large for a fixed buffer fails with errc::truncated and stays
/// queued. Parts small enough to go eagerly travel on the control connection, as every small
/// message does.
///
///     std::vector<std::vector<double>> parts(4);  // one per stream
///     auto sent = commx::wan::isend_parts(world, site_b, tag, std::span(parts));
///     commx::wait_all(sent);
///     ...
///     commx::wan::recv_parts(world, site_a, tag, std::span(parts));  // resized to each part

#include <cstddef>
#include <span>
#include <vector>

#include "commx/communicator.hpp"
#include "commx/transport/wan.hpp"

namespace commx::wan {

/// Starts sending `parts` to `dest` with `tag`, part k on data stream k. The parts must stay
/// alive and unchanged until their requests complete.
template <coll::collectives<transport::wan> C, stats::policy S, class Part>
std::vector<request<transport::wan, S>> isend_parts(communicator<transport::wan, C, S>& world,
                                                    int dest, int tag, std::span<Part> parts) {
  std::vector<request<transport::wan, S>> sent;
  sent.reserve(parts.size());
  for (std::size_t k = 0; k < parts.size(); ++k) {
    const transport::wan::stream_pin on_stream_k(world.transport(), static_cast<int>(k));
    sent.push_back(world.isend(dest, tag, parts[k]));
  }
  return sent;
}

/// Receives the parts `isend_parts` sent from `source` with `tag` into `parts`, in order.
/// All are posted at once, so the parts flow over their streams together.
/// @throws commx::error as communicator::recv, for the first part that fails (the receives of
///   the parts after it are withdrawn).
template <coll::collectives<transport::wan> C, stats::policy S, class Part>
void recv_parts(communicator<transport::wan, C, S>& world, int source, int tag,
                std::span<Part> parts, deadline until = {}) {
  std::vector<request<transport::wan, S>> receiving;
  receiving.reserve(parts.size());
  for (Part& part : parts) receiving.push_back(world.irecv(source, tag, part));
  wait_all(receiving, until);
}

}  // namespace commx::wan
