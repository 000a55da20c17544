// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What transport::ucx's engine keeps of each peer (engine.hpp): its endpoint, made on first
/// use, and how the peer ended, if it did.

#include <ucp/api/ucp.h>

#include <cstdint>
#include <system_error>

#include "commx/error.hpp"
#include "commx/transport/detail/shm/liveness.hpp"

namespace commx::detail::ucx {

class engine;

/// One peer of the engine's; its address is held by its endpoint's error handler.
struct peer {
  engine* owner = nullptr;
  int rank = 0;
  ucp_ep_h ep = nullptr;
  std::uint64_t sent = 0;
  bool said_bye = false;     // finished: everything it sent came before
  bool failed = false;       // its endpoint failed without a bye
  bool noticed = false;      // what waits on it has been ended
  bool unreachable = false;  // UCX has no transport to it (a configuration error)
  bool same_node = false;    // its process can be watched (endpoint_of: UCX_TLS=sm,self)
  shm::process_watch watch;  // a peer of this node's process (UCX cannot tell its loss)

  [[nodiscard]] bool gone() const { return said_bye || failed; }
  /// Why nothing goes to or comes from it: it is gone, or UCX cannot reach it.
  [[nodiscard]] std::error_code why_not() const {
    return make_error_code(unreachable ? errc::bootstrap_failed : errc::peer_lost);
  }
};

}  // namespace commx::detail::ucx
