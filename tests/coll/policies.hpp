// SPDX-License-Identifier: MIT
#pragma once
// The collectives policies the coll suites run on the transport under test (support/job.hpp).

#include <cstddef>
#include <tuple>
#include <utility>
#include <vector>

#include "commx/coll/binomial.hpp"
#include "commx/coll/hierarchical.hpp"
#include "commx/coll/ring.hpp"
#include "commx/coll/tuned.hpp"
#include "support/job.hpp"

// The collectives suites count (tests/CMakeLists.txt sets COMMX_TEST_STATS=counting): some
// cases check what a collective sent.
template <class Policy>
using comm_for =
    commx::communicator<commx::test::transport_under_test, Policy, commx::test::stats_under_test>;
// Node layouts of one's choosing exist only in process: those tests run on inproc.
template <class Policy>
using inproc_comm_for = commx::communicator<commx::transport::inproc, Policy>;
// The policies written over point-to-point, which run on every transport...
#ifndef COMMX_TEST_LEVEL_POLICIES
using p2p_policies = std::tuple<commx::coll::flat, commx::coll::binomial, commx::coll::ring,
                                commx::coll::hierarchical, commx::coll::tuned>;
#else
// ... but on the layered stacks (tests/CMakeLists.txt, LEVEL_POLICIES) only those that see the
// levels: hierarchical, and tuned with the stack's own table. flat, binomial and ring meet
// nothing there that the single transports (where they run) and the conformance suite on the
// layered stack do not cover, and compiling them once more per stack cost CI minutes.
using p2p_policies = std::tuple<commx::coll::hierarchical, commx::coll::tuned>;
#endif
// ... and the transport's own, where it has one (coll::native on mpi).
#ifdef COMMX_TEST_TRANSPORT_COLLECTIVES
#include COMMX_TEST_TRANSPORT_COLLECTIVES_HEADER
using transport_policies = std::tuple<commx::coll::COMMX_TEST_TRANSPORT_COLLECTIVES>;
#else
using transport_policies = std::tuple<>;
#endif
using policies = decltype(std::tuple_cat(p2p_policies{}, transport_policies{}));

// Ranks sit two to a node ({0,1}, {2,3}, ...) and two nodes to a site, so hierarchical has
// several nodes, one of them a single rank when n is odd, and from 5 ranks on several sites;
// the other policies ignore the layout.
template <class Comm, class Fn>
inline void job(int n, Fn&& fn) {
  std::vector<int> nodes(static_cast<std::size_t>(n));
  std::vector<int> sites(nodes.size());
  for (int r = 0; r < n; ++r) {
    nodes[static_cast<std::size_t>(r)] = r / 2;
    sites[static_cast<std::size_t>(r)] = r / 4;
  }
  commx::test::job<Comm>(n, std::forward<Fn>(fn), std::move(nodes), std::move(sites));
}
