// SPDX-License-Identifier: MIT
// bench/onesided_bench.cpp's measures written directly against MPI-3 RMA (MPI_Win_allocate,
// MPI_Put/MPI_Get/MPI_Accumulate, MPI_Win_flush, MPI_Win_fence, MPI_Win_lock_all): the
// anchor commx's windows are compared with, built against Open MPI (and MPICH by hand in
// bench/onesided_vs_mpi.sh). Prints the same lines on rank 0:
//   result <measure> <bytes> <ranks> <value> <unit>

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "onesided_common.hpp"

namespace {

void report(int me, int n, const char* measure, std::size_t bytes, double value, const char* unit) {
  if (me == 0) std::printf("result %s %zu %d %.4g %s\n", measure, bytes, n, value, unit);
}

void run(int iterations) {
  int me = 0;
  int n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int last = n - 1;
  const std::size_t span = bench::largest_size * static_cast<std::size_t>(n);
  std::byte* base = nullptr;
  MPI_Win win{};
  MPI_Win_allocate(static_cast<MPI_Aint>(span), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  std::vector<std::byte> buffer(span, std::byte{1});
  MPI_Win_lock_all(0, win);

  for (const char* what : {"put_latency", "get_latency"}) {
    const bool put = what[0] == 'p';
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == last && n > 1) {
      const double start = MPI_Wtime();
      for (int i = 0; i < iterations; ++i) {
        if (put) {
          MPI_Put(buffer.data(), 8, MPI_BYTE, 0, 0, 8, MPI_BYTE, win);
        } else {
          MPI_Get(buffer.data(), 8, MPI_BYTE, 0, 0, 8, MPI_BYTE, win);
        }
        MPI_Win_flush(0, win);
      }
      double us = (MPI_Wtime() - start) / iterations * 1e6;
      MPI_Send(&us, 1, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD);
    }
    if (me == 0 && n > 1) {
      double us = 0;
      MPI_Recv(&us, 1, MPI_DOUBLE, last, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      report(me, n, what, 8, us, "us");
    }
  }

  for (const std::size_t bytes : bench::sizes) {
    const int count = static_cast<int>(bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == last && n > 1) {
      const double start = MPI_Wtime();
      for (int i = 0; i < iterations; ++i) {
        MPI_Get(buffer.data(), count, MPI_BYTE, 0, 0, count, MPI_BYTE, win);
        MPI_Win_flush(0, win);
      }
      double us = (MPI_Wtime() - start) / iterations * 1e6;
      MPI_Send(&us, 1, MPI_DOUBLE, 0, 2, MPI_COMM_WORLD);
    }
    if (me == 0 && n > 1) {
      double us = 0;
      MPI_Recv(&us, 1, MPI_DOUBLE, last, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      report(me, n, "distant_access", bytes, us, "us");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) {
      if (me != 0) {
        MPI_Get(buffer.data(), count, MPI_BYTE, 0, 0, count, MPI_BYTE, win);
        MPI_Win_flush(0, win);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    report(me, n, "broadcast", bytes, (MPI_Wtime() - start) / iterations * 1e6, "us");
    MPI_Barrier(MPI_COMM_WORLD);
    start = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) {
      for (int target = 0; target < n; ++target) {
        if (target == me) continue;
        MPI_Put(buffer.data(), count, MPI_BYTE, target,
                static_cast<MPI_Aint>(me) * static_cast<MPI_Aint>(bench::largest_size), count,
                MPI_BYTE, win);
      }
      MPI_Win_flush_all(win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    report(me, n, "all_to_all", bytes, (MPI_Wtime() - start) / iterations * 1e6, "us");
  }
  MPI_Win_unlock_all(win);

  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  MPI_Win_fence(0, win);
  for (int i = 0; i < iterations; ++i) MPI_Win_fence(0, win);
  report(me, n, "fence", 0, (MPI_Wtime() - start) / iterations * 1e6, "us");
  MPI_Win_free(&win);

  {
    std::int64_t* counter = nullptr;
    MPI_Win_allocate(sizeof(std::int64_t), sizeof(std::int64_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                     &counter, &win);
    *counter = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    const std::int64_t one = 1;
    start = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) {
      MPI_Accumulate(&one, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, MPI_SUM, win);
      if (i % 64 == 63) MPI_Win_flush(0, win);
    }
    MPI_Win_flush_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    const double elapsed = MPI_Wtime() - start;
    MPI_Win_unlock_all(win);
    MPI_Win_fence(0, win);
    if (me == 0 && *counter != std::int64_t{iterations} * n) {
      std::fprintf(stderr, "accumulate lost an update\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    report(me, n, "accumulate_rate", 8, static_cast<double>(iterations) * n / elapsed / 1e6,
           "Mops/s");
    MPI_Win_free(&win);
  }

  if (n > 1) {
    std::byte* data = nullptr;
    std::int32_t* flag = nullptr;
    MPI_Win data_win{};
    MPI_Win flag_win{};
    MPI_Win_allocate(static_cast<MPI_Aint>(bench::largest_size), 1, MPI_INFO_NULL, MPI_COMM_WORLD,
                     &data, &data_win);
    MPI_Win_allocate(sizeof(std::int32_t), sizeof(std::int32_t), MPI_INFO_NULL, MPI_COMM_WORLD,
                     &flag, &flag_win);
    *flag = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, data_win);
    MPI_Win_lock_all(0, flag_win);
    double alone = 0;
    double disturbed = 0;
    std::int64_t gets = 0;
    const int count = static_cast<int>(bench::largest_size);
    for (int pass = 0; pass < 2; ++pass) {
      const bool with_gets = pass == 0;
      MPI_Barrier(MPI_COMM_WORLD);
      if (me == 0) {
        const double took = bench::compute_for_a_while();
        (with_gets ? disturbed : alone) = took;
        const std::int32_t one = 1;
        MPI_Accumulate(&one, 1, MPI_INT32_T, last, 0, 1, MPI_INT32_T, MPI_REPLACE, flag_win);
        MPI_Win_flush(last, flag_win);
      } else if (me == last) {
        std::int32_t seen = 0;
        const std::int32_t nothing = 0;
        while (seen == 0) {
          if (with_gets) {
            MPI_Get(buffer.data(), count, MPI_BYTE, 0, 0, count, MPI_BYTE, data_win);
            MPI_Win_flush(0, data_win);
            ++gets;
          }
          MPI_Fetch_and_op(&nothing, &seen, MPI_INT32_T, last, 0, MPI_NO_OP, flag_win);
          MPI_Win_flush(last, flag_win);
        }
        MPI_Accumulate(&nothing, 1, MPI_INT32_T, last, 0, 1, MPI_INT32_T, MPI_REPLACE, flag_win);
        MPI_Win_flush(last, flag_win);
      }
    }
    if (me == last) MPI_Send(&gets, 1, MPI_INT64_T, 0, 3, MPI_COMM_WORLD);
    if (me == 0) {
      MPI_Recv(&gets, 1, MPI_INT64_T, last, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      report(me, n, "busy_target_cost", bench::largest_size, disturbed / alone, "x");
      report(me, n, "busy_target_gets", bench::largest_size, static_cast<double>(gets), "gets");
    }
    MPI_Win_unlock_all(data_win);
    MPI_Win_unlock_all(flag_win);
    MPI_Win_free(&data_win);
    MPI_Win_free(&flag_win);
  }

  if (n > 1) {  // the ping-pong the active-message round trip is compared with
    MPI_Barrier(MPI_COMM_WORLD);
    std::int64_t value = 0;
    if (me == last) {
      const double begin = MPI_Wtime();
      for (int i = 0; i < iterations; ++i) {
        MPI_Send(&value, 1, MPI_INT64_T, 0, 4, MPI_COMM_WORLD);
        MPI_Recv(&value, 1, MPI_INT64_T, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      double us = (MPI_Wtime() - begin) / iterations * 1e6;
      MPI_Send(&us, 1, MPI_DOUBLE, 0, 5, MPI_COMM_WORLD);
    } else if (me == 0) {
      for (int i = 0; i < iterations; ++i) {
        MPI_Recv(&value, 1, MPI_INT64_T, last, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&value, 1, MPI_INT64_T, last, 4, MPI_COMM_WORLD);
      }
      double us = 0;
      MPI_Recv(&us, 1, MPI_DOUBLE, last, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      report(me, n, "pingpong_round_trip", 8, us, "us");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (iterations < 64) {
    std::fprintf(stderr, "usage: %s [iterations >= 64]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  run(iterations);
  MPI_Finalize();
  return 0;
}
