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

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "commx/error.hpp"
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
};

inline bool matches(int want_source, context_id want_ctx, int want_tag, int source, context_id ctx,
                    int tag) {
  return want_ctx == ctx && (want_source == any_source || want_source == source) &&
         (want_tag == any_tag || want_tag == tag);
}

/// Messages nobody asked for yet, indexed by (source, context, tag): a receive naming all three
/// finds its message at the front of one queue however many others wait, so a flood of 100,000
/// messages is received in linear time. Wildcards look at the front of every queue and take
/// the earliest arrival.
class unexpected_queue {
 public:
  using key = std::tuple<int, context_id, int>;  // source, context, tag
  using queue = std::deque<queued_message>;
  using position = std::map<key, queue>::iterator;

  void push(queued_message message) {
    message.order = next_++;
    queues_[{message.source, message.ctx, message.tag}].push_back(std::move(message));
  }

  /// The queue whose front is the first message a receive (from, ctx, tag) matches, or end().
  position find(int from, context_id ctx, int tag) {
    if (from != any_source && tag != any_tag) return queues_.find({from, ctx, tag});
    position best = queues_.end();
    for (auto it = queues_.begin(); it != queues_.end(); ++it) {
      const queued_message& front = it->second.front();
      if (!matches(from, ctx, tag, front.source, front.ctx, front.tag)) continue;
      if (best == queues_.end() || front.order < best->second.front().order) best = it;
    }
    return best;
  }

  [[nodiscard]] position end() { return queues_.end(); }

  /// Removes the front message of `at`.
  void pop(position at) {
    at->second.pop_front();
    if (at->second.empty()) queues_.erase(at);
  }

  void remove_if(const std::function<bool(const queued_message&)>& doomed) {
    for (auto it = queues_.begin(); it != queues_.end();) {
      std::erase_if(it->second, doomed);
      it = it->second.empty() ? queues_.erase(it) : std::next(it);
    }
  }

 private:
  std::map<key, queue> queues_;
  std::uint64_t next_ = 0;
};

}  // namespace commx::detail::shm
