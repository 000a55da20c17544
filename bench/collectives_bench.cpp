// SPDX-License-Identifier: MIT
// The PMB/IMB set on commx: every collectives policy over the in-process stack, ranks as
// threads. Each benchmark is one job that times `pmb::repetitions` calls on every rank and
// reports the slowest rank's time per call (IMB's t_max), as manual time.
//
//   PMB_RANKS=4 ./bench_collectives --benchmark_out=commx.json --benchmark_out_format=json

#include <benchmark/benchmark.h>

#include <atomic>
#include <vector>

#include "commx/coll/binomial.hpp"
#include "commx/coll/flat.hpp"
#include "commx/coll/hierarchical.hpp"
#include "commx/coll/ring.hpp"
#include "commx/coll/tuned.hpp"
#include "commx/launch.hpp"
#include "commx/ops.hpp"
#include "pmb.hpp"

namespace {

// One PMB pattern with its buffers, allocated once per job so the timed loop only communicates.
class pattern {
 public:
  pattern(std::string_view bench, std::size_t bytes, int ranks)
      : bench_(bench),
        n_(bytes / sizeof(double)),
        p_(static_cast<std::size_t>(ranks)),
        a_(std::max<std::size_t>(n_ * p_, 1), 1.0),
        b_(std::max<std::size_t>(n_ * p_, 1), 0.0),
        counts_(p_, n_) {}

  template <class Comm>
  void run(Comm& world) {
    const int me = world.rank();
    const int right = (me + 1) % world.size();
    const int left = (me + world.size() - 1) % world.size();
    const std::span<double> out(a_.data(), n_);
    const std::span<double> in(b_.data(), n_);
    if (bench_ == "PingPong") {
      if (me == 0) {
        world.send(1, 0, out);
        world.recv(1, 0, in);
      } else if (me == 1) {
        world.recv(0, 0, in);
        world.send(0, 0, out);
      }
    } else if (bench_ == "PingPing") {
      if (me < 2) {
        auto sent = world.isend(1 - me, 0, out);
        world.recv(1 - me, 0, in);
        sent.wait();
      }
    } else if (bench_ == "Sendrecv") {
      world.sendrecv(right, 0, out, left, 0, in);
    } else if (bench_ == "Exchange") {
      const std::span<double> in2(b_.data() + n_, n_);
      auto to_left = world.isend(left, 0, out);
      auto to_right = world.isend(right, 1, out);
      world.recv(right, 0, in);
      world.recv(left, 1, in2);
      to_left.wait();
      to_right.wait();
    } else if (bench_ == "Allreduce") {
      world.allreduce(out, std::plus<>{});
    } else if (bench_ == "Reduce") {
      world.reduce(out, std::plus<>{}, 0);
    } else if (bench_ == "Reduce_scatter") {
      world.reduce_scatter_block(std::span<const double>(a_.data(), (n_ / p_) * p_),
                                 std::span<double>(b_.data(), n_ / p_), std::plus<>{});
    } else if (bench_ == "Allgather") {
      world.allgather(std::span<const double>(out), std::span<double>(b_.data(), n_ * p_));
    } else if (bench_ == "Allgatherv") {
      world.allgatherv(std::span<const double>(out), std::span<double>(b_.data(), n_ * p_),
                       counts_);
    } else if (bench_ == "Alltoall") {
      world.alltoall(std::span<const double>(a_.data(), n_ * p_),
                     std::span<double>(b_.data(), n_ * p_));
    } else if (bench_ == "Bcast") {
      world.bcast(out, 0);
    } else if (bench_ == "Barrier") {
      world.barrier();
    }
  }

 private:
  std::string_view bench_;
  std::size_t n_;
  std::size_t p_;
  std::vector<double> a_;
  std::vector<double> b_;
  std::vector<std::size_t> counts_;
};

template <class Policy>
void register_policy() {
  using comm = commx::communicator<commx::transport::inproc, Policy>;
  for (std::string_view bench : pmb::collectives) {
    const bool p2p =
        bench == "PingPong" || bench == "PingPing" || bench == "Sendrecv" || bench == "Exchange";
    if (p2p && Policy::name != commx::coll::flat::name) continue;  // no policy involved
    const int ranks = pmb::two_ranks_only(bench) ? 2 : pmb::ranks();
    const std::string stack = p2p ? "commx-inproc" : "commx-inproc-" + std::string(Policy::name);
    for (std::size_t bytes : pmb::sizes) {
      if (bench == "Barrier" && bytes != 0) continue;
      benchmark::RegisterBenchmark(
          pmb::name(bench, stack, ranks, bytes).c_str(),
          [bench, bytes, ranks](benchmark::State& state) {
            const int reps = pmb::repetitions(bytes);
            for (auto _ : state) {
              std::atomic<double> slowest{0};
              commx::run_inproc<comm>(ranks, [&](comm& world) {
                pattern work(bench, bytes, ranks);
                work.run(world);  // warm-up: first touch of the buffers
                world.barrier();
                const auto start = commx::clock::now();
                for (int i = 0; i < reps; ++i) work.run(world);
                double seconds = std::chrono::duration<double>(commx::clock::now() - start).count();
                world.allreduce(seconds, commx::op::max{});
                if (world.rank() == 0) slowest = seconds;
              });
              state.SetIterationTime(slowest / reps);
            }
            state.counters["bytes"] = static_cast<double>(bytes);
            state.counters["ranks"] = ranks;
          })
          ->Iterations(1)
          ->Repetitions(3)
          ->ReportAggregatesOnly(true)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_policy<commx::coll::flat>();
  register_policy<commx::coll::binomial>();
  register_policy<commx::coll::ring>();
  register_policy<commx::coll::hierarchical>();
  register_policy<commx::coll::tuned>();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
