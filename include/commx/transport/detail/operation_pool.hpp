// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Operations recycled instead of allocated, for the transports whose requests are shared
/// operations (shm, tcp). An operation that only the pool still holds is free: a blocking
/// receive, or a window of requests, reuses the same few and allocates nothing.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace commx::detail {

/// Hands out `Operation`s, built from the given arguments, reusing one nobody else holds.
template <class Operation>
class operation_pool {
 public:
  /// At most this many are kept; beyond them an operation is allocated and freed as usual.
  static constexpr std::size_t limit = 256;

  /// An operation built from `args`: a free one of the pool's (a few looked at, from where the
  /// last look ended), else a new one, kept while the pool has room.
  template <class... Args>
  std::shared_ptr<Operation> take(Args&&... args) {
    const std::size_t n = kept_.size();
    for (std::size_t look = 0; look < std::min<std::size_t>(n, 4); ++look) {
      std::shared_ptr<Operation>& candidate = kept_[next_];
      next_ = next_ + 1 == n ? 0 : next_ + 1;
      if (candidate.use_count() == 1) {
        *candidate = Operation(std::forward<Args>(args)...);
        return candidate;
      }
    }
    auto fresh = std::make_shared<Operation>(std::forward<Args>(args)...);
    if (n < limit) kept_.push_back(fresh);
    return fresh;
  }

 private:
  std::vector<std::shared_ptr<Operation>> kept_;
  std::size_t next_ = 0;
};

}  // namespace commx::detail
