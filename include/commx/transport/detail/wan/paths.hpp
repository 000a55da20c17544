// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The wan transport's data streams. A path to a peer is the tcp engine's control connection
/// (envelopes, small messages, credits, bye: tcp's protocol, unchanged) plus N data streams,
/// extra TCP connections authenticated by the same handshake (purpose::stream). When a large
/// message's receiver answers clear-to-send, its payload leaves as chunks (wire.hpp) spread
/// over the streams (chunk_for): each stream keeps one chunk queued and takes the next once the
/// kernel took it, holding few of its bytes unsent (config.hpp's unsent_limit), so a fast
/// stream carries more and a message's last chunks go to the streams ahead. The receiver reads
/// each chunk straight into the user's buffer at its offset and completes the receive when
/// every chunk is in; a duplicate, an overlap or a chunk for no message is a protocol
/// violation.
///
/// Closing a path (to retune it, or leaving): each side puts a `close` frame after what is
/// queued on each stream and then shuts its sending half; a stream is gone once both closes
/// crossed and the other end shut. Chunks of a message not yet handed to a stream wait, and go
/// on the streams of the path's next epoch: nothing is lost or sent twice. A stream that ends
/// without `close` broke (a killed peer, a reset): the peer is lost, and everything waiting on
/// it completes with errc::peer_lost, naming the stream on stderr.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <asio.hpp>
#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/tcp/connection.hpp"
#include "commx/transport/detail/tcp/engine.hpp"
#include "commx/transport/detail/tcp/session.hpp"
#include "commx/transport/detail/wan/config.hpp"
#include "commx/transport/detail/wan/wire.hpp"

namespace commx::detail::wan {

using tcp::operation;

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

/// One data stream of a path.
struct stream {
  stream(asio::ip::tcp::socket s, int peer_rank) : conn(std::move(s)), peer(peer_rank) {
    conn.staging = {};  // reads are ours, straight into users' buffers
  }

  tcp::connection conn;  ///< its socket and write queue
  int peer;
  int index = -1;  ///< in the path; -1 until the opening frame (accepting side)
  std::uint64_t epoch = 0;
  bool active = false;        ///< carries new chunks
  bool close_queued = false;  ///< our close frame is queued (or out)
  bool shut = false;          ///< our sending half is shut down
  bool close_received = false;
  std::uint64_t carried = 0;  ///< chunk payload bytes handed to this stream
  // the unsent bound (unsent_limit): the larger one while the stream keeps losing packets
  std::uint32_t retransmitted = 0;  ///< the kernel's count when last looked at
  clock::time_point last_loss{};    ///< when that count last grew
  bool losing = false;              ///< the bound in force is the losing one
  // reading
  stream_header_bytes head{};
  std::size_t head_have = 0;
  bool in_payload = false;
  stream_header current{};
  std::uint64_t remaining = 0;
  std::string tuning;  ///< an opening frame's text, as it arrives
};

/// A large message whose data this rank is sending as chunks.
struct outgoing {
  std::shared_ptr<operation> op;  ///< null once completed early (cancelled half-way)
  std::uint64_t id;
  std::span<const std::byte> payload;  ///< the user's buffer, or `owned`
  std::vector<std::byte> owned;
  std::uint64_t chunk;
  std::uint64_t next = 0;     ///< offset of the next chunk to hand to a stream
  std::size_t in_flight = 0;  ///< chunks queued on streams, not yet written
  int stream = -1;            ///< the only stream (mod the path's) that carries it; -1 any
};

/// A large message whose chunks this rank is receiving.
struct assembly {
  std::uint64_t chunk;
  std::vector<bool> got;
  std::uint64_t received = 0;
};

/// What a path is running on now, for its owner to query.
struct path_state {
  path_config tuning;
  std::uint64_t epoch = 0;
  int open_streams = 0;
  std::vector<std::uint64_t> carried;  ///< chunk bytes handed to each stream of this epoch
  bool reopening = false;
  std::string autotuned;  ///< what autotune measured and picked, as it printed it; empty: not run
};

class paths {
 public:
  paths(tcp::engine& e, config cfg) : engine_(e), cfg_(std::move(cfg)) {
    peers_.resize(static_cast<std::size_t>(engine_.size()));
    tcp::extension hooks;
    hooks.carry_data = [this](int peer, const std::shared_ptr<operation>& op) {
      return carry(peer, op);
    };
    hooks.adopt_stream = [this](int peer, asio::ip::tcp::socket s) { adopt(peer, std::move(s)); };
    hooks.peer_gone = [this](int peer, std::error_code why) { drop(peer, why); };
    engine_.extend(std::move(hooks));
  }

  paths(const paths&) = delete;
  paths& operator=(const paths&) = delete;

