// SPDX-License-Identifier: MIT
// The same PMB/IMB set on raw MPI calls, for side-by-side ratios with bench_collectives. Every
// rank runs every benchmark with the same fixed repetitions (Google Benchmark's adaptive
// iteration counts would differ between ranks and deadlock them); rank 0 reports the slowest
// rank's time per call.
//
//   mpirun -np 4 ./bench_mpi_collectives --benchmark_out=mpi.json --benchmark_out_format=json

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "pmb.hpp"

namespace {

void check(int code, const char* call) {
  if (code != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw std::runtime_error(std::string(call) + ": " +
                             std::string(text, static_cast<std::size_t>(length)));
  }
}

class pattern {
 public:
  pattern(std::string_view bench, std::size_t bytes, int ranks)
      : bench_(bench),
        n_(static_cast<int>(bytes / sizeof(double))),
        p_(ranks),
        a_(std::max<std::size_t>(static_cast<std::size_t>(n_) * static_cast<std::size_t>(p_), 1),
           1.0),
        b_(a_.size(), 0.0),
        counts_(static_cast<std::size_t>(p_), n_),
        displs_(static_cast<std::size_t>(p_)) {
    for (int r = 0; r < p_; ++r) displs_[static_cast<std::size_t>(r)] = r * n_;
  }

  /// Writes every byte the next call sends (pmb::fresh_input).
  void write_input() { std::fill(a_.begin(), a_.end(), a_.front() + 1.0); }

