// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// communicator's point-to-point plumbing (communicator.hpp), out of line: posting sends and
/// receives as requests, the blocking fast paths through a transport's own blocking calls, and
/// probing the transport's queue. Their timeouts are logged (detail/timeout.hpp).

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/detail/library_call.hpp"
#include "commx/detail/timeout.hpp"

namespace commx {

namespace detail {

/// A blocking call's deadline for the transport's own blocking wait, and for what follows it.
/// It refers to the call's `until` rather than copying it: a deadline the caller has just
/// built is two narrower stores, and a 16-byte copy of it cannot load them until every store
/// ahead has drained, the last message's into a ring among them (transport/concept.hpp's note
/// on spans). Without the copy shm's 8-byte half round trip took 0.99x its time on one die.
struct sliced_wait {
  const deadline* until;  // the call's
  deadline slice{};       // where own_first: the transport's wait ends here instead
  deadline rest{};        // where sliced: for a request that takes over when the slice ran out
  bool own_first = false;
  bool sliced = false;

  [[nodiscard]] const deadline& first() const { return own_first ? slice : *until; }
  /// What a request that takes over from the transport's blocking call waits until: the rest
  /// where sliced (the slice ran out, or the transport declined the call), else the call's
  /// own deadline (the transport declined: a large message, a message held, a full ring).
  [[nodiscard]] const deadline& takes_over() const { return sliced ? rest : first(); }
};

/// On a stack that tells failures, the transport's blocking send and receive wait at most
/// `recovery_state::blocking_slice` (a revocation cannot reach a wait inside a transport); a
/// call still waiting then goes on as a request, whose waits look for revocations. Lazy as
/// the deadline itself: the default deadline reads no clock unless the call waits (its
/// remainder then runs from the slice's end, up to a slice late); another is resolved here.
template <class T>
sliced_wait slice_for_recovery(const deadline& until, clock::duration timeout) {
  if constexpr (!recovers<T>) {
    return {&until};
  } else {
    constexpr clock::duration slice = recovery_state<T>::blocking_slice;
    if (until.is_default()) {
      if (timeout <= slice) return {&until};
      return {&until, deadline(slice), deadline{}, true, true};  // the rest: the default again
    }
    const clock::time_point at = until.resolve(timeout);
    const clock::time_point cut = clock::now() + slice;
    if (at <= cut) return {&until, deadline(at), deadline{}, true, false};
    return {&until, deadline(cut), deadline(at), true, true};
  }
}

}  // namespace detail

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline status communicator<T, C, S>::probe(int source, int tag, deadline until) {
  const clock::time_point when = until.resolve(timeout_);
  const detail::stopwatch<S> watch;
  check_source(source, tag, "probe");
  if constexpr (S::enabled) state_->stats.on_call(stats::op::probe);
  [[maybe_unused]] const auto inside = detail::library_call(state_->endpoint);
  detail::recovery_watch<T, S> recovery(*state_, group_.get());
  for (;;) {
    const std::uint64_t seen = state_->endpoint.event_count();
    if (auto found = find_queued(source, tag, "probe")) {
      if constexpr (S::enabled) state_->stats.add_wait_time(stats::op::probe, watch.seconds());
      return *found;
    }
    if (!state_->running.empty()) state_->running.advance_all();
    const clock::time_point now = clock::now();
    if (recovery.revoked(seen, now)) {
      throw_error(errc::revoked, where("probe", source, tag, 0),
                  "the communicator was revoked while this waited");
    }
    if (now >= when) {
      detail::throw_timeout(state_->endpoint, where("probe", source, tag, 0),
                            "no matching message before the deadline");
    }
    state_->endpoint.wait_for_event(seen, recovery.sleep_until(seen, when));
  }
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline std::optional<status> communicator<T, C, S>::find_queued(int source, int tag,
                                                                const char* operation) {
  auto found = state_->endpoint.iprobe(world_source(source), ctx_, tag);
  if (!found) {
    if (source == any_source) {
      if (const std::optional<int> failed = detail::pending_failure(state_->endpoint, *group_)) {
        detail::throw_failure_pending(state_->endpoint, *failed, where(operation, source, tag, 0),
                                      *group_);
      }
    }
    return std::nullopt;
  }
  if (found->error) {
    throw_error(found->error, where(operation, source, tag, 0),
                fmt::format("{} is gone", group_->describe(found->source)));
  }
  return status{group_->local_of(found->source), found->tag, found->bytes};
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline auto communicator<T, C, S>::make_request(stats::op kind, error_context context, bool is_recv)
    -> request {
  return request(state_, group_, context, kind, timeout_, is_recv);
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M>
inline auto communicator<T, C, S>::post_send(int dest, int tag, const M& message, stats::op kind)
    -> request {
  const detail::stopwatch<S> watch;
  check_dest(dest, tag, stats::name(kind).data());
  std::span<const std::byte> bytes;
  std::unique_ptr<std::vector<std::byte>> staging;
  if constexpr (transfer_mode_of<M> == transfer_mode::raw) {
    bytes = detail::bytes_of(message);
  } else {
    staging = std::make_unique<std::vector<std::byte>>(detail::serialize(message));
    bytes = *staging;
  }
  return post_bytes(dest, tag, bytes, std::move(staging), kind, watch);
}

// A send of bytes (`staging` holds them for a serialized message), checked already.
template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline auto communicator<T, C, S>::post_bytes(int dest, int tag, std::span<const std::byte> bytes,
                                              std::unique_ptr<std::vector<std::byte>> staging,
                                              stats::op kind, const detail::stopwatch<S>& watch)
    -> request {
  if constexpr (S::enabled) state_->stats.on_call(kind);
  request req = make_request(kind, where(stats::name(kind).data(), dest, tag, bytes.size()), false);
  req.staging_ = std::move(staging);
  detail::start_in_place(req.handle_, [&] {
    return state_->endpoint.isend(group_->world_of(dest), ctx_, tag, bytes);
  });
  if constexpr (S::enabled) {
    state_->stats.on_sent(kind, bytes.size());
    state_->stats.add_send_time(kind, watch.seconds());  // posting; waiting is the request's
  }
  return req;
}

// A blocking send: through the transport's own blocking send where it has one
// (transport::blocking_send: no request, no shared state copied, and no clock read unless
// the send has to wait), else a request waited for. Counted alike either way. While the rank
// has nonblocking collectives in flight it waits as a request does, which moves them on.
template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M>
inline void communicator<T, C, S>::send_now(int dest, int tag, const M& message,
                                            const deadline& until, stats::op kind) {
  if constexpr (!transport::blocking_send<T>) {
    post_send(dest, tag, message, kind).wait(until);
  } else {
    if (!state_->running.empty()) [[unlikely]] {
      post_send(dest, tag, message, kind).wait(until);
      return;
    }
    const detail::stopwatch<S> watch;
    check_dest(dest, tag, stats::name(kind).data());
    std::span<const std::byte> bytes;
    std::vector<std::byte> staging;
    if constexpr (transfer_mode_of<M> == transfer_mode::raw) {
      bytes = detail::bytes_of(message);
    } else {
      staging = detail::serialize(message);
      bytes = staging;
    }
    const detail::sliced_wait wait = detail::slice_for_recovery<T>(until, timeout_);
    const std::optional<transport::op_result> sent = state_->endpoint.send_blocking(
        group_->world_of(dest), ctx_, tag, bytes, wait.first(), timeout_);
    if (!sent || (wait.sliced && sent->error == errc::timeout)) [[unlikely]] {
      std::unique_ptr<std::vector<std::byte>> kept;
      if constexpr (transfer_mode_of<M> != transfer_mode::raw) {
        kept = std::make_unique<std::vector<std::byte>>(std::move(staging));
        bytes = *kept;
      }
      post_bytes(dest, tag, bytes, std::move(kept), kind, watch).wait(wait.takes_over());
      return;
    }
    if constexpr (S::enabled) {
      state_->stats.on_call(kind);
      state_->stats.on_sent(kind, bytes.size());
      state_->stats.add_send_time(kind, watch.seconds());
    }
    if (sent->error) [[unlikely]] {
      fail(*sent, where(stats::name(kind).data(), dest, tag, bytes.size()));
    }
  }
}

// Where a receive into `message` writes: its own bytes (a fixed buffer), the container grown
// to fit, or `staging` (serialized messages, decoded once received).
template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M>
inline transport::recv_buffer communicator<T, C, S>::receive_buffer(
    M& message, std::vector<std::byte>* staging) {
  using target = std::remove_cvref_t<M>;
  if constexpr (recv_mode_of<target> == recv_mode::fixed) {
    // A fixed range takes any whole number of its elements; a single value exactly itself.
    return transport::recv_buffer(detail::writable_bytes_of(message),
                                  detail::element_size<target>(), !raw_range<target>);
  } else if constexpr (recv_mode_of<target> == recv_mode::resize) {
    return {static_cast<void*>(std::addressof(message)), &detail::grow_container<target>};
  } else {
    return {static_cast<void*>(staging), &detail::grow_container<std::vector<std::byte>>};
  }
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M>
inline auto communicator<T, C, S>::post_recv(int source, int tag, M& message, stats::op kind)
    -> request {
  using target = std::remove_cvref_t<M>;
  check_source(source, tag, stats::name(kind).data());
  if constexpr (S::enabled) state_->stats.on_call(kind);
  request req = make_request(kind, where(stats::name(kind).data(), source, tag, 0), true);
  if constexpr (recv_mode_of<target> == recv_mode::serialized) {
    req.staging_ = std::make_unique<std::vector<std::byte>>();
    req.target_ = std::addressof(message);
    req.decode_ = [](request& r) {
      detail::deserialize(*r.staging_, *static_cast<target*>(r.target_), r.where());
    };
  } else if constexpr (transport::knows_layouts<T>) {
    if (state_->mixed_layouts) [[unlikely]] {
      // A span may come const (the view is, its elements are not): only elements are written.
      req.target_ = const_cast<target*>(std::addressof(message));
      req.decode_ = [](request& r) {
        const T& endpoint = r.state_->endpoint;
        detail::convert_message(*static_cast<target*>(r.target_), r.status_.bytes,
                                endpoint.layout_of(r.group_->world_of(r.status_.source)),
                                endpoint.layout_of(endpoint.rank()), r.where());
      };
    }
  }
  const transport::recv_buffer buffer = receive_buffer(message, req.staging_.get());
  if constexpr (fixed_buffer<M>) req.bytes_ = buffer.capacity();
  detail::start_in_place(
      req.handle_, [&] { return state_->endpoint.irecv(world_source(source), ctx_, tag, buffer); });
  return req;
}

// A blocking receive through the transport's own (transport::blocking_recv): what
// post_recv and a request's wait do, without the request. Counted alike. As a request while
// nonblocking collectives are in flight (see send_now).
template <transport::transport T, coll::collectives<T> C, stats::policy S>
template <class M>
inline status communicator<T, C, S>::recv_now(int source, int tag, M& message,
                                              const deadline& until, stats::op kind) {
  using target = std::remove_cvref_t<M>;
  if (!state_->running.empty()) [[unlikely]]
    return post_recv(source, tag, message, kind).wait(until);
  if constexpr (transport::knows_failures<T>) {
    // A wildcard that a failure may end (detail/failures.hpp) waits as a request, whose waits
    // look; a transport's blocking receive does not (where it is not sliced, not at all).
    if (source == any_source &&
        (!detail::recovers<T> || detail::pending_failure(state_->endpoint, *group_))) [[unlikely]]
      return post_recv(source, tag, message, kind).wait(until);
  }
  const detail::stopwatch<S> watch;
  check_source(source, tag, stats::name(kind).data());
  std::vector<std::byte> staging;  // serialized messages only
  const transport::recv_buffer buffer = receive_buffer(message, &staging);
  const detail::sliced_wait wait = detail::slice_for_recovery<T>(until, timeout_);
  const std::optional<transport::op_result> got = state_->endpoint.recv_blocking(
      world_source(source), ctx_, tag, buffer, wait.first(), timeout_);
  if (!got || (wait.sliced && got->error == errc::timeout)) [[unlikely]]
    return post_recv(source, tag, message, kind).wait(wait.takes_over());
  if constexpr (S::enabled) {
    state_->stats.on_call(kind);
    state_->stats.add_wait_time(kind, watch.seconds());
  }
  const auto here = [&] {
    return where(stats::name(kind).data(), source, tag, fixed_buffer<M> ? buffer.capacity() : 0);
  };
  if (got->error) [[unlikely]]
    fail(*got, here());
  if constexpr (S::enabled) state_->stats.on_received(kind, got->bytes);
  if constexpr (recv_mode_of<target> == recv_mode::serialized) {
    detail::deserialize(staging, message, here());
  } else if constexpr (transport::knows_layouts<T>) {
    if (state_->mixed_layouts) [[unlikely]] {
      const T& endpoint = state_->endpoint;
      detail::convert_message(message, got->bytes, endpoint.layout_of(got->source),
                              endpoint.layout_of(endpoint.rank()), here());
    }
  }
  return status{group_->local_of(got->source), got->tag, got->bytes};
}

// A blocking fast path's failure, raised as a request's wait raises it.
template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::fail(const transport::op_result& result,
                                        const error_context& context) const {
  detail::throw_failed(state_->endpoint, result, context, *group_);
}

}  // namespace commx
