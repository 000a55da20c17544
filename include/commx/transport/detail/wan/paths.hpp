// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The wan transport's data streams. A path to a peer is the tcp engine's control connection
/// (envelopes, small messages, credits, bye: tcp's protocol) plus N data streams, extra TCP
/// connections authenticated by the same handshake (purpose::stream), which the higher rank
/// opens when the path first carries a large message (use()). A large message's payload
/// leaves as chunks (wire.hpp) spread over the streams (chunk_for): at once when it fits the
/// receiver's streamed window (COMMX_WAN_EAGER; tcp/engine_streamed.hpp), else when the
/// receiver answers clear-to-send. Each stream keeps one chunk queued and takes the next once
/// the kernel took it, holding few of its bytes unsent (config.hpp's unsent_limit), so a fast
/// stream carries more and a message's last chunks go to the streams ahead. The receiver reads
/// each chunk straight into the user's buffer at its offset (or the buffer held for a message
/// nobody asked for yet) and completes the receive when every chunk is in; a chunk that
/// overtook its envelope waits, its stream unread, until the envelope is in. A duplicate, an
/// overlap or a chunk for no message is a protocol violation.
///
/// Closing a path (to retune it, or leaving): each side puts a `close` frame after what is
/// queued on each stream and then shuts its sending half; a stream is gone once both closes
/// crossed and the other end shut. Chunks of a message not yet handed to a stream wait, and go
/// on the streams of the path's next epoch: nothing is lost or sent twice. A stream that ends
/// without `close` broke (a killed peer, a reset): the peer is lost, and everything waiting on
/// it completes with errc::peer_lost, naming the stream in a `warn` line (log.hpp).

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
#include "commx/log.hpp"
#include "commx/transport/detail/tcp/connection.hpp"
#include "commx/transport/detail/tcp/engine.hpp"
#include "commx/transport/detail/tcp/session.hpp"
#include "commx/transport/detail/wan/config.hpp"
#include "commx/transport/detail/wan/stream.hpp"
#include "commx/transport/detail/wan/tuning.hpp"
#include "commx/transport/detail/wan/wire.hpp"

