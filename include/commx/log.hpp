// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Logging users can turn on: one line on stderr per event (a connection made or refused, a
/// peer lost, a retune, a relay route), prefixed with who speaks:
///
///     commx[rank 3 tcp] info: connected to rank 1 (10.0.0.2:40123)
///
/// | variable | default | meaning |
/// |---|---|---|
/// | COMMX_LOG | `warn` | `off`, `error`, `warn`, `info` or `debug`: the most detailed level printed. `warn` prints what commx always printed (failures, peers lost, peers closed for breaking the protocol, refused connections); `info` adds connections, streams, retunes, routes, timeouts (the exception's text) and shm's large messages going through the ring instead of cma; `debug` adds per-connection and per-stream details, each shm segment joined, and each agreement's decision and fallbacks (never a line per message). Read once per process; an unknown value is reported once and `warn` applies. |
///
/// Cost: a disabled call is one relaxed load and one predictable branch, and neither formats
/// nor evaluates its arguments (COMMX_LOG is a macro, as spdlog's SPDLOG_LOGGER_CALL and
/// glog's LOG are, for that reason). An enabled call formats the whole line first and hands
/// it to stderr in one write, so the lines of ranks and threads sharing a stderr do not
/// interleave.
///
/// Thread safety: any thread may log at any time.

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace commx::log {

/// Levels, least detailed first: a line prints when its level is at most the one in force.
enum class level : std::uint8_t { off, error, warn, info, debug };

/// Who speaks. Each endpoint keeps its own (not a process-wide one): inproc's ranks are threads
/// of one process, and one process may hold endpoints of several stacks.
struct context {
  std::string_view stack;  ///< "tcp", "wan", "shm", "relay", ...: a string literal
  int rank = -1;           ///< -1: not a rank (a tool), or not known yet
};

/// `name` as a level; nullopt when it is none of off, error, warn, info, debug.
[[nodiscard]] constexpr std::optional<level> parse_level(std::string_view name) noexcept {
  constexpr std::pair<std::string_view, level> names[] = {{"off", level::off},
                                                          {"error", level::error},
                                                          {"warn", level::warn},
                                                          {"info", level::info},
                                                          {"debug", level::debug}};
  for (const auto& [n, l] : names) {
    if (n == name) return l;
  }
  return std::nullopt;
}

/// The name COMMX_LOG uses for `l`.
[[nodiscard]] constexpr std::string_view name_of(level l) noexcept {
  constexpr std::string_view names[] = {"off", "error", "warn", "info", "debug"};
  return names[static_cast<std::size_t>(l)];
}

/// The level in force when COMMX_LOG is unset.
inline constexpr level default_level = level::warn;

}  // namespace commx::log

namespace commx::detail {

/// Above every level: until COMMX_LOG is read every level may be on, so the first check of
/// each process takes the slow path, which reads it.
inline constexpr std::uint8_t log_unread = 0xff;
inline std::atomic<std::uint8_t> log_threshold{log_unread};

/// The fast check the COMMX_LOG macro makes: false only when `l` is surely off.
[[nodiscard]] inline bool log_may(log::level l) noexcept {
  return static_cast<std::uint8_t>(l) <= log_threshold.load(std::memory_order_relaxed);
}

/// Writes one whole line to stderr (one fwrite on an unbuffered stream: one write(2)).
inline void log_write(std::string_view line) noexcept {
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

/// Reads COMMX_LOG (`value`; null: unset); an unknown value is reported here, once per
/// process, since the caller runs this once.
[[nodiscard]] inline log::level read_log_level(const char* value) noexcept {
  if (value == nullptr || *value == '\0') return log::default_level;
  if (const auto l = log::parse_level(value)) return *l;
  try {
    log_write(
        fmt::format("commx: COMMX_LOG='{}' is not a log level (off, error, warn, info, "
                    "debug); using '{}'\n",
                    value, log::name_of(log::default_level)));
  } catch (...) {  // out of memory: the complaint is lost, the default still applies
  }
  return log::default_level;
}

}  // namespace commx::detail

namespace commx::log {

/// The level in force: COMMX_LOG, read at the first call of the process.
[[nodiscard]] inline level threshold() noexcept {
  static const bool read = [] {
    const level l = detail::read_log_level(std::getenv("COMMX_LOG"));
    detail::log_threshold.store(static_cast<std::uint8_t>(l), std::memory_order_relaxed);
    return true;
  }();
  (void)read;
  return static_cast<level>(detail::log_threshold.load(std::memory_order_relaxed));
}

/// Puts `l` in force instead of COMMX_LOG, for a program's own option (commx-relay's
/// --verbose). Lines already being printed by other threads may still use the old level.
inline void set_threshold(level l) noexcept {
  (void)threshold();  // COMMX_LOG is read (and a bad value reported) once, even so
  detail::log_threshold.store(static_cast<std::uint8_t>(l), std::memory_order_relaxed);
}

/// Whether a line at `l` prints.
[[nodiscard]] inline bool enabled(level l) noexcept {
  return l != level::off && static_cast<std::uint8_t>(l) <= static_cast<std::uint8_t>(threshold());
}

/// `commx[rank 3 tcp] info: ` for `c` and `l`.
inline void append_prefix(fmt::memory_buffer& out, const context& c, level l) {
  auto it = std::back_inserter(out);
  if (c.rank >= 0) {
    it = fmt::format_to(it, "commx[rank {}{}{}]", c.rank, c.stack.empty() ? "" : " ", c.stack);
  } else if (!c.stack.empty()) {
    it = fmt::format_to(it, "commx[{}]", c.stack);
  } else {
    it = fmt::format_to(it, "commx");
  }
  fmt::format_to(it, " {}: ", name_of(l));
}

/// Prints one line at `l` for `c`, whether or not `l` is enabled (the callers check).
template <class... Args>
void print_line(level l, const context& c, fmt::format_string<Args...> format, Args&&... args) {
  fmt::memory_buffer line;
  append_prefix(line, c, l);
  fmt::format_to(std::back_inserter(line), format, std::forward<Args>(args)...);
  line.push_back('\n');
  detail::log_write({line.data(), line.size()});
}

/// Prints one line at `l` for `c` if `l` is enabled. Its arguments are evaluated even when it is
/// not: in code that runs often, use the COMMX_LOG macro.
template <class... Args>
void print(level l, const context& c, fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(l)) print_line(l, c, format, std::forward<Args>(args)...);
}

}  // namespace commx::log

/// Logs one line at level `lvl` (error, warn, info or debug) for the log::context `ctx`:
/// `COMMX_LOG(info, log_, "connected to rank {} ({})", peer, text_of(ep));`. When the level is
/// off it costs one predictable branch: neither the arguments nor the line are evaluated (the
/// first call of a process also reads COMMX_LOG, through log::enabled). It never throws: it is
/// called from destructors and on the way to raising another error, so a line that cannot be
/// built (out of memory) is dropped rather than replacing what the caller was doing.
#define COMMX_LOG(lvl, ctx, ...)                                                \
  do {                                                                          \
    if (::commx::detail::log_may(::commx::log::level::lvl) &&                   \
        ::commx::log::enabled(::commx::log::level::lvl)) [[unlikely]] {         \
      try {                                                                     \
        ::commx::log::print_line(::commx::log::level::lvl, (ctx), __VA_ARGS__); \
      } catch (...) {                                                           \
      }                                                                         \
    }                                                                           \
  } while (false)
