// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP engine's connections (engine.hpp): dialing a peer on first use, adopting a
/// connection, accepting and refusing others, a peer that goes (finished, failed, or breaking
/// the protocol), and leaving the job. Out of line as Asio's detail/impl files are, included
/// by engine.hpp.

#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::detail::tcp {

inline void engine::violation(int peer, std::string_view why) {
  COMMX_LOG(warn, log_, "closing the connection to rank {}: {}", peer, why);
  gone(peer, presence::failed, make_error_code(errc::protocol_violation));
}

inline void engine::exclude(int peer, std::string_view why) {
  peer_link& link = peers_[index(peer)];
  if (peer == rank() || link.state == presence::finished || link.state == presence::failed) return;
  COMMX_LOG(warn, log_, "declared rank {} lost: {}", peer, why);
  // A peer never dialled has no connection to close, but is gone for good all the same.
  if (link.state == presence::absent) link.state = presence::connecting;
  gone(peer, presence::failed, make_error_code(errc::peer_lost));
}

inline void engine::broken(int peer, std::error_code ec) {
  if (peers_[index(peer)].releasing) return release(peer);  // the end both sides agreed on
  // A peer that had our bye before it finished leaves without one of its own.
  if (peers_[index(peer)].state == presence::present && !leaving_) {
    COMMX_LOG(warn, log_, "lost rank {}: its connection broke ({})", peer,
              ec == asio::error::eof ? "closed without saying bye" : ec.message());
  }
  gone(peer, presence::failed, make_error_code(errc::peer_lost));
}

inline void engine::gone(int peer, presence how, std::error_code why) {
  peer_link& link = peers_[index(peer)];
  if (link.state != presence::present && link.state != presence::connecting) return;
  link.state = how;
  link.dialing = false;
  link.incoming = false;
  link.releasing = false;
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
  // An any_source receive stays posted: its communicator decides (events_ wakes its wait).
  std::erase_if(posted_, [&](const std::shared_ptr<operation>& op) {
    if (op->peer != peer) return false;
    finish(*op, result);
    return true;
  });
  if (ext_.peer_gone) ext_.peer_gone(peer, why);
  ++events_;
}

inline bool engine::reach(int peer) {
  peer_link& link = peers_[index(peer)];
  if (link.state == presence::present || link.state == presence::connecting) return true;
  if (link.state != presence::absent || !joined_) return false;
  link.state = presence::connecting;
  link.conn = std::make_unique<connection>(io_);
  dial_peer(peer, clock::now() + cfg_.timeout, std::chrono::milliseconds(10));
  return true;
}

inline void engine::dial_peer(int peer, clock::time_point until,
                              std::chrono::milliseconds backoff) {
  peers_[index(peer)].dialing = true;
  COMMX_LOG(debug, log_, "dialing rank {}", peer);
  // Whatever this dial meets, a connection made the other way, or the peer's loss, has the
  // last word: an outcome that finds the link no longer waiting on this dial changes nothing.
  const auto still_mine = [this, peer] {
    const peer_link& l = peers_[index(peer)];
    return l.state == presence::connecting && l.dialing;
  };
  const auto lose = [this, peer](errc code, const std::string& why) {
    peer_link& l = peers_[index(peer)];
    l.dialing = false;
    if (l.incoming) return;  // its own handshake to us is finishing: that one will do
    COMMX_LOG(warn, log_, "cannot connect to rank {}: {}", peer, why);
    gone(peer, presence::failed, make_error_code(code));
  };
  dial_rank(
      peer, until, [=, this](const std::string& failure, asio::ip::tcp::socket socket, bool token) {
        // Connected the other way meanwhile: the handshake still runs, so that the peer hears
        // `crossed` from it rather than a stranger's silence.
        if (departed(peer)) return;
        if (!failure.empty() && !still_mine()) return;
        if (!failure.empty()) {
          return lose(token ? errc::authentication_failed : errc::peer_lost,
                      fmt::format("{} at {}", failure, text_of(table_[index(peer)])));
        }
        handshake::hello me{handshake::purpose::peer, rank(), size(), handshake::fresh_nonce()};
        me.tls = cfg_.tls.wanted(cfg_.site, table_.at(index(peer)).site);
        auto session = std::make_shared<client_session>(
            std::move(socket), cfg_.token, me, peer, until,
            [=, this](client_session& c, bool ok, const std::string& reason, bool refused) {
              if (!still_mine()) return;  // the socket closes with the session
              peer_link& l = peers_[index(peer)];
              if (ok) {
                l.dialing = false;
                return adopt(peer, std::move(c.socket), std::move(c.tls));
              }
              if (c.crossed) {  // the peer's own dial to us is the one kept: wait for it
                l.dialing = false;
                COMMX_LOG(debug, log_, "dial to rank {} crossed its own", peer);
                // If it never comes (the peer's dial failed, or the peer left before it got
                // through), dial again: the answer is `crossed` again while the peer still
                // dials, and a refusal or a closed port otherwise, which settles the link.
                auto patience = std::make_shared<asio::steady_timer>(io_, crossed_patience);
                patience->async_wait([=, this](std::error_code ec) {
                  (void)patience;
                  const peer_link& w = peers_[index(peer)];
                  if (ec || w.state != presence::connecting || w.dialing || w.incoming) return;
                  if (clock::now() >= until) {
                    return lose(errc::peer_lost, "its own connection to this rank never came");
                  }
                  dial_peer(peer, until, backoff);
                });
                return;
              }
              if (c.turned_away && clock::now() + backoff < until) {
                auto pause = std::make_shared<asio::steady_timer>(io_, backoff);
                pause->async_wait([=, this](std::error_code ec) {
                  (void)pause;  // the timer lives until its wait ends
                  if (!ec && still_mine()) {
                    dial_peer(peer, until, std::min(backoff * 2, max_backoff));
                  }
                });
                return;
              }
              lose(refused ? errc::authentication_failed : errc::peer_lost,
                   fmt::format("handshake: {}", reason));
            },
            tls_.get());
        session->start();
      });
}

