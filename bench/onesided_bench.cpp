// SPDX-License-Identifier: MIT
// One-sided communication on a commx stack: seed 003's four tests (distant access, broadcast,
// all-to-all, barrier) at 4 B, 64 B and 1 KiB, put and get latency, the accumulate rate, what a
// 1 KiB get costs a target that is computing, and (active messages) a call's round trip next
// to the stack's own ping-pong. bench/onesided_mpi.cpp measures the same with MPI-3 RMA;
// bench/onesided_vs_mpi.sh runs both side by side. Prints one line per measure on rank 0:
//   result <measure> <bytes> <ranks> <value> <unit>
//
//   commxrun -n 2 ./bench_onesided_shm [iterations]

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commx/active_messages.hpp"
#include "commx/variant.hpp"
#include "commx/window.hpp"
#include "onesided_common.hpp"

namespace {

using seconds_clock = std::chrono::steady_clock;
// The windows' element: a 4-byte word; sizes stay in bytes, as MPI's driver counts them.
using word = std::uint32_t;
constexpr std::size_t words(std::size_t bytes) { return bytes / sizeof(word); }

double since(seconds_clock::time_point start) {
  return std::chrono::duration<double>(seconds_clock::now() - start).count();
}

template <class Comm>
void run(Comm& world, int iterations) {
  const int n = world.size();
  const int me = world.rank();
  const int last = n - 1;
  const auto report = [&](const char* measure, std::size_t bytes, double value, const char* unit) {
    if (me == 0) fmt::print("result {} {} {} {:.4g} {}\n", measure, bytes, n, value, unit);
  };
  // Every window exposes 1 KiB per peer, as 4-byte words (every size measured is a multiple:
  // the elements a transport's own remote memory access takes, ucx's included), so all-to-all
  // writes land side by side.
  const std::size_t span = words(bench::largest_size) * static_cast<std::size_t>(n);
  // Destroyed once freed: a window's engine is on the rank's running list while it exists,
  // and would take the ping-pong below off the blocking fast path it is compared with.
  std::optional<commx::window<word, Comm>> win_holder;
  auto& win = win_holder.emplace(world, span);
  std::vector<word> buffer(span, word{1});
  win.lock_all();

  for (const char* what : {"put_latency", "get_latency"}) {
    const bool put = what[0] == 'p';
    world.barrier();
    if (me == last && n > 1) {
      const auto start = seconds_clock::now();
      for (int i = 0; i < iterations; ++i) {
        if (put) {
          win.put(std::span<const word>(buffer.data(), words(8)), 0, 0);
        } else {
          win.get(std::span<word>(buffer.data(), words(8)), 0, 0);
        }
        win.flush(0);
      }
      const double us = since(start) / iterations * 1e6;
      world.send(0, 1, us);
    }
    if (me == 0 && n > 1) {
      double us = 0;
      world.recv(last, 1, us);  // serves the origin's operations while it waits
      report(what, 8, us, "us");
    }
  }

  for (const std::size_t bytes : bench::sizes) {
    // Distant access: the last rank reads from rank 0.
    world.barrier();
    if (me == last && n > 1) {
      const auto start = seconds_clock::now();
      for (int i = 0; i < iterations; ++i) {
        win.get(std::span<word>(buffer.data(), words(bytes)), 0, 0);
        win.flush(0);
      }
      world.send(0, 2, since(start) / iterations * 1e6);
    }
    if (me == 0 && n > 1) {
      double us = 0;
      world.recv(last, 2, us);
      report("distant_access", bytes, us, "us");
    }
    // Broadcast: every rank reads rank 0's data.
    world.barrier();
    auto start = seconds_clock::now();
    for (int i = 0; i < iterations; ++i) {
      if (me != 0) {
        win.get(std::span<word>(buffer.data(), words(bytes)), 0, 0);
        win.flush(0);
      }
    }
    world.barrier();
    report("broadcast", bytes, since(start) / iterations * 1e6, "us");
    // All-to-all: every rank writes to every other.
    world.barrier();
    start = seconds_clock::now();
    for (int i = 0; i < iterations; ++i) {
      for (int target = 0; target < n; ++target) {
        if (target == me) continue;
        win.put(std::span<const word>(buffer.data(), words(bytes)), target,
                static_cast<std::size_t>(me) * words(bench::largest_size));
      }
      win.flush_all();
    }
    world.barrier();
    report("all_to_all", bytes, since(start) / iterations * 1e6, "us");
  }
  win.unlock_all();

  // Barrier: a fence.
  world.barrier();
  auto start = seconds_clock::now();
  for (int i = 0; i < iterations; ++i) win.fence();
  report("fence", 0, since(start) / iterations * 1e6, "us");
  win.free();
  win_holder.reset();

  // Accumulate rate: every rank adds to rank 0's counter, completing every 64.
  {
    commx::window<std::int64_t, Comm> counter(world, 1);
    counter.lock_all();
    world.barrier();
    start = seconds_clock::now();
    for (int i = 0; i < iterations; ++i) {
      counter.accumulate(std::int64_t{1}, 0, 0, std::plus<>{});
      if (i % 64 == 63) counter.flush(0);
    }
    counter.flush_all();
    world.barrier();
    const double elapsed = since(start);
    counter.unlock_all();
    counter.fence();
    if (me == 0 && counter.local()[0] != std::int64_t{iterations} * n) {
      throw std::runtime_error("accumulate lost an update");
    }
    report("accumulate_rate", 8, static_cast<double>(iterations) * n / elapsed / 1e6, "Mops/s");
    counter.free();
  }

  // A computing target: rank 0 times a loop while the last rank gets 1 KiB from it over and
  // over, then alone; the ratio is what the gets cost the target.
  if (n > 1) {
    commx::window<word, Comm> data(world, words(bench::largest_size));
    commx::window<std::int32_t, Comm> flag(world, 1);
    data.lock_all();
    flag.lock_all();
    double alone = 0;
    double disturbed = 0;
    std::int64_t gets = 0;
    for (int pass = 0; pass < 2; ++pass) {
      const bool with_gets = pass == 0;
      world.barrier();
      if (me == 0) {
        const double took = bench::compute_for_a_while();
        (with_gets ? disturbed : alone) = took;
        flag.put(std::int32_t{1}, last, 0);
        flag.flush(last);
      } else if (me == last) {
        std::atomic_ref<std::int32_t> raised(flag.local()[0]);
        const auto waited = seconds_clock::now();
        while (raised.load(std::memory_order_acquire) == 0) {
          if (since(waited) > 60) throw std::runtime_error("rank 0 never raised its flag");
          if (with_gets) {
            data.get(std::span<word>(buffer.data(), words(bench::largest_size)), 0, 0);
            data.flush(0);
            ++gets;
          } else {
            flag.progress();
          }
        }
        raised.store(0, std::memory_order_relaxed);
      }
    }
    if (me == last) world.send(0, 3, gets);
    if (me == 0) {
      world.recv(last, 3, gets);
      report("busy_target_cost", bench::largest_size, disturbed / alone, "x");
      report("busy_target_gets", bench::largest_size, static_cast<double>(gets), "gets");
    }
    data.unlock_all();
    flag.unlock_all();
    data.free();
    flag.free();
  }

  // Active messages: a call's round trip against the stack's ping-pong, 8 bytes. The ping-pong
  // first, while no active-message engine is listening (it would take the blocking calls off
  // their fast paths).
  if (n > 1) {
    const auto timed = [&](auto&& round_trip) {
      world.barrier();
      if (me != last) return 0.0;
      const auto begin = seconds_clock::now();
      for (int i = 0; i < iterations; ++i) round_trip();
      return since(begin) / iterations * 1e6;
    };
    std::int64_t value = 0;
    double us = timed([&] {
      world.send(0, 4, value);
      world.recv(0, 4, value);
    });
    if (me == 0) {
      for (int i = 0; i < iterations; ++i) {
        world.recv(last, 4, value);
        world.send(last, 4, value);
      }
    }
    if (me == last) world.send(0, 5, us);
    if (me == 0) {
      world.recv(last, 5, us);
      report("pingpong_round_trip", 8, us, "us");
    }
    commx::handler_table handlers;
    handlers.on<std::int64_t>("echo", [](int, std::int64_t v) { return v; });
    commx::active_messages am(world, std::move(handlers));
    us = timed([&] { value = am.template call<std::int64_t>(0, "echo", value + 1).get(); });
    if (me == last) world.send(0, 5, us);
    if (me == 0) {
      world.recv(last, 5, us);  // serves the calls while it waits
      report("am_round_trip", 8, us, "us");
    }
  }
  world.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (iterations < 64) {
    std::fprintf(stderr, "usage: %s [iterations >= 64]\n", argv[0]);
    return 2;
  }
  try {
    commx::run<commx::variant::communicator>([&](auto& world) { run(world, iterations); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_onesided: %s\n", e.what());
    return 1;
  }
  return 0;
}
