// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The collective checking level: before a collective moves data, every rank shares what it
/// was called with, and a rank that differs is named on every rank instead of hanging them.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "commx/coll/binomial.hpp"
#include "commx/error.hpp"
#include "commx/serialize.hpp"
#include "commx/stats.hpp"

namespace commx::detail {

/// What one rank passed to a collective. Fields a collective may legitimately differ in
/// between ranks (a gatherv's own count, say) hold `not_compared`.
struct call_signature {
  static constexpr std::uint64_t not_compared = ~std::uint64_t{0};

  std::uint64_t kind = 0;  ///< a stats::op; 64 bits wide so the struct has no padding to send
  std::int64_t root = -1;
  std::uint64_t count = not_compared;  ///< elements, or a fingerprint of a counts array
  std::uint64_t element_size = 0;
  std::uint64_t op = 0;  ///< fingerprint of the reduction op's type, 0 for none

  [[nodiscard]] bool operator==(const call_signature&) const = default;

  [[nodiscard]] std::string describe() const {
    std::string text = fmt::format("{}(", stats::name(static_cast<stats::op>(kind)));
    if (root >= 0) text += fmt::format("root {}, ", root);
    if (count != not_compared) text += fmt::format("count {}, ", count);
    text += fmt::format("{}-byte elements", element_size);
    if (op != 0) text += fmt::format(", op #{:016x}", op);
    return text + ")";
  }
};

/// What a rank passes to a collective of `kind` on elements of type E.
template <class E>
call_signature signature_of(stats::op kind, int root, std::uint64_t count) {
  return {static_cast<std::uint64_t>(kind), root, count, sizeof(E), 0};
}
/// The same for a reduction with `Op`, whose type every rank must pass alike.
template <class E, class Op>
call_signature signature_of(stats::op kind, int root, std::uint64_t count, const Op& /*op*/) {
  return {static_cast<std::uint64_t>(kind), root, count, sizeof(E), type_fingerprint<Op>()};
}

/// A reduction's data must be writable, and its op must combine two elements into one.
template <class Elements, class Op>
constexpr void check_reduction_op() {
  using E = std::remove_const_t<typename Elements::element_type>;
  static_assert(!std::is_const_v<typename Elements::element_type>,
                "commx: a reduction's data must be writable");
  static_assert(std::is_convertible_v<std::invoke_result_t<Op&, const E&, const E&>, E>,
                "commx: a reduction op must take two elements and return one");
}

/// A fingerprint of a counts array, for collectives whose counts every rank must agree on.
inline std::uint64_t fingerprint(std::span<const std::size_t> counts) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t c : counts) hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

/// Shares `mine` with every rank of `port` and throws errc::collective_mismatch on every rank
/// if any differs, naming the first rank whose call differs from rank 0's.
template <class Port>
void check_same_call(Port& port, const call_signature& mine, int rank_for_errors) {
  std::vector<call_signature> all(static_cast<std::size_t>(port.size()));
  coll::binomial::allgather(port, std::span<const call_signature>(&mine, 1),
                            std::span<call_signature>(all));
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    throw_error(errc::collective_mismatch,
                {rank_for_errors, static_cast<int>(r), unknown, 0,
                 stats::name(static_cast<stats::op>(mine.kind)).data()},
                fmt::format("rank {} called {} but rank 0 called {}", r, all[r].describe(),
                            all[0].describe()));
  }
}

}  // namespace commx::detail