inline void engine::lost_incoming(int peer) {
  peer_link& link = peers_[index(peer)];
  if (!link.incoming) return;
  link.incoming = false;
  // Its handshake failed after all: this rank connects itself, for what waits on the pair.
  if (link.state == presence::connecting && !link.dialing) {
    dial_peer(peer, clock::now() + cfg_.timeout, std::chrono::milliseconds(10));
  }
}

inline void engine::adopt(int peer, asio::ip::tcp::socket socket,
                          std::unique_ptr<tls_channel> secure, bool rendezvous) {
  peer_link& link = peers_[index(peer)];
  link.dialing = false;
  link.incoming = false;
  if (link.conn && !link.conn->open) {
    link.conn->attach(std::move(socket), std::move(secure));  // frames may be waiting
  } else {
    link.conn = std::make_unique<connection>(
        std::move(socket), std::move(secure),
        rendezvous ? connection::rendezvous_staging_size : connection::first_staging_size);
  }
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
  // Leaving already: this peer, which dialed us late, hears our bye as the others did.
  if (leaving_ && link.state == presence::present) push_control(peer, frame_kind::bye, 0);
  flush(peer);
}

inline void engine::log_refusal(const asio::ip::tcp::endpoint& from, const std::string& why) {
  COMMX_LOG(warn, log_, "refused a connection from {}: {}", text_of(from), why);
}

inline handshake::verdict_code engine::welcome(const handshake::hello& h) {
  // A relay's caller has come to the wrong port: ranks do not relay.
  if (h.size != size() || h.rank == rank() || h.why == handshake::purpose::relay)
    return handshake::verdict_code::unexpected;
  if (h.why == handshake::purpose::stream) {
    // Or still dialing the peer: it accepted our connection (else it would not open a
    // path over it) and its stream may outrun its verdict.
    const peer_link& link = peers_[index(h.rank)];
    const bool linked =
        link.state == presence::present || (link.state == presence::connecting && link.dialing);
    return ext_.adopt_stream && linked ? handshake::verdict_code::accepted
                                       : handshake::verdict_code::unexpected;
  }
  peer_link& link = peers_[index(h.rank)];
  if (h.why == handshake::purpose::join) {
    if (rank() != 0 || joined_ || link.state != presence::absent) {
      return handshake::verdict_code::unexpected;
    }
    return handshake::verdict_code::accepted;
  }
  // A peer's dial on first use. Where this rank dials it too, the lower rank's dial wins; a
  // dial to a rank already connected (it crossed ours and lost) is not needed either.
  switch (link.state) {
    case presence::absent:
      break;
    case presence::connecting:
      if (link.incoming) return handshake::verdict_code::unexpected;  // a second one
      if (link.dialing && h.rank > rank()) return handshake::verdict_code::crossed;
      break;
    case presence::present:
      // The rendezvous's connection, whose end has not reached this rank yet: the peer dials
      // only once it has the table and has closed its side, so nothing more comes on it.
      if (!link.releasing) return handshake::verdict_code::crossed;
      release(h.rank);
      break;
    case presence::finished:
    case presence::failed:
      return handshake::verdict_code::unexpected;  // gone for good: never readmitted
  }
  if (!link.conn) link.conn = std::make_unique<connection>(io_);
  link.state = presence::connecting;
  link.incoming = true;
  return handshake::verdict_code::accepted;
}

inline void engine::accept_next() {
  acceptor_->async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;
    if (!ec) on_accepted(std::move(socket));
    make_room();
    if (pending_handshakes_ < max_pending_handshakes) return accept_next();
    accept_paused_ = true;  // the backlog holds the next ones until a handshake ends
    COMMX_LOG(debug, log_, "{} handshakes in progress: accepting paused", pending_handshakes_);
  });
}

