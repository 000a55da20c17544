// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Sleeping on a 32-bit word in shared memory until another process changes it. The futex is
/// shared (no FUTEX_PRIVATE_FLAG): the word lives in a segment that several processes map, and
/// the kernel keys the wait queue on the backing page, not on this process's address.

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace commx::detail::shm {

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

/// Sleeps while `word == expected`, at most `timeout` (spurious returns are fine: callers loop).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                       std::chrono::nanoseconds timeout) {
  if (timeout <= std::chrono::nanoseconds::zero()) return;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  timespec relative{};
  relative.tv_sec = static_cast<time_t>(seconds.count());
  relative.tv_nsec = static_cast<long>((timeout - seconds).count());
  // EAGAIN (the word already changed), EINTR and ETIMEDOUT all mean "look again".
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected,
                  &relative, nullptr, 0);
}

/// Wakes every process sleeping on `word`.
inline void futex_wake_all(std::atomic<std::uint32_t>& word) {
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
                  nullptr, 0);
}

}  // namespace commx::detail::shm
