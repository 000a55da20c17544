// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What transport::ucx's engine keeps of a send or receive, and of a message probed out of UCX
/// that nobody has asked for yet (engine.hpp).

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <span>

#include "commx/transport/message.hpp"

namespace commx::detail::ucx {

class engine;

/// One send or receive.
struct operation {
  bool done = false;
  bool is_receive = false;
  transport::op_result result;
  int peer = any_source;  // a receive's wanted envelope, a send's destination
  context_id ctx = 0;
  int tag = any_tag;
  transport::recv_buffer buffer{std::span<std::byte>{}};
  void* in_flight = nullptr;              // UCX's request, while UCX holds this operation
  bool cancel_asked = false;              // an error from UCX is then errc::cancelled
  std::shared_ptr<operation> keep_alive;  // set while UCX may still call back with it
  engine* owner = nullptr;
};

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
