// SPDX-License-Identifier: MIT
// One rank of a TCP job that tcp_test.cpp starts as real processes (by hand, under mpirun or in
// network namespaces) to check what only processes can show: strangers, signals, missing
// ranks, several hosts. The first argument names the scenario. Every rank prints what it saw
// as whole lines on stdout, which the test reads; "ready" lines tell the test when a rank is
// where the scenario needs it before it sends a signal. Exit status 0 means every check held.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include "commx/coll/hierarchical.hpp"
#include "commx/communicator.hpp"
#include "commx/transport/tcp.hpp"
#include "support/check.hpp"

namespace {

using namespace std::chrono_literals;
using comm = commx::communicator<commx::transport::tcp>;
using commx::clock;

void say(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

/// Blocks until the test writes a line on our stdin (a pipe), and returns it.
std::string wait_for_line() {
  std::string line;
  if (!std::getline(std::cin, line)) throw std::runtime_error("stdin closed before a go-ahead");
  return line;
}

/// Waits for a line on stdin while serving the network: the rank stays inside the transport
/// (blocking in epoll, 20 ms at a time) so that it handles whatever connects meanwhile.
std::string wait_for_line_serving(comm& world) {
  for (;;) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) return wait_for_line();
    auto& t = world.transport();
    t.wait_for_event(t.event_count(), clock::now() + 20ms);
  }
}

/// Every rank sends every rank a small and a large message, then an allreduce: the job works.
void exchange(comm& world) {
  const int n = world.size();
  std::vector<comm::request> sends;
  std::vector<std::vector<int>> small(static_cast<std::size_t>(n)), large(small.size());
  for (int dest = 0; dest < n; ++dest) {
    small[static_cast<std::size_t>(dest)].assign(8, world.rank() * 100 + dest);
    large[static_cast<std::size_t>(dest)].assign(300000, world.rank() * 100 + dest);
    sends.push_back(world.isend(dest, 1, small[static_cast<std::size_t>(dest)]));
    sends.push_back(world.isend(dest, 2, large[static_cast<std::size_t>(dest)]));
  }
  for (int source = 0; source < n; ++source) {
    std::vector<int> got;
    world.recv(source, 2, got);
    COMMX_CHECK(got == std::vector<int>(300000, source * 100 + world.rank()));
    world.recv(source, 1, got);
    COMMX_CHECK(got == std::vector<int>(8, source * 100 + world.rank()));
  }
  commx::wait_all(sends);
  const int sum = world.allreduce_value(world.rank(), std::plus<>{});
  COMMX_CHECK_EQ(sum, n * (n - 1) / 2);
}

void print_endpoint(comm& world) {
  const auto ep = world.transport().listen_endpoint();
  COMMX_CHECK(ep.has_value());
  say(fmt::format("endpoint {} {}", ep->first, ep->second));
}

/// Strangers connect to both ranks' ports while rank 1 waits in a receive: they are refused,
/// and the job goes on.
void strangers(comm& world) {
  COMMX_CHECK_EQ(world.size(), 2);
  print_endpoint(world);
  world.barrier();
  if (world.rank() == 0) {
    say("ready");
    wait_for_line_serving(world);  // the test has finished with its strangers
    world.send(1, 3, 42);
    int back = 0;
    world.recv(1, 4, back);
    COMMX_CHECK_EQ(back, 43);
  } else {
    say("ready");
    int got = 0;
    world.recv(0, 3, got, 120s);  // strangers come and go meanwhile
    world.send(0, 4, got + 1);
  }
  exchange(world);
  say("done");
}

