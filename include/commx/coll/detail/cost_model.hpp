// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What each collectives algorithm costs by the postal model (seed 000; Thakur, Rabenseifner
/// and Gropp, "Optimization of collective communication operations in MPICH", 2005): a message
/// of n bytes costs alpha + n beta, a reduction folds at gamma per byte, and an algorithm costs
/// its rounds' latencies plus the bytes on its critical path. `coll::tuned` chooses by it
/// beyond the rank counts its tables were measured at (tuned.hpp); tests/coll hold it to the
/// formulas below at 64 and 256 ranks.
///
/// Notation: p ranks, n the bytes per rank the call passes (tuned's `bytes`: for allgather and
/// gather a rank's block, for alltoall one block between two ranks, for reduce_scatter the
/// whole input), L = ceil(log2 p), m = p - 2^floor(log2 p) the ranks beyond a power of two.
/// The "v" collectives are called with n = 0: rounds alone decide (allgatherv: (p-1) a flat and
/// ring, L a binomial, m > 0 adds 2 a; gatherv, scatterv, alltoallv: (p-1) a).
///
/// | collective | flat | binomial | ring |
/// |---|---|---|---|
/// | barrier | 2(p-1) a | L a (dissemination) | = binomial |
/// | bcast | (p-1)(a + n b) | L (a + n b) | L a + 2 (p-1)/p n b + (p-1) a (scatter, ring allgather) from 64 KiB and 4 ranks (and as many elements as ranks, which the model takes for granted); 2 L a + 2 (p-1)/p n b (scatter, recursive doubling) instead on a power of two from 8 ranks; else binomial |
/// | reduce | (p-1)(a + n b + n g) | L (a + n b + n g) | = binomial |
/// | allreduce | reduce + bcast, flat | L (a + n b + n g) below 32 KiB; by halves 2 L a + 2 n b + n g above; m > 0 adds 2 (a + n b); in two waves (where ranks crowd the cores: binomial::in_two_waves) 2 L (a + n b) + L n g | 2 (p-1) a + 2 (p-1)/p n b + (p-1)/p n g |
/// | gather, scatter | (p-1)(a + n b) | L a + (p-1) n b | = binomial |
/// | allgather | gather + bcast of p n, flat | L a + (p-1) n b (recursive doubling; m > 0 adds 2 (a + p n b)) | (p-1)(a + n b) |
/// | alltoall | (p-1)(a + n b), all at once | (p-1)(a + n b), pairwise | = binomial |
/// | scan, exscan | (p-1)(a + n b + n g), a chain | L (a + n b + n g) | = binomial |
/// | reduce_scatter | reduce + scatter, flat | = flat | (p-1)(a + n/p b + n/p g) |
///
/// flat's "all at once" exchanges (alltoall, allgatherv) post every message together, so their
/// latencies overlap where the transport can carry them in parallel; the model charges them in
/// full, which is what a rank pays when its peers outnumber the cores.
///
/// Where ranks take turns on the cores (more of them than cores on one machine: node_load.hpp),
/// a round that every rank must take part in before any goes on waits until each has had its
/// turn: it costs k t, k ranks per core and t a rank's turn (`turn_us`: a poll and a yield).
/// On this 2-core machine an 8-byte allreduce over shm took 1.8-2.9 us per round and rank of a
/// core from 32 to 256 ranks, by flat (2 rounds) and by recursive doubling (L rounds) alike, and
/// 13-16 us over tcp, so a tree's L rounds cost more than flat's root handling p-1 messages
/// (bench/HISTORY.md, 2026-11-29: flat 0.25-0.4x binomial at 64-256 ranks on shm, 0.2-0.25x on
/// tcp). Such rounds, R:
///
/// | collective | flat | binomial | ring |
/// |---|---|---|---|
/// | barrier | 2 | L | L |
/// | allreduce | 2 | L below 32 KiB, 2 L above; m > 0 adds 2; in two waves 2 | 2 (p-1) |
/// | allgather | 2 | L; m > 0 adds 2 | p-1 |
/// | reduce_scatter | 2 | 2 | p-1 |
/// | alltoall, alltoallv | 1 | p-1 | p-1 |
/// | allgatherv | 1 | L; m > 0 adds 2 | p-1 |
/// | bcast, reduce, gather(v), scatter(v), scan, exscan | 0 | 0 | 0 |
///
/// A rooted collective has none: each rank leaves once its part is done, so one call overlaps
/// the next and its cost is the messages the busiest rank handles, as the postal model has it
/// (8-byte broadcasts from rotating roots: binomial 0.2-0.5x flat at 32-256 ranks).
///
/// flat's root also takes its p-1 messages one after another, and a message above the stack's
/// eager limit (`eager_bytes`) waits for its receiver to ask for it: where ranks take turns,
/// each such message costs the root a turn of the run queue, k t. So flat's bcast, reduce,
/// gather and scatter add (p-1) k t when their n is above the limit; allreduce (a reduce and a
/// bcast of n) twice that; allgather and reduce_scatter a term for each of their two halves
/// (a gather of n and a bcast of p n; a reduce of n and a scatter of n/p). (shm+tcp on 4
/// simulated nodes, 128 ranks: flat's 64 KiB allreduce took 20.2 ms with shm's 32 KiB limit,
/// 7.0 ms with it raised to 64 KiB, where binomial took 10.4.) The other algorithms' rounds
/// are charged as above either way.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <limits>

