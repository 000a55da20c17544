// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `commx::window<E, Comm>`: memory each rank of a communicator exposes to the others, read and
/// written without a matching receive (remote memory access, as MPI-3 RMA, UPC++ rput/rget and
/// seed 003's LAPI remote copy).
///
/// | call | semantics |
/// |---|---|
/// | `window(comm, span)` / `window(comm, count)` | collective: exposes a span the caller owns (it must outlive the window), or `count` value-initialised elements the window allocates |
/// | `put(data, target, offset)` | writes `data` to `target`'s elements `[offset, offset + size)`; `data` is copied at once |
/// | `get(out, target, offset)` | reads into `out`, which must stay alive until the operation completes |
/// | `accumulate(data, target, offset, op)` | combines element-wise, atomic per element: no update is lost when ranks accumulate into one element at once |
/// | `fetch_and_op(value, target, offset, op)` | combines one element atomically and returns its old value (waits) |
/// | `compare_and_swap(expected, desired, target, offset)` | replaces one element if it equals `expected`, returning its old value (waits) |
/// | `fence()` | collective: every operation of every rank issued before it has been applied, everywhere, when it returns (active target) |
/// | `lock(target, type)` / `unlock(target)` | passive target: holds `target` exclusively or shared; unlock returns once this rank's operations there are applied |
/// | `lock_all()` / `unlock_all()` | a shared lock on every rank |
/// | `flush(target)` / `flush_all()` | returns once this rank's operations to `target` (every target) are applied there and its gets have landed |
/// | `free()` | collective: flush_all, then waits until every rank is done with the window; later calls on it raise errc::invalid_argument |
///
/// The ops are std::plus<>, std::multiplies<>, op::min, op::max, the bitwise std::bit_and<>,
/// std::bit_or<>, std::bit_xor<> on integers, op::replace and op::no_op; another op does not
/// compile. Operations complete at the next fence, flush or unlock; until then a get's `out`
/// holds nothing certain. Ranges are checked at the origin: an access outside the target's
/// window raises errc::invalid_argument and writes nothing. A target that is gone fails the
/// operations to it with errc::peer_lost at their completion; a deadline passing, errc::timeout.
///
/// How each stack carries it is in DESIGN.md ("One-sided communication"): memory the window
/// allocates is mapped by every rank on shm (`mapped()`); the transport's own remote memory
/// access carries it on mpi over Open MPI (an MPI-3 window) and on ucx (UCP's RMA, elements of
/// 4 and 8 bytes) (`carried_by_transport()`); elsewhere operations travel as messages, and the
/// target applies them when it makes progress: in any commx call of its own, or `progress()`.
/// A rank that computes for long without calling commx delays those operations on its memory
/// (not their correctness).
/// Operations belong in an epoch, as in MPI: between fences, or inside lock/unlock or lock_all.
/// A rank reads and writes its own `local()` elements directly; to order that against the
/// others' operations, use a fence, or lock itself.
///
/// Thread safety: as the communicator's. Destroy a window with `free()` on every rank first;
/// destroying it unfreed leaves the others' operations to this rank to fail.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/detail/window_by_messages.hpp"
#include "commx/detail/window_mapped.hpp"
#include "commx/detail/window_ops.hpp"
#include "commx/detail/timeout.hpp"
#include "commx/log.hpp"
#include "commx/error.hpp"

namespace commx {

namespace detail {

/// The transport's window of E elements (its own remote memory access) where `ByTransport`;
/// otherwise nothing.
template <class T, class E, bool ByTransport>
struct rma_backend_of {
  struct type {};
};
template <class T, class E>
struct rma_backend_of<T, E, true> {
  using type = typename T::template rma_window<E>;
};

}  // namespace detail

/// Remote memory access over communicator type `Comm`; see the file comment.
/// @tparam E the element type: trivially copyable.
template <class E, class Comm>
class window {
  static_assert(std::is_trivially_copyable_v<E> && !std::is_const_v<E>,
                "commx: a window holds trivially copyable, writable elements");

