// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::inproc`: ranks are threads of one process (`commx::run_inproc`). It honours the
/// transport concept's table exactly as the multi-process transports do, which makes it the
/// transport most tests run on and the one to debug an application with before it goes out.
///
/// A message is copied once, from the sender's buffer into the posted receive. Messages nobody
/// asked for yet are copied into the receiver's queue when small (<= 64 KiB, while the receiver
/// holds less than 64 MiB of them: that bound is the flow control); larger ones stay in the
/// sender's buffer and the send completes when a receive takes them.
///
/// Locality: every rank is on node 0 at site 0 unless `hub_options::nodes` and `sites` say
/// otherwise, which is how tests make one process look like several nodes and sites. Each
/// endpoint counts the bytes it sent to each peer (`bytes_sent_to`), so tests can see which
/// pairs, and so which levels, a collective's traffic crossed.

#include <cstdint>
#include <memory>
#include <vector>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "commx/log.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/detail/inproc/hub.hpp"

namespace commx::transport {

/// One rank's endpoint when the ranks are threads of one process, sharing one hub (see the
/// file comment; `commx::run_inproc` makes the hub and the endpoints).
class inproc {
 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "inproc";
  /// One process: nothing cuts its threads apart.
  static constexpr bool node_cannot_split = true;
  /// The state every rank of an inproc job shares.
  using hub = detail::inproc::hub;
  /// How a hub is made: rank count and which node each rank pretends to be on.
  using hub_options = detail::inproc::hub_options;

  /// Null when the operation completed at once, successfully (the common eager send).
  using request = std::shared_ptr<detail::inproc::operation>;

  /// This rank's endpoint onto `shared`, the hub of every rank of the job.
  inproc(std::shared_ptr<hub> shared, int rank)
      : hub_(std::move(shared)), rank_(rank), sent_to_(static_cast<std::size_t>(hub_->size())) {}
  /// Endpoints move; a moved-from endpoint owns nothing.
  inproc(inproc&&) noexcept = default;
  /// Closes this endpoint (its rank leaves), then takes over `other`'s.
  inproc& operator=(inproc&& other) noexcept {
    close();
    hub_ = std::move(other.hub_);
    rank_ = other.rank_;
    sent_to_ = std::move(other.sent_to_);
    return *this;
  }
  inproc(const inproc&) = delete;
  inproc& operator=(const inproc&) = delete;
  ~inproc() { close(); }

  /// This endpoint's world rank, in [0, size()).
  [[nodiscard]] int rank() const { return rank_; }
  /// The number of world ranks (>= 1).
  [[nodiscard]] int size() const { return hub_->size(); }
  /// The node `peer` is on: 0 for every rank unless hub_options::nodes says otherwise.
  [[nodiscard]] int node_of(int peer) const { return hub_->node_of(peer); }
  /// The site `peer` is at: 0 for every rank unless hub_options::sites says otherwise.
  [[nodiscard]] int site_of(int peer) const { return hub_->site_of(peer); }
  /// The payload bytes this endpoint has sent to `peer` (world rank) so far.
  [[nodiscard]] std::uint64_t bytes_sent_to(int peer) const {
    return sent_to_[static_cast<std::size_t>(peer)];
  }
  /// The ranks that failed (threw), in the order they did: the hub sees every rank's end.
  [[nodiscard]] std::vector<int> failed_peers() const { return hub_->failed_ranks(); }

  /// Starts sending `data` to `dest` on (`ctx`, `tag`); `data` must stay valid and unchanged
  /// until the request completes (transport concept, transport/concept.hpp).
  request isend(int dest, context_id ctx, int tag, const std::span<const std::byte>& data) {
    request sent = hub_->send(rank_, dest, ctx, tag, data);
    sent_to_[static_cast<std::size_t>(dest)] += data.size();  // the communicator checked dest
    return sent;
  }

  /// Starts receiving a message from `source` (or any_source) with `tag` (or any_tag) on `ctx`
  /// into `buffer` (transport concept).
  request irecv(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    return hub_->recv(rank_, source, ctx, tag, buffer);
  }

  /// Makes progress; true once `req` has completed, successfully or not.
  bool test(request& req) const { return !req || req->done.load(std::memory_order_acquire); }

  /// How a completed request ended: the matched source, tag and byte count, or the error.
  const op_result& result(const request& req) const {
    static const op_result delivered{};
    return req ? req->result : delivered;
  }

  /// Withdraws `req` if it has not matched yet (true); false if it has completed.
  bool cancel(request& req) { return req && hub_->cancel(*req); }

  /// The first queued message that a receive with these arguments would match, without
  /// receiving it; an error result when `source` is gone and nothing from it is queued.
  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    return hub_->probe(rank_, source, ctx, tag);
  }

  /// A counter that changes whenever something happens to this endpoint.
  [[nodiscard]] std::uint64_t event_count() const { return hub_->event_count(rank_); }

  /// Blocks, without burning a core, until event_count() != `seen` or `when` passes.
  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    hub_->wait_for_event(rank_, seen, when);
  }

  /// Marks this rank as failed (its peers count it in failed_peers()), not finished.
  void fail() {
    if (hub_) hub_->leave(rank_, /*failed=*/true);
  }

  /// Declares `peer` failed for every rank at once (the hub is shared): what waits on it ends
  /// with errc::peer_lost, and `peer`'s thread, if it still runs, finds every peer lost and
  /// its own rank in failed_peers() (transport::excludes_peers).
  void exclude(int peer, std::string_view why) {
    if (peer == rank_) return;
    const log::context here{"inproc", rank_};
    COMMX_LOG(warn, here, "declared rank {} lost: {}", peer, why);
    hub_->exclude(peer);
  }

 private:
  void close() {
    if (hub_) hub_->leave(rank_, /*failed=*/false);
  }

  std::shared_ptr<hub> hub_;
  int rank_ = 0;
  std::vector<std::uint64_t> sent_to_;  // payload bytes sent, per peer
};

static_assert(transport<inproc>);

}  // namespace commx::transport
