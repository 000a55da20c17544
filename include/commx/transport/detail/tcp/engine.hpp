// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP transport's progress engine: one rank's matching state (posted receives, messages
/// nobody asked for yet), its connections to every other rank, and the protocol on them.
///
/// Single-threaded: everything runs on the calling thread, inside the transport's calls. The
/// engine makes progress when the rank calls into it (isend, irecv, test, iprobe,
/// wait_for_event); waiting blocks in the kernel (epoll, through Asio's io_context), never in a
/// spin loop.
///
/// Protocol, per pair of ranks over one connection (frames: wire.hpp):
/// - A message of at most the eager threshold goes at once as an `eager` frame, while the
///   sender has window credit at the receiver. The receiver puts the payload straight into a
///   posted receive, or holds it until one is posted; holding it costs the sender credit, which
///   the receiver returns (`credit`) as its user takes the messages. So what a receiver holds
///   from each sender is bounded by the window: a flood cannot exhaust its memory.
/// - A larger message (or one without credit) sends its envelope (`rts`) and waits. When a
///   receive matches it the receiver answers `cts`, and the sender writes header and user buffer
///   in one gathered write (`data`), which the receiver reads straight into the user's buffer.
/// - Matching happens as envelopes arrive, in arrival order, so messages from one sender never
///   overtake each other, eager or not.
/// - A peer that says `bye` finished; a connection that ends without it means the peer failed
///   (killed, crashed). Either way every operation waiting on it completes with
///   errc::peer_lost; a failed peer also releases any_source receives. A frame that breaks the
///   protocol closes the connection, and what waited on that peer completes with
///   errc::protocol_violation.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio.hpp>
#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/tcp/config.hpp"
#include "commx/transport/detail/tcp/connection.hpp"
#include "commx/transport/detail/tcp/dial.hpp"
#include "commx/transport/detail/tcp/session.hpp"
#include "commx/transport/detail/tcp/wire.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::tcp {

using transport::op_result;
using transport::recv_buffer;

/// A send or receive that did not complete when it was posted.
struct operation {
  enum class kind : std::uint8_t { send, recv };
  enum class stage : std::uint8_t {
    done,
    posted,         ///< a receive waiting for a matching message
    awaiting_cts,   ///< a rendezvous send whose envelope is out
    writing,        ///< a rendezvous send whose data frame is queued or being written
    awaiting_data,  ///< a receive that matched an envelope and asked for its data
    receiving,      ///< a receive whose payload is arriving now
    queued_self,    ///< a large send to this rank itself, waiting for a receive
  };

  operation(kind k, int peer_rank, context_id context, int message_tag)
      : what(k), peer(peer_rank), ctx(context), tag(message_tag) {}

  kind what;
  int peer;  ///< destination of a send; source (or any_source) of a receive
  context_id ctx;
  int tag;
  recv_buffer buffer{std::span<std::byte>{}};  ///< receives
  std::span<const std::byte> payload;          ///< rendezvous sends
  std::byte* target = nullptr;                 ///< a matched receive's destination
  std::uint64_t cookie = 0;                    ///< rendezvous id
  int stream = -1;  ///< for an extension with several streams: the one to carry it; -1 any
  op_result result;
  stage where = stage::done;
  bool done = false;
};

/// A message that arrived before a matching receive.
struct queued_message {
  enum class form : std::uint8_t { eager, remote_rendezvous, self_rendezvous };
  int source;
  context_id ctx;
  int tag;
  std::uint64_t size;
  form how;
  std::vector<std::byte> eager;
  std::uint64_t cookie = 0;              // remote rendezvous
  std::shared_ptr<operation> self_send;  // self rendezvous
};

/// What a transport built on this engine (transport::wan) plugs in to carry the data of large
/// messages over connections of its own. Every hook is optional: unset, the engine is plain tcp.
struct extension {
  /// A clear-to-send came for rendezvous send `op` to `peer`: true when the extension carries
  /// its data itself (and completes `op` through engine::complete), false to leave it to tcp.
  std::function<bool(int peer, const std::shared_ptr<operation>& op)> carry_data;
  /// A connection from `peer` that authenticated with purpose::stream (the engine does not
  /// keep it).
  std::function<void(int peer, asio::ip::tcp::socket socket)> adopt_stream;
  /// `peer` is gone (finished, or failed with `why`): the extension drops what it holds for it.
  std::function<void(int peer, std::error_code why)> peer_gone;
};

/// A rendezvous receive waiting for its data, as an extension sees it.
struct awaited_receive {
  operation* op;  ///< null: the receive was cancelled, the data is dropped
  std::uint64_t size;
};

class engine {
 public:
  explicit engine(config cfg)
      : keep_running_(asio::make_work_guard(io_)),
        cfg_(std::move(cfg)),
        peers_(static_cast<std::size_t>(cfg_.size)),
        nodes_(static_cast<std::size_t>(cfg_.size), 0) {
    for (auto& p : peers_) p.send_credit = cfg_.window;
  }

  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  /// Says bye to every peer, unless the endpoint goes away because of an exception: then the
  /// peers see a failed rank (no bye), and their any_source receives stop waiting for it.
  ~engine() { leave(std::uncaught_exceptions() > 0); }

