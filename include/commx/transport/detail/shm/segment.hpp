// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The job's one shared-memory segment: its layout, and how the ranks meet in it.
///
/// Rank 0 creates the segment (replacing any segment of that name: one left by a crashed earlier
/// job is never reused), the others open it by name and claim their slot, and everyone waits
/// until all have arrived. Rank 0 then removes the name at once: every rank has the memory
/// mapped, and the kernel frees it when the last mapping goes, however the processes end (a
/// SIGKILL included). Only a job that dies during start-up can leave the name behind; commxrun
/// removes it after its ranks have ended, and the next job of that name replaces it.
///
/// A rank that opened a stale segment notices: its creator is gone, its slot is taken, or the
/// name now points to a newer segment. It lets go and opens the name again.
///
/// Layout (offsets from the start; `n` ranks, `K` tickets per pair):
///
/// | what | size |
/// |---|---|
/// | segment_header | 256 |
/// | rank_slot[n] | 128 each |
/// | ring_control[n * n], index source * n + destination | 64 each |
/// | ticket words[n * n * K] (large messages on offer) | 4 each |
/// | senders[n][ceil(n / 64)]: bit s of rank d's words is set once s has written to d | 8 each |
/// | copy boards[n], 128-aligned: the large message each rank copies (shared_copy.hpp) | 128 each |
/// | cpu sets[n], page-aligned: the CPUs each rank may run on (cpu_sharing.hpp) | 128 each |
/// | rest counts[n], page-aligned: of the ranks whose CPU set is rank r's, those at rest (used at the lowest such r only; cpu_sharing.hpp) | 64 each |
/// | ring data[n * n], page-aligned | ring_bytes each |
///
/// A ring is touched only once its sender writes to it: a receiver polls the rings of the
/// senders its `senders` bits name (endpoint.hpp), so the pages of the rings of pairs that
/// never talk are never mapped in, and a rank's polling costs what its senders cost.

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/shm/cpu_sharing.hpp"
#include "commx/transport/detail/shm/futex.hpp"
#include "commx/transport/detail/shm/liveness.hpp"
#include "commx/transport/detail/shm/ring.hpp"
#include "commx/transport/detail/shm/shared_copy.hpp"

namespace commx::detail::shm {

inline constexpr std::uint64_t segment_magic = 0x636f6d6d782d7368ULL;  // "commx-sh"
inline constexpr std::uint32_t segment_version = 8;  // 6: CPU sets; 7: copy boards; 8: rests
inline constexpr std::uint32_t tickets_per_pair = 16;

/// What a rank's slot says about it.
enum class presence : std::uint32_t { absent = 0, present, finished, failed };

struct segment_header {
  std::uint64_t magic = 0;
  std::uint32_t version = 0;
  std::int32_t ranks = 0;
  std::uint64_t ring_bytes = 0;
  std::uint64_t total_bytes = 0;
  std::int32_t creator_pid = 0;
  std::uint64_t creator_start = 0;  ///< with the pid, names the creator even if pids are reused
  alignas(cache_line) std::atomic<std::uint32_t> ready{0};  ///< futex: 1 once initialised
  std::atomic<std::uint32_t> arrived{0};                    ///< futex: ranks that claimed a slot
  alignas(cache_line) std::atomic<std::uint32_t> departures{0};  ///< bumped when a rank goes
  /// Per size class, how large messages of an exchange travel (path_choice::way), as rank 0
  /// measures and publishes it (COMMX_SHM_LARGE=auto).
  alignas(cache_line) std::array<std::atomic<std::uint8_t>, 48> exchange_way{};
};
static_assert(sizeof(segment_header) <= 256);

struct rank_slot {
  alignas(cache_line) std::atomic<std::int32_t> pid{0};
  std::atomic<presence> state{presence::absent};
  std::uint64_t probe_address = 0;  ///< a word in this rank's memory, for the CMA check
  std::uint64_t probe_value = 0;    ///< what that word holds
  std::uint64_t start_time = 0;     ///< when this rank's process started (liveness.hpp)
  /// Bumped by a sender after it set its bit in this rank's senders words: a look at one word
  /// tells a polling receiver whether anyone new writes to it.
  std::atomic<std::uint32_t> senders_changed{0};
  /// 1 while this rank's wait yields its core or sleeps, where ranks share cores: a rank that
  /// waits for it then has nothing to gain by spinning (endpoint_departures.hpp). Written by
  /// the rank itself, twice a wait that yields; a hint, read without ordering.
  std::atomic<std::uint32_t> idle{0};
  /// 1 + the rank whose rest count counts this one (cpu_sharing.hpp), 0 if none: written
  /// before the rank first sleeps, read by a rank that wakes it.
  std::atomic<std::int32_t> rests_at{0};
  // Written by others (wake) and by the rank itself when it sleeps: a line of their own.
  alignas(cache_line) std::atomic<std::uint32_t> wake{0};  ///< futex this rank sleeps on
  std::atomic<std::uint32_t> sleeping{0};                  ///< 1 while it may be asleep
  /// 1 while this rank is counted at rest for a sleep: whoever clears it (the rank as its
  /// sleep ends, or a rank that wakes it) takes it off the count.
  std::atomic<std::uint32_t> counted_at_rest{0};
};
// Two lines, the slots of a job's ranks side by side: with the CPU sets in the slots (four
// lines), a 64 KiB and 256 KiB exchange at 2 ranks took 1.2x the time (8 runs each way,
// 2026-12-04): the CPU sets have a page of their own.
static_assert(sizeof(rank_slot) == 2 * cache_line);
static_assert(std::atomic<presence>::is_always_lock_free);
// The pairs' words, the copy boards and the rest counts are used as the kernel's zeroed pages
// give them, never constructed (segment::create): lock-free atomics, whose zero value is all
// zero bits and which need no destruction.
static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
              std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::is_trivially_destructible_v<ring_control>);
