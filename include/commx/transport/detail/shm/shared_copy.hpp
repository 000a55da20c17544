// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A large message copied by both its ends at once, where cross-memory attach is open.
///
/// One process_vm_readv copies at one core's speed, while the sender of the message only waits
/// for the receiver's `fin`. So a receiver that copies a message by cma publishes the transfer on
/// its board (one per rank in the segment: a rank copies one large message at a time) and
/// copies it in blocks from the front; the sender, if it is polling meanwhile, claims blocks from
/// the back and writes them into the receiver's buffer with process_vm_writev. Each claim takes
/// half of what is left, at least one unit of 64 KiB: a receiver left alone makes about
/// log2(units) calls, and the two ends meet within a block of where their speeds put them. A
/// sender that is busy elsewhere or asleep delays nothing: the receiver waits only for blocks the
/// sender claimed, and a sender claims only while it polls. (Two processes, 4 MiB by one
/// readv against half each way: 262 against 133 us, one die, 2026-12-05.)
///
/// | board field | written by | what |
/// |---|---|---|
/// | `claims` | both (compare-and-swap) | transfer number (24 bits), front, back (20 each; units) |
/// | `owner` | receiver | the transfer's sender and its offer's generation |
/// | `target`, `bytes`, `unit` | receiver | where the message goes, its size, the unit |
/// | `helped` | sender | units the sender has written or given back |
/// | `given_back` | sender | a block the sender could not write: (first + 1) * 2^20 + end |
///
/// The receive completes (and `fin` goes out) once `helped` counts every unit the sender
/// claimed, looked at by each progress and not waited for inside one: a sender stopped with a
/// block holds up that receive alone, which then ends by its deadline as any other does.
///
/// Order: the receiver writes target, bytes, unit, helped, given_back and owner, then publishes
/// claims with a new transfer number (release). A sender reads claims (acquire), then owner and
/// the rest, and claims by compare-and-swap against the value it read: a transfer that ended
/// (front = back) or was replaced (another number) refuses it, so a sender never writes into a
/// buffer that is not its own message's. The receiver ends a transfer only after `helped` counts
/// every unit the sender claimed, so nothing writes into the buffer once the receive completed
/// (a receive given up on while the sender held a block retires the rank's board for good).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include <sys/types.h>

#include "commx/transport/detail/shm/cross_memory.hpp"

