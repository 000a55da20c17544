// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// One blocking collective call's deadline (detail/coll_port.hpp).

#include <optional>

#include "commx/deadline.hpp"

namespace commx::detail {

/// A blocking collective's deadline: resolved the first time the call has to wait, then the
/// same absolute time for every message of the call (its check's and its data's). A call whose
/// messages all complete as they are posted (a broadcast's receiver, its message already
/// queued) reads no clock, as the blocking point-to-point calls read none.
class call_deadline {
 public:
  call_deadline(deadline until, clock::duration timeout) : until_(until), timeout_(timeout) {}

  [[nodiscard]] clock::time_point resolve() {
    if (!resolved_) resolved_ = until_.resolve(timeout_);
    return *resolved_;
  }

 private:
  deadline until_;
  clock::duration timeout_;
  std::optional<clock::time_point> resolved_;
};

}  // namespace commx::detail