  [[nodiscard]] int rank() const { return cfg_.rank; }
  [[nodiscard]] int size() const { return cfg_.size; }
  [[nodiscard]] int node_of(int peer) const { return nodes_.at(index(peer)); }
  [[nodiscard]] std::uint64_t event_count() const { return events_; }

  /// This rank's listen endpoint (after the rendezvous), for tests.
  [[nodiscard]] std::optional<asio::ip::tcp::endpoint> listen_endpoint() const {
    if (!acceptor_) return std::nullopt;
    std::error_code ec;
    auto ep = acceptor_->local_endpoint(ec);
    if (ec) return std::nullopt;
    return ep;
  }

  // --- for an extension (transport::wan) -------------------------------------------------

  void extend(extension hooks) { ext_ = std::move(hooks); }
  asio::io_context& io() { return io_; }
  /// Connects to `peer`'s listen endpoint, through this site's relay when the peer is at
  /// another site (dial.hpp); `done(failure, socket, token_refused)`.
  void dial_rank(int peer, clock::time_point until, dialer::done_fn done,
                 std::optional<asio::ip::tcp::socket> opened = std::nullopt) {
    dial(table_.at(index(peer)), until, std::move(done), std::move(opened));
  }
  /// Where a connection to `peer` goes first: this site's relay, or the peer.
  [[nodiscard]] asio::ip::tcp::endpoint first_hop(int peer) const {
    return dialer::first_hop(identity(table_.at(index(peer))), table_.at(index(peer)));
  }
  [[nodiscard]] bool connected(int peer) const {
    return peers_[index(peer)].state == presence::present;
  }
  /// Completes `op` (a send whose data the extension carried) with `result`.
  void complete(operation& op, op_result result) { finish(op, result); }
  /// The receive waiting for rendezvous `cookie`'s data from `peer`, if any.
  [[nodiscard]] std::optional<awaited_receive> awaited(int peer, std::uint64_t cookie) const {
    const auto& waiting = peers_[index(peer)].awaiting_data;
    const auto it = waiting.find(cookie);
    if (it == waiting.end()) return std::nullopt;
    return awaited_receive{it->second.op.get(), it->second.size};
  }
  /// All of rendezvous `cookie`'s data from `peer` has arrived: its receive completes.
  void finish_awaited(int peer, std::uint64_t cookie) {
    auto& waiting = peers_[index(peer)].awaiting_data;
    const auto it = waiting.find(cookie);
    if (it == waiting.end()) return;
    std::shared_ptr<operation> op = std::move(it->second.op);
    waiting.erase(it);
    if (op) finish(*op, op->result);
  }
  /// Ends the job's connection with `peer` as failed: what waits on it completes with `why`.
  void fail_peer(int peer, errc why, std::string_view text) {
    if (!connected(peer)) return;
    fmt::print(stderr, "commx {}: rank {}: closing the connection to rank {}: {}\n",
               ext_.carry_data ? "wan" : "tcp", rank(), peer, text);
    std::fflush(stderr);
    gone(peer, presence::failed, make_error_code(why));
  }

  // --- the transport's operations -------------------------------------------------------

  std::shared_ptr<operation> isend(int dest, context_id ctx, int tag,
                                   std::span<const std::byte> data) {
    if (dest == rank()) return send_to_self(ctx, tag, data);
    peer_link& link = peers_[index(dest)];
    if (link.state != presence::present) {
      return completed(operation::kind::send, dest, ctx, tag, lost(dest, data.size()));
    }
    connection& c = *link.conn;
    const std::uint64_t cost = data.size() + header_size;
    if (data.size() <= cfg_.eager_threshold && link.send_credit >= cost) {
      link.send_credit -= cost;
      const header_bytes header =
          encode(frame_header{frame_kind::eager, 0, rank(), tag, ctx, data.size(), 0});
      std::error_code ec;
      const std::size_t n = c.write_now(header, data, ec);
      if (ec) {
        broken(dest, ec);
        return completed(operation::kind::send, dest, ctx, tag, lost(dest, data.size()));
      }
      if (n == header_size + data.size()) return nullptr;
      out_frame& f = c.out.emplace_back();
      f.header = header;
      f.owned.assign(data.begin(), data.end());
      f.payload = f.owned;
      f.written = n;
      flush(dest);
      return nullptr;
    }
    auto op = std::make_shared<operation>(operation::kind::send, dest, ctx, tag);
    op->payload = data;
    op->cookie = link.next_cookie++;
    op->where = operation::stage::awaiting_cts;
    link.awaiting_cts.emplace(op->cookie, op);
    out_frame& f = c.out.emplace_back();
    f.header = encode(frame_header{frame_kind::rts, 0, rank(), tag, ctx, data.size(), op->cookie});
    f.cookie = op->cookie;
    flush(dest);
    return op;
  }