static_assert(std::is_trivially_destructible_v<copy_board>);

/// A word in this process's memory that peers read with process_vm_readv at start-up, to learn
/// whether the kernel lets them copy large messages straight out of this process.
inline const std::uint64_t& cross_memory_probe() {
  static const std::uint64_t word = 0x636d612d70726f62ULL ^ static_cast<std::uint64_t>(::getpid());
  return word;
}

/// Publishes the probe word and the start time in this rank's slot, and its CPU set beside;
/// done before the rank counts as arrived, so every peer sees them once everyone has.
inline void publish_probe(rank_slot& slot, cpu_words& cpus) {
  slot.probe_address = reinterpret_cast<std::uint64_t>(&cross_memory_probe());
  slot.probe_value = cross_memory_probe();
  slot.start_time = process_start_time(::getpid());
  cpus = cpu_words::of_this_process();
}

/// Where everything is, for `ranks` ranks and rings of `ring_bytes`.
struct segment_layout {
  std::size_t ranks = 0;
  std::size_t ring_bytes = 0;
  std::size_t slots = 256;
  std::size_t controls = 0;
  std::size_t tickets = 0;
  std::size_t senders = 0;
  std::size_t sender_words = 0;  ///< per rank: ceil(n / 64)
  std::size_t boards = 0;
  std::size_t cpu_sets = 0;
  std::size_t rest_counts = 0;
  std::size_t rings = 0;
  std::size_t total = 0;

  segment_layout(int rank_count, std::size_t bytes_per_ring)
      : ranks(static_cast<std::size_t>(rank_count)), ring_bytes(bytes_per_ring) {
    constexpr std::size_t page = 4096;
    controls = slots + ranks * sizeof(rank_slot);
    tickets = controls + ranks * ranks * sizeof(ring_control);
    senders = tickets + ranks * ranks * tickets_per_pair * 4;
    sender_words = (ranks + 63) / 64;
    boards = (senders + ranks * sender_words * 8 + 127) / 128 * 128;
    cpu_sets = (boards + ranks * sizeof(copy_board) + page - 1) / page * page;
    rest_counts = (cpu_sets + ranks * sizeof(cpu_words) + page - 1) / page * page;
    rings = (rest_counts + ranks * cache_line + page - 1) / page * page;
    total = rings + ranks * ranks * ring_bytes;
  }
};

/// The ring size for `ranks` ranks when none is asked for: 256 KiB up to 64 ranks, smaller
/// beyond, so that the rings of all n^2 pairs would stay within 1 GiB, and never below 16 KiB.
/// A ring's pages are touched only once its sender writes to it (the receiver polls only its
/// senders' rings), so what a node holds is the rings of the pairs that talked: a tree or a
/// ring of n ranks touches O(n log n) of them, an alltoall all n^2. (Before, all n^2 rings were
/// polled, so they shrank to fit 32 MiB: 8 KiB from 64 ranks on, where a 64 KiB message went
/// through the ring in 2 KiB pieces.)
inline std::size_t default_ring_bytes(int ranks) {
  const auto pairs = static_cast<std::size_t>(ranks) * static_cast<std::size_t>(ranks);
  std::size_t bytes = std::size_t{256} << 10;
  while (bytes > (std::size_t{16} << 10) && bytes * pairs > (std::size_t{1} << 30)) bytes /= 2;
  return bytes;
}

