// SPDX-License-Identifier: MIT
// The main of the test binaries that need nothing before Catch2 runs (the others, such as the
// namespace tests that skip without root, link commx_catch_runner and write their own).
#include <catch2/catch.hpp>

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
