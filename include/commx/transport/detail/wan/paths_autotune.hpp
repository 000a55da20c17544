// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A wan path's autotune (paths.hpp, COMMX_WAN_AUTOTUNE): it measures the path's round trip and
/// its throughput as the streams double, and picks the streams and chunk. Out of line as Asio's
/// detail/impl files are, included by paths.hpp.

#include "commx/transport/detail/wan/paths.hpp"

namespace commx::detail::wan {

inline std::uint64_t paths::unacked(int peer) const {
  std::uint64_t total = 0;
  for (const auto& s : peers_[index(peer)].streams) {
    int queued = 0;
    if (::ioctl(s->conn.socket.native_handle(), SIOCOUTQ, &queued) == 0 && queued > 0)
      total += static_cast<std::uint64_t>(queued);
  }
  return total;
}

inline std::chrono::microseconds paths::path_rtt(int peer) const {
  std::uint32_t best = 0;
  for (const auto& s : peers_[index(peer)].streams) {
    tcp_info info{};
    socklen_t len = sizeof info;
    if (::getsockopt(s->conn.socket.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
        info.tcpi_rtt > 0 && (best == 0 || info.tcpi_rtt < best))
      best = info.tcpi_rtt;
  }
  return std::chrono::microseconds(best);
}

inline double paths::probe(int peer, clock::duration span) {
  path& p = peers_[index(peer)];
  const auto acknowledged = [&] {
    std::uint64_t written = 0;
    for (const auto& s : p.streams) written += s->conn.bytes_written;
    return written - std::min(written, unacked(peer));
  };
  p.probing = true;
  service(peer);
  const clock::time_point start = clock::now();
  const clock::time_point half = start + span / 2;
  const clock::time_point end = start + span;
  run_until([&] { return clock::now() >= half || !engine_.connected(peer); }, half);
  const std::uint64_t acked_half = acknowledged();
  const clock::time_point measured_from = clock::now();
  run_until([&] { return clock::now() >= end || !engine_.connected(peer); }, end);
  const std::uint64_t acked_end = acknowledged();
  p.probing = false;
  const double seconds = std::chrono::duration<double>(clock::now() - measured_from).count();
  return acked_end > acked_half && seconds > 0
             ? static_cast<double>(acked_end - acked_half) / seconds
             : 0.0;
}

inline void paths::autotune(int peer) {
  path& p = peers_[index(peer)];
  const auto rtt = std::max(path_rtt(peer), std::chrono::microseconds(100));
  // Each retune opens new streams in slow start, and several streams starting at once
  // overflow the bottleneck's queue: the half of the span that is measured begins 20 round
  // trips in, once that has settled (at 10, 8 streams measured 20% under their steady rate).
  const auto span = std::clamp<clock::duration>(rtt * 40, std::chrono::milliseconds(100),
                                                std::chrono::milliseconds(4000));
  path_config best = p.tuning;
  double best_rate = probe(peer, span);
  std::string measured = fmt::format("{}: {:.0f}", best.streams, best_rate * 8 / 1e6);
  int slow_steps = 0;
  for (int streams = p.tuning.streams * 2;
       streams <= static_cast<int>(max_streams) && engine_.connected(peer); streams *= 2) {
    path_config next = best;
    next.streams = streams;
    retune(peer, next);
    const double rate = probe(peer, span);
    measured += fmt::format(", {}: {:.0f}", streams, rate * 8 / 1e6);
    slow_steps = rate >= best_rate * 1.15 ? 0 : slow_steps + 1;
    if (rate > best_rate) {
      best = next;
      best_rate = rate;
    }
    if (slow_steps >= 2) break;
  }
  // A chunk about half of what one stream carries in a round trip (at least 64 KiB, at most
  // 4 MiB): large enough to cost few headers, small enough to spread a message evenly.
  const double per_stream_bdp =
      best_rate * std::chrono::duration<double>(rtt).count() / best.streams;
  std::size_t chunk = std::size_t{64} << 10;
  while (chunk < (std::size_t{4} << 20) && static_cast<double>(chunk) * 2 < per_stream_bdp)
    chunk *= 2;
  best.chunk = chunk;
  p.autotuned = fmt::format(
      "path to rank {}: rtt {:.2f} ms, Mbit/s by streams {} -> streams {}, chunk {} KiB, "
      "buffers {}",
      peer, std::chrono::duration<double, std::milli>(rtt).count(), measured, best.streams,
      chunk >> 10,
      best.rcvbuf > 0 ? fmt::format("{} KiB (as configured)", best.rcvbuf >> 10)
                      : std::string("kernel-autotuned"));
  // What commx printed before it had levels, so `warn`: it shows whenever autotune runs.
  COMMX_LOG(warn, engine_.log_context(), "autotune: {}", p.autotuned);
  if (!(best == p.tuning) && engine_.connected(peer)) retune(peer, best);
}

}  // namespace commx::detail::wan
