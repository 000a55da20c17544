// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What the layers built on a communicator's transport (active messages, windows) reach of its
/// insides: the rank's shared state, the group and the context id. Not for applications.

#include "commx/communicator.hpp"

namespace commx::detail {

struct communicator_access {
  /// The rank's transport endpoint, stats and running nonblocking work.
  template <class Comm>
  static auto& state(const Comm& comm) {
    return *comm.state_;
  }
  /// The communicator's members as world ranks.
  template <class Comm>
  static const group& members(const Comm& comm) {
    return *comm.group_;
  }
  /// Makes `own` (a dup of `parent`) revoked whenever `parent` is: windows and active messages
  /// work on their own communicator, but their traffic is `parent`'s to end.
  template <class Comm>
  static void revoke_along(const Comm& own, const Comm& parent) {
    own.group_->revoke_along(parent.group_);
  }
  /// The context id of its point-to-point messages.
  template <class Comm>
  static context_id context(const Comm& comm) {
    return comm.ctx_;
  }
};

}  // namespace commx::detail
