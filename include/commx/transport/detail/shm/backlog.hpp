// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What waits for room in one peer's ring: answers and pieces first (a ticket comes free only
/// when they get through), then messages in the order they were sent.
///
/// An endpoint makes a peer's backlog when the first record to that peer must wait, and keeps
/// it: a std::deque allocates some 700 bytes when it is made, and a rank of a large node talks
/// to few of its peers (two per peer made at start cost 1.4 KiB a peer, 1.4 MiB a rank at
/// 1,024 ranks).

#include <deque>
#include <memory>

#include "commx/transport/detail/shm/matching.hpp"
#include "commx/transport/detail/shm/ring.hpp"

namespace commx::detail::shm {

struct outgoing {
  enum class kind { eager, offer, control, pieces };
  kind what;
  record header;
  std::shared_ptr<operation> op;  // eager, offer and pieces
};

struct backlog {
  std::deque<outgoing> urgent;  // answers (cts, fin) and pieces
  std::deque<outgoing> outbox;  // messages (eager, offers), in order
  [[nodiscard]] bool empty() const { return urgent.empty() && outbox.empty(); }
};

}  // namespace commx::detail::shm