  void run(MPI_Comm comm) {
    int me = 0;
    MPI_Comm_rank(comm, &me);
    const int right = (me + 1) % p_;
    const int left = (me + p_ - 1) % p_;
    double* out = a_.data();
    double* in = b_.data();
    if (bench_ == "PingPong") {
      if (me == 0) {
        check(MPI_Send(out, n_, MPI_DOUBLE, 1, 0, comm), "MPI_Send");
        check(MPI_Recv(in, n_, MPI_DOUBLE, 1, 0, comm, MPI_STATUS_IGNORE), "MPI_Recv");
      } else if (me == 1) {
        check(MPI_Recv(in, n_, MPI_DOUBLE, 0, 0, comm, MPI_STATUS_IGNORE), "MPI_Recv");
        check(MPI_Send(out, n_, MPI_DOUBLE, 0, 0, comm), "MPI_Send");
      }
    } else if (bench_ == "PingPing") {
      if (me < 2) {
        MPI_Request sent;
        check(MPI_Isend(out, n_, MPI_DOUBLE, 1 - me, 0, comm, &sent), "MPI_Isend");
        check(MPI_Recv(in, n_, MPI_DOUBLE, 1 - me, 0, comm, MPI_STATUS_IGNORE), "MPI_Recv");
        check(MPI_Wait(&sent, MPI_STATUS_IGNORE), "MPI_Wait");
      }
    } else if (bench_ == "Sendrecv") {
      check(MPI_Sendrecv(out, n_, MPI_DOUBLE, right, 0, in, n_, MPI_DOUBLE, left, 0, comm,
                         MPI_STATUS_IGNORE),
            "MPI_Sendrecv");
    } else if (bench_ == "Exchange") {
      MPI_Request sent[2];
      check(MPI_Isend(out, n_, MPI_DOUBLE, left, 0, comm, &sent[0]), "MPI_Isend");
      check(MPI_Isend(out, n_, MPI_DOUBLE, right, 1, comm, &sent[1]), "MPI_Isend");
      check(MPI_Recv(in, n_, MPI_DOUBLE, right, 0, comm, MPI_STATUS_IGNORE), "MPI_Recv");
      check(MPI_Recv(in + n_, n_, MPI_DOUBLE, left, 1, comm, MPI_STATUS_IGNORE), "MPI_Recv");
      check(MPI_Waitall(2, sent, MPI_STATUSES_IGNORE), "MPI_Waitall");
    } else if (bench_ == "Allreduce") {
      check(MPI_Allreduce(MPI_IN_PLACE, out, n_, MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
    } else if (bench_ == "Reduce") {
      const int root = pmb::next_root(calls_, p_);
      check(MPI_Reduce(me == root ? MPI_IN_PLACE : out, me == root ? out : nullptr, n_, MPI_DOUBLE,
                       MPI_SUM, root, comm),
            "MPI_Reduce");
    } else if (bench_ == "Reduce_scatter") {
      check(MPI_Reduce_scatter_block(out, in, n_ / p_, MPI_DOUBLE, MPI_SUM, comm),
            "MPI_Reduce_scatter_block");
    } else if (bench_ == "Allgather") {
      check(MPI_Allgather(out, n_, MPI_DOUBLE, in, n_, MPI_DOUBLE, comm), "MPI_Allgather");
    } else if (bench_ == "Allgatherv") {
      check(
          MPI_Allgatherv(out, n_, MPI_DOUBLE, in, counts_.data(), displs_.data(), MPI_DOUBLE, comm),
          "MPI_Allgatherv");
    } else if (bench_ == "Alltoall") {
      check(MPI_Alltoall(out, n_, MPI_DOUBLE, in, n_, MPI_DOUBLE, comm), "MPI_Alltoall");
    } else if (bench_ == "Bcast") {
      check(MPI_Bcast(out, n_, MPI_DOUBLE, pmb::next_root(calls_, p_), comm), "MPI_Bcast");
    } else if (bench_ == "Barrier") {
      check(MPI_Barrier(comm), "MPI_Barrier");
    }
  }

 private:
  std::string_view bench_;
  int n_;
  int p_;
  int calls_ = 0;  // every rank runs the pattern as often as the others: all agree on the root
  std::vector<double> a_;
  std::vector<double> b_;
  std::vector<int> counts_;
  std::vector<int> displs_;
};

// PMB_MPI_LABEL names the run ("openmpi-tcp" for Open MPI over its TCP BTL only), else the
// library does.
std::string library_name() {
  if (const char* label = std::getenv("PMB_MPI_LABEL"); label != nullptr && *label != '\0') {
    return label;
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  const std::string text(version, static_cast<std::size_t>(length));
  if (text.find("Open MPI") != std::string::npos) return "openmpi";
  if (text.find("MPICH") != std::string::npos) return "mpich";
  return "mpi";
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string stack = library_name();
  pmb::for_each_point([&stack, rank, size](std::string_view bench, std::size_t bytes) {
    const int ranks = pmb::two_ranks_only(bench) ? 2 : size;
    benchmark::RegisterBenchmark(
        pmb::name(bench, stack, ranks, bytes).c_str(),
        [bench, bytes, ranks, rank](benchmark::State& state) {
          // Ranks beyond a 2-rank pattern sit in the barriers only.
          MPI_Comm comm = MPI_COMM_NULL;
          MPI_Comm_split(MPI_COMM_WORLD, rank < ranks ? 0 : MPI_UNDEFINED, rank, &comm);
          const int least_reps = pmb::repetitions(bytes);
          for (auto _ : state) {
            double slowest = 0;  // per call, the slowest rank's
            if (comm != MPI_COMM_NULL) {
              pattern work(bench, bytes, ranks);
              int me = 0;
              MPI_Comm_rank(comm, &me);
              const int reps = pmb::warm_up(
                  [&] { work.run(comm); },
                  [&](int& value) { MPI_Bcast(&value, 1, MPI_INT, 0, comm); }, me == 0, least_reps);
              MPI_Barrier(comm);
              double per_call = pmb::seconds_per_call(
                  reps, [&] { work.run(comm); }, [&] { work.write_input(); });
              MPI_Allreduce(&per_call, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
            }
            MPI_Bcast(&slowest, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            state.SetIterationTime(slowest);
          }
          if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
          pmb::label(state, bytes, ranks);
        })
        ->Apply(pmb::configure);
  });
  pmb::run_on_every_rank(rank, argc, argv);
  MPI_Finalize();
  return 0;
}
