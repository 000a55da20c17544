// SPDX-License-Identifier: MIT
// Catch2's implementation, compiled once for every test binary: with or without our main.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
