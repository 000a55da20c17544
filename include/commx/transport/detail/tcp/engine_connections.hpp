// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP engine's connections (engine.hpp): adopting one, accepting and refusing others,
/// a peer that goes (finished, failed, or breaking the protocol), and leaving the job. Out of
/// line as Asio's detail/impl files are, included by engine.hpp.

#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::detail::tcp {

inline void engine::violation(int peer, std::string_view why) {
  COMMX_LOG(warn, log_, "closing the connection to rank {}: {}", peer, why);
  gone(peer, presence::failed, make_error_code(errc::protocol_violation));
}

inline void engine::broken(int peer, std::error_code ec) {
  // A peer that had our bye before it finished leaves without one of its own.
  if (peers_[index(peer)].state == presence::present && !leaving_) {
    COMMX_LOG(warn, log_, "lost rank {}: its connection broke ({})", peer,
              ec == asio::error::eof ? "closed without saying bye" : ec.message());
  }
  gone(peer, presence::failed, make_error_code(errc::peer_lost));
}

inline void engine::gone(int peer, presence how, std::error_code why) {
  peer_link& link = peers_[index(peer)];
  if (link.state != presence::present) return;
  link.state = how;
  link.loss = why;
  if (how == presence::failed) failed_.push_back(peer);
  if (how == presence::finished) COMMX_LOG(debug, log_, "rank {} said bye", peer);
  const op_result result = lost_result(peer, 0, why);
  if (link.conn) {
    connection& c = *link.conn;
    c.close();
    for (auto& f : c.out) {
      if (f.completes) finish(*f.completes, result);
    }
    c.out.clear();
    if (c.receiving) finish(*c.receiving, result);
    c.receiving = nullptr;
    c.in_payload = false;
  }
  for (auto& [cookie, op] : link.awaiting_cts) finish(*op, result);
  link.awaiting_cts.clear();
  for (auto& [cookie, waiting] : link.awaiting_data) {
    if (waiting.op) finish(*waiting.op, result);
  }
  link.awaiting_data.clear();
  // Its large messages can no longer be fetched, nor the rest of those whose data was on its
  // way; its eager ones, and those whose data is all in, are still delivered.
  unexpected_.remove_if([&](const queued_message& m) {
    if (m.source != peer) return false;
    if (m.how == queued_message::form::remote_rendezvous) return true;
    return m.how == queued_message::form::remote_streamed && m.stand_in->result.error;
  });
  std::erase_if(posted_, [&](const std::shared_ptr<operation>& op) {
    if (op->peer != peer && !(how == presence::failed && op->peer == any_source)) return false;
    finish(*op, result);
    return true;
  });
  if (ext_.peer_gone) ext_.peer_gone(peer, why);
  ++events_;
}

inline void engine::adopt(int peer, asio::ip::tcp::socket socket,
                          std::unique_ptr<tls_channel> secure) {
  peer_link& link = peers_[index(peer)];
  link.conn = std::make_unique<connection>(std::move(socket), std::move(secure));
  link.conn->detect_dead_host(std::chrono::duration_cast<std::chrono::seconds>(
      std::min<clock::duration>(cfg_.timeout, std::chrono::hours(9))));
  link.state = presence::present;
  ++events_;
  if (log::enabled(log::level::info)) {  // only then ask the kernel for the addresses
    std::error_code ignored;
    const auto local = link.conn->socket.local_endpoint(ignored);
    const auto remote = link.conn->socket.remote_endpoint(ignored);
    COMMX_LOG(info, log_, "connected to rank {} ({}{})", peer, text_of(remote),
              link.conn->tls ? ", TLS" : "");
    COMMX_LOG(debug, log_, "connection to rank {}: local {}, dead host detected after {} s", peer,
              text_of(local),
              std::chrono::duration_cast<std::chrono::seconds>(
                  std::min<clock::duration>(cfg_.timeout, std::chrono::hours(9)))
                  .count());
  }
  on_readable(peer);  // bytes may have come with the handshake's last read
}

inline void engine::log_refusal(const asio::ip::tcp::endpoint& from, const std::string& why) {
  COMMX_LOG(warn, log_, "refused a connection from {}: {}", text_of(from), why);
}

