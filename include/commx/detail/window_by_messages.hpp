// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A window whose operations travel as active messages (detail/am_engine.hpp) and are applied
/// by the target's progress: how inproc, tcp and wan carry windows. Every operation is
/// answered once applied, so `flush` knows when it is done; locks are granted by the target in
/// the order asked (first come, first served; shared holders together).
///
/// | handler | argument | answer |
/// |---|---|---|
/// | put | offset, elements | nothing |
/// | get | offset, count | the elements |
/// | accumulate | offset, op, elements | nothing |
/// | fetch_op | offset, op, element | the old element |
/// | cas | offset, expected, desired | the old element |
/// | lock | exclusive or shared | nothing, once granted |
/// | unlock | exclusive or shared | nothing |
/// | withdraw | exclusive or shared | nothing; the lock it follows is released if granted, else answered `cancelled` |
///
/// A lock that times out at its origin is withdrawn: left queued, the target would grant it
/// later to a rank that no longer waits for it, and nobody could take the lock again.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/detail/am_engine.hpp"
#include "commx/detail/window_ops.hpp"
#include "commx/error.hpp"

namespace commx::detail {

enum class window_handler : std::uint32_t {
  put = 1,
  get,
  accumulate,
  fetch_op,
  cas,
  lock,
  unlock,
  withdraw
};

/// What a target keeps: its memory, and who holds or waits for its lock.
template <class E>
struct window_target {
  std::span<E> memory;
  int shared_holders = 0;
  bool exclusive_held = false;
  struct waiter {
    int source;
    std::uint32_t call;
    lock_type type;
  };
  std::deque<waiter> waiting;

  [[nodiscard]] bool grantable(lock_type type) const {
    return !exclusive_held && (type == lock_type::shared || shared_holders == 0);
  }
  void hold(lock_type type) {
    if (type == lock_type::exclusive) {
      exclusive_held = true;
    } else {
      ++shared_holders;
    }
  }
  void release(lock_type type) {
    if (type == lock_type::exclusive) {
      exclusive_held = false;
    } else if (shared_holders > 0) {
      --shared_holders;
    }
  }
};

/// The message-carried window backend; `window` (window.hpp) is its interface.
template <class E, class Comm>
class window_by_messages {
 public:
  window_by_messages(Comm comm, std::span<E> memory)
      : target_(std::make_shared<window_target<E>>()), comm_(std::move(comm)) {
    target_->memory = memory;
    engine_ = std::make_unique<am_engine<Comm>>(
        comm_,
        [target = target_, engine = &engine_](int source, std::uint32_t id, std::uint32_t call,
                                              std::span<const std::byte> payload) {
          return serve(*target, **engine, source, id, call, payload);
        });
  }

  [[nodiscard]] Comm& communicator() { return comm_; }
  [[nodiscard]] am_engine<Comm>& engine() { return *engine_; }
  /// The window is freed: its engine leaves the rank's running work, so that the rank's later
  /// calls no longer poll for it.
  void stop() { engine_.reset(); }

  void put(std::span<const std::byte> bytes, int target, std::size_t offset) {
    std::vector<std::byte> message = am_message(sizeof(std::uint64_t) + bytes.size());
    am_append(message, static_cast<std::uint64_t>(offset));
    am_append_bytes(message, bytes);
    issue(target, window_handler::put, std::move(message), {});
  }

  void get(std::span<std::byte> into, int target, std::size_t offset) {
    std::vector<std::byte> message = am_message(2 * sizeof(std::uint64_t));
    am_append(message, static_cast<std::uint64_t>(offset));
    am_append(message, static_cast<std::uint64_t>(into.size() / sizeof(E)));
    issue(target, window_handler::get, std::move(message), into);
  }

  void accumulate(std::span<const std::byte> bytes, int target, std::size_t offset, window_op op) {
    std::vector<std::byte> message = am_message(12 + bytes.size());
    am_append(message, static_cast<std::uint64_t>(offset));
    am_append(message, static_cast<std::uint32_t>(op));
    am_append_bytes(message, bytes);
    issue(target, window_handler::accumulate, std::move(message), {});
  }

