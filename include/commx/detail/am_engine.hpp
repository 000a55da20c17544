// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The engine under active messages and message-carried windows: requests to a numbered
/// handler at a target, run by the target's progress, answered by a reply that completes the
/// origin's call.
///
/// Each engine owns a communicator of its own (a `dup`), so its messages never meet the
/// application's, and keeps one receive posted per peer on it: a peer that fails completes
/// only its own receive with errc::peer_lost, and every call waiting on that peer fails with
/// it, while the others go on. Messages from one origin are served in the order they were sent.
///
/// | message | tag | first word | second word | then |
/// |---|---|---|---|---|
/// | request | 1 | handler id | call id | the argument's bytes |
/// | reply | 2 | call id | 0, or the errc the handler ended with | the answer, or the error's text |
///
/// Every request is answered, so an origin knows when its operation has run at the target.
/// The engine is listed among the rank's running work (detail/collective_task.hpp), so every
/// wait, test, blocking call or `progress()` of the rank serves what arrived: handlers run on
/// the application's thread, inside a commx call, never on another thread.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/detail/collective_task.hpp"
#include "commx/detail/communicator_access.hpp"
#include "commx/detail/timeout.hpp"
#include "commx/error.hpp"
#include "commx/request.hpp"
#include "commx/transport/concept.hpp"

namespace commx::detail {

/// Bytes ahead of every engine message's payload: two little words.
inline constexpr std::size_t am_header_bytes = 2 * sizeof(std::uint32_t);
inline constexpr int am_request_tag = 1;
inline constexpr int am_reply_tag = 2;

/// A message with room for its header; the caller appends the payload.
inline std::vector<std::byte> am_message(std::size_t payload_hint = 0) {
  std::vector<std::byte> bytes;
  bytes.reserve(am_header_bytes + payload_hint);
  bytes.resize(am_header_bytes);
  return bytes;
}

/// Appends `data`. (By resize and memcpy: GCC 12 at -O3 takes vector::insert of a few bytes
/// for an overflow and warns.)
inline void am_append_bytes(std::vector<std::byte>& bytes, std::span<const std::byte> data) {
  const std::size_t at = bytes.size();
  bytes.resize(at + data.size());
  if (!data.empty()) std::memcpy(bytes.data() + at, data.data(), data.size());
}

/// Appends the bytes of a trivially copyable value.
template <class V>
void am_append(std::vector<std::byte>& bytes, const V& value) {
  am_append_bytes(bytes, std::as_bytes(std::span<const V, 1>(&value, 1)));
}

/// Reads a trivially copyable value at `offset`; false when the bytes are too few.
template <class V>
bool am_read(std::span<const std::byte> bytes, std::size_t offset, V& value) {
  if (bytes.size() < offset + sizeof(V)) return false;
  std::memcpy(&value, bytes.data() + offset, sizeof(V));
  return true;
}

/// A call as its origin sees it: pending until the target's reply (or the target's loss).
struct am_call {
  int target = 0;
  bool done = false;
  std::error_code error;
  std::string reason;             // the target's text for an error
  std::vector<std::byte> answer;  // the reply's payload
};

/// Thrown by a handler that answers later, through `am_engine::answer`.
struct am_deferred {};

/// See the file comment. `Comm` is a communicator type; the engine is not movable (the rank's
/// running list points at it): hold it by unique_ptr.
template <class Comm>
class am_engine final : public collective_task {
 public:
  /// Runs handler `id` for `source`'s call `call` on `payload`, returning the answer's bytes;
  /// throws commx::error or any exception to fail the call, am_deferred to answer later.
  using serve_fn = std::function<std::vector<std::byte>(
      int source, std::uint32_t id, std::uint32_t call, std::span<const std::byte> payload)>;