 public:
  /// Collective: exposes `memory`, which must outlive the window.
  window(Comm comm, std::span<E> memory, deadline until = {}) {
    open(comm, memory.size(), &memory, until);
  }

  /// Collective: exposes `count` value-initialised elements that the window owns.
  window(Comm comm, std::size_t count, deadline until = {}) { open(comm, count, nullptr, until); }

  /// Takes over `other`'s window (its memory stays where it is).
  window(window&&) noexcept = default;
  /// Takes over `other`'s window; this one's is dropped unfreed (see the file comment).
  window& operator=(window&&) noexcept = default;
  window(const window&) = delete;
  window& operator=(const window&) = delete;
  ~window() = default;

  /// This rank's exposed elements.
  [[nodiscard]] std::span<E> local() const {
    if constexpr (by_transport) {
      if (rma_) rma_->sync();
    }
    return local_;
  }
  /// How many elements `rank` exposes.
  [[nodiscard]] std::size_t size_at(int rank) const {
    check_rank(rank, "size_at");
    return sizes_[static_cast<std::size_t>(rank)];
  }
  /// This rank.
  [[nodiscard]] int rank() const { return impl_->communicator().rank(); }
  /// The number of ranks.
  [[nodiscard]] int size() const { return impl_->communicator().size(); }

  /// Writes `data` to `target`'s elements from `offset`; `data` may be reused at once.
  void put(std::span<const E> data, int target, std::size_t offset) {
    check_range(target, offset, data.size(), "window put");
    if constexpr (by_transport) {
      if (rma_) {
        rma_->put(std::as_bytes(data), target, offset);
        return;
      }
    }
    if (mapped_) {
      mapped_->put(std::as_bytes(data), touch(target, "window put"), offset);
    } else {
      impl_->put(std::as_bytes(data), target, offset);
    }
  }
  /// Writes one element.
  void put(const E& value, int target, std::size_t offset) {
    put(std::span<const E>(&value, 1), target, offset);
  }

  /// Reads `target`'s elements from `offset` into `out`, which must stay alive until the
  /// operation completes (fence, flush, unlock).
  void get(std::span<E> out, int target, std::size_t offset) {
    check_range(target, offset, out.size(), "window get");
    if constexpr (by_transport) {
      if (rma_) {
        rma_->get(std::as_writable_bytes(out), target, offset);
        return;
      }
    }
    if (mapped_) {
      mapped_->get(std::as_writable_bytes(out), touch(target, "window get"), offset);
    } else {
      impl_->get(std::as_writable_bytes(out), target, offset);
    }
  }

  /// Combines `data` into `target`'s elements from `offset` with `op`, atomically per element.
  template <class Op>
  void accumulate(std::span<const E> data, int target, std::size_t offset, Op /*op*/) {
    constexpr detail::window_op which = detail::window_op_of<Op, E>();
    check_range(target, offset, data.size(), "window accumulate");
    if constexpr (by_transport) {
      if (rma_) {
        rma_->accumulate(data, target, offset, which, resolve({}));
        return;
      }
    }
    if (mapped_) {
      if constexpr (detail::atomic_element<E>) {
        mapped_->accumulate(data, touch(target, "window accumulate"), offset, which);
      }
    } else {
      impl_->accumulate(std::as_bytes(data), target, offset, which);
    }
  }
  /// Combines one element.
  template <class Op>
  void accumulate(const E& value, int target, std::size_t offset, Op op) {
    accumulate(std::span<const E>(&value, 1), target, offset, op);
  }