inline void engine::make_room() {
  std::erase_if(sessions_, [](const std::weak_ptr<server_session>& w) {
    const auto s = w.lock();
    return !s || s->finished();
  });
  if (pending_handshakes_ < max_pending_handshakes) return;
  // The oldest connection that has not proved the token within `proof_allowed` goes: a rank
  // answers the challenge at once (and a rank turned away dials again), so this is most
  // likely a stranger.
  const clock::time_point now = clock::now();
  for (const auto& w : sessions_) {
    const auto s = w.lock();
    if (!s || s->proven()) continue;
    if (now - s->accepted_at >= proof_allowed) return s->evict();
    // None has taken long enough yet: look again when this one will have.
    room_timer_.expires_at(s->accepted_at + proof_allowed);
    room_timer_.async_wait([this](std::error_code ec) {
      if (ec || !accept_paused_ || !acceptor_ || !acceptor_->is_open()) return;
      make_room();  // an eviction's callback may have resumed accepting already
      if (accept_paused_ && pending_handshakes_ < max_pending_handshakes) {
        accept_paused_ = false;
        accept_next();
      }
    });
    return;
  }
}

inline void engine::on_accepted(asio::ip::tcp::socket socket) {
  ++pending_handshakes_;
  const clock::time_point until =
      clock::now() + std::min<clock::duration>(cfg_.timeout, std::chrono::seconds(10));
  auto session = std::make_shared<server_session>(
      std::move(socket), cfg_.token, rank(), size(), until,
      [this](const handshake::hello& h) { return welcome(h); },
      [this](server_session& s, bool ok, const std::string& why) {
        --pending_handshakes_;
        if (accept_paused_ && acceptor_ && acceptor_->is_open()) {
          accept_paused_ = false;
          accept_next();
        }
        if (!ok) {
          if (s.welcomed && s.peer.why == handshake::purpose::peer) lost_incoming(s.peer.rank);
          if (s.refused_as == handshake::verdict_code::crossed) {
            COMMX_LOG(debug, log_, "kept the other connection with rank {}: {}", s.peer.rank, why);
            return;
          }
          // A rank of this job whose dial crossed ours and lost, reaching us only after its bye
          // or once we leave (ranks taking turns on the cores): refused all the same, but no
          // stranger to warn of.
          const bool late = s.refused_as == handshake::verdict_code::unexpected &&
                            s.peer.why == handshake::purpose::peer && s.peer.size == size() &&
                            s.peer.rank >= 0 && s.peer.rank < size() &&
                            (leaving_ || peers_[index(s.peer.rank)].state == presence::finished);
          if (late) {
            COMMX_LOG(debug, log_, "refused a late dial of rank {}: {}", s.peer.rank, why);
            return;
          }
          return log_refusal(s.remote, why);
        }
        if (s.peer.why == handshake::purpose::stream) {
          if (ext_.adopt_stream) {
            ext_.adopt_stream(s.peer.rank, std::move(s.socket), std::move(s.tls));
          }
          return;
        }
        // The peer may have been found gone meanwhile: then its connection is not wanted.
        const presence now = peers_[index(s.peer.rank)].state;
        if (now != presence::absent && now != presence::connecting) {
          return log_refusal(s.remote,
                             fmt::format("rank {} is already connected or gone", s.peer.rank));
        }
        adopt(s.peer.rank, std::move(s.socket), std::move(s.tls),
              s.peer.why == handshake::purpose::join);
      },
      tls_policy{tls_.get(), cfg_.tls.mode == tls_mode::on});
  sessions_.push_back(session);
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
  try {
    const auto close_port = [this] {
      if (!acceptor_) return;
      std::error_code ignored;
      acceptor_->close(ignored);
    };
    if (failing) {
      leaving_ = true;
      close_port();
      for (peer_link& l : peers_) {
        if (l.conn && l.conn->open) l.conn->close();
      }
      return;
    }
    const clock::time_point until =
        clock::now() + std::min<clock::duration>(cfg_.timeout, std::chrono::seconds(10));
    // Connections still being made settle first, with the port open: messages may wait for
    // them, and a peer whose connection this rank has let in (or whose dial crossed ours)
    // must hear our bye on it rather than find the port closed.
    const auto delivered = [&] {
      return std::none_of(peers_.begin(), peers_.end(),
                          [](const peer_link& l) { return l.state == presence::connecting; });
    };
    while (!delivered() && clock::now() < until) io_.run_one_until(until);
    leaving_ = true;
    close_port();
    for (int r = 0; r < size(); ++r) {
      if (peers_[index(r)].state == presence::present) push_control(r, frame_kind::bye, 0);
    }
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
