// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Which way a large message travels when both are open under COMMX_SHM_LARGE=auto (the default
/// is cma; auto measured within a few percent of copy, bench/HISTORY.md): the receiver
/// chooses, message by message, between copying it out of the sender's memory with cma (one
/// copy, the receiver's) and asking for pieces through the ring (two copies, the sender's and
/// the receiver's, pipelined).
///
/// Neither wins everywhere, and not for long (bench/HISTORY.md, 2026-11-28): one way (ping-pong,
/// a window of sends) the pieces keep both cores copying and beat cma 1.2-2x; in an exchange
/// (allgather, alltoall, sendrecv) each core also copies its own outgoing pieces, so cma's
/// single copy per core wins by a fifth when a cache line crosses between cores slowly (this
/// project's VM changes between 40 and 200 ns from run to run) and loses when it crosses fast
/// or the sender just wrote the buffer (cma then reads lines dirty in the sender's cache). So
/// the receiver measures what each way has cost it per byte lately, in cells by size (powers
/// of two) and shape (an exchange: the offer crossed a large send of the receiver's own), and
/// takes the cheaper. A message's cost runs from the moment its receiver asked for it, in an
/// exchange from our own offer to the end of both our receive and our sends (the way chosen
/// moves work between them: a peer reading by cma spares us writing pieces).
///
/// One way, the receiver's choice costs only itself. In an exchange it costs its peer too: a
/// rank inside a cma read cannot write the pieces its peer asked for, so a rank that alone
/// tries the other way measures a mix, and both ways are stable once both ranks take them
/// (measured: each pair settled on cma, though pieces taken by both were a fifth faster). So in
/// an exchange every rank takes the way rank 0 of the segment publishes, and rank 0 measures,
/// its retries lasting `settling_retry` messages of which only the last counts: the others
/// follow by the second, and cma needs a few messages to reach its steady cost (a buffer sent
/// again unchanged stays in the reader's cache from the last read: 1 MiB exchanges in the slow
/// mode took 200-340 us on a retry's first cma message, 125-200 on its second, 85-95 steady).
///
/// | event | what the cell does |
/// |---|---|
/// | a way never measured | is taken (pieces first); its first message is not counted |
/// | `retry_first` decisions since the other way's last try | it is taken once (`settling_retry` times, settling; only the last counted) |
/// | a retry that loses | the interval before the next doubles, up to `retry_last` |
/// | a retry that wins | the ways swap; the interval starts again at `retry_first` |
/// | the way taken costs more than the other did when last tried | the next decision retries |
/// | a change of way, when settling (exchanges) | its first message's cost is not counted |
///
/// A way's cost is the median of its last three messages, so one slow message does not make it
/// lose (it makes the other way tried again); a retry's cost replaces the other way's old ones
/// outright, so a changed machine is noticed by one message. Settled, the losing way costs one
/// message in `retry_last`.

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace commx::detail::shm {

class path_choice {
 public:
  enum class way : std::uint8_t { pieces, cma };

  /// Decisions before the losing way is tried again, at first and at most.
  static constexpr std::uint32_t retry_first = 16;
  static constexpr std::uint32_t retry_last = 1024;
  /// Messages a retry lasts when settling; only its last is counted.
  static constexpr std::uint8_t settling_retry = 4;
  /// Sizes up to 2^47 bytes, in classes by their highest bit.
  static constexpr std::size_t size_classes = 48;

  /// What the receiver decided, the cell its cost goes back to, and whether it counts.
  struct decision {
    way chosen;
    std::uint16_t cell;
    bool counted = true;
    [[nodiscard]] bool exchange() const { return cell % 2 == 1; }
  };

  /// The way for a `bytes`-byte message; `exchange`: the receiver has large sends in flight.
  /// `settling`: the way takes a message to come into force (others follow what this rank
  /// publishes), so after every change of way the first message's cost is not counted, and a
  /// retry lasts two messages.
  decision choose(std::size_t bytes, bool exchange, bool settling = false) {
    const auto index = cell_of(bytes, exchange);
    cell& c = cells_[index];
    way chosen = c.preferred;  // also while it has no cost yet
    if (c.known[slot(c.preferred)]) {
      if (c.retry_left > 0) {
        chosen = other(c.preferred);
        --c.retry_left;
      } else if (!c.known[slot(other(c.preferred))] || ++c.since_retry >= c.retry_interval) {
        chosen = other(c.preferred);
        c.since_retry = 0;
        c.retry_left = settling ? settling_retry - 1 : 0;
      }
    }
    const bool warming = chosen != c.preferred && c.retry_left > 0;
    const bool changed = chosen != c.last_taken;
    c.last_taken = chosen;
    // A way's first message in a cell meets cold memory (pages not yet faulted in or pinned):
    // not counted either.
    const bool first = !c.taken[slot(chosen)];
    c.taken[slot(chosen)] = true;
    return {chosen, index, !(settling && changed) && !first && !warming};
  }

  /// What moving `bytes` the way `d` chose took.
  void record(decision d, std::size_t bytes, std::chrono::nanoseconds took) {
    if (bytes == 0 || !d.counted) return;
    cell& c = cells_[d.cell];
    const double cost = static_cast<double>(took.count()) / static_cast<double>(bytes);
    const auto s = slot(d.chosen);
    const bool retry = d.chosen != c.preferred;
    if (!c.known[s] || retry) {
      c.recent[s].fill(cost);
      c.known[s] = true;
    } else {
      c.recent[s][c.next[s]] = cost;
      c.next[s] = static_cast<std::uint8_t>((c.next[s] + 1) % c.recent[s].size());
    }
    const auto p = slot(c.preferred);
    const auto q = slot(other(c.preferred));
    if (!c.known[p] || !c.known[q]) return;
    if (!retry) {
      // Dearer than the other way was when last tried: try it again at the next decision.
      if (c.cost(p) > c.cost(q)) c.since_retry = c.retry_interval;
    } else if (c.cost(q) < c.cost(p)) {
      c.preferred = other(c.preferred);
      c.retry_interval = retry_first;
      c.since_retry = 0;
      c.retry_left = 0;
    } else {
      c.retry_interval = std::min(c.retry_interval * 2, retry_last);
    }
  }

  /// The way a cell takes now, outside a retry (for tests and logs).
  [[nodiscard]] way preferred(std::size_t bytes, bool exchange) const {
    return cells_[cell_of(bytes, exchange)].preferred;
  }

  /// Each measured cell: its sizes, shape, costs and the way it takes.
  [[nodiscard]] std::string describe() const {
    std::string text;
    for (std::size_t i = 0; i < cells_.size(); ++i) {
      const cell& c = cells_[i];
      if (!c.known[0] && !c.known[1]) continue;
      const std::size_t low = i / 2 == 0 ? 0 : std::size_t{1} << (i / 2 - 1);
      text += fmt::format("{}[{}-{} B {}: pieces {:.4f} ns, cma {:.4f} ns -> {}]",
                          text.empty() ? "" : " ", low, 2 * low - 1, i % 2 ? "exchange" : "one way",
                          c.cost(0), c.cost(1), c.preferred == way::cma ? "cma" : "pieces");
    }
    return text.empty() ? "none measured" : text;
  }

  /// The class of a `bytes`-byte message: its highest bit.
  static std::size_t size_class(std::size_t bytes) {
    return std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(bytes)), size_classes - 1);
  }

 private:
  struct cell {
    // Per way, nanoseconds per byte of its last three messages (a retry's fills all three);
    // the cost is their median, so that one slow message is not enough to leave a way.
    std::array<std::array<double, 3>, 2> recent{};
    std::array<std::uint8_t, 2> next{};
    std::array<bool, 2> known{};
    std::array<bool, 2> taken{};
    way preferred = way::pieces;
    way last_taken = way::pieces;
    std::uint8_t retry_left = 0;
    std::uint32_t since_retry = 0;
    std::uint32_t retry_interval = retry_first;

    [[nodiscard]] double cost(std::size_t w) const {
      const auto& r = recent[w];
      return std::max(std::min(r[0], r[1]), std::min(std::max(r[0], r[1]), r[2]));
    }
  };

  static std::uint16_t cell_of(std::size_t bytes, bool exchange) {
    return static_cast<std::uint16_t>(size_class(bytes) * 2 + (exchange ? 1 : 0));
  }
  static std::size_t slot(way w) { return static_cast<std::size_t>(w); }
  static way other(way w) { return w == way::pieces ? way::cma : way::pieces; }

  std::array<cell, size_classes * 2> cells_{};
};

}  // namespace commx::detail::shm