  std::shared_ptr<operation> irecv(int source, context_id ctx, int tag, recv_buffer buffer) {
    auto op = std::make_shared<operation>(operation::kind::recv, source, ctx, tag);
    op->buffer = buffer;
    auto queued = find_queued(source, ctx, tag);
    if (queued != unexpected_.end()) {
      take(op, queued);
      return op;
    }
    if (auto gone = lost_source(source)) {
      finish(*op, *gone);
      return op;
    }
    op->where = operation::stage::posted;
    posted_.push_back(op);
    return op;
  }

  bool test(const std::shared_ptr<operation>& op) {
    if (!op || op->done) return true;
    poll();
    return op->done;
  }

  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    poll();
    auto queued = find_queued(source, ctx, tag);
    if (queued != unexpected_.end()) {
      return op_result{queued->source, queued->tag, static_cast<std::size_t>(queued->size), {}};
    }
    return lost_source(source);
  }

  /// Withdraws `op` if it has not completed; see the transport's cancel.
  bool cancel(const std::shared_ptr<operation>& op) {
    if (!op || op->done) return false;
    const op_result cancelled{op->peer, op->tag, 0, make_error_code(errc::cancelled)};
    switch (op->where) {
      case operation::stage::posted:
        std::erase(posted_, op);
        break;
      case operation::stage::awaiting_data: {
        // The data is on its way: it will be read and dropped.
        auto& waiting = peers_[index(op->result.source)].awaiting_data;
        if (auto it = waiting.find(op->cookie); it != waiting.end()) it->second.op = nullptr;
        break;
      }
      case operation::stage::receiving: {
        connection& c = *peers_[index(op->result.source)].conn;
        c.receiving = nullptr;
        c.destination = nullptr;  // the rest of the payload is dropped
        c.into_holding = false;
        break;
      }
      case operation::stage::awaiting_cts:
      case operation::stage::writing: {
        peer_link& link = peers_[index(op->peer)];
        link.awaiting_cts.erase(op->cookie);
        connection& c = *link.conn;
        auto frame = std::find_if(c.out.begin(), c.out.end(), [&](const out_frame& f) {
          return f.cookie == op->cookie && f.written < f.total();
        });
        const bool data_started =
            op->where == operation::stage::writing && frame != c.out.end() && frame->written > 0;
        if (data_started) {
          // Half written: the rest must follow or the stream breaks. Keep a copy instead of
          // the caller's buffer, and call the send complete.
          const std::size_t sent = frame->written > header_size ? frame->written - header_size : 0;
          frame->owned.assign(frame->payload.begin() + static_cast<std::ptrdiff_t>(sent),
                              frame->payload.end());
          frame->payload = frame->owned;
          frame->written = std::min(frame->written, header_size);  // the header's own progress
          frame->completes = nullptr;
          finish(*op, {op->peer, op->tag, op->payload.size(), {}});
          return false;
        }
        // An envelope not yet started is simply dropped; once the receiver may have seen it,
        // it hears that the message is withdrawn.
        const bool unstarted = frame != c.out.end() && frame->written == 0;
        const bool envelope_out = op->where == operation::stage::writing || !unstarted;
        if (unstarted) c.out.erase(frame);
        if (envelope_out) push_control(op->peer, frame_kind::revoke, op->cookie);
        break;
      }
      case operation::stage::queued_self:
        std::erase_if(unexpected_, [&](const queued_message& m) { return m.self_send == op; });
        break;
      case operation::stage::done:
        return false;
    }
    finish(*op, cancelled);
    return true;
  }

  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    // Optionally (COMMX_TCP_POLL) poll a few turns, yielding, before sleeping in epoll: on an
    // idle machine that can save a wake-up; on a loaded one it costs (config.hpp).
    for (std::size_t turn = 0; turn < cfg_.poll_turns; ++turn) {
      poll();
      if (events_ != seen || clock::now() >= when) return;
      std::this_thread::yield();
    }
    while (events_ == seen && clock::now() < when) io_.run_one_until(when);
  }

  // --- the rendezvous -------------------------------------------------------------------

  /// Joins the job: rank 0 collects every rank's listen endpoint at COMMX_ROOT and hands out
  /// the table; every rank then connects to the ranks below it and accepts those above.
  /// @throws commx::error errc::bootstrap_failed naming the missing ranks when the rendezvous
  ///   does not complete within the timeout; errc::authentication_failed when a peer does not
  ///   hold the job token.
  void join() {
    if (size() == 1) return;
    const clock::time_point until = clock::now() + cfg_.timeout;
    if (!cfg_.relay_host.empty()) relay_ = resolve(cfg_.relay_host, cfg_.relay_port, "COMMX_RELAY");
    if (rank() == 0) {
      join_as_root(until);
    } else {
      join_as_member(until);
    }
    // Node ids: ranks that listen on the same host address at the same site share a node (two
    // sites may use the same private addresses).
    std::vector<std::pair<std::string, std::array<std::uint8_t, 16>>> hosts;
    for (int r = 0; r < size(); ++r) {
      const auto a = std::make_pair(table_[index(r)].site, table_[index(r)].address);
      auto known = std::find(hosts.begin(), hosts.end(), a);
      nodes_[index(r)] = static_cast<int>(known - hosts.begin());
      if (known == hosts.end()) hosts.push_back(a);
    }
    joined_ = true;
  }

 private:
  enum class presence : std::uint8_t { absent, present, finished, failed };

  struct awaited_data {
    std::shared_ptr<operation> op;  ///< null: the receive was cancelled, drop the data
    std::uint64_t size;
  };

  struct peer_link {
    std::unique_ptr<connection> conn;
    presence state = presence::absent;
    std::error_code loss;           ///< what operations on a gone peer report
    std::uint64_t send_credit = 0;  ///< eager bytes we may still send it
    std::uint64_t held = 0;         ///< eager bytes of its we hold or hold credit for
    std::uint64_t unreturned = 0;  ///< eager bytes its messages used that we took, not yet credited
    std::uint64_t next_cookie = 1;
    std::unordered_map<std::uint64_t, std::shared_ptr<operation>> awaiting_cts;
    std::unordered_map<std::uint64_t, awaited_data> awaiting_data;
    bool shut = false;  ///< leaving: our side of the connection is shut down
  };

  static constexpr int max_pending_handshakes = 32;

  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }

  static bool matches(int want_source, context_id want_ctx, int want_tag, int source,
                      context_id ctx, int tag) {
    return want_ctx == ctx && (want_source == any_source || want_source == source) &&
           (want_tag == any_tag || want_tag == tag);
  }

  static op_result lost_result(int peer, std::size_t bytes, std::error_code why) {
    return {peer, any_tag, bytes, why};
  }

  op_result lost(int peer, std::size_t bytes) const {
    const std::error_code why = peers_[index(peer)].loss;
    return lost_result(peer, bytes, why ? why : make_error_code(errc::peer_lost));
  }

  void finish(operation& op, op_result result) {
    op.result = result;
    op.done = true;
    op.where = operation::stage::done;
    ++events_;
  }

  std::shared_ptr<operation> completed(operation::kind k, int peer, context_id ctx, int tag,
                                       op_result result) {
    auto op = std::make_shared<operation>(k, peer, ctx, tag);
    finish(*op, result);
    return op;
  }

  void poll() { io_.poll(); }

  // --- matching ---------------------------------------------------------------------------

  std::deque<queued_message>::iterator find_queued(int source, context_id ctx, int tag) {
    return std::find_if(unexpected_.begin(), unexpected_.end(), [&](const queued_message& m) {
      return matches(source, ctx, tag, m.source, m.ctx, m.tag);
    });
  }

  /// A posted receive takes a queued message (or fails on it, leaving it queued).
  void take(const std::shared_ptr<operation>& op, std::deque<queued_message>::iterator queued) {
    const auto size = static_cast<std::size_t>(queued->size);
    op_result result{queued->source, queued->tag, size, {}};
    std::byte* target = op->buffer.prepare(size, result.error);
    if (result.error) {
      finish(*op, result);
      return;
    }
    switch (queued->how) {
      case queued_message::form::eager:
        if (size > 0) std::memcpy(target, queued->eager.data(), size);
        if (queued->source != rank()) consumed(queued->source, size);
        break;
      case queued_message::form::self_rendezvous:
        if (size > 0) std::memcpy(target, queued->self_send->payload.data(), size);
        finish(*queued->self_send, {rank(), queued->tag, size, {}});
        break;
      case queued_message::form::remote_rendezvous: {
        const int source = queued->source;
        const std::uint64_t cookie = queued->cookie;
        op->target = target;
        op->cookie = cookie;
        op->result = result;
        op->where = operation::stage::awaiting_data;
        peers_[index(source)].awaiting_data[cookie] = {op, queued->size};
        unexpected_.erase(queued);
        push_control(source, frame_kind::cts, cookie);
        return;
      }
    }
    unexpected_.erase(queued);
    finish(*op, result);
  }

  /// The first posted receive that matches and accepts a message of `size` bytes, taken off
  /// the posted list with its destination prepared; receives that refuse it fail on the way.
  std::shared_ptr<operation> match_posted(int source, context_id ctx, int tag, std::size_t size) {
    for (auto it = posted_.begin(); it != posted_.end();) {
      operation& op = **it;
      if (!matches(op.peer, op.ctx, op.tag, source, ctx, tag)) {
        ++it;
        continue;
      }
      std::shared_ptr<operation> found = std::move(*it);
      it = posted_.erase(it);
      std::error_code ec;
      found->target = found->buffer.prepare(size, ec);
      if (ec) {
        finish(*found, {source, tag, size, ec});
        continue;
      }
      found->result = {source, tag, size, {}};
      return found;
    }
    return nullptr;
  }

  std::shared_ptr<operation> send_to_self(context_id ctx, int tag,
                                          std::span<const std::byte> data) {
    if (auto op = match_posted(rank(), ctx, tag, data.size())) {
      if (!data.empty()) std::memcpy(op->target, data.data(), data.size());
      finish(*op, op->result);
      return nullptr;
    }
    ++events_;
    if (data.size() <= cfg_.eager_threshold) {
      unexpected_.push_back({rank(),
                             ctx,
                             tag,
                             data.size(),
                             queued_message::form::eager,
                             {data.begin(), data.end()},
                             0,
                             nullptr});
      return nullptr;
    }
    auto op = std::make_shared<operation>(operation::kind::send, rank(), ctx, tag);
    op->payload = data;
    op->where = operation::stage::queued_self;
    unexpected_.push_back(
        {rank(), ctx, tag, data.size(), queued_message::form::self_rendezvous, {}, 0, op});
    return op;
  }

  /// Can anyone still answer a receive from `source` that nothing queued satisfies?
  std::optional<op_result> lost_source(int source) const {
    if (source == any_source) {
      if (any_failed_ != unknown) return lost(any_failed_, 0);
      return std::nullopt;
    }
    if (source == rank()) return std::nullopt;
    if (peers_[index(source)].state != presence::present) return lost(source, 0);
    return std::nullopt;
  }

  /// Our user took `bytes` of `peer`'s eager messages: give the window back in batches.
  void consumed(int peer, std::size_t bytes) {
    peer_link& link = peers_[index(peer)];
    link.unreturned += bytes + header_size;
    if (link.unreturned >= cfg_.window / 4 && link.state == presence::present) {
      const std::uint64_t amount = link.unreturned;
      link.unreturned = 0;
      link.held -= std::min(link.held, amount);
      push_control(peer, frame_kind::credit, amount);
    }
  }

  // --- writing ----------------------------------------------------------------------------

  void push_control(int peer, frame_kind kind, std::uint64_t cookie) {
    peer_link& link = peers_[index(peer)];
    if (link.state != presence::present) return;
    out_frame& f = link.conn->out.emplace_back();
    f.header = encode(frame_header{kind, 0, rank(), 0, 0, 0, cookie});
    flush(peer);
  }

  void push_payload(int peer, frame_kind kind, std::span<const std::byte> payload) {
    peer_link& link = peers_[index(peer)];
    out_frame& f = link.conn->out.emplace_back();
    f.header = encode(frame_header{kind, 0, rank(), 0, 0, payload.size(), 0});
    f.owned.assign(payload.begin(), payload.end());
    f.payload = f.owned;
    flush(peer);
  }

  void flush(int peer) {
    peer_link& link = peers_[index(peer)];
    if (!link.conn || !link.conn->open) return;
    connection& c = *link.conn;
    const std::error_code ec = c.flush([&](out_frame& f) {
      if (f.completes) finish(*f.completes, {peer, f.completes->tag, f.payload.size(), {}});
    });
    if (ec) return broken(peer, ec);
    if (!c.out.empty() && !c.write_armed) {
      c.write_armed = true;
      c.socket.async_wait(asio::socket_base::wait_write, [this, peer](std::error_code wec) {
        connection& conn = *peers_[index(peer)].conn;
        conn.write_armed = false;
        if (!wec && conn.open) flush(peer);
      });
    }
  }

  // --- reading ----------------------------------------------------------------------------

  void arm_read(int peer) {
    connection& c = *peers_[index(peer)].conn;
    if (c.read_armed || !c.open) return;
    c.read_armed = true;
    c.socket.async_wait(asio::socket_base::wait_read, [this, peer](std::error_code ec) {
      connection& conn = *peers_[index(peer)].conn;
      conn.read_armed = false;
      if (!ec && conn.open) on_readable(peer);
    });
  }

  // Asio's epoll reactor is edge-triggered and its waits are not speculative: a wait armed
  // while bytes are already waiting would not fire. So a connection is always read until the
  // kernel says would_block before its next wait is armed, and one that had more to give after
  // a fair share of rounds is resumed through the queue instead.
  void on_readable(int peer) {
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
        const std::size_t n = c.socket.read_some(
            asio::buffer(c.destination, static_cast<std::size_t>(c.remaining)), ec);
        if (ec == asio::error::would_block || ec == asio::error::try_again) break;
        if (ec) return broken(peer, ec);
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
      const std::size_t n = c.socket.read_some(asio::buffer(c.staging.data() + c.end, room), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) return broken(peer, ec);
      c.end += n;
      process(peer);
    }
    arm_read(peer);
  }

  /// Whether a `data` frame from `peer` may come next on its connection: a receive asked for
  /// one, and no extension carries the data on connections of its own.
  [[nodiscard]] bool awaits_payload(int peer) const {
    return !ext_.carry_data && !peers_[index(peer)].awaiting_data.empty();
  }

  /// Acts on every whole header and payload byte in the staging buffer.
  void process(int peer) {
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

  void begin_payload(int peer, const frame_header& h, std::byte* destination,
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

  void on_header(int peer, const frame_header& h) {
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
        if (link.awaiting_data.contains(h.cookie)) return violation(peer, "rendezvous id reused");
        ++events_;
        if (auto op = match_posted(peer, h.context, h.tag, size)) {
          op->cookie = h.cookie;
          op->where = operation::stage::awaiting_data;
          link.awaiting_data[h.cookie] = {op, h.length};
          return push_control(peer, frame_kind::cts, h.cookie);
        }
        unexpected_.push_back({peer,
                               h.context,
                               h.tag,
                               h.length,
                               queued_message::form::remote_rendezvous,
                               {},
                               h.cookie,
                               nullptr});
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
      case frame_kind::revoke: {
        if (auto it = link.awaiting_data.find(h.cookie); it != link.awaiting_data.end()) {
          if (it->second.op) {
            finish(*it->second.op,
                   {peer, it->second.op->result.tag, 0, make_error_code(errc::cancelled)});
          }
          link.awaiting_data.erase(it);
          return;
        }
        std::erase_if(unexpected_, [&](const queued_message& m) {
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
        if (peer != 0 || joined_ || have_table_ || h.length != index(this->size()) * endpoint_size)
          return violation(peer, "a table out of turn");
        return begin_payload(peer, h, nullptr, nullptr, true);
      case frame_kind::abort:
        if (peer != 0 || joined_) return violation(peer, "an abort out of turn");
        return begin_payload(peer, h, nullptr, nullptr, true);
    }
  }

  void end_payload(int peer) {
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

  /// An eager message whose payload arrived while no receive matched: a receive posted since
  /// takes it, or it waits in the queue.
  void deliver_held(int peer, const frame_header& h, std::vector<std::byte> payload) {
    ++events_;
    if (auto op = match_posted(peer, h.context, h.tag, payload.size())) {
      if (!payload.empty()) std::memcpy(op->target, payload.data(), payload.size());
      finish(*op, op->result);
      consumed(peer, payload.size());
      return;
    }
    const std::uint64_t size = payload.size();
    unexpected_.push_back({peer, h.context, h.tag, size, queued_message::form::eager,
                           std::move(payload), 0, nullptr});
  }

  // --- peers that go ----------------------------------------------------------------------

  void violation(int peer, std::string_view why) {
    fmt::print(stderr, "commx tcp: rank {}: closing the connection to rank {}: {}\n", rank(), peer,
               why);
    std::fflush(stderr);
    gone(peer, presence::failed, make_error_code(errc::protocol_violation));
  }

  /// The connection to `peer` broke (end of stream without bye, reset, write error).
  void broken(int peer, std::error_code) {
    gone(peer, presence::failed, make_error_code(errc::peer_lost));
  }

  void gone(int peer, presence how, std::error_code why) {
    peer_link& link = peers_[index(peer)];
    if (link.state != presence::present) return;
    link.state = how;
    link.loss = why;
    if (how == presence::failed) any_failed_ = peer;
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
    // Its large messages can no longer be fetched; its eager ones are still delivered.
    std::erase_if(unexpected_, [&](const queued_message& m) {
      return m.source == peer && m.how == queued_message::form::remote_rendezvous;
    });
    std::erase_if(posted_, [&](const std::shared_ptr<operation>& op) {
      if (op->peer != peer && !(how == presence::failed && op->peer == any_source)) return false;
      finish(*op, result);
      return true;
    });
    if (ext_.peer_gone) ext_.peer_gone(peer, why);
    ++events_;
  }

  // --- connections ------------------------------------------------------------------------

  void adopt(int peer, asio::ip::tcp::socket socket) {
    peer_link& link = peers_[index(peer)];
    link.conn = std::make_unique<connection>(std::move(socket));
    link.conn->detect_dead_host(std::chrono::duration_cast<std::chrono::seconds>(
        std::min<clock::duration>(cfg_.timeout, std::chrono::hours(9))));
    link.state = presence::present;
    ++events_;
    on_readable(peer);  // bytes may have come with the handshake's last read
  }

  void log_refusal(const asio::ip::tcp::endpoint& from, const std::string& why) {
    fmt::print(stderr, "commx tcp: rank {}: refused a connection from {}:{}: {}\n", rank(),
               from.address().to_string(), from.port(), why);
    std::fflush(stderr);
  }

  handshake::verdict_code welcome(const handshake::hello& h) const {
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

  void accept_next() {
    acceptor_->async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_->is_open()) return;
      if (!ec) on_accepted(std::move(socket));
      accept_next();
    });
  }

  void on_accepted(asio::ip::tcp::socket socket) {
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
            if (ext_.adopt_stream) ext_.adopt_stream(s.peer.rank, std::move(s.socket));
            return;
          }
          // Two handshakes for one rank may both have passed `welcome`: the first one wins.
          if (peers_[index(s.peer.rank)].state != presence::absent) {
            return log_refusal(s.remote, fmt::format("rank {} is already connected", s.peer.rank));
          }
          adopt(s.peer.rank, std::move(s.socket));
        });
    session->start();
  }

  void open_acceptor(const asio::ip::tcp::endpoint& where, bool reuse) {
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

  /// This rank's endpoint `ep` as the table carries it: with the site this rank is at.
  endpoint_record record_of(const asio::ip::tcp::endpoint& ep) const {
    endpoint_record e;
    e.site = cfg_.site;
    e.port = ep.port();
    if (ep.address().is_v6()) {
      e.v6 = true;
      const auto bytes = ep.address().to_v6().to_bytes();
      std::copy(bytes.begin(), bytes.end(), e.address.begin());
    } else {
      const auto bytes = ep.address().to_v4().to_bytes();
      std::copy(bytes.begin(), bytes.end(), e.address.begin());
    }
    return e;
  }

  asio::ip::tcp::endpoint resolve(const std::string& host, std::uint16_t port,
                                  const char* variable) {
    asio::ip::tcp::resolver resolver(io_);
    std::error_code ec;
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
      throw error(errc::bootstrap_failed,
                  fmt::format("tcp: rank {}: cannot resolve {} host '{}': {}", rank(), variable,
                              host, ec ? ec.message() : "no address"));
    }
    return results.begin()->endpoint();
  }

  asio::ip::tcp::endpoint root_endpoint() {
    return resolve(cfg_.root_host, cfg_.root_port, "COMMX_ROOT");
  }

  /// Connects to `target`, through this site's relay when it is at another site.
  [[nodiscard]] dial_identity identity(const endpoint_record& target) const {
    dial_identity who{cfg_.token, rank(), size(), std::nullopt};
    if (relay_ && target.site != cfg_.site) who.relay = relay_;
    return who;
  }

  void dial(const endpoint_record& target, clock::time_point until, dialer::done_fn done,
            std::optional<asio::ip::tcp::socket> opened = std::nullopt) {
    dialer::start(io_, identity(target), target, until, std::move(done), std::move(opened));
  }

  struct dialled {
    bool done = false;
    std::string failure;
    bool token_refused = false;
    std::optional<asio::ip::tcp::socket> socket;
  };

  /// Dials `target` and runs the rendezvous until it is connected or failed (or `until`). The
  /// outcome is shared with the dialer, which may still finish after a deadline.
  std::shared_ptr<dialled> dial_and_wait(const endpoint_record& target, clock::time_point until) {
    auto d = std::make_shared<dialled>();
    dial(target, until, [d](const std::string& why, asio::ip::tcp::socket s, bool token) {
      d->done = true;
      d->failure = why;
      d->token_refused = token;
      if (why.empty()) d->socket.emplace(std::move(s));
    });
    if (!run_until([&] { return d->done; }, until) && !d->done) {
      d->failure = "no answer before the deadline";
    }
    return d;
  }

  std::string root_text() const { return fmt::format("{}:{}", cfg_.root_host, cfg_.root_port); }

  /// Runs handlers until `done()` or `until`; false at the deadline. A peer lost meanwhile
  /// fails the rendezvous.
  template <class Done>
  bool run_until(Done&& done, clock::time_point until) {
    while (!done()) {
      for (int r = 0; r < size(); ++r) {
        // A peer that finished may already have said bye; one that failed ends the job.
        if (peers_[index(r)].state == presence::failed) {
          throw error(errc::bootstrap_failed,
                      fmt::format("tcp: rank {}: rank {} left during the rendezvous at {}", rank(),
                                  r, root_text()));
        }
      }
      if (clock::now() >= until) return false;
      io_.run_one_until(until);
    }
    return true;
  }

  static std::string rank_list(const std::vector<int>& ranks) {
    std::string text;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      text += fmt::format("{}{}", i == 0 ? "" : ", ", ranks[i]);
    }
    return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", text);
  }

  std::string seconds_text() const {
    return fmt::format("{:.3g} s", std::chrono::duration<double>(cfg_.timeout).count());
  }

  void join_as_root(clock::time_point until) {
    const asio::ip::tcp::endpoint root = root_endpoint();
    table_.assign(index(size()), endpoint_record{});
    table_[0] = record_of(root);
    open_acceptor(root, true);
    const auto joined = [&] {
      return std::all_of(table_.begin() + 1, table_.end(),
                         [](const endpoint_record& e) { return e.port != 0; });
    };
    if (!run_until(joined, until)) {
      std::vector<int> missing;
      for (int r = 1; r < size(); ++r) {
        if (table_[index(r)].port == 0) missing.push_back(r);
      }
      const std::string why = fmt::format("{} of {} did not join the rendezvous at {} within {}",
                                          rank_list(missing), size(), root_text(), seconds_text());
      for (int r = 1; r < size(); ++r) {
        if (peers_[index(r)].state != presence::present) continue;
        push_payload(r, frame_kind::abort, std::as_bytes(std::span(why.data(), why.size())));
      }
      // Give the abort a moment to leave; the peers fail on their own deadline anyway.
      const auto flushed = [&] {
        return std::all_of(peers_.begin(), peers_.end(), [](const peer_link& l) {
          return !l.conn || !l.conn->open || l.conn->out.empty();
        });
      };
      run_until(flushed, clock::now() + std::chrono::seconds(1));
      throw error(errc::bootstrap_failed, fmt::format("tcp: rank 0: {}", why));
    }
    std::vector<std::byte> table;
    for (const endpoint_record& e : table_) {
      const auto bytes = encode(e);
      table.insert(table.end(), bytes.begin(), bytes.end());
    }
    for (int r = 1; r < size(); ++r) push_payload(r, frame_kind::table, table);
  }

  void join_as_member(clock::time_point until) {
    endpoint_record root = record_of(root_endpoint());
    root.site = cfg_.root_site;
    // Rank 0 may not be listening yet: retry, backing off, until the deadline.
    std::optional<asio::ip::tcp::socket> reached;
    auto backoff = std::chrono::milliseconds(10);
    for (;;) {
      const auto d = dial_and_wait(root, until);
      if (d->socket) {
        reached = std::move(d->socket);
        break;
      }
      if (d->token_refused) {
        throw error(
            errc::authentication_failed,
            fmt::format("tcp: rank {}: the rendezvous at {}: {}", rank(), root_text(), d->failure));
      }
      if (clock::now() + backoff >= until) {
        throw error(errc::bootstrap_failed,
                    fmt::format("tcp: rank {}: the rendezvous at {} did not complete within {}: "
                                "rank 0 does not answer ({})",
                                rank(), root_text(), seconds_text(), d->failure));
      }
      asio::steady_timer pause(io_, backoff);
      bool paused = false;
      pause.async_wait([&](std::error_code) { paused = true; });
      run_until([&] { return paused; }, until);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
    asio::ip::tcp::socket to_root = std::move(*reached);
    const asio::ip::address listen_address =
        cfg_.listen_address ? *cfg_.listen_address : to_root.local_endpoint().address();
    open_acceptor({listen_address, 0}, false);

    connect(0, std::move(to_root), handshake::purpose::join, until);
    run_until([&] { return peers_[0].state != presence::absent; }, until);
    if (peers_[0].state == presence::absent) {
      throw error(errc::bootstrap_failed,
                  fmt::format("tcp: rank {}: no handshake with rank 0 at {} within {}", rank(),
                              root_text(), seconds_text()));
    }
    const auto me = encode(record_of(acceptor_->local_endpoint()));
    push_payload(0, frame_kind::address, me);

    // Rank 0 waits a whole timeout for the others; wait a little longer for its verdict.
    const clock::time_point table_until = until + std::chrono::seconds(2);
    if (!run_until([&] { return have_table_ || have_abort_; }, table_until)) {
      throw error(errc::bootstrap_failed,
                  fmt::format("tcp: rank {}: the rendezvous at {} did not complete within {}: "
                              "rank 0 sent no table (some other rank did not join)",
                              rank(), root_text(), seconds_text()));
    }
    if (have_abort_) {
      throw error(errc::bootstrap_failed,
                  fmt::format("tcp: rank {}: rank 0 gave up: {}", rank(), abort_text_));
    }
    for (int r = 1; r < rank(); ++r) {
      const auto d = dial_and_wait(table_[index(r)], until);
      if (!d->socket) {
        throw error(d->token_refused ? errc::authentication_failed : errc::bootstrap_failed,
                    fmt::format("tcp: rank {}: cannot connect to rank {} at {}: {}", rank(), r,
                                text_of(table_[index(r)]), d->failure));
      }
      asio::ip::tcp::socket socket = std::move(*d->socket);
      connect(r, std::move(socket), handshake::purpose::peer, until);
    }
    const auto all = [&] {
      return std::all_of(peers_.begin(), peers_.end(), [&](const peer_link& l) {
        return &l == &peers_[index(rank())] || l.state != presence::absent;
      });
    };
    if (!run_until(all, until)) {
      std::vector<int> missing;
      for (int r = 0; r < size(); ++r) {
        if (r != rank() && peers_[index(r)].state == presence::absent) missing.push_back(r);
      }
      throw error(errc::bootstrap_failed,
                  fmt::format("tcp: rank {}: no connection with {} within {}", rank(),
                              rank_list(missing), seconds_text()));
    }
  }

  /// Authenticates a connected socket to `peer` and adopts it; a refusal ends the rendezvous.
  void connect(int peer, asio::ip::tcp::socket socket, handshake::purpose why,
               clock::time_point until) {
    auto session = std::make_shared<client_session>(
        std::move(socket), cfg_.token,
        handshake::hello{why, rank(), size(), handshake::fresh_nonce()}, peer, until,
        [this, peer](client_session& s, bool ok, const std::string& reason, bool token) {
          if (ok) return adopt(peer, std::move(s.socket));
          const std::string text =
              fmt::format("tcp: rank {}: handshake with rank {} failed: {}", rank(), peer, reason);
          if (token) throw error(errc::authentication_failed, text);
          throw error(errc::bootstrap_failed, text);
        });
    session->start();
  }

  // --- leaving ----------------------------------------------------------------------------

  /// Says bye to every peer, sends what is still queued, and waits (briefly) until each peer
  /// has closed its end, so nothing it sent is cut off by a reset. `failing`: just closes, so
  /// the peers see a failed rank.
  void leave(bool failing) noexcept {
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
          if (l.conn->out.empty() && !l.shut) {
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

  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> keep_running_;
  config cfg_;
  std::vector<peer_link> peers_;
  std::vector<int> nodes_;
  std::deque<std::shared_ptr<operation>> posted_;
  std::deque<queued_message> unexpected_;
  std::uint64_t events_ = 0;
  int any_failed_ = unknown;
  std::optional<asio::ip::tcp::acceptor> acceptor_;
  int pending_handshakes_ = 0;
  bool joined_ = false;
  std::vector<endpoint_record> table_;
  std::optional<asio::ip::tcp::endpoint> relay_;  ///< this site's commx-relay (COMMX_RELAY)
  bool have_table_ = false;
  bool have_abort_ = false;
  std::string abort_text_;
  extension ext_;
};

}  // namespace commx::detail::tcp