  ~paths() {
    leave();
    engine_.extend({});
    for (auto& p : peers_) {
      for (auto& s : p.streams) s->conn.close();
    }
  }

  /// Opens every path's streams (this rank opens those to lower ranks and accepts the others)
  /// and waits until all are up.
  /// @throws commx::error errc::bootstrap_failed when they are not up within the timeout.
  void open_all() {
    if (engine_.size() == 1) return;
    const clock::time_point until = clock::now() + cfg_.base.timeout;
    for (int peer = 0; peer < engine_.rank(); ++peer) {
      path& p = peers_[index(peer)];
      p.tuning = cfg_.path_to(engine_.rank(), peer);
      connect_streams(peer, until);
    }
    // A peer that already left (a short job) is no path to wait for.
    const auto up = [&](int peer) { return ready(peer) || !engine_.connected(peer); };
    const auto all_up = [&] {
      for (int peer = 0; peer < engine_.size(); ++peer) {
        if (peer != engine_.rank() && !up(peer)) return false;
      }
      return true;
    };
    if (!run_until(all_up, until)) {
      std::string missing;
      for (int peer = 0; peer < engine_.size(); ++peer) {
        if (peer != engine_.rank() && !up(peer)) missing += fmt::format(" {}", peer);
      }
      throw error(
          errc::bootstrap_failed,
          fmt::format("wan: rank {}: the data streams to rank(s){} did not open within {} s",
                      engine_.rank(), missing,
                      std::chrono::duration<double>(cfg_.base.timeout).count()));
    }
    if (cfg_.autotune) {
      for (int peer = 0; peer < engine_.rank(); ++peer) {
        if (engine_.connected(peer)) autotune(peer);
      }
    }
  }

  /// Closes the path to `peer` and reopens it with `tuning` (a new epoch), without losing or
  /// repeating a byte of the messages in flight. Returns once the new streams are up. Only the
  /// higher rank of a pair ever opens its streams; the lower rank's retune asks it to (a
  /// `retune` frame), so both ranks may retune one path at the same moment: the opener applies
  /// the requests in the order it reads them, and each call returns once its own has been
  /// applied (or applied and superseded by a later one).
  /// @throws commx::error errc::peer_lost when the peer goes meanwhile, errc::timeout when the
  ///   path is not back within the timeout, errc::invalid_argument for a bad peer.
  void retune(int peer, const path_config& tuning) {
    if (peer < 0 || peer >= engine_.size() || peer == engine_.rank()) {
      throw error(errc::invalid_argument,
                  fmt::format("wan: rank {}: retune: {} is no peer rank", engine_.rank(), peer));
    }
    path& p = peers_[index(peer)];
    const clock::time_point until = clock::now() + cfg_.base.timeout;
    // A retune the peer began finishes first.
    run_until([&] { return ready(peer) || !engine_.connected(peer); }, until);
    check_connected(peer, "retune");
    const std::uint64_t before = p.epoch;
    if (opens(peer)) {
      reopen(peer, tuning);
    } else {
      request_retune(peer, tuning);
    }
    // Asked of the opener, this request may come after one the opener was applying: that
    // epoch (before + 1) has the other tuning, and this one's follows.
    const auto applied = [&] {
      return !engine_.connected(peer) ||
             (ready(peer) && (p.epoch >= before + 2 || (p.epoch > before && p.tuning == tuning)));
    };
    if (!run_until(applied, until)) {
      throw error(errc::timeout, fmt::format("wan: rank {}: retune of the path to rank {}: not "
                                             "reopened within the timeout",
                                             engine_.rank(), peer));
    }
    check_connected(peer, "retune");
  }

  [[nodiscard]] path_state state(int peer) const {
    const path& p = peers_.at(index(peer));
    int open = 0;
    std::vector<std::uint64_t> carried(static_cast<std::size_t>(std::max(p.expected, 0)));
    for (const auto& s : p.streams) {
      open += s->active ? 1 : 0;
      if (s->active && s->index >= 0 && s->index < p.expected) {
        carried[static_cast<std::size_t>(s->index)] = s->carried;
      }
    }
    return {p.tuning, p.epoch, open, std::move(carried), p.reopening, p.autotuned};
  }

  /// The socket of data stream `k` to `peer` (for tests that break one), or -1.
  [[nodiscard]] int native_stream(int peer, int k) const {
    for (const auto& s : peers_.at(index(peer)).streams) {
      if (s->active && s->index == k) return s->conn.socket.native_handle();
    }
    return -1;
  }