/// Rank 2 is killed while ranks 0 and 1 wait on it: a receive naming it, an any_source
/// receive (rank 0), a large send it never takes (rank 1). Each ends with peer_lost well within
/// twice the timeout, and later operations on rank 2 fail at once.
void killed(comm& world) {
  COMMX_CHECK_EQ(world.size(), 3);
  world.barrier();
  if (world.rank() == 2) {
    say("ready");
    int never = 0;
    world.recv(0, 99, never, 600s);
    return;
  }
  int from_victim = 0;
  int from_anyone = 0;
  std::vector<char> big(1 << 20, 'x');
  std::vector<comm::request> pending;
  pending.push_back(world.irecv(2, 5, from_victim));
  if (world.rank() == 0) pending.push_back(world.irecv(commx::any_source, 6, from_anyone));
  if (world.rank() == 1) pending.push_back(world.isend(2, 7, big));
  say("ready");
  const auto start = clock::now();
  for (auto& req : pending) COMMX_EXPECT_ERROR(commx::errc::peer_lost, req.wait());
  const auto waited = clock::now() - start;
  COMMX_CHECK(waited < 2 * world.timeout());
  COMMX_EXPECT_ERROR(commx::errc::peer_lost, world.send(2, 8, 1));
  COMMX_EXPECT_ERROR(commx::errc::peer_lost, world.recv(2, 8, from_victim));
  COMMX_CHECK((world.known_lost() == std::vector<int>{2}));
  // The survivors still talk to each other.
  const int other = 1 - world.rank();
  int got = -1;
  const int mine = world.rank();
  auto s = world.isend(other, 9, mine);
  world.recv(other, 9, got);
  s.wait();
  COMMX_CHECK_EQ(got, other);
  say(fmt::format("peer_lost after {} ms",
                  std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
}

/// Rank 2 is killed; rank 1, waiting on it, fails of that (it ends at once, as a rank whose
/// error nobody catches); rank 0 waits on rank 1 alone, and learns of rank 2's loss too.
void cascade(comm& world) {
  COMMX_CHECK_EQ(world.size(), 3);
  world.barrier();
  int got = 0;
  say("ready");
  if (world.rank() == 2) {
    world.recv(0, 99, got, 600s);
    return;
  }
  if (world.rank() == 1) {
    try {
      world.recv(2, 5, got);
    } catch (const commx::error&) {
      std::_Exit(7);  // fails of rank 2's loss, without a word to the others
    }
    return;
  }
  try {
    world.recv(1, 5, got);
    say("no error");
  } catch (const commx::error& e) {
    say(fmt::format("error {}: {}", e.code().message(), e.what()));
    COMMX_CHECK(e.code() == commx::errc::peer_lost);
    COMMX_CHECK(std::string_view(e.what()).find("peer 1 is gone") != std::string_view::npos);
    // Both, in whichever order their ends reached this rank (rank 2's, first, as a rule).
    // Rank 2's end may still wait in a socket when rank 1's fails the receive: known_lost()
    // says what this rank has learned so far, so ask again as events come, for a bounded time.
    std::vector<int> known = world.known_lost();
    const auto until = commx::clock::now() + 10s;
    while (known.size() < 2 && commx::clock::now() < until) {
      auto& endpoint = world.transport();
      endpoint.wait_for_event(endpoint.event_count(), commx::clock::now() + 10ms);
      known = world.known_lost();
    }
    std::sort(known.begin(), known.end());
    COMMX_CHECK((known == std::vector<int>{1, 2}));
    say("cause seen");
  }
}

/// Rank 1 is stopped (SIGSTOP): rank 0's receive from it ends with timeout at its deadline.
void stopped(comm& world) {
  COMMX_CHECK_EQ(world.size(), 2);
  world.barrier();
  if (world.rank() == 1) {
    say("ready");
    int never = 0;
    world.recv(0, 99, never, 600s);
    return;
  }
  say("ready");
  wait_for_line();  // rank 1 is stopped now
  int got = -1;
  const auto start = clock::now();
  COMMX_EXPECT_ERROR(commx::errc::timeout, world.recv(1, 5, got, 1s));
  const auto waited = clock::now() - start;
  COMMX_CHECK(waited >= 1s);
  COMMX_CHECK(waited < 2 * world.timeout());
  COMMX_CHECK_EQ(got, -1);
  say(fmt::format("timeout after {} ms",
                  std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
}

/// A peer sends a frame that breaks the protocol (the test plays that peer): receives from it
/// end with protocol_violation, now and later.
void violated(comm& world) {
  COMMX_CHECK_EQ(world.size(), 2);
  COMMX_CHECK_EQ(world.rank(), 0);
  int got = -1;
  auto req = world.irecv(1, 5, got);
  say("ready");
  COMMX_EXPECT_ERROR(commx::errc::protocol_violation, req.wait(60s));
  COMMX_EXPECT_ERROR(commx::errc::protocol_violation, world.recv(1, 5, got));
  COMMX_CHECK_EQ(got, -1);
  say("protocol_violation");
}

/// Exchanges messages and reports where each rank is, for the multi-host and mpirun tests.
void hosts(comm& world) {
  print_endpoint(world);
  exchange(world);
  std::string nodes;
  for (int r = 0; r < world.size(); ++r)
    nodes += fmt::format("{}{}", r ? " " : "", world.node_of(r));
  say(fmt::format("rank {} of {} nodes {}", world.rank(), world.size(), nodes));
  world.barrier();
}

/// Ranks placed on named nodes and sites (COMMX_NODE, COMMX_SITE; commxrun --nodes --sites):
/// `expected` is every rank's node id, `expected_sites` its site id (empty: not checked),
/// space-separated. Each rank checks node_of and site_of against them, that split_by_node and
/// split_by_site hold exactly the ranks of its node and site, and that coll::hierarchical (node,
/// then site, then across sites) sums.
void nodes(std::string_view expected, std::string_view expected_sites) {
  using hierarchical = commx::communicator<commx::transport::tcp, commx::coll::hierarchical>;
  hierarchical world = hierarchical::from_env();
  std::string seen;
  for (int r = 0; r < world.size(); ++r)
    seen += fmt::format("{}{}", r ? " " : "", world.node_of(r));
  say(fmt::format("rank {} nodes {}", world.rank(), seen));
  COMMX_CHECK_EQ(seen, std::string(expected));
  const hierarchical local = world.split_by_node();
  int on_my_node = 0;
  for (int r = 0; r < world.size(); ++r)
    on_my_node += world.node_of(r) == world.node_of(world.rank());
  COMMX_CHECK_EQ(local.size(), on_my_node);
  if (!expected_sites.empty()) {
    std::string sites;
    int at_my_site = 0;
    for (int r = 0; r < world.size(); ++r) {
      sites += fmt::format("{}{}", r ? " " : "", world.site_of(r));
      at_my_site += world.site_of(r) == world.site_of(world.rank());
    }
    say(fmt::format("rank {} sites {}", world.rank(), sites));
    COMMX_CHECK_EQ(sites, std::string(expected_sites));
    COMMX_CHECK_EQ(world.split_by_site().size(), at_my_site);
  }
  std::vector<int> v{world.rank(), 1};
  world.allreduce(std::span(v), std::plus<>{});
  COMMX_CHECK_EQ(v[0], world.size() * (world.size() - 1) / 2);
  COMMX_CHECK_EQ(v[1], world.size());
  say(fmt::format("rank {} hierarchical sum {}", world.rank(), v[0]));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "nodes" && argc > 2) {
      nodes(argv[2], argc > 3 ? argv[3] : "");
      return 0;
    }
    comm world = comm::from_env();
    if (scenario == "strangers") {
      strangers(world);
    } else if (scenario == "killed") {
      killed(world);
    } else if (scenario == "cascade") {
      cascade(world);
    } else if (scenario == "stopped") {
      stopped(world);
    } else if (scenario == "violated") {
      violated(world);
    } else if (scenario == "hosts") {
      hosts(world);
    } else {
      say(fmt::format("unknown scenario '{}'", scenario));
      return 2;
    }
  } catch (const commx::error& e) {
    say(fmt::format("error {}: {}", e.code().message(), e.what()));
    return 3;
  } catch (const std::exception& e) {
    say(fmt::format("failed: {}", e.what()));
    return 1;
  }
  return 0;
}
