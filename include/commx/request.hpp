// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Nonblocking requests and the status of a completed receive.
///
/// A request owns one pending send or receive, or one nonblocking collective. `wait` blocks
/// until it completes (or its deadline passes: errc::timeout, and the request is withdrawn),
/// `test` checks without blocking, `wait_all` and `wait_any` take several. Destroying a request
/// that has not completed cancels it, so a buffer never outlives the operation that writes
/// into it.
///
/// A nonblocking collective (`communicator::iallreduce`, ...) moves on whenever its rank waits
/// or tests anything; see detail/collective_task.hpp. Its request cannot be cancelled (MPI's
/// rule too), and destroying it unfinished abandons this rank's part: the other ranks' waits
/// end in errc::timeout.
///
/// Thread safety: a request is used by the thread that owns its communicator.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "commx/coll/concept.hpp"
#include "commx/deadline.hpp"
#include "commx/detail/failures.hpp"
#include "commx/detail/library_call.hpp"
#include "commx/detail/local_shared.hpp"
#include "commx/detail/rank_state.hpp"
#include "commx/detail/recovery.hpp"
#include "commx/detail/timeout.hpp"
#include "commx/error.hpp"
#include "commx/serialize.hpp"
#include "commx/stats.hpp"
#include "commx/transport/concept.hpp"

namespace commx {

/// What a receive or probe found: the sender's rank in the communicator, the tag, the size.
struct status {
  int source = any_source;  ///< the rank the message came from
  int tag = any_tag;        ///< its tag
  std::size_t bytes = 0;    ///< its size in bytes

  /// The number of whole elements of type E the message holds.
  template <class E>
  [[nodiscard]] std::size_t count() const {
    return bytes / sizeof(E);
  }
};

namespace detail {

/// How a wait ended.
enum class wait_end : std::uint8_t { completed, deadline, revoked, failure_pending };

/// A wait that watches for nothing but its operation.
struct no_watch {
  static constexpr bool revoked(std::uint64_t /*seen*/, clock::time_point /*now*/) { return false; }
  static constexpr bool failure_pending() { return false; }
  static constexpr clock::time_point sleep_until(std::uint64_t /*seen*/, clock::time_point until) {
    return until;
  }
};

/// Waits for `handle` until `when`, sleeping in the transport between events and moving on
/// the rank's nonblocking collectives (`running`, if given) at each. `when` is a time point,
/// or a callable that gives it: then it is asked only once a test has found the operation
/// unfinished, so a wait that need not wait reads no clock. `watch` (recovery.hpp's
/// recovery_watch) may end it early, `revoked`, and shorten its sleeps.
template <transport::transport T, class When, class Watch = no_watch>
wait_end wait_for(T& endpoint, typename T::request& handle, When&& when,
                  running_collectives* running = nullptr, Watch watch = {}) {
  [[maybe_unused]] const auto inside = library_call(endpoint);
  std::optional<clock::time_point> until;
  for (;;) {
    const std::uint64_t seen = endpoint.event_count();
    if (running != nullptr && !running->empty()) running->advance_all();
    if (endpoint.test(handle)) return wait_end::completed;
    if (!until) {
      if constexpr (std::is_invocable_r_v<clock::time_point, When&>) {
        until = when();
      } else {
        until = when;
      }
    }
    const clock::time_point now = clock::now();
    if (watch.revoked(seen, now)) return wait_end::revoked;
    if (watch.failure_pending()) return wait_end::failure_pending;
    if (now >= *until) return wait_end::deadline;
    endpoint.wait_for_event(seen, watch.sleep_until(seen, *until));
  }
}

/// wait_for, watching nothing: false on timeout.
template <transport::transport T, class When>
bool wait_until(T& endpoint, typename T::request& handle, When&& when,
                running_collectives* running = nullptr) {
  return wait_for(endpoint, handle, std::forward<When>(when), running) == wait_end::completed;
}

/// wait_for on one of `state`'s operations on `members`, looking for recovery on the way: it
/// ends `revoked` once `members` is, the operation still pending (unless `revocable` is false:
/// recovery's own waits go on on a revoked communicator), and `failure_pending` if it is an
/// `any_source` receive (`wildcard`) that a member's unacknowledged failure ends.
template <transport::transport T, stats::policy S, class When>
wait_end wait_watched(rank_state<T, S>& state, const group& members, typename T::request& handle,
                      When&& when, bool revocable = true, bool wildcard = false) {
  return wait_for(state.endpoint, handle, std::forward<When>(when), &state.running,
                  recovery_watch<T, S>(state, &members, revocable, wildcard));
}

// A transport request is replaced in place, never assigned from a temporary: the compiler
// writes such a temporary field by field and reads it back 16 bytes at a time, and each read
// waits for the writes to drain (a store-forwarding stall, several per message on mpi).
template <class Handle>
void reset_in_place(Handle& handle) noexcept {
  std::destroy_at(std::addressof(handle));
  ::new (static_cast<void*>(std::addressof(handle))) Handle();
}

/// `handle` becomes what `start()` returns, built where it lies (C++17's guaranteed elision of
/// a prvalue initialiser); on an exception it is left a fresh request.
template <class Handle, class Start>
void start_in_place(Handle& handle, Start&& start) {
  std::destroy_at(std::addressof(handle));
  try {
    ::new (static_cast<void*>(std::addressof(handle))) Handle(std::forward<Start>(start)());
  } catch (...) {
    ::new (static_cast<void*>(std::addressof(handle))) Handle();
    throw;
  }
}

/// Measures a span of time only when the stats policy wants it; otherwise reads no clock.
template <stats::policy S>
class stopwatch {
 public:
  stopwatch() {
    if constexpr (S::enabled) start_ = clock::now();
  }
  [[nodiscard]] double seconds() const {
    if constexpr (S::enabled) return std::chrono::duration<double>(clock::now() - start_).count();
    return 0;
  }

