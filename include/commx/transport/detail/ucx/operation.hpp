// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What transport::ucx's engine keeps of a send or receive, and of a message probed out of UCX
/// that nobody has asked for yet (engine.hpp).

#include <ucp/api/ucp.h>

#include <cstdint>
#include <span>

#include "commx/detail/local_shared.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::ucx {

class engine;

/// One send or receive. Its handles count without atomics (local_shared): the engine, UCX's
/// callbacks (run inside ucp_worker_progress) and the requests are all of one thread, the
/// worker being UCS_THREAD_MODE_SINGLE, and a locked count per copy was a tenth of a windowed
/// 8-byte receive.
struct operation {
  bool done = false;
  bool is_receive = false;
  transport::op_result result;
  int peer = any_source;  // a receive's wanted envelope, a send's destination
  context_id ctx = 0;
  int tag = any_tag;
  transport::recv_buffer buffer{std::span<std::byte>{}};
  void* in_flight = nullptr;  // UCX's request, while UCX holds this operation
  bool cancel_asked = false;  // an error from UCX is then errc::cancelled
  commx::detail::local_shared<operation> keep_alive;  // set while UCX may still call back with it
  engine* owner = nullptr;

  /// Ready for another send or receive (operation_pool): what the engine does not set anew.
  void reuse() {
    done = false;
    result = {};
    in_flight = nullptr;
    cancel_asked = false;  // keep_alive is empty: an operation holding itself is not free
  }
};

/// A shared handle to an operation: what transport::ucx's requests are.
using operation_handle = commx::detail::local_shared<operation>;

/// A message probed out of UCX and not yet asked for.
struct arrival {
  std::uint64_t order = 0;
  int source = any_source;
  context_id ctx = 0;
  int tag = any_tag;
  std::size_t bytes = 0;
  ucp_tag_message_h handle = nullptr;
  void recycle() { handle = nullptr; }
};

}  // namespace commx::detail::ucx
