// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The port a communicator lends its collectives policy for one call (see coll/concept.hpp).
/// A nonblocking collective's port has a driver (detail/collective_task.hpp): at each point
/// where the policy would block, the driver says whether to block, hand control back, or give
/// the call up.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commx/coll/concept.hpp"
#include "commx/deadline.hpp"
#include "commx/detail/call_deadline.hpp"
#include "commx/detail/collective_task.hpp"
#include "commx/detail/rank_state.hpp"
#include "commx/detail/timeout.hpp"
#include "commx/error.hpp"
#include "commx/request.hpp"
#include "commx/serialize.hpp"
#include "commx/stats.hpp"

namespace commx::detail {

template <transport::transport T, stats::policy S>
class coll_port {
 public:
  /// One message a policy has in flight; withdrawn if dropped before it completes.
  class pending {
   public:
    pending() = default;
    pending(pending&& other) noexcept { *this = std::move(other); }
    pending& operator=(pending&& other) noexcept {
      if (this != &other) {
        withdraw();
        endpoint_ = std::exchange(other.endpoint_, nullptr);
        handle_ = std::move(other.handle_);  // `other` no longer withdraws it
        peer_ = other.peer_;
        expected_ = other.expected_;
        is_recv_ = other.is_recv_;
        received_ = other.received_;
        convert_ = other.convert_;
      }
      return *this;
    }
    pending(const pending&) = delete;
    pending& operator=(const pending&) = delete;
    ~pending() { withdraw(); }

   private:
    friend class coll_port;
    void withdraw() noexcept {
      if (endpoint_ != nullptr) (void)endpoint_->cancel(handle_);
      endpoint_ = nullptr;
    }

    T* endpoint_ = nullptr;  // null once completed
    typename T::request handle_{};
    int peer_ = 0;
    std::size_t expected_ = 0;
    bool is_recv_ = false;
    // Where a receive from a machine of another layout lands, and how to convert it there.
    std::span<std::byte> received_;
    void (*convert_)(std::span<std::byte>, const transport::data_layout&,
                     const transport::data_layout&, const error_context&) = nullptr;
  };

  /// `call_number` counts the communicator's collective calls and `phase` a call's parts (a
  /// check, the data); both go into the tag, so no message meets another call's receive.
  /// `driver` is the nonblocking collective's (`when` null), or null for a blocking call,
  /// bound by `when`.
  coll_port(rank_state<T, S>& state, const group& members, context_id ctx, int rank,
            call_deadline* when, stats::op kind, std::uint32_t call_number, int phase = 0,
            collective_driver* driver = nullptr)
      : state_(state),
        group_(members),
        ctx_(ctx),
        rank_(rank),
        when_(when),
        kind_(kind),
        tag_(static_cast<int>((call_number % call_numbers) * tags_per_call +
                              static_cast<std::uint32_t>(phase * phases_apart) +
                              static_cast<std::uint32_t>(kind))),
        driver_(driver) {}

  /// The stack's name, by which coll::tuned picks its table.
  static constexpr std::string_view stack = T::name;
  /// Whether the stack's ranks run on a simulated platform (transport::simgrid).
  static constexpr bool simulated = coll::simulated_stack<T>();

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return group_.size(); }
  [[nodiscard]] int node_of(int peer) const {
    return state_.endpoint.node_of(group_.world_of(peer));
  }
  /// The communicator's ranks by node, found at its first call that asks and kept with its
  /// group (coll/detail/node_layout.hpp).
  [[nodiscard]] const coll::detail::node_layout& node_layout() const {
    return group_.node_layout([this] { return coll::detail::node_layout::of(*this); });
  }
  /// The site `peer` is at: the transport's where it has sites, else 0 for every rank.
  [[nodiscard]] int site_of(int peer) const {
    if constexpr (requires { state_.endpoint.site_of(peer); }) {
      return state_.endpoint.site_of(group_.world_of(peer));
    } else {
      return 0;
    }
  }

  /// The transport endpoint and this call's context, for a policy that hands the whole
  /// collective to the transport (coll::native asks transport::mpi for the context's
  /// MPI_Comm). Policies written over point-to-point never need them.
  [[nodiscard]] T& endpoint() { return state_.endpoint; }
  [[nodiscard]] context_id context() const { return ctx_; }

  template <class E>
  pending isend(int peer, std::span<const E> out) {
    const detail::stopwatch<S> watch;
    const auto bytes = std::as_bytes(out);
    pending p = make_pending(peer, bytes.size(), false);
    start_in_place(p.handle_, [&] {
      return state_.endpoint.isend(group_.world_of(peer), ctx_, tag(), bytes);
    });
    if constexpr (S::enabled) {
      state_.stats.on_sent(kind_, bytes.size());
      state_.stats.add_send_time(kind_, watch.seconds());
    }
    return p;
  }

  template <class E>
  pending irecv(int peer, std::span<E> in) {
    const auto bytes = std::as_writable_bytes(in);
    pending p = make_pending(peer, bytes.size(), true);
    if constexpr (transport::knows_layouts<T>) {
      if (state_.mixed_layouts) [[unlikely]] {
        p.received_ = bytes;
        p.convert_ = &convert_received<std::remove_cv_t<E>>;
      }
    }
    start_in_place(p.handle_, [&] {
      return state_.endpoint.irecv(group_.world_of(peer), ctx_, tag(),
                                   transport::recv_buffer(bytes));
    });
    return p;
  }

