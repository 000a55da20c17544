// SPDX-License-Identifier: MIT
//
// Test support for runs over wanemu, the wide-area link emulator (tools/wanemu): start it with a
// given link, wait for its ready line, create sockets inside its namespaces, stop it and read its
// counters. Everything is bounded: the ready wait, the stop, and a test process that dies takes
// wanemu with it (PR_SET_PDEATHSIG); the namespaces are removed even when wanemu could not do it.
//
// Needs root and /dev/net/tun: emulator_unavailable() says why not, and a test binary then exits
// with kSkipReturnCode (CTest's SKIP_RETURN_CODE) so that CTest reports the test as skipped.

#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/beside_this_program.hpp"
#include "support/netns.hpp"

#ifndef WANEMU_PATH
#error "WANEMU_PATH must be defined to the path of the wanemu binary, relative to the test program"
#endif

namespace commx::test::wan {

using commx::test::kSkipReturnCode;
using commx::test::netns_scope;
using commx::test::run_quietly;

/// Why the emulator cannot run here (not root, no /dev/net/tun, no `ip`), or nullopt.
inline std::optional<std::string> emulator_unavailable() {
  if (::geteuid() != 0)
    return "not root: wanemu needs CAP_NET_ADMIN and CAP_SYS_ADMIN to create namespaces";
  if (::access("/dev/net/tun", R_OK | W_OK) != 0) return "/dev/net/tun is missing";
  bool have_ip = false;
  for (const char* dir : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(dir, X_OK) == 0) have_ip = true;
  if (!have_ip) return "the ip command (iproute2) is missing";
  return std::nullopt;
}

/// The link wanemu emulates (both directions) and where.
struct link_config {
  double delay_ms = 10;
  double rate_mbit = 100;
  std::optional<std::uint64_t> queue_bytes{};
  double loss = 0;
  std::uint64_t seed = 1;
  std::vector<std::string> extra_args{};
};

/// The counters wanemu prints for one direction when it stops ("a->b" or "b->a").
using direction_stats = std::map<std::string, std::uint64_t>;

/// A running wanemu between two namespaces of its own (names unique to this process).
class emulator {
 public:
  static constexpr std::string_view addr_a = "10.77.0.1";
  static constexpr std::string_view addr_b = "10.77.0.2";

  explicit emulator(const link_config& link) {
    static int serial = 0;
    const std::string prefix = fmt::format("commx-wt{}-{}", ::getpid(), serial++);
    ns_a_ = prefix + "a";
    ns_b_ = prefix + "b";
    std::vector<std::string> args{commx::test::beside_this_program(WANEMU_PATH),
                                  "--ns-a",
                                  ns_a_,
                                  "--ns-b",
                                  ns_b_,
                                  "--addr-a",
                                  std::string(addr_a) + "/24",
                                  "--addr-b",
                                  std::string(addr_b) + "/24",
                                  "--delay-ms",
                                  fmt::format("{}", link.delay_ms),
                                  "--rate-mbit",
                                  fmt::format("{}", link.rate_mbit),
                                  "--loss",
                                  fmt::format("{}", link.loss),
                                  "--seed",
                                  std::to_string(link.seed)};
    if (link.queue_bytes) {
      args.emplace_back("--queue-bytes");
      args.push_back(std::to_string(*link.queue_bytes));
    }
    args.insert(args.end(), link.extra_args.begin(), link.extra_args.end());
    start(args);
    // Bounded: wanemu sets up in well under a second; 20 s covers a loaded machine.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (output_.find("wanemu: ready") == std::string::npos) {
      if (!read_some(deadline)) {
        const std::string seen = stop();
        throw std::runtime_error(fmt::format(
            "wanemu did not become ready (exit status {}); its output:\n{}", status_, seen));
      }
    }
  }
  emulator(const emulator&) = delete;
  emulator& operator=(const emulator&) = delete;
  ~emulator() { stop(); }

  [[nodiscard]] const std::string& ns_a() const { return ns_a_; }
  [[nodiscard]] const std::string& ns_b() const { return ns_b_; }

  /// Stops wanemu (SIGTERM; SIGKILL after 10 s), removes anything it left and returns its whole
  /// stdout. Idempotent.
  std::string stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (read_some(deadline)) {  // until end of output: wanemu is exiting
      }
      if (!exited_by(deadline)) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status_, 0);
      }
      pid_ = -1;
      ::close(out_);
      out_ = -1;
      for (const std::string& ns : {ns_a_, ns_b_}) {
        struct stat st {};
        if (::stat(("/run/netns/" + ns).c_str(), &st) == 0) run_quietly({"ip", "netns", "del", ns});
      }
    }
    return output_;
  }

  /// wanemu's exit status after stop() (as waitpid's status).
  [[nodiscard]] int exit_status() const { return status_; }

  /// The counters of one direction ("a->b" or "b->a") from wanemu's output; after stop().
  [[nodiscard]] direction_stats stats(std::string_view direction) const {
    std::istringstream lines(output_);
    const std::string prefix = fmt::format("wanemu: stats {} ", direction);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(prefix, 0) != 0) continue;
      direction_stats stats;
      std::istringstream fields(line.substr(prefix.size()));
      for (std::string field; fields >> field;) {
        const auto eq = field.find('=');
        if (eq != std::string::npos) stats[field.substr(0, eq)] = std::stoull(field.substr(eq + 1));
      }
      return stats;
    }
    throw std::runtime_error(
        fmt::format("no stats for {} in wanemu's output:\n{}", direction, output_));
  }

 private:
  void start(const std::vector<std::string>& args) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {  // async-signal-safe calls only
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(pipe_fds[1], 1);
      const int null = ::open("/dev/null", O_RDONLY);
      if (null >= 0) ::dup2(null, 0);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(pipe_fds[1]);
    pid_ = pid;
    out_ = pipe_fds[0];
  }

  /// Reaps wanemu if it exits by `deadline` (a pidfd: no polling loop with sleeps).
  bool exited_by(std::chrono::steady_clock::time_point deadline) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{pidfd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
      ::close(pidfd);
    }
    return ::waitpid(pid_, &status_, WNOHANG) == pid_;
  }

  /// Appends what wanemu wrote, waiting until `deadline`; false on end of output or deadline.
  bool read_some(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return false;
      char buffer[4096];
      const ssize_t n = ::read(out_, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      output_.append(buffer, static_cast<std::size_t>(n));
      return true;
    }
  }

  std::string ns_a_, ns_b_;
  pid_t pid_ = -1;
  int out_ = -1;
  int status_ = 0;
  std::string output_;
};

}  // namespace commx::test::wan
