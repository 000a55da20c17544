// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::tcp`: ranks are processes, on one host or many, with one direct TCP connection
/// per pair of ranks (no daemon between them: HPVM's and PVM's lesson). The job starts with a
/// rendezvous at COMMX_ROOT: rank 0 listens there and collects every rank's listen endpoint,
/// then hands out the table (rank to endpoint, O(1) lookup), and each rank connects to the
/// ranks below it. Every connection is authenticated by a challenge-response HMAC over the
/// job token (COMMX_TOKEN), which never crosses the wire; a stranger is refused and logged, and
/// the job goes on. Only a C++ compiler and one open port per rank are needed (MPWide's
/// lesson): no daemon, no administrator rights.
///
/// Messages: small ones go eagerly, within a per-peer window the receiver gives back as its user
/// takes them; large ones wait for their receive and then go straight from the sender's buffer
/// into the receiver's (engine.hpp). Frames are validated before anything acts on them
/// (wire.hpp); a bad one closes that connection and raises errc::protocol_violation where it
/// matters. A peer that dies raises errc::peer_lost at once on every rank that waits on it; one
/// that hangs, errc::timeout at the deadline.
///
/// The environment it reads is listed in detail/tcp/config.hpp. Locality: ranks that name the
/// same node (COMMX_NODE), or naming none listen on the same host address, share a node; ranks
/// naming the same COMMX_SITE share a site.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "commx/transport/concept.hpp"
#include "commx/transport/detail/tcp/config.hpp"
#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::transport {

/// One rank's endpoint in a job of processes on any hosts, with one authenticated TCP
/// connection per pair of ranks (see the file comment).
class tcp {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "tcp";
  /// Where to rendezvous and listen, the job's token and the tuning (config_from_env reads
  /// COMMX_*).
  using config = detail::tcp::config;

  /// Null when the operation completed at once, successfully (the common eager send).
  using request = std::shared_ptr<detail::tcp::operation>;

  /// Joins the job `cfg` describes.
  /// @throws commx::error errc::bootstrap_failed (naming what is missing or wrong),
  ///   errc::authentication_failed.
  explicit tcp(config cfg) : engine_(std::make_unique<detail::tcp::engine>(std::move(cfg))) {
    engine_->join();
  }

  /// Joins the job this process belongs to, as the environment describes it (commxrun, srun,
  /// mpirun; see detail/tcp/config.hpp).
  static tcp from_env() { return tcp(detail::tcp::config_from_env()); }

  /// This endpoint's world rank, in [0, size()).
  [[nodiscard]] int rank() const { return engine_->rank(); }
  /// The number of world ranks (>= 1).
  [[nodiscard]] int size() const { return engine_->size(); }
  /// The node `peer` is on: ranks of one site naming one COMMX_NODE, or naming none and
  /// listening on one host address, share an id.
  [[nodiscard]] int node_of(int peer) const { return engine_->node_of(peer); }
  /// The site `peer` is at (COMMX_SITE): ranks naming one site share an id, in rank order of
  /// first appearance; 0 for all when no site is named.
  [[nodiscard]] int site_of(int peer) const { return engine_->site_of(peer); }
  /// The payload bytes this endpoint has handed to sends to `peer` so far.
  [[nodiscard]] std::uint64_t bytes_sent_to(int peer) const { return engine_->bytes_sent_to(peer); }
  /// The peers this endpoint found failed, in the order it found them (transport concept).
  [[nodiscard]] std::vector<int> failed_peers() const { return engine_->failed_peers(); }
  /// What this rank holds of small messages nobody has asked for yet (or has not yet returned
  /// the credit of), each counted with its 40-byte frame header: at most eager_window() per
  /// peer, however many are sent; beyond it they wait at the sender as rts.
  [[nodiscard]] std::uint64_t held_bytes() const { return engine_->held_bytes(); }
  /// That bound per peer (COMMX_TCP_WINDOW).
  [[nodiscard]] std::uint64_t eager_window() const { return engine_->eager_window(); }

  /// Starts sending `data` to `dest` on (`ctx`, `tag`); `data` must stay valid and unchanged
  /// until the request completes (transport concept, transport/concept.hpp).
  request isend(int dest, context_id ctx, int tag, const std::span<const std::byte>& data) {
    return engine_->isend(dest, ctx, tag, data);
  }

  /// Starts receiving a message from `source` (or any_source) with `tag` (or any_tag) on `ctx`
  /// into `buffer` (transport concept).
  request irecv(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    return engine_->irecv(source, ctx, tag, buffer);
  }

