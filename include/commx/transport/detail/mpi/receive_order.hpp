// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The order in which transport::mpi's endpoint posted its unmatched receives: a vector whose
/// front is taken in constant time. Receives complete mostly in posting order, so each one
/// left the front of a plain vector and moved every later one (a window of 64 receives moved
/// 2,000 entries, a few percent of an 8-byte message's time).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace commx::detail::mpi {

/// Receive slots in posting order. Indices count from the earliest receive still waiting.
class receive_order {
 public:
  using iterator = std::vector<std::uint32_t>::const_iterator;

  [[nodiscard]] bool empty() const { return head_ == slots_.size(); }
  [[nodiscard]] std::size_t size() const { return slots_.size() - head_; }
  [[nodiscard]] std::uint32_t operator[](std::size_t i) const { return slots_[head_ + i]; }
  [[nodiscard]] std::uint32_t back() const { return slots_.back(); }
  [[nodiscard]] iterator begin() const {
    return slots_.begin() + static_cast<std::ptrdiff_t>(head_);
  }
  [[nodiscard]] iterator end() const { return slots_.end(); }

  void push_back(std::uint32_t slot) {
    if (head_ > 0 && head_ >= slots_.size() / 2) {  // drop the taken front, keep the memory
      slots_.erase(slots_.begin(), slots_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    slots_.push_back(slot);
  }

  /// Removes the receive at index `i`.
  void erase_at(std::size_t i) {
    if (i == 0) {
      if (++head_ == slots_.size()) clear();
      return;
    }
    slots_.erase(slots_.begin() + static_cast<std::ptrdiff_t>(head_ + i));
  }

  /// Removes `slot` wherever it is.
  void remove(std::uint32_t slot) {
    const auto at = std::find(begin(), end(), slot);
    if (at != end()) erase_at(static_cast<std::size_t>(at - begin()));
  }

  void clear() {
    slots_.clear();
    head_ = 0;
  }

 private:
  std::vector<std::uint32_t> slots_;
  std::size_t head_ = 0;  // slots_[0, head_) are taken
};

}  // namespace commx::detail::mpi