#include "commx/coll/binomial.hpp"
#include "commx/coll/detail/tuning_rule.hpp"
#include "commx/stats.hpp"

namespace commx::coll::detail {

/// One stack's point-to-point cost: latency and time per byte (scripts/alpha_beta.py), and
/// the time per byte of a reduction's fold.
struct link_cost {
  double alpha_us;
  double beta_us_per_byte;
  double gamma_us_per_byte = 0.0002;  // a sum of doubles: about 5 GB/s on this machine's cores
  // A rank's turn on a shared core (see the file comment; each stack's: tuned_table.hpp).
  double turn_us = 2.5;
  // The largest message sent without the receiver asking for it first.
  std::size_t eager_bytes = std::numeric_limits<std::size_t>::max();
};

/// The smallest bcast that ring sends as a scatter and an allgather (ring.hpp).
inline constexpr std::size_t scatter_allgather_bcast_bytes = std::size_t{64} << 10;

/// Whether ring's bcast (from scatter_allgather_bcast_bytes) on `ranks` ranks gathers by
/// recursive doubling rather than a ring: on a power of two from 8 ranks, as MPICH's medium
/// broadcast does, here at every size. Both move (p-1)/p n bytes per rank; recursive doubling
/// in L rounds, the ring in p-1 (at 1,024 simulated ranks a 1 MiB bcast took 851 us down
/// binomial's tree, which the model preferred to the ring's 1,023 latencies, and 201 us with
/// recursive doubling: bench/README.md). A ring's neighbours are what it has for it, on a
/// network where distant pairs share links; the model does not see links. Fewer ranks keep
/// the ring the tables were measured with; other counts would need the fold (2 n b more).
[[nodiscard]] constexpr bool scatter_doubling_bcast(int ranks) {
  return ranks >= 8 && std::has_single_bit(static_cast<unsigned>(ranks));
}

/// The rounds of `a` that every rank must take part in before any goes on (R in the file
/// comment); hierarchical has binomial's and one more.
[[nodiscard]] inline double all_rank_rounds(algorithm a, stats::op collective, int ranks,
                                            std::size_t bytes, int ranks_per_core = 1) {
  if (ranks <= 1) return 0.0;
  const auto up = static_cast<unsigned>(ranks);
  const double p = ranks;
  const double L = std::bit_width(up - 1);
  const double edges = std::has_single_bit(up) ? 0.0 : 2.0;
  if (a == algorithm::hierarchical) {
    return all_rank_rounds(algorithm::binomial, collective, ranks, bytes, ranks_per_core) + 1;
  }
  using op = stats::op;
  switch (collective) {
    case op::barrier:
      return a == algorithm::flat ? 2 : L;
    case op::allreduce:
      if (a == algorithm::flat) return 2;
      if (a == algorithm::ring) return 2 * (p - 1);
      if (binomial::in_two_waves(bytes, ranks_per_core)) return 2;
      return (bytes >= binomial::by_halves_bytes ? 2 * L : L) + edges;
    case op::allgather:
      return a == algorithm::flat ? 2 : a == algorithm::ring ? p - 1 : L + edges;
    case op::reduce_scatter:
      return a == algorithm::ring ? p - 1 : 2;
    case op::alltoall:
    case op::alltoallv:
      return a == algorithm::flat ? 1 : p - 1;
    case op::allgatherv:
      return a == algorithm::flat ? 1 : a == algorithm::ring ? p - 1 : L + edges;
    default:
      return 0.0;  // rooted: calls overlap (the file comment)
  }
}

// The postal model's part: rounds' latencies and the bytes on the critical path.
[[nodiscard]] inline double postal_cost(algorithm a, stats::op collective, int ranks,
                                        std::size_t bytes, const link_cost& c,
                                        int ranks_per_core = 1) {
  if (ranks <= 1) return 0.0;
  // Integer arithmetic for the logarithms: every rank computes the same costs, so chooses the
  // same algorithm, whatever its libm.
  const auto up = static_cast<unsigned>(ranks);
  const double p = ranks;
  const double n = static_cast<double>(bytes);
  const double L = std::bit_width(up - 1);               // ceil(log2 p)
  const double beyond = p - double(std::bit_floor(up));  // m
  const double al = c.alpha_us;
  const double be = c.beta_us_per_byte;
  const double ga = c.gamma_us_per_byte;
  const auto msg = [&](double b) { return al + b * be; };
  const auto fold = [&](double b) { return al + b * be + b * ga; };
  if (a == algorithm::hierarchical)
    return postal_cost(algorithm::binomial, collective, ranks, bytes, c, ranks_per_core) + al;
  using op = stats::op;
  switch (collective) {
    case op::barrier:
      return a == algorithm::flat ? 2 * (p - 1) * al : L * al;
    case op::bcast:
      if (a == algorithm::flat) return (p - 1) * msg(n);
      if (a == algorithm::ring && bytes >= scatter_allgather_bcast_bytes && ranks >= 4) {
        if (scatter_doubling_bcast(ranks)) return 2 * L * al + 2 * (p - 1) / p * n * be;
        return L * al + (p - 1) / p * n * be + (p - 1) * msg(n / p);
      }
      return L * msg(n);
    case op::reduce:
      return a == algorithm::flat ? (p - 1) * fold(n) : L * fold(n);
    case op::allreduce: {
      if (a == algorithm::flat) return (p - 1) * fold(n) + (p - 1) * msg(n);
      if (a == algorithm::ring)
        return 2 * (p - 1) * al + 2 * (p - 1) / p * n * be + (p - 1) / p * n * ga;
      if (binomial::in_two_waves(bytes, ranks_per_core)) return 2 * L * msg(n) + L * n * ga;
      const double edges = beyond > 0 ? 2 * msg(n) : 0.0;
      if (bytes >= binomial::by_halves_bytes) {
        return 2 * L * al + 2 * n * be + n * ga + edges;
      }
      return L * fold(n) + edges;
    }
    case op::gather:
    case op::scatter:
      return a == algorithm::flat ? (p - 1) * msg(n) : L * al + (p - 1) * n * be;
    case op::allgather: {
      if (a == algorithm::flat) return (p - 1) * msg(n) + (p - 1) * msg(p * n);
      if (a == algorithm::ring) return (p - 1) * msg(n);
      const double edges = beyond > 0 ? 2 * msg(p * n) : 0.0;
      return L * al + (p - 1) * n * be + edges;
    }
    case op::alltoall:
      return (p - 1) * msg(n);
    case op::scan:
    case op::exscan:
      return a == algorithm::flat ? (p - 1) * fold(n) : L * fold(n);
    case op::reduce_scatter:
      if (a == algorithm::ring) return (p - 1) * fold(n / p);
      return (p - 1) * fold(n) + (p - 1) * msg(n / p);
    case op::allgatherv:
      // Counts differ between ranks: the rounds decide. A direct exchange (flat's) or a ring
      // take p-1 latencies, recursive doubling (binomial's) L and the fold's two.
      if (a == algorithm::binomial) return (L + (beyond > 0 ? 2 : 0)) * al;
      return (p - 1) * al;
    case op::gatherv:
    case op::scatterv:
    case op::alltoallv:
      // As allgatherv; binomial's gatherv and scatterv are flat's.
      return (p - 1) * al;
    default:
      return L * al;
  }
}

/// How many messages above `eager` flat's root takes one after another in `collective` (see the
/// file comment); none for the other algorithms.
[[nodiscard]] inline double root_handshakes(algorithm a, stats::op collective, int ranks,
                                            std::size_t bytes, std::size_t eager) {
  if (a != algorithm::flat || ranks <= 1) return 0.0;
  const double others = ranks - 1;
  const auto above = [&](double n) { return n > double(eager) ? others : 0.0; };
  const double n = static_cast<double>(bytes);
  using op = stats::op;
  switch (collective) {
    case op::bcast:
    case op::reduce:
    case op::gather:
    case op::scatter:
      return above(n);
    case op::allreduce:
      return 2 * above(n);
    case op::allgather:
      return above(n) + above(n * ranks);
    case op::reduce_scatter:
      return above(n) + above(n / ranks);
    default:
      return 0.0;
  }
}

/// The modelled time of `a` for `collective` on `ranks` ranks with `bytes` bytes per rank (see
/// the file comment for what `bytes` means per collective), in microseconds, where
/// `ranks_per_core` ranks take turns on each core (1: each has its own). hierarchical is
/// modelled as binomial plus a round (its node-local steps are binomial's where the ranks of a
/// node are one level; the model knows nothing of levels).
[[nodiscard]] inline double modelled_cost(algorithm a, stats::op collective, int ranks,
                                          std::size_t bytes, const link_cost& c,
                                          int ranks_per_core = 1) {
  if (ranks <= 1) return 0.0;
  const double waits = all_rank_rounds(a, collective, ranks, bytes, ranks_per_core) +
                       root_handshakes(a, collective, ranks, bytes, c.eager_bytes);
  const double turns = ranks_per_core > 1 ? waits * ranks_per_core * c.turn_us : 0.0;
  return turns + postal_cost(a, collective, ranks, bytes, c, ranks_per_core);
}

/// The algorithm with the lowest modelled cost: the first of flat, binomial, ring within a
/// millionth of the lowest, so that ranks whose floating point rounds differently (machines of
/// two sites, compilers that contract a multiply and an add) still choose alike at a tie.
[[nodiscard]] inline algorithm cheapest(stats::op collective, int ranks, std::size_t bytes,
                                        const link_cost& c, int ranks_per_core = 1) {
  constexpr std::array order{algorithm::flat, algorithm::binomial, algorithm::ring};
  std::array<double, order.size()> cost{};
  double lowest = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    cost[i] = modelled_cost(order[i], collective, ranks, bytes, c, ranks_per_core);
    lowest = i == 0 ? cost[i] : std::min(lowest, cost[i]);
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (cost[i] <= lowest * (1 + 1e-6)) return order[i];
  }
  return order.back();
}

}  // namespace commx::coll::detail