  am_engine(Comm comm, serve_fn serve)
      : comm_(std::move(comm)),
        serve_(std::move(serve)),
        state_(communicator_access::state(comm_)),
        members_(communicator_access::members(comm_)),
        context_(communicator_access::context(comm_)),
        inbound_(static_cast<std::size_t>(comm_.size())) {
    for (int peer = 0; peer < comm_.size(); ++peer) post_receive(peer);
    state_.running.add(this);
  }
  am_engine(const am_engine&) = delete;
  am_engine& operator=(const am_engine&) = delete;

  ~am_engine() override {
    state_.running.remove(this);
    for (auto& in : inbound_) {
      if (in.posted) (void)state_.endpoint.cancel(in.handle);
    }
    for (auto& out : outbound_) {
      if (!out.done) (void)state_.endpoint.cancel(out.handle);
    }
  }

  [[nodiscard]] const Comm& communicator() const { return comm_; }

  /// Calls one origin may have unanswered at one target: a target that is not making progress
  /// holds at most this many of its requests queued, and an origin that gets this far ahead
  /// waits (serving) for answers first.
  static constexpr std::size_t max_unanswered = 64;

  /// Sends `message` (made by am_message, payload appended) to handler `id` at `target`; waits
  /// first while max_unanswered calls to `target` are unanswered.
  std::shared_ptr<am_call> call(int target, std::uint32_t id, std::vector<std::byte> message) {
    if (members_.revoked()) [[unlikely]] {
      throw_error(errc::revoked, {comm_.rank(), target, unknown, 0, "active message"},
                  "the communicator the active messages were made over was revoked");
    }
    if (waiting_on_[index(target)] >= max_unanswered && !polling_) {
      wait([&] { return waiting_on_[index(target)] < max_unanswered; },
           clock::now() + comm_.timeout(), "active message (waiting for the target's answers)");
    }
    auto pending = std::make_shared<am_call>();
    pending->target = target;
    if (inbound_[index(target)].lost) {
      fail(*pending, make_error_code(errc::peer_lost), "the target is gone");
      return pending;
    }
    const std::uint32_t number = next_call_++;
    if (next_call_ == 0) next_call_ = 1;
    write_header(message, id, number);
    calls_.emplace(number, pending);
    ++waiting_on_[index(target)];
    ++waiting_;
    send(target, am_request_tag, std::move(message));
    return pending;
  }

  /// Answers `source`'s call `call` with `payload` (a handler that deferred: am_deferred).
  void answer(int source, std::uint32_t call, std::span<const std::byte> payload,
              std::error_code error = {}) {
    std::vector<std::byte> message = am_message(payload.size());
    am_append_bytes(message, payload);
    write_header(message, call, static_cast<std::uint32_t>(error.value()));
    send(source, am_reply_tag, std::move(message));
  }

  /// Calls to `target` (to any, for -1) still waiting for their answer.
  [[nodiscard]] std::size_t unanswered(int target = -1) const {
    return target < 0 ? waiting_ : waiting_on_[index(target)];
  }

  /// True once `peer` is known to be gone.
  [[nodiscard]] bool lost(int peer) const { return inbound_[index(peer)].lost; }

  /// Serves what arrived and moves sends on, without blocking.
  void poll() {
    if (polling_) return;
    const serving_scope serving(polling_);
    if constexpr (checks_apart) state_.endpoint.progress();
    for (int peer = 0; peer < comm_.size(); ++peer) take_in(peer);
    // Sends leave mostly in order: reap from the front, and move a few beyond it on.
    while (!outbound_.empty() && sent(outbound_.front())) outbound_.pop_front();
    const std::size_t ahead = std::min<std::size_t>(outbound_.size(), 32);
    for (std::size_t i = 1; i < ahead; ++i) (void)sent(outbound_[i]);
  }

  /// Serves what arrived from `peer` only, and so learns whether it is gone: cheaper than a
  /// whole poll where only one peer matters (a mapped window's flush).
  void check(int peer) {
    if (polling_) return;
    const serving_scope serving(polling_);
    if constexpr (checks_apart) state_.endpoint.progress();
    take_in(peer);
  }

