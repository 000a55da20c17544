// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `coll::tuned`: picks an algorithm (flat, binomial, ring, hierarchical) for each call by
/// collective, rank count and message size from the table measured on the stack it runs over
/// (tuned_table.hpp: one table per stack, chosen at compile time by the port's stack), and
/// beyond the rank counts the table was measured at, by the cost model (detail/cost_model.hpp:
/// the stack's fitted latency and time per byte, each algorithm's rounds and bytes, and where
/// ranks take turns on the cores, the rounds that wait for every rank's turn). On a simulated
/// platform (a transport with `modelled_link()`: transport::simgrid) the cost model chooses at
/// every count, with the platform's latency and bandwidth between the job's farthest ranks. The
/// choice can be forced per collective from the environment, e.g. COMMX_COLL_ALLREDUCE=ring
/// or COMMX_COLL_BCAST=flat; every rank must see the same setting.
///
/// Message size is bytes per rank, the same on every rank for the regular collectives; the
/// "v" collectives, whose sizes differ between ranks, choose by rank count alone so that all
/// ranks choose alike. reduce_scatter chooses by its input, the whole vector every rank passes
/// (the counts are the same on every rank, so is their sum).

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "commx/coll/binomial.hpp"
#include "commx/coll/concept.hpp"
#include "commx/coll/flat.hpp"
#include "commx/coll/hierarchical.hpp"
#include "commx/coll/ring.hpp"
#include "commx/coll/detail/node_load.hpp"
#include "commx/coll/tuned_table.hpp"
#include "commx/error.hpp"
#include "commx/stats.hpp"

namespace commx::coll {

namespace detail {

[[nodiscard]] constexpr std::string_view name(algorithm a) {
  switch (a) {
    case algorithm::flat:
      return flat::name;
    case algorithm::binomial:
      return binomial::name;
    case algorithm::ring:
      return ring::name;
    case algorithm::hierarchical:
      return hierarchical::name;
  }
  return "?";
}

// COMMX_COLL_<COLLECTIVE> for every collective, read once.
inline const std::array<std::optional<algorithm>, stats::op_count>& forced_algorithms() {
  static const auto forced = [] {
    std::array<std::optional<algorithm>, stats::op_count> table{};
    for (std::size_t i = 0; i < stats::op_count; ++i) {
      std::string variable = "COMMX_COLL_";
      for (char c : stats::name(static_cast<stats::op>(i))) {
        variable += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      }
      const char* value = std::getenv(variable.c_str());  // NOLINT(concurrency-mt-unsafe)
      if (value == nullptr || *value == '\0') continue;
      for (algorithm a :
           {algorithm::flat, algorithm::binomial, algorithm::ring, algorithm::hierarchical}) {
        if (name(a) == value) table[i] = a;
      }
      if (!table[i]) {
        throw error(
            errc::invalid_argument,
            fmt::format("{}='{}' is none of flat, binomial, ring, hierarchical", variable, value));
      }
    }
    return table;
  }();
  return forced;
}

}  // namespace detail

/// Picks flat, binomial, ring or hierarchical for each call from the measured table, unless
/// COMMX_COLL_<COLLECTIVE> forces one (see the file comment).
struct tuned {
  /// The policy's name, as benches and examples print it.
  static constexpr std::string_view name = "tuned";
  /// How the policy works, in one line.
  static constexpr std::string_view description =
      "per call, the algorithm a measured table picks for the collective, ranks and size";

  /// Works over every transport.
  template <class Transport>
  static constexpr bool supports = true;