  /// Starts a fetch_and_op whose old value lands in `old` when the target has applied it.
  void fetch_and_op(const E& value, E& old, int target, std::size_t offset, window_op op) {
    std::vector<std::byte> message = am_message(12 + sizeof(E));
    am_append(message, static_cast<std::uint64_t>(offset));
    am_append(message, static_cast<std::uint32_t>(op));
    am_append(message, value);
    issue(target, window_handler::fetch_op, std::move(message), as_writable(old));
  }

  void compare_and_swap(const E& expected, const E& desired, E& old, int target,
                        std::size_t offset) {
    std::vector<std::byte> message = am_message(8 + 2 * sizeof(E));
    am_append(message, static_cast<std::uint64_t>(offset));
    am_append(message, expected);
    am_append(message, desired);
    issue(target, window_handler::cas, std::move(message), as_writable(old));
  }

  void lock(int target, lock_type type, clock::time_point when) {
    flush(target, when);
    issue(target, window_handler::lock, lock_message(type), {});
    try {
      flush(target, when);
    } catch (const std::system_error& e) {
      if (e.code() != errc::timeout) throw;
      // The lock (the last call issued) is still queued there (see the file comment):
      // withdraw it. Neither answer is waited for here; the next flush to `target` collects
      // both, without their errors.
      issued_.back().quiet = true;
      issue(target, window_handler::withdraw, lock_message(type), {});
      issued_.back().quiet = true;
      throw;
    }
  }

  void unlock(int target, lock_type type, clock::time_point when) {
    flush(target, when);
    issue(target, window_handler::unlock, lock_message(type), {});
    flush(target, when);
  }

  /// Waits until every operation to `target` (or to every rank: -1) has been applied there.
  /// @throws commx::error the first failed operation's error, errc::peer_lost, errc::timeout.
  void flush(int target, clock::time_point when) {
    const auto mine = [target](const issued& op) {
      return target < 0 || op.call->target == target;
    };
    engine_->wait([&] { return engine_->unanswered(target) == 0; }, when,
                  target < 0 ? "window flush_all" : "window flush");
    std::vector<issued> ended;
    std::erase_if(issued_, [&](issued& op) {
      if (!mine(op)) return false;
      ended.push_back(std::move(op));
      return true;
    });
    for (const issued& op : ended) {
      if (op.call->error && !op.quiet) {
        throw_error(op.call->error, {comm_.rank(), op.call->target, unknown, 0, "window"},
                    op.call->reason);
      }
      if (!op.into.empty() && op.call->answer.size() == op.into.size()) {
        std::memcpy(op.into.data(), op.call->answer.data(), op.into.size());
      } else if (!op.into.empty()) {
        throw_error(errc::protocol_violation,
                    {comm_.rank(), op.call->target, unknown, op.call->answer.size(), "window get"},
                    fmt::format("the target answered {} bytes for {}", op.call->answer.size(),
                                op.into.size()));
      }
    }
  }

 private:
  struct issued {
    std::shared_ptr<am_call> call;
    std::span<std::byte> into;  // where a get's answer goes
    bool quiet = false;         // a withdrawn lock, or its withdrawal: its error is no one's
  };

  static std::vector<std::byte> lock_message(lock_type type) {
    std::vector<std::byte> message = am_message(sizeof(std::uint32_t));
    am_append(message, static_cast<std::uint32_t>(type));
    return message;
  }

  static std::span<std::byte> as_writable(E& value) {
    return {reinterpret_cast<std::byte*>(&value), sizeof(E)};
  }

  void issue(int target, window_handler handler, std::vector<std::byte> message,
             std::span<std::byte> into) {
    issued_.push_back(
        {engine_->call(target, static_cast<std::uint32_t>(handler), std::move(message)), into});
  }

