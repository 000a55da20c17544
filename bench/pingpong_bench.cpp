// SPDX-License-Identifier: MIT
// Ping-pong (half round trip) and one-way windowed bandwidth (into a buffer per message in
// flight, and all into one buffer) between ranks 0 and 1 on any commx stack:
// commx_add_variants builds bench_pingpong_inproc, _shm, _tcp, ... from this file.
//   COMMX_INPROC_RANKS=2 ./bench_pingpong_inproc
//   commxrun -n 2 ./bench_pingpong_shm [--benchmark_repetitions=5 ...]
// mpi_pingpong_bench.cpp is the same measurement in raw MPI calls, for side-by-side ratios.
// Rank 0 runs Google Benchmark; rank 1 serves the runs rank 0 describes to it. Ranks beyond 1
// leave at once; with PINGPONG_ALL_TALKED=1 every rank first hears from every other (an
// alltoall) and those beyond 1 stay, waiting for rank 0 to finish: what two ranks' messages
// cost in a job whose ranks all talked once and are still there.

#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <commx/variant.hpp>

#include "pingpong_protocol.hpp"

namespace {

using comm = commx::variant::communicator;
using pingpong::kind;

// Sends the run's shape and waits until rank 1 has its buffers.
void describe(comm& world, const pingpong::run& r) {
  world.send(1, pingpong::control_tag, r);
  world.recv(1, pingpong::control_tag, std::span<std::byte>());
}

void measure(benchmark::State& state, comm& world, kind what) {
  const std::int64_t bytes = state.range(0);
  std::vector<std::byte> out(static_cast<std::size_t>(bytes), std::byte{'x'});
  std::vector<std::byte> in(static_cast<std::size_t>(bytes));
  describe(world, {what, 0, bytes, static_cast<std::int64_t>(state.max_iterations)});
  if (what == kind::pingpong) {
    for (auto _ : state) {
      world.send(1, pingpong::data_tag, std::span<const std::byte>(out));
      world.recv(1, pingpong::data_tag, std::span<std::byte>(in));
    }
  } else {
    std::vector<comm::request> sends;
    sends.reserve(pingpong::window);
    for (auto _ : state) {
      sends.clear();
      for (int i = 0; i < pingpong::window; ++i) {
        sends.push_back(world.isend(1, pingpong::data_tag, std::span<const std::byte>(out)));
      }
      commx::wait_all(sends);
      world.recv(1, pingpong::control_tag, std::span<std::byte>());
    }
  }
  pingpong::report(state, what, bytes);
}

void serve(comm& world) {
  std::vector<std::byte> buffer;
  std::vector<std::vector<std::byte>> window(pingpong::window);
  std::vector<comm::request> recvs;
  for (;;) {
    pingpong::run r{};
    world.recv(0, pingpong::control_tag, r, commx::clock::duration::max());
    if (r.what == kind::stop) return;
    const auto bytes = static_cast<std::size_t>(r.bytes);
    if (r.what == kind::pingpong) {
      buffer.resize(bytes);
      world.send(0, pingpong::control_tag, std::span<const std::byte>());  // ready
      for (std::int64_t i = 0; i < r.iterations; ++i) {
        world.recv(0, pingpong::data_tag, std::span<std::byte>(buffer));
        world.send(0, pingpong::data_tag, std::span<const std::byte>(buffer));
      }
      continue;
    }
    const bool one_buffer = r.what == kind::bandwidth_one_buffer;
    for (auto& slot : window) slot.resize(bytes);
    world.send(0, pingpong::control_tag, std::span<const std::byte>());  // ready
    for (std::int64_t i = 0; i < r.iterations; ++i) {
      recvs.clear();
      for (auto& slot : window) {
        auto& into = one_buffer ? window[0] : slot;
        recvs.push_back(world.irecv(0, pingpong::data_tag, std::span<std::byte>(into)));
      }
      commx::wait_all(recvs);
      world.send(0, pingpong::control_tag, std::span<const std::byte>());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    commx::run<comm>([&](comm& world) {
      if (world.size() < 2) {
        throw commx::error(
            commx::errc::invalid_argument,
            fmt::format("{} needs 2 ranks, not {}", commx::variant::target_name, world.size()));
      }
      const char* all_talked = std::getenv("PINGPONG_ALL_TALKED");
      const bool stay = all_talked != nullptr && std::string_view(all_talked) == "1";
      if (stay) {
        std::vector<std::int64_t> out(static_cast<std::size_t>(world.size()), world.rank());
        std::vector<std::int64_t> in(out.size());
        world.alltoall(out, in);
      }
      if (world.rank() == 1) serve(world);
      if (world.rank() > 1 && stay) {
        world.recv(0, pingpong::control_tag, std::span<std::byte>(), commx::clock::duration::max());
      }
      if (world.rank() != 0) return;
      const std::string stack(comm::transport_type::name);
      for (kind what : pingpong::measurements) {
        benchmark::RegisterBenchmark(
            fmt::format("{}/commx-{}", pingpong::label(what), stack).c_str(),
            [&world, what](benchmark::State& s) { measure(s, world, what); })
            ->Apply(pingpong::sizes)
            ->UseRealTime();
      }
      benchmark::Initialize(&argc, argv);
      benchmark::RunSpecifiedBenchmarks();
      world.send(1, pingpong::control_tag, pingpong::run{kind::stop, 0, 0, 0});  // no answer
      for (int r = 2; stay && r < world.size(); ++r) {
        world.send(r, pingpong::control_tag, std::span<const std::byte>());
      }
    });
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", commx::variant::target_name, e.what());
    return 1;
  }
}