  /// The algorithm tuned uses on the stack named `stack` (a transport's name) for
  /// `collective` on `ranks` ranks with `bytes` bytes per rank, on a node whose cores run
  /// `ranks_per_core` of the job's ranks each, in turns (1: each rank has a core).
  static detail::algorithm choose(std::string_view stack, stats::op collective, int ranks,
                                  std::size_t bytes, int ranks_per_core) {
    const detail::measured_table table = detail::tuned_table_for(stack);
    return choose_from(table.rules,
                       {table.ranks, table.cores, ranks_per_core > 1, std::max(ranks_per_core, 1)},
                       detail::link_cost_for(stack), collective, ranks, bytes);
  }
  static detail::algorithm choose(std::string_view, stats::op, int, std::size_t, bool) = delete;
  /// The same on this process's node (detail/node_load.hpp).
  static detail::algorithm choose(std::string_view stack, stats::op collective, int ranks,
                                  std::size_t bytes) {
    return choose(stack, collective, ranks, bytes, detail::this_node().ranks_per_core(ranks));
  }

  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port>
  static void barrier(Port& p) {
    dispatch(p, stats::op::barrier, p.size(), 0, [&](auto algo) { algo.barrier(p); });
  }
  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port, class E>
  static void bcast(Port& p, std::span<E> data, int root) {
    dispatch(p, stats::op::bcast, p.size(), data.size_bytes(),
             [&](auto algo) { algo.bcast(p, data, root); });
  }
  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port, class E, class Op>
  static void reduce(Port& p, std::span<E> data, Op op, int root) {
    dispatch(p, stats::op::reduce, p.size(), data.size_bytes(),
             [&](auto algo) { algo.reduce(p, data, op, root); });
  }
  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port, class E, class Op>
  static void allreduce(Port& p, std::span<E> data, Op op) {
    dispatch(p, stats::op::allreduce, p.size(), data.size_bytes(),
             [&](auto algo) { algo.allreduce(p, data, op); });
  }
  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port, class E>
  static void gather(Port& p, std::span<const E> in, std::span<E> out, int root) {
    dispatch(p, stats::op::gather, p.size(), in.size_bytes(),
             [&](auto algo) { algo.gather(p, in, out, root); });
  }
  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port, class E>
  static void scatter(Port& p, std::span<const E> in, std::span<E> out, int root) {
    dispatch(p, stats::op::scatter, p.size(), out.size_bytes(),
             [&](auto algo) { algo.scatter(p, in, out, root); });
  }
  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port, class E>
  static void allgather(Port& p, std::span<const E> in, std::span<E> out) {
    dispatch(p, stats::op::allgather, p.size(), in.size_bytes(),
             [&](auto algo) { algo.allgather(p, in, out); });
  }
  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port, class E>
  static void alltoall(Port& p, std::span<const E> in, std::span<E> out) {
    dispatch(p, stats::op::alltoall, p.size(), in.size_bytes() / static_cast<std::size_t>(p.size()),
             [&](auto algo) { algo.alltoall(p, in, out); });
  }
  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port, class E, class Op>
  static void scan(Port& p, std::span<E> data, Op op) {
    dispatch(p, stats::op::scan, p.size(), data.size_bytes(),
             [&](auto algo) { algo.scan(p, data, op); });
  }
  /// The algorithm chosen for this rank count and message size, or the forced one.
  template <class Port, class E, class Op>
  static void exscan(Port& p, std::span<E> data, Op op) {
    dispatch(p, stats::op::exscan, p.size(), data.size_bytes(),
             [&](auto algo) { algo.exscan(p, data, op); });
  }
  /// The algorithm chosen for this rank count (all ranks choose alike), or the forced one.
  template <class Port, class E>
  static void gatherv(Port& p, std::span<const E> in, std::span<E> out,
                      std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                      int root) {
    dispatch(p, stats::op::gatherv, p.size(), 0,
             [&](auto algo) { algo.gatherv(p, in, out, counts, displs, root); });
  }
  /// The algorithm chosen for this rank count (all ranks choose alike), or the forced one.
  template <class Port, class E>
  static void scatterv(Port& p, std::span<const E> in, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs, std::span<E> out, int root) {
    dispatch(p, stats::op::scatterv, p.size(), 0,
             [&](auto algo) { algo.scatterv(p, in, counts, displs, out, root); });
  }
  /// The algorithm chosen for this rank count (all ranks choose alike), or the forced one.
  template <class Port, class E>
  static void allgatherv(Port& p, std::span<const E> in, std::span<E> out,
                         std::span<const std::size_t> counts, std::span<const std::size_t> displs) {
    dispatch(p, stats::op::allgatherv, p.size(), 0,
             [&](auto algo) { algo.allgatherv(p, in, out, counts, displs); });
  }
  /// The algorithm chosen for this rank count (all ranks choose alike), or the forced one.
  template <class Port, class E>
  static void alltoallv(Port& p, std::span<const E> in, std::span<const std::size_t> send_counts,
                        std::span<const std::size_t> send_displs, std::span<E> out,
                        std::span<const std::size_t> recv_counts,
                        std::span<const std::size_t> recv_displs) {
    dispatch(p, stats::op::alltoallv, p.size(), 0, [&](auto algo) {
      algo.alltoallv(p, in, send_counts, send_displs, out, recv_counts, recv_displs);
    });
  }
  /// The algorithm chosen for this rank count and the input's size (every rank's input holds
  /// the sum of the same counts), or the forced one.
  template <class Port, class E, class Op>
  static void reduce_scatter(Port& p, std::span<E> data, std::span<const std::size_t> counts,
                             Op op) {
    dispatch(p, stats::op::reduce_scatter, p.size(), data.size_bytes(),
             [&](auto algo) { algo.reduce_scatter(p, data, counts, op); });
  }

