// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How a waiting tcp (and wan) rank polls its sockets before it sleeps in epoll.
///
/// Sleeping costs a wake-up when bytes come: some 25 us on this project's VMs, where Open MPI's
/// TCP BTL, which polls, answers an 8-byte ping-pong in 6-8 us. Polling back to back costs the
/// core: where another task shares it, the poller takes it from a rank that has work, and a
/// yield between polls hands it to a task that may keep it for a whole time slice (measured on
/// a 2-core machine with two busy processes: an 8-byte half round trip of 11.5 us sleeping
/// after 100 us of polls, 45-350 us yielding between polls). But where the sharing tasks are
/// the job's own ranks, which wait as often as they compute, a yield comes back soon and a
/// sleep's wake-up is the greater cost (MD on 4 ranks and 2 cores: 0.84x the time per step of
/// sleeping at once; on two simulated nodes of two ranks: bench/HISTORY.md). So the choice is
/// made at run time, once the rendezvous has told each rank which of the job's ranks share its
/// machine (the kernel's boot id; the listen address where the kernel does not say):
/// - `COMMX_TCP_POLL=auto` (the default): with no more of the job's ranks on this machine than
///   it has online cores, a wait polls back to back until `auto_budget` passes without a byte
///   read, then on, yielding between polls, until `own_core_wait` (2 ms) has passed without
///   one (a peer's copy of a large message takes about that long, and a sleeper's wake-up is
///   dear on a VM: commx/detail/shared_core.hpp), then sleeps; with more, it polls with a
///   yield between polls as long as shm's waits yield (40 us per rank of a core, at least
///   200 us), then sleeps.
/// - `COMMX_TCP_POLL=n`: n polls, yielding between them, whatever the machine (0: never poll).
/// Nodes simulated on one machine (COMMX_NODE, or network namespaces) share its cores, so they
/// count as one machine.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/detail/shared_core.hpp"

namespace commx::detail::tcp {

/// The polling a wait does before it sleeps (see the file comment).
class polling {
 public:
  /// How long a wait polls back to back without a byte coming where each rank has a core: long
  /// enough for a round trip of a rendezvous (rts, cts) on a LAN, short against a time slice.
  static constexpr clock::duration auto_budget = std::chrono::microseconds(100);

  /// Never poll (until the rendezvous says who shares the machine).
  polling() = default;

  /// COMMX_TCP_POLL=n: exactly `turns` polls.
  static polling fixed(std::size_t turns) {
    polling p;
    p.turns_ = turns;
    return p;
  }

  /// COMMX_TCP_POLL=auto on a machine with `ranks_on_host` of the job's ranks and `cores`
  /// online cores: back to back where each rank has a core, yielding between polls where not.
  static polling for_host(int ranks_on_host, int cores) {
    polling p;
    p.ranks_on_host_ = ranks_on_host;
    p.cores_ = cores;
    // Where they outnumber the cores, as long as shm's yielding (commx/detail/shared_core.hpp).
    p.budget_ = ranks_on_host > cores ? clock::duration(yield_before_sleep(ranks_on_host, cores))
                                      : auto_budget;
    return p;
  }

  /// This machine, as the kernel's boot id tells it (the same in every network namespace and
  /// container of one kernel), folded to 64 bits; 0 where the kernel does not say.
  static std::uint64_t this_machine() {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string text;
    if (!(in >> text)) return 0;
    std::uint64_t id = 14695981039346656037ULL;  // FNV-1a
    for (const char c : text) id = (id ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    return id == 0 ? 1 : id;
  }

  /// The host's online cores.
  static int online_cores() {
    const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }

  /// Whether a wait polls at all.
  [[nodiscard]] bool polls() const { return turns_ > 0 || budget_ > clock::duration::zero(); }

  /// Whether a wait yields its core between polls.
  [[nodiscard]] bool yields() const { return turns_ > 0 || oversubscribed(); }

  /// Polls (`poll_once`; a yield between polls where `yields()`) until `changed()`, `when`, or
  /// the turns or budget are spent; true if `changed()` ended it. The budget runs from the
  /// last poll that read bytes (`bytes_read()`, a count, changed): while a large message
  /// streams in, its next bytes are microseconds away, and sleeping between them costs a
  /// wake-up each time (a 4 MiB ping-pong is some 1.2x as fast polling through). Writes do not
  /// count: a sender whose socket is full sleeps until a third of it is free, which served
  /// windowed streams better than polling (bench/HISTORY.md). A stream that stalls for a budget
  /// still lets the wait sleep.
  template <class Poll, class Changed, class BytesRead>
  bool poll_first(Poll&& poll_once, Changed&& changed, BytesRead&& bytes_read,
                  clock::time_point when) const {
    if (!polls()) return false;
    clock::time_point start = clock::now();
    std::uint64_t last_read = bytes_read();
    for (std::size_t turn = 0;; ++turn) {
      poll_once();
      if (changed()) return true;
      const clock::time_point now = clock::now();
      if (now >= when) return false;
      if (const std::uint64_t read_now = bytes_read(); read_now != last_read) {
        last_read = read_now;
        start = now;
      }
      const clock::duration idle = now - start;
      if (turns_ > 0 ? turn + 1 >= turns_ : idle >= patience()) return false;
      if (yields() || idle >= budget_) std::this_thread::yield();
    }
  }

  /// How long an automatic wait polls without a byte read before it sleeps: its budget where
  /// the machine is oversubscribed; where each rank has a core, the budget back to back, then
  /// yielding polls up to own_core_wait.
  [[nodiscard]] clock::duration patience() const {
    return oversubscribed() ? budget_ : std::max(budget_, clock::duration(own_core_wait));
  }

  /// What was chosen and why, for the log.
  [[nodiscard]] std::string describe() const {
    if (turns_ > 0) return fmt::format("polls {} times before sleeping (COMMX_TCP_POLL)", turns_);
    if (ranks_on_host_ == 0) return "sleeps at once (COMMX_TCP_POLL=0)";
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(budget_).count();
    if (oversubscribed()) {
      return fmt::format(
          "polls up to {} us, yielding between polls, before sleeping ({} ranks on this "
          "machine, {} cores: oversubscribed)",
          us, ranks_on_host_, cores_);
    }
    return fmt::format(
        "polls up to {} us back to back, then yielding between polls up to {} us, before "
        "sleeping ({} ranks on this machine, {} cores)",
        us, std::chrono::duration_cast<std::chrono::microseconds>(patience()).count(),
        ranks_on_host_, cores_);
  }

 private:
  std::size_t turns_ = 0;
  clock::duration budget_{};
  int ranks_on_host_ = 0;
  int cores_ = 0;

  [[nodiscard]] bool oversubscribed() const { return ranks_on_host_ > cores_; }
};

}  // namespace commx::detail::tcp
