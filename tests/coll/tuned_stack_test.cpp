// SPDX-License-Identifier: MIT
// coll::tuned on the transport under test (support/job.hpp) follows the table measured on that
// stack (coll/tuned_tables/<stack>.hpp): at each size where the table changes its choice, rank 0
// sends exactly the messages and bytes of the algorithm the table names. On a stack that models
// its links (transport::simgrid), of the algorithm the cost model names with the platform's cost.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "commx/coll/binomial.hpp"
#include "commx/coll/flat.hpp"
#include "commx/coll/hierarchical.hpp"
#include "commx/coll/ring.hpp"
#include "commx/coll/tuned.hpp"
#include "commx/detail/coll_port.hpp"
#include "coll/policies.hpp"
#include "support/job.hpp"

namespace {

using stack = commx::test::transport_under_test;
using commx::coll::detail::algorithm;
using commx::stats::op;
template <class Policy>
using counted = comm_for<Policy>;  // counting stats

static_assert(commx::coll::stack_of<commx::detail::coll_port<stack, commx::stats::none>>() ==
                  stack::name,
              "a collective's port names the stack it runs over");

// What the ranks sent in one collective, together: messages and bytes.
using sent = std::pair<std::uint64_t, std::uint64_t>;
// (collective, bytes per rank; reduce_scatter: its whole input) -> what the ranks sent.
using footprint = std::map<std::pair<op, std::size_t>, sent>;

constexpr std::array measured{op::allreduce, op::bcast, op::allgather, op::reduce_scatter};

// The sizes at which this stack's table starts a rule for the collectives measured here, up to
// 1 MiB (larger ones cost time and choose among the same algorithms).
std::set<std::size_t> sizes_of_rules() {
  std::set<std::size_t> sizes{8};
  for (const auto& rule : commx::coll::detail::tuned_table_for(stack::name).rules) {
    const bool here = std::ranges::find(measured, rule.collective) != measured.end();
    if (here && rule.min_bytes > 0 && rule.min_bytes <= (std::size_t{1} << 20)) {
      sizes.insert(rule.min_bytes);
    }
  }
  return sizes;
}

template <class Policy>
footprint footprint_of(int n, const std::set<std::size_t>& sizes) {
  footprint result;
  commx::test::job<counted<Policy>>(n, [&](counted<Policy>& world) {
    const auto p = static_cast<std::size_t>(world.size());
    for (std::size_t bytes : sizes) {
      std::vector<double> data(bytes / sizeof(double), 1.0);
      std::vector<double> all(data.size() * p);
      // reduce_scatter's input: at least `bytes`, in p equal blocks.
      const std::size_t block = (data.size() + p - 1) / p;
      const std::vector<double> spread(block * p, 1.0);
      std::vector<double> mine(block);
      for (op kind : measured) {
        const auto before = world.stats().of(kind);
        if (kind == op::allreduce) world.allreduce(std::span<double>(data), std::plus<>{});
        if (kind == op::bcast) world.bcast(std::span<double>(data), 0);
        if (kind == op::allgather) {
          world.allgather(std::span<const double>(data), std::span<double>(all));
        }
        if (kind == op::reduce_scatter) {
          world.reduce_scatter_block(std::span<const double>(spread), std::span<double>(mine),
                                     std::plus<>{});
        }
        const auto& after = world.stats().of(kind);
        // Summed over the ranks: flat's and ring's reduce_scatter differ only in what ranks
        // other than 0 send.
        std::array<std::uint64_t, 2> delta{after.messages_sent - before.messages_sent,
                                           after.bytes_sent - before.bytes_sent};
        world.allreduce(std::span<std::uint64_t>(delta), std::plus<>{});
        // Rank 0 alone records: on inproc the ranks are threads sharing `result`.
        if (world.rank() == 0) {
          const std::size_t size =
              kind == op::reduce_scatter ? spread.size() * sizeof(double) : bytes;
          result[{kind, size}] = {delta[0], delta[1]};
        }
      }
    }
  });
  return result;
}

// The platform's cost between a job of n ranks' first and last rank, where the stack models it.
template <class T = stack>
std::optional<commx::coll::detail::link_cost> modelled_link([[maybe_unused]] int n) {
  if constexpr (requires(T & t) { t.modelled_link(); }) {
    std::optional<commx::coll::detail::link_cost> link;
    commx::test::job<counted<commx::coll::flat>>(n, [&](auto& world) {
      const auto route = world.transport().modelled_link();
      if (world.rank() == 0)
        link = commx::coll::detail::link_cost{route.latency_us, route.us_per_byte};
    });
    return link;
  } else {
    return std::nullopt;
  }
}

}  // namespace

TEST_CASE("tuned follows the table measured on the stack it runs over", "[coll][tuned]") {
  const auto sizes = sizes_of_rules();
  for (int n : commx::test::job_rank_counts()) {
    if (n < 2) continue;
    const std::map<algorithm, footprint> by_algorithm{
        {algorithm::flat, footprint_of<commx::coll::flat>(n, sizes)},
        {algorithm::binomial, footprint_of<commx::coll::binomial>(n, sizes)},
        {algorithm::ring, footprint_of<commx::coll::ring>(n, sizes)},
        {algorithm::hierarchical, footprint_of<commx::coll::hierarchical>(n, sizes)}};
    const footprint tuned = footprint_of<commx::coll::tuned>(n, sizes);
    if (tuned.empty()) continue;  // not rank 0 of this job
    const auto modelled = modelled_link(n);
    for (const auto& [what, got] : tuned) {
      const auto [kind, bytes] = what;
      // As the policy sees the node: this machine's load, or a core per rank when simulated;
      // by the platform's cost where the stack models its links.
      const algorithm named =
          modelled ? commx::coll::detail::cheapest(kind, n, bytes, *modelled)
                   : commx::coll::tuned::choose(stack::name, kind, n, bytes,
                                                commx::coll::detail::ranks_per_core_for<stack>(n));
      INFO(commx::stats::name(kind)
           << " of " << bytes << " B on " << n << " ranks of " << stack::name
           << ": the table names " << commx::coll::detail::name(named));
      const sent expected = by_algorithm.at(named).at(what);
      CHECK(got.first == expected.first);
      CHECK(got.second == expected.second);
    }
  }
}

TEST_CASE("a layered stack takes its outermost level's table, an unknown one inproc's",
          "[coll][tuned]") {
  using commx::coll::detail::tuned_table_for;
  CHECK(tuned_table_for("shm+tcp").rules.data() == tuned_table_for("tcp").rules.data());
  CHECK(tuned_table_for("shm+tcp+wan").rules.data() == tuned_table_for("wan").rules.data());
  CHECK(tuned_table_for("mpi+wan").rules.data() == tuned_table_for("wan").rules.data());
  CHECK(tuned_table_for("shm+ucx").rules.data() == tuned_table_for("ucx").rules.data());
  CHECK(tuned_table_for("ucx").rules.data() != tuned_table_for("inproc").rules.data());
  CHECK(tuned_table_for("").rules.data() == tuned_table_for("inproc").rules.data());
  CHECK(tuned_table_for("shm").rules.data() != tuned_table_for("inproc").rules.data());
}