 private:
  struct nothing {};
  [[no_unique_address]] std::conditional_t<S::enabled, clock::time_point, nothing> start_{};
};

/// Throws the error an operation on `endpoint` ended with (`result.error`), naming the
/// operation (`where`) and, for a receive, the message's sender in `members`' ranks. A timeout
/// (the transport's own deadline, mpi's) is logged first, as every timeout is.
template <class Endpoint>
[[noreturn]] void throw_failed(const Endpoint& endpoint, const transport::op_result& result,
                               const error_context& where, const group& members) {
  if (result.error == errc::timeout) {
    throw_timeout(endpoint, where, "the deadline passed before the operation completed");
  }
  if (result.error == errc::truncated) {
    throw_error(result.error, where,
                fmt::format("a message of {} bytes from {} tag {} does not fit; it stays "
                            "queued for a larger receive",
                            result.bytes, members.describe(result.source), result.tag));
  }
  if (result.error == errc::type_mismatch) {
    throw_error(result.error, where,
                fmt::format("a message of {} bytes from {} is not a whole number of this "
                            "buffer's elements; it stays queued",
                            result.bytes, members.describe(result.source)));
  }
  if (result.error == errc::peer_lost) {
    throw_error(result.error, where,
                fmt::format("{} is gone{}", members.describe(result.source),
                            known_lost_note(endpoint, members)));
  }
  throw_error(result.error, where);
}

/// Grows a resizable container to hold `bytes` bytes, for receives of unknown size.
template <class Container>
std::byte* grow_container(void* container, std::size_t bytes, std::error_code& ec) {
  using element = std::ranges::range_value_t<Container>;
  if (bytes % sizeof(element) != 0) {
    ec = make_error_code(errc::type_mismatch);
    return nullptr;
  }
  auto& target = *static_cast<Container*>(container);
  try {
    target.resize(bytes / sizeof(element));
  } catch (const std::bad_alloc&) {
    ec = make_error_code(errc::truncated);
    return nullptr;
  }
  return reinterpret_cast<std::byte*>(std::ranges::data(target));
}

}  // namespace detail

/// A nonblocking operation in flight: `wait` or `test` it, or let its destructor cancel it.
/// @tparam T the transport of the communicator that made it.
/// @tparam S its stats policy.
template <transport::transport T, stats::policy S>
class request {
 public:
  /// The transport of the communicator that made it.
  using transport_type = T;

