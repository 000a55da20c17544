// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Whether a peer's process still exists. A pidfd (Linux 5.3+) becomes readable when the
/// process ends, zombie or not, and it names that very process, never a later one that reused
/// the pid; all peers are checked with one poll() of timeout zero. Where pidfd_open is missing,
/// kill(pid, 0) is the fallback (it cannot tell a zombie from a live process, but a launcher
/// reaps its ranks at once).
///
/// Why not a heartbeat: it costs every rank a write per period forever and still needs a
/// timeout to decide; why not a robust mutex: it tells only the next locker, and the fast path
/// takes no lock. The pidfd answer is exact and costs nothing until someone asks.

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace commx::detail::shm {

/// A process that a SIGKILL-proof check can ask about. Holds a pidfd when the kernel has them.
class process_watch {
 public:
  process_watch() = default;
  explicit process_watch(pid_t pid) : pid_(pid) {
#ifdef SYS_pidfd_open
    fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd_ < 0 && errno == ESRCH) gone_ = true;
#endif
  }
  process_watch(process_watch&& other) noexcept
      : pid_(other.pid_), fd_(std::exchange(other.fd_, -1)), gone_(other.gone_) {}
  process_watch& operator=(process_watch&& other) noexcept {
    if (this != &other) {
      reset();
      pid_ = other.pid_;
      fd_ = std::exchange(other.fd_, -1);
      gone_ = other.gone_;
    }
    return *this;
  }
  process_watch(const process_watch&) = delete;
  process_watch& operator=(const process_watch&) = delete;
  ~process_watch() { reset(); }

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] int fd() const { return fd_; }

  /// True once the process has ended (remembered: a gone process never comes back).
  bool gone() {
    if (gone_ || pid_ <= 0) return gone_;
    if (fd_ >= 0) {
      pollfd p{fd_, POLLIN, 0};
      gone_ = ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    } else {
      gone_ = ::kill(pid_, 0) != 0 && errno == ESRCH;
    }
    return gone_;
  }

 private:
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  pid_t pid_ = 0;
  int fd_ = -1;
  bool gone_ = false;
};

/// When process `pid` started, in clock ticks since boot (/proc/<pid>/stat, field 22); 0 if
/// unknown. With the pid it names one process for the machine's uptime: pids are reused,
/// (pid, start time) pairs are not.
inline std::uint64_t process_start_time(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[1024];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
  const char* field = std::strrchr(text, ')');
  if (field == nullptr) return 0;
  for (int skipped = 0; skipped < 20 && field != nullptr; ++skipped)
    field = std::strchr(field + 1, ' ');
  return field == nullptr ? 0 : std::strtoull(field + 1, nullptr, 10);
}

/// True when the process that was `pid`, started at `start_time` (0: any), still exists (it may
/// be a zombie); for start-up checks of a segment's creator, where no pidfd is held yet.
inline bool process_exists(pid_t pid, std::uint64_t start_time = 0) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  return start_time == 0 || process_start_time(pid) == start_time;
}

}  // namespace commx::detail::shm
