// SPDX-License-Identifier: MIT
//
// Test support for tests that build their own networks: network namespaces entered by a
// thread (netns_scope), commands run to their end with their chatter discarded (run_quietly),
// and the exit status CTest reports as skipped (kSkipReturnCode), for a machine where such a
// test cannot run (not root).

#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace commx::test {

/// CTest's SKIP_RETURN_CODE for the tests that cannot run here.
inline constexpr int kSkipReturnCode = 77;

/// Runs `args` (no shell) and returns its exit status; 128+signal if killed.
inline int run_quietly(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return 127;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// While it lives, the calling thread is in the named network namespace: sockets created then
/// belong to that namespace (and stay there when used from any thread later).
class netns_scope {
 public:
  explicit netns_scope(const std::string& ns) {
    home_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    const int target = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    const bool entered = home_ >= 0 && target >= 0 && ::setns(target, CLONE_NEWNET) == 0;
    const int error = errno;
    if (target >= 0) ::close(target);
    if (!entered) {
      if (home_ >= 0) ::close(home_);
      throw std::runtime_error(
          fmt::format("cannot enter network namespace '{}': {}", ns, std::strerror(error)));
    }
  }
  netns_scope(const netns_scope&) = delete;
  netns_scope& operator=(const netns_scope&) = delete;
  ~netns_scope() {
    // Failing to return would leave the thread in a namespace that is about to go away.
    if (::setns(home_, CLONE_NEWNET) != 0) std::abort();
    ::close(home_);
  }

 private:
  int home_ = -1;
};

/// errno of a TCP connect from namespace `ns` to `address`:7 (0 if it connected): whether the
/// namespace has a route there (ENETUNREACH when it has none).
inline int connect_errno(const std::string& ns, const std::string& address) {
  netns_scope inside(ns);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(7);
  ::inet_pton(AF_INET, address.c_str(), &to.sin_addr);
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  const int error = rc == 0 ? 0 : errno;
  ::close(fd);
  return error;
}

}  // namespace commx::test
