// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A commx window carried by UCP's remote memory access (window.hpp chooses it on
/// transport::ucx for elements of 4 and 8 bytes, the sizes UCX's atomics take): each rank maps
/// its window's memory and a lock word with UCX (`ucp_mem_map`; memory the window allocates is
/// allocated by UCX, so its shared-memory transports can map it too), the packed remote keys
/// travel once over the communicator (allgatherv), and a rank unpacks a target's keys on its
/// first operation there, on the engine's endpoint to it. On a fabric with RDMA a put, a get or
/// an atomic needs nothing of the target's CPU, nor over UCX's shared memory into memory the
/// window allocated; over UCX's TCP, and over its shared memory into a caller's span, UCX
/// emulates them with active messages the target applies when it makes progress.
///
/// | commx | UCP |
/// |---|---|
/// | put, get | ucp_put_nbx (the data copied unless UCX takes it at once), ucp_get_nbx |
/// | accumulate | per element: ucp_atomic_op_nbx (ADD, AND, OR, XOR on integers; SWAP for replace); a compare-and-swap loop for the ops UCX's atomics lack (product, min, max, floating point) |
/// | fetch_and_op, compare_and_swap | as accumulate, fetching (CSWAP for compare_and_swap), then waits |
/// | flush, flush_all | ucp_ep_flush_nbx on each target this rank touched since its last flush |
/// | fence | flush_all, then the communicator's barrier |
/// | lock, unlock | a lock word per rank taken with CSWAP and fetching ADD (remote_lock_word, as on mpi) |
///
/// Every element is changed by UCX's atomics only, so accumulates of different ops to one
/// element stay atomic together, as the window promises. The compare-and-swap loop costs a
/// round trip per element (more when ranks contend): an accumulate of many elements with min or
/// max is far slower than with a sum. Ordering: UCX does not keep the order of two operations
/// to one element between synchronisations; flush between them where it matters.
///
/// Per rank: for each of the N members, an entry of about 80 bytes and its packed keys (about
/// 100 bytes over TCP and shared memory; UCX's verbs keys are larger); keys are unpacked, and
/// endpoints made, only for targets this rank reaches. A target that is gone fails the
/// operations to it with errc::peer_lost at the flush that would complete them.

#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/detail/communicator_access.hpp"
#include "commx/detail/window_ops.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/ucx/engine.hpp"

namespace commx::detail::ucx {

/// UCX's atomic for `op` on elements of type E, where it has one (integers: sum and the bitwise
/// ops; any element: replace, as a swap); none for the rest.
template <class E>
constexpr std::optional<ucp_atomic_op_t> native_atomic(window_op op) {
  if (op == window_op::replace) return UCP_ATOMIC_OP_SWAP;
  if constexpr (std::is_integral_v<E>) {
    switch (op) {
      case window_op::sum:
        return UCP_ATOMIC_OP_ADD;
      case window_op::bit_and:
        return UCP_ATOMIC_OP_AND;
      case window_op::bit_or:
        return UCP_ATOMIC_OP_OR;
      case window_op::bit_xor:
        return UCP_ATOMIC_OP_XOR;
      default:
        break;
    }
  }
  return std::nullopt;
}

/// See the file comment.
template <class E>
class rma_window {
  static_assert(sizeof(E) == 4 || sizeof(E) == 8, "UCX's atomics take 4 and 8 bytes");
  using bits = std::conditional_t<sizeof(E) == 4, std::uint32_t, std::uint64_t>;

 public:
  /// Collective over `own`: maps `*given`, or `count` value-initialised elements UCX allocates,
  /// and exchanges the keys.
  template <class Comm>
  rma_window(Comm& own, std::span<E>* given, std::size_t count, clock::time_point when)
      : engine_(own.transport().engine()), rank_(own.rank()) {
    try {
      open(own, given, count, when);
    } catch (...) {
      release();  // a member lost during the exchange, say: nothing stays mapped
      throw;
    }
  }
  rma_window(const rma_window&) = delete;
  rma_window& operator=(const rma_window&) = delete;
  ~rma_window() { release(); }

  [[nodiscard]] static bool ok() { return true; }
  [[nodiscard]] static const char* why_not() { return ""; }
  [[nodiscard]] std::span<E> local() const { return local_; }
  /// Nothing to make visible: UCX writes this rank's memory coherently.
  void sync() const {}