namespace commx::detail::wan {

class paths {
 public:
  paths(tcp::engine& e, config cfg) : engine_(e), cfg_(std::move(cfg)) {
    peers_.resize(static_cast<std::size_t>(engine_.size()));
    tcp::extension hooks;
    hooks.carry_data = [this](int peer, const std::shared_ptr<operation>& op) {
      return carry(peer, op);
    };
    hooks.adopt_stream = [this](int peer, asio::ip::tcp::socket s,
                                std::unique_ptr<tcp::tls_channel> secure) {
      adopt(peer, std::move(s), std::move(secure));
    };
    hooks.peer_gone = [this](int peer, std::error_code why) { drop(peer, why); };
    hooks.stack = "wan";
    hooks.streamed_window = cfg_.eager;
    hooks.streams_to = [this](int peer) { return streamed(peer); };
    hooks.announced = [this](int peer, std::uint64_t cookie) { unpark(peer, cookie); };
    hooks.signalled = [this](int peer, std::uint64_t what) { on_signal(peer, what); };
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

  /// Opens the paths that must be open from the start: with COMMX_WAN_AUTOTUNE, every path
  /// of streams, so each can be measured before the job's first message (the opener dials
  /// every peer with a path, opens the streams, waits until all are up, and measures). Without
  /// it nothing: a path opens when it first carries a large message (use()), so a rank that
  /// talks to k peers holds k paths' streams, not N-1.
  /// @throws commx::error errc::bootstrap_failed when they are not up within the timeout.
  void open_paths() {
    if (engine_.size() == 1 || !cfg_.autotune) return;
    const clock::time_point until = clock::now() + cfg_.base.timeout;
    const auto linked = [&] {
      for (int peer = 0; peer < engine_.size(); ++peer) {
        if (peer == engine_.rank() || !streamed(peer)) continue;
        if (!engine_.connected(peer) && !engine_.departed(peer)) return false;
      }
      return true;
    };
    // As the streams go: the higher rank dials, the lower waits for it.
    for (int peer = 0; peer < engine_.rank(); ++peer) {
      if (streamed(peer)) engine_.connect_to(peer);
    }
    if (!run_until(linked, until)) {
      throw error(
          errc::bootstrap_failed,
          fmt::format("wan: rank {}: no connection to every peer with a path of streams "
                      "within {} s",
                      engine_.rank(), std::chrono::duration<double>(cfg_.base.timeout).count()));
    }
    for (int peer = 0; peer < engine_.rank(); ++peer) {
      if (streamed(peer)) use(peer);
    }
    // A peer that already left (a short job) is no path to wait for.
    const auto up = [&](int peer) {
      return !streamed(peer) || ready(peer) || engine_.departed(peer);
    };
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
    for (int peer = 0; peer < engine_.rank(); ++peer) {
      if (streamed(peer) && engine_.connected(peer)) autotune(peer);
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
  void retune(int peer, const path_config& tuning);

  /// Opens the path to `peer` now, if it is not open, and returns once its streams are up:
  /// its first large message then leaves at once, within the streamed window, instead of
  /// waiting for a cts and the streams. The peer needs only to keep calling into its transport.
  /// @throws commx::error errc::peer_lost, errc::timeout, errc::invalid_argument (no such
  ///   peer, or no streams on the path).
  void open(int peer);

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
    bool asked = false;    ///< not the opener: this rank asked the opener to open the path
    bool offered = false;  ///< this rank offered its streamed window once the path was up
  };

  /// What a signal on the control connection asks (engine::signal): the rank that opens the
  /// path is to open it now.
  static constexpr std::uint64_t open_request = 1;

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

  /// Connects to `peer` if nothing does yet, and waits until the connection is up.
  /// @throws commx::error errc::peer_lost when it is not.
  void link(int peer, clock::time_point until, const char* what) {
    engine_.connect_to(peer);
    run_until([&] { return engine_.connected(peer) || engine_.departed(peer); }, until);
    check_connected(peer, what);
  }

  void check_connected(int peer, const char* what) const {
    if (!engine_.connected(peer)) {
      throw error(errc::peer_lost, fmt::format("wan: rank {}: {} of the path to rank {}: the peer "
                                               "is gone",
                                               engine_.rank(), what, peer));
    }
  }

  /// Whether the path to `peer` has data streams: between sites always, within one only when
  /// config::streams_within_site says so.
  [[nodiscard]] bool streamed(int peer) const {
    return cfg_.streams_within_site || engine_.site_of(peer) != engine_.site_of(engine_.rank());
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
  [[nodiscard]] std::uint64_t unacked(int peer) const;

  /// The smallest smoothed round-trip time of the path's streams, as the kernel measured it.
  [[nodiscard]] std::chrono::microseconds path_rtt(int peer) const;

  /// Fills the path's streams with probe frames for `span` and returns the rate the peer
  /// acknowledged over its second half, bytes per second (the first half is slow start):
  /// bytes the sockets took less what they still hold, so frames half written count exactly
  /// (counting whole probe frames, 256 KiB each, was off by up to 25% with 256 streams).
  double probe(int peer, clock::duration span);

  /// Measures the path (round-trip time, throughput as streams double), picks its stream
  /// count and chunk size, says so in a `warn` line, and retunes the path to them. MPWide's lesson:
  /// streams help while the window, not the link, limits each one; past that they add only
  /// congestion. So the doubling goes on while the rate still grows by 15% (and one step
  /// further, since one probe can be unlucky: with the host's 4 MiB buffers on a 1 Gbit/s,
  /// 50 ms link, 4 streams measured less than 2, and 8 more than both), and the count that
  /// measured best is taken. Where a site caps socket buffers (64 KiB at MPWide's), filling a
  /// long fat link takes more than 64 streams, so the doubling may go on to the most a path
  /// has.
  void autotune(int peer);

  // --- opening ----------------------------------------------------------------------------

  /// The path's streams are wanted (a large message to carry, a retune): the opener opens
  /// them under the path's tuning; the other rank asks it to, once. Nothing once the path was
  /// opened, or when the peer has no connection yet (its first message makes one).
  void use(int peer);

  /// The peer asked this rank (the opener) to open the path.
  void on_signal(int peer, std::uint64_t what);

  /// A stream of the path came up: once the whole first epoch is, this rank offers its
  /// streamed window (until then the peer's large messages wait for their cts) and says so.
  void came_up(int peer);

  void connect_streams(int peer, clock::time_point until);

  /// Starts connecting the path's next streams, a few at a time: the peer's engine serves a
  /// bounded number of handshakes at once (tcp's max_pending_handshakes; the rest wait in its
  /// backlog), and 64 at once would keep other ranks' waiting.
  void connect_more(int peer);
  void authenticate(const std::shared_ptr<stream>& s, clock::time_point until);

  /// An authenticated stream from `peer`: it says which it is in its opening frame.
  void adopt(int peer, asio::ip::tcp::socket socket, std::unique_ptr<tcp::tls_channel> secure);
  void on_open(stream& s, const stream_header& h);

  // --- sending ----------------------------------------------------------------------------

  /// The engine's hook: a clear-to-send came for `op`; its data goes as chunks.
  bool carry(int peer, const std::shared_ptr<operation>& op) {
    path& p = peers_[index(peer)];
    if (op->payload.empty()) return false;  // nothing to chunk: tcp's empty data frame
    if (!streamed(peer)) return false;      // tcp's data frame on the control connection
    const std::uint64_t chunk = chunk_for(op->payload.size(), p.tuning, op->stream >= 0);
    p.sending.push_back({op, op->cookie, op->payload, {}, chunk, 0, 0, op->stream});
    use(peer);  // the chunks wait for the streams on a path's first use
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
    if (c.idle() && s->close_queued && !s->shut) {
      std::error_code ignored;
      c.socket.shutdown(asio::socket_base::shutdown_send, ignored);
      s->shut = true;
      finish_close(s);
    }
    if (!c.idle() && !c.write_armed) {
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
  void reopen(int peer, const path_config& tuning);

  /// Not the opener: ask the opener to reopen the path with `tuning`, on a stream of the
  /// current epoch (ahead of any close this rank may send on it later, so it is read).
  void request_retune(int peer, const path_config& tuning);

  /// The opener read the peer's retune request: applied now if the path is up, else as soon
  /// as it is (a later request replaces one not yet applied).
  void on_retune_request(stream& s);
  void apply_requested(int peer);

  // --- closing ----------------------------------------------------------------------------

  /// Asks every stream of the path to `peer` to close: no new chunks go on them.
  void close_streams(int peer);
  void begin_close(const std::shared_ptr<stream>& s);

  /// Both halves of `s` are done: it goes.
  void finish_close(const std::shared_ptr<stream>& s);
  void maybe_reopen(int peer);

  /// Closes every path and waits (briefly) until the streams are gone, so no chunk is cut off.
  void leave() noexcept;

  // --- reading ----------------------------------------------------------------------------

  void arm_read(const std::shared_ptr<stream>& s);

  // As in the tcp engine: read until would_block before arming the next wait (Asio's epoll
  // waits are edge-triggered), resuming through the queue after a fair share.
  void on_readable(const std::shared_ptr<stream>& s);

  /// Where the next payload bytes of `s` go; null: dropped (or an opening's text).
  std::byte* destination(stream& s);

  /// Acts on a whole header; false when it broke the peer.
  bool on_header(const std::shared_ptr<stream>& s);

  /// Takes chunk `h` as the next payload of `s`: it must fit a message the peer announced and
  /// not repeat a chunk. One that overtook its envelope parks the stream (false, and `s` is
  /// not read) until unpark; false too when it broke the peer.
  bool accept_chunk(const std::shared_ptr<stream>& s, const stream_header& h);

  /// The envelope of `peer`'s message `cookie` is in: its parked streams are read again.
  void unpark(int peer, std::uint64_t cookie);

  /// A whole payload is in; false when that broke the peer.
  bool end_payload(const std::shared_ptr<stream>& s);

  /// The other end shut its sending half: fine after its close, a break before it.
  void ended(const std::shared_ptr<stream>& s);
  std::string name(const stream& s) const;
  void broken(stream& s, const std::string& why);
  void violation(stream& s, std::string_view why);
  void drop_stream(stream& s);

  /// The engine's hook: `peer` is gone; what it had with us ends.
  void drop(int peer, std::error_code why);

  tcp::engine& engine_;
  config cfg_;
  std::vector<path> peers_;
  bool leaving_ = false;  ///< no more reopening: the paths are closing for good
  std::array<std::byte, 64 << 10> discard_{};
};

}  // namespace commx::detail::wan

// The paths' larger parts, out of line (each includes this header first).
#include "commx/transport/detail/wan/paths_autotune.hpp"
#include "commx/transport/detail/wan/paths_epochs.hpp"   // IWYU pragma: export
#include "commx/transport/detail/wan/paths_reading.hpp"  // IWYU pragma: export