/// A mapped segment. Movable, not copyable; unmaps on destruction.
class segment {
 public:
  segment() = default;
  segment(segment&& other) noexcept { *this = std::move(other); }
  segment& operator=(segment&& other) noexcept {
    if (this != &other) {
      release();
      base_ = std::exchange(other.base_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      fd_ = std::exchange(other.fd_, -1);
      ranks_ = other.ranks_;
      layout_ = other.layout_;
      name_ = std::move(other.name_);
    }
    return *this;
  }
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;
  ~segment() { release(); }

  /// Creates (rank 0) or joins the segment `name` and returns once all `ranks` ranks are in it.
  /// @throws commx::error errc::timeout naming the ranks that did not arrive by `when`;
  ///   errc::bootstrap_failed when the segment cannot be created or mapped.
  static segment join(const std::string& name, int rank, int ranks, std::size_t ring_bytes,
                      clock::time_point when) {
    const segment_layout layout(ranks, ring_bytes);
    std::vector<int> last_missing;  // who had not arrived in the last segment this rank left
    for (;;) {
      segment seg = rank == 0 ? create(name, ranks, layout)
                              : open(name, rank, ranks, layout, when, last_missing);
      bool everyone = false;
      try {
        everyone = seg.wait_for_everyone(rank, when);
      } catch (...) {
        if (rank == 0) ::shm_unlink(name.c_str());  // a job that never started leaves nothing
        throw;
      }
      if (everyone) {
        if (rank == 0) ::shm_unlink(name.c_str());  // everyone has it mapped: nobody needs the name
        return seg;
      }
      // A stale segment (or one whose creator gave up): let go of it and look again.
      last_missing = seg.missing();
      std::erase(last_missing, rank);  // this rank gave its slot back
    }
  }

  [[nodiscard]] segment_header& header() const { return *static_cast<segment_header*>(base_); }
  /// How many of the ranks may run on `rank`'s CPUs, and how many those are (once all arrived).
  [[nodiscard]] cpu_sharing cpu_sharing_of(int rank) const {
    return sharing_of(cpus_of(rank), ranks_,
                      [this](int r) -> const cpu_words& { return cpus_of(r); });
  }
  [[nodiscard]] cpu_words& cpus_of(int rank) const {
    return reinterpret_cast<cpu_words*>(at(layout_.cpu_sets))[rank];
  }
  /// Of the ranks whose CPU set is `rank`'s, how many are at rest (cpu_sharing.hpp): a line
  /// of its own, written as those ranks fall asleep and wake and when one leaves.
  [[nodiscard]] std::atomic<std::uint32_t>& rest_count(int rank) const {
    return *reinterpret_cast<std::atomic<std::uint32_t>*>(
        at(layout_.rest_counts) + static_cast<std::size_t>(rank) * cache_line);
  }
  [[nodiscard]] rank_slot& slot(int rank) const {
    return reinterpret_cast<rank_slot*>(at(layout_.slots))[rank];
  }
  [[nodiscard]] ring_buffer ring(int source, int destination) const {
    const std::size_t index = pair(source, destination);
    auto* control = reinterpret_cast<ring_control*>(at(layout_.controls)) + index;
    return {control, at(layout_.rings) + index * layout_.ring_bytes, layout_.ring_bytes};
  }
  /// Ticket words of the messages `source` offers `destination`.
  [[nodiscard]] std::atomic<std::uint32_t>* tickets(int source, int destination) const {
    return reinterpret_cast<std::atomic<std::uint32_t>*>(at(layout_.tickets)) +
           pair(source, destination) * tickets_per_pair;
  }
  /// The words whose bit s says that rank s writes to `destination`.
  [[nodiscard]] std::span<std::atomic<std::uint64_t>> senders_of(int destination) const {
    return {reinterpret_cast<std::atomic<std::uint64_t>*>(at(layout_.senders)) +
                static_cast<std::size_t>(destination) * layout_.sender_words,
            layout_.sender_words};
  }
  /// The large message `rank` copies now, for its sender to share (shared_copy.hpp).
  [[nodiscard]] copy_board& board(int rank) const {
    return reinterpret_cast<copy_board*>(at(layout_.boards))[rank];
  }
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  std::byte* at(std::size_t offset) const { return static_cast<std::byte*>(base_) + offset; }
  std::size_t pair(int source, int destination) const {
    return static_cast<std::size_t>(source) * layout_.ranks + static_cast<std::size_t>(destination);
  }

  [[noreturn]] static void fail(const std::string& name, int rank, const std::string& what) {
    throw error(errc::bootstrap_failed, fmt::format("shm: rank {}: segment {}: {}: {}", rank, name,
                                                    what, std::strerror(errno)));
  }

  static segment create(const std::string& name, int ranks, const segment_layout& layout) {
    // Whatever has this name now is left from an earlier job (only rank 0 creates): replace it.
    ::shm_unlink(name.c_str());
    segment seg;
    seg.name_ = name;
    seg.ranks_ = ranks;
    seg.layout_ = layout;
    seg.fd_ = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (seg.fd_ < 0) fail(name, 0, "cannot create it");
    if (::ftruncate(seg.fd_, static_cast<off_t>(layout.total)) != 0) {
      ::shm_unlink(name.c_str());
      fail(name, 0, fmt::format("cannot size it to {} bytes", layout.total));
    }
    seg.map(0);
    // The memory is zeroed: construct the header and the slots in place, then fill in the
    // header. The words of every pair (ring controls, tickets) and the senders' bits start as
    // zero, which the kernel's fresh pages already are: writing them here would make rank 0
    // touch 128 bytes per ordered pair (128 MiB at 1,024 ranks), the pages of pairs that never
    // talk included. Each is first touched by the pair that uses it.
    auto* header = new (seg.base_) segment_header();
    for (std::size_t r = 0; r < layout.ranks; ++r) new (&seg.slot(static_cast<int>(r))) rank_slot();
    header->magic = segment_magic;
    header->version = segment_version;
    header->ranks = ranks;
    header->ring_bytes = layout.ring_bytes;
    header->total_bytes = layout.total;
    header->creator_pid = ::getpid();
    header->creator_start = process_start_time(::getpid());
    seg.slot(0).pid.store(::getpid(), std::memory_order_relaxed);
    seg.slot(0).state.store(presence::present, std::memory_order_relaxed);
    publish_probe(seg.slot(0), seg.cpus_of(0));
    header->arrived.store(1, std::memory_order_relaxed);
    header->ready.store(1, std::memory_order_release);
    futex_wake_all(header->ready);
    return seg;
  }

  static segment open(const std::string& name, int rank, int ranks, const segment_layout& layout,
                      clock::time_point when, const std::vector<int>& last_missing) {
    auto pause = std::chrono::microseconds(200);
    for (;;) {
      if (clock::now() >= when && !last_missing.empty()) {
        // This rank was in the segment, and rank 0 ended (or gave up) waiting for these.
        throw error(errc::timeout,
                    fmt::format("shm: rank {}: start-up: rank{} {} never arrived in segment {}; "
                                "rank 0 gave up waiting",
                                rank, last_missing.size() == 1 ? "" : "s",
                                fmt::join(last_missing, ", "), name));
      }
      if (clock::now() >= when) {
        throw error(errc::timeout,
                    fmt::format("shm: rank {}: start-up: rank 0 did not create segment {} for "
                                "{} ranks in time (rank 0 never arrived, or a stale segment "
                                "is in the way)",
                                rank, name, ranks));
      }
      segment seg;
      seg.name_ = name;
      seg.ranks_ = ranks;
      seg.layout_ = layout;
      seg.fd_ = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
      if (seg.fd_ >= 0 && seg.usable(rank, layout, when)) return seg;
      // Not there yet, still being built, or stale: rank 0 (re)creates it soon. Back off.
      seg.release();
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(10'000));
    }
  }

  // Joins the segment just opened if it is this job's: sized, initialised, its creator alive,
  // still the one the name points to, and this rank's slot free.
  bool usable(int rank, const segment_layout& layout, clock::time_point when) {
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || st.st_size != static_cast<off_t>(layout.total)) return false;
    map(rank);
    segment_header& h = header();
    while (h.ready.load(std::memory_order_acquire) == 0) {
      if (clock::now() >= when || !process_exists(h.creator_pid, h.creator_start)) return false;
      futex_wait(h.ready, 0, std::chrono::milliseconds(5));
    }
    if (h.magic != segment_magic || h.version != segment_version || h.ranks != ranks_ ||
        h.ring_bytes != layout.ring_bytes || h.total_bytes != layout.total ||
        !process_exists(h.creator_pid, h.creator_start) || !is_named_segment()) {
      return false;
    }
    std::int32_t free = 0;
    if (!slot(rank).pid.compare_exchange_strong(free, ::getpid(), std::memory_order_acq_rel)) {
      return false;  // taken: an earlier job's rank
    }
    slot(rank).state.store(presence::present, std::memory_order_release);
    publish_probe(slot(rank), cpus_of(rank));
    // Only the last arrival wakes the waiters: a wake per arrival woke every rank already in,
    // each to look again whether its segment went stale (a handful of system calls), N^2/2
    // wake-ups in all: 1,024 ranks took 137 s to start on 2 cores, past the 60 s deadline.
    if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 >= static_cast<std::uint32_t>(ranks_))
      futex_wake_all(h.arrived);
    return true;
  }

