// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::fault_plan`: what `transport::faulty` does to a job, and when, written as one line
/// of text so that a failing run can be replayed exactly (COMMX_FAULTS; see faulty.hpp).
///
/// Entries are separated by `;`. A count `after=N` fires at the rank's (N+1)-th send, `coll=K`
/// at its K-th send inside a collective, `at=T` at its first transport call T after it started
/// (durations take `us`, `ms` or `s`):
///
/// | entry | effect |
/// |---|---|
/// | `seed=S` | seeds the random delays (and `random`); the same seed gives the same faults |
/// | `delay=A-B`, `delay@R=A-B` | holds every message sent (by rank R) for a time drawn in [A, B], keeping per-pair order |
/// | `kill@R:after=N`, `:coll=K`, `:at=T` | rank R dies there, as a crash would: SIGKILL for a process, an `injected_kill` thrown on in-process threads |
/// | `stall@R:after=N:for=D` (or `coll`, `at`) | rank R stops for D, as if SIGSTOPped: it neither sends nor takes anything in |
/// | `partition=G0,G1,...:at=T[:for=D]` | from T (for D, else for good) rank r reaches only the ranks whose group equals Gr; messages across wait, in order, for the partition to heal |
/// | `corrupt@R:peer=P:after=N`, `truncate@R:...` | rank R writes a frame with a damaged header (or one cut short, then hangs up) to P; network stacks only |
/// | `stranger@R:peer=P:after=N` | rank R calls P's port as a stranger would (no token, garbage), which P must refuse at no cost to the job; network stacks only |
/// | `random` | adds one or two of the above, drawn from the seed and the job's size |
///
/// Every rank reads the same line and acts on the entries that name it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commx/deadline.hpp"
#include "commx/error.hpp"

namespace commx::transport {

/// When a fault fires on its rank.
struct fault_trigger {
  /// What is counted: the rank's sends, its sends inside collectives, or time since it started.
  enum class measure : std::uint8_t { sends, collective_sends, time };
  /// What this trigger counts.
  measure what = measure::sends;
  /// Fires at the (count + 1)-th send, or at the count-th collective send.
  std::uint64_t count = 0;
  /// Fires at the first call once this much time has passed (measure::time).
  clock::duration after{};
};

/// One fault of a plan (see the file comment).
struct fault {
  /// What happens (see the file comment's table).
  enum class kind : std::uint8_t { kill, stall, corrupt, truncate, stranger };
  /// This fault's kind.
  kind what = kind::kill;
  int rank = 0;              ///< the rank it happens to
  int peer = -1;             ///< corrupt, truncate, stranger: the rank it is done to
  fault_trigger when;        ///< when it fires
  clock::duration length{};  ///< stall: how long
};

/// Ranks cut into groups that cannot reach each other for a while.
struct fault_partition {
  std::vector<int> group;                 ///< group per world rank
  clock::duration from{};                 ///< since each rank started
  std::optional<clock::duration> length;  ///< unset: it never heals
};

/// Delays of every message a rank sends, drawn uniformly in [low, high].
struct fault_delay {
  int rank = -1;  ///< -1: every rank
  /// The shortest delay.
  clock::duration low{};
  /// The longest delay.
  clock::duration high{};
};

/// The faults a job suffers (see the file comment). Parse one with `fault_plan::parse`.
struct fault_plan {
  /// Seeds the delays and `random`.
  std::uint64_t seed = 0;
  /// Delays, per rank or for all.
  std::vector<fault_delay> delays;
  /// Kills, stalls, damaged frames and strangers.
  std::vector<fault> faults;
  /// Partitions.
  std::vector<fault_partition> partitions;

  /// Reads a plan for a job of `size` ranks from `text` (the file comment's grammar). `random`
  /// draws from the seed; `network` says whether frames may be damaged (tcp).
  /// @throws commx::error errc::invalid_argument naming the entry that is wrong.
  static fault_plan parse(std::string_view text, int size, bool network);

  /// The plan as a line `parse` reads back into the same plan (`random` written out).
  [[nodiscard]] std::string text() const;
};

}  // namespace commx::transport

