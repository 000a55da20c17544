// SPDX-License-Identifier: MIT
// What commx costs over the MPI it runs on: ping-pong, windowed bandwidth and allreduce, each
// written twice in one program, once with communicator<transport::mpi, coll::native> and once
// with raw MPI calls, compiled with the same flags and measured in the same run:
//   mpirun -np 2 ./bench_mpi_overhead --benchmark_repetitions=10
//          --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
// (more ranks: the allreduce runs on all of them, ping-pong and bandwidth between 0 and 1).
// Rank 0 runs Google Benchmark and broadcasts each run's shape (raw MPI, outside the timing);
// the other ranks serve it. The sizes and the window are pingpong_bench.cpp's.

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commx/coll/native.hpp"
#include "commx/communicator.hpp"
#include "commx/transport/mpi.hpp"
#include "pingpong_protocol.hpp"

namespace {

using comm = commx::communicator<commx::transport::mpi, commx::coll::native>;

enum class kind : std::int32_t { pingpong, bandwidth, allreduce, stop };
// commx with its default receives (posted to MPI, lossless by announcing long messages), commx
// with matched-probe receives (COMMX_MPI_RECEIVES=matched), raw MPI; and for ping-pong raw MPI
// receiving as commx's matched path does (MPI_Mprobe, MPI_Get_count, MPI_Mrecv): what those
// semantics cost in MPI itself.
enum class variant : std::int32_t { commx_posted, commx_matched, raw, raw_matched };

struct worlds {
  comm matched;
  comm posted;
  comm& of(variant how) { return how == variant::commx_matched ? matched : posted; }
};

struct run {
  kind what;
  variant how;
  std::int64_t bytes;  // allreduce: bytes of doubles
  std::int64_t iterations;
};

void announce(run r) { MPI_Bcast(&r, sizeof r, MPI_BYTE, 0, MPI_COMM_WORLD); }

void check(int code, const char* call) {
  if (code != MPI_SUCCESS) throw commx::error(commx::errc::protocol_violation, call);
}

// --- the commx side --------------------------------------------------------------------

void commx_pingpong(comm& world, std::span<std::byte> out, std::span<std::byte> in, int peer,
                    bool first) {
  if (first) world.send(peer, pingpong::data_tag, std::span<const std::byte>(out));
  world.recv(peer, pingpong::data_tag, in);
  if (!first) world.send(peer, pingpong::data_tag, std::span<const std::byte>(in));
}

void commx_window_send(comm& world, std::span<const std::byte> out,
                       std::vector<comm::request>& sends) {
  sends.clear();
  for (int i = 0; i < pingpong::window; ++i)
    sends.push_back(world.isend(1, pingpong::data_tag, out));
  commx::wait_all(sends);
  world.recv(1, pingpong::control_tag, std::span<std::byte>());
}

void commx_window_recv(comm& world, std::vector<std::vector<std::byte>>& slots,
                       std::vector<comm::request>& recvs) {
  recvs.clear();
  for (auto& slot : slots) recvs.push_back(world.irecv(0, pingpong::data_tag, std::span(slot)));
  commx::wait_all(recvs);
  world.send(0, pingpong::control_tag, std::span<const std::byte>());
}

// --- the raw MPI side ------------------------------------------------------------------

// A receive that learns the size before it takes the message, as commx's matched receive.
void raw_matched_recv(std::span<std::byte> in, int peer) {
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  check(MPI_Mprobe(peer, pingpong::data_tag, MPI_COMM_WORLD, &message, &status), "MPI_Mprobe");
  int count = 0;
  check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
  if (static_cast<std::size_t>(count) > in.size()) {
    throw commx::error(commx::errc::truncated, "raw_matched_recv");
  }
  check(MPI_Mrecv(in.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
}

void raw_pingpong(std::span<std::byte> out, std::span<std::byte> in, int peer, bool first,
                  bool matched) {
  const int n = static_cast<int>(out.size());
  if (first) {
    check(MPI_Send(out.data(), n, MPI_BYTE, peer, pingpong::data_tag, MPI_COMM_WORLD), "MPI_Send");
  }
  if (matched) {
    raw_matched_recv(in, peer);
  } else {
    check(MPI_Recv(in.data(), n, MPI_BYTE, peer, pingpong::data_tag, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
  }
  if (!first) {
    check(MPI_Send(in.data(), n, MPI_BYTE, peer, pingpong::data_tag, MPI_COMM_WORLD), "MPI_Send");
  }
}

void raw_window_send(std::span<const std::byte> out,
                     std::array<MPI_Request, pingpong::window>& sends) {
  const int n = static_cast<int>(out.size());
  for (auto& s : sends) {
    check(MPI_Isend(out.data(), n, MPI_BYTE, 1, pingpong::data_tag, MPI_COMM_WORLD, &s),
          "MPI_Isend");
  }
  check(MPI_Waitall(pingpong::window, sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  check(MPI_Recv(nullptr, 0, MPI_BYTE, 1, pingpong::control_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
        "MPI_Recv");
}

void raw_window_recv(std::vector<std::vector<std::byte>>& slots,
                     std::array<MPI_Request, pingpong::window>& recvs) {
  for (std::size_t w = 0; w < slots.size(); ++w) {
    check(MPI_Irecv(slots[w].data(), static_cast<int>(slots[w].size()), MPI_BYTE, 0,
                    pingpong::data_tag, MPI_COMM_WORLD, &recvs[w]),
          "MPI_Irecv");
  }
  check(MPI_Waitall(pingpong::window, recvs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  check(MPI_Send(nullptr, 0, MPI_BYTE, 0, pingpong::control_tag, MPI_COMM_WORLD), "MPI_Send");
}

void raw_allreduce(std::vector<double>& data) {
  check(MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD),
        "MPI_Allreduce");
}

// --- one run, on every rank ---------------------------------------------------------------

// Runs `r` on this rank; on rank 0 inside Google Benchmark's loop (`state`), elsewhere
// `r.iterations` times.
void take_part(worlds& both, const run& r, benchmark::State* state) {
  comm& world = both.of(r.how);
  const auto bytes = static_cast<std::size_t>(r.bytes);
  const bool timed = state != nullptr;
  const auto repeat = [&](auto&& body) {
    if (timed) {
      for (auto _ : *state) body();
    } else {
      for (std::int64_t i = 0; i < r.iterations; ++i) body();
    }
  };
  const bool commx = r.how == variant::commx_posted || r.how == variant::commx_matched;
  if (r.what == kind::allreduce) {
    std::vector<double> data(bytes / sizeof(double), 1.0);
    if (commx) {
      repeat([&] { world.allreduce(data, std::plus<>{}); });
    } else {
      repeat([&] { raw_allreduce(data); });
    }
    return;
  }
  if (world.rank() > 1) return;
  if (r.what == kind::pingpong) {
    std::vector<std::byte> out(bytes, std::byte{'x'});
    std::vector<std::byte> in(bytes);
    const bool first = world.rank() == 0;
    const int peer = 1 - world.rank();
    if (commx) {
      repeat([&] { commx_pingpong(world, out, in, peer, first); });
    } else {
      const bool matched = r.how == variant::raw_matched;
      repeat([&] { raw_pingpong(out, in, peer, first, matched); });
    }
    return;
  }
  if (world.rank() == 0) {
    const std::vector<std::byte> out(bytes, std::byte{'x'});
    if (commx) {
      std::vector<comm::request> sends;
      sends.reserve(pingpong::window);
      repeat([&] { commx_window_send(world, out, sends); });
    } else {
      std::array<MPI_Request, pingpong::window> sends{};
      repeat([&] { raw_window_send(out, sends); });
    }
    return;
  }
  std::vector<std::vector<std::byte>> slots(pingpong::window, std::vector<std::byte>(bytes));
  if (commx) {
    std::vector<comm::request> recvs;
    recvs.reserve(pingpong::window);
    repeat([&] { commx_window_recv(world, slots, recvs); });
  } else {
    std::array<MPI_Request, pingpong::window> recvs{};
    repeat([&] { raw_window_recv(slots, recvs); });
  }
}

void measure(benchmark::State& state, worlds& world, kind what, variant how) {
  const run r{what, how, state.range(0), static_cast<std::int64_t>(state.max_iterations)};
  announce(r);
  take_part(world, r, &state);
  if (what == kind::allreduce) {
    state.SetBytesProcessed(state.iterations() * r.bytes);
  } else {
    pingpong::report(state,
                     what == kind::pingpong ? pingpong::kind::pingpong : pingpong::kind::bandwidth,
                     r.bytes);
  }
}

void serve(worlds& world) {
  for (;;) {
    run r{};
    MPI_Bcast(&r, sizeof r, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (r.what == kind::stop) return;
    take_part(world, r, nullptr);
  }
}

void register_all(worlds& world) {
  for (variant how : {variant::commx_posted, variant::commx_matched, variant::raw}) {
    const char* who = how == variant::commx_posted    ? "commx-posted"
                      : how == variant::commx_matched ? "commx-matched"
                                                      : "raw-mpi";
    if (world.matched.size() >= 2) {
      benchmark::RegisterBenchmark(
          fmt::format("pingpong/{}", who).c_str(),
          [&world, how](benchmark::State& s) { measure(s, world, kind::pingpong, how); })
          ->Apply(pingpong::sizes)
          ->UseRealTime();
      benchmark::RegisterBenchmark(
          fmt::format("bandwidth/{}", who).c_str(),
          [&world, how](benchmark::State& s) { measure(s, world, kind::bandwidth, how); })
          ->Apply(pingpong::sizes)
          ->UseRealTime();
      if (how == variant::raw) {
        benchmark::RegisterBenchmark("pingpong/raw-mpi-matched",
                                     [&world](benchmark::State& s) {
                                       measure(s, world, kind::pingpong, variant::raw_matched);
                                     })
            ->Apply(pingpong::sizes)
            ->UseRealTime();
      }
    }
    benchmark::RegisterBenchmark(
        fmt::format("allreduce/{}", who).c_str(),
        [&world, how](benchmark::State& s) { measure(s, world, kind::allreduce, how); })
        ->Arg(8)
        ->Arg(8 << 10)
        ->Arg(1 << 20)
        ->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const commx::init mpi;
    using path = commx::transport::mpi::receive_path;
    worlds world{comm(commx::transport::mpi{MPI_COMM_WORLD, path::matched}),
                 comm(commx::transport::mpi{MPI_COMM_WORLD, path::posted})};
    if (world.matched.rank() != 0) {
      serve(world);
      return 0;
    }
    register_all(world);
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    announce({kind::stop, variant::raw, 0, 0});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mpi_overhead: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 0;
}