  /// Combines `value` into one element of `target` atomically and returns the element's old
  /// value, once applied (this operation alone is completed; others stay pending).
  template <class Op>
  E fetch_and_op(const E& value, int target, std::size_t offset, Op /*op*/, deadline until = {}) {
    constexpr detail::window_op which = detail::window_op_of<Op, E>();
    check_range(target, offset, 1, "window fetch_and_op");
    if constexpr (by_transport) {
      if (rma_) return rma_->fetch_and_op(value, target, offset, which, resolve(until));
    }
    if (mapped_) {
      impl_->engine().check(target);
      if constexpr (detail::atomic_element<E>) {
        return mapped_->fetch_and_op(value, alive(target, "window fetch_and_op"), offset, which);
      }
    }
    E old{};
    impl_->fetch_and_op(value, old, target, offset, which);
    impl_->flush(target, resolve(until));
    return old;
  }

  /// Sets one element of `target` to `desired` if it equals `expected` (bitwise), atomically;
  /// returns its old value.
  E compare_and_swap(const E& expected, const E& desired, int target, std::size_t offset,
                     deadline until = {}) {
    check_range(target, offset, 1, "window compare_and_swap");
    if constexpr (by_transport) {
      if (rma_) {
        return rma_->compare_and_swap(expected, desired, target, offset, resolve(until));
      }
    }
    if (mapped_) {
      impl_->engine().check(target);
      if constexpr (detail::atomic_element<E>) {
        return mapped_->compare_and_swap(expected, desired,
                                         alive(target, "window compare_and_swap"), offset);
      }
    }
    E old{};
    impl_->compare_and_swap(expected, desired, old, target, offset);
    impl_->flush(target, resolve(until));
    return old;
  }

  /// Collective: completes every rank's operations (active target synchronisation).
  void fence(deadline until = {}) {
    check_open("window fence");
    const auto when = resolve(until);
    if constexpr (by_transport) {
      if (rma_) {
        rma_->fence(when);
        return;
      }
    }
    flush_all(when);
    if constexpr (Comm::collectives_type::name == std::string_view("native")) {
      // MPI's own barrier would not serve the others' operations to this rank meanwhile.
      auto done = impl_->communicator().ibarrier();
      impl_->engine().wait([&] { return done.test().has_value(); }, when, "window fence");
    } else {
      impl_->communicator().barrier(when);  // its waits serve this rank's engine
    }
  }

  /// Holds `target`'s window (passive target) until `unlock(target)`. A lock that misses its
  /// deadline (errc::timeout) holds nothing, now or later.
  void lock(int target, lock_type type = lock_type::exclusive, deadline until = {}) {
    check_rank(target, "window lock");
    if constexpr (by_transport) {
      if (rma_) {
        const auto when = resolve(until);
        wait_mapped([&] { return rma_->try_lock(target, type, when); }, target, when,
                    "window lock");
        held_.emplace_back(target, type);
        return;
      }
    }
    if (mapped_) {
      wait_mapped([&] { return mapped_->try_lock(target, type); }, target, resolve(until),
                  "window lock");
    } else {
      impl_->lock(target, type, resolve(until));
    }
    held_.emplace_back(target, type);
  }
  /// Completes this rank's operations at `target` and releases its lock there.
  void unlock(int target, deadline until = {}) {
    check_rank(target, "window unlock");
    const auto held = std::ranges::find_if(held_, [&](const auto& h) { return h.first == target; });
    if (held == held_.end()) {
      throw_error(errc::invalid_argument, {rank(), target, unknown, 0, "window unlock"},
                  "this rank holds no lock there");
    }
    const lock_type type = held->second;
    held_.erase(held);
    if constexpr (by_transport) {
      if (rma_) {
        rma_->unlock(target, type, resolve(until));
        return;
      }
    }
    if (mapped_) {
      flush(target, until);
      mapped_->unlock(target, type);
    } else {
      impl_->unlock(target, type, resolve(until));
    }
  }
  /// A shared lock on every rank.
  void lock_all(deadline until = {}) {
    const auto when = resolve(until);
    for (int target = 0; target < size(); ++target) lock(target, lock_type::shared, when);
  }
  /// Releases every lock lock_all took.
  void unlock_all(deadline until = {}) {
    const auto when = resolve(until);
    for (int target = 0; target < size(); ++target) unlock(target, when);
  }

