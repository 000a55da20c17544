// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Recursive doubling over any number of ranks, with the fold for non-powers of two: with
/// q the largest power of two <= p and e = p - q, ranks 2i and 2i+1 (i < e) pair up first;
/// the even one hands its data to the odd one and sits the rounds out. The q remaining ranks
/// get "core" ranks 0..q-1 that keep rank order (core rank c stands for the original ranks
/// [first_of(c), first_of(c + 1))), and in round k core rank c exchanges with c ^ 2^k.

#include <bit>

namespace commx::coll::detail::pattern {

struct doubling {
  int size;   ///< p
  int core;   ///< q, the largest power of two <= p
  int extra;  ///< e = p - q

  constexpr explicit doubling(int p)
      : size(p),
        core(static_cast<int>(std::bit_floor(static_cast<unsigned>(p)))),
        extra(p - core) {}

  /// True for the even rank of a folded pair: it sits out the rounds.
  [[nodiscard]] constexpr bool sits_out(int rank) const {
    return rank < 2 * extra && rank % 2 == 0;
  }

  /// The partner a folded rank hands its data to (or gets the result from).
  [[nodiscard]] constexpr int fold_partner(int rank) const {
    return rank % 2 == 0 ? rank + 1 : rank - 1;
  }

  /// Core rank of an original rank that takes part in the rounds.
  [[nodiscard]] constexpr int core_rank(int rank) const {
    return rank < 2 * extra ? rank / 2 : rank - extra;
  }

  /// The first original rank that core rank c stands for; first_of(core) == size.
  [[nodiscard]] constexpr int first_of(int c) const { return c < extra ? 2 * c : c + extra; }

  /// The original rank that plays core rank c in the rounds.
  [[nodiscard]] constexpr int rank_of_core(int c) const {
    return c < extra ? 2 * c + 1 : c + extra;
  }

  /// Number of exchange rounds: log2(q).
  [[nodiscard]] constexpr int rounds() const {
    return std::countr_zero(static_cast<unsigned>(core));
  }

  /// Core partner in round k.
  [[nodiscard]] static constexpr int partner(int c, int round) { return c ^ (1 << round); }
};

}  // namespace commx::coll::detail::pattern