  /// A blocking send without a request (transport::blocking_send): a small message the
  /// receiver has credit for, written at once (what the socket does not take is copied and
  /// follows); nullopt (left to `isend`) for any other.
  std::optional<op_result> send_blocking(int dest, context_id ctx, int tag,
                                         std::span<const std::byte> data, const deadline& /*until*/,
                                         clock::duration /*timeout*/) {
    return engine_->send_blocking(dest, ctx, tag, data);
  }

  /// A blocking receive without a request (transport::blocking_recv): as `irecv` and waiting,
  /// on an operation the engine recycles; `until` is resolved against `timeout` only once the
  /// receive has been found unfinished. errc::timeout at the deadline (withdrawn).
  std::optional<op_result> recv_blocking(int source, context_id ctx, int tag,
                                         const recv_buffer& buffer, const deadline& until,
                                         clock::duration timeout) {
    return engine_->recv_blocking(source, ctx, tag, buffer, until, timeout);
  }

  /// Makes progress; true once `req` has completed, successfully or not.
  bool test(request& req) { return engine_->test(req); }

  /// True once `req` has completed, without making progress (after `progress()`).
  [[nodiscard]] bool completed(const request& req) const { return !req || req->done; }

  /// How a completed request ended: the matched source, tag and byte count, or the error.
  const op_result& result(const request& req) const {
    static const op_result delivered{};
    return req ? req->result : delivered;
  }

  /// Withdraws `req` if it has not matched yet (true); false if it has completed.
  bool cancel(request& req) { return engine_->cancel(req); }

  /// The first queued message that a receive with these arguments would match, without
  /// receiving it; an error result when `source` is gone and nothing from it is queued.
  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    return engine_->iprobe(source, ctx, tag);
  }

  /// How long a blocking step of the transport's own (joining, leaving) may take:
  /// COMMX_TIMEOUT.
  [[nodiscard]] clock::duration timeout() const { return engine_->timeout(); }

  /// How a wait polls before it sleeps, as the rendezvous chose it (detail/tcp/polling.hpp):
  /// transport::ucx, started by tcp's bootstrap, waits the same way.
  [[nodiscard]] const detail::tcp::polling& wait_polling() const { return engine_->wait_polling(); }

  /// Makes progress without waiting: takes in what arrived, sends what can go (a transport
  /// composed with others, node_and_network.hpp, calls it on the one it is not waiting in).
  void progress() { engine_->progress(); }

  /// For transport::faulty: writes to `peer` a frame with a damaged header, or (`cut`) one cut
  /// short, after which this rank hangs up on `peer`. Either way the pair's connection is lost:
  /// the peer refuses the frame, and both ends raise errc::peer_lost where they wait on each
  /// other. Nothing that follows is read as the rest of the frame.
  void damage_frame(int peer, bool cut) { engine_->damage_frame(peer, cut); }

  /// Declares `peer` failed (transport/concept.hpp): its connection is closed and its dials
  /// refused from now on.
  void exclude(int peer, std::string_view why) { engine_->exclude(peer, why); }

  /// How `peer`'s machine lays out values, as it said when the job started (data_layout.hpp).
  [[nodiscard]] data_layout layout_of(int peer) const { return engine_->layout_of(peer); }

  /// For transport::faulty: connects to `peer` (its listening port, or this site's relay) as a
  /// stranger would, without the token, writes garbage and hangs up. The peer refuses it and
  /// logs it; the job goes on.
  void send_stranger(int peer) {
    asio::io_context io;
    asio::ip::tcp::socket stranger(io);
    std::error_code ec;
    stranger.connect(engine_->first_hop(peer), ec);
    const std::array<char, 48> garbage{"GET / HTTP/1.0 (a stranger, not a commx rank)"};
    if (!ec) asio::write(stranger, asio::buffer(garbage), ec);
  }

  /// A counter that changes whenever something happens to this endpoint.
  [[nodiscard]] std::uint64_t event_count() const { return engine_->event_count(); }

  /// Blocks, without burning a core, until event_count() != `seen` or `when` passes.
  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    engine_->wait_for_event(seen, when);
  }

  /// This rank's listen endpoint, as "address:port" (tests connect strangers to it).
  [[nodiscard]] std::optional<std::pair<std::string, std::uint16_t>> listen_endpoint() const {
    auto ep = engine_->listen_endpoint();
    if (!ep) return std::nullopt;
    return std::pair{ep->address().to_string(), ep->port()};
  }

 private:
  std::unique_ptr<detail::tcp::engine> engine_;
};

static_assert(transport<tcp> && blocking_send<tcp> && blocking_recv<tcp>);

}  // namespace commx::transport
