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
/// Locality: every rank is on node 0 unless `hub_options::nodes` says otherwise, which is how
/// tests make one process look like several nodes.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "commx/transport/concept.hpp"
#include "commx/transport/detail/inproc/hub.hpp"

namespace commx::transport {

class inproc {
 public:
  static constexpr std::string_view name = "inproc";
  using hub = detail::inproc::hub;
  using hub_options = detail::inproc::hub_options;

  /// Null when the operation completed at once, successfully (the common eager send).
  using request = std::shared_ptr<detail::inproc::operation>;

  inproc(std::shared_ptr<hub> shared, int rank) : hub_(std::move(shared)), rank_(rank) {}
  inproc(inproc&&) noexcept = default;
  inproc& operator=(inproc&& other) noexcept {
    close();
    hub_ = std::move(other.hub_);
    rank_ = other.rank_;
    return *this;
  }
  inproc(const inproc&) = delete;
  inproc& operator=(const inproc&) = delete;
  ~inproc() { close(); }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return hub_->size(); }
  [[nodiscard]] int node_of(int peer) const { return hub_->node_of(peer); }

  request isend(int dest, context_id ctx, int tag, std::span<const std::byte> data) {
    return hub_->send(rank_, dest, ctx, tag, data);
  }

  request irecv(int source, context_id ctx, int tag, recv_buffer buffer) {
    return hub_->recv(rank_, source, ctx, tag, buffer);
  }

  bool test(request& req) const { return !req || req->done.load(std::memory_order_acquire); }

  const op_result& result(const request& req) const {
    static const op_result delivered{};
    return req ? req->result : delivered;
  }

  bool cancel(request& req) { return req && hub_->cancel(*req); }

  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    return hub_->probe(rank_, source, ctx, tag);
  }

  [[nodiscard]] std::uint64_t event_count() const { return hub_->event_count(rank_); }

  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    hub_->wait_for_event(rank_, seen, when);
  }

  /// Marks this rank as failed: peers' unmatched any_source receives stop waiting for it too.
  void fail() {
    if (hub_) hub_->leave(rank_, /*failed=*/true);
  }

 private:
  void close() {
    if (hub_) hub_->leave(rank_, /*failed=*/false);
  }

  std::shared_ptr<hub> hub_;
  int rank_ = 0;
};

static_assert(transport<inproc>);

}  // namespace commx::transport
