// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The queue of messages that arrived before anyone asked for them, shared by the transports
/// that match messages themselves (inproc, shm, tcp and wan): hashed by (source, context,
/// tag), so a receive that names all three finds its message however many others wait, and
/// wildcards take the earliest arrival. Its messages are the transport's own type, with:
///
/// | member | what |
/// |---|---|
/// | `std::uint64_t order` | the arrival's number, set by the queue |
/// | `int source`, `context_id ctx`, `int tag` | the envelope |
/// | `void recycle()` | its slot is vacated: drops what must not stay, keeps what may be reused |
///
/// Order: messages of one key leave in arrival order; a wildcard receive takes the earliest
/// arrival among those it matches, so the queue keeps MPI's non-overtaking rule per sender.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "commx/transport/message.hpp"

namespace commx::detail {

/// Whether a receive for (want_source, want_ctx, want_tag) takes a message of (source, ctx,
/// tag); any_source and any_tag match every source and tag, never another context.
inline bool matches(int want_source, context_id want_ctx, int want_tag, int source, context_id ctx,
                    int tag) {
  return want_ctx == ctx && (want_source == any_source || want_source == source) &&
         (want_tag == any_tag || want_tag == tag);
}

/// What a vacated slot keeps of its last payload's memory for the next message, at most.
inline constexpr std::size_t kept_payload = 4096;

/// For a message's `recycle`: drops `payload`'s memory beyond `kept_payload` (a small one is
/// kept, to be written over without an allocation).
inline void release_payload(std::vector<std::byte>& payload) {
  if (payload.capacity() > kept_payload) std::vector<std::byte>().swap(payload);
}

/// The messages of one (source, context, tag), oldest first. Its slots are reused rather than
/// freed: a message that waits a moment for its receive (a broadcast's, a stream's) costs no
/// allocation once the queue has held one before, where a deque and a payload vector cost up
/// to three each time. A slot vacated is `recycle`d: the message drops what it must not keep.
template <class Message>
class message_fifo {
 public:
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
  [[nodiscard]] Message& front() { return slots_[head_]; }
  [[nodiscard]] const Message& front() const { return slots_[head_]; }

