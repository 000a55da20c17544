// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP engine's protocol on a connection (engine.hpp): writing frames, reading them as
/// the kernel has bytes (payloads straight into receive buffers where it can), and acting on
/// each header. Out of line as Asio's detail/impl files are, included by engine.hpp.

#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::detail::tcp {

inline void engine::push_control(int peer, frame_kind kind, std::uint64_t cookie) {
  peer_link& link = peers_[index(peer)];
  if (link.state != presence::present && link.state != presence::connecting) return;
  out_frame& f = link.conn->out.emplace_back();
  f.header = encode(frame_header{kind, 0, rank(), 0, 0, 0, cookie});
  flush(peer);
}

inline void engine::push_payload(int peer, frame_kind kind, std::span<const std::byte> payload) {
  peer_link& link = peers_[index(peer)];
  out_frame& f = link.conn->out.emplace_back();
  f.header = encode(frame_header{kind, 0, rank(), 0, 0, payload.size(), 0});
  f.owned.assign(payload.begin(), payload.end());
  f.payload = f.owned;
  flush(peer);
}

inline void engine::damage_frame(int peer, bool cut) {
  if (!reach(peer)) return;
  peer_link& link = peers_[index(peer)];
  out_frame& f = link.conn->out.emplace_back();
  f.header = encode(frame_header{frame_kind::eager, 0, rank(), 0, 0, cut ? 4096U : 0U, 0});
  if (!cut) {
    f.header[0] ^= std::byte{0xff};  // the magic: the peer refuses the frame and hangs up
    return flush(peer);
  }
  f.owned.assign(16, std::byte{0x5a});
  f.payload = f.owned;
  flush(peer);
  // The frame promised 4096 bytes: whatever went next would be read as the rest of it.
  gone(peer, presence::failed, make_error_code(errc::peer_lost));
}

inline void engine::flush(int peer) {
  peer_link& link = peers_[index(peer)];
  if (!link.conn || !link.conn->open) return;
  connection& c = *link.conn;
  const std::error_code ec = c.flush([&](out_frame& f) {
    if (f.completes) finish(*f.completes, {peer, f.completes->tag, f.payload.size()});
  });
  if (ec) return broken(peer, ec);
  if (!c.idle() && !c.write_armed) {
    c.write_armed = true;
    c.socket.async_wait(asio::socket_base::wait_write, [this, peer](std::error_code wec) {
      connection& conn = *peers_[index(peer)].conn;
      conn.write_armed = false;
      if (!wec && conn.open) flush(peer);
    });
  }
}

// A test's or a polling wait's look. Plain tcp in a job of a few ranks reads its sockets
// directly, one recv each: through Asio's reactor a message costs an epoll_wait, and
// re-arming Asio's wait an epoll_ctl, on top of the recv (measured on loopback: 5 system
// calls per 8-byte message, against 1-2). Beyond 4 ranks, idle recvs would cost more than
// one epoll_wait. The reactor still runs every few turns, for what only it serves (writes
// that waited for room, accepts, timers, the waits these reads made spurious). wan's
// streams are the reactor's alone.
inline void engine::poll_sockets() {
  constexpr std::size_t reactor_every = 8;
  constexpr std::size_t direct_ranks = 4;
  if (ext_.adopt_stream || peers_.size() > direct_ranks || ++poll_turn_ % reactor_every == 0) {
    io_.poll();
    return;
  }
  for (int peer = 0; peer < size(); ++peer) {
    const peer_link& link = peers_[index(peer)];
    // Armed: Asio's wait is pending and may fire later, finding nothing; unarmed: a read
    // is already on its way.
    if (link.conn && link.conn->open && link.conn->read_armed) on_readable(peer);
  }
}

inline void engine::arm_read(int peer) {
  connection& c = *peers_[index(peer)].conn;
  if (c.read_armed || !c.open) return;
  c.read_armed = true;
  c.socket.async_wait(asio::socket_base::wait_read, [this, peer](std::error_code ec) {
    connection& conn = *peers_[index(peer)].conn;
    conn.read_armed = false;
    if (!ec && conn.open) on_readable(peer);
  });
}

