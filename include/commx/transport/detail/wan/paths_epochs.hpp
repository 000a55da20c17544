// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A wan path's streams over its epochs (paths.hpp): opening them (dialling, authenticating,
/// the opening frame with the tuning), retuning (both sides agree, the streams close after what
/// is queued, the next epoch opens), and closing them for good. Out of line as Asio's
/// detail/impl files are, included by paths.hpp.

#include "commx/transport/detail/wan/paths.hpp"

namespace commx::detail::wan {

inline void paths::use(int peer) {
  path& p = peers_[index(peer)];
  if (p.epoch > 0 || leaving_ || !streamed(peer) || !engine_.connected(peer)) return;
  if (opens(peer)) {
    p.tuning = cfg_.path_to(engine_.rank(), peer);
    connect_streams(peer, clock::now() + cfg_.base.timeout);
  } else if (!p.asked) {
    p.asked = true;
    engine_.signal(peer, open_request);
  }
}

inline void paths::retune(int peer, const path_config& tuning) {
  if (peer < 0 || peer >= engine_.size() || peer == engine_.rank()) {
    throw error(errc::invalid_argument,
                fmt::format("wan: rank {}: retune: {} is no peer rank", engine_.rank(), peer));
  }
  if (!streamed(peer)) {
    throw error(errc::invalid_argument,
                fmt::format("wan: rank {}: retune: the path to rank {} has no data streams "
                            "(the same site, and streams run between sites only)",
                            engine_.rank(), peer));
  }
  path& p = peers_[index(peer)];
  const clock::time_point until = clock::now() + cfg_.base.timeout;
  link(peer, until, "retune");
  std::uint64_t before = p.epoch;
  if (opens(peer) && p.epoch == 0) {
    // Never opened: it opens under this tuning.
    p.tuning = tuning;
    connect_streams(peer, until);
  } else {
    use(peer);
    // An opening, or a retune the peer began, finishes first.
    run_until([&] { return ready(peer) || !engine_.connected(peer); }, until);
    check_connected(peer, "retune");
    before = p.epoch;
    COMMX_LOG(info, engine_.log_context(), "retuning the path to rank {}: {} -> {}", peer,
              tuning_text(p.tuning), tuning_text(tuning));
    if (opens(peer)) {
      reopen(peer, tuning);
    } else {
      request_retune(peer, tuning);
    }
  }
  // Asked of the opener, this request may come after one the opener was applying: that
  // epoch (before + 1) has the other tuning, and this one's follows.
  const auto applied = [&] {
    return !engine_.connected(peer) ||
           (ready(peer) && (p.epoch >= before + 2 || (p.epoch > before && p.tuning == tuning)));
  };
  if (!run_until(applied, until)) {
    error e(errc::timeout, fmt::format("wan: rank {}: retune of the path to rank {}: not "
                                       "reopened within the timeout",
                                       engine_.rank(), peer));
    COMMX_LOG(info, engine_.log_context(), "{}", e.what());  // as every timeout
    throw e;
  }
  check_connected(peer, "retune");
}

inline void paths::open(int peer) {
  if (peer < 0 || peer >= engine_.size() || peer == engine_.rank() || !streamed(peer)) {
    throw error(errc::invalid_argument,
                fmt::format("wan: rank {}: open: rank {} is no peer with a path of streams",
                            engine_.rank(), peer));
  }
  const clock::time_point until = clock::now() + cfg_.base.timeout;
  link(peer, until, "opening");
  use(peer);
  if (!run_until([&] { return ready(peer) || !engine_.connected(peer); }, until)) {
    throw error(errc::timeout, fmt::format("wan: rank {}: the path to rank {} did not open "
                                           "within the timeout",
                                           engine_.rank(), peer));
  }
  check_connected(peer, "opening");
}

inline void paths::on_signal(int peer, std::uint64_t what) {
  if (what != open_request || !opens(peer)) {
    engine_.fail_peer(
        peer, errc::protocol_violation,
        fmt::format("a signal ({}) this rank does not take from rank {}", what, peer));
    return;
  }
  use(peer);
}

inline void paths::came_up(int peer) {
  path& p = peers_[index(peer)];
  if (p.offered || !ready(peer)) return;
  p.offered = true;
  engine_.offer_streamed_window(peer);
  COMMX_LOG(info, engine_.log_context(), "path to rank {}: {} streams open (epoch {}): {}", peer,
            p.expected, p.epoch, tuning_text(p.tuning));
}

inline void paths::connect_streams(int peer, clock::time_point until) {
  path& p = peers_[index(peer)];
  ++p.epoch;
  p.expected = p.tuning.streams;
  COMMX_LOG(debug, engine_.log_context(), "opening {} streams to rank {} (epoch {}): {}",
            p.tuning.streams, peer, p.epoch, tuning_text(p.tuning));
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
                    fmt::format("wan: rank {}: path to rank {}: cannot set{}", engine_.rank(), peer,
                                failed));
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

inline void paths::connect_more(int peer) {
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

inline void paths::authenticate(const std::shared_ptr<stream>& s, clock::time_point until) {
  const int peer = s->peer;
  tcp::handshake::hello me{tcp::handshake::purpose::stream, engine_.rank(), engine_.size(),
                           tcp::handshake::fresh_nonce()};
  me.tls = engine_.tls_wanted(peer);
  auto session = std::make_shared<tcp::client_session>(
      std::move(s->conn.socket), cfg_.base.token, me, peer, until,
      [this, weak = std::weak_ptr<stream>(s)](tcp::client_session& cs, bool ok,
                                              const std::string& why, bool) {
        auto st = weak.lock();
        if (!st) return;
        --peers_[index(st->peer)].connecting;
        st->conn.reattach(std::move(cs.socket), std::move(cs.tls));
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
        came_up(st->peer);
        apply_requested(st->peer);
      },
      engine_.tls());
  session->start();
}

inline void paths::adopt(int peer, asio::ip::tcp::socket socket,
                         std::unique_ptr<tcp::tls_channel> secure) {
  auto s = std::make_shared<stream>(std::move(socket), peer, std::move(secure));
  s->conn.detect_dead_host(std::chrono::duration_cast<std::chrono::seconds>(
      std::min<clock::duration>(cfg_.base.timeout, std::chrono::hours(9))));
  peers_[index(peer)].streams.push_back(s);
  on_readable(s);
}

inline void paths::on_open(stream& s, const stream_header& h) {
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
  COMMX_LOG(debug, engine_.log_context(), "stream {} from rank {} open (epoch {})", s.index, s.peer,
            s.epoch);
  if (leaving_) {  // it opened (on the peer's first use) as this rank leaves: it closes now
    for (const auto& mine : p.streams) {
      if (mine.get() == &s) return begin_close(mine);
    }
  }
  service(s.peer);
  came_up(s.peer);
}

inline void paths::reopen(int peer, const path_config& tuning) {
  path& p = peers_[index(peer)];
  p.tuning = tuning;
  p.reopening = true;
  close_streams(peer);
}

inline void paths::request_retune(int peer, const path_config& tuning) {
  path& p = peers_[index(peer)];
  const std::string text = tuning_text(tuning);
  for (const auto& open : p.streams) {
    if (!open->active) continue;
    // Held here: a write that finds the peer gone drops its streams, this one's only owner.
    const std::shared_ptr<stream> s = open;
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

inline void paths::on_retune_request(stream& s) {
  if (!opens(s.peer)) return violation(s, "a retune request to the rank that does not open");
  const auto tuning = parse_tuning(s.tuning);
  if (!tuning || tuning->streams != static_cast<int>(s.current.chunk))
    return violation(s, "a retune request with malformed tuning");
  if (leaving_) return;
  peers_[index(s.peer)].requested = *tuning;
  apply_requested(s.peer);
}

inline void paths::apply_requested(int peer) {
  path& p = peers_[index(peer)];
  if (!p.requested || !ready(peer) || leaving_) return;
  const path_config tuning = *p.requested;
  p.requested.reset();
  reopen(peer, tuning);
}

inline void paths::close_streams(int peer) {
  path& p = peers_[index(peer)];
  const auto streams = p.streams;
  for (const auto& s : streams) begin_close(s);
  maybe_reopen(peer);
}

inline void paths::begin_close(const std::shared_ptr<stream>& s) {
  s->active = false;
  if (s->close_queued) return;
  s->close_queued = true;
  out_control(*s, {stream_kind::close, engine_.rank(), 0, s->epoch, 0, 0});
  flush(s);
}

inline void paths::finish_close(const std::shared_ptr<stream>& closing) {
  if (!closing->shut || !closing->close_received || closing->in_payload) return;
  const std::shared_ptr<stream> s = closing;  // `closing` may be an element of p.streams
  s->conn.close();
  path& p = peers_[index(s->peer)];
  std::erase(p.streams, s);
  maybe_reopen(s->peer);
}

inline void paths::maybe_reopen(int peer) {
  path& p = peers_[index(peer)];
  if (!p.reopening || !p.streams.empty() || !engine_.connected(peer)) return;
  p.reopening = false;
  connect_streams(peer, clock::now() + cfg_.base.timeout);
}

inline void paths::leave() noexcept {
  leaving_ = true;
  try {
    const clock::time_point until =
        clock::now() + std::min<clock::duration>(cfg_.base.timeout, std::chrono::seconds(10));
    // A path opening on its first use finishes opening first: a close cannot go ahead of a
    // stream's opening frame.
    const auto settled = [&] {
      return std::all_of(peers_.begin(), peers_.end(), [](const path& p) {
        return p.connecting == 0 && p.to_connect.empty() &&
               std::all_of(p.streams.begin(), p.streams.end(),
                           [](const auto& s) { return s->active || s->close_queued; });
      });
    };
    run_until(settled, until);
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
    run_until(closed, until);
  } catch (...) {
    // Leaving never throws.
  }
}

}  // namespace commx::detail::wan
