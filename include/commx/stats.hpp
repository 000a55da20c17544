// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Stats policies: what a communicator counts. `stats::none` costs nothing (every hook is an
/// empty inline function and the communicator never reads a clock for it); `stats::counting`
/// keeps, per rank and per operation kind, calls, messages and bytes each way, and the time
/// spent sending, waiting and in collectives.
///
/// A collective's own messages are counted under the collective's kind, so a test can assert
/// e.g. that a flat bcast's root sent p-1 messages. Send time is time spent posting or
/// completing sends; wait time is time blocked for receives and completions (seed 000's send
/// and receive columns); collective time is the whole of each collective call.
///
/// Thread safety: a stats object belongs to one rank and is used by that rank's thread.

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace commx::stats {

/// The kinds of operation a stats policy tells apart.
enum class op : std::uint8_t {
  send,
  recv,
  isend,
  irecv,
  sendrecv,
  probe,
  barrier,
  bcast,
  reduce,
  allreduce,
  gather,
  gatherv,
  scatter,
  scatterv,
  allgather,
  allgatherv,
  alltoall,
  alltoallv,
  reduce_scatter,
  scan,
  exscan,
  split,
};
/// How many kinds of operation there are.
inline constexpr std::size_t op_count = static_cast<std::size_t>(op::split) + 1;

/// The operation's name, as reports print it ("allreduce").
[[nodiscard]] constexpr std::string_view name(op kind) {
  constexpr std::array<std::string_view, op_count> names{
      "send",           "recv",     "isend",     "irecv",      "sendrecv", "probe",
      "barrier",        "bcast",    "reduce",    "allreduce",  "gather",   "gatherv",
      "scatter",        "scatterv", "allgather", "allgatherv", "alltoall", "alltoallv",
      "reduce_scatter", "scan",     "exscan",    "split"};
  return names[static_cast<std::size_t>(kind)];
}

/// Whether `kind` is a collective (barrier through split).
[[nodiscard]] constexpr bool is_collective(op kind) {
  return kind >= op::barrier && kind <= op::split;
}

/// What a stats policy must provide. `enabled == false` promises every hook is a no-op, so the
/// communicator skips clock reads entirely.
template <class S>
concept policy = requires(S& s, op kind, std::size_t bytes, double seconds) {
  { S::enabled } -> std::convertible_to<bool>;
  s.on_call(kind);
  s.on_sent(kind, bytes);
  s.on_received(kind, bytes);
  s.add_send_time(kind, seconds);
  s.add_wait_time(kind, seconds);
  s.add_collective_time(kind, seconds);
};

/// Counts nothing and costs nothing.
struct none {
  /// Counts nothing: the communicator calls no hook, so it costs nothing.
  static constexpr bool enabled = false;
  /// One call of `kind`.
  constexpr void on_call(op /*kind*/) noexcept {}
  /// One message of `bytes` sent for `kind`.
  constexpr void on_sent(op /*kind*/, std::size_t /*bytes*/) noexcept {}
  /// One message of `bytes` received for `kind`.
  constexpr void on_received(op /*kind*/, std::size_t /*bytes*/) noexcept {}
  /// Seconds spent sending for `kind`.
  constexpr void add_send_time(op /*kind*/, double /*seconds*/) noexcept {}
  /// Seconds spent waiting for `kind`.
  constexpr void add_wait_time(op /*kind*/, double /*seconds*/) noexcept {}
  /// Seconds a collective of `kind` took.
  constexpr void add_collective_time(op /*kind*/, double /*seconds*/) noexcept {}
};

/// One operation kind's counters.
struct counters {
  std::uint64_t calls = 0;              ///< calls made
  std::uint64_t messages_sent = 0;      ///< messages sent
  std::uint64_t bytes_sent = 0;         ///< bytes sent
  std::uint64_t messages_received = 0;  ///< messages received
  std::uint64_t bytes_received = 0;     ///< bytes received
  double send_seconds = 0;              ///< seconds spent in sends
  double wait_seconds = 0;              ///< seconds spent waiting
  double collective_seconds = 0;        ///< seconds spent in collectives

  /// Adds `other`'s counts and times to these.
  counters& operator+=(const counters& other) {
    calls += other.calls;
    messages_sent += other.messages_sent;
    bytes_sent += other.bytes_sent;
    messages_received += other.messages_received;
    bytes_received += other.bytes_received;
    send_seconds += other.send_seconds;
    wait_seconds += other.wait_seconds;
    collective_seconds += other.collective_seconds;
    return *this;
  }
};

/// Counts calls, messages, bytes and time per operation kind.
class counting {
 public:
  /// Counts: the communicator calls every hook.
  static constexpr bool enabled = true;

  /// One call of `kind`.
  void on_call(op kind) noexcept { at(kind).calls += 1; }
  /// One message of `bytes` sent for `kind`.
  void on_sent(op kind, std::size_t bytes) noexcept {
    at(kind).messages_sent += 1;
    at(kind).bytes_sent += bytes;
  }
  /// One message of `bytes` received for `kind`.
  void on_received(op kind, std::size_t bytes) noexcept {
    at(kind).messages_received += 1;
    at(kind).bytes_received += bytes;
  }
  /// Seconds spent sending for `kind`.
  void add_send_time(op kind, double seconds) noexcept { at(kind).send_seconds += seconds; }
  /// Seconds spent waiting for `kind`.
  void add_wait_time(op kind, double seconds) noexcept { at(kind).wait_seconds += seconds; }
  /// Seconds a collective of `kind` took.
  void add_collective_time(op kind, double seconds) noexcept {
    at(kind).collective_seconds += seconds;
  }

  /// The counters of `kind`.
  [[nodiscard]] const counters& of(op kind) const noexcept {
    return per_op_[static_cast<std::size_t>(kind)];
  }

  /// The sum over every operation kind.
  [[nodiscard]] counters total() const noexcept {
    counters sum;
    for (const auto& c : per_op_) sum += c;
    return sum;
  }

  /// Zeroes every counter.
  void reset() noexcept { per_op_ = {}; }

  /// A table of the non-zero rows, one per operation kind, for people to read.
  [[nodiscard]] std::string report() const {
    std::string text = fmt::format(
        "{:<14} {:>8} {:>10} {:>12} {:>10} {:>12} {:>10} {:>10} {:>10}\n", "op", "calls",
        "msgs out", "bytes out", "msgs in", "bytes in", "send s", "wait s", "coll s");
    for (std::size_t i = 0; i < op_count; ++i) {
      const counters& c = per_op_[i];
      if (c.calls == 0 && c.messages_sent == 0 && c.messages_received == 0) continue;
      text += fmt::format(
          "{:<14} {:>8} {:>10} {:>12} {:>10} {:>12} {:>10.6f} {:>10.6f} {:>10.6f}\n",
          name(static_cast<op>(i)), c.calls, c.messages_sent, c.bytes_sent, c.messages_received,
          c.bytes_received, c.send_seconds, c.wait_seconds, c.collective_seconds);
    }
    return text;
  }

 private:
  counters& at(op kind) noexcept { return per_op_[static_cast<std::size_t>(kind)]; }

  std::array<counters, op_count> per_op_{};
};

static_assert(policy<none>);
static_assert(policy<counting>);

}  // namespace commx::stats