  /// Returns once this rank's operations to `target` are applied there.
  void flush(int target, deadline until = {}) {
    check_rank(target, "window flush");
    if constexpr (by_transport) {
      if (rma_) {
        rma_->flush(target, resolve(until));
        return;
      }
    }
    if (mapped_) {
      settle(target);
    } else {
      impl_->flush(target, resolve(until));
    }
  }
  /// Returns once this rank's operations to every target are applied.
  void flush_all(deadline until = {}) {
    check_open("window flush_all");
    if constexpr (by_transport) {
      if (rma_) {
        rma_->flush_all(resolve(until));
        return;
      }
    }
    if (mapped_) {
      settle(-1);
    } else {
      impl_->flush(-1, resolve(until));
    }
  }

  /// True when this window's memory is mapped by every rank (put and get are copies, the
  /// target does nothing); false when its operations travel as messages.
  [[nodiscard]] bool mapped() const { return mapped_ != nullptr; }
  /// True when the transport's own remote memory access carries this window: an MPI-3 RMA
  /// window on mpi (where MPI can make one), UCP's RMA on ucx.
  [[nodiscard]] bool carried_by_transport() const {
    if constexpr (by_transport) return rma_ != nullptr;
    return false;
  }

  /// Collective: flush_all, then waits until every rank has done so; the window may then be
  /// destroyed.
  void free(deadline until = {}) {
    fence(until);
    if constexpr (by_transport) {
      if (rma_) rma_->free();
    }
    impl_->stop();  // an engine left listening would cost every later call of this rank
    freed_ = true;
  }

  /// Applies what the others sent to this rank's memory, without blocking.
  void progress() {
    check_open("window progress");
    impl_->engine().poll();
  }

 private:
  using backend = detail::window_by_messages<E, Comm>;
  using transport_type = typename Comm::transport_type;

  // On a transport with remote memory access of its own for E (mpi, ucx), every window is
  // carried by it.
  static constexpr bool by_transport = requires {
    typename transport_type::template rma_window<E>;
    requires transport_type::template rma_carries<E>;
  };
  using rma_backend = typename detail::rma_backend_of<transport_type, E, by_transport>::type;

  // Memory the window allocates is mapped by every rank where the stack lets ranks map each
  // other's and every rank is on this rank's node; other windows travel as messages.
  static constexpr bool may_map = detail::atomic_element<E> && requires {
    requires transport_type::shares_node_memory;
  };

  void open(Comm& comm, std::size_t count, std::span<E>* given, deadline until) {
    Comm own = comm.dup(until);
    detail::communicator_access::revoke_along(own, comm);
    sizes_.resize(static_cast<std::size_t>(own.size()));
    const std::uint64_t mine = count;
    own.allgather(mine, sizes_, until);
    touched_.assign(sizes_.size(), false);
    if constexpr (by_transport) {
      rma_ = std::make_unique<rma_backend>(own, given, count, until.resolve(own.timeout()));
      if (rma_->ok()) {
        local_ = rma_->local();
      } else {  // no osc component for this memory (MPI_Win_create without RDMA, say)
        COMMX_LOG(info, detail::log_context_of(own.transport()),
                  "window: the transport could not carry it ({}); its operations travel as "
                  "messages",
                  rma_->why_not());
        rma_.reset();
      }
    } else if constexpr (may_map) {
      if (given == nullptr && own.split_by_node(until).size() == own.size()) {
        mapped_ = std::make_unique<detail::window_mapped<E>>(own, sizes_, until);
        if (mapped_->ok()) {
          local_ = mapped_->elements(own.rank(), count);
        } else {
          COMMX_LOG(warn, detail::log_context_of(own.transport()),
                    "window: {}; its operations travel as messages", mapped_->why_not());
          mapped_.reset();
        }
      }
    }
    if (carried_by_transport()) {
      // the transport holds the memory
    } else if (given != nullptr) {
      local_ = *given;
    } else if (!mapped_) {
      owned_ = std::make_unique<E[]>(count);
      local_ = std::span<E>(owned_.get(), count);
    }
    impl_ = std::make_unique<backend>(std::move(own), local_);
  }

