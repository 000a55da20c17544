// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Active messages: a handler that a program installs on every rank, run at a target on behalf
/// of the sender, with the sender's rank and an argument, optionally answering (seed 003's
/// LAPI active messages; GASNet-EX and UPC++ RPC are the modern anchors).
///
/// ```
/// commx::handler_table handlers;
/// handlers.on<std::int64_t>("add", [&](int source, std::int64_t v) { total += v; });
/// handlers.on<int>("square", [](int, int v) { return v * v; });
/// commx::active_messages am(comm, std::move(handlers));   // collective
/// am.post(1, "add", std::int64_t{5});                     // runs at rank 1
/// int nine = am.call<int>(1, "square", 3).get();          // and answers
/// am.flush();                                             // every post has run
/// ```
///
/// | call | semantics |
/// |---|---|
/// | `handler_table::on<A>(name, fn)` | registers `fn(int source, A argument)`, returning the answer (any transferable type) or void |
/// | `active_messages(comm, table)` | collective over `comm`; every rank must register the same names (errc::invalid_argument on every rank otherwise) |
/// | `post(target, name, arg)` | runs the handler at `target`; returns at once (`arg` is copied); a failure is raised by the next `flush` |
/// | `call<R>(target, name, arg)` | as post, returning a `reply<R>` whose `get` waits for the answer or rethrows the handler's error |
/// | `flush(until)` | waits until every post of this rank has run at its target |
/// | `progress()` | serves what arrived, without blocking |
///
/// Handlers run when the target makes progress: inside any of its commx calls that waits,
/// tests, sends or receives, or an explicit `progress()`; never on a hidden thread. A target
/// that computes without calling commx serves nothing meanwhile. Messages from one origin to
/// one target run in the order they were posted. A handler that throws fails that call only
/// (commx::error keeps its code; anything else is errc::handler_failed with its text) and the
/// target goes on. A handler must not wait for active messages itself (errc::invalid_argument).
/// A target that is gone fails the calls to it with errc::peer_lost. Arguments and answers are
/// raw values, resizable contiguous containers of them (std::vector, std::string), or types
/// cereal serializes (serialize.hpp).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/detail/am_engine.hpp"
#include "commx/error.hpp"
#include "commx/ops.hpp"
#include "commx/serialize.hpp"

