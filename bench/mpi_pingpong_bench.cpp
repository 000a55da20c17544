// SPDX-License-Identifier: MIT
// pingpong_bench.cpp's measurement in raw MPI calls, so that commx and an MPI library are
// measured the same way in one run:
//   mpirun -np 2 ./bench_mpi_pingpong                       (Open MPI: shared memory)
//   mpirun -np 2 --mca btl self,tcp ./bench_mpi_pingpong    (Open MPI over TCP only)
// Rank 0 runs Google Benchmark; rank 1 serves the runs rank 0 describes to it. The benchmark
// names carry the library (from MPI_Get_library_version), so one report can hold several MPIs.

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "pingpong_protocol.hpp"

namespace {

using pingpong::kind;

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int length = 0;
  MPI_Error_string(code, text.data(), &length);
  std::fprintf(stderr, "%s failed: %s\n", call, text.data());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// Sends the run's shape and waits until rank 1 has its buffers.
void describe(const pingpong::run& r) {
  check(MPI_Send(&r, sizeof r, MPI_BYTE, 1, pingpong::control_tag, MPI_COMM_WORLD), "MPI_Send");
  check(MPI_Recv(nullptr, 0, MPI_BYTE, 1, pingpong::control_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
        "MPI_Recv");
}

void ready() {
  check(MPI_Send(nullptr, 0, MPI_BYTE, 0, pingpong::control_tag, MPI_COMM_WORLD), "MPI_Send");
}

int count_of(std::int64_t bytes) { return static_cast<int>(bytes); }

void measure(benchmark::State& state, kind what) {
  const std::int64_t bytes = state.range(0);
  std::vector<char> out(static_cast<std::size_t>(bytes), 'x');
  std::vector<char> in(static_cast<std::size_t>(bytes));
  describe({what, 0, bytes, static_cast<std::int64_t>(state.max_iterations)});
  const int n = count_of(bytes);
  if (what == kind::pingpong) {
    for (auto _ : state) {
      check(MPI_Send(out.data(), n, MPI_BYTE, 1, pingpong::data_tag, MPI_COMM_WORLD), "MPI_Send");
      check(MPI_Recv(in.data(), n, MPI_BYTE, 1, pingpong::data_tag, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE),
            "MPI_Recv");
    }
  } else {
    std::array<MPI_Request, pingpong::window> sends{};
    for (auto _ : state) {
      for (auto& s : sends) {
        check(MPI_Isend(out.data(), n, MPI_BYTE, 1, pingpong::data_tag, MPI_COMM_WORLD, &s),
              "MPI_Isend");
      }
      check(MPI_Waitall(pingpong::window, sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      check(MPI_Recv(nullptr, 0, MPI_BYTE, 1, pingpong::control_tag, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE),
            "MPI_Recv");
    }
  }
  pingpong::report(state, what, bytes);
}

void serve() {
  std::vector<char> buffer;
  std::vector<std::vector<char>> window(pingpong::window);
  std::array<MPI_Request, pingpong::window> recvs{};
  for (;;) {
    pingpong::run r{};
    check(MPI_Recv(&r, sizeof r, MPI_BYTE, 0, pingpong::control_tag, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
    if (r.what == kind::stop) return;
    const int n = count_of(r.bytes);
    if (r.what == kind::pingpong) {
      buffer.resize(static_cast<std::size_t>(r.bytes));
      ready();
      for (std::int64_t i = 0; i < r.iterations; ++i) {
        check(MPI_Recv(buffer.data(), n, MPI_BYTE, 0, pingpong::data_tag, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
              "MPI_Recv");
        check(MPI_Send(buffer.data(), n, MPI_BYTE, 0, pingpong::data_tag, MPI_COMM_WORLD),
              "MPI_Send");
      }
      continue;
    }
    const bool one_buffer = r.what == kind::bandwidth_one_buffer;
    for (auto& slot : window) slot.resize(static_cast<std::size_t>(r.bytes));
    ready();
    for (std::int64_t i = 0; i < r.iterations; ++i) {
      for (std::size_t w = 0; w < window.size(); ++w) {
        char* into = one_buffer ? window[0].data() : window[w].data();
        check(MPI_Irecv(into, n, MPI_BYTE, 0, pingpong::data_tag, MPI_COMM_WORLD, &recvs[w]),
              "MPI_Irecv");
      }
      check(MPI_Waitall(pingpong::window, recvs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      check(MPI_Send(nullptr, 0, MPI_BYTE, 0, pingpong::control_tag, MPI_COMM_WORLD), "MPI_Send");
    }
  }
}

/// "openmpi" or "mpich", from the library's own version string.
std::string library_name() {
  std::array<char, MPI_MAX_LIBRARY_VERSION_STRING> text{};
  int length = 0;
  MPI_Get_library_version(text.data(), &length);
  const std::string version(text.data());
  if (version.find("Open MPI") != std::string::npos) return "openmpi";
  if (version.find("MPICH") != std::string::npos) return "mpich";
  return "mpi";
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "bench_mpi_pingpong needs 2 ranks, not %d\n", size);
    MPI_Finalize();
    return 1;
  }
  if (rank == 1) serve();
  if (rank == 0) {
    const char* transport = std::getenv("PINGPONG_LABEL");  // e.g. "tcp" for --mca btl self,tcp
    std::string stack = library_name();
    if (transport != nullptr && *transport != '\0') stack += std::string("-") + transport;
    for (kind what : pingpong::measurements) {
      const std::string name = std::string(pingpong::label(what)) + "/" + stack;
      benchmark::RegisterBenchmark(name.c_str(), [what](benchmark::State& s) { measure(s, what); })
          ->Apply(pingpong::sizes)
          ->UseRealTime();
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    const pingpong::run stop{kind::stop, 0, 0, 0};  // no answer
    check(MPI_Send(&stop, sizeof stop, MPI_BYTE, 1, pingpong::control_tag, MPI_COMM_WORLD),
          "MPI_Send");
  }
  MPI_Finalize();
  return 0;
}
