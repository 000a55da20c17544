// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The ucx engine's lost peers (engine.hpp): this node's peers whose process ended, found by
/// looking at their processes as shm does, and what waits on a lost peer ended. Out of line
/// as shm's endpoint parts are, included by engine.hpp.

#include <vector>

#include "commx/transport/detail/ucx/engine.hpp"

namespace commx::detail::ucx {

// Peers of this node whose process ended (looked at before a sleep, at most every
// local_peers_period: a look asks the kernel about each peer with an endpoint, those this
// rank talks to or watches, and every event used to end a sleep and bring one: after an
// alltoall of 1,024 ranks, 1,023 system calls a message). What such a peer sent before it
// ended is in this rank's socket or segment by then, but may have come after the last
// progress: it is taken in first (a receive naming the peer must get it, not
// errc::peer_lost), bounded as progress is.
inline void engine::check_local_peers() {
  const clock::time_point now = clock::now();
  if (!losses_pending_ && now - local_peers_checked_ < local_peers_period) return;
  local_peers_checked_ = now;
  std::vector<peer*> ended;
  for (peer& p : peers_) {
    if (p.same_node && p.ep != nullptr && !p.gone() && p.watch.gone()) ended.push_back(&p);
  }
  if (!ended.empty()) {
    for (int turn = 0; turn < 16 && worker_.progress(); ++turn) take_arrivals();
    take_arrivals();
    for (peer* p : ended) p->failed = true;
    losses_pending_ = true;
  }
  if (losses_pending_) notice_losses();
}

// Ends what waits on peers found gone: after the arrivals were taken in, so that what a
// peer sent before it went is delivered first.
inline void engine::notice_losses() {
  losses_pending_ = false;
  for (peer& p : peers_) {
    if (!p.gone() || p.noticed) continue;
    p.noticed = true;
    if (!p.said_bye) {
      failed_.push_back(p.rank);
      COMMX_LOG(warn, log_, "rank {} lost", p.rank);
    }
    ++events_;
    if (p.ep != nullptr && p.rank != rank() && !p.said_bye) {
      drop_endpoint(p, "the peer is gone");  // what UCX still holds for it ends
    }
    for (auto it = posted_.begin(); it != posted_.end();) {
      if ((*it)->peer != p.rank) {
        ++it;
        continue;
      }
      finish(**it, {p.rank, (*it)->tag, 0, lost()});
      it = posted_.erase(it);
    }
  }
}

}  // namespace commx::detail::ucx
