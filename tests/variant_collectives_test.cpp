// SPDX-License-Identifier: MIT
// commx_add_variants(... ANY_COLLECTIVES): one program holds each policy of COLLECTIVES as its
// own communicator type, and with_collectives picks it by name at run time.

#include <catch2/catch.hpp>

#include <string>

#include "commx/variant_collectives.hpp"

TEST_CASE("with_collectives runs the communicator type of the policy it is named", "[variant]") {
  CHECK(commx::variant::collectives_names() == "flat ring tuned");
  for (const std::string name : {"flat", "ring", "tuned"}) {
    const auto ran = commx::variant::with_collectives(name, []<class Collectives>() {
      using comm = commx::variant::communicator_with<Collectives>;
      static_assert(std::is_same_v<typename comm::collectives_type, Collectives>);
      return std::string(comm::collectives_type::name);
    });
    REQUIRE(ran);
    CHECK(*ran == name);
  }
  // Not built (binomial), and no policy at all: nothing runs.
  int calls = 0;
  const auto none = [&]<class>() { return ++calls; };
  CHECK_FALSE(commx::variant::with_collectives("binomial", none));
  CHECK_FALSE(commx::variant::with_collectives("", none));
  CHECK(calls == 0);
  // The program's default communicator is tuned's, as for one built with tuned alone.
  CHECK(commx::variant::communicator::collectives_type::name == std::string_view("tuned"));
}
