// SPDX-License-Identifier: MIT
// The main of the test binaries that need nothing before Catch2 runs (the others, such as the
// namespace tests that skip without root, link commx_catch_runner and write their own).
#include "support/catch_runner.hpp"

int main(int argc, char** argv) { return commx::test::run_catch(argc, argv); }