  void put(std::span<const std::byte> data, int target, std::size_t offset) {
    if (data.empty()) return;
    remote* t = reach(target);
    if (t == nullptr) return;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    const std::uint64_t address = t->base + offset * sizeof(E);
    const ucs_status_ptr_t sent =
        ucp_put_nbx(t->ep, data.data(), data.size(), address, t->memory, &param);
    if (UCS_PTR_IS_PTR(sent)) {
      // UCX kept the caller's data after all: it is the caller's again once UCX lets it go.
      engine_.wait_until([&] { return ucp_request_check_status(sent) != UCS_INPROGRESS; },
                         clock::now() + engine_.timeout());
    }
    if (UCS_PTR_STATUS(sent) != UCS_ERR_NO_RESOURCE) {
      track(sent, target, {});
      return;
    }
    auto staged = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
    param.op_attr_mask = 0;
    const ucs_status_ptr_t request =
        ucp_put_nbx(t->ep, staged->data(), staged->size(), address, t->memory, &param);
    track(request, target, std::move(staged));
  }
  void get(std::span<std::byte> into, int target, std::size_t offset) {
    if (into.empty()) return;
    remote* t = reach(target);
    if (t == nullptr) return;
    ucp_request_param_t param{};
    track(ucp_get_nbx(t->ep, into.data(), into.size(), t->base + offset * sizeof(E), t->memory,
                      &param),
          target, {});
  }
  void accumulate(std::span<const E> data, int target, std::size_t offset, window_op op,
                  clock::time_point when) {
    if (op == window_op::no_op || data.empty()) return;
    remote* t = reach(target);
    if (t == nullptr) return;
    const auto atomic = native_atomic<E>(op);
    if (!atomic) {
      for (std::size_t i = 0; i < data.size(); ++i) {
        (void)combine_remotely(*t, target, offset + i, data[i], op, when, "window accumulate");
      }
      return;
    }
    // Operands (and, for a swap, the old values UCX must write somewhere) live until completed.
    const bool swap = *atomic == UCP_ATOMIC_OP_SWAP;
    auto staged = std::make_shared<std::vector<bits>>(data.size() * (swap ? 2 : 1));
    std::memcpy(staged->data(), data.data(), data.size_bytes());
    for (std::size_t i = 0; i < data.size(); ++i) {
      ucp_request_param_t param = typed();
      if (swap) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        param.reply_buffer = staged->data() + data.size() + i;
      }
      track(ucp_atomic_op_nbx(t->ep, *atomic, staged->data() + i, 1, element(*t, offset + i),
                              t->memory, &param),
            target, staged);
    }
  }
  E fetch_and_op(const E& value, int target, std::size_t offset, window_op op,
                 clock::time_point when) {
    const char* operation = "window fetch_and_op";
    remote& t = reach_or_fail(target, operation);
    const auto atomic = op == window_op::no_op && std::is_integral_v<E>
                            ? std::optional<ucp_atomic_op_t>(UCP_ATOMIC_OP_ADD)
                            : native_atomic<E>(op);
    if (!atomic) return combine_remotely(t, target, offset, value, op, when, operation);
    bits operand = op == window_op::no_op ? 0 : as_bits(value);
    bits old = 0;
    fetch(t, target, t.memory, *atomic, operand, old, element(t, offset), when, operation);
    return from_bits(old);
  }
  E compare_and_swap(const E& expected, const E& desired, int target, std::size_t offset,
                     clock::time_point when) {
    const char* operation = "window compare_and_swap";
    remote& t = reach_or_fail(target, operation);
    return from_bits(swap_if(t, target, t.memory, element(t, offset), as_bits(expected),
                             as_bits(desired), when, operation));
  }

  /// Returns once this rank's operations to `target` are applied there and its gets landed.
  void flush(int target, clock::time_point when) {
    if (at(target).touched) finish_flushes({&target, 1}, when);
    fail_if_lost(target);
  }
  void flush_all(clock::time_point when) {
    std::vector<int> touched;
    for (std::size_t r = 0; r < targets_.size(); ++r) {
      if (targets_[r].touched) touched.push_back(static_cast<int>(r));
    }
    finish_flushes(touched, when);
    for (int target = 0; target < static_cast<int>(targets_.size()); ++target) {
      fail_if_lost(target);
    }
  }
  void fence(clock::time_point when) {
    flush_all(when);
    barrier_(when);
  }