namespace commx {

namespace detail {

/// A handler's argument or answer type: something a message can be decoded into.
template <class V>
concept am_value = raw_scalar<V> || resizable_raw_container<V> ||
    (cereal_serializable<V>&& std::is_default_constructible_v<V>);

template <class V>
void am_encode(std::vector<std::byte>& bytes, const V& value) {
  if constexpr (transfer_mode_of<V> == transfer_mode::raw) {
    am_append_bytes(bytes, bytes_of(value));
  } else {
    am_append_bytes(bytes, serialize(value));
  }
}

template <class V>
V am_decode(std::span<const std::byte> bytes, const char* operation) {
  V value{};
  const error_context where{unknown, unknown, unknown, bytes.size(), operation};
  if constexpr (transfer_mode_of<V> == transfer_mode::serialized) {
    deserialize(bytes, value, where);
  } else if constexpr (resizable_raw_container<V>) {
    using element = std::ranges::range_value_t<V>;
    if (bytes.size() % sizeof(element) != 0) {
      throw_error(errc::type_mismatch, where, "not a whole number of the argument's elements");
    }
    value.resize(bytes.size() / sizeof(element));
    if (!bytes.empty()) std::memcpy(std::ranges::data(value), bytes.data(), bytes.size());
  } else {
    if (bytes.size() != sizeof(V)) {
      throw_error(errc::type_mismatch, where,
                  fmt::format("{} bytes where the type takes {}", bytes.size(), sizeof(V)));
    }
    std::memcpy(&value, bytes.data(), sizeof(V));
  }
  return value;
}

/// A handler's id: FNV-1a of its name, the same on every rank.
constexpr std::uint32_t am_id(std::string_view name) {
  std::uint32_t hash = 2166136261U;
  for (const char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619U;
  return hash;
}

}  // namespace detail

/// The handlers an active_messages object serves, registered by name before it is made.
class handler_table {
 public:
  /// Registers `fn(int source, A argument)` under `name`; what it returns is the answer.
  /// @throws commx::error errc::invalid_argument for a name already taken.
  template <class A, class Fn>
  handler_table& on(std::string_view name, Fn fn) {
    static_assert(detail::am_value<A>,
                  "commx: an active message's argument must be a raw value, a resizable "
                  "contiguous container of them, or a default-constructible type cereal "
                  "serializes");
    using R = std::invoke_result_t<Fn&, int, A>;
    static_assert(std::is_void_v<R> || detail::am_value<R>,
                  "commx: a handler answers with void or with what an argument may be");
    const std::uint32_t id = detail::am_id(name);
    if (const auto taken = entries_.find(id); taken != entries_.end()) {
      throw_error(errc::invalid_argument, {unknown, unknown, unknown, 0, "handler_table::on"},
                  fmt::format("'{}' is already registered{}", name,
                              taken->second.name == name
                                  ? std::string()
                                  : fmt::format(" (its id is that of '{}')", taken->second.name)));
    }
    auto run = [fn = std::move(fn)](int source, std::span<const std::byte> in) mutable {
      A argument = detail::am_decode<A>(in, "active message");
      std::vector<std::byte> answer;
      if constexpr (std::is_void_v<R>) {
        fn(source, std::move(argument));
      } else {
        detail::am_encode(answer, fn(source, std::move(argument)));
      }
      return answer;
    };
    entries_.emplace(id, entry{std::string(name), std::move(run)});
    return *this;
  }

  /// How many handlers are registered.
  [[nodiscard]] std::size_t size() const { return entries_.size(); }

 private:
  template <class Comm>
  friend class active_messages;

  struct entry {
    std::string name;
    std::function<std::vector<std::byte>(int, std::span<const std::byte>)> run;
  };
  std::map<std::uint32_t, entry> entries_;
};

/// The answer of an active message `call`: `get` waits for it.
template <class R, class Comm>
class reply {
 public:
  /// Makes progress; true once the answer (or the error) is here.
  bool test() {
    if (!call_->done) engine_->poll();
    return call_->done;
  }

  /// Waits for the answer and returns it.
  /// @throws commx::error the handler's error, errc::peer_lost, errc::timeout.
  R get(deadline until = {}) {
    const auto when = until.resolve(engine_->communicator().timeout());
    engine_->wait([this] { return call_->done; }, when, "active message call");
    if (call_->error) {
      throw_error(call_->error, {engine_->communicator().rank(), call_->target, unknown, 0, name_},
                  call_->reason);
    }
    if constexpr (!std::is_void_v<R>) return detail::am_decode<R>(call_->answer, name_);
  }

 private:
  template <class C>
  friend class active_messages;
  reply(detail::am_engine<Comm>* engine, std::shared_ptr<detail::am_call> call, const char* name)
      : engine_(engine), call_(std::move(call)), name_(name) {}

