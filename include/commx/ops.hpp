// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Reduction operations beyond std::plus<> and std::multiplies<>.

#include <algorithm>

namespace commx::op {

/// The larger of two elements (the first one on ties, so ties are deterministic).
struct max {
  template <class E>
  constexpr E operator()(const E& a, const E& b) const {
    return a < b ? b : a;
  }
};

/// The smaller of two elements (the first one on ties).
struct min {
  template <class E>
  constexpr E operator()(const E& a, const E& b) const {
    return b < a ? b : a;
  }
};

}  // namespace commx::op