namespace commx::detail::faults {

using transport::fault;
using transport::fault_delay;
using transport::fault_partition;
using transport::fault_plan;
using transport::fault_trigger;

[[noreturn]] inline void refuse(std::string_view entry, std::string_view why) {
  throw error(errc::invalid_argument, fmt::format("COMMX_FAULTS entry '{}': {}", entry, why));
}

inline std::uint64_t number(std::string_view entry, std::string_view digits) {
  std::uint64_t value = 0;
  if (digits.empty() || digits.size() > 18)
    refuse(entry, fmt::format("'{}' is not a count", digits));
  for (char c : digits) {
    if (c < '0' || c > '9') refuse(entry, fmt::format("'{}' is not a count", digits));
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

inline clock::duration duration(std::string_view entry, std::string_view text) {
  const std::size_t unit = text.find_first_not_of("0123456789");
  if (unit == 0 || unit == std::string_view::npos) {
    refuse(entry, fmt::format("'{}' is not a duration (write 200us, 5ms or 2s)", text));
  }
  const std::uint64_t n = number(entry, text.substr(0, unit));
  const std::string_view suffix = text.substr(unit);
  if (suffix == "us") return std::chrono::microseconds(n);
  if (suffix == "ms") return std::chrono::milliseconds(n);
  if (suffix == "s") return std::chrono::seconds(n);
  refuse(entry, fmt::format("'{}' is not a duration (write 200us, 5ms or 2s)", text));
}

inline std::string duration_text(clock::duration d) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  if (us != 0 && us % 1000000 == 0) return fmt::format("{}s", us / 1000000);
  if (us != 0 && us % 1000 == 0) return fmt::format("{}ms", us / 1000);
  return fmt::format("{}us", us);
}

inline std::vector<std::string_view> split(std::string_view text, char by) {
  std::vector<std::string_view> parts;
  while (true) {
    const std::size_t at = text.find(by);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

// An entry's `key=value` part.
inline std::pair<std::string_view, std::string_view> key_value(std::string_view entry,
                                                               std::string_view kv) {
  const std::size_t eq = kv.find('=');
  if (eq == std::string_view::npos) refuse(entry, fmt::format("'{}' is not key=value", kv));
  return {kv.substr(0, eq), kv.substr(eq + 1)};
}

inline int rank_in(std::string_view entry, std::string_view digits, int size) {
  const std::uint64_t r = number(entry, digits);
  if (r >= static_cast<std::uint64_t>(size)) {
    refuse(entry, fmt::format("rank {} is not in a job of {} ranks", r, size));
  }
  return static_cast<int>(r);
}

inline void range(std::string_view entry, std::string_view text, fault_delay& d) {
  const auto bounds = split(text, '-');
  if (bounds.size() > 2) refuse(entry, "a delay is A or A-B");
  d.low = duration(entry, bounds[0]);
  d.high = bounds.size() == 2 ? duration(entry, bounds[1]) : d.low;
  if (d.high < d.low) refuse(entry, "a delay's upper bound is below its lower one");
}

// One or two faults drawn from the seed, the same on every rank.
inline void add_random(fault_plan& plan, int size, bool network) {
  std::mt19937_64 draw(plan.seed * 0x9e3779b97f4a7c15ULL + 0x51ed);
  auto pick = [&](std::uint64_t n) { return static_cast<std::uint64_t>(draw() % n); };
  auto any_rank = [&] { return static_cast<int>(pick(static_cast<std::uint64_t>(size))); };
  if (pick(2) == 0) {
    constexpr std::uint64_t highs_us[] = {20, 200, 2000};
    plan.delays.push_back({-1, {}, std::chrono::microseconds(highs_us[pick(3)])});
  }
  const std::uint64_t count = 1 + pick(2);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t kinds = size > 1 ? (network ? 6 : 3) : 2;
    fault_trigger when;
    if (pick(3) == 0) {
      when.what = fault_trigger::measure::collective_sends;
      when.count = 1 + pick(40);
    } else {
      when.count = pick(200);
    }
    switch (pick(kinds)) {
      case 0:
        plan.faults.push_back({fault::kind::kill, any_rank(), -1, when, {}});
        break;
      case 1: {
        constexpr std::uint64_t stalls_ms[] = {20, 200, 800, 2500};
        plan.faults.push_back({fault::kind::stall, any_rank(), -1, when,
                               std::chrono::milliseconds(stalls_ms[pick(4)])});
        break;
      }
      case 2: {
        fault_partition p;
        p.group.assign(static_cast<std::size_t>(size), 0);
        const int cut = 1 + static_cast<int>(pick(static_cast<std::uint64_t>(size - 1)));
        std::vector<int> order(static_cast<std::size_t>(size));
        for (int r = 0; r < size; ++r) order[static_cast<std::size_t>(r)] = r;
        std::shuffle(order.begin(), order.end(), draw);
        for (int k = 0; k < cut; ++k)
          p.group[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] = 1;
        p.from = std::chrono::milliseconds(pick(100));
        constexpr std::int64_t heals_ms[] = {30, 300, 0};
        const std::int64_t heal = heals_ms[pick(3)];
        if (heal > 0) p.length = std::chrono::milliseconds(heal);
        plan.partitions.push_back(std::move(p));
        break;
      }
      default: {
        const int r = any_rank();
        const int offset = 1 + static_cast<int>(pick(static_cast<std::uint64_t>(size - 1)));
        constexpr fault::kind damage[] = {fault::kind::corrupt, fault::kind::truncate,
                                          fault::kind::stranger};
        plan.faults.push_back({damage[pick(3)], r, (r + offset) % size, when, {}});
        break;
      }
    }
  }
}

inline void read_trigger(std::string_view entry, std::string_view key, std::string_view value,
                         fault_trigger& when) {
  if (key == "after") {
    when = {fault_trigger::measure::sends, number(entry, value), {}};
  } else if (key == "coll") {
    when = {fault_trigger::measure::collective_sends, number(entry, value), {}};
    if (when.count == 0) refuse(entry, "coll counts from 1");
  } else if (key == "at") {
    when = {fault_trigger::measure::time, 0, duration(entry, value)};
  } else {
    refuse(entry, fmt::format("unknown key '{}'", key));
  }
}

inline void read_fault(fault_plan& plan, std::string_view entry, std::string_view head,
                       std::span<const std::string_view> keys, int size, bool network) {
  const std::size_t at = head.find('@');
  if (at == std::string_view::npos) refuse(entry, "a fault names its rank: kind@R");
  const std::string_view kind = head.substr(0, at);
  fault f;
  f.rank = rank_in(entry, head.substr(at + 1), size);
  if (kind == "kill") {
    f.what = fault::kind::kill;
  } else if (kind == "stall") {
    f.what = fault::kind::stall;
  } else if (kind == "corrupt" || kind == "truncate" || kind == "stranger") {
    f.what = kind == "corrupt"    ? fault::kind::corrupt
             : kind == "truncate" ? fault::kind::truncate
                                  : fault::kind::stranger;
    if (!network) refuse(entry, "only tcp has frames to damage and a port to call");
  } else {
    refuse(entry, fmt::format("unknown fault '{}'", kind));
  }
  for (std::string_view kv : keys) {
    const auto [key, value] = key_value(entry, kv);
    if (key == "for" && f.what == fault::kind::stall) {
      f.length = duration(entry, value);
    } else if (key == "peer" && f.what >= fault::kind::corrupt) {
      f.peer = rank_in(entry, value, size);
    } else {
      read_trigger(entry, key, value, f.when);
    }
  }
  if (f.what == fault::kind::stall && f.length == clock::duration::zero()) {
    refuse(entry, "a stall says how long: for=D");
  }
  if (f.what >= fault::kind::corrupt && (f.peer < 0 || f.peer == f.rank)) {
    refuse(entry, "a damaged frame or a stranger goes to another rank: peer=P");
  }
  plan.faults.push_back(f);
}

inline void read_partition(fault_plan& plan, std::string_view entry, std::string_view groups,
                           std::span<const std::string_view> keys, int size) {
  fault_partition p;
  for (std::string_view g : split(groups, ','))
    p.group.push_back(static_cast<int>(number(entry, g)));
  if (p.group.size() != static_cast<std::size_t>(size)) {
    refuse(entry, fmt::format("{} groups for a job of {} ranks", p.group.size(), size));
  }
  for (std::string_view kv : keys) {
    const auto [key, value] = key_value(entry, kv);
    if (key == "at") {
      p.from = duration(entry, value);
    } else if (key == "for") {
      p.length = duration(entry, value);
    } else {
      refuse(entry, fmt::format("unknown key '{}'", key));
    }
  }
  plan.partitions.push_back(std::move(p));
}

}  // namespace commx::detail::faults

namespace commx::transport {

inline fault_plan fault_plan::parse(std::string_view text, int size, bool network) {
  namespace f = commx::detail::faults;
  fault_plan plan;
  bool random = false;
  std::vector<std::string_view> entries;
  for (std::string_view entry : f::split(text, ';')) {
    if (!entry.empty()) entries.push_back(entry);
  }
  for (std::string_view entry : entries) {  // the seed first: `random` may come before it
    if (entry.starts_with("seed=")) plan.seed = f::number(entry, entry.substr(5));
  }
  for (std::string_view entry : entries) {
    const std::vector<std::string_view> parts = f::split(entry, ':');
    const std::string_view head = parts[0];
    const std::span<const std::string_view> keys(parts.data() + 1, parts.size() - 1);
    if (head.starts_with("seed=")) continue;
    if (head == "random") {
      random = true;
    } else if (head.starts_with("delay")) {
      const std::size_t eq = head.find('=');
      if (eq == std::string_view::npos || !keys.empty())
        f::refuse(entry, "a delay is delay=A-B or delay@R=A-B");
      fault_delay d;
      const std::string_view who = head.substr(5, eq - 5);
      if (who.starts_with('@')) {
        d.rank = f::rank_in(entry, who.substr(1), size);
      } else if (!who.empty()) {
        f::refuse(entry, "a delay is delay=A-B or delay@R=A-B");
      }
      f::range(entry, head.substr(eq + 1), d);
      plan.delays.push_back(d);
    } else if (head.starts_with("partition=")) {
      f::read_partition(plan, entry, head.substr(10), keys, size);
    } else {
      f::read_fault(plan, entry, head, keys, size, network);
    }
  }
  if (random) f::add_random(plan, size, network);
  return plan;
}

inline std::string fault_plan::text() const {
  namespace f = commx::detail::faults;
  std::string out = fmt::format("seed={}", seed);
  for (const fault_delay& d : delays) {
    out += d.rank < 0 ? ";delay=" : fmt::format(";delay@{}=", d.rank);
    out += f::duration_text(d.low) + "-" + f::duration_text(d.high);
  }
  constexpr std::string_view kinds[] = {"kill", "stall", "corrupt", "truncate", "stranger"};
  for (const fault& x : faults) {
    out += fmt::format(";{}@{}", kinds[static_cast<int>(x.what)], x.rank);
    if (x.peer >= 0) out += fmt::format(":peer={}", x.peer);
    switch (x.when.what) {
      case fault_trigger::measure::sends:
        out += fmt::format(":after={}", x.when.count);
        break;
      case fault_trigger::measure::collective_sends:
        out += fmt::format(":coll={}", x.when.count);
        break;
      case fault_trigger::measure::time:
        out += ":at=" + f::duration_text(x.when.after);
        break;
    }
    if (x.what == fault::kind::stall) out += ":for=" + f::duration_text(x.length);
  }
  for (const fault_partition& p : partitions) {
    out += fmt::format(";partition={}:at={}", fmt::join(p.group, ","), f::duration_text(p.from));
    if (p.length) out += ":for=" + f::duration_text(*p.length);
  }
  return out;
}

}  // namespace commx::transport