  /// The slot for a new last message, its payload memory kept (its contents are the caller's
  /// to set).
  Message& push_slot() {
    if (head_ > 0 && head_ >= tail_ - head_) compact();
    if (tail_ == slots_.size()) slots_.emplace_back();
    return slots_[tail_++];
  }
  void pop_front() {
    slots_[head_].recycle();
    if (++head_ == tail_) head_ = tail_ = 0;
  }
  template <class Doomed>
  void remove_if(Doomed&& doomed) {
    std::size_t kept = head_;
    for (std::size_t i = head_; i < tail_; ++i) {
      if (doomed(std::as_const(slots_[i]))) {
        slots_[i].recycle();
        continue;
      }
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

  std::vector<Message> slots_;
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
};

/// Messages nobody asked for yet, hashed by (source, context, tag): a receive naming all three
/// finds its message at the front of one queue however many others wait, so a flood of 100,000
/// messages is received in linear time. Wildcards look at the front of every queue and take
/// the earliest arrival.
///
/// Arrivals are indexed lazily: they wait in one queue in arrival order, and a receive that
/// names its key takes the first of them if it matches (nothing indexed does), indexing the
/// ones before it only when it does not. A sender that runs ahead through collective calls (a
/// broadcast's root) sends each message with a tag of its own, and each would be a key inserted
/// and removed again: its receives now take them in order, as they came (a flood of 8-byte
/// broadcasts at 2 ranks: 51.4 ns a call with every arrival indexed, 34.8 now).
/// Everything indexed arrived before everything waiting, so a key's messages still leave in
/// arrival order; a wildcard receive (or a count of the keys) indexes them all.
///
/// The index is open addressing with linear probing in a power-of-two table: a node-based
/// map's prime-modulo bucket lookups cost a small broadcast more than its message. A key whose
/// queue empties leaves the index (backward shift, no tombstones), and its queue's slots are
/// kept, up to `kept_keys` of them, for the next new key. The table doubles at half full and
/// halves at an eighth full, once as many keys have left as it has entries since it last
/// changed size.
template <class Message>
class unexpected_queue {
 public:
  using key = std::tuple<int, context_id, int>;  // source, context, tag
  /// One key and its messages; `first` and `second` as a map's entries.
  struct entry {
    key first{};
    message_fifo<Message> second;
    bool used = false;
  };
  /// Where the first message a receive matches is (`*at`), in a key's queue of the index or
  /// first among the arrivals not yet indexed; until the next push or pop. end() is none.
  class position {
   public:
    position() = default;
    [[nodiscard]] Message& operator*() const {
      return indexed_ != nullptr ? indexed_->second.front() : *arrival_;
    }
    [[nodiscard]] Message* operator->() const { return &**this; }
    bool operator==(const position&) const = default;

   private:
    friend class unexpected_queue;
    position(entry* indexed, Message* arrival) : indexed_(indexed), arrival_(arrival) {}
    entry* indexed_ = nullptr;
    Message* arrival_ = nullptr;
  };
  static constexpr std::size_t kept_keys = 1024;

  /// Queues `message` (its `order` is set here).
  void push(Message message) {
    Message& slot = arrivals_.push_slot();
    slot = std::move(message);
    slot.order = next_++;
  }

  /// The slot for a new message of (source, ctx, tag), its arrival numbered, its envelope set
  /// and the rest as the slot's last message left it (recycled): the caller fills it in. Saves
  /// the payload's allocation where the slot kept its memory.
  Message& push_slot(int source, context_id ctx, int tag) {
    Message& slot = arrivals_.push_slot();
    slot.order = next_++;
    slot.source = source;
    slot.ctx = ctx;
    slot.tag = tag;
    return slot;
  }

  /// The first message a receive (from, ctx, tag) matches, or end().
  position find(int from, context_id ctx, int tag) {
    if (from != any_source && tag != any_tag) {
      if (count_ != 0) {
        if (entry* e = lookup({from, ctx, tag}); e != nullptr) return {e, nullptr};
      }
      while (!arrivals_.empty()) {
        Message& first = arrivals_.front();
        if (matches(from, ctx, tag, first.source, first.ctx, first.tag)) return {nullptr, &first};
        index_first_arrival();
      }
      return end();
    }
    index_arrivals();
    if (count_ == 0) return end();
    entry* best = nullptr;
    for (entry& e : table_) {
      if (!e.used) continue;
      const Message& front = e.second.front();
      if (!matches(from, ctx, tag, front.source, front.ctx, front.tag)) continue;
      if (best == nullptr || front.order < best->second.front().order) best = &e;
    }
    return {best, nullptr};
  }

  [[nodiscard]] static position end() { return {}; }
  /// How many keys have messages queued (every arrival indexed first).
  [[nodiscard]] std::size_t keys() {
    index_arrivals();
    return count_;
  }
  /// How many entries the index has room for (a wildcard receive looks at each).
  [[nodiscard]] std::size_t table_length() const { return table_.size(); }

  /// Removes the message at `at`.
  void pop(position at) {
    if (at.indexed_ == nullptr) {  // the first arrival: find() returns no other
      arrivals_.pop_front();
      ++calm_;  // a message came and went: a table grown by a burst may halve
      shrink_if_sparse();
      return;
    }
    entry* e = at.indexed_;
    e->second.pop_front();
    if (!e->second.empty()) return;
    retire(e);
    shrink_if_sparse();
  }

  /// Removes every message `doomed(message)` is true of, the others keeping their order.
  template <class Doomed>
  void remove_if(Doomed&& doomed) {
    arrivals_.remove_if(doomed);
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

  entry* lookup(const key& k) {
    for (std::size_t i = home(k);; i = (i + 1) & mask_) {
      entry& e = table_[i];
      if (!e.used) return nullptr;
      if (e.first == k) return &e;
    }
  }

  // The first arrival moves to its key's queue in the index (swapped with the slot there, so
  // that both keep their payload memory).
  void index_first_arrival() {
    Message& first = arrivals_.front();
    std::swap(queue_of({first.source, first.ctx, first.tag}).push_slot(), first);
    arrivals_.pop_front();
  }
  void index_arrivals() {
    while (!arrivals_.empty()) index_first_arrival();
  }

  message_fifo<Message>& queue_of(const key& k) {
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
  void retire(entry* at) {
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
  std::size_t calm_ = 0;  // keys that left, or arrivals taken, since the table last changed size
  std::vector<message_fifo<Message>> spare_;  // emptied queues, their slots kept for new keys
  message_fifo<Message> arrivals_;            // not yet indexed, in arrival order
  std::uint64_t next_ = 0;
};

}  // namespace commx::detail
