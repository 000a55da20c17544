// SPDX-License-Identifier: MIT
//
// launcher_probe: the program commxrun_test starts under commxrun. It reads COMMX_RANK and
// COMMX_SIZE and does what its first argument says:
//
//   hello               print greetings, the environment, many lines written in pieces, a
//                       line to stderr and a last line without '\n'; exit 0
//   exit CODE           exit with CODE
//   args ARGS...        print each argument as "arg <rank> <text>"; exit 0
//   cpus                print "cpus <rank> <c1,c2,...>", the CPUs the rank may run on; exit 0
//   fail RANK CODE      rank RANK writes a line to stderr and exits CODE; the others block
//   kill RANK           rank RANK sends itself SIGKILL; the others block
//   block               print "ready <rank>", block forever
//   ignore-term FIFO    every rank ignores SIGTERM; ranks > 0 write one byte to FIFO and block,
//                       rank 0 reads size-1 bytes from FIFO (all others are then ignoring
//                       SIGTERM) and exits 1
//   kill-on-term FIFO   as ignore-term, but ranks > 0 answer SIGTERM with SIGKILL to themselves
//   grandchild FIFO     rank 0 forks a child that prints "grandchild <pid>", writes one byte to
//                       FIFO and blocks, rank 0 blocks; rank 1 reads that byte and exits 3;
//                       the others block
//
// Output goes through write(2) directly, so the pieces reach commxrun as separate writes.

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace {

void put(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::_Exit(90);
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

[[noreturn]] void block() {
  for (;;) ::pause();
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) {
    put(2, std::string("launcher_probe: ") + name + " is not set\n");
    std::exit(80);
  }
  return std::atoi(v);
}

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "<unset>";
}

int open_fifo(const char* path, int flags) {
  for (;;) {
    const int fd = ::open(path, flags);
    if (fd >= 0) return fd;
    if (errno != EINTR) {
      put(2,
          std::string("launcher_probe: cannot open ") + path + ": " + std::strerror(errno) + "\n");
      std::exit(81);
    }
  }
}

void die_by_sigkill(int) { ::raise(SIGKILL); }

// SIG_IGN, or die_by_sigkill: a rank that a signal commxrun did not send ends while it stops.
void on_sigterm(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
}

int hello(int rank, int size) {
  const std::string r = std::to_string(rank);
  put(1, "hello from " + r + " of " + std::to_string(size) + "\n");
  put(1, "env " + r + " root=" + env_str("COMMX_ROOT") + " token=" + env_str("COMMX_TOKEN") + "\n");
  char c = 0;
  ssize_t n;
  while ((n = ::read(0, &c, 1)) < 0 && errno == EINTR) {
  }
  put(1, "stdin " + r + (n == 0 ? " eof\n" : " not-eof\n"));
  put(2, "err from " + r + "\n");
  for (int k = 0; k < 200; ++k) {
    put(1, "line " + r);
    // Appended, not " " + to_string(k): g++ 12 -O3 misreads that as an overlapping memcpy
    // (-Wrestrict, GCC bug 105329) and a release build fails.
    std::string number(" ");
    number += std::to_string(k);
    number += ' ';
    put(1, number);
    put(1, std::string(static_cast<std::size_t>(k % 37 + 1), 'x') + "\n");
  }
  put(1, "par");
  put(1, "tial " + r + " done\n");
  put(1, "tail " + r);  // no newline: commxrun must still pass it on
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = env_int("COMMX_RANK");
  const int size = env_int("COMMX_SIZE");
  const std::string_view mode = argc > 1 ? argv[1] : "";
  auto arg = [&](int i) -> const char* {
    if (i >= argc) {
      put(2, "launcher_probe: missing argument\n");
      std::exit(82);
    }
    return argv[i];
  };

  if (mode == "hello") return hello(rank, size);
  if (mode == "exit") return std::atoi(arg(2));
  if (mode == "node") {
    put(1, "node " + std::to_string(rank) + " " + env_str("COMMX_NODE") + " " +
               env_str("COMMX_SITE") + "\n");
    return 0;
  }
  if (mode == "cpus") {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 81;
    std::string list;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &allowed)) continue;
      if (!list.empty()) list += ',';
      list += std::to_string(c);  // appended: g++ 12 -O3 misreads a + b here as overlapping
    }
    put(1, "cpus " + std::to_string(rank) + " " + list + "\n");
    return 0;
  }
  if (mode == "args") {
    for (int i = 2; i < argc; ++i) put(1, "arg " + std::to_string(rank) + " " + argv[i] + "\n");
    return 0;
  }
  if (mode == "fail") {
    const int who = std::atoi(arg(2));
    const int code = std::atoi(arg(3));
    if (rank == who) {
      put(2, "rank " + std::to_string(rank) + " failing with code " + std::to_string(code) + "\n");
      return code;
    }
    block();
  }
  if (mode == "kill") {
    if (rank == std::atoi(arg(2))) ::raise(SIGKILL);
    block();
  }
  if (mode == "block") {
    put(1, "ready " + std::to_string(rank) + "\n");
    block();
  }
  if (mode == "outlive") {  // rank 1 fails; rank 0 ends on its own once rank 1 is gone
    const char* fifo = arg(2);
    if (rank == 1) {
      open_fifo(fifo, O_WRONLY);  // held until this process exits
      put(2, "rank 1 failing with code 3\n");
      return 3;
    }
    const int fd = open_fifo(fifo, O_RDONLY);
    char byte = 0;
    while (::read(fd, &byte, 1) < 0 && errno == EINTR) {
    }
    put(1, "rank 0 outlived rank 1\n");
    return 0;
  }
  if (mode == "ignore-term" || mode == "kill-on-term") {
    const char* fifo = arg(2);
    on_sigterm(mode == "ignore-term" ? SIG_IGN : die_by_sigkill);
    if (rank != 0) {
      const int fd = open_fifo(fifo, O_WRONLY);
      put(fd, "r");
      block();  // keeps fd open, so rank 0 never sees EOF early
    }
    const int fd = open_fifo(fifo, O_RDONLY);
    for (int got = 0; got < size - 1;) {
      char buf[64];
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 83;
      got += static_cast<int>(n);
    }
    put(2, "rank 0: all others are ready for SIGTERM; exiting 1\n");
    return 1;
  }
  if (mode == "grandchild") {
    const char* fifo = arg(2);
    if (rank == 0) {
      const pid_t pid = ::fork();
      if (pid < 0) return 84;
      if (pid == 0) {
        put(1, "grandchild " + std::to_string(::getpid()) + "\n");
        const int fd = open_fifo(fifo, O_WRONLY);
        put(fd, "g");
        block();
      }
      block();
    }
    if (rank == 1) {
      const int fd = open_fifo(fifo, O_RDONLY);
      char c;
      while (::read(fd, &c, 1) < 0 && errno == EINTR) {
      }
      return 3;
    }
    block();
  }
  put(2, "launcher_probe: unknown mode '" + std::string(mode) + "'\n");
  return 85;
}
