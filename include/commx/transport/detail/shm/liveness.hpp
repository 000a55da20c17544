// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Whether a peer's process still exists, without holding anything per peer: kill(pid, 0)
/// says whether the pid names a process, and every few looks the process's own record
/// (/proc/<pid>/stat) says whether it is a zombie, or a later process that reused the pid: its
/// start time is not the one the peer published in its slot. So a look costs one system call
/// and no descriptor (a pidfd per peer was exact at once, but a rank of a 256-rank job held 255
/// of them); a zombie or a reused pid is seen at the next exact look: the eighth look at a
/// peer, or an exact one asked for.
///
/// Why not a heartbeat: it costs every rank a write per period forever and still needs a
/// timeout to decide; why not a robust mutex: it tells only the next locker, and the fast path
/// takes no lock. A look costs nothing until someone asks, and a rank asks only about the
/// peers it waits on and a few others in turn (endpoint_departures.hpp).

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace commx::detail::shm {

/// When process `pid` started, in clock ticks since boot, and whether it has ended (a zombie
/// or being reaped): its /proc/<pid>/stat. Nothing when there is no such process.
struct process_record {
  std::uint64_t start_time = 0;
  bool ended = false;
};
inline std::optional<process_record> read_process_record(pid_t pid);

/// A process that a SIGKILL-proof check can ask about: its pid, and the start time that tells
/// it from a later process with the same pid (0: unknown, only zombies are told apart).
class process_watch {
 public:
  process_watch() = default;
  process_watch(pid_t pid, std::uint64_t start_time) : pid_(pid), start_time_(start_time) {}

  [[nodiscard]] pid_t pid() const { return pid_; }

  /// True once the process has ended (remembered: a gone process never comes back). `exact`:
  /// read its record now rather than at every `exact_every`-th look.
  bool gone(bool exact = false) {
    if (gone_ || pid_ <= 0) return gone_;
    if (::kill(pid_, 0) != 0 && errno == ESRCH) return gone_ = true;
    if (exact || ++looks_ % exact_every == 0) {
      const std::optional<process_record> r = read_process_record(pid_);
      gone_ = r && (r->ended || (start_time_ != 0 && r->start_time != start_time_));
    }
    return gone_;
  }

 private:
  static constexpr unsigned exact_every = 8;
  pid_t pid_ = 0;
  std::uint64_t start_time_ = 0;
  unsigned looks_ = 0;
  bool gone_ = false;
};

inline std::optional<process_record> read_process_record(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[1024];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  text[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
  const char* field = std::strrchr(text, ')');
  if (field == nullptr || field[1] == '\0') return std::nullopt;
  process_record r;
  r.ended = field[2] == 'Z' || field[2] == 'X' || field[2] == 'x';  // field 3, the state
  for (int skipped = 0; skipped < 20 && field != nullptr; ++skipped)
    field = std::strchr(field + 1, ' ');
  if (field != nullptr) r.start_time = std::strtoull(field + 1, nullptr, 10);
  return r;
}

/// When process `pid` started, in clock ticks since boot (/proc/<pid>/stat, field 22); 0 if
/// unknown. With the pid it names one process for the machine's uptime: pids are reused,
/// (pid, start time) pairs are not.
inline std::uint64_t process_start_time(pid_t pid) {
  const std::optional<process_record> r = read_process_record(pid);
  return r ? r->start_time : 0;
}

/// True when the process that was `pid`, started at `start_time` (0: any), still exists (it may
/// be a zombie); for start-up checks of a segment's creator, where no pidfd is held yet.
inline bool process_exists(pid_t pid, std::uint64_t start_time = 0) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  return start_time == 0 || process_start_time(pid) == start_time;
}

/// Ends the process `watch` names with SIGKILL and waits up to `bound` until it has: how a
/// rank fences a peer stalled while it may still write into this rank's memory (a shared copy's
/// block). The signal goes through a pidfd opened before the last check that the process is
/// the peer's, so it cannot reach a later process that reused the pid. True once it is gone.
inline bool kill_and_wait(process_watch& watch, std::chrono::milliseconds bound) {
  if (watch.gone(/*exact=*/true)) return true;
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, watch.pid(), 0));
  if (pidfd < 0) return watch.gone(/*exact=*/true);
  if (!watch.gone(/*exact=*/true)) {
    (void)::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
    // A pidfd turns readable when its process ends, a zombie or not (not only a child's).
    const auto until = std::chrono::steady_clock::now() + bound;
    for (auto left = bound; left.count() > 0;
         left = std::chrono::duration_cast<std::chrono::milliseconds>(
             until - std::chrono::steady_clock::now())) {
      pollfd ended{pidfd, POLLIN, 0};
      const int ready = ::poll(&ended, 1, static_cast<int>(left.count()));
      if (ready > 0 || (ready < 0 && errno != EINTR)) break;
    }
  }
  ::close(pidfd);
  return watch.gone(/*exact=*/true);
}

}  // namespace commx::detail::shm
