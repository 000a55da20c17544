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

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <tuple>
#include <utility>
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
};

inline bool matches(int want_source, context_id want_ctx, int want_tag, int source, context_id ctx,
                    int tag) {
  return want_ctx == ctx && (want_source == any_source || want_source == source) &&
         (want_tag == any_tag || want_tag == tag);
}

/// The messages of one (source, context, tag), oldest first. Its slots are reused rather than
/// freed: a message that waits a moment for its receive (a broadcast's, a stream's) costs no
/// allocation once the queue has held one before, where a deque and a payload vector cost up
/// to three each time. A slot keeps up to `kept_payload` bytes of its last payload's memory.
class message_fifo {
 public:
  static constexpr std::size_t kept_payload = 4096;

  message_fifo() = default;
  // A moved-from queue is empty (the index moves queues about and reuses emptied ones).
  message_fifo(message_fifo&& other) noexcept
      : slots_(std::move(other.slots_)),
        head_(std::exchange(other.head_, 0)),
        tail_(std::exchange(other.tail_, 0)) {}
  message_fifo& operator=(message_fifo&& other) noexcept {
    slots_ = std::move(other.slots_);
    head_ = std::exchange(other.head_, 0);
    tail_ = std::exchange(other.tail_, 0);
    return *this;
  }
  message_fifo(const message_fifo&) = delete;
  message_fifo& operator=(const message_fifo&) = delete;
  ~message_fifo() = default;

  [[nodiscard]] bool empty() const { return head_ == tail_; }
  [[nodiscard]] queued_message& front() { return slots_[head_]; }
  [[nodiscard]] const queued_message& front() const { return slots_[head_]; }

  /// The slot for a new last message, its payload memory kept (its contents are the caller's
  /// to set).
  queued_message& push_slot() {
    if (head_ > 0 && head_ >= tail_ - head_) compact();
    if (tail_ == slots_.size()) slots_.emplace_back();
    return slots_[tail_++];
  }
  void pop_front() {
    queued_message& gone = slots_[head_];
    if (gone.eager.capacity() > kept_payload) std::vector<std::byte>().swap(gone.eager);
    if (++head_ == tail_) head_ = tail_ = 0;
  }
  void remove_if(const std::function<bool(const queued_message&)>& doomed) {
    std::size_t kept = head_;
    for (std::size_t i = head_; i < tail_; ++i) {
      if (doomed(slots_[i])) continue;
      if (kept != i) std::swap(slots_[kept], slots_[i]);
      ++kept;
    }
    tail_ = kept;
    if (head_ == tail_) head_ = tail_ = 0;
  }

 private:
  // Moves the live messages to the front, so that a queue that never empties does not grow.
  void compact() {
    for (std::size_t i = head_; i < tail_; ++i) std::swap(slots_[i - head_], slots_[i]);
    tail_ -= head_;
    head_ = 0;
  }

  std::vector<queued_message> slots_;
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
};

/// Messages nobody asked for yet, hashed by (source, context, tag): a receive naming all three
/// finds its message at the front of one queue however many others wait, so a flood of 100,000
/// messages is received in linear time. Wildcards look at the front of every queue and take
/// the earliest arrival.
///
/// The index is open addressing with linear probing in a power-of-two table: collectives give
/// each call a tag of its own, so most of their messages come with a new key that is inserted
/// and removed again, and a node-based map's prime-modulo bucket lookups cost a small broadcast
/// more than its message (at 2 ranks an 8-byte broadcast took 80-95 ns a call, a send and a
/// receive 45-50; the broadcast now 46). A key whose queue empties leaves the index (backward
/// shift, no tombstones), and its queue's slots are kept, up to `kept_keys` of them, for the
/// next new key. The table doubles at half full and halves at an eighth full, once as many
/// keys have left as it has entries since it last changed size.
class unexpected_queue {
 public:
  using key = std::tuple<int, context_id, int>;  // source, context, tag
  /// One key and its messages; `first` and `second` as a map's entries.
  struct entry {
    key first{};
    message_fifo second;
    bool used = false;
  };
  /// Where a key's queue is, until the next push or pop; end() is none.
  using position = entry*;
  static constexpr std::size_t kept_keys = 1024;

  /// Queues an envelope (a large message's offer).
  void push(queued_message message) {
    message.order = next_++;
    queued_message& slot = queue_of({message.source, message.ctx, message.tag}).push_slot();
    slot = std::move(message);
  }

  /// Queues a small message of `size` bytes; returns where its payload goes.
  std::byte* push_eager(int source, context_id ctx, int tag, std::size_t size) {
    queued_message& slot = queue_of({source, ctx, tag}).push_slot();
    slot.order = next_++;
    slot.source = source;
    slot.ctx = ctx;
    slot.tag = tag;
    slot.size = size;
    slot.large = false;
    slot.ticket = 0;
    slot.generation = 0;
    slot.address = 0;
    slot.eager.resize(size);
    return slot.eager.data();
  }

