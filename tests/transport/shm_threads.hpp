// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A shm job whose ranks are threads of the test process: each joins the segment `name` with
/// the options `adjust` sets (a 60 s start-up bound first) and runs `rank(transport, r)`;
/// returns once every thread has.

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "commx/transport/shm.hpp"

namespace commx::test {

template <class Adjust, class Rank>
void shm_ranks_as_threads(const std::string& name, int ranks, Adjust&& adjust, Rank&& rank) {
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      commx::transport::shm::options opts;
      opts.startup_timeout = std::chrono::seconds(60);
      adjust(opts);
      commx::transport::shm t(name, r, ranks, opts);
      rank(t, r);
    });
  }
  for (auto& t : threads) t.join();
}

template <class Rank>
void shm_ranks_as_threads(const std::string& name, int ranks, Rank&& rank) {
  shm_ranks_as_threads(
      name, ranks, [](commx::transport::shm::options&) {}, rank);
}

}  // namespace commx::test