  /// Serves, and moves on the rank's other running work (nonblocking collectives, other
  /// engines), without blocking.
  void progress_all() { state_.running.advance_all(); }  // this engine is on that list

  /// Waits, serving, until `ready()` holds. Throws errc::timeout once `when` passes.
  template <class Ready>
  void wait(Ready&& ready, clock::time_point when, const char* operation) {
    if (polling_) {
      throw_error(errc::invalid_argument, {comm_.rank(), unknown, unknown, 0, operation},
                  "an active-message handler cannot wait for other active messages");
    }
    recovery_watch recovery(state_, &members_);
    for (;;) {
      const std::uint64_t seen = state_.endpoint.event_count();
      progress_all();  // polls this engine once, and the rank's other running work
      if (ready()) return;
      const clock::time_point now = clock::now();
      if (recovery.revoked(seen, now)) {
        throw_error(errc::revoked, {comm_.rank(), unknown, unknown, 0, operation},
                    "the communicator the active messages were made over was revoked while "
                    "this waited");
      }
      if (now >= when) {
        throw_timeout(state_.endpoint, {comm_.rank(), unknown, unknown, 0, operation},
                      "the targets did not answer before the deadline");
      }
      state_.endpoint.wait_for_event(seen, recovery.sleep_until(seen, when));
    }
  }

  // As one of the rank's running tasks: never done, and not re-entered while it serves.
  bool advance() override {
    poll();
    return false;
  }
  void finish(clock::time_point /*when*/) override { poll(); }
  [[nodiscard]] bool done() const override { return false; }
  [[nodiscard]] bool running() const override { return polling_; }
  void yield() override {}

 private:
  using transport_type = std::remove_cvref_t<decltype(std::declval<Comm&>().transport())>;
  using transport_request = typename transport_type::request;
  // One progress per poll, then a load per request, where the transport allows: tcp's test
  // reads every socket, and a poll looks at a receive per peer and the sends in flight (an
  // active-message round trip on tcp: 1.21x its ping-pong with a test each, 1.11x so).
  static constexpr bool checks_apart = transport::progresses_apart<transport_type>;

  bool finished(transport_request& handle) {
    if constexpr (checks_apart) {
      return state_.endpoint.completed(handle);
    } else {
      return state_.endpoint.test(handle);
    }
  }

  struct incoming {
    std::vector<std::byte> buffer;
    transport_request handle{};
    bool posted = false;
    bool lost = false;
  };
  struct outgoing {
    int peer = 0;
    std::vector<std::byte> bytes;  // moved, never reallocated: the send reads its heap block
    transport_request handle{};
    bool done = false;
  };

  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }

  // Marks the engine as serving for a scope, so that a handler's own commx calls, which move
  // the rank's running work on, do not re-enter it.
  class serving_scope {
   public:
    explicit serving_scope(bool& flag) : flag_(flag) { flag_ = true; }
    serving_scope(const serving_scope&) = delete;
    serving_scope& operator=(const serving_scope&) = delete;
    ~serving_scope() { flag_ = false; }

   private:
    bool& flag_;
  };

  static void write_header(std::vector<std::byte>& message, std::uint32_t first,
                           std::uint32_t second) {
    std::memcpy(message.data(), &first, sizeof first);
    std::memcpy(message.data() + sizeof first, &second, sizeof second);
  }

  static void fail(am_call& pending, std::error_code error, std::string reason) {
    pending.done = true;
    pending.error = error;
    pending.reason = std::move(reason);
  }

  void post_receive(int peer) {
    auto& in = inbound_[index(peer)];
    in.buffer.clear();
    const transport::recv_buffer into(&in.buffer, &grow_container<std::vector<std::byte>>);
    in.handle = state_.endpoint.irecv(members_.world_of(peer), context_, any_tag, into);
    in.posted = true;
  }

  void send(int peer, int tag, std::vector<std::byte> message) {
    outgoing out{peer, std::move(message), {}};
    out.handle = state_.endpoint.isend(members_.world_of(peer), context_, tag, out.bytes);
    outbound_.push_back(std::move(out));
  }

