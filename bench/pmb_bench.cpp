// SPDX-License-Identifier: MIT
// The PMB/IMB set (seed 002) on a stack whose ranks are processes: every collectives policy
// over the stack commx_add_variants built this program for (bench_pmb_shm, _tcp, _wan, _mpi),
// named as bench_collectives names the in-process runs ("Allreduce/commx-shm-ring/np4/1024"),
// so pmb_report.py sets them beside bench_mpi_collectives and tune_collectives.py makes the
// stack's table for coll::tuned from them.
//
//   commxrun -n 4 ./bench_pmb_shm --benchmark_out=shm.json --benchmark_out_format=json
//
// Every rank runs every benchmark with the same fixed repetitions (Google Benchmark's adaptive
// iteration counts would differ between ranks and deadlock them); rank 0 reports the slowest
// rank's time per call (IMB's t_max) and the other ranks report nothing.

#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <commx/coll/binomial.hpp>
#include <commx/coll/flat.hpp>
#include <commx/coll/hierarchical.hpp>
#include <commx/coll/ring.hpp>
#include <commx/coll/tuned.hpp>
#include <commx/ops.hpp>
#include <commx/variant.hpp>

#include "pmb.hpp"
#include "pmb_pattern.hpp"

namespace {

using world_comm = commx::variant::communicator;
using stack = world_comm::transport_type;

// One point (a collective at one size) for one policy.
template <class Policy>
void register_point(world_comm& world, std::string_view bench, std::size_t bytes) {
  using comm = commx::communicator<stack, Policy, world_comm::stats_type>;
  const bool p2p = pmb::point_to_point(bench);
  if (p2p && Policy::name != commx::coll::flat::name) return;  // no policy involved
  const int ranks = pmb::two_ranks_only(bench) ? 2 : world.size();
  const std::string label = p2p ? fmt::format("commx-{}", stack::name)
                                : fmt::format("commx-{}-{}", stack::name, Policy::name);
  benchmark::RegisterBenchmark(
      pmb::name(bench, label, ranks, bytes).c_str(),
      [&world, bench, bytes, ranks](benchmark::State& state) {
        // Ranks beyond a 2-rank pattern sit in the split and the broadcast only.
        comm part = world.template with_collectives<Policy>().split(
            world.rank() < ranks ? 0 : commx::undefined_color, world.rank());
        const int least_reps = pmb::repetitions(bytes);
        for (auto _ : state) {
          double per_call = 0;  // the slowest rank's
          if (!part.is_null()) {
            pmb::commx_pattern work(bench, bytes, ranks);
            const int reps =
                pmb::warm_up([&] { work.run(part); }, [&](int& value) { part.bcast(value, 0); },
                             part.rank() == 0, least_reps);
            part.barrier();
            per_call = pmb::seconds_per_call(
                reps, [&] { work.run(part); }, [&] { work.write_input(); });
            part.allreduce(per_call, commx::op::max{});
          }
          world.bcast(per_call, 0);
          state.SetIterationTime(per_call);
        }
        pmb::label(state, bytes, ranks);
      })
      ->Apply(pmb::configure);
}

// Point by point, every policy in turn: the policies of one point run within seconds of each
// other, so a slow spell of the machine falls on all of them (registered policy by policy, the
// last ran minutes after the first, and tuned, last, came out up to 17% slower than the very
// policy its table chose). Which policy goes first turns from point to point and round to
// round (pmb::for_each_point_turning).
template <class... Policies>
void register_policies(world_comm& world) {
  // The stack's own collectives (coll::native on mpi), when the variant names one.
  using own = world_comm::collectives_type;
  using registrar = void (*)(world_comm&, std::string_view, std::size_t);
  constexpr bool own_listed = (std::is_same_v<own, Policies> || ...);
  std::vector<registrar> each{&register_point<Policies>...};
  if constexpr (!own_listed) each.push_back(&register_point<own>);
  pmb::for_each_point_turning([&](std::string_view bench, std::size_t bytes, std::size_t turn) {
    pmb::in_turn(each.size(), turn, [&](std::size_t k) { each[k](world, bench, bytes); });
  });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    commx::run<world_comm>([&](world_comm& world) {
      if (world.size() < 2) {
        throw commx::error(commx::errc::invalid_argument,
                           fmt::format("{} needs at least 2 ranks, not {}",
                                       commx::variant::target_name, world.size()));
      }
      register_policies<commx::coll::flat, commx::coll::binomial, commx::coll::ring,
                        commx::coll::hierarchical, commx::coll::tuned>(world);
      pmb::run_on_every_rank(world.rank(), argc, argv);
    });
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", commx::variant::target_name, e.what());
    return 1;
  }
}