  /// Withdraws a send whose chunks are on their way: the rest leaves from a copy, and the send
  /// counts as complete (as tcp does with a half-written one). False if `op` is not ours.
  bool detach(const std::shared_ptr<operation>& op) {
    if (!op || op->done || op->what != operation::kind::send || op->peer == engine_.rank())
      return false;
    path& p = peers_[index(op->peer)];
    for (outgoing& o : p.sending) {
      if (o.op != op) continue;
      o.owned.assign(o.payload.begin(), o.payload.end());
      o.payload = o.owned;
      for (auto& s : p.streams) {
        for (auto& f : s->conn.out) {
          if (f.cookie != o.id) continue;
          const std::uint64_t offset = tcp::wire::get(&f.header[24], 8);
          f.payload = std::span<const std::byte>(o.owned).subspan(offset, f.payload.size());
        }
      }
      engine_.complete(*op, {op->peer, op->tag, op->payload.size(), {}});
      o.op = nullptr;
      return true;
    }
    return false;
  }

 private:
  struct path {
    path_config tuning;
    std::uint64_t epoch = 0;
    int expected = 0;  ///< streams the current epoch has (the opener says)
    std::vector<std::shared_ptr<stream>> streams;
    std::deque<outgoing> sending;
    std::unordered_map<std::uint64_t, assembly> arriving;
    bool reopening = false;  ///< this rank closed the path and reopens it when the old is gone
    std::optional<path_config> requested;  ///< the peer's retune, for when the path is ready
    std::size_t turn = 0;                  ///< the stream the next round of chunks starts at
    bool probing = false;  ///< autotune: keep every stream's queue full of probe frames
    std::deque<std::weak_ptr<stream>> to_connect;  ///< streams of this epoch not yet connecting
    int connecting = 0;                            ///< handshakes under way
    clock::time_point connect_until{};
    std::string autotuned;
  };

  /// Chunks queued per stream. One: a chunk is dealt to a stream only once the stream's socket
  /// has taken the one before (and holds at most unsent_limit of it unsent), so a fast stream
  /// takes more and the last chunks of a message go to the streams that are ahead.
  static constexpr std::size_t queue_depth = 1;

  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }

  template <class Done>
  bool run_until(Done&& done, clock::time_point until) {
    while (!done()) {
      if (clock::now() >= until) return false;
      engine_.io().run_one_until(until);
    }
    return true;
  }

  void check_connected(int peer, const char* what) const {
    if (!engine_.connected(peer)) {
      throw error(errc::peer_lost, fmt::format("wan: rank {}: {} of the path to rank {}: the peer "
                                               "is gone",
                                               engine_.rank(), what, peer));
    }
  }

  /// The path's current epoch has all its streams, and no old one is still closing.
  [[nodiscard]] bool ready(int peer) const {
    const path& p = peers_[index(peer)];
    if (p.reopening || p.expected == 0) return false;
    int active = 0;
    for (const auto& s : p.streams) {
      if (!s->active) return false;
      ++active;
    }
    return active == p.expected;
  }

  // --- autotune ---------------------------------------------------------------------------

  /// Bytes of the path's streams the peer has acknowledged so far (written minus unacked).
  [[nodiscard]] std::uint64_t unacked(int peer) const {
    std::uint64_t total = 0;
    for (const auto& s : peers_[index(peer)].streams) {
      int queued = 0;
      if (::ioctl(s->conn.socket.native_handle(), SIOCOUTQ, &queued) == 0 && queued > 0)
        total += static_cast<std::uint64_t>(queued);
    }
    return total;
  }

