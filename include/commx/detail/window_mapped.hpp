// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A window whose memory every rank maps: each rank's elements live in a POSIX shared-memory
/// segment of their own, which every other rank of the node maps too, so put and get are plain
/// copies, accumulate and the single-element atomics are atomic instructions on the target's
/// memory, and a lock is a word in the target's segment. The target does nothing: truly
/// one-sided (as MPI's osc/sm over MPI_Win_allocate_shared).
///
/// Each rank creates its segment under a name of its own, the ranks exchange the names, map
/// each other's, and after a barrier each removes its name: from then on the memory lives as
/// long as a mapping does, however the processes end. A rank that cannot create or map a
/// segment (no /dev/shm, no room) makes every rank fall back to the message-carried window.
///
/// Segment layout: a 64-byte header (the lock word: 0 free, n > 0 shared holders, -1 held
/// exclusively), then the elements.

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "commx/deadline.hpp"
#include "commx/detail/window_ops.hpp"

namespace commx::detail {

inline constexpr std::size_t mapped_header_bytes = 64;

/// One mapping of a window segment; unmapped when destroyed.
class mapped_segment {
 public:
  mapped_segment() = default;
  mapped_segment(mapped_segment&& other) noexcept
      : base_(std::exchange(other.base_, nullptr)), bytes_(other.bytes_) {}
  mapped_segment& operator=(mapped_segment&& other) noexcept {
    if (this != &other) {
      release();
      base_ = std::exchange(other.base_, nullptr);
      bytes_ = other.bytes_;
    }
    return *this;
  }
  mapped_segment(const mapped_segment&) = delete;
  mapped_segment& operator=(const mapped_segment&) = delete;
  ~mapped_segment() { release(); }

  /// Creates `name` with `bytes` zeroed bytes and maps it; empty (with `why` set) on failure.
  static mapped_segment create(const std::string& name, std::size_t bytes, std::string& why) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      why = fmt::format("shm_open({}): {}", name, std::strerror(errno));
      return {};
    }
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      why = fmt::format("ftruncate({}, {}): {}", name, bytes, std::strerror(errno));
      ::close(fd);
      ::shm_unlink(name.c_str());
      return {};
    }
    mapped_segment made = map(fd, bytes, why);
    if (!made.valid()) ::shm_unlink(name.c_str());
    return made;
  }

  /// Maps the existing segment `name`; empty (with `why` set) on failure.
  static mapped_segment open(const std::string& name, std::size_t bytes, std::string& why) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      why = fmt::format("shm_open({}): {}", name, std::strerror(errno));
      return {};
    }
    return map(fd, bytes, why);
  }

  [[nodiscard]] bool valid() const { return base_ != nullptr; }
  [[nodiscard]] std::byte* base() const { return static_cast<std::byte*>(base_); }

 private:
  static mapped_segment map(int fd, std::size_t bytes, std::string& why) {
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    mapped_segment made;
    if (base == MAP_FAILED) {
      why = fmt::format("mmap of {} bytes: {}", bytes, std::strerror(errno));
      return made;
    }
    made.base_ = base;
    made.bytes_ = bytes;
    return made;
  }
  void release() noexcept {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = nullptr;
  }

  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A segment's name, unique on the host: the creator's pid and a count.
inline std::string window_segment_name() {
  static std::atomic<std::uint64_t> made{0};
  return fmt::format("/commx-win-{}-{}", ::getpid(), made.fetch_add(1));
}

/// A segment's name as one value (not a range of chars), for an allgather; empty: none.
struct segment_label {
  char text[64];
};

/// The mapped window backend (see the file comment); `window` (window.hpp) is its interface.
template <class E>
class window_mapped {
  static_assert(atomic_element<E>, "the mapped window takes lock-free elements");