  /// Takes `target`'s lock word if free for `type` (remote_lock_word; UCX's atomics work on
  /// the word's bits, two's complement).
  // A lock word's atomic is waited for to its end even past `when` (within the transport's
  // timeout): one abandoned after it was applied would leave the word counted for good.
  bool try_lock(int target, lock_type type, clock::time_point when) {
    when = std::max(when, clock::now() + engine_.timeout());
    remote& t = reach_or_fail(target, "window lock");
    return remote_lock_word::try_lock(
        type,
        [&](std::int64_t expected, std::int64_t desired) {
          return static_cast<std::int64_t>(swap_if(t, target, t.lock, t.lock_word, word(expected),
                                                   word(desired), when, "window lock"));
        },
        [&](std::int64_t delta) { return add_to_word(t, target, delta, when); });
  }
  void unlock(int target, lock_type type, clock::time_point when) {
    flush(target, when);
    when = std::max(when, clock::now() + engine_.timeout());
    remote& t = reach_or_fail(target, "window unlock");
    remote_lock_word::unlock(
        type, [&](std::int64_t delta) { return add_to_word(t, target, delta, when); });
  }

  /// Collective (after the window's fence): unmaps this rank's memory.
  void free() { release(); }

 private:
  using word = std::uint64_t;  // a lock word, as UCX's atomics take it

  struct remote {
    int world = 0;
    std::size_t keys = 0;  // where its packed keys start in keys_
    ucp_ep_h ep = nullptr;
    ucp_rkey_h memory = nullptr;
    ucp_rkey_h lock = nullptr;
    std::uint64_t base = 0;
    std::uint64_t lock_word = 0;
    bool touched = false;  // operations since the last flush
    bool lost = false;     // some of them failed, or could not start: the target is gone
  };
  struct pending {
    ucs_status_ptr_t request;
    int target;
    std::shared_ptr<void> staged;  // what UCX reads or writes until the request completes
  };

  remote& at(int target) { return targets_[static_cast<std::size_t>(target)]; }

  static bits as_bits(const E& value) {
    bits b = 0;
    std::memcpy(&b, &value, sizeof(E));
    return b;
  }
  static E from_bits(bits b) {
    E value{};
    std::memcpy(&value, &b, sizeof(E));
    return value;
  }
  template <class Bits = bits>
  static ucp_request_param_t typed() {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype = ucp_dt_make_contig(sizeof(Bits));
    return param;
  }
  static std::uint64_t element(const remote& t, std::size_t offset) {
    return t.base + offset * sizeof(E);
  }