inline void engine::on_readable(int peer) {
  connection& c = *peers_[index(peer)].conn;
  constexpr int fair_share = 16;
  for (int round = 0; c.open; ++round) {
    if (round == fair_share) {
      c.read_armed = true;
      asio::post(io_, [this, peer] {
        connection& conn = *peers_[index(peer)].conn;
        conn.read_armed = false;
        if (conn.open) on_readable(peer);
      });
      return;
    }
    std::error_code ec;
    if (c.in_payload && c.available() == 0 && c.destination != nullptr &&
        c.remaining >= connection::direct_read) {
      const std::size_t n =
          c.read_some(asio::buffer(c.destination, static_cast<std::size_t>(c.remaining)), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) return broken(peer, ec);
      bytes_read_ += n;
      c.destination += n;
      c.remaining -= n;
      if (c.remaining == 0) end_payload(peer);
      continue;
    }
    c.compact();
    std::size_t room = c.staging.size() - c.end;
    // When a payload this rank asked for (cts) may come next, take no more than the next
    // header: a full read would pull up to the staging size of that payload through the
    // staging buffer and a second copy; this way all of it is read straight into its
    // receive buffer, for one more small read per frame while the rendezvous is pending.
    if (!c.in_payload && c.available() < header_size && awaits_payload(peer)) {
      room = header_size - c.available();
    }
    const std::size_t n = c.read_some(asio::buffer(c.staging.data() + c.end, room), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec) return broken(peer, ec);
    bytes_read_ += n;
    const bool filled = c.end + n == c.staging.size();
    c.end += n;
    process(peer);
    if (filled && c.open) c.grow_staging();
    // A short read emptied the socket: skip the read that would only say so (arming the
    // wait again reports bytes that came meanwhile).
    if (n < room && c.short_read_empties()) break;
  }
  // Reading may have had TLS answer the peer (a key update).
  if (c.tls && !c.idle() && !c.write_armed) flush(peer);
  arm_read(peer);
}

inline bool engine::awaits_payload(int peer) const {
  return !ext_.carry_data && !peers_[index(peer)].awaiting_data.empty();
}

inline void engine::process(int peer) {
  connection& c = *peers_[index(peer)].conn;
  while (c.open) {
    if (c.in_payload) {
      const auto take =
          static_cast<std::size_t>(std::min<std::uint64_t>(c.available(), c.remaining));
      if (take == 0) return;
      if (c.destination != nullptr) {
        std::memcpy(c.destination, c.staging.data() + c.begin, take);
        c.destination += take;
      }
      c.begin += take;
      c.remaining -= take;
      if (c.remaining == 0) end_payload(peer);
      continue;
    }
    if (c.available() < header_size) return;
    const decoded d = decode(
        std::span<const std::byte, header_size>(c.staging.data() + c.begin, header_size), peer);
    c.begin += header_size;
    if (!d.ok()) return violation(peer, d.error);
    on_header(peer, d.header);
  }
}

inline void engine::begin_payload(int peer, const frame_header& h, std::byte* destination,
                                  std::shared_ptr<operation> op, bool into_holding) {
  connection& c = *peers_[index(peer)].conn;
  c.in_payload = true;
  c.current = h;
  c.remaining = h.length;
  c.receiving = std::move(op);
  c.into_holding = into_holding;
  if (into_holding) {
    c.holding.resize(static_cast<std::size_t>(h.length));
    destination = c.holding.data();
  }
  c.destination = destination;
  if (c.receiving) c.receiving->where = operation::stage::receiving;
  if (h.length == 0) end_payload(peer);
}

