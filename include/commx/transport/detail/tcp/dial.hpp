// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Connecting to an endpoint, directly or through a commx-relay: the one way the tcp engine,
/// wan's data streams and the relay itself (its next hop) open a connection. Through a relay
/// it connects to the relay, authenticates both ways (handshake.hpp, purpose relay, as the
/// rank it is), asks for the target (route.hpp) and waits for `connected`; from then on the
/// socket reaches the target as if connected to it, and the caller's own handshake runs end
/// to end. Asynchronous and under one deadline, like the handshake sessions.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <asio.hpp>
#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/log.hpp"
#include "commx/transport/detail/tcp/handshake.hpp"
#include "commx/transport/detail/tcp/route.hpp"
#include "commx/transport/detail/tcp/session.hpp"
#include "commx/transport/detail/tcp/wire.hpp"

namespace commx::detail::tcp {

inline asio::ip::tcp::endpoint endpoint_of(const endpoint_record& e) {
  if (e.v6) {
    asio::ip::address_v6::bytes_type bytes{};
    std::copy(e.address.begin(), e.address.end(), bytes.begin());
    return {asio::ip::address_v6(bytes), e.port};
  }
  asio::ip::address_v4::bytes_type bytes{};
  std::copy(e.address.begin(), e.address.begin() + 4, bytes.begin());
  return {asio::ip::address_v4(bytes), e.port};
}

/// `host:port`, `[v6]:port`.
inline std::string text_of(const asio::ip::tcp::endpoint& ep) {
  const std::string address = ep.address().to_string();
  return ep.address().is_v6() ? fmt::format("[{}]:{}", address, ep.port())
                              : fmt::format("{}:{}", address, ep.port());
}

inline std::string text_of(const endpoint_record& e) {
  const std::string at = text_of(endpoint_of(e));
  return e.site.empty() ? at : fmt::format("{} at site {}", at, e.site);
}

/// Who dials, through which relay, with which token.
struct dial_identity {
  std::string_view token;
  int rank = 0;
  int size = 1;
  std::optional<asio::ip::tcp::endpoint> relay;  ///< unset: connect directly
  std::string_view stack = "tcp";                ///< for log lines (log.hpp)
};

/// One connection attempt. `done(failure, socket, token_refused)`: failure is empty on success.
class dialer : public std::enable_shared_from_this<dialer> {
 public:
  using done_fn = std::function<void(const std::string&, asio::ip::tcp::socket, bool)>;

  /// The first hop: the relay, or the target itself.
  static asio::ip::tcp::endpoint first_hop(const dial_identity& who,
                                           const endpoint_record& target) {
    return who.relay ? *who.relay : endpoint_of(target);
  }

  /// Dials with `opened` when it is open (a socket opened for first_hop()'s protocol, with
  /// options that must be set before connecting, such as buffer sizes), else a fresh one.
  /// `done` runs from the io_context, never from within start().
  static void start(asio::io_context& io, const dial_identity& who, const endpoint_record& target,
                    clock::time_point until, done_fn done,
                    std::optional<asio::ip::tcp::socket> opened = std::nullopt) {
    auto d = std::shared_ptr<dialer>(new dialer(io, who, target, until, std::move(done)));
    if (opened && opened->is_open()) d->socket_ = std::move(*opened);
    d->connect();
  }

 private:
  dialer(asio::io_context& io, const dial_identity& who, const endpoint_record& target,
         clock::time_point until, done_fn done)
      : socket_(io),
        timer_(io),
        who_(who),
        target_(target),
        until_(until),
        done_(std::move(done)) {}

  void connect() {
    const auto where = first_hop(who_, target_);
    timer_.expires_at(until_);
    timer_.async_wait([self = shared_from_this()](std::error_code tec) {
      if (!tec) self->finish("no answer before the deadline", false);
    });
    socket_.async_connect(where, [self = shared_from_this()](std::error_code ec) {
      if (self->finished_) return;
      if (ec) {
        return self->finish(self->who_.relay ? fmt::format("cannot connect to the relay at {}:{}: "
                                                           "{}",
                                                           self->who_.relay->address().to_string(),
                                                           self->who_.relay->port(), ec.message())
                                             : ec.message(),
                            false);
      }
      if (!self->who_.relay) return self->finish({}, false);
      self->authenticate();
    });
  }

  void authenticate() {
    auto session = std::make_shared<client_session>(
        std::move(socket_), who_.token,
        handshake::hello{handshake::purpose::relay, who_.rank, who_.size, handshake::fresh_nonce()},
        who_.rank, until_,
        [self = shared_from_this()](client_session& s, bool ok, const std::string& why,
                                    bool token) {
          if (self->finished_) return;
          self->socket_ = std::move(s.socket);
          if (!ok) return self->finish(fmt::format("the relay: {}", why), token);
          self->ask();
        });
    session->start();
  }

  void ask() {
    request_ = route::encode_request(target_);
    asio::async_write(socket_, asio::buffer(request_),
                      [self = shared_from_this()](std::error_code ec, std::size_t) {
                        if (self->finished_) return;
                        if (ec) return self->finish("the relay closed before the request", false);
                        asio::async_read(
                            self->socket_, asio::buffer(self->reply_),
                            [self](std::error_code rec, std::size_t) { self->on_reply(rec); });
                      });
  }

  void on_reply(std::error_code ec) {
    if (finished_) return;
    if (ec) return finish("the relay closed before its reply", false);
    const auto code = route::decode_reply(reply_);
    if (!code) return finish("the relay sent a malformed reply", false);
    const log::context ctx{who_.stack, who_.rank};
    if (*code != route::route_code::connected) {
      COMMX_LOG(warn, ctx, "the relay at {} refused the route to {}: {}", text_of(*who_.relay),
                text_of(target_), route::describe(*code));
      return finish(fmt::format("the relay: {}", route::describe(*code)), false);
    }
    COMMX_LOG(info, ctx, "route to {} set up through the relay at {}", text_of(target_),
              text_of(*who_.relay));
    finish({}, false);
  }

  void finish(const std::string& failure, bool token) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    std::error_code ignored;
    if (!failure.empty()) socket_.close(ignored);
    done_(failure, std::move(socket_), token);
  }

  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  dial_identity who_;
  endpoint_record target_;
  clock::time_point until_;
  done_fn done_;
  bool finished_ = false;
  route::request_bytes request_{};
  route::reply_bytes reply_{};
};

}  // namespace commx::detail::tcp
