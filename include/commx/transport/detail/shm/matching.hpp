// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The receiving side's private state: operations (posted receives, sends in progress) and the
/// queue of messages that arrived before anyone asked for them. This queue is the "private
/// overflow buffer" of HPVM's Fig. 6: a rank always empties its rings into it, whether or not
/// receives are posted, so a sender's ring is never full for long and two ranks flooding each
/// other cannot deadlock. A large message costs the queue only its envelope: its payload stays
/// in the sender's memory until a receive takes it. What the queue holds of each sender's
/// small messages is bounded by eager credit (credit.hpp).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "commx/error.hpp"
#include "commx/transport/detail/unexpected_queue.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::shm {

using transport::op_result;
using transport::recv_buffer;

/// A send or receive that did not complete when it was posted. Owned by the endpoint and by the
/// request that refers to it; used by one thread only (one endpoint, one thread).
struct operation {
  enum class kind { send, recv };

  operation(kind k, int peer_rank, context_id context, int message_tag)
      : what(k), peer(peer_rank), ctx(context), tag(message_tag) {}

  kind what;
  int peer;  // destination of a send; source (or any_source) of a receive
  context_id ctx;
  int tag;
  recv_buffer buffer{std::span<std::byte>{}};  // receives
  std::span<const std::byte> payload;          // sends
  op_result result;
  bool done = false;

  // A large message in flight: whether it was offered, the sender's ticket slot (-1: none,
  // transfer_table.hpp) and which offer of the pair it is, and how far the pieces through the
  // ring have got (bytes sent, or bytes received into `target`).
  bool offered = false;
  int ticket = -1;
  std::uint64_t generation = 0;
  std::size_t progress = 0;
  std::byte* target = nullptr;
  // Pieces a receiver chose over cma (path_choice.hpp): the cell their cost goes to (-1: none,
  // or not counted) and when their time started.
  int path_cell = -1;
  std::chrono::steady_clock::time_point since{};
};

/// A message nobody has asked for yet: a copy of a small one, or a large one's envelope.
struct queued_message {
  std::uint64_t order = 0;  // arrival number: wildcards take the earliest
  int source;
  context_id ctx;
  int tag;
  std::size_t size;
  std::vector<std::byte> eager;  // small messages
  bool large = false;
  std::uint32_t ticket = 0;  // large messages: where the sender offers it
  std::uint64_t generation = 0;
  std::uint64_t address = 0;
  // Large messages, for path_choice.hpp: when the large sends the receiver had in flight at the
  // arrival began (the epoch: it had none), and how many it had offered by then.
  std::chrono::steady_clock::time_point crossed{};
  std::uint64_t offers_before = 0;

  void recycle() { release_payload(eager); }
};

/// Messages nobody asked for yet (unexpected_queue.hpp), with small messages' payloads
/// written straight into a reused slot.
class unexpected_queue : public detail::unexpected_queue<queued_message> {
 public:
  /// Queues a small message of `size` bytes; returns where its payload goes.
  std::byte* push_eager(int source, context_id ctx, int tag, std::size_t size) {
    queued_message& slot = push_slot(source, ctx, tag);
    slot.size = size;
    slot.large = false;
    slot.ticket = 0;
    slot.generation = 0;
    slot.address = 0;
    slot.eager.resize(size);
    return slot.eager.data();
  }
};

}  // namespace commx::detail::shm