  template <class Comm>
  void open(Comm& own, std::span<E>* given, std::size_t count, clock::time_point when) {
    const group& members = communicator_access::members(own);
    targets_.resize(static_cast<std::size_t>(own.size()));
    for (int r = 0; r < own.size(); ++r) at(r).world = members.world_of(r);
    // An empty window maps an element of its own, so that every rank has keys to send.
    const bool allocate = given == nullptr || count == 0;
    void* base = map(memory_, allocate ? nullptr : given->data(),
                     std::max<std::size_t>(count, 1) * sizeof(E), allocate);
    if (!allocate) base = given->data();
    if (given == nullptr) std::uninitialized_value_construct_n(static_cast<E*>(base), count);
    local_ = std::span<E>(given != nullptr ? given->data() : static_cast<E*>(base), count);
    lock_word_ = static_cast<word*>(map(lock_memory_, nullptr, sizeof(word), true));
    *lock_word_ = 0;
    std::vector<std::byte> mine = describe(reinterpret_cast<std::uint64_t>(base));
    std::vector<std::uint64_t> sizes(targets_.size());
    own.allgather(static_cast<std::uint64_t>(mine.size()), sizes, when);
    std::vector<std::size_t> counts(sizes.begin(), sizes.end());
    std::vector<std::size_t> displs(counts.size());
    std::size_t total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      displs[r] = total;
      total += counts[r];
    }
    keys_.resize(total);
    own.allgatherv(mine, keys_, counts, displs, when);
    for (std::size_t r = 0; r < targets_.size(); ++r) targets_[r].keys = displs[r];
    barrier_ = [comm = own](clock::time_point until) mutable { comm.barrier(until); };
  }

  // Maps `length` bytes at `address` (or allocates them with UCX where `allocate`).
  void* map(ucp_mem_h& handle, void* address, std::size_t length, bool allocate) {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.address = allocate ? nullptr : address;
    params.length = length;
    params.flags = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
    check(ucp_mem_map(engine_.ucp_context(), &params, &handle), "mapping the window's memory");
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    check(ucp_mem_query(handle, &attr), "reading the window's memory");
    return attr.address;
  }

  // This rank's entry: its memory's address, its lock word's, and both packed keys.
  std::vector<std::byte> describe(std::uint64_t base) {
    std::vector<std::byte> entry(3 * sizeof(std::uint64_t));
    const auto lock = reinterpret_cast<std::uint64_t>(lock_word_);
    std::memcpy(entry.data(), &base, sizeof base);
    std::memcpy(entry.data() + 8, &lock, sizeof lock);
    std::uint64_t first = 0;
    for (ucp_mem_h handle : {memory_, lock_memory_}) {
      void* packed = nullptr;
      std::size_t length = 0;
      check(ucp_rkey_pack(engine_.ucp_context(), handle, &packed, &length),
            "packing the window's key");
      const auto* bytes = static_cast<const std::byte*>(packed);
      entry.insert(entry.end(), bytes, bytes + length);
      ucp_rkey_buffer_release(packed);
      if (first == 0) first = length;
    }
    std::memcpy(entry.data() + 16, &first, sizeof first);
    return entry;
  }

  // `target`'s endpoint and keys, unpacked on first use; null when it is gone (then what this
  // rank does there is lost, as the next flush says).
  remote* reach(int target) {
    remote& t = at(target);
    t.touched = true;
    if (engine_.cut_off(t.world)) t.lost = true;
    if (t.lost) return nullptr;
    if (t.ep != nullptr) return &t;
    t.ep = engine_.endpoint_to(t.world);
    if (t.ep == nullptr) {
      t.lost = true;
      return nullptr;
    }
    if (t.memory == nullptr) {
      const std::byte* entry = keys_.data() + t.keys;
      std::uint64_t first = 0;
      std::memcpy(&t.base, entry, 8);
      std::memcpy(&t.lock_word, entry + 8, 8);
      std::memcpy(&first, entry + 16, 8);
      check(ucp_ep_rkey_unpack(t.ep, entry + 24, &t.memory), "unpacking a window's key");
      check(ucp_ep_rkey_unpack(t.ep, entry + 24 + first, &t.lock), "unpacking a window's key");
    }
    return &t;
  }
  // For an operation that waits for its answer: the target, or errc::peer_lost now.
  remote& reach_or_fail(int target, const char* operation) {
    remote* t = reach(target);
    if (t == nullptr) {
      at(target).lost = false;
      throw_error(errc::peer_lost, {rank_, target, unknown, 0, operation}, "the target is gone");
    }
    return *t;
  }

  void track(ucs_status_ptr_t request, int target, std::shared_ptr<void> staged) {
    if (request == nullptr) return;
    if (UCS_PTR_IS_ERR(request)) {
      at(target).lost = true;
      return;
    }
    pending_.push_back({request, target, std::move(staged)});
  }

  // Flushes the endpoints to `targets`, all at once, and waits for them and for what this
  // rank started there.
  void finish_flushes(std::span<const int> targets, clock::time_point when) {
    for (int target : targets) {
      remote& t = at(target);
      t.touched = false;
      if (t.ep == nullptr || engine_.cut_off(t.world)) continue;
      ucp_request_param_t param{};
      track(ucp_ep_flush_nbx(t.ep, &param), target, {});
    }
    engine_.wait_until([&] { return settled(targets); }, when);
    if (!settled(targets)) {
      throw_error(errc::timeout,
                  {rank_, targets.size() == 1 ? targets[0] : unknown, unknown, 0, "window flush"},
                  "the deadline passed before this rank's operations were applied");
    }
  }

  // Whether what this rank started toward `targets` has ended, or cannot end because the
  // target is gone (UCX ends those requests when the engine closes its endpoint). Ended
  // requests are freed; failed ones mark their target lost.
  bool settled(std::span<const int> targets) {
    bool all = true;
    std::erase_if(pending_, [&](const pending& p) {
      if (std::ranges::find(targets, p.target) == targets.end()) return false;
      remote& t = at(p.target);
      const ucs_status_t status = ucp_request_check_status(p.request);
      if (status == UCS_INPROGRESS) {
        if (engine_.cut_off(t.world)) {
          t.lost = true;
        } else {
          all = false;
        }
        return false;
      }
      if (status != UCS_OK) t.lost = true;
      ucp_request_free(p.request);
      return true;
    });
    return all;
  }

  void fail_if_lost(int target) {
    remote& t = at(target);
    if (!t.lost) return;
    t.lost = false;
    throw_error(errc::peer_lost, {rank_, target, unknown, 0, "window flush"},
                "the target is gone; this rank's operations there since its last flush may "
                "not have been applied");
  }

  // One fetching atomic on `key`'s memory, waited for.
  template <class Bits>
  void fetch(remote& t, int target, ucp_rkey_h key, ucp_atomic_op_t opcode, Bits& operand,
             Bits& reply, std::uint64_t address, clock::time_point when, const char* operation) {
    ucp_request_param_t param = typed<Bits>();
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    param.reply_buffer = &reply;
    const ucs_status_ptr_t request =
        ucp_atomic_op_nbx(t.ep, opcode, &operand, 1, address, key, &param);
    if (request == nullptr) return;
    ucs_status_t status = UCS_PTR_STATUS(request);
    if (!UCS_PTR_IS_ERR(request)) {
      engine_.wait_until(
          [&] {
            return ucp_request_check_status(request) != UCS_INPROGRESS || engine_.cut_off(t.world);
          },
          when);
      status = ucp_request_check_status(request);
      if (status == UCS_INPROGRESS) {
        // UCX still writes `reply` until it lets the request go: wait for that, bounded.
        engine_.wait_until([&] { return ucp_request_check_status(request) != UCS_INPROGRESS; },
                           clock::now() + std::chrono::seconds(1));
        if (ucp_request_check_status(request) == UCS_INPROGRESS) {
          ucp_request_cancel(engine_.ucp_worker(), request);
        }
      }
      ucp_request_free(request);
      if (status == UCS_OK) return;
    }
    if (status == UCS_INPROGRESS && !engine_.cut_off(t.world)) {
      throw_error(errc::timeout, {rank_, target, unknown, sizeof(Bits), operation},
                  "the deadline passed before the target applied it");
    }
    throw_error(errc::peer_lost, {rank_, target, unknown, sizeof(Bits), operation},
                fmt::format("the target is gone ({})", status_text(status)));
  }

  template <class Bits>
  Bits swap_if(remote& t, int target, ucp_rkey_h key, std::uint64_t address, Bits expected,
               Bits desired, clock::time_point when, const char* operation) {
    Bits reply = desired;
    fetch(t, target, key, UCP_ATOMIC_OP_CSWAP, expected, reply, address, when, operation);
    return reply;
  }

  // Adds `delta` to `target`'s lock word; what it held before.
  std::int64_t add_to_word(remote& t, int target, std::int64_t delta, clock::time_point when) {
    word operand = static_cast<word>(delta);
    word before = 0;
    fetch(t, target, t.lock, UCP_ATOMIC_OP_ADD, operand, before, t.lock_word, when, "window lock");
    return static_cast<std::int64_t>(before);
  }

  // `target[offset] = target[offset] op value` by compare-and-swap; the old value.
  E combine_remotely(remote& t, int target, std::size_t offset, const E& value, window_op op,
                     clock::time_point when, const char* operation) {
    E seen{};
    for (;;) {
      E next{};
      (void)combine(op, seen, value, next);
      const bits old = swap_if(t, target, t.memory, element(t, offset), as_bits(seen),
                               as_bits(next), when, operation);
      if (old == as_bits(seen)) return seen;
      seen = from_bits(old);
    }
  }

  void check(ucs_status_t status, const char* what) const {
    if (status != UCS_OK) {
      throw_error(errc::invalid_argument, {rank_, unknown, unknown, 0, "window"},
                  fmt::format("ucx: {}: {}", what, status_text(status)));
    }
  }

  // Waits (bounded) for what UCX still holds, then gives back keys and memory.
  void release() {
    const clock::time_point until = clock::now() + std::chrono::seconds(1);
    engine_.wait_until(
        [&] {
          return std::ranges::all_of(pending_, [](const pending& p) {
            return ucp_request_check_status(p.request) != UCS_INPROGRESS;
          });
        },
        until);
    for (pending& p : pending_) {
      if (ucp_request_check_status(p.request) == UCS_INPROGRESS) {
        ucp_request_cancel(engine_.ucp_worker(), p.request);
      }
      ucp_request_free(p.request);
    }
    pending_.clear();
    for (remote& t : targets_) {
      for (ucp_rkey_h* key : {&t.memory, &t.lock}) {
        if (*key != nullptr) ucp_rkey_destroy(*key);
        *key = nullptr;
      }
      t.ep = nullptr;
    }
    for (ucp_mem_h* handle : {&memory_, &lock_memory_}) {
      if (*handle != nullptr) (void)ucp_mem_unmap(engine_.ucp_context(), *handle);
      *handle = nullptr;
    }
  }

  engine& engine_;
  int rank_;
  std::span<E> local_;
  ucp_mem_h memory_ = nullptr;
  ucp_mem_h lock_memory_ = nullptr;
  word* lock_word_ = nullptr;
  std::vector<remote> targets_;
  std::vector<std::byte> keys_;  // every member's packed keys, one after another
  std::vector<pending> pending_;
  std::function<void(clock::time_point)> barrier_;  // the communicator's, which it keeps alive
};

}  // namespace commx::detail::ucx
