// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Real processes for the TCP tests: start a program with extra environment variables and pipes
/// for stdin and (merged) stdout/stderr, read its output line by line with a deadline, signal
/// it, and collect its exit status. Every wait is bounded; a process still running when its
/// `child` is destroyed is killed and reaped, so no test leaves processes behind.

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

extern char** environ;

namespace commx::test {

class child {
 public:
  using clock = std::chrono::steady_clock;

  /// Starts `argv` with the current environment minus every COMMX_* and launcher variable,
  /// plus `env` ("NAME=value").
  child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe failed");
    std::vector<std::string> environment;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view v = *e;
      if (v.starts_with("COMMX_") || v.starts_with("OMPI_") || v.starts_with("SLURM_") ||
          v.starts_with("PMI_"))
        continue;
      environment.emplace_back(v);
    }
    environment.insert(environment.end(), env.begin(), env.end());
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : environment) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);  // its own group: signals reach whatever it starts (mpirun's ranks)
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(out[1], STDERR_FILENO);
      ::execvpe(args[0], args.data(), envp.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    in_ = in[1];
    out_ = out[0];
  }

  child(const child&) = delete;
  child& operator=(const child&) = delete;

  ~child() {
    if (in_ >= 0) ::close(in_);
    if (running()) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (out_ >= 0) ::close(out_);
  }

  [[nodiscard]] pid_t pid() const { return pid_; }

  /// The next line of output, or nullopt at end of output or at `until`.
  std::optional<std::string> read_line(clock::time_point until) {
    for (;;) {
      const auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        transcript_ += line + "\n";
        return line;
      }
      if (out_ < 0) return std::nullopt;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
      if (ready < 0 && errno != EINTR) return std::nullopt;
      if (ready <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(out_, chunk, sizeof chunk);
      if (n <= 0) {
        ::close(out_);
        out_ = -1;
        if (!buffer_.empty()) buffer_ += '\n';
        continue;
      }
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  /// Reads lines until one contains `text`; false at end of output or at `until`.
  bool expect(std::string_view text, clock::time_point until) {
    while (auto line = read_line(until)) {
      if (line->find(text) != std::string::npos) return true;
    }
    return false;
  }

  void write_line(const std::string& line) {
    const std::string data = line + "\n";
    if (::write(in_, data.data(), data.size()) != static_cast<ssize_t>(data.size()))
      throw std::runtime_error("cannot write to a child's stdin");
  }

  void signal(int sig) { ::kill(pid_, sig); }

  /// Reads the rest of the output and returns the exit status (128+signal when killed), or
  /// nullopt if the process has not ended by `until` (it is then killed).
  std::optional<int> finish(clock::time_point until) {
    while (read_line(until)) {
    }
    for (;;) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (clock::now() >= until) return std::nullopt;
      // The output is closed but the process has not been reaped yet: it is exiting now.
      pollfd none{-1, 0, 0};
      ::poll(&none, 0, 10);
    }
  }

  /// Everything read so far.
  [[nodiscard]] const std::string& transcript() const { return transcript_; }

 private:
  [[nodiscard]] bool running() const { return pid_ > 0; }

  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string buffer_;
  std::string transcript_;
};

/// A loopback port that was free a moment ago (for a job's root or a relay).
inline std::uint16_t free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool bound = ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                     ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(s);
  if (!bound) throw std::runtime_error("no free loopback port");
  return ntohs(addr.sin_port);
}

}  // namespace commx::test
