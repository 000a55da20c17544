// SPDX-License-Identifier: MIT
// The kernel's own cost of what bench_pingpong_tcp's bandwidth-onebuf run moves, with no library
// in between: one loopback TCP connection, a child process writing messages of BYTES from one
// buffer (blocking write() until each is out), the parent reading each whole message into one
// buffer of BYTES (blocking recv() until it is in), for SECONDS. Prints the received MiB/s.
// scripts/tcp_bench.py runs it next to commx and iperf3, so the gap between commx and iperf3
// can be split into what the library costs and what moving BYTES-sized messages costs.
//   ./bench_tcp_stream [BYTES (4194304)] [SECONDS (3)]

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using seconds = std::chrono::duration<double>;

[[noreturn]] void fail(const char* what) {
  std::perror(what);
  std::exit(1);
}

void send_for(int socket, std::size_t bytes, seconds duration) {
  const std::vector<char> message(bytes, 'x');
  const auto start = std::chrono::steady_clock::now();
  do {
    for (std::size_t done = 0; done < bytes;) {
      const ssize_t n = ::write(socket, message.data() + done, bytes - done);
      if (n <= 0) fail("write");
      done += static_cast<std::size_t>(n);
    }
  } while (std::chrono::steady_clock::now() - start < duration);
}

double receive_all(int socket, std::size_t bytes) {
  std::vector<char> message(bytes);
  std::size_t total = 0;
  const auto start = std::chrono::steady_clock::now();
  for (bool more = true; more;) {
    for (std::size_t done = 0; done < bytes;) {
      const ssize_t n = ::recv(socket, message.data() + done, bytes - done, 0);
      if (n < 0) fail("recv");
      if (n == 0) {
        more = false;
        break;
      }
      done += static_cast<std::size_t>(n);
      total += static_cast<std::size_t>(n);
    }
  }
  const seconds elapsed = std::chrono::steady_clock::now() - start;
  return static_cast<double>(total) / elapsed.count() / (1024.0 * 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? std::stoull(argv[1]) : std::size_t{4} << 20;
  const seconds duration(argc > 2 ? std::stod(argv[2]) : 3.0);
  if (bytes == 0) {
    std::fprintf(stderr, "bench_tcp_stream: BYTES must be positive\n");
    return 1;
  }
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) fail("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail("bind");
  if (::listen(listener, 1) != 0) fail("listen");
  if (::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    fail("getsockname");
  }
  const pid_t child = ::fork();
  if (child < 0) fail("fork");
  if (child == 0) {
    const int socket = ::socket(AF_INET, SOCK_STREAM, 0);
    if (socket < 0) fail("socket");
    if (::connect(socket, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      fail("connect");
    }
    send_for(socket, bytes, duration);
    ::close(socket);
    std::_Exit(0);
  }
  const int socket = ::accept(listener, nullptr, nullptr);
  if (socket < 0) fail("accept");
  const double rate = receive_all(socket, bytes);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "bench_tcp_stream: the sending process failed\n");
    return 1;
  }
  std::printf("%zu bytes per message, %.0f MiB/s\n", bytes, rate);
  return 0;
}