  request() = default;
  /// Takes over `other`'s operation; `other` becomes empty. (Member by member: a request is
  /// moved into a container once per message, and a window of them is a hot path.)
  request(request&& other) noexcept
      : state_(std::move(other.state_)),
        group_(std::move(other.group_)),
        handle_(std::move(other.handle_)),  // `other` is inactive: its handle is never read
        timeout_(other.timeout_),
        bytes_(other.bytes_),
        rank_(other.rank_),
        peer_(other.peer_),
        tag_(other.tag_),
        kind_(other.kind_),
        is_recv_(other.is_recv_),
        active_(std::exchange(other.active_, false)),
        cancelled_(other.cancelled_),
        status_(other.status_),
        staging_(std::move(other.staging_)),
        target_(other.target_),
        decode_(other.decode_),
        task_(std::move(other.task_)) {}
  /// Withdraws this request's operation if it has not matched yet, then takes over `other`'s.
  request& operator=(request&& other) noexcept {
    if (this != &other) {
      abandon();
      state_ = std::move(other.state_);
      group_ = std::move(other.group_);
      handle_ = std::move(other.handle_);
      timeout_ = other.timeout_;
      bytes_ = other.bytes_;
      rank_ = other.rank_;
      peer_ = other.peer_;
      tag_ = other.tag_;
      kind_ = other.kind_;
      is_recv_ = other.is_recv_;
      active_ = std::exchange(other.active_, false);
      cancelled_ = other.cancelled_;
      status_ = other.status_;
      staging_ = std::move(other.staging_);
      target_ = other.target_;
      decode_ = other.decode_;
      task_ = std::move(other.task_);
    }
    return *this;
  }
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() { abandon(); }

  /// Blocks until the operation completes.
  /// @throws commx::error errc::timeout when the deadline passes (the request is withdrawn);
  ///   errc::truncated, errc::peer_lost, errc::type_mismatch, errc::serialization_failed.
  status wait(deadline until = {}) {
    return wait_until([&] { return until.resolve(timeout_); });
  }

  /// The status if the operation has completed, without blocking. Throws as `wait` does.
  std::optional<status> test() {
    if (!active_) return finished();
    if (task_) {  // moves this collective on, and the rank's others too (MPI's progress rule)
      state_->running.advance_all();
      if (!task_->done()) return std::nullopt;
      return collective_ended();
    }
    if (!state_->running.empty()) state_->running.advance_all();
    if (!state_->endpoint.test(handle_)) {
      end_if_failure_pending();
      return std::nullopt;
    }
    return complete();
  }

  /// True while the operation is pending.
  [[nodiscard]] bool active() const { return active_; }

  /// Withdraws the operation if it has not matched yet; true if it was withdrawn. A
  /// collective is never withdrawn.
  bool cancel() {
    if (!active_ || task_) return false;
    if (!state_->endpoint.cancel(handle_)) return false;
    active_ = false;
    cancelled_ = true;
    return true;
  }

  /// The status of the completed operation (after `wait` or a successful `test`).
  [[nodiscard]] const status& last_status() const { return status_; }

 private:
  template <transport::transport T2, coll::collectives<T2> C2, stats::policy S2>
  friend class communicator;
  template <class Range>
  friend std::size_t wait_any(Range&& requests, deadline until);
  template <class Range>
  friend void wait_all(Range&& requests, deadline until);

  using decoder = void (*)(request&);

  // A pending request of `state`'s rank (communicator::make_request); `where` names it in
  // errors, its operation being `kind`'s name.
  request(detail::local_shared<detail::rank_state<T, S>> state,
          detail::local_shared<const detail::group> group, const error_context& where,
          stats::op kind, clock::duration timeout, bool is_recv)
      : state_(std::move(state)),
        group_(std::move(group)),
        timeout_(timeout),
        bytes_(where.bytes),
        rank_(where.rank),
        peer_(where.peer),
        tag_(where.tag),
        kind_(kind),
        is_recv_(is_recv),
        active_(true) {}

