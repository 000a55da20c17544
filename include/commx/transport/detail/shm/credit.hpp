// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Eager credit: a bound on what a receiver holds of the messages nobody has asked for yet.
///
/// A sender writes a small message into the ring whole (`eager`) only while what it has sent
/// eagerly to that receiver, less what the receiver has given back, stays within the window;
/// beyond it the message is offered (`rts`, the payload kept in the sender's memory until a
/// receive takes it) as a large one is (transfer_table.hpp: such offers never wait for a ticket
/// slot). The receiver gives credit back as its user takes the messages, straight into a posted
/// receive or out of its queue, a quarter window at a time, in a word on the ring's control line
/// (ring_control::returned), which the sender reads only when the credit it knows of runs out.
///
/// A message counts its payload plus `message_overhead` bytes (its place in the queue), so a
/// flood of empty messages is bounded too. A receiver so holds at most one window from each
/// sender (itself included): with n ranks, n x window, however many messages are sent. Offers
/// cost it an envelope each (matching.hpp's queued_message), as tcp's do.

#include <cstddef>
#include <cstdint>

#include "commx/transport/detail/shm/ring.hpp"

namespace commx::detail::shm {

/// The bytes one eager message counts against the window.
inline constexpr std::uint64_t message_overhead = 64;
constexpr std::uint64_t credit_cost(std::size_t payload) { return payload + message_overhead; }

/// The sender's side, for one receiver.
class credit_to_send {
 public:
  /// Takes `cost` from the credit and returns true, or returns false (nothing taken) when the
  /// window has no room for it even after looking at what the receiver gave back.
  bool take(std::uint64_t cost, const ring_producer& ring, std::uint64_t window) {
    if (sent_ + cost - returned_ > window) {
      returned_ = ring.credit_returned();
      if (sent_ + cost - returned_ > window) return false;
    }
    sent_ += cost;
    return true;
  }

 private:
  std::uint64_t sent_ = 0;      // counted against the window so far
  std::uint64_t returned_ = 0;  // given back, as last read
};

/// The receiver's side, for one sender.
class credit_to_return {
 public:
  /// The user took a message that counted `cost`.
  void give_back(std::uint64_t cost, const ring_consumer& ring, std::uint64_t window) {
    taken_ += cost;
    if (taken_ - published_ >= window / 4) {
      published_ = taken_;
      ring.return_credit(published_);
    }
  }

 private:
  std::uint64_t taken_ = 0;
  std::uint64_t published_ = 0;
};

}  // namespace commx::detail::shm
