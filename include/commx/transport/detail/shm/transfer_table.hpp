// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Large messages in flight with one peer: the offers a sender made that wait for their
/// receive, or the transfers a receiver expects pieces of.
///
/// An offer takes one of the pair's ticket slots when one is free: its ticket word in the
/// segment settles a claim racing a withdrawal with one compare-and-swap, and lets the receiver
/// copy the payload by cma. When every slot is taken (more than tickets_per_pair large messages
/// nobody has asked for yet, or a flood beyond the eager credit: credit.hpp) the offer goes out
/// without a slot (`no_ticket`), found by its generation instead. Its receiver answers `cts` and
/// gets pieces through the ring; its sender withdraws it with a `revoke` record, which fails a
/// receive that had already matched it with errc::cancelled, as tcp's revoke does. So an offer
/// never waits for a slot, and a receive for a later tag always finds its message.
///
/// A rank has two tables per peer of its node (its offers, the pieces it expects), so the slots
/// are made with the first large message of the pair: a peer that never sends or receives one
/// costs a table's 80 bytes, not its 16 slots' 256 more and their allocation. Whether any of a
/// rank's tables holds something is asked on the large-message path (the rank's own offers in
/// flight: endpoint::sending_large); a count of the busy tables answers it in one load where a
/// look at every table of a 1,024-rank node would touch some 128 KiB.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "commx/transport/detail/shm/matching.hpp"
#include "commx/transport/detail/shm/segment.hpp"

namespace commx::detail::shm {

/// A record's ticket field for an offer without a slot.
inline constexpr std::uint32_t no_ticket = 0xffffffffU;

class transfer_table {
 public:
  /// The operation a record names (its ticket, or no_ticket, and the offer's generation);
  /// null when there is none: withdrawn, abandoned, or finished.
  [[nodiscard]] std::shared_ptr<operation>* find(std::uint32_t ticket, std::uint64_t generation) {
    if (ticket == no_ticket) {
      auto it = slotless_.find(generation);
      return it == slotless_.end() ? nullptr : &it->second;
    }
    if (slots_.empty()) return nullptr;
    auto& op = slots_[ticket % tickets_per_pair];
    return op && op->generation == generation ? &op : nullptr;
  }

  /// `busy`, if given, counts this table while it holds an operation.
  explicit transfer_table(std::size_t* busy = nullptr) : busy_(busy) {}
  // Not copied: a copy of a table that holds something would hold it uncounted. Moved only
  // when a vector of tables grows, which leaves the moved-from one empty and unused.
  transfer_table(const transfer_table&) = delete;
  transfer_table& operator=(const transfer_table&) = delete;
  transfer_table(transfer_table&&) noexcept = default;
  transfer_table& operator=(transfer_table&&) noexcept = default;
  ~transfer_table() = default;

  /// Records `op` (whose generation is set) under `ticket`.
  void put(std::uint32_t ticket, std::shared_ptr<operation> op) {
    const counted_change change(*this);
    if (ticket == no_ticket) {
      const std::uint64_t generation = op->generation;
      slotless_[generation] = std::move(op);
    } else {
      if (slots_.empty()) slots_.resize(tickets_per_pair);
      auto& slot = slots_[ticket % tickets_per_pair];
      if (!slot) ++slots_held_;
      slot = std::move(op);
    }
  }

  void erase(std::uint32_t ticket, std::uint64_t generation) {
    const counted_change change(*this);
    if (ticket == no_ticket) {
      slotless_.erase(generation);
    } else if (!slots_.empty()) {
      auto& slot = slots_[ticket % tickets_per_pair];
      if (slot) --slots_held_;
      slot.reset();
    }
  }

  /// Whether no operation is held (the count kept, so that asking costs nothing).
  [[nodiscard]] bool empty() const { return slots_held_ == 0 && slotless_.empty(); }

  /// A free ticket slot, or -1 when every one is taken.
  [[nodiscard]] int free_slot() const {
    if (slots_.empty()) return 0;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i]) return static_cast<int>(i);
    }
    return -1;
  }

  /// Calls `f(operation&)` for each operation held, then holds none.
  template <class F>
  void release_all(F&& f) {
    const counted_change change(*this);
    for (auto& op : slots_) {
      if (op) f(*op);
      op.reset();
    }
    slots_held_ = 0;
    for (auto& [generation, op] : slotless_) f(*op);
    slotless_.clear();
  }

  /// Drops every reference to `op`.
  void forget(const operation& op) {
    const counted_change change(*this);
    for (auto& held : slots_) {
      if (held.get() == &op) {
        held.reset();
        --slots_held_;
      }
    }
    std::erase_if(slotless_, [&](const auto& entry) { return entry.second.get() == &op; });
  }

 private:
  // Keeps `busy_` right across one change of the table: it counts the table when it goes
  // from empty to holding something, and no longer when it goes back.
  class counted_change {
   public:
    explicit counted_change(transfer_table& t) : table_(t), was_empty_(t.empty()) {}
    counted_change(const counted_change&) = delete;
    counted_change& operator=(const counted_change&) = delete;
    ~counted_change() {
      if (table_.busy_ == nullptr || was_empty_ == table_.empty()) return;
      if (was_empty_) {
        ++*table_.busy_;
      } else {
        --*table_.busy_;
      }
    }

   private:
    transfer_table& table_;
    bool was_empty_;
  };

  std::size_t* busy_ = nullptr;
  std::vector<std::shared_ptr<operation>> slots_;  // tickets_per_pair of them, or none yet
  std::size_t slots_held_ = 0;
  std::map<std::uint64_t, std::shared_ptr<operation>> slotless_;
};

}  // namespace commx::detail::shm
