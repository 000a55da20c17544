// SPDX-License-Identifier: MIT
// One rank of a job on a layered stack (transport::shm_tcp, shm_tcp_wan or mpi_wan;
// COMMX_TEST_TRANSPORT names it), for what only real processes on real nodes and sites show.
// Started by commxrun (--nodes, --sites), by tests/transport/sites_by_launch.sh (an mpirun per
// site) or in network namespaces by tests/wan/sites_netns_test.cpp. The first argument names
// the scenario; exit status 0 means every check held on this rank.
//
// - levels: every rank sends every other rank a message of a size that names the pair; each
//   rank then checks that each level carried exactly the bytes of the peers it joins (the
//   network transport's own per-peer counts: nothing for a peer the inner level serves,
//   everything for the others), and prints its bytes per level
// - kill: after a barrier, the last rank kills itself (SIGKILL); every other rank waits for it
//   on whatever level joins them (rank 0 with an any_source receive) and must get
//   errc::peer_lost, well within COMMX_TIMEOUT

#include <csignal>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include COMMX_TEST_TRANSPORT_HEADER

namespace {

using transport_type = commx::transport::COMMX_TEST_TRANSPORT;
using comm = commx::communicator<transport_type>;
using commx::transport::level;

int failures = 0;

void check(bool ok, std::string_view what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "CHECK FAILED: %.*s\n", static_cast<int>(what.size()), what.data());
  }
}

std::size_t bytes_between(int a, int b) { return 1000 + 100 * static_cast<std::size_t>(a) + b; }

const char* name_of(level l) {
  switch (l) {
    case level::node:
      return "node";
    case level::site:
      return "site";
    case level::wide:
      return "wide";
  }
  return "?";
}

void levels(comm& world) {
  const int me = world.rank();
  const int n = world.size();
  std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(n));
  std::vector<std::vector<std::byte>> in(static_cast<std::size_t>(n));
  std::vector<comm::request> requests;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    out[static_cast<std::size_t>(p)].assign(bytes_between(me, p), std::byte{7});
    requests.push_back(world.irecv(p, 5, in[static_cast<std::size_t>(p)]));
    requests.push_back(world.isend(p, 5, out[static_cast<std::size_t>(p)]));
  }
  commx::wait_all(requests);
  for (int p = 0; p < n; ++p) {
    if (p != me) check(in[static_cast<std::size_t>(p)].size() == bytes_between(p, me), "size");
  }
  const transport_type& t = world.transport();
  std::uint64_t expected[3] = {0, 0, 0};
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const level l = t.level_of(p);
    expected[static_cast<int>(l)] += bytes_between(me, p);
    // The network transport carried nothing to a peer the inner level serves (on this node;
    // at this site, for mpi+wan), all to the others.
    const std::uint64_t by_network = t.network_transport().bytes_sent_to(p);
    const bool inner = l <= transport_type::inner_level;
    check(inner ? by_network == 0 : by_network == bytes_between(me, p),
          fmt::format("network bytes to rank {} ({} level): {}", p, name_of(l), by_network));
    check((l == level::node) == (t.node_of(p) == t.node_of(me)), "node level iff same node");
    check((l == level::wide) == (t.site_of(p) != t.site_of(me)), "wide level iff other site");
  }
  for (level l : {level::node, level::site, level::wide}) {
    check(t.bytes_sent_over(l) == expected[static_cast<int>(l)],
          fmt::format("{} level carried {} bytes, expected {}", name_of(l), t.bytes_sent_over(l),
                      expected[static_cast<int>(l)]));
  }
  std::printf("rank %d node %d site %d: bytes node %llu site %llu wide %llu\n", me, t.node_of(me),
              t.site_of(me), static_cast<unsigned long long>(t.bytes_sent_over(level::node)),
              static_cast<unsigned long long>(t.bytes_sent_over(level::site)),
              static_cast<unsigned long long>(t.bytes_sent_over(level::wide)));
  world.barrier();
}

void kill(comm& world) {
  const int victim = world.size() - 1;
  world.barrier();
  if (world.rank() == victim) {
    std::fflush(stdout);
    std::raise(SIGKILL);
  }
  const auto start = std::chrono::steady_clock::now();
  int got = 0;
  const int from = world.rank() == 0 ? commx::any_source : victim;
  try {
    world.recv(from, 9, got);
    check(false, "a receive from a killed rank completed");
  } catch (const commx::error& e) {
    check(e.code() == commx::errc::peer_lost, fmt::format("peer_lost expected: {}", e.what()));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank %d (%s level to rank %d): peer_lost after %.0f ms\n", world.rank(),
              name_of(world.transport().level_of(victim)), victim, ms);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view scenario = argc > 1 ? argv[1] : "";
  try {
    comm world = comm::from_env();
    if (scenario == "levels") {
      levels(world);
    } else if (scenario == "kill") {
      kill(world);
    } else {
      std::fprintf(stderr, "usage: layered_scenario levels|kill\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank failed: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
