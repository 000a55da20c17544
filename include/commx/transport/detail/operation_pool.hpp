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

/// Hands out `Operation`s, built from the given arguments, reusing one nobody else holds
/// (through its `reuse(args...)` where it has one). `Handle` shares them: std::shared_ptr, or
/// local_shared where only one thread ever touches them (ucx's engine).
template <class Operation, class Handle = std::shared_ptr<Operation>>
class operation_pool {
 public:
  /// At most this many are kept; beyond them an operation is allocated and freed as usual.
  static constexpr std::size_t limit = 256;

  /// An operation built from `args`: a free one of the pool's (a few looked at, from where the
  /// last look ended), else a new one, kept while the pool has room.
  template <class... Args>
  Handle take(Args&&... args) {
    const std::size_t n = kept_.size();
    for (std::size_t look = 0; look < std::min<std::size_t>(n, 4); ++look) {
      Handle& candidate = kept_[next_];
      next_ = next_ + 1 == n ? 0 : next_ + 1;
      if (candidate.use_count() == 1) {
        // An operation with its own `reuse` resets itself in place: building a temporary to
        // assign from zeroes a whole operation on the stack first, per message.
        if constexpr (requires { candidate->reuse(std::forward<Args>(args)...); }) {
          candidate->reuse(std::forward<Args>(args)...);
        } else {
          *candidate = Operation(std::forward<Args>(args)...);
        }
        return candidate;
      }
    }
    Handle fresh = make(std::forward<Args>(args)...);
    if (n < limit) kept_.push_back(fresh);
    return fresh;
  }

 private:
  template <class... Args>
  static Handle make(Args&&... args) {
    if constexpr (requires { Handle::make(std::forward<Args>(args)...); }) {
      return Handle::make(std::forward<Args>(args)...);
    } else {
      return std::make_shared<Operation>(std::forward<Args>(args)...);
    }
  }

  std::vector<Handle> kept_;
  std::size_t next_ = 0;
};

}  // namespace commx::detail