  // Whether the name points to the segment this rank mapped; with `or_missing`, a name that
  // is gone counts as pointing to it (rank 0 removes it once everyone arrived, or when it gives
  // up waiting: neither makes this segment stale).
  bool is_named_segment(bool or_missing = false) const {
    const int fd = ::shm_open(name_.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return or_missing && errno == ENOENT;
    struct stat named {};
    struct stat mine {};
    const bool same = ::fstat(fd, &named) == 0 && ::fstat(fd_, &mine) == 0 &&
                      named.st_ino == mine.st_ino && named.st_dev == mine.st_dev;
    ::close(fd);
    return same;
  }

  // The ranks that have not claimed their slot.
  std::vector<int> missing() const {
    std::vector<int> absent;
    for (int r = 0; r < ranks_; ++r) {
      if (slot(r).pid.load(std::memory_order_acquire) == 0) absent.push_back(r);
    }
    return absent;
  }

  // True once all ranks have arrived; false if this segment turned out stale.
  bool wait_for_everyone(int rank, clock::time_point when) {
    segment_header& h = header();
    const auto everyone = static_cast<std::uint32_t>(ranks_);
    // How long a waiter sleeps between its looks for a stale segment: from 20 ms, doubling to
    // half a second, so that N waiters look some 2N times a second once the job is slow to
    // arrive, not 50N (at 1,024 ranks on 2 cores, 50N looks took the cores from the ranks
    // still starting).
    std::chrono::milliseconds between_looks{20};
    for (;;) {
      const std::uint32_t arrived = h.arrived.load(std::memory_order_acquire);
      if (arrived >= everyone) return true;
      // A newer segment under the name, or a creator that is gone: this one is stale.
      if (rank != 0 && (!is_named_segment(/*or_missing=*/true) ||
                        !process_exists(h.creator_pid, h.creator_start))) {
        if (h.arrived.load(std::memory_order_acquire) >= everyone) return true;
        // Give the slot back: should this judgement have been wrong, the rank can rejoin.
        slot(rank).state.store(presence::absent, std::memory_order_release);
        std::int32_t mine = ::getpid();
        slot(rank).pid.compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
        h.arrived.fetch_sub(1, std::memory_order_acq_rel);
        return false;
      }
      if (clock::now() >= when) {
        const std::vector<int> absent = missing();
        throw error(errc::timeout,
                    fmt::format("shm: rank {}: start-up: rank{} {} never arrived in segment {} "
                                "({} of {} ranks did)",
                                rank, absent.size() == 1 ? "" : "s", fmt::join(absent, ", "), name_,
                                arrived, ranks_));
      }
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(when - clock::now());
      futex_wait(h.arrived, arrived, std::min<std::chrono::nanoseconds>(left, between_looks));
      between_looks = std::min(between_looks * 2, std::chrono::milliseconds(500));
    }
  }

  void map(int rank) {
    void* base = ::mmap(nullptr, layout_.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (base == MAP_FAILED) fail(name_, rank, fmt::format("cannot map {} bytes", layout_.total));
    base_ = base;
    bytes_ = layout_.total;
  }

  void release() {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    if (fd_ >= 0) ::close(fd_);
    base_ = nullptr;
    fd_ = -1;
  }

  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  int fd_ = -1;
  int ranks_ = 0;
  segment_layout layout_{1, 4096};
  std::string name_;
};

}  // namespace commx::detail::shm