 private:
  // Where a table was measured, and whether it holds for this job's node.
  struct measured_where {
    int ranks;            // the largest count measured
    int cores;            // the measuring machine's
    bool oversubscribed;  // this job's node runs more ranks than cores, as that machine did
    int ranks_per_core;   // on this job's node: 1 where each rank has a core
  };

  static detail::algorithm choose_from(std::span<const detail::tuning_rule> rules,
                                       measured_where where, const detail::link_cost& link,
                                       stats::op collective, int ranks, std::size_t bytes) {
    if (auto forced = detail::forced_algorithms()[static_cast<std::size_t>(collective)]) {
      return *forced;
    }
    // Rules measured with ranks taking turns on the cores hold only where they do here.
    const bool table_holds = ranks <= where.ranks && (ranks <= where.cores || where.oversubscribed);
    if (!table_holds) return detail::cheapest(collective, ranks, bytes, link, where.ranks_per_core);
    detail::algorithm choice = detail::algorithm::binomial;
    for (const detail::tuning_rule& rule : rules) {
      if (rule.collective == collective && ranks >= rule.min_ranks && bytes >= rule.min_bytes) {
        choice = rule.use;
      }
    }
    return choice;
  }

  // Calls `run` with a value of the chosen policy type: one switch, no virtual dispatch. The
  // port's table is found and indexed by collective at compile time, so a call compares no
  // stack names and reads only its collective's rules.
  template <class Port, class Run>
  static void dispatch(Port& port, stats::op collective, int ranks, std::size_t bytes, Run&& run) {
    static constexpr std::span<const detail::tuning_rule> table =
        detail::tuned_table_for(stack_of<Port>()).rules;
    static_assert(detail::grouped_by_collective(table),
                  "a tuned table must list each collective's rules together");
    static constexpr detail::rules_by_collective rules = detail::index_by_collective(table);
    static constexpr int measured = detail::tuned_table_for(stack_of<Port>()).ranks;
    static constexpr int cores = detail::tuned_table_for(stack_of<Port>()).cores;
    static constexpr detail::link_cost link = detail::link_cost_for(stack_of<Port>());
    // The node matters where the table's rules were measured with ranks taking turns, and
    // beyond the table, where the model charges the turns.
    const auto choice = [&] {
      // A stack that models its links (transport::simgrid) is weighed by its platform's cost,
      // at every count: the tables were measured on a real machine.
      if constexpr (requires { port.endpoint().modelled_link().us_per_byte; }) {
        const auto route = port.endpoint().modelled_link();
        const detail::link_cost modelled{route.latency_us, route.us_per_byte};
        return choose_from({}, {0, 0, false, 1}, modelled, collective, ranks, bytes);
      } else {
        const int per_core =
            ranks > cores || ranks > measured ? detail::ranks_per_core_for<Port>(ranks) : 1;
        const measured_where where{measured, cores, per_core > 1, per_core};
        return choose_from(rules[static_cast<std::size_t>(collective)], where, link, collective,
                           ranks, bytes);
      }
    };
    switch (choice()) {
      case detail::algorithm::flat:
        return run(flat{});
      case detail::algorithm::binomial:
        return run(binomial{});
      case detail::algorithm::ring:
        return run(ring{});
      case detail::algorithm::hierarchical:
        return run(hierarchical{});
    }
  }
};

}  // namespace commx::coll
