// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Runs a test job on the in-process transport with a timeout short enough that a broken
/// check fails with errc::timeout well before CTest would kill the test.

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "commx/launch.hpp"

namespace commx::test {

inline inproc_options job_options(std::vector<int> nodes = {}, std::vector<int> sites = {}) {
  inproc_options opts;
  opts.comm.timeout = std::chrono::seconds(60);
  opts.nodes = std::move(nodes);
  opts.sites = std::move(sites);
  return opts;
}

template <class Comm, class Fn>
void inproc_job(int n, Fn&& fn, std::vector<int> nodes = {}, std::vector<int> sites = {}) {
  run_inproc<Comm>(n, std::forward<Fn>(fn), job_options(std::move(nodes), std::move(sites)));
}

/// The rank counts a test sweeps: COMMX_TEST_RANKS ("3" or "1,2,4"), which CTest sets to give
/// every rank count a test of its own, or {1, 2, 3, 4, 5, 7, 8} when run by hand.
inline std::vector<int> test_rank_counts() {
  const char* text = std::getenv("COMMX_TEST_RANKS");  // NOLINT(concurrency-mt-unsafe)
  if (text == nullptr || *text == '\0') return {1, 2, 3, 4, 5, 7, 8};
  std::vector<int> counts;
  std::istringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    const int n = std::stoi(item);
    if (n < 1) throw std::invalid_argument("COMMX_TEST_RANKS: rank counts must be >= 1");
    counts.push_back(n);
  }
  return counts;
}

}  // namespace commx::test