  /// The queue whose front is the first message a receive (from, ctx, tag) matches, or end().
  position find(int from, context_id ctx, int tag) {
    if (count_ == 0) return end();
    if (from != any_source && tag != any_tag) return lookup({from, ctx, tag});
    position best = end();
    for (entry& e : table_) {
      if (!e.used) continue;
      const queued_message& front = e.second.front();
      if (!matches(from, ctx, tag, front.source, front.ctx, front.tag)) continue;
      if (best == end() || front.order < best->second.front().order) best = &e;
    }
    return best;
  }

  [[nodiscard]] static position end() { return nullptr; }
  /// How many keys have messages queued.
  [[nodiscard]] std::size_t keys() const { return count_; }
  /// How many entries the index has room for (a wildcard receive looks at each).
  [[nodiscard]] std::size_t table_length() const { return table_.size(); }

  /// Removes the front message of `at`.
  void pop(position at) {
    at->second.pop_front();
    if (!at->second.empty()) return;
    retire(at);
    shrink_if_sparse();
  }

  void remove_if(const std::function<bool(const queued_message&)>& doomed) {
    for (std::size_t i = 0; i < table_.size();) {
      entry& e = table_[i];
      if (e.used) {
        e.second.remove_if(doomed);
        if (e.second.empty()) {
          retire(&e);  // an entry further on may have moved here: look at this one again
          continue;
        }
      }
      ++i;
    }
    shrink_if_sparse();
  }

 private:
  // Fibonacci hashing: the product's top bits depend on every bit of the key, so the tags of
  // successive collective calls (256 apart) spread over the table instead of clustering.
  [[nodiscard]] std::size_t home(const key& k) const {
    const auto [source, ctx, tag] = k;
    std::uint64_t h = ctx * 0x9e3779b97f4a7c15ULL;
    h ^= (static_cast<std::uint64_t>(static_cast<std::uint32_t>(source)) << 32U) |
         static_cast<std::uint32_t>(tag);
    return static_cast<std::size_t>((h * 0xff51afd7ed558ccdULL) >> shift_);
  }

  position lookup(const key& k) {
    for (std::size_t i = home(k);; i = (i + 1) & mask_) {
      entry& e = table_[i];
      if (!e.used) return end();
      if (e.first == k) return &e;
    }
  }

  message_fifo& queue_of(const key& k) {
    if ((count_ + 1) * 2 > table_.size()) grow();
    std::size_t i = home(k);
    for (; table_[i].used; i = (i + 1) & mask_) {
      if (table_[i].first == k) return table_[i].second;
    }
    entry& e = table_[i];
    e.used = true;
    e.first = k;
    ++count_;
    if (!spare_.empty()) {
      e.second = std::move(spare_.back());
      spare_.pop_back();
    }
    return e.second;
  }

  void grow() { rebuild(std::max<std::size_t>(min_table, 2 * table_.size())); }

  // A table that a burst of keys grew and that is now nearly empty halves, so that a wildcard
  // receive, which looks at every entry, does not pay for the burst ever after; but only once
  // as many keys have left as it has entries since it last changed size: a flood whose backlog
  // comes and goes (each call of a collective has a tag of its own) grew and halved it with
  // every burst, each time into a new allocation (5% of a broadcast flood's receiving rank).
  void shrink_if_sparse() {
    if (calm_ < table_.size()) return;
    if (table_.size() > min_table && count_ * 8 <= table_.size()) rebuild(table_.size() / 2);
  }

  // A table of `length` entries (a power of two) with every key in its place there.
  void rebuild(std::size_t length) {
    std::vector<entry> old = std::exchange(table_, std::vector<entry>(length));
    mask_ = table_.size() - 1;
    calm_ = 0;
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(table_.size()));
    for (entry& e : old) {
      if (!e.used) continue;
      std::size_t i = home(e.first);
      while (table_[i].used) i = (i + 1) & mask_;
      table_[i] = std::move(e);
    }
  }

  // `at`'s queue is empty: its key leaves the table, and the keys after it in its probe run
  // move back into the hole (linear probing's deletion by backward shift).
  void retire(position at) {
    if (spare_.size() < kept_keys) spare_.push_back(std::move(at->second));
    --count_;
    ++calm_;
    auto hole = static_cast<std::size_t>(at - table_.data());
    for (std::size_t j = (hole + 1) & mask_; table_[j].used; j = (j + 1) & mask_) {
      const std::size_t wanted = home(table_[j].first);
      if (((j - wanted) & mask_) >= ((j - hole) & mask_)) {
        table_[hole] = std::move(table_[j]);
        hole = j;
      }
    }
    table_[hole] = entry{};
  }

  static constexpr std::size_t min_table = 16;
  std::vector<entry> table_;  // a power of two long, at most half full
  std::size_t mask_ = 0;
  unsigned shift_ = 64;  // 64 - log2 of the table's length
  std::size_t count_ = 0;
  std::size_t calm_ = 0;             // keys that left since the table last changed size
  std::vector<message_fifo> spare_;  // emptied queues, their slots kept for new keys
  std::uint64_t next_ = 0;
};

}  // namespace commx::detail::shm
