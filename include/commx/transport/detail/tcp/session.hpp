// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The handshake of handshake.hpp run on a socket, asynchronously, under a deadline: the
/// accepting side (`server_session`) and the connecting side (`client_session`). Each ends in
/// one call of its `done` callback, with the socket authenticated or with the reason it was
/// refused (the socket is then closed). Nothing here blocks: a stranger that connects and says
/// nothing costs a timer and a socket until its deadline, never the job's progress. A hello that
/// asks for TLS is followed by the TLS handshake (tls.hpp), under the same deadline; the session
/// then hands over its `tls` channel with the socket.

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <asio.hpp>

#include "commx/deadline.hpp"
#include "commx/transport/detail/tcp/handshake.hpp"
#include "commx/transport/detail/tcp/tls.hpp"

namespace commx::detail::tcp {

/// What an accepting side does about TLS.
struct tls_policy {
  tls_context* context = nullptr;  ///< null: TLS is off here (a hello asking for it is refused)
  bool required = false;           ///< a hello not asking for it is refused
};

/// The accepting side. `welcome(hello)` decides, once the peer has proved it holds the token,
/// whether this rank expects it. A relay, which has no rank, passes rank -1: it answers as the
/// rank that calls it.
class server_session : public std::enable_shared_from_this<server_session> {
 public:
  using welcome_fn = std::function<handshake::verdict_code(const handshake::hello&)>;
  /// (session, accepted, why refused)
  using done_fn = std::function<void(server_session&, bool, const std::string&)>;

  server_session(asio::ip::tcp::socket s, std::string_view token, int rank, int size,
                 clock::time_point until, welcome_fn welcome, done_fn done, tls_policy tls = {})
      : socket(std::move(s)),
        token_(token),
        tls_policy_(tls),
        rank_(rank),
        size_(size),
        timer_(socket.get_executor()),
        until_(until),
        welcome_(std::move(welcome)),
        done_(std::move(done)) {}