  detail::am_engine<Comm>* engine_;
  std::shared_ptr<detail::am_call> call_;
  const char* name_;
};

/// Active messages over communicator type `Comm`; see the file comment.
template <class Comm>
class active_messages {
 public:
  /// Collective over `comm`: its messages never meet `comm`'s.
  /// @throws commx::error errc::invalid_argument when the ranks registered different names.
  active_messages(Comm comm, handler_table handlers, deadline until = {})
      : handlers_(std::make_shared<handler_table>(std::move(handlers))) {
    Comm own = comm.dup(until);
    detail::communicator_access::revoke_along(own, comm);
    std::uint64_t names = handlers_->entries_.size();
    for (const auto& [id, entry] : handlers_->entries_) names = names * 1000003U + id;
    const std::uint64_t lowest = own.allreduce_value(names, op::min{}, until);
    const std::uint64_t highest = own.allreduce_value(names, op::max{}, until);
    if (lowest != highest) {
      throw_error(errc::invalid_argument, {own.rank(), unknown, unknown, 0, "active_messages"},
                  "the ranks registered different handlers");
    }
    engine_ = std::make_unique<detail::am_engine<Comm>>(
        std::move(own), [table = handlers_, rank = comm.rank()](
                            int source, std::uint32_t id, std::uint32_t /*call*/,
                            std::span<const std::byte> payload) {
          const auto found = table->entries_.find(id);
          if (found == table->entries_.end()) {
            throw_error(errc::invalid_argument, {rank, source, unknown, 0, "active message"},
                        fmt::format("no handler with id {:#x} here", id));
          }
          return found->second.run(source, payload);
        });
  }

  /// Runs handler `name` at `target` with `argument`, which is copied at once.
  /// @throws commx::error errc::invalid_argument (rank, or a name nobody registered).
  template <class A>
  void post(int target, std::string_view name, const A& argument) {
    std::erase_if(posts_, [](const auto& p) { return p->done && !p->error; });
    posts_.push_back(start(target, name, argument, "post"));
  }

  /// Runs handler `name` at `target` and returns its answer, of type R, as a reply.
  template <class R, class A>
  [[nodiscard]] reply<R, Comm> call(int target, std::string_view name, const A& argument) {
    static_assert(std::is_void_v<R> || detail::am_value<R>,
                  "commx: an answer is void or what an argument may be");
    return reply<R, Comm>(engine_.get(), start(target, name, argument, "call"), "call");
  }

  /// Waits until every post (and call) of this rank has run at its target.
  /// @throws commx::error the first failed post's error, errc::peer_lost, errc::timeout.
  void flush(deadline until = {}) {
    const auto when = until.resolve(engine_->communicator().timeout());
    engine_->wait([this] { return engine_->unanswered() == 0; }, when, "active messages flush");
    std::vector<std::shared_ptr<detail::am_call>> ended = std::move(posts_);
    posts_.clear();
    for (const auto& p : ended) {
      if (p->error) {
        throw_error(p->error, {engine_->communicator().rank(), p->target, unknown, 0, "post"},
                    p->reason);
      }
    }
  }

  /// Serves what arrived and sends what can go, without blocking.
  void progress() { engine_->poll(); }

  /// This rank in the communicator it was made over.
  [[nodiscard]] int rank() const { return engine_->communicator().rank(); }
  /// The number of ranks in the communicator it was made over.
  [[nodiscard]] int size() const { return engine_->communicator().size(); }

 private:
  template <class A>
  std::shared_ptr<detail::am_call> start(int target, std::string_view name, const A& argument,
                                         const char* operation) {
    static_assert(detail::am_value<std::remove_cvref_t<A>> || raw_range<A>,
                  "commx: an active message's argument must be transferable");
    const Comm& comm = engine_->communicator();
    const error_context where{comm.rank(), target, unknown, 0, operation};
    if (target < 0 || target >= comm.size()) {
      throw_error(errc::invalid_argument, where,
                  fmt::format("no rank {} in a communicator of {}", target, comm.size()));
    }
    const std::uint32_t id = detail::am_id(name);
    if (!handlers_->entries_.contains(id)) {
      throw_error(errc::invalid_argument, where,
                  fmt::format("no handler '{}' is registered", name));
    }
    std::vector<std::byte> message = detail::am_message();
    detail::am_encode(message, argument);
    return engine_->call(target, id, std::move(message));
  }

  std::shared_ptr<handler_table> handlers_;
  std::unique_ptr<detail::am_engine<Comm>> engine_;
  std::vector<std::shared_ptr<detail::am_call>> posts_;
};

}  // namespace commx
