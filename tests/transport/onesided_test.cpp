// SPDX-License-Identifier: MIT
// The one-sided part of the conformance suite (onesided.hpp) on the transport under test
// (support/job.hpp): linked into every conformance.<transport> executable.

#include <catch2/catch.hpp>

#include "support/job.hpp"
#include "transport/onesided.hpp"

using comm = commx::communicator<commx::test::transport_under_test>;

TEST_CASE("active messages and windows keep their semantics", "[conformance][onesided]") {
  for (int n : commx::test::job_rank_counts()) {
    for (const auto& check : commx::test::onesided::job_checks<comm>()) {
      DYNAMIC_SECTION(check.name << " on " << n << " ranks") {
        REQUIRE_NOTHROW(commx::test::job<comm>(n, check.run));
      }
    }
  }
}
