// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::wan`: the tcp transport (rendezvous, framing, authentication, failure handling:
/// detail/tcp/) where the path to each peer is, besides tcp's control connection, N parallel
/// TCP data streams (MPWide's lesson: on a long fat link one stream cannot fill the pipe, 8-32
/// can). Small messages go whole, eagerly, on the control connection; a large message's
/// payload is split into chunks spread over the streams and reassembled in order, straight
/// into the receiver's buffer (detail/wan/paths.hpp, chunk frames in detail/wan/wire.hpp).
///
/// Each path is tuned (streams, chunk size, socket buffers, pacing, congestion control) from
/// the environment or a path file (detail/wan/config.hpp), and can be retuned at run time:
/// `retune(peer, tuning)` closes the path's streams after what they carry, and reopens them
/// under the new tuning, losing and repeating nothing; either rank of the pair may call it,
/// both at once too (the higher rank applies both, in the order it reads them, and both ranks
/// end on the same tuning). A data stream that breaks loses the peer: what waits on it
/// completes with errc::peer_lost (errc::protocol_violation for a bad frame), and a `warn` line (log.hpp) names
/// the stream.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "commx/transport/concept.hpp"
#include "commx/transport/detail/tcp/engine.hpp"
#include "commx/transport/detail/wan/config.hpp"
#include "commx/transport/detail/wan/paths.hpp"

namespace commx::transport {

/// tcp's endpoint with N parallel data streams per path for large messages, each path tuned
/// and retunable (see the file comment).
class wan {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "wan";
  /// tcp's config and every path's tuning (COMMX_WAN_*).
  using config = detail::wan::config;
  /// One path's tuning: streams, chunk, socket buffers, pacing, congestion control.
  using path_config = detail::wan::path_config;
  /// What a path runs on now: its tuning, epoch and open streams.
  using path_state = detail::wan::path_state;

  /// Null when the operation completed at once, successfully (the common eager send).
  using request = std::shared_ptr<detail::tcp::operation>;

  /// Joins the job `cfg` describes. A path's data streams open when it first carries a large
  /// message (every path's at once, and measured, under COMMX_WAN_AUTOTUNE).
  /// @throws commx::error errc::bootstrap_failed (naming what is missing or wrong),
  ///   errc::authentication_failed, errc::invalid_argument (a tuning the kernel refuses).
  explicit wan(config cfg)
      : engine_(std::make_unique<detail::tcp::engine>(cfg.base)),
        paths_(std::make_unique<detail::wan::paths>(*engine_, std::move(cfg))) {
    engine_->join();
    paths_->open_paths();
  }

  /// Joins the job this process belongs to, as the environment describes it.
  static wan from_env() { return wan(detail::wan::config_from_env()); }

  /// Joins the job that `get` describes: the variables of from_env(), looked up through `get`,
  /// so that one process can join a second job (examples/nbody_wide's leaders read theirs
  /// under other names).
  static wan from_env(const bootstrap::lookup& get) {
    return wan(detail::wan::config_from_env(get));
  }

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
  /// How `peer`'s machine lays out values, as it said when the job started (data_layout.hpp).
  [[nodiscard]] data_layout layout_of(int peer) const { return engine_->layout_of(peer); }
  /// The payload bytes this endpoint has handed to sends to `peer` so far.
  [[nodiscard]] std::uint64_t bytes_sent_to(int peer) const { return engine_->bytes_sent_to(peer); }
  /// The peers this endpoint found failed, in the order it found them (transport concept).
  [[nodiscard]] std::vector<int> failed_peers() const { return engine_->failed_peers(); }
  /// Declares `peer` failed (transport/concept.hpp): never readmitted.
  void exclude(int peer, std::string_view why) { engine_->exclude(peer, why); }