  // A mapped operation's target: refused when known gone, remembered for the next flush.
  int touch(int target, const char* operation) {
    touched_[static_cast<std::size_t>(alive(target, operation))] = true;
    return target;
  }
  int alive(int target, const char* operation) {
    if (impl_->engine().lost(target)) {
      throw_error(errc::peer_lost, {rank(), target, unknown, 0, operation}, "the target is gone");
    }
    return target;
  }

  // A mapped flush: the copies are ordered before what this rank does next; a target that
  // turned out gone since this rank touched it fails the flush.
  void settle(int target) {
    detail::window_mapped<E>::flush();
    if (target >= 0) {
      impl_->engine().check(target);
    } else {
      impl_->engine().poll();
    }
    for (std::size_t r = 0; r < touched_.size(); ++r) {
      if (target >= 0 && r != static_cast<std::size_t>(target)) continue;
      const bool was = touched_[r];
      touched_[r] = false;
      if (was) (void)alive(static_cast<int>(r), "window flush");
    }
  }

  // Waits for `ready()` on mapped memory, where no message announces the change: polls with
  // backoff (pause, then yield, then short sleeps), serving the rank's messages meanwhile.
  template <class Ready>
  void wait_mapped(Ready&& ready, int target, clock::time_point when, const char* operation) {
    for (int round = 0;; ++round) {
      if (ready()) return;
      impl_->engine().progress_all();
      (void)alive(target, operation);
      if (clock::now() >= when) {
        throw_error(errc::timeout, {rank(), target, unknown, 0, operation},
                    "the deadline passed before the target's lock was free");
      }
      if (round >= 256) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else if (round >= 16) {
        std::this_thread::yield();
      }
    }
  }

  [[nodiscard]] clock::time_point resolve(const deadline& until) const {
    return until.resolve(impl_->communicator().timeout());
  }

  void check_open(const char* operation) const {
    if (freed_) {
      throw_error(errc::invalid_argument, {rank(), unknown, unknown, 0, operation},
                  "the window was freed");
    }
    if (detail::communicator_access::members(impl_->communicator()).revoked()) [[unlikely]] {
      throw_error(errc::revoked, {rank(), unknown, unknown, 0, operation},
                  "the communicator the window was made over was revoked");
    }
  }

  void check_rank(int target, const char* operation) const {
    check_open(operation);
    if (target < 0 || target >= static_cast<int>(sizes_.size())) {
      throw_error(errc::invalid_argument, {rank(), target, unknown, 0, operation},
                  fmt::format("no rank {} in a window of {} ranks", target, sizes_.size()));
    }
  }

  void check_range(int target, std::size_t offset, std::size_t count, const char* operation) const {
    check_rank(target, operation);
    const std::size_t exposed = sizes_[static_cast<std::size_t>(target)];
    if (offset > exposed || count > exposed - offset) {
      throw_error(errc::invalid_argument, {rank(), target, unknown, count * sizeof(E), operation},
                  fmt::format("elements [{}, {}) are outside rank {}'s window of {}; nothing "
                              "was written",
                              offset, offset + count, target, exposed));
    }
  }

  std::unique_ptr<E[]> owned_;
  std::span<E> local_;
  std::vector<std::uint64_t> sizes_;
  std::unique_ptr<detail::window_mapped<E>> mapped_;
  std::unique_ptr<rma_backend> rma_;
  std::unique_ptr<backend> impl_;
  std::vector<std::pair<int, lock_type>> held_;
  std::vector<bool> touched_;
  bool freed_ = false;
};

}  // namespace commx