  // The target's side: applies one operation to its memory. Ranges were checked by the origin;
  // they are checked again here, so a malformed request writes nothing.
  static std::vector<std::byte> serve(window_target<E>& target, am_engine<Comm>& engine, int source,
                                      std::uint32_t id, std::uint32_t call,
                                      std::span<const std::byte> payload) {
    std::uint64_t offset = 0;
    (void)am_read(payload, 0, offset);
    const auto region = [&](std::uint64_t count) {
      if (offset > target.memory.size() || count > target.memory.size() - offset) {
        throw_error(errc::invalid_argument,
                    {engine.communicator().rank(), source, unknown, 0, "window"},
                    fmt::format("elements [{}, {}) are outside this rank's window of {}", offset,
                                offset + count, target.memory.size()));
      }
      return target.memory.subspan(offset, count);
    };
    const auto elements = [](std::span<const std::byte> bytes) {
      if (bytes.size() % sizeof(E) != 0) {
        throw_error(errc::protocol_violation, {unknown, unknown, unknown, bytes.size(), "window"},
                    "not a whole number of elements");
      }
      return bytes.size() / sizeof(E);
    };
    std::vector<std::byte> answer;
    switch (static_cast<window_handler>(id)) {
      case window_handler::put: {
        const auto data = payload.subspan(8);
        const auto into = region(elements(data));
        if (!data.empty()) std::memcpy(into.data(), data.data(), data.size());
        return answer;
      }
      case window_handler::get: {
        std::uint64_t count = 0;
        (void)am_read(payload, 8, count);
        const auto from = std::as_bytes(region(count));
        answer.assign(from.begin(), from.end());
        return answer;
      }
      case window_handler::accumulate:
      case window_handler::fetch_op: {
        std::uint32_t op = 0;
        (void)am_read(payload, 8, op);
        const auto data = payload.subspan(std::min<std::size_t>(payload.size(), 12));
        const auto into = region(elements(data));
        const auto which = static_cast<window_op>(op);
        E checked{};
        // Whether the op applies depends on the op alone: check it once, before any write.
        if (!into.empty() && !combine(which, into[0], into[0], checked)) {
          throw_error(errc::protocol_violation, {unknown, source, unknown, 0, "window accumulate"},
                      fmt::format("op {} does not apply to these elements", op));
        }
        if (static_cast<window_handler>(id) == window_handler::fetch_op && !into.empty()) {
          am_append(answer, into[0]);
        }
        for (std::size_t i = 0; i < into.size(); ++i) {
          E operand{};
          std::memcpy(&operand, data.data() + i * sizeof(E), sizeof(E));
          (void)combine(which, into[i], operand, into[i]);
        }
        return answer;
      }
      case window_handler::cas: {
        E expected{};
        E desired{};
        if (!am_read(payload, 8, expected) || !am_read(payload, 8 + sizeof(E), desired)) {
          throw_error(errc::protocol_violation, {unknown, source, unknown, 0, "window cas"},
                      "too short");
        }
        E& cell = region(1)[0];
        am_append(answer, cell);
        if (std::memcmp(&cell, &expected, sizeof(E)) == 0) cell = desired;
        return answer;
      }
      case window_handler::lock: {
        std::uint32_t type = 0;
        (void)am_read(payload, 0, type);
        const auto wanted = static_cast<lock_type>(type);
        if (target.waiting.empty() && target.grantable(wanted)) {
          target.hold(wanted);
          return answer;
        }
        target.waiting.push_back({source, call, wanted});
        throw am_deferred{};
      }
      case window_handler::unlock:
      case window_handler::withdraw: {
        std::uint32_t type = 0;
        (void)am_read(payload, 0, type);
        // A source waits for one lock at a time, and its messages arrive in order: a withdraw
        // finds its lock queued, or granted and held.
        const auto queued = std::ranges::find_if(
            target.waiting, [source](const auto& waiter) { return waiter.source == source; });
        if (static_cast<window_handler>(id) == window_handler::withdraw &&
            queued != target.waiting.end()) {
          const std::uint32_t withdrawn = queued->call;
          target.waiting.erase(queued);
          engine.answer(source, withdrawn, {}, make_error_code(errc::cancelled));
        } else {
          target.release(static_cast<lock_type>(type));
        }
        while (!target.waiting.empty() && target.grantable(target.waiting.front().type)) {
          const auto next = target.waiting.front();
          target.waiting.pop_front();
          target.hold(next.type);
          engine.answer(next.source, next.call, {});
        }
        return answer;
      }
    }
    throw_error(errc::protocol_violation, {unknown, source, unknown, 0, "window"},
                fmt::format("no window operation {}", id));
  }

  std::shared_ptr<window_target<E>> target_;
  Comm comm_;
  std::unique_ptr<am_engine<Comm>> engine_;
  std::vector<issued> issued_;
};

}  // namespace commx::detail