  // What an error names: built only when one is thrown, so a request carries its parts.
  [[nodiscard]] error_context where() const {
    return {rank_, peer_, tag_, bytes_, stats::name(kind_).data()};
  }

  // `when` gives the deadline, asked only once the operation has been found unfinished.
  template <class When>
  status wait_until(When&& when) {
    if (!active_) return finished();
    const detail::stopwatch<S> watch;
    if (task_) {
      task_->finish(when());
      account_wait(watch.seconds());
      return collective_ended();
    }
    const detail::wait_end end =
        detail::wait_watched(*state_, *group_, handle_, when, true, wildcard());
    account_wait(watch.seconds());
    if (end == detail::wait_end::revoked && cancel()) {
      throw_error(errc::revoked, where(), "the communicator was revoked while this waited");
    }
    if (end == detail::wait_end::failure_pending) end_if_failure_pending();
    if (end == detail::wait_end::deadline && cancel()) {
      detail::throw_timeout(state_->endpoint, where(),
                            "the deadline passed before the operation completed");
    }
    return complete();
  }

  [[nodiscard]] bool wildcard() const { return is_recv_ && peer_ == any_source; }

  // An unmatched any_source receive on a communicator with an unacknowledged failed member is
  // withdrawn and raises peer_lost (detail/failures.hpp); one that matched meanwhile is not.
  void end_if_failure_pending() {
    if constexpr (transport::knows_failures<T>) {
      if (!wildcard()) return;
      const std::optional<int> failed = detail::pending_failure(state_->endpoint, *group_);
      if (failed && cancel()) {
        detail::throw_failure_pending(state_->endpoint, *failed, where(), *group_);
      }
    }
  }

  // The status of a request that is no longer pending; a cancelled one has none.
  status finished() const {
    if (cancelled_) throw_error(errc::cancelled, where(), "the request was cancelled");
    return status_;
  }

  void account_wait(double seconds) {
    if constexpr (S::enabled) {
      if (is_recv_)
        state_->stats.add_wait_time(kind_, seconds);
      else
        state_->stats.add_send_time(kind_, seconds);
    }
  }

  status complete() {
    active_ = false;
    // Read where it lies, not copied: a copy of the result the transport has just written is
    // read back before its writes drain (a store-forwarding stall per message).
    const auto& ended = state_->endpoint.result(handle_);
    if (ended.error) [[unlikely]] {
      const transport::op_result result = ended;
      release_handle();
      fail(result);
    }
    if (is_recv_) {
      status_.source = group_->local_of(ended.source);
      status_.tag = ended.tag;
      status_.bytes = ended.bytes;
    }
    release_handle();
    if (!is_recv_) return status_;
    if constexpr (S::enabled) state_->stats.on_received(kind_, status_.bytes);
    if (decode_ != nullptr) decode_(*this);
    return status_;
  }

  // Frees what the transport's finished operation still holds, now rather than when the
  // request dies; a handle that holds nothing (mpi's) is left as it is, unread from here on.
  void release_handle() noexcept {
    if constexpr (!std::is_trivially_destructible_v<typename T::request>) {
      detail::reset_in_place(handle_);
    }
  }

  // A collective's request once its code has ended: its error, if it has one, is thrown.
  status collective_ended() {
    active_ = false;
    const std::unique_ptr<detail::collective_task> ended = std::move(task_);
    ended->rethrow();
    return status_;
  }

  [[noreturn]] void fail(const transport::op_result& result) {
    detail::throw_failed(state_->endpoint, result, where(), *group_);
  }

  // A request that dies pending must not leave the transport writing into freed memory.
  void abandon() noexcept {
    if (!active_) return;
    if (task_) {
      task_.reset();  // unwinds the collective's code, withdrawing what it posted
      active_ = false;
      return;
    }
    // False means it matched in the meantime: then there is nothing left to withdraw.
    (void)state_->endpoint.cancel(handle_);
    active_ = false;
  }