  /// The smallest smoothed round-trip time of the path's streams, as the kernel measured it.
  [[nodiscard]] std::chrono::microseconds path_rtt(int peer) const {
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

  /// Fills the path's streams with probe frames for `span` and returns the rate the peer
  /// acknowledged over its second half, bytes per second (the first half is slow start):
  /// bytes the sockets took less what they still hold, so frames half written count exactly
  /// (counting whole probe frames, 256 KiB each, was off by up to 25% with 256 streams).
  double probe(int peer, clock::duration span) {
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

  /// Measures the path (round-trip time, throughput as streams double), picks its stream
  /// count and chunk size, says so on stderr, and retunes the path to them. MPWide's lesson:
  /// streams help while the window, not the link, limits each one; past that they add only
  /// congestion. So the doubling goes on while the rate still grows by 15% (and one step
  /// further, since one probe can be unlucky: with the host's 4 MiB buffers on a 1 Gbit/s,
  /// 50 ms link, 4 streams measured less than 2, and 8 more than both), and the count that
  /// measured best is taken. Where a site caps socket buffers (64 KiB at MPWide's), filling a
  /// long fat link takes more than 64 streams, so the doubling may go on to the most a path
  /// has.
  void autotune(int peer) {
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
    fmt::print(stderr, "commx wan: rank {}: autotune: {}\n", engine_.rank(), p.autotuned);
    std::fflush(stderr);
    if (!(best == p.tuning) && engine_.connected(peer)) retune(peer, best);
  }

  // --- opening ----------------------------------------------------------------------------

  void connect_streams(int peer, clock::time_point until) {
    path& p = peers_[index(peer)];
    ++p.epoch;
    p.expected = p.tuning.streams;
    // Through this site's relay when the peer is at another site: the tuning then applies to
    // the hop to the relay (the relay's own sockets are the kernel's to tune).
    const asio::ip::tcp::endpoint where = engine_.first_hop(peer);
    for (int k = 0; k < p.tuning.streams; ++k) {
      asio::ip::tcp::socket socket(engine_.io());
      std::error_code ec;
      socket.open(where.protocol(), ec);
      // Buffers before connecting, so the window scale fits them.
      if (!ec) {
        const std::string failed = tune_socket(socket.native_handle(), p.tuning);
        if (!failed.empty()) {
          throw error(errc::invalid_argument,
                      fmt::format("wan: rank {}: path to rank {}: cannot set{}", engine_.rank(),
                                  peer, failed));
        }
      }
      auto s = std::make_shared<stream>(std::move(socket), peer);
      s->index = k;
      s->epoch = p.epoch;
      p.streams.push_back(s);
      p.to_connect.push_back(s);
    }
    p.connect_until = until;
    connect_more(peer);
  }

  /// Starts connecting the path's next streams, a few at a time: the peer's engine refuses
  /// handshakes beyond a bound (tcp's max_pending_handshakes), and 64 at once would hit it.
  void connect_more(int peer) {
    path& p = peers_[index(peer)];
    constexpr int at_once = 8;
    while (p.connecting < at_once && !p.to_connect.empty()) {
      auto s = p.to_connect.front().lock();
      p.to_connect.pop_front();
      if (!s) continue;
      ++p.connecting;
      const clock::time_point until = p.connect_until;
      std::weak_ptr<stream> weak = s;
      engine_.dial_rank(
          peer, until,
          [this, weak, until](const std::string& failure, asio::ip::tcp::socket socket, bool) {
            auto st = weak.lock();
            if (!st) return;
            if (!failure.empty()) {
              --peers_[index(st->peer)].connecting;
              return broken(*st, fmt::format("cannot connect: {}", failure));
            }
            st->conn.socket = std::move(socket);
            authenticate(st, until);
          },
          std::move(s->conn.socket));
    }
  }

  void authenticate(const std::shared_ptr<stream>& s, clock::time_point until) {
    const int peer = s->peer;
    auto session = std::make_shared<tcp::client_session>(
        std::move(s->conn.socket), cfg_.base.token,
        tcp::handshake::hello{tcp::handshake::purpose::stream, engine_.rank(), engine_.size(),
                              tcp::handshake::fresh_nonce()},
        peer, until,
        [this, weak = std::weak_ptr<stream>(s)](tcp::client_session& cs, bool ok,
                                                const std::string& why, bool) {
          auto st = weak.lock();
          if (!st) return;
          --peers_[index(st->peer)].connecting;
          st->conn.socket = std::move(cs.socket);
          if (!ok) return broken(*st, fmt::format("handshake failed: {}", why));
          connect_more(st->peer);
          st->conn.socket.non_blocking(true);
          st->conn.socket.set_option(asio::ip::tcp::no_delay(true));
          st->conn.detect_dead_host(std::chrono::duration_cast<std::chrono::seconds>(
              std::min<clock::duration>(cfg_.base.timeout, std::chrono::hours(9))));
          path& p = peers_[index(st->peer)];
          const std::string text = tuning_text(p.tuning);
          out_control(
              *st,
              {stream_kind::open, engine_.rank(), static_cast<std::uint32_t>(p.tuning.streams),
               st->epoch, static_cast<std::uint64_t>(st->index), text.size()},
              text);
          st->active = true;
          on_readable(st);
          service(st->peer);
          apply_requested(st->peer);
        });
    session->start();
  }

  /// An authenticated stream from `peer`: it says which it is in its opening frame.
  void adopt(int peer, asio::ip::tcp::socket socket) {
    auto s = std::make_shared<stream>(std::move(socket), peer);
    s->conn.detect_dead_host(std::chrono::duration_cast<std::chrono::seconds>(
        std::min<clock::duration>(cfg_.base.timeout, std::chrono::hours(9))));
    peers_[index(peer)].streams.push_back(s);
    on_readable(s);
  }

  void on_open(stream& s, const stream_header& h) {
    path& p = peers_[index(s.peer)];
    if (opens(s.peer)) return violation(s, "a stream opened by the rank that does not open paths");
    const auto tuning = parse_tuning(s.tuning);
    if (!tuning || tuning->streams != static_cast<int>(h.chunk)) {
      return violation(s, "a stream opening with malformed tuning");
    }
    if (h.id < p.epoch || (h.id == p.epoch && p.expected != static_cast<int>(h.chunk))) {
      return violation(s, "a stream opening of an old epoch");
    }
    if (h.id > p.epoch) {
      p.epoch = h.id;
      p.expected = static_cast<int>(h.chunk);
    }
    for (const auto& other : p.streams) {
      if (other.get() != &s && other->active && other->index == static_cast<int>(h.offset))
        return violation(s, "two streams with one index");
    }
    p.tuning = *tuning;
    tune_socket(s.conn.socket.native_handle(), p.tuning);  // best effort on this side
    s.index = static_cast<int>(h.offset);
    s.epoch = h.id;
    s.active = true;
    service(s.peer);
  }

  // --- sending ----------------------------------------------------------------------------

  /// The engine's hook: a clear-to-send came for `op`; its data goes as chunks.
  bool carry(int peer, const std::shared_ptr<operation>& op) {
    path& p = peers_[index(peer)];
    if (op->payload.empty()) return false;  // nothing to chunk: tcp's empty data frame
    const std::uint64_t chunk = chunk_for(op->payload.size(), p.tuning, op->stream >= 0);
    p.sending.push_back({op, op->cookie, op->payload, {}, chunk, 0, 0, op->stream});
    service(peer);
    return true;
  }

  void out_control(stream& s, const stream_header& h, std::string_view text = {}) {
    tcp::out_frame& f = s.conn.out.emplace_back();
    const auto bytes = encode(h);
    std::copy(bytes.begin(), bytes.end(), f.header.begin());
    f.owned.assign(reinterpret_cast<const std::byte*>(text.data()),
                   reinterpret_cast<const std::byte*>(text.data()) + text.size());
    f.payload = f.owned;
  }

  /// The next chunk for a stream, if any message has one to give.
  bool next_chunk(path& p, stream& s) {
    for (outgoing& o : p.sending) {
      if (o.next >= o.payload.size()) continue;
      if (o.stream >= 0 && o.stream % std::max(p.expected, 1) != s.index) continue;
      follow_losses(p, s);
      const std::uint64_t length = std::min<std::uint64_t>(o.chunk, o.payload.size() - o.next);
      tcp::out_frame& f = s.conn.out.emplace_back();
      const auto bytes =
          encode(stream_header{stream_kind::chunk, engine_.rank(),
                               static_cast<std::uint32_t>(o.chunk), o.id, o.next, length});
      std::copy(bytes.begin(), bytes.end(), f.header.begin());
      f.payload = o.payload.subspan(o.next, length);
      f.cookie = o.id;
      s.carried += length;
      o.next += length;
      ++o.in_flight;
      return true;
    }
    return false;
  }

  /// Sets the stream's unsent bound to the losing one while it retransmitted within the last
  /// second, and back to the other once it has not: one TCP_INFO a chunk, one setsockopt a
  /// change. Nothing to do where both bounds are one (4 or more streams, or a bound the path's
  /// tuning sets), so most paths make no extra system call on the send path.
  void follow_losses(const path& p, stream& s) {
    if (unsent_limit(p.tuning, true) == unsent_limit(p.tuning, false)) return;
    const int fd = s.conn.socket.native_handle();
    tcp_info info{};
    socklen_t length = sizeof info;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return;
    const auto now = clock::now();
    if (info.tcpi_total_retrans != s.retransmitted) {
      s.retransmitted = info.tcpi_total_retrans;
      s.last_loss = now;
    }
    const bool losing = s.retransmitted > 0 && now - s.last_loss < std::chrono::seconds(1);
    if (losing == s.losing) return;
    s.losing = losing;
    set_unsent_bound(fd, unsent_limit(p.tuning, losing));  // best effort, as on the open
  }

  /// Filler for a stream while the path is measured (autotune).
  bool next_probe(path& p, stream& s) {
    if (!p.probing) return false;
    static const std::vector<std::byte> filler(std::size_t{256} << 10);
    tcp::out_frame& f = s.conn.out.emplace_back();
    const auto bytes =
        encode(stream_header{stream_kind::probe, engine_.rank(), 0, 0, 0, filler.size()});
    std::copy(bytes.begin(), bytes.end(), f.header.begin());
    f.payload = filler;
    return true;
  }

  /// Hands chunks to the streams with room, writes what they take, and closes streams whose
  /// queues ran dry after a close was asked for.
  void service(int peer) {
    if (!engine_.connected(peer)) return;
    path& p = peers_[index(peer)];
    // Until every chunk is on a stream or every stream is full (its writes then resume this).
    for (;;) {
      bool given = false;
      const std::size_t n = p.streams.size();
      for (bool again = true; again;) {
        again = false;
        for (std::size_t i = 0; i < n; ++i) {
          stream& s = *p.streams[(p.turn + i) % n];
          if (!s.active || s.conn.out.size() >= queue_depth) continue;
          if (next_chunk(p, s) || next_probe(p, s)) again = given = true;
        }
      }
      if (n > 0) p.turn = (p.turn + 1) % n;
      // Flushing may drop streams (an error, a close): iterate over a copy. A stream waiting
      // for room is left to its wait: writing to it now would only fail (with 64 streams, 63
      // failed system calls per stream that drained).
      const auto streams = p.streams;
      for (const auto& s : streams) {
        if (!s->conn.write_armed && !flush(s)) return;
      }
      if (!given) return;
    }
  }

  /// Writes what `s` takes now; false when that broke the peer.
  bool flush(const std::shared_ptr<stream>& s) {
    tcp::connection& c = s->conn;
    if (!c.open) return true;
    const int peer = s->peer;
    const std::error_code ec = c.flush([&](tcp::out_frame& f) { written(peer, f); });
    if (ec) {
      broken(*s, fmt::format("write failed: {}", ec.message()));
      return false;
    }
    if (c.out.empty() && s->close_queued && !s->shut) {
      std::error_code ignored;
      c.socket.shutdown(asio::socket_base::shutdown_send, ignored);
      s->shut = true;
      finish_close(s);
    }
    if (!c.out.empty() && !c.write_armed) {
      c.write_armed = true;
      c.socket.async_wait(asio::socket_base::wait_write,
                          [this, weak = std::weak_ptr<stream>(s)](std::error_code wec) {
                            auto st = weak.lock();
                            if (!st) return;
                            st->conn.write_armed = false;
                            if (wec || !st->conn.open) return;
                            const int p = st->peer;
                            if (flush(st)) service(p);
                          });
    }
    return true;
  }

  /// A frame left: a message whose last chunk left is sent.
  void written(int peer, tcp::out_frame& f) {
    if (f.cookie == 0) return;
    path& p = peers_[index(peer)];
    for (auto it = p.sending.begin(); it != p.sending.end(); ++it) {
      if (it->id != f.cookie) continue;
      --it->in_flight;
      if (it->in_flight == 0 && it->next >= it->payload.size()) {
        if (it->op) {
          engine_.complete(*it->op, {peer, it->op->tag, it->payload.size(), {}});
        }
        p.sending.erase(it);
      }
      return;
    }
  }

  // --- retuning ---------------------------------------------------------------------------

  /// Whether this rank opens the streams of the path to `peer`: the higher rank does.
  [[nodiscard]] bool opens(int peer) const { return engine_.rank() > peer; }

  /// The opener: close the path's streams, and reopen with `tuning` once they are gone.
  void reopen(int peer, const path_config& tuning) {
    path& p = peers_[index(peer)];
    p.tuning = tuning;
    p.reopening = true;
    close_streams(peer);
  }

  /// Not the opener: ask the opener to reopen the path with `tuning`, on a stream of the
  /// current epoch (ahead of any close this rank may send on it later, so it is read).
  void request_retune(int peer, const path_config& tuning) {
    path& p = peers_[index(peer)];
    const std::string text = tuning_text(tuning);
    for (const auto& s : p.streams) {
      if (!s->active) continue;
      out_control(*s,
                  {stream_kind::retune, engine_.rank(), static_cast<std::uint32_t>(tuning.streams),
                   p.epoch, 0, text.size()},
                  text);
      flush(s);
      return;
    }
    throw error(errc::peer_lost, fmt::format("wan: rank {}: retune of the path to rank {}: no "
                                             "stream is open to ask on",
                                             engine_.rank(), peer));
  }

  /// The opener read the peer's retune request: applied now if the path is up, else as soon
  /// as it is (a later request replaces one not yet applied).
  void on_retune_request(stream& s) {
    if (!opens(s.peer)) return violation(s, "a retune request to the rank that does not open");
    const auto tuning = parse_tuning(s.tuning);
    if (!tuning || tuning->streams != static_cast<int>(s.current.chunk))
      return violation(s, "a retune request with malformed tuning");
    if (leaving_) return;
    peers_[index(s.peer)].requested = *tuning;
    apply_requested(s.peer);
  }

  void apply_requested(int peer) {
    path& p = peers_[index(peer)];
    if (!p.requested || !ready(peer) || leaving_) return;
    const path_config tuning = *p.requested;
    p.requested.reset();
    reopen(peer, tuning);
  }

  // --- closing ----------------------------------------------------------------------------

  /// Asks every stream of the path to `peer` to close: no new chunks go on them.
  void close_streams(int peer) {
    path& p = peers_[index(peer)];
    const auto streams = p.streams;
    for (const auto& s : streams) begin_close(s);
    maybe_reopen(peer);
  }

  void begin_close(const std::shared_ptr<stream>& s) {
    s->active = false;
    if (s->close_queued) return;
    s->close_queued = true;
    out_control(*s, {stream_kind::close, engine_.rank(), 0, s->epoch, 0, 0});
    flush(s);
  }

  /// Both halves of `s` are done: it goes.
  void finish_close(const std::shared_ptr<stream>& s) {
    if (!s->shut || !s->close_received || s->in_payload) return;
    s->conn.close();
    path& p = peers_[index(s->peer)];
    std::erase(p.streams, s);
    maybe_reopen(s->peer);
  }

  void maybe_reopen(int peer) {
    path& p = peers_[index(peer)];
    if (!p.reopening || !p.streams.empty() || !engine_.connected(peer)) return;
    p.reopening = false;
    connect_streams(peer, clock::now() + cfg_.base.timeout);
  }

  /// Closes every path and waits (briefly) until the streams are gone, so no chunk is cut off.
  void leave() noexcept {
    leaving_ = true;
    try {
      for (int peer = 0; peer < engine_.size(); ++peer) {
        if (peer != engine_.rank() && engine_.connected(peer)) {
          peers_[index(peer)].reopening = false;
          close_streams(peer);
        }
      }
      const auto closed = [&] {
        return std::all_of(peers_.begin(), peers_.end(),
                           [](const path& p) { return p.streams.empty(); });
      };
      run_until(closed, clock::now() +
                            std::min<clock::duration>(cfg_.base.timeout, std::chrono::seconds(10)));
    } catch (...) {
      // Leaving never throws.
    }
  }

  // --- reading ----------------------------------------------------------------------------

  void arm_read(const std::shared_ptr<stream>& s) {
    tcp::connection& c = s->conn;
    if (c.read_armed || !c.open) return;
    c.read_armed = true;
    c.socket.async_wait(asio::socket_base::wait_read,
                        [this, weak = std::weak_ptr<stream>(s)](std::error_code ec) {
                          auto st = weak.lock();
                          if (!st) return;
                          st->conn.read_armed = false;
                          if (!ec && st->conn.open) on_readable(st);
                        });
  }

  // As in the tcp engine: read until would_block before arming the next wait (Asio's epoll
  // waits are edge-triggered), resuming through the queue after a fair share.
  void on_readable(const std::shared_ptr<stream>& s) {
    tcp::connection& c = s->conn;
    constexpr int fair_share = 16;
    for (int round = 0; c.open; ++round) {
      if (round == fair_share) {
        c.read_armed = true;
        asio::post(engine_.io(), [this, weak = std::weak_ptr<stream>(s)] {
          auto st = weak.lock();
          if (!st) return;
          st->conn.read_armed = false;
          if (st->conn.open) on_readable(st);
        });
        return;
      }
      std::error_code ec;
      if (!s->in_payload) {
        const std::size_t n = c.socket.read_some(
            asio::buffer(s->head.data() + s->head_have, stream_header_size - s->head_have), ec);
        if (ec == asio::error::would_block || ec == asio::error::try_again) break;
        if (ec == asio::error::eof) return ended(s);
        if (ec) return broken(*s, fmt::format("read failed: {}", ec.message()));
        s->head_have += n;
        if (s->head_have < stream_header_size) continue;
        s->head_have = 0;
        if (!on_header(s)) return;
        continue;
      }
      std::byte* into = destination(*s);
      std::array<std::byte, 64 << 10>* sink = nullptr;
      if (into == nullptr) {
        sink = &discard_;
        into = discard_.data();
      }
      const std::size_t want = static_cast<std::size_t>(
          std::min<std::uint64_t>(s->remaining, sink ? sink->size() : s->remaining));
      const std::size_t n = c.socket.read_some(asio::buffer(into, want), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec == asio::error::eof) return ended(s);
      if (ec) return broken(*s, fmt::format("read failed: {}", ec.message()));
      if (s->current.kind == stream_kind::open || s->current.kind == stream_kind::retune)
        s->tuning.append(reinterpret_cast<char*>(into), n);
      s->remaining -= n;
      if (s->remaining == 0 && !end_payload(s)) return;
    }
    arm_read(s);
  }

  /// Where the next payload bytes of `s` go; null: dropped (or an opening's text).
  std::byte* destination(stream& s) {
    if (s.current.kind != stream_kind::chunk) return nullptr;
    // Looked up afresh each time: the receive may have been cancelled since the last read.
    const auto waiting = engine_.awaited(s.peer, s.current.id);
    if (!waiting || waiting->op == nullptr || waiting->op->target == nullptr) return nullptr;
    const std::uint64_t done = s.current.length - s.remaining;
    return waiting->op->target + s.current.offset + done;
  }

  /// Acts on a whole header; false when it broke the peer.
  bool on_header(const std::shared_ptr<stream>& s) {
    const decoded_stream_header d =
        decode(std::span<const std::byte, stream_header_size>(s->head), s->peer);
    if (!d.ok()) return violation(*s, d.error), false;
    const stream_header& h = d.header;
    if (h.kind != stream_kind::open && s->index < 0) {
      return violation(*s, "a stream that did not open"), false;
    }
    if (s->close_received) return violation(*s, "a frame after close"), false;
    switch (h.kind) {
      case stream_kind::open:
        if (s->index >= 0) return violation(*s, "a stream opened twice"), false;
        break;
      case stream_kind::chunk: {
        path& p = peers_[index(s->peer)];
        const auto waiting = engine_.awaited(s->peer, h.id);
        if (!waiting) return violation(*s, "a chunk of no message"), false;
        auto [it, fresh] = p.arriving.try_emplace(h.id);
        assembly& a = it->second;
        if (fresh) {
          a.chunk = h.chunk;
          a.got.assign(static_cast<std::size_t>((waiting->size + h.chunk - 1) / h.chunk), false);
        }
        if (const auto why = check_chunk(h, waiting->size, a.chunk); !why.empty())
          return violation(*s, why), false;
        const auto k = static_cast<std::size_t>(h.offset / a.chunk);
        if (a.got[k]) return violation(*s, "a chunk twice"), false;
        a.got[k] = true;
        break;
      }
      case stream_kind::probe:
      case stream_kind::retune:
        break;  // filler is read and dropped; a request's text is read, then acted on
      case stream_kind::close:
        s->close_received = true;
        s->current = h;
        begin_close(s);
        finish_close(s);
        return s->conn.open;
    }
    s->current = h;
    s->remaining = h.length;
    s->in_payload = h.length > 0;
    s->tuning.clear();
    if (!s->in_payload) return end_payload(s);
    return true;
  }

  /// A whole payload is in; false when that broke the peer.
  bool end_payload(const std::shared_ptr<stream>& s) {
    s->in_payload = false;
    const stream_header& h = s->current;
    if (h.kind == stream_kind::open) {
      on_open(*s, h);
      return s->conn.open;
    }
    if (h.kind == stream_kind::retune) {
      on_retune_request(*s);
      return s->conn.open;
    }
    if (h.kind != stream_kind::chunk) return true;
    path& p = peers_[index(s->peer)];
    const auto it = p.arriving.find(h.id);
    if (it == p.arriving.end()) return true;
    it->second.received += h.length;
    const auto waiting = engine_.awaited(s->peer, h.id);
    if (waiting && it->second.received == waiting->size) {
      p.arriving.erase(it);
      engine_.finish_awaited(s->peer, h.id);
    }
    return true;
  }

  /// The other end shut its sending half: fine after its close, a break before it.
  void ended(const std::shared_ptr<stream>& s) {
    if (!s->close_received) {
      return broken(*s, s->in_payload ? "closed by the peer in the middle of a chunk"
                                      : "closed by the peer without a close");
    }
    finish_close(s);
  }

  std::string name(const stream& s) const {
    return fmt::format("data stream {} of the path to rank {} (epoch {})", s.index, s.peer,
                       s.epoch);
  }

  void broken(stream& s, const std::string& why) {
    s.conn.close();
    engine_.fail_peer(s.peer, errc::peer_lost, fmt::format("{}: {}", name(s), why));
    drop_stream(s);
  }

  void violation(stream& s, std::string_view why) {
    s.conn.close();
    engine_.fail_peer(s.peer, errc::protocol_violation, fmt::format("{}: {}", name(s), why));
    drop_stream(s);
  }

  void drop_stream(stream& s) {
    auto& streams = peers_[index(s.peer)].streams;
    std::erase_if(streams, [&](const std::shared_ptr<stream>& x) { return x.get() == &s; });
  }

  /// The engine's hook: `peer` is gone; what it had with us ends.
  void drop(int peer, std::error_code why) {
    path& p = peers_[index(peer)];
    for (auto& s : p.streams) s->conn.close();
    p.streams.clear();
    p.to_connect.clear();
    p.connecting = 0;
    p.reopening = false;
    for (outgoing& o : p.sending) {
      if (o.op && !o.op->done) engine_.complete(*o.op, {peer, any_tag, 0, why});
    }
    p.sending.clear();
    p.arriving.clear();
  }

  tcp::engine& engine_;
  config cfg_;
  std::vector<path> peers_;
  bool leaving_ = false;  ///< no more reopening: the paths are closing for good
  std::array<std::byte, 64 << 10> discard_{};
};

}  // namespace commx::detail::wan
