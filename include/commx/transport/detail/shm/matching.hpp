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
  bool shared = false;  // a send whose sender wrote part of it (shared_copy.hpp)
  // Pieces a receiver chose over cma (path_choice.hpp): the cell their cost goes to (-1: none,
  // or not counted) and when their time started.
  int path_cell = -1;
  std::chrono::steady_clock::time_point since{};
};

/// Queued payloads' memory beyond `kept_payload`, kept for the next such message up to `budget`
/// bytes in all. A queued message keeps at most kept_payload of its own (a slot keeps its memory
/// for good, and a flood of small messages makes thousands of slots), so without this every
/// queued message above it was a malloc and a free: under a flood of 16 KiB messages after one
/// of 1 KiB, glibc trimmed the heap's top and grew it again, 524 brk calls and 14,000 page
/// faults, 5-6 us a message instead of 1 (bench/HISTORY.md, 2026-11-29).
class payload_pool {
 public:
  /// A sender's eager window: what one sender's flood can have queued at once.
  static constexpr std::size_t budget = std::size_t{1} << 20;

  /// Takes `payload`'s memory when it is more than a slot keeps and the budget has room.
  void give(std::vector<std::byte>& payload) {
    const std::size_t bytes = payload.capacity();
    if (bytes <= kept_payload || held_ + bytes > budget) return;
    held_ += bytes;
    spare_.push_back(std::move(payload));
    payload = std::vector<std::byte>();
  }

  /// Swaps memory for at least `bytes` into `payload`, if any is kept; false otherwise.
  bool take(std::vector<std::byte>& payload, std::size_t bytes) {
    for (std::size_t i = spare_.size(); i-- > 0;) {
      if (spare_[i].capacity() < bytes) continue;
      held_ -= spare_[i].capacity();
      payload.swap(spare_[i]);
      spare_[i] = std::move(spare_.back());
      spare_.pop_back();
      return true;
    }
    return false;
  }

  /// Bytes kept.
  [[nodiscard]] std::size_t held() const { return held_; }

 private:
  std::vector<std::vector<std::byte>> spare_;
  std::size_t held_ = 0;
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
  payload_pool* pool = nullptr;  // where `eager`'s memory goes beyond kept_payload

  void recycle() {
    if (pool != nullptr) pool->give(eager);
    release_payload(eager);
  }
};

/// Messages nobody asked for yet (unexpected_queue.hpp), with small messages' payloads
/// written straight into a reused slot.
class unexpected_queue : public detail::unexpected_queue<queued_message> {
 public:
  unexpected_queue() = default;
  // Its messages point at its pool: it stays where it was made.
  unexpected_queue(const unexpected_queue&) = delete;
  unexpected_queue& operator=(const unexpected_queue&) = delete;
  unexpected_queue(unexpected_queue&&) = delete;
  unexpected_queue& operator=(unexpected_queue&&) = delete;
  ~unexpected_queue() = default;

  /// Queues a small message of `size` bytes; returns where its payload goes.
  std::byte* push_eager(int source, context_id ctx, int tag, std::size_t size) {
    queued_message& slot = push_slot(source, ctx, tag);
    slot.size = size;
    slot.large = false;
    slot.ticket = 0;
    slot.generation = 0;
    slot.address = 0;
    slot.pool = &pool_;
    if (size > kept_payload && size > slot.eager.capacity()) pool_.take(slot.eager, size);
    slot.eager.resize(size);
    return slot.eager.data();
  }

  /// Large payloads' memory kept for the next.
  [[nodiscard]] const payload_pool& pool() const { return pool_; }

 private:
  payload_pool pool_;
};

}  // namespace commx::detail::shm