  void start() {
    accepted_at = clock::now();
    std::error_code ignored;
    remote = socket.remote_endpoint(ignored);
    timer_.expires_at(until_);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (!ec) self->fail("no complete handshake before the deadline");
    });
    asio::async_read(
        socket, asio::buffer(hello_in_),
        [self = shared_from_this()](std::error_code ec, std::size_t) { self->on_hello(ec); });
  }

  asio::ip::tcp::socket socket;
  std::unique_ptr<tls_channel> tls;  ///< the TLS session over `socket`, if the peer asked
  asio::ip::tcp::endpoint remote;
  handshake::hello peer;
  /// `welcome` accepted the peer (it may still fail after: TLS, a broken connection).
  bool welcomed = false;
  /// What the session told a peer it refused (accepted: it was not refused, or said nothing).
  handshake::verdict_code refused_as = handshake::verdict_code::accepted;

  /// Whether the peer has proved it holds the token: a connection that has not, for a while,
  /// goes when the acceptor has too many handshakes in progress (evict()). A stranger can
  /// send a well-formed hello without the token, not a proof.
  [[nodiscard]] bool proven() const { return proven_ || finished_; }
  clock::time_point accepted_at{};
  [[nodiscard]] bool finished() const { return finished_; }
  /// Closes a connection that has not proved itself, making room for others.
  void evict() { fail("evicted before it proved the token: too many handshakes in progress"); }

 private:
  void on_hello(std::error_code ec) {
    if (finished_) return;
    if (ec) return fail("closed before a whole hello");
    const auto h = handshake::decode_hello(hello_in_);
    if (!h) return fail("malformed hello: not a commx peer");
    peer = *h;
    const bool relay = rank_ < 0;
    challenge_ = handshake::make_challenge(
        token_, hello_in_,
        {relay ? peer.rank : rank_, relay ? peer.size : size_, handshake::fresh_nonce()});
    asio::async_write(socket, asio::buffer(challenge_),
                      [self = shared_from_this()](std::error_code wec, std::size_t) {
                        if (self->finished_) return;
                        if (wec) return self->fail("closed during the handshake");
                        asio::async_read(
                            self->socket, asio::buffer(self->response_in_),
                            [self](std::error_code rec, std::size_t) { self->on_response(rec); });
                      });
  }

  void on_response(std::error_code ec) {
    if (finished_) return;
    if (ec) return fail("closed before a whole response");
    if (!handshake::check_response(token_, hello_in_, challenge_, response_in_)) {
      return refuse(handshake::verdict_code::bad_proof,
                    "wrong token: its proof does not match the job token");
    }
    proven_ = true;
    const handshake::verdict_code code = welcome_(peer);
    welcomed = code == handshake::verdict_code::accepted;
    if (code == handshake::verdict_code::crossed) {
      return refuse(code, fmt::format("rank {} dialed while a connection to it exists or is "
                                      "being made: the other one is kept",
                                      peer.rank));
    }
    if (code != handshake::verdict_code::accepted) {
      return refuse(code, fmt::format("rank {} of {} is not expected here (connected already, "
                                      "gone for good, or a different job size)",
                                      peer.rank, peer.size));
    }
    if (peer.tls && tls_policy_.context == nullptr) {
      return refuse(handshake::verdict_code::tls_off,
                    fmt::format("rank {} asked for TLS, which is off here (COMMX_TLS)", peer.rank));
    }
    if (!peer.tls && tls_policy_.required) {
      return refuse(
          handshake::verdict_code::tls_required,
          fmt::format("rank {} did not ask for TLS, which COMMX_TLS=on requires here", peer.rank));
    }
    verdict_ = handshake::make_verdict(code);
    asio::async_write(socket, asio::buffer(verdict_),
                      [self = shared_from_this()](std::error_code wec, std::size_t) {
                        if (self->finished_) return;
                        if (wec) return self->fail("closed before the verdict");
                        if (!self->peer.tls) return self->succeed();
                        self->tls = std::make_unique<tls_channel>(
                            *self->tls_policy_.context, self->socket,
                            handshake::tls_key(self->token_, self->hello_in_, self->challenge_));
                        self->tls->async_handshake(false, [self](std::error_code hec) {
                          if (self->finished_) return;
                          if (hec) return self->fail(tls_channel::failure_text(hec));
                          self->succeed();
                        });
                      });
  }

  void succeed() {
    finished_ = true;
    timer_.cancel();
    done_(*this, true, {});
  }

  // Tells an authenticated-looking peer why it is refused, then closes.
  void refuse(handshake::verdict_code code, std::string why) {
    refused_as = code;
    verdict_ = handshake::make_verdict(code);
    asio::async_write(socket, asio::buffer(verdict_),
                      [self = shared_from_this(), why = std::move(why)](
                          std::error_code, std::size_t) { self->fail(why); });
  }

  void fail(const std::string& why) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    std::error_code ignored;
    socket.close(ignored);
    done_(*this, false, why);
  }

  std::string_view token_;
  tls_policy tls_policy_;
  int rank_;
  int size_;
  asio::steady_timer timer_;
  clock::time_point until_;
  welcome_fn welcome_;
  done_fn done_;
  bool finished_ = false;
  bool proven_ = false;
  handshake::hello_bytes hello_in_{};
  handshake::challenge_bytes challenge_{};
  handshake::response_bytes response_in_{};
  handshake::verdict_bytes verdict_{};
};

/// The connecting side: says who it is and why, checks that the acceptor holds the token and
/// is the rank it meant (`expect_rank`), and proves it holds the token itself.
class client_session : public std::enable_shared_from_this<client_session> {
 public:
  /// (session, accepted, why refused, refused because of the token)
  using done_fn = std::function<void(client_session&, bool, const std::string&, bool)>;

  /// `tls`: the context of the TLS handshake that follows when `me.tls` asks for one.
  client_session(asio::ip::tcp::socket s, std::string_view token, handshake::hello me,
                 int expect_rank, clock::time_point until, done_fn done, tls_context* tls = nullptr)
      : socket(std::move(s)),
        token_(token),
        tls_context_(me.tls ? tls : nullptr),
        hello_(handshake::encode(asking(me, tls_context_ != nullptr))),
        size_(me.size),
        expect_rank_(expect_rank),
        timer_(socket.get_executor()),
        until_(until),
        done_(std::move(done)) {}

