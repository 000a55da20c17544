// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Runs a test job on the in-process transport with a timeout short enough that a broken
/// check fails with errc::timeout well before CTest would kill the test.

#include <chrono>
#include <utility>
#include <vector>

#include "commx/launch.hpp"

namespace commx::test {

inline inproc_options job_options(std::vector<int> nodes = {}) {
  inproc_options opts;
  opts.comm.timeout = std::chrono::seconds(60);
  opts.nodes = std::move(nodes);
  return opts;
}

template <class Comm, class Fn>
void inproc_job(int n, Fn&& fn, std::vector<int> nodes = {}) {
  run_inproc<Comm>(n, std::forward<Fn>(fn), job_options(std::move(nodes)));
}

}  // namespace commx::test
