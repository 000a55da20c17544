// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A wan path's receiving side (paths.hpp): reading stream frames, chunks straight into the
/// user's buffer at their offset, and a stream or path that breaks. Out of line as Asio's
/// detail/impl files are, included by paths.hpp.

#include "commx/transport/detail/wan/paths.hpp"

namespace commx::detail::wan {

inline void paths::arm_read(const std::shared_ptr<stream>& s) {
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

inline void paths::on_readable(const std::shared_ptr<stream>& s) {
  if (s->parked) return;  // unpark reads it again
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
      const std::size_t n = c.read_some(
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
    const std::size_t n = c.read_some(asio::buffer(into, want), ec);
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

inline std::byte* paths::destination(stream& s) {
  if (s.current.kind != stream_kind::chunk) return nullptr;
  // Looked up afresh each time: the receive may have been cancelled since the last read.
  const auto waiting = engine_.awaited(s.peer, s.current.id);
  if (!waiting || waiting->op == nullptr || waiting->op->target == nullptr) return nullptr;
  const std::uint64_t done = s.current.length - s.remaining;
  return waiting->op->target + s.current.offset + done;
}

inline bool paths::on_header(const std::shared_ptr<stream>& s) {
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
    case stream_kind::chunk:
      return accept_chunk(s, h);
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

inline bool paths::accept_chunk(const std::shared_ptr<stream>& s, const stream_header& h) {
  path& p = peers_[index(s->peer)];
  s->current = h;
  const auto waiting = engine_.awaited(s->peer, h.id);
  if (!waiting) {
    if (h.id <= engine_.announced(s->peer)) return violation(*s, "a chunk of no message"), false;
    s->parked = true;  // its envelope is still on the control connection
    return false;
  }
  s->parked = false;
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
  s->remaining = h.length;
  s->in_payload = true;  // a chunk is never empty (decode)
  return true;
}

inline void paths::unpark(int peer, std::uint64_t cookie) {
  std::vector<std::weak_ptr<stream>> waiting;
  for (const auto& s : peers_[index(peer)].streams) {
    if (s->parked && s->current.id <= cookie) waiting.push_back(s);
  }
  if (waiting.empty()) return;
  // After the engine is done with the envelope's frame: reading a stream may complete
  // receives, which is no business of the control connection's reader. A stream that lives
  // when this runs means these paths do too.
  asio::post(engine_.io(), [this, waiting = std::move(waiting)] {
    for (const auto& weak : waiting) {
      const auto s = weak.lock();
      if (!s || !s->parked || !s->conn.open) continue;
      if (accept_chunk(s, s->current)) on_readable(s);
    }
  });
}

inline bool paths::end_payload(const std::shared_ptr<stream>& s) {
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

inline void paths::ended(const std::shared_ptr<stream>& s) {
  if (!s->close_received) {
    return broken(*s, s->in_payload ? "closed by the peer in the middle of a chunk"
                                    : "closed by the peer without a close");
  }
  finish_close(s);
}

inline std::string paths::name(const stream& s) const {
  return fmt::format("data stream {} of the path to rank {} (epoch {})", s.index, s.peer, s.epoch);
}

inline void paths::broken(stream& s, const std::string& why) {
  s.conn.close();
  engine_.fail_peer(s.peer, errc::peer_lost, fmt::format("{}: {}", name(s), why));
  drop_stream(s);
}

inline void paths::violation(stream& s, std::string_view why) {
  s.conn.close();
  engine_.fail_peer(s.peer, errc::protocol_violation, fmt::format("{}: {}", name(s), why));
  drop_stream(s);
}

inline void paths::drop_stream(stream& s) {
  auto& streams = peers_[index(s.peer)].streams;
  std::erase_if(streams, [&](const std::shared_ptr<stream>& x) { return x.get() == &s; });
}

inline void paths::drop(int peer, std::error_code why) {
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

}  // namespace commx::detail::wan