  template <class E>
  void send(int peer, std::span<const E> out) {
    pending p = isend(peer, out);
    complete(p);
  }
  template <class E>
  void send(int peer, std::span<E> out) {
    send(peer, std::span<const E>(out));
  }

  template <class E>
  void recv(int peer, std::span<E> in) {
    pending p = irecv(peer, in);
    complete(p);
  }

  void wait_all(std::span<pending> requests) {
    for (pending& p : requests) complete(p);
  }

  /// Waits for an operation the policy started outside the port (coll::native's MPI
  /// requests), `started.test()` and `started.wait()`: as a blocking point, so that a
  /// nonblocking collective hands control back while it is in flight. MPI cannot withdraw a
  /// collective, so an abandoned one is waited for before its frames unwind.
  template <class Started>
  void await(Started& started) {
    if (driver_ != nullptr) {
      while (driver_->mode() == drive_mode::poll) {
        if (started.test()) return;
        driver_->yield();
      }
      if (driver_->mode() == drive_mode::abandon) {
        started.wait();
        throw collective_abandoned{};
      }
    }
    started.wait();
  }

 private:
  static constexpr int phases_apart = 64;  // more than there are stats::op kinds
  static constexpr std::uint32_t tags_per_call = 256;
  static constexpr std::uint32_t call_numbers = std::uint32_t{1} << 22;  // tags stay below 2^30
  [[nodiscard]] int tag() const { return tag_; }

  // A message too large for its collective is still queued; take it, so that the next
  // collective on this communicator does not receive it in place of its own.
  void drain(int peer) {
    std::vector<std::byte> sink;
    transport::recv_buffer anything(static_cast<void*>(&sink),
                                    &detail::grow_container<std::vector<std::byte>>);
    auto handle = state_.endpoint.irecv(group_.world_of(peer), ctx_, tag(), anything);
    if (!state_.endpoint.test(handle)) (void)state_.endpoint.cancel(handle);
  }

  pending make_pending(int peer, std::size_t bytes, bool is_recv) {
    pending p;
    p.endpoint_ = &state_.endpoint;
    p.peer_ = peer;
    p.expected_ = bytes;
    p.is_recv_ = is_recv;
    return p;
  }

  [[nodiscard]] error_context where(const pending& p) const {
    return {rank_, p.peer_, unknown, p.expected_, stats::name(kind_).data()};
  }

  // A policy's blocking point. A nonblocking collective tests and hands control back while
  // it is polled, and blocks only in its request's wait, until that wait's deadline.
  void complete(pending& p) {
    if (p.endpoint_ == nullptr) return;
    const detail::stopwatch<S> watch;
    bool done = false;
    if (driver_ != nullptr) {
      while (driver_->mode() == drive_mode::poll && !(done = state_.endpoint.test(p.handle_))) {
        if (group_.revoked()) break;
        driver_->yield();
      }
      if (driver_->mode() == drive_mode::abandon) throw collective_abandoned{};
      if (!done && !group_.revoked()) {
        done = settle(wait_watched(state_, group_, p.handle_, driver_->deadline()));
      }
    } else {
      // The call's deadline is resolved only if this message is not there at the first test.
      done = settle(wait_watched(state_, group_, p.handle_, [this] { return when_->resolve(); }));
    }
    if (!done && group_.revoked() && state_.endpoint.cancel(p.handle_)) {
      p.endpoint_ = nullptr;
      throw_error(errc::revoked, where(p), "the communicator was revoked during the collective");
    }
    if constexpr (S::enabled) {
      if (p.is_recv_)
        state_.stats.add_wait_time(kind_, watch.seconds());
      else
        state_.stats.add_send_time(kind_, watch.seconds());
    }
    if (!done && state_.endpoint.cancel(p.handle_)) {
      p.endpoint_ = nullptr;
      throw_timeout(state_.endpoint, where(p),
                    p.is_recv_ ? "waiting for this peer's part of the collective"
                               : "waiting for this peer to take its part of the collective");
    }
    p.endpoint_ = nullptr;
    const transport::op_result result = state_.endpoint.result(p.handle_);
    reset_in_place(p.handle_);
    if (result.error == errc::truncated) drain(p.peer_);
    if (result.error == errc::truncated ||
        (!result.error && p.is_recv_ && result.bytes != p.expected_)) {
      throw_error(errc::collective_mismatch, where(p),
                  fmt::format("peer {} sent {} bytes where {} were expected: ranks passed "
                              "different counts",
                              p.peer_, result.bytes, p.expected_));
    }
    if (result.error == errc::timeout) {  // the transport's own deadline (mpi's)
      throw_timeout(state_.endpoint, where(p), "the deadline passed before this peer's part");
    }
    if (result.error) {
      throw_error(result.error, where(p),
                  result.error == errc::peer_lost
                      ? "peer is gone" + known_lost_note(state_.endpoint, group_)
                      : "");
    }
    if constexpr (S::enabled) {
      if (p.is_recv_) state_.stats.on_received(kind_, result.bytes);
    }
    if constexpr (transport::knows_layouts<T>) {
      if (p.convert_ != nullptr) [[unlikely]] {
        const T& endpoint = state_.endpoint;
        p.convert_(p.received_, endpoint.layout_of(group_.world_of(p.peer_)),
                   endpoint.layout_of(endpoint.rank()), where(p));
      }
    }
  }

  static bool settle(wait_end end) { return end == wait_end::completed; }

  rank_state<T, S>& state_;
  const group& group_;
  context_id ctx_;
  int rank_;
  call_deadline* when_;
  stats::op kind_;
  int tag_;
  collective_driver* driver_;
};

}  // namespace commx::detail
