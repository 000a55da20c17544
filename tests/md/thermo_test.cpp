// SPDX-License-Identifier: MIT
// The 500-atom run (bench/in.lj on a 5x5x5 box) against LAMMPS's thermo table on 1, 2 and 4
// in-process ranks under every collectives policy; the bits promised equal; the bytes the
// force sum moves; the reference reader and comparison themselves.

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "commx/coll/binomial.hpp"
#include "commx/coll/flat.hpp"
#include "commx/coll/hierarchical.hpp"
#include "commx/coll/ring.hpp"
#include "commx/coll/tuned.hpp"
#include "commx/communicator.hpp"
#include "commx/launch.hpp"
#include "commx/stats.hpp"
#include "reference_files.hpp"
#include "simulate.hpp"
#include "thermo_reference.hpp"

namespace {

template <class Policy>
using comm_for = commx::communicator<commx::transport::inproc, Policy, commx::stats::counting>;
using policies = std::tuple<commx::coll::flat, commx::coll::binomial, commx::coll::ring,
                            commx::coll::hierarchical, commx::coll::tuned>;

md::run_config small_run() {
  md::run_config config;
  config.cells = 5;  // 500 atoms
  return config;
}

template <class Comm>
md::run_outcome run_job(int ranks, const md::run_config& config, bool reproducible) {
  md::run_outcome root_outcome;
  commx::inproc_options options;
  options.comm.reduction =
      reproducible ? commx::reduction_order::reproducible : commx::reduction_order::policy;
  commx::run_inproc<Comm>(
      ranks,
      [&](Comm& world) {
        md::run_outcome outcome = md::simulate(world, config, [](const md::thermo_row&) {});
        if (world.rank() == 0) root_outcome = std::move(outcome);
      },
      options);
  return root_outcome;
}

bool same_bits(const std::vector<md::thermo_row>& a, const std::vector<md::thermo_row>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const double x[] = {a[k].temp, a[k].e_pair, a[k].e_mol, a[k].tot_eng, a[k].press};
    const double y[] = {b[k].temp, b[k].e_pair, b[k].e_mol, b[k].tot_eng, b[k].press};
    if (a[k].step != b[k].step || std::memcmp(x, y, sizeof x) != 0) return false;
  }
  return true;
}

const std::vector<md::thermo_row>& lammps_500() {
  static const std::vector<md::thermo_row> table =
      md::read_thermo_table(md::test::reference_path("thermo.lj500.txt"));
  return table;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("500 atoms match LAMMPS on 1, 2 and 4 ranks", "", policies) {
  using comm = comm_for<TestType>;
  for (const int ranks : {1, 2, 4}) {
    CAPTURE(TestType::name, ranks);
    const md::run_outcome run = run_job<comm>(ranks, small_run(), false);
    REQUIRE(run.thermo.size() == 11);  // steps 0, 10, ..., 100
    const md::thermo_comparison match = md::compare_thermo(run.thermo, lammps_500());
    CHECK(match.steps_compared == 11);
    CHECK(match.max_error_step0 <= 1e-10);
    CHECK(match.max_error <= 1e-8);
    CHECK(match.matches);
    CHECK(run.replicas_agree);
    REQUIRE(run.ranks.size() == static_cast<std::size_t>(ranks));
    // The pairs are shared out, neither lost nor duplicated: after the step-100 rebuild,
    // LAMMPS 29Sep2021 on this input reports "Total # of neighbors = 18766".
    double pairs = 0;
    for (const auto& r : run.ranks) pairs += r.pairs;
    CHECK(pairs == 18766);

    // Same policy, same rank count, run again: the same bits (nothing depends on timing).
    CHECK(same_bits(run.thermo, run_job<comm>(ranks, small_run(), false).thermo));
  }
}

TEST_CASE("in rank order, every policy gives the same bits at a given rank count") {
  for (const int ranks : {2, 4}) {
    CAPTURE(ranks);
    const auto flat = run_job<comm_for<commx::coll::flat>>(ranks, small_run(), true).thermo;
    CHECK(
        same_bits(flat, run_job<comm_for<commx::coll::binomial>>(ranks, small_run(), true).thermo));
    CHECK(same_bits(flat, run_job<comm_for<commx::coll::ring>>(ranks, small_run(), true).thermo));
    CHECK(same_bits(flat,
                    run_job<comm_for<commx::coll::hierarchical>>(ranks, small_run(), true).thermo));
    CHECK(same_bits(flat, run_job<comm_for<commx::coll::tuned>>(ranks, small_run(), true).thermo));
    // And the comparison is not vacuous: other rank counts sum in other orders.
    CHECK(md::compare_thermo(flat, lammps_500()).matches);
  }
}

TEST_CASE("a flat force sum on 2 ranks moves 3N+2 doubles each way per step") {
  md::run_config config = small_run();
  config.steps = 20;
  const auto run = run_job<comm_for<commx::coll::flat>>(2, config, false);
  REQUIRE(run.ranks.size() == 2);
  const double buffer_bytes = (3.0 * 500 + 2) * sizeof(double);
  // Flat: rank 1 sends its partial sums to rank 0, rank 0 sends the total back.
  for (const auto& r : run.ranks) {
    CHECK(r.counted == 1);
    CHECK(r.bytes_sent == buffer_bytes * static_cast<double>(config.steps));
    CHECK(r.bytes_received == buffer_bytes * static_cast<double>(config.steps));
    CHECK(r.collective > 0);
    CHECK(r.send + r.wait <= r.collective);
    CHECK(r.collective <= r.loop);
  }
}

TEST_CASE("the thermo comparison catches a difference beyond its tolerance") {
  std::vector<md::thermo_row> run = lammps_500();
  CHECK(md::compare_thermo(run, lammps_500()).matches);
  run[5].press *= 1 + 1e-7;  // beyond 1e-8 at step 50
  const auto off = md::compare_thermo(run, lammps_500());
  CHECK_FALSE(off.matches);
  CHECK(off.worst_step == 50);
  run = lammps_500();
  run[0].temp *= 1 + 1e-9;  // within 1e-8 but not within step 0's 1e-10
  CHECK_FALSE(md::compare_thermo(run, lammps_500()).matches);
  run = lammps_500();
  for (auto& row : run) row.step += 1;  // no step in common: not a match
  CHECK_FALSE(md::compare_thermo(run, lammps_500()).matches);
}

TEST_CASE("the reference reader refuses missing and garbled files") {
  CHECK_THROWS_WITH(md::read_thermo_table("/nonexistent/thermo.txt"),
                    Catch::Contains("cannot open"));
  // A dump is not a thermo table.
  CHECK_THROWS_WITH(md::read_thermo_table(md::test::reference_path("dump.lj500.step0")),
                    Catch::Contains("not a number"));
  const std::string short_rows = "md_thermo_test_short.txt";
  std::ofstream(short_rows) << "Step Temp E_pair\n0 1.44 -6.7\n";
  CHECK_THROWS_WITH(md::read_thermo_table(short_rows), Catch::Contains("at least 6"));
  const std::string empty = "md_thermo_test_empty.txt";
  std::ofstream(empty) << "# nothing\n\n";
  CHECK_THROWS_WITH(md::read_thermo_table(empty), Catch::Contains("no thermo rows"));
  std::remove(short_rows.c_str());
  std::remove(empty.c_str());
}