  /// Starts sending `data` to `dest` on (`ctx`, `tag`); `data` must stay valid and unchanged
  /// until the request completes (transport concept, transport/concept.hpp).
  request isend(int dest, context_id ctx, int tag, const std::span<const std::byte>& data) {
    return engine_->isend(dest, ctx, tag, data, pinned_stream_);
  }

  /// Starts receiving a message from `source` (or any_source) with `tag` (or any_tag) on `ctx`
  /// into `buffer` (transport concept).
  request irecv(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    return engine_->irecv(source, ctx, tag, buffer);
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
  bool cancel(request& req) {
    // A send whose chunks are on their way completes from a copy instead.
    if (paths_->detach(req)) return false;
    return engine_->cancel(req);
  }

  /// The first queued message that a receive with these arguments would match, without
  /// receiving it; an error result when `source` is gone and nothing from it is queued.
  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    return engine_->iprobe(source, ctx, tag);
  }

  /// How long a blocking step of the transport's own (joining, leaving) may take:
  /// COMMX_TIMEOUT.
  [[nodiscard]] clock::duration timeout() const { return engine_->timeout(); }

  /// Makes progress without waiting: takes in what arrived, sends what can go (a transport
  /// composed with others, node_and_network.hpp, calls it on the one it is not waiting in).
  void progress() { engine_->progress(); }

  /// A counter that changes whenever something happens to this endpoint.
  [[nodiscard]] std::uint64_t event_count() const { return engine_->event_count(); }

  /// Blocks, without burning a core, until event_count() != `seen` or `when` passes.
  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    engine_->wait_for_event(seen, when);
  }

  // --- path control -----------------------------------------------------------------------

  /// Closes the path to `peer` and reopens it under `tuning`, without losing or repeating
  /// a byte of what is in flight; returns once it runs on the new tuning. The peer needs only
  /// to keep calling into its transport (any wait does).
  /// @throws commx::error errc::peer_lost, errc::timeout, errc::invalid_argument.
  void retune(int peer, const path_config& tuning) { paths_->retune(peer, tuning); }

  /// Opens the path to `peer` now rather than on its first large message, and returns once
  /// its streams are up (that message then leaves at once, within the peer's streamed window).
  /// @throws commx::error errc::peer_lost, errc::timeout, errc::invalid_argument.
  void open_path(int peer) { paths_->open(peer); }

  /// What the path to `peer` runs on now: its tuning, epoch and open streams.
  [[nodiscard]] path_state path(int peer) const { return paths_->state(peer); }

  /// While it lives, the large messages this rank sends go each on one data stream, `k` (mod
  /// the path's streams), instead of spread over all: MPWide's per-stream buffers
  /// (wan_parts.hpp). Small messages go on the control connection as always.
  class stream_pin {
   public:
    /// Pins `t`'s large sends to stream `k` until this pin is destroyed.
    stream_pin(wan& t, int k) : t_(t), before_(t.pinned_stream_) { t_.pinned_stream_ = k; }
    stream_pin(const stream_pin&) = delete;
    stream_pin& operator=(const stream_pin&) = delete;
    ~stream_pin() { t_.pinned_stream_ = before_; }

   private:
    wan& t_;
    int before_;
  };

  /// Runs at most one step of the transport's work (one read, one write, one handshake step)
  /// and says whether there was one. For tests that must stop between two steps of a transfer:
  /// every other call runs all the work there is, which on an idle machine can be all of it.
  bool progress_one() { return engine_->io().poll_one() > 0; }

  /// The socket of data stream `k` of the path to `peer`, or -1 (tests break one with it).
  [[nodiscard]] int native_stream(int peer, int k) const { return paths_->native_stream(peer, k); }

 private:
  // Destroyed in reverse: the streams close (and say so) before the control connections.
  std::unique_ptr<detail::tcp::engine> engine_;
  std::unique_ptr<detail::wan::paths> paths_;
  int pinned_stream_ = -1;
};

static_assert(transport<wan>);

}  // namespace commx::transport