namespace commx::detail::shm {
/// One rank's board: the transfer it is copying now, for its sender to share.
struct alignas(128) copy_board {
  std::atomic<std::uint64_t> claims{0};
  std::atomic<std::uint64_t> owner{0};
  std::atomic<std::uint64_t> target{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> unit{0};
  // Written by the sender: a line of its own.
  alignas(64) std::atomic<std::uint64_t> helped{0};
  std::atomic<std::uint64_t> given_back{0};
};
static_assert(sizeof(copy_board) == 128);

/// The smallest block either end copies: a call costs about a microsecond, 64 KiB 4 to 7.
inline constexpr std::size_t shared_copy_unit = std::size_t{64} << 10;
/// Messages from this size are shared (two units: one for each end).
inline constexpr std::size_t shared_copy_from = 2 * shared_copy_unit;

/// A board's `owner` word for the offer `generation` of `sender`.
constexpr std::uint64_t copy_owner(int sender, std::uint64_t generation) {
  return (static_cast<std::uint64_t>(sender) + 1) << 40 | (generation & ((1ULL << 40) - 1));
}

namespace claims {
constexpr std::uint64_t field = (1ULL << 20) - 1;
constexpr std::uint64_t pack(std::uint64_t number, std::uint64_t front, std::uint64_t back) {
  return (number & 0xffffffULL) << 40 | front << 20 | back;
}
constexpr std::uint64_t number(std::uint64_t word) { return word >> 40; }
constexpr std::uint64_t front(std::uint64_t word) { return (word >> 20) & field; }
constexpr std::uint64_t back(std::uint64_t word) { return word & field; }
/// Half of what is left, at least one unit.
constexpr std::uint64_t block(std::uint64_t word) {
  return std::max<std::uint64_t>(1, (back(word) - front(word)) / 2);
}
}  // namespace claims

/// The unit of a copy of `bytes`: large enough that the count fits its 20 bits (64 KiB below
/// 64 GiB).
constexpr std::size_t copy_unit_for(std::size_t bytes) {
  return std::max(shared_copy_unit, bytes / claims::field + 1);
}
constexpr std::uint64_t copy_units(std::size_t bytes) {
  return (bytes + copy_unit_for(bytes) - 1) / copy_unit_for(bytes);
}
static_assert(copy_units((std::size_t{1} << 36) - 1) <= claims::field &&
              copy_units(std::size_t{1} << 44) <= claims::field &&
              copy_unit_for(std::size_t{8} << 20) == shared_copy_unit);

/// What the receiver's part of a shared copy gave: its reads' outcome, and how many units
/// the sender claimed (the copy is whole once `helped` counts them: sender_finished).
struct shared_read {
  cross_copy copied = cross_copy::done;
  std::uint64_t sender_units = 0;
};

/// The receiver's side, first: publishes the copy of `bytes` to `target` on `board` for the
/// sender named by `owner`.
inline void publish_copy(copy_board& board, std::uint64_t owner, std::byte* target,
                         std::size_t bytes) {
  board.target.store(reinterpret_cast<std::uintptr_t>(target), std::memory_order_relaxed);
  board.bytes.store(bytes, std::memory_order_relaxed);
  board.unit.store(copy_unit_for(bytes), std::memory_order_relaxed);
  board.helped.store(0, std::memory_order_relaxed);
  board.given_back.store(0, std::memory_order_relaxed);
  board.owner.store(owner, std::memory_order_relaxed);
  const std::uint64_t number = claims::number(board.claims.load(std::memory_order_relaxed)) + 1;
  board.claims.store(claims::pack(number, 0, copy_units(bytes)), std::memory_order_release);
}

/// Then: reads blocks of the published copy from the front, from `address` in the sender's
/// process (`pid`), until nothing is left to claim. Does not wait for the sender's blocks.
inline shared_read read_front(copy_board& board, pid_t pid, std::uint64_t address,
                              std::byte* target, std::size_t bytes) {
  const std::size_t unit = copy_unit_for(bytes);
  const std::uint64_t units = copy_units(bytes);
  std::uint64_t seen = board.claims.load(std::memory_order_acquire);
  while (claims::front(seen) < claims::back(seen)) {
    const std::uint64_t first = claims::front(seen);
    const std::uint64_t end = first + claims::block(seen);
    if (!board.claims.compare_exchange_weak(
            seen, claims::pack(claims::number(seen), end, claims::back(seen)),
            std::memory_order_acq_rel)) {
      continue;  // the sender claimed meanwhile: `seen` is the new word
    }
    const std::size_t from = first * unit;
    const std::size_t to = std::min<std::size_t>(end * unit, bytes);
    if (const cross_copy copied = read_from_process(pid, address + from, target + from, to - from);
        copied != cross_copy::done) {
      // Nothing more for the sender to claim: the copy ends with what it holds.
      std::uint64_t now = board.claims.load(std::memory_order_acquire);
      while (!board.claims.compare_exchange_weak(
          now, claims::pack(claims::number(now), claims::back(now), claims::back(now)),
          std::memory_order_acq_rel)) {
      }
      return {copied, units - claims::back(now)};
    }
    seen = board.claims.load(std::memory_order_acquire);
  }
  return {cross_copy::done, units - claims::back(seen)};
}

/// Both: publishes the copy and reads from the front (the sender may meanwhile claim from the
/// back: help_copy).
inline shared_read share_and_read(copy_board& board, std::uint64_t owner, pid_t pid,
                                  std::uint64_t address, std::byte* target, std::size_t bytes) {
  publish_copy(board, owner, target, bytes);
  return read_front(board, pid, address, target, bytes);
}

/// Whether the sender has written (or given back) the `claimed` units it took.
inline bool sender_finished(const copy_board& board, std::uint64_t claimed) {
  return board.helped.load(std::memory_order_acquire) >= claimed;
}

/// Once sender_finished: reads the block the sender could not write, if it gave one back.
inline cross_copy read_given_back(const copy_board& board, pid_t pid, std::uint64_t address,
                                  std::byte* target, std::size_t bytes) {
  const std::uint64_t back = board.given_back.load(std::memory_order_acquire);
  if (back == 0) return cross_copy::done;
  const std::size_t unit = board.unit.load(std::memory_order_relaxed);
  const std::size_t from = ((back >> 20) - 1) * unit;
  const std::size_t to = std::min<std::size_t>((back & claims::field) * unit, bytes);
  return read_from_process(pid, address + from, target + from, to - from);
}

/// What help_copy did: the units it wrote, and what its last write gave.
struct help_given {
  std::uint64_t units = 0;
  cross_copy wrote = cross_copy::done;
};

/// The sender's side: while the receiver of this rank's offer (`owner`) copies it by `board`,
/// claims blocks from the back and writes them from `payload` into the receiver's process
/// (`pid`), until nothing is left to claim. A block it could not write is given back for the
/// receiver to read, and ends the help.
inline help_given help_copy(copy_board& board, std::uint64_t owner, pid_t pid,
                            std::span<const std::byte> payload) {
  help_given given;
  std::uint64_t seen = board.claims.load(std::memory_order_acquire);
  for (;;) {
    if (claims::front(seen) >= claims::back(seen)) return given;
    if (board.owner.load(std::memory_order_acquire) != owner) return given;
    const std::uint64_t target = board.target.load(std::memory_order_relaxed);
    const std::uint64_t unit = board.unit.load(std::memory_order_relaxed);
    if (board.bytes.load(std::memory_order_relaxed) != payload.size() || unit == 0) {
      return given;  // not this message after all (a claim would then fail too)
    }
    const std::uint64_t end = claims::back(seen);
    const std::uint64_t first = end - claims::block(seen);
    const std::uint64_t number = claims::number(seen);
    if (!board.claims.compare_exchange_weak(seen, claims::pack(number, claims::front(seen), first),
                                            std::memory_order_acq_rel)) {
      continue;
    }
    const std::size_t from = first * unit;
    const std::size_t to = std::min<std::size_t>(end * unit, payload.size());
    given.wrote = write_to_process(pid, target + from, payload.data() + from, to - from);
    if (given.wrote != cross_copy::done) {
      board.given_back.store((first + 1) << 20 | end, std::memory_order_relaxed);
    }
    board.helped.fetch_add(end - first, std::memory_order_release);
    if (given.wrote != cross_copy::done) return given;
    given.units += end - first;
    seen = board.claims.load(std::memory_order_acquire);
  }
}

}  // namespace commx::detail::shm