  void start() {
    timer_.expires_at(until_);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (!ec) self->fail("no complete handshake before the deadline", false);
    });
    asio::async_write(
        socket, asio::buffer(hello_), [self = shared_from_this()](std::error_code ec, std::size_t) {
          if (self->finished_) return;
          if (ec) return self->fail("closed before the hello went out", false);
          asio::async_read(self->socket, asio::buffer(self->challenge_in_),
                           [self](std::error_code rec, std::size_t) { self->on_challenge(rec); });
        });
  }

  asio::ip::tcp::socket socket;
  std::unique_ptr<tls_channel> tls;  ///< the TLS session over `socket`, if the hello asked
  /// The acceptor keeps another connection with this rank (verdict_code::crossed).
  bool crossed = false;
  /// The acceptor closed before its challenge or its verdict: too busy (its handshakes are
  /// bounded, and it evicts those that take long), or gone. A rank dialing a peer listed in
  /// the job's table tries again.
  bool turned_away = false;

 private:
  void on_challenge(std::error_code ec) {
    if (finished_) return;
    if (ec) {
      turned_away = true;
      return fail("closed by the acceptor before its challenge", false);
    }
    const auto c = handshake::check_challenge(token_, hello_, challenge_in_);
    if (!c) return fail("the acceptor could not prove it holds the job token", true);
    if (c->rank != expect_rank_ || c->size != size_) {
      return fail(fmt::format("the acceptor is rank {} of {}, not rank {} of {}", c->rank, c->size,
                              expect_rank_, size_),
                  false);
    }
    response_ = handshake::make_response(token_, hello_, challenge_in_);
    asio::async_write(socket, asio::buffer(response_),
                      [self = shared_from_this()](std::error_code wec, std::size_t) {
                        if (self->finished_) return;
                        if (wec) {
                          self->turned_away = true;
                          return self->fail("closed during the handshake", false);
                        }
                        asio::async_read(
                            self->socket, asio::buffer(self->verdict_in_),
                            [self](std::error_code rec, std::size_t) { self->on_verdict(rec); });
                      });
  }

  void on_verdict(std::error_code ec) {
    if (finished_) return;
    if (ec) {
      turned_away = true;
      return fail("closed by the acceptor before its verdict", false);
    }
    const auto code = handshake::decode_verdict(verdict_in_);
    if (!code) return fail("malformed verdict", false);
    if (*code == handshake::verdict_code::bad_proof)
      return fail("the acceptor refused our proof: a different job token", true);
    if (*code == handshake::verdict_code::tls_required) {
      return fail("the acceptor encrypts every connection (COMMX_TLS=on there, not here)", false);
    }
    if (*code == handshake::verdict_code::tls_off) {
      return fail("the acceptor has TLS off (COMMX_TLS=off there, not here)", false);
    }
    if (*code == handshake::verdict_code::crossed) {
      crossed = true;
      return fail("the acceptor keeps its own connection with this rank", false);
    }
    if (*code != handshake::verdict_code::accepted)
      return fail("the acceptor does not expect this rank (a different job?)", false);
    if (tls_context_ == nullptr) return succeed();
    tls = std::make_unique<tls_channel>(*tls_context_, socket,
                                        handshake::tls_key(token_, hello_, challenge_in_));
    tls->async_handshake(true, [self = shared_from_this()](std::error_code ec) {
      if (self->finished_) return;
      // Refused credentials fail the job as a wrong token does; a broken connection may retry.
      if (ec) {
        return self->fail(tls_channel::failure_text(ec),
                          ec.category() == asio::error::get_ssl_category());
      }
      self->succeed();
    });
  }

  void succeed() {
    finished_ = true;
    timer_.cancel();
    done_(*this, true, {}, false);
  }

  /// The hello asks for TLS only when a context can serve it.
  static handshake::hello asking(handshake::hello me, bool tls) {
    me.tls = tls;
    return me;
  }

  void fail(const std::string& why, bool token) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    std::error_code ignored;
    socket.close(ignored);
    done_(*this, false, why, token);
  }

  std::string_view token_;
  tls_context* tls_context_;
  handshake::hello_bytes hello_;
  int size_;
  int expect_rank_;
  asio::steady_timer timer_;
  clock::time_point until_;
  done_fn done_;
  bool finished_ = false;
  handshake::challenge_bytes challenge_in_{};
  handshake::response_bytes response_{};
  handshake::verdict_bytes verdict_in_{};
};

}  // namespace commx::detail::tcp