 public:
  /// Collective over `comm` (all of whose ranks share this rank's node), `sizes` being every
  /// rank's element count. `ok()` tells whether every rank mapped every segment.
  template <class Comm>
  window_mapped(Comm& comm, std::span<const std::uint64_t> sizes, deadline until)
      : segments_(sizes.size()) {
    const auto me = static_cast<std::size_t>(comm.rank());
    segment_label name{};
    const std::string mine = window_segment_name();
    std::string why;
    segments_[me] = mapped_segment::create(mine, bytes_for(sizes[me]), why);
    if (segments_[me].valid()) std::memcpy(name.text, mine.c_str(), mine.size());
    std::vector<segment_label> names(sizes.size());
    comm.allgather(name, names, until);
    int mapped = segments_[me].valid() ? 1 : 0;
    for (std::size_t r = 0; r < sizes.size() && mapped == 1; ++r) {
      if (r == me) continue;
      if (names[r].text[0] == '\0') {
        mapped = 0;
        break;
      }
      segments_[r] = mapped_segment::open(names[r].text, bytes_for(sizes[r]), why);
      if (!segments_[r].valid()) mapped = 0;
    }
    ok_ = comm.allreduce_value(mapped, op::min{}, until) == 1;  // every rank has mapped: unlink
    if (segments_[me].valid()) ::shm_unlink(mine.c_str());
    if (!ok_) {
      segments_.clear();
      why_ = why.empty() ? std::string("another rank could not map a segment") : why;
    }
  }

  [[nodiscard]] bool ok() const { return ok_; }
  [[nodiscard]] const std::string& why_not() const { return why_; }

  [[nodiscard]] std::span<E> elements(int rank, std::size_t count) const {
    return {reinterpret_cast<E*>(segments_[index(rank)].base() + mapped_header_bytes), count};
  }

  void put(std::span<const std::byte> bytes, int target, std::size_t offset) {
    if (!bytes.empty()) std::memcpy(address(target, offset), bytes.data(), bytes.size());
  }
  void get(std::span<std::byte> into, int target, std::size_t offset) const {
    if (!into.empty()) std::memcpy(into.data(), address(target, offset), into.size());
  }
  void accumulate(std::span<const E> data, int target, std::size_t offset, window_op op) {
    E* cells = reinterpret_cast<E*>(address(target, offset));
    E old{};
    for (std::size_t i = 0; i < data.size(); ++i)
      (void)combine_atomically(op, cells[i], data[i], old);
  }
  E fetch_and_op(const E& value, int target, std::size_t offset, window_op op) {
    E old{};
    (void)combine_atomically(op, *reinterpret_cast<E*>(address(target, offset)), value, old);
    return old;
  }
  E compare_and_swap(E expected, const E& desired, int target, std::size_t offset) {
    std::atomic_ref<E> cell(*reinterpret_cast<E*>(address(target, offset)));
    (void)cell.compare_exchange_strong(expected, desired, std::memory_order_acq_rel);
    return expected;  // the old value, whether or not it was replaced
  }

  /// Takes `target`'s lock if it is free for `type`; false otherwise.
  bool try_lock(int target, lock_type type) {
    std::atomic_ref<std::int64_t> word(lock_word(target));
    std::int64_t seen = word.load(std::memory_order_relaxed);
    if (type == lock_type::exclusive) {
      return seen == 0 && word.compare_exchange_strong(seen, -1, std::memory_order_acquire);
    }
    while (seen >= 0) {
      if (word.compare_exchange_weak(seen, seen + 1, std::memory_order_acquire)) return true;
    }
    return false;
  }
  void unlock(int target, lock_type type) {
    std::atomic_ref<std::int64_t> word(lock_word(target));
    if (type == lock_type::exclusive) {
      word.store(0, std::memory_order_release);
    } else {
      word.fetch_sub(1, std::memory_order_release);
    }
  }

  /// Orders this rank's copies before whatever it does next (a message, a barrier).
  static void flush() { std::atomic_thread_fence(std::memory_order_seq_cst); }

 private:
  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }
  static std::size_t bytes_for(std::uint64_t count) {
    return mapped_header_bytes + static_cast<std::size_t>(count) * sizeof(E);
  }
  [[nodiscard]] std::byte* address(int target, std::size_t offset) const {
    return segments_[index(target)].base() + mapped_header_bytes + offset * sizeof(E);
  }
  [[nodiscard]] std::int64_t& lock_word(int target) const {
    return *reinterpret_cast<std::int64_t*>(segments_[index(target)].base());
  }

  std::vector<mapped_segment> segments_;
  bool ok_ = false;
  std::string why_;
};

}  // namespace commx::detail
