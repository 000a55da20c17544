// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A bounded wait on a condition another thread of the test makes true: no sleep stands in for
/// the synchronisation, and a condition that never holds ends the wait instead of the test.

#include <chrono>
#include <thread>

namespace commx::test {

/// Polls `holds` until it does (true) or `bound` passes (false), yielding between looks.
template <class Holds>
bool eventually(Holds&& holds,
                std::chrono::steady_clock::duration bound = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!holds()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace commx::test
