// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A wan path's tuning on the wire and on the sockets: the `key=value` text an opening frame
/// carries, the chunk size a message is cut into, and the socket options a stream is given.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include "commx/error.hpp"
#include "commx/transport/detail/wan/config.hpp"

namespace commx::detail::wan {

/// The tuning as `key=value` text, as an opening frame carries it.
inline std::string tuning_text(const path_config& p) {
  std::string text = fmt::format("streams={} chunk={} sndbuf={} rcvbuf={} pacing={} unsent={}",
                                 p.streams, p.chunk, p.sndbuf, p.rcvbuf, p.pacing, p.unsent);
  if (!p.cc.empty()) text += fmt::format(" cc={}", p.cc);
  return text;
}

/// The chunk size a message of `size` bytes is cut into, in whole 4 KiB pages. A message goes in
/// about 16 chunks a stream, so that its end waits on a sixteenth of a stream's share at most
/// (the streams' rates differ by more than that: with 64 streams and a chunk per stream, the
/// slowest stream's last chunk cost 10-20% of the throughput), but at most the path's chunk,
/// and at least 64 KiB unless that would leave streams idle. One pinned to a stream
/// (wan_parts.hpp) goes in the path's chunks.
[[nodiscard]] inline std::uint64_t chunk_for(std::uint64_t size, const path_config& p,
                                             bool pinned) {
  const auto pages = [](std::uint64_t bytes) {
    return std::max<std::uint64_t>((bytes + min_chunk - 1) / min_chunk * min_chunk, min_chunk);
  };
  if (pinned) return std::min<std::uint64_t>(pages(size), p.chunk);
  constexpr std::uint64_t pieces_per_stream = 16;
  const auto streams = static_cast<std::uint64_t>(std::max(p.streams, 1));
  const std::uint64_t per_stream = pages((size + streams - 1) / streams);
  const std::uint64_t fine =
      pages((size + streams * pieces_per_stream - 1) / (streams * pieces_per_stream));
  const std::uint64_t floor = std::min<std::uint64_t>(per_stream, std::uint64_t{64} << 10);
  return std::min<std::uint64_t>(std::max(fine, floor), p.chunk);
}

inline std::optional<path_config> parse_tuning(std::string_view text) {
  path_config p;
  std::istringstream words{std::string(text)};
  std::string kv;
  try {
    while (words >> kv) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) return std::nullopt;
      apply(p, kv.substr(0, eq), kv.substr(eq + 1), "a stream opening");
    }
  } catch (const error&) {
    return std::nullopt;
  }
  return p;
}

/// Bounds the bytes a stream socket holds unsent (unsent_limit); false if the kernel refused.
inline bool set_unsent_bound(int fd, std::size_t bytes) {
  const int v = static_cast<int>(std::min<std::size_t>(bytes, 1U << 30));
  return ::setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof v) == 0;
}

/// Sets a stream socket's buffers, congestion control, pacing and unsent bound; the reason it
/// could not, or empty.
inline std::string tune_socket(int fd, const path_config& p) {
  std::string failed;
  const auto set_int = [&](int level, int name, std::size_t value, const char* what) {
    const int v = static_cast<int>(std::min<std::size_t>(value, 1U << 30));
    if (::setsockopt(fd, level, name, &v, sizeof v) != 0) failed += fmt::format(" {}", what);
  };
  if (p.sndbuf > 0) set_int(SOL_SOCKET, SO_SNDBUF, p.sndbuf, "SO_SNDBUF");
  if (p.rcvbuf > 0) set_int(SOL_SOCKET, SO_RCVBUF, p.rcvbuf, "SO_RCVBUF");
  if (!p.cc.empty() && ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, p.cc.data(),
                                    static_cast<socklen_t>(p.cc.size())) != 0) {
    failed += fmt::format(
        " TCP_CONGESTION={} (see /proc/sys/net/ipv4/tcp_available_congestion_control)", p.cc);
  }
  if (p.pacing > 0) {
    const std::uint64_t rate = p.pacing;
    if (::setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate) != 0)
      failed += " SO_MAX_PACING_RATE";
  }
  if (!set_unsent_bound(fd, unsent_limit(p))) failed += " TCP_NOTSENT_LOWAT";
  return failed;
}

}  // namespace commx::detail::wan
