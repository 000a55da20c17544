// SPDX-License-Identifier: MIT
// The transport conformance suite (conformance.hpp) on the transport under test
// (support/job.hpp): in-process threads, or the processes a launcher started.

#include <catch2/catch.hpp>

#include "support/job.hpp"
#include "transport/conformance.hpp"
#include "transport/onesided.hpp"

using comm = commx::communicator<commx::test::transport_under_test>;

TEST_CASE("the transport passes the conformance suite", "[conformance]") {
  for (int n : commx::test::job_rank_counts()) {
    for (const auto& check : commx::test::conformance::job_checks<comm>()) {
      DYNAMIC_SECTION(check.name << " on " << n << " ranks") {
        REQUIRE_NOTHROW(commx::test::job<comm>(n, check.run));
      }
    }
  }
}

// A job of its own: on a multi-process transport every rank but 0 ends its process here. A
// window and active messages made before the others leave fail towards them too.
static void peer_gone_everywhere(comm& world) {
  commx::test::onesided::target_gone(world, &commx::test::conformance::peer_gone<comm>);
}

TEST_CASE("a peer that left is reported, not waited for", "[ending]") {
  if constexpr (commx::test::multi_process) {
    commx::test::job_then_leave<comm>(&peer_gone_everywhere);
  } else {
    for (int n : {2, 3, 4}) {
      DYNAMIC_SECTION(n << " ranks") {
        REQUIRE_NOTHROW(commx::test::job<comm>(n, &peer_gone_everywhere));
      }
    }
  }
}