  detail::local_shared<detail::rank_state<T, S>> state_;
  detail::local_shared<const detail::group> group_;
  typename T::request handle_{};
  clock::duration timeout_{};
  // The call as errors name it (where()); packed with the flags: a request is built and moved
  // once per message, so its size is a cost of every nonblocking call.
  std::size_t bytes_ = 0;
  int rank_ = unknown;
  int peer_ = unknown;
  int tag_ = unknown;
  stats::op kind_ = stats::op::isend;
  bool is_recv_ = false;
  bool active_ = false;
  bool cancelled_ = false;
  status status_{};
  std::unique_ptr<std::vector<std::byte>> staging_;  // serialized messages only
  void* target_ = nullptr;
  decoder decode_ = nullptr;
  // A nonblocking collective; declared after state_, so it ends before the rank's state does.
  std::unique_ptr<detail::collective_task> task_;
};

/// Waits for every request in `requests` with one deadline for all.
/// @throws commx::error as request::wait, for the first request that fails.
template <class Range>
void wait_all(Range&& requests, deadline until) {
  std::optional<clock::time_point> when;  // resolved when a request first has to wait
  for (auto& req : requests) {
    if (!req.active()) continue;
    req.wait_until([&] {
      if (!when) when = until.resolve(req.timeout_);
      return *when;
    });
  }
}

/// wait_all with the default deadline (each communicator's timeout).
template <class Range>
void wait_all(Range&& requests) {
  wait_all(std::forward<Range>(requests), deadline{});
}

/// Waits until one of `requests` completes and returns its index (its status is in
/// `last_status()`), or `requests.size()` when none is active. All must come from communicators
/// of one rank.
template <class Range>
std::size_t wait_any(Range&& requests, deadline until) {
  auto first = std::ranges::find_if(requests, [](const auto& r) { return r.active(); });
  if (first == std::ranges::end(requests)) return std::ranges::size(requests);
  auto& state = first->state_;
  const clock::time_point when = until.resolve(first->timeout_);
  [[maybe_unused]] const auto inside = detail::library_call(state->endpoint);
  for (;;) {
    const std::uint64_t seen = state->endpoint.event_count();
    std::size_t index = 0;
    for (auto& req : requests) {
      if (req.active() && req.state_ != state) {
        throw_error(errc::invalid_argument, req.where(),
                    "wait_any: the requests belong to different ranks");
      }
      if (req.active() && req.task_ && req.task_->advance()) {
        req.collective_ended();
        return index;
      }
      if (req.active() && !req.task_ && state->endpoint.test(req.handle_)) {
        req.complete();
        return index;
      }
      if (req.active() && !req.task_) req.end_if_failure_pending();
      ++index;
    }
    const clock::time_point now = clock::now();
    if constexpr (detail::recovers<
                      typename std::remove_cvref_t<decltype(*first)>::transport_type>) {
      const bool due = std::ranges::any_of(requests, [&](auto& req) {
        return req.active() && state->recovery.due(seen, now, req.group_->channel());
      });
      if (due) {
        for (auto& req : requests) {
          if (req.active()) detail::look_for_recovery(*state, req.group_.get(), now);
        }
      }
      for (auto& req : requests) {
        if (req.active() && !req.task_ && req.group_->revoked() && req.cancel()) {
          throw_error(errc::revoked, req.where(),
                      "wait_any: the communicator was revoked while this waited");
        }
      }
    }
    if (now >= when) {
      detail::throw_timeout(state->endpoint, first->where(),
                            fmt::format("wait_any: none of {} requests completed before the "
                                        "deadline",
                                        std::ranges::size(requests)));
    }
    state->running.advance_all();  // the rank's collectives outside `requests` too
    // Waits on several communicators wake each poll_gap to look (recovery_state::due).
    state->endpoint.wait_for_event(
        seen, detail::recovery_watch(*state, first->group_.get()).sleep_until(seen, when));
  }
}

/// wait_any with the default deadline (the communicator's timeout).
template <class Range>
std::size_t wait_any(Range&& requests) {
  return wait_any(std::forward<Range>(requests), deadline{});
}

}  // namespace commx