  // True once `out` has left (or its peer is gone).
  bool sent(outgoing& out) {
    if (out.done) return true;
    if (!finished(out.handle)) return false;
    out.done = true;
    const transport::op_result& result = state_.endpoint.result(out.handle);
    if (result.error == errc::peer_lost) lose(out.peer);
    return true;
  }

  // Everything that has arrived from `peer`: a message left for later would wait for the next
  // event, which may never come (its origin waits for this rank's answer).
  void take_in(int peer) {
    auto& in = inbound_[index(peer)];
    while (in.posted && finished(in.handle)) {
      const transport::op_result result = state_.endpoint.result(in.handle);
      in.posted = false;
      if (result.error == errc::peer_lost) {
        lose(peer);
        return;
      }
      if (result.error) {  // nothing was written (no memory for it): try again
        post_receive(peer);
        return;
      }
      std::vector<std::byte> message = std::move(in.buffer);
      in.buffer = {};
      post_receive(peer);  // before serving: a handler may make progress itself
      if (result.tag == am_request_tag) {
        serve(peer, message);
      } else {
        complete(peer, message);
      }
    }
  }

  void serve(int source, std::span<const std::byte> message) {
    std::uint32_t id = 0;
    std::uint32_t number = 0;
    if (!am_read(message, 0, id) || !am_read(message, sizeof id, number)) {
      COMMX_LOG(warn, log_context_of(state_.endpoint),
                "active messages: a request of {} bytes from peer {} is too short; dropped",
                message.size(), source);
      return;
    }
    const auto payload = message.subspan(am_header_bytes);
    try {
      answer(source, number, serve_(source, id, number, payload));
    } catch (const am_deferred&) {  // the handler answers later
    } catch (const std::system_error& e) {
      refuse(source, number, e.code(), e.what());
    } catch (const std::exception& e) {
      refuse(source, number, make_error_code(errc::handler_failed), e.what());
    } catch (...) {
      refuse(source, number, make_error_code(errc::handler_failed), "a non-standard exception");
    }
  }

  void refuse(int source, std::uint32_t number, std::error_code error, std::string_view text) {
    answer(source, number, std::as_bytes(std::span(text.data(), text.size())), error);
  }

  void complete(int source, std::span<const std::byte> message) {
    std::uint32_t number = 0;
    std::uint32_t code = 0;
    if (!am_read(message, 0, number) || !am_read(message, sizeof number, code)) return;
    const auto found = calls_.find(number);
    if (found == calls_.end() || found->second->target != source) return;  // abandoned
    am_call& pending = *found->second;
    answered(source);
    const auto payload = message.subspan(am_header_bytes);
    if (code != 0) {
      fail(pending, {static_cast<int>(code), error_category()},
           std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
    } else {
      pending.answer.assign(payload.begin(), payload.end());
      pending.done = true;
    }
    calls_.erase(found);
  }

  // Every call still waiting on `peer` ends with errc::peer_lost.
  void lose(int peer) {
    inbound_[index(peer)].lost = true;
    std::erase_if(calls_, [&](auto& entry) {
      if (entry.second->target != peer) return false;
      fail(*entry.second, make_error_code(errc::peer_lost), "the target is gone");
      answered(peer);
      return true;
    });
  }

  void answered(int target) {
    --waiting_on_[index(target)];
    --waiting_;
  }

  Comm comm_;
  serve_fn serve_;
  decltype(communicator_access::state(std::declval<const Comm&>())) state_;
  const group& members_;
  context_id context_;
  std::vector<incoming> inbound_;
  std::deque<outgoing> outbound_;
  std::map<std::uint32_t, std::shared_ptr<am_call>> calls_;
  std::vector<std::size_t> waiting_on_ = std::vector<std::size_t>(inbound_.size());
  std::size_t waiting_ = 0;
  std::uint32_t next_call_ = 1;
  bool polling_ = false;
};

}  // namespace commx::detail
