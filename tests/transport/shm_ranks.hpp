// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Real processes for the shm transport's own tests: fork ranks of a job with a fresh token,
/// let each run a function and report back through a pipe, and wait for all of them with a
/// bound (pidfds in one poll(), no sleeping). Meant for a single-threaded test process.

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commx/transport/detail/shm/segment_name.hpp"

namespace commx::test::shm_ranks {

/// A token no other job has: this process, a counter, the clock.
inline std::string fresh_token() {
  static int count = 0;
  return fmt::format("shm-test-{}-{}-{}", ::getpid(), ++count,
                     std::chrono::steady_clock::now().time_since_epoch().count());
}

/// The segment name a job with `token` uses (what commxrun removes, too).
inline std::string segment_for(const std::string& token) {
  return commx::detail::shm::segment_name("commx:" + token);
}

inline bool segment_exists(const std::string& name) {
  return ::access(("/dev/shm" + name).c_str(), F_OK) == 0;
}

/// One forked rank: its pid, a pidfd to wait on, and the read end of its report pipe.
struct rank_process {
  pid_t pid = -1;
  int pidfd = -1;
  int report = -1;
  int status = 0;
  bool ended = false;
  std::string text;  // what it reported: empty means it passed
};

/// Everything about a job's environment a forked rank sets before it runs.
struct job_spec {
  std::string token;
  int size = 1;
  std::vector<std::pair<std::string, std::string>> env;  // extra variables
};

/// Forks rank `rank` of `job`; it runs `body` (which returns "" on success or says what went
/// wrong), writes that to its pipe and exits 0 when it passed, 1 when not.
inline rank_process start_rank(const job_spec& job, int rank,
                               const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    for (const char* v : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid", "PMI_RANK", "PMI_SIZE",
                          "PMIX_NAMESPACE", "PMI_KVSNAME"}) {
      ::unsetenv(v);
    }
    ::setenv("COMMX_RANK", std::to_string(rank).c_str(), 1);
    ::setenv("COMMX_SIZE", std::to_string(job.size).c_str(), 1);
    ::setenv("COMMX_TOKEN", job.token.c_str(), 1);
    for (const auto& [name, value] : job.env) ::setenv(name.c_str(), value.c_str(), 1);
    std::string report;
    try {
      report = body();
    } catch (const std::exception& e) {
      report = fmt::format("rank {} threw: {}", rank, e.what());
    }
    const char* p = report.data();
    std::size_t left = report.size();
    while (left > 0) {
      const ssize_t n = ::write(fds[1], p, left);
      if (n <= 0) break;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    ::_exit(report.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  rank_process r;
  r.pid = pid;
  r.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  r.report = fds[0];
  return r;
}

/// Waits until every rank has ended and read their reports; ranks still running at `limit`
/// are killed and reported as hanging.
inline void wait_all(std::vector<rank_process>& ranks, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<rank_process*> who;
    for (rank_process& r : ranks) {
      if (r.report >= 0) {
        fds.push_back({r.report, POLLIN, 0});
        who.push_back(&r);
      } else if (!r.ended) {
        fds.push_back({r.pidfd, POLLIN, 0});
        who.push_back(&r);
      }
    }
    if (fds.empty()) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      // Killed, then reaped here: the loop would otherwise never poll again, and spin.
      for (rank_process* r : who) {
        ::kill(r->pid, SIGKILL);
        r->text += " [hung: killed at the test's limit]";
        if (r->report >= 0) ::close(r->report);
        r->report = -1;
        ::waitpid(r->pid, &r->status, 0);
        ::close(r->pidfd);
        r->ended = true;
      }
      return;
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) {
      throw std::runtime_error("poll failed");
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      rank_process& r = *who[i];
      if (r.report >= 0) {
        std::array<char, 4096> buf{};
        const ssize_t n = ::read(r.report, buf.data(), buf.size());
        if (n > 0) {
          r.text.append(buf.data(), static_cast<std::size_t>(n));
        } else {
          ::close(r.report);
          r.report = -1;
        }
      } else {
        ::waitpid(r.pid, &r.status, 0);
        ::close(r.pidfd);
        r.ended = true;
      }
    }
  }
}

/// "rank i: <report>" for every rank that did not exit 0, or "" when all passed.
inline std::string failures(const std::vector<rank_process>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const rank_process& r = ranks[i];
    if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0 && r.text.empty()) continue;
    out += fmt::format("rank {} (status {:#x}): {}\n", i, r.status, r.text);
  }
  return out;
}

}  // namespace commx::test::shm_ranks
