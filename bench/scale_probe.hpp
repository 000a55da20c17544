// SPDX-License-Identifier: MIT
#pragma once
// What a rank of a scale run reads about itself from /proc (Linux), and how it lines up with
// the others before a timed phase: shared by scale_bench.cpp and mpi_scale_bench.cpp, so both
// stacks are measured alike.

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace scale_probe {

/// Seconds since this process started (its start time in /proc/self/stat, against the
/// boot-time clock the kernel counts it in).
inline double seconds_since_process_start() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Field 22 (starttime) counts from the end of field 2, the command in parentheses.
  std::size_t at = text.rfind(')');
  for (int field = 2; field < 22 && at != std::string::npos; ++field) at = text.find(' ', at + 1);
  if (at == std::string::npos) return -1.0;
  const double ticks = std::stod(text.substr(at + 1));
  timespec now{};
  clock_gettime(CLOCK_BOOTTIME, &now);
  return double(now.tv_sec) + double(now.tv_nsec) * 1e-9 - ticks / double(sysconf(_SC_CLK_TCK));
}

/// Brings every rank to the same moment before a timed phase: a dissemination barrier of
/// point-to-point exchanges, `exchange(to, from)` sending one token to `to` and taking one from
/// `from`, the same in every program. The job's own barrier is not used: a policy's barrier may
/// release ranks far apart (a flat barrier's root releases them one after another, each woken
/// in its turn on an oversubscribed node), and that spread would be charged to the phase timed
/// after it (tuned's flat barrier on tcp at 16 ranks made its 8 B bcast 1.3x binomial's).
template <class Exchange>
void start_line(int rank, int size, Exchange&& exchange) {
  for (int distance = 1; distance < size; distance *= 2) {
    exchange((rank + distance) % size, (rank + size - distance) % size);
  }
}

/// Descriptors this process holds open.
inline int open_descriptors() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count - 1;  // the iterator's own
}

/// Resident set in MiB (/proc/self/statm's second field, in pages).
inline double resident_megabytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

}  // namespace scale_probe
