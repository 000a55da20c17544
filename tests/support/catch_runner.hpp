// SPDX-License-Identifier: MIT
#pragma once
// Runs the Catch2 session of a test binary that writes its own main (commx_catch_runner):
// Catch2 2.x declares Catch::Session only where its implementation is compiled.

namespace commx::test {

int run_catch(int argc, char** argv);

}  // namespace commx::test
