// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `commx::deadline`: when a blocking call gives up. Every blocking call takes one as its last
/// argument; the default means "the communicator's timeout", a duration means "this long from
/// the call", a time point means exactly then. It becomes one absolute time once per call, at the
/// latest when the call first has to wait, so a collective made of many messages has one
/// deadline, not one per message.

#include <atomic>
#include <chrono>
#include <type_traits>

namespace commx {

namespace detail {
/// What `commx::clock::now()` reads instead of the steady clock, when set: a simulated stack
/// (transport/simgrid.hpp) sets it to the simulation's clock for the process's whole life, so
/// deadlines, timeouts and a program's own timings run in simulated time.
using time_source = std::chrono::steady_clock::time_point (*)() noexcept;
inline std::atomic<time_source> clock_source{nullptr};
}  // namespace detail

/// The clock every deadline and timeout is measured on: the steady clock, or in a simulated
/// job the simulation's (detail::clock_source). Its time points are the steady clock's, so a
/// program that never simulates sees no difference but one predictable branch.
struct clock : std::chrono::steady_clock {
  /// Now: the steady clock's, or the simulation's in a process that simulates.
  static time_point now() noexcept {
    if (const detail::time_source source = detail::clock_source.load(std::memory_order_relaxed))
        [[unlikely]] {
      return source();
    }
    return std::chrono::steady_clock::now();
  }
};

/// `timeout` as a clock duration, saturating instead of overflowing: a timeout of years means
/// "wait as long as it takes", not a wrapped-around negative number.
template <class Rep, class Period>
constexpr clock::duration clamped(std::chrono::duration<Rep, Period> timeout) {
  using wide = std::chrono::duration<long double, std::nano>;
  if (wide(timeout) >= wide(clock::duration::max())) return clock::duration::max();
  if (wide(timeout) <= wide::zero()) return clock::duration::zero();
  return std::chrono::duration_cast<clock::duration>(timeout);
}

/// When a blocking call gives up: a time point, a duration from now, or the default (the
/// communicator's timeout, resolved when the call has to wait).
///
/// Sixteen trivially copyable bytes, so that it travels in two registers: every blocking call
/// takes one by value, and one built in memory byte by byte and read back whole stalls the
/// call on its store buffer (perf: a third of an 8-byte broadcast's time on its root).
class deadline {
 public:
  /// Use the communicator's default timeout.
  constexpr deadline() = default;

  /// `timeout` from now.
  template <class Rep, class Period>
  constexpr deadline(std::chrono::duration<Rep, Period> timeout)  // NOLINT: implicit on purpose
      : ticks_(clamped(timeout).count()), meaning_(meaning::relative) {}

  /// At `when`.
  constexpr deadline(clock::time_point when)  // NOLINT: implicit on purpose
      : ticks_(when.time_since_epoch().count()), meaning_(meaning::absolute) {}

  /// The absolute time this deadline means for a call starting now.
  [[nodiscard]] clock::time_point resolve(clock::duration default_timeout) const {
    if (meaning_ == meaning::absolute) return clock::time_point(clock::duration(ticks_));
    return saturating_after(
        clock::now(), meaning_ == meaning::relative ? clock::duration(ticks_) : default_timeout);
  }

  /// Whether this is the default deadline (the communicator's timeout).
  [[nodiscard]] constexpr bool is_default() const { return meaning_ == meaning::by_default; }

 private:
  // "Wait forever" is spelled as a huge timeout; adding it to now() must not overflow.
  static clock::time_point saturating_after(clock::time_point now, clock::duration timeout) {
    if (timeout > clock::time_point::max() - now) return clock::time_point::max();
    return now + timeout;
  }

  enum class meaning : unsigned char { by_default, relative, absolute };
  clock::rep ticks_ = 0;  // a duration or a time since the clock's epoch, as meaning_ says
  meaning meaning_ = meaning::by_default;
};

static_assert(std::is_trivially_copyable_v<deadline> && sizeof(deadline) <= 16);

}  // namespace commx