inline handshake::verdict_code engine::welcome(const handshake::hello& h) const {
  // A relay's caller has come to the wrong port: ranks do not relay.
  if (h.size != size() || h.rank == rank() || h.why == handshake::purpose::relay)
    return handshake::verdict_code::unexpected;
  if (h.why == handshake::purpose::stream) {
    return ext_.adopt_stream && peers_[index(h.rank)].state == presence::present
               ? handshake::verdict_code::accepted
               : handshake::verdict_code::unexpected;
  }
  const bool expected = h.why == handshake::purpose::join
                            ? rank() == 0 && !joined_
                            : rank() != 0 && h.rank > rank() && h.rank != 0;
  if (!expected || peers_[index(h.rank)].state != presence::absent) {
    return handshake::verdict_code::unexpected;
  }
  return handshake::verdict_code::accepted;
}

inline void engine::accept_next() {
  acceptor_->async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;
    if (!ec) on_accepted(std::move(socket));
    accept_next();
  });
}

inline void engine::on_accepted(asio::ip::tcp::socket socket) {
  std::error_code ignored;
  const auto from = socket.remote_endpoint(ignored);
  if (pending_handshakes_ >= max_pending_handshakes) {
    log_refusal(from, "too many handshakes in progress");
    return;
  }
  ++pending_handshakes_;
  const clock::time_point until =
      clock::now() + std::min<clock::duration>(cfg_.timeout, std::chrono::seconds(10));
  auto session = std::make_shared<server_session>(
      std::move(socket), cfg_.token, rank(), size(), until,
      [this](const handshake::hello& h) { return welcome(h); },
      [this](server_session& s, bool ok, const std::string& why) {
        --pending_handshakes_;
        if (!ok) return log_refusal(s.remote, why);
        if (s.peer.why == handshake::purpose::stream) {
          if (ext_.adopt_stream) {
            ext_.adopt_stream(s.peer.rank, std::move(s.socket), std::move(s.tls));
          }
          return;
        }
        // Two handshakes for one rank may both have passed `welcome`: the first one wins.
        if (peers_[index(s.peer.rank)].state != presence::absent) {
          return log_refusal(s.remote, fmt::format("rank {} is already connected", s.peer.rank));
        }
        adopt(s.peer.rank, std::move(s.socket), std::move(s.tls));
      },
      tls_policy{tls_.get(), cfg_.tls.mode == tls_mode::on});
  session->start();
}

inline void engine::open_acceptor(const asio::ip::tcp::endpoint& where, bool reuse) {
  acceptor_.emplace(io_);
  std::error_code ec;
  acceptor_->open(where.protocol(), ec);
  if (!ec && reuse) acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) {
    if (where.port() != 0 || cfg_.port_low == 0) {
      acceptor_->bind(where, ec);
    } else {
      for (unsigned port = cfg_.port_low; port <= cfg_.port_high; ++port) {
        acceptor_->bind({where.address(), static_cast<std::uint16_t>(port)}, ec);
        if (!ec) break;
      }
    }
  }
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    const std::string range = where.port() == 0 && cfg_.port_low != 0
                                  ? fmt::format("a port in {}-{}", cfg_.port_low, cfg_.port_high)
                                  : fmt::format("port {}", where.port());
    throw error(errc::bootstrap_failed,
                fmt::format("tcp: rank {}: cannot listen on {} {}: {}", rank(),
                            where.address().to_string(), range, ec.message()));
  }
  accept_next();
}

inline void engine::leave(bool failing) noexcept {
  leaving_ = true;
  try {
    if (acceptor_) {
      std::error_code ignored;
      acceptor_->close(ignored);
    }
    if (failing) {
      for (peer_link& l : peers_) {
        if (l.conn) l.conn->close();
      }
      return;
    }
    for (int r = 0; r < size(); ++r) {
      if (peers_[index(r)].state == presence::present) push_control(r, frame_kind::bye, 0);
    }
    const clock::time_point until =
        clock::now() + std::min<clock::duration>(cfg_.timeout, std::chrono::seconds(10));
    const auto closed = [&] {
      bool all = true;
      for (peer_link& l : peers_) {
        if (!l.conn || !l.conn->open) continue;
        all = false;
        if (l.conn->idle() && !l.shut) {
          std::error_code ignored;
          l.conn->socket.shutdown(asio::socket_base::shutdown_send, ignored);
          l.shut = true;
        }
      }
      return all;
    };
    while (!closed() && clock::now() < until) io_.run_one_until(until);
  } catch (...) {
    // Leaving never throws: the process is ending or the endpoint is going away.
  }
}

}  // namespace commx::detail::tcp