inline void engine::on_header(int peer, const frame_header& h) {
  peer_link& link = peers_[index(peer)];
  const auto size = static_cast<std::size_t>(h.length);
  switch (h.kind) {
    case frame_kind::eager: {
      link.held += h.length + header_size;
      if (link.held > cfg_.window) return violation(peer, "eager messages beyond the window");
      ++events_;
      if (auto op = match_posted(peer, h.context, h.tag, size)) {
        std::byte* target = op->target;
        return begin_payload(peer, h, target, std::move(op), false);
      }
      return begin_payload(peer, h, nullptr, nullptr, true);
    }
    case frame_kind::rts: {
      if (h.cookie <= link.announced) return violation(peer, "rendezvous id reused");
      link.announced = h.cookie;
      if (h.flags == data_follows) return on_streamed_envelope(peer, h);
      ++events_;
      if (auto op = match_posted(peer, h.context, h.tag, size)) {
        op->cookie = h.cookie;
        op->where = operation::stage::awaiting_data;
        link.awaiting_data[h.cookie] = {op, h.length};
        return push_control(peer, frame_kind::cts, h.cookie);
      }
      queued_message& m = unexpected_.push_slot(peer, h.context, h.tag);
      m.size = h.length;
      m.how = queued_message::form::remote_rendezvous;
      m.eager.clear();
      m.cookie = h.cookie;
      return;
    }
    case frame_kind::cts: {
      if (h.cookie >= link.next_cookie) return violation(peer, "clear-to-send for no message");
      auto it = link.awaiting_cts.find(h.cookie);
      if (it == link.awaiting_cts.end()) return;  // we withdrew it; our revoke is on its way
      std::shared_ptr<operation> op = std::move(it->second);
      link.awaiting_cts.erase(it);
      op->where = operation::stage::writing;
      if (ext_.carry_data && ext_.carry_data(peer, op)) return;
      out_frame& f = link.conn->out.emplace_back();
      f.header =
          encode(frame_header{frame_kind::data, 0, rank(), 0, 0, op->payload.size(), op->cookie});
      f.payload = op->payload;
      f.cookie = op->cookie;
      f.completes = std::move(op);
      return flush(peer);
    }
    case frame_kind::data: {
      auto it = link.awaiting_data.find(h.cookie);
      if (it == link.awaiting_data.end()) return violation(peer, "data nobody asked for");
      if (it->second.size != h.length) return violation(peer, "data of the wrong size");
      std::shared_ptr<operation> op = std::move(it->second.op);
      link.awaiting_data.erase(it);
      std::byte* target = op ? op->target : nullptr;
      return begin_payload(peer, h, target, std::move(op), false);
    }
    case frame_kind::credit:
      link.send_credit += h.cookie;
      if (link.send_credit > cfg_.window) return violation(peer, "credit beyond the window");
      return;
    case frame_kind::grant:
      link.stream_credit += h.cookie;
      if (link.stream_credit > max_window) return violation(peer, "grants beyond any window");
      return;
    case frame_kind::signal:
      if (!ext_.signalled) return violation(peer, "a signal for an extension this rank has not");
      return ext_.signalled(peer, h.cookie);
    case frame_kind::revoke: {
      if (auto it = link.awaiting_data.find(h.cookie); it != link.awaiting_data.end()) {
        if (it->second.op) {
          finish(*it->second.op,
                 {peer, it->second.op->result.tag, 0, make_error_code(errc::cancelled)});
        }
        link.awaiting_data.erase(it);
        return;
      }
      unexpected_.remove_if([&](const queued_message& m) {
        return m.source == peer && m.how == queued_message::form::remote_rendezvous &&
               m.cookie == h.cookie;
      });
      return;
    }
    case frame_kind::bye:
      return gone(peer, presence::finished, make_error_code(errc::peer_lost));
    case frame_kind::address:
      if (rank() != 0 || joined_ || table_[index(peer)].port != 0)
        return violation(peer, "an address out of turn");
      return begin_payload(peer, h, nullptr, nullptr, true);
    case frame_kind::table:
      if (peer != 0 || joined_ || have_table_ || !table_length_fits(h.length, index(this->size())))
        return violation(peer, "a table out of turn");
      return begin_payload(peer, h, nullptr, nullptr, true);
    case frame_kind::abort:
      if (peer != 0 || joined_) return violation(peer, "an abort out of turn");
      return begin_payload(peer, h, nullptr, nullptr, true);
  }
}

inline void engine::end_payload(int peer) {
  connection& c = *peers_[index(peer)].conn;
  c.in_payload = false;
  const frame_header h = c.current;
  std::shared_ptr<operation> op = std::move(c.receiving);
  c.receiving = nullptr;
  c.destination = nullptr;
  const auto size = static_cast<std::size_t>(h.length);
  switch (h.kind) {
    case frame_kind::eager:
      if (op) {
        finish(*op, op->result);
        consumed(peer, size);
      } else if (c.into_holding) {
        deliver_held(peer, h, std::move(c.holding));
      } else {
        consumed(peer, size);  // its receive was cancelled on the way
      }
      break;
    case frame_kind::data:
      if (op) finish(*op, op->result);
      break;
    case frame_kind::address:
      if (auto e = decode_endpoint(c.holding)) {
        table_[index(peer)] = *e;
        ++events_;
      } else {
        violation(peer, "a malformed address");
      }
      break;
    case frame_kind::table:
      if (auto t = decode_table(c.holding, index(this->size()))) {
        table_ = std::move(*t);
        have_table_ = true;
        peers_[index(peer)].releasing = true;  // nothing more comes on it (release)
        ++events_;
      } else {
        violation(peer, "a malformed table");
      }
      break;
    case frame_kind::abort:
      abort_text_.assign(reinterpret_cast<const char*>(c.holding.data()), c.holding.size());
      have_abort_ = true;
      ++events_;
      break;
    default:
      break;
  }
  c.into_holding = false;
  c.holding = {};
}

inline void engine::deliver_held(int peer, const frame_header& h, std::vector<std::byte> payload) {
  ++events_;
  if (auto op = match_posted(peer, h.context, h.tag, payload.size())) {
    if (!payload.empty()) std::memcpy(op->target, payload.data(), payload.size());
    finish(*op, op->result);
    consumed(peer, payload.size());
    return;
  }
  const std::uint64_t size = payload.size();
  unexpected_.push(
      {peer, h.context, h.tag, size, queued_message::form::eager, std::move(payload), 0, nullptr});
}

}  // namespace commx::detail::tcp
