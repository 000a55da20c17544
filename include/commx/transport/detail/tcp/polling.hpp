// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How a waiting tcp (and wan) rank polls its sockets before it sleeps in epoll.
///
/// Sleeping costs a wake-up when bytes come: some 25 us on this project's VMs, where Open MPI's
/// TCP BTL, which polls, answers an 8-byte ping-pong in 6-8 us. Polling costs the core: on a
/// host that runs more of the job's ranks than it has cores, a polling rank takes the core
/// from a rank that has work (measured on a loaded 2-core machine: 14-155 us after 16 yields
/// against 7-10 us sleeping at once). So the choice is made at run time, once the rendezvous
/// has told each rank who shares its host (its listen address):
/// - `COMMX_TCP_POLL=auto` (the default): with no more ranks on this host than it has online
///   cores, a wait polls for up to `auto_budget`, then sleeps; oversubscribed, it sleeps at
///   once. The polls follow each other without a yield: the core is the rank's own, and a
///   yield is one more system call between a message's arrival and its receive.
/// - `COMMX_TCP_POLL=n`: n polls, yielding between them, whatever the host (0: never poll).
/// Nodes simulated on one host (COMMX_NODE) share its address, so they count as one host.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "commx/deadline.hpp"

namespace commx::detail::tcp {

/// The polling a wait does before it sleeps (see the file comment).
class polling {
 public:
  /// How long an automatic wait polls at most: long enough for a round trip of a rendezvous
  /// (rts, cts) on a LAN, short against a time slice.
  static constexpr clock::duration auto_budget = std::chrono::microseconds(100);

  /// Never poll (until the rendezvous says who shares the host).
  polling() = default;

  /// COMMX_TCP_POLL=n: exactly `turns` polls.
  static polling fixed(std::size_t turns) {
    polling p;
    p.turns_ = turns;
    return p;
  }

  /// COMMX_TCP_POLL=auto on a host with `ranks_on_host` of the job's ranks and `cores` online
  /// cores: poll up to auto_budget unless the host is oversubscribed.
  static polling for_host(int ranks_on_host, int cores) {
    polling p;
    p.ranks_on_host_ = ranks_on_host;
    p.cores_ = cores;
    if (ranks_on_host <= cores) p.budget_ = auto_budget;
    return p;
  }

  /// The host's online cores.
  static int online_cores() {
    const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }

  /// Whether a wait polls at all.
  [[nodiscard]] bool polls() const { return turns_ > 0 || budget_ > clock::duration::zero(); }

  /// Polls (`poll_once`; a yield between polls when the turns are fixed) until `changed()`,
  /// `when`, or the turns or budget are spent; true if `changed()` ended it.
  template <class Poll, class Changed>
  bool poll_first(Poll&& poll_once, Changed&& changed, clock::time_point when) const {
    if (!polls()) return false;
    const clock::time_point start = clock::now();
    for (std::size_t turn = 0;; ++turn) {
      poll_once();
      if (changed()) return true;
      const clock::time_point now = clock::now();
      if (now >= when) return false;
      if (turns_ > 0 ? turn + 1 >= turns_ : now - start >= budget_) return false;
      if (turns_ > 0) std::this_thread::yield();
    }
  }

  /// What was chosen and why, for the log.
  [[nodiscard]] std::string describe() const {
    if (turns_ > 0) return fmt::format("polls {} times before sleeping (COMMX_TCP_POLL)", turns_);
    if (ranks_on_host_ == 0) return "sleeps at once (COMMX_TCP_POLL=0)";
    if (budget_ > clock::duration::zero()) {
      return fmt::format("polls up to {} us before sleeping ({} ranks on this host, {} cores)",
                         std::chrono::duration_cast<std::chrono::microseconds>(budget_).count(),
                         ranks_on_host_, cores_);
    }
    return fmt::format("sleeps at once ({} ranks on this host, {} cores: oversubscribed)",
                       ranks_on_host_, cores_);
  }

 private:
  std::size_t turns_ = 0;
  clock::duration budget_{};
  int ranks_on_host_ = 0;
  int cores_ = 0;
};

}  // namespace commx::detail::tcp
