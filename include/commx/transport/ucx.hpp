// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::ucx`: ranks are processes that talk through UCX's tag API (UCP), so a cluster's
/// fabric (InfiniBand, RoCE: UCX's rc, ud, dc and their mlx5 forms) carries commx's messages
/// without MPI; on a machine without one, UCX's TCP and shared-memory transports (posix, sysv,
/// cma) do. Which UCX uses stays the user's: UCX_TLS, UCX_NET_DEVICES, UCX_RNDV_THRESH and the
/// rest of UCX's variables apply as they would to any UCX program.
///
/// Start: the job starts as tcp's does (COMMX_ROOT's rendezvous under commxrun, srun or mpirun,
/// or PMIx: detail/tcp/config.hpp), and the ranks' UCX worker addresses travel through that
/// bootstrap (detail/ucx/wireup.hpp): UCX needs no out-of-band of its own. The bootstrap's
/// endpoint stays open for the job (its listening socket and the connections the address
/// exchange made: a rank's to its parent and children in a binomial tree, about log2 N) and
/// gives node ids, sites and data layouts as tcp does.
///
/// Messages: an envelope is packed into UCP's 64-bit tag (detail/ucx/tag_bits.hpp: the context
/// id gets what the job's size leaves, 32 bits at 2 ranks and 21 at 4,096); matching is commx's
/// own on messages probed out of UCX (detail/ucx/engine.hpp), so a receive too small for a
/// message refuses it and leaves it queued, which a receive posted to UCX could not. Small
/// messages go eagerly, large ones by UCX's rendezvous into the receive's memory.
///
/// Peers: endpoints are made on first use, so a rank that talks to k peers holds k endpoints;
/// with UCX's peer error handling, a dead peer ends what waits on it with errc::peer_lost and
/// joins failed_peers(); one that finished (said bye as it closed) ends them too but is not
/// failed. Peers are checked every second unless UCX_KEEPALIVE_INTERVAL says otherwise. UCX's
/// shared memory has no peer error handling, so it carries messages only between ranks of a
/// node that nothing else reaches (UCX_TLS=sm,self), whose processes commx then watches; within
/// a node, shm_ucx.hpp (commx's own shared memory) is the fast path.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "commx/transport/concept.hpp"
#include "commx/transport/detail/ucx/engine.hpp"
#include "commx/transport/detail/ucx/rma_window.hpp"

namespace commx::transport {

/// One rank's endpoint in a job whose messages travel through UCX (see the file comment).
class ucx {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "ucx";
  /// The bootstrap's settings: tcp's (COMMX_ROOT, COMMX_TOKEN, COMMX_TIMEOUT, ...).
  using config = tcp::config;
  /// Null when the operation completed at once, successfully (the common eager send).
  using request = detail::ucx::operation_handle;

  /// Joins the job `cfg` describes and exchanges UCX addresses.
  /// @throws commx::error errc::bootstrap_failed (naming what is missing, or what UCX said when
  ///   it found no usable transport), errc::authentication_failed.
  explicit ucx(config cfg) : engine_(std::make_unique<detail::ucx::engine>(std::move(cfg))) {}

  /// Joins the job this process belongs to, as the environment describes it.
  static ucx from_env() { return ucx(detail::tcp::config_from_env()); }

  /// This endpoint's world rank, in [0, size()).
  [[nodiscard]] int rank() const { return engine_->rank(); }
  /// The number of world ranks (>= 1).
  [[nodiscard]] int size() const { return engine_->size(); }
  /// The node `peer` is on, as tcp tells it (COMMX_NODE, else the host).
  [[nodiscard]] int node_of(int peer) const { return engine_->node_of(peer); }
  /// The site `peer` is at (COMMX_SITE).
  [[nodiscard]] int site_of(int peer) const { return engine_->site_of(peer); }
  /// The payload bytes this endpoint has handed to sends to `peer` so far.
  [[nodiscard]] std::uint64_t bytes_sent_to(int peer) const { return engine_->bytes_sent_to(peer); }
  /// The peers this endpoint found failed, in the order it found them (transport concept).
  [[nodiscard]] std::vector<int> failed_peers() const { return engine_->failed_peers(); }
  /// How `peer`'s machine lays out values, as it said when the job started.
  [[nodiscard]] data_layout layout_of(int peer) const { return engine_->layout_of(peer); }
  /// The UCX endpoints this rank holds: one per peer it has talked to, or that talked to it.
  [[nodiscard]] int endpoints() const { return engine_->endpoints(); }
  /// How long a blocking step of the transport's own may take: COMMX_TIMEOUT.
  [[nodiscard]] clock::duration timeout() const { return engine_->timeout(); }

  /// Starts sending `data` to `dest` on (`ctx`, `tag`) (transport concept).
  request isend(int dest, context_id ctx, int tag, const std::span<const std::byte>& data) {
    return engine_->isend(dest, ctx, tag, data);
  }
  /// Starts receiving from `source` (or any_source) with `tag` (or any_tag) on `ctx`.
  request irecv(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    return engine_->irecv(source, ctx, tag, buffer);
  }
  /// Makes progress; true once `req` has completed, successfully or not.
  bool test(request& req) { return engine_->test(req); }
  /// True once `req` has completed, without making progress (after `progress()`).
  [[nodiscard]] bool completed(const request& req) const { return !req || req->done; }
  /// How a completed request ended.
  const op_result& result(const request& req) const {
    static const op_result delivered{};
    return req ? req->result : delivered;
  }
  /// Withdraws `req` if it has not matched yet (true); false if it has completed.
  bool cancel(request& req) { return engine_->cancel(req); }
  /// The first queued message a receive with these arguments would match, without taking it.
  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    return engine_->iprobe(source, ctx, tag);
  }
  /// Takes in what arrived without waiting.
  void progress() { engine_->progress(); }
  /// A counter that changes whenever something happens to this endpoint.
  [[nodiscard]] std::uint64_t event_count() const { return engine_->event_count(); }
  /// Blocks, without burning a core, until event_count() != `seen` or `when` passes.
  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    engine_->wait_for_event(seen, when);
  }

  /// What carries a commx::window of E elements (4 or 8 bytes): UCP's remote memory access
  /// (detail/ucx/rma_window.hpp).
  template <class E>
  using rma_window = detail::ucx::rma_window<E>;
  /// Whether rma_window carries elements of type E: the sizes UCX's atomics take.
  template <class E>
  static constexpr bool rma_carries = sizeof(E) == 4 || sizeof(E) == 8;
  /// The engine, for what shares its UCX worker and endpoints (rma_window).
  [[nodiscard]] detail::ucx::engine& engine() { return *engine_; }

 private:
  std::unique_ptr<detail::ucx::engine> engine_;
};

static_assert(transport<ucx> && progresses_apart<ucx> && knows_failures<ucx>);

}  // namespace commx::transport
