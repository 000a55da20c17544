// SPDX-License-Identifier: MIT
// Catch2's implementation, compiled once for every test binary, with or without our main.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "support/catch_runner.hpp"

int commx::test::run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }
