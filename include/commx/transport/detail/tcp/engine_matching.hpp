// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP engine's matching (engine.hpp): a posted receive taking a queued message, an
/// arriving envelope finding its posted receive, and sends to this rank itself. Out of line as
/// Asio's detail/impl files are, included by engine.hpp.

#include <cstring>
#include <memory>
#include <span>

#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::detail::tcp {

inline void engine::take(const std::shared_ptr<operation>& op,
                         std::deque<queued_message>::iterator queued) {
  const auto size = static_cast<std::size_t>(queued->size);
  op_result result{queued->source, queued->tag, size, {}};
  std::byte* target = op->buffer.prepare(size, result.error);
  if (result.error) {
    finish(*op, result);
    return;
  }
  switch (queued->how) {
    case queued_message::form::eager:
      if (size > 0) std::memcpy(target, queued->eager.data(), size);
      if (queued->source != rank()) consumed(queued->source, size);
      break;
    case queued_message::form::self_rendezvous:
      if (size > 0) std::memcpy(target, queued->self_send->payload.data(), size);
      finish(*queued->self_send, {rank(), queued->tag, size, {}});
      break;
    case queued_message::form::remote_rendezvous: {
      const int source = queued->source;
      const std::uint64_t cookie = queued->cookie;
      op->target = target;
      op->cookie = cookie;
      op->result = result;
      op->where = operation::stage::awaiting_data;
      peers_[index(source)].awaiting_data[cookie] = {op, queued->size};
      unexpected_.erase(queued);
      push_control(source, frame_kind::cts, cookie);
      return;
    }
    case queued_message::form::remote_streamed:
      return take_streamed(op, queued, target);
  }
  unexpected_.erase(queued);
  finish(*op, result);
}

inline std::shared_ptr<operation> engine::match_posted(int source, context_id ctx, int tag,
                                                       std::size_t size) {
  for (auto it = posted_.begin(); it != posted_.end();) {
    operation& op = **it;
    if (!matches(op.peer, op.ctx, op.tag, source, ctx, tag)) {
      ++it;
      continue;
    }
    std::shared_ptr<operation> found = std::move(*it);
    it = posted_.erase(it);
    std::error_code ec;
    found->target = found->buffer.prepare(size, ec);
    if (ec) {
      finish(*found, {source, tag, size, ec});
      continue;
    }
    found->result = {source, tag, size, {}};
    return found;
  }
  return nullptr;
}

inline std::shared_ptr<operation> engine::send_to_self(context_id ctx, int tag,
                                                       std::span<const std::byte> data) {
  if (auto op = match_posted(rank(), ctx, tag, data.size())) {
    if (!data.empty()) std::memcpy(op->target, data.data(), data.size());
    finish(*op, op->result);
    return nullptr;
  }
  ++events_;
  if (data.size() <= cfg_.eager_threshold) {
    unexpected_.push_back({rank(),
                           ctx,
                           tag,
                           data.size(),
                           queued_message::form::eager,
                           {data.begin(), data.end()},
                           0,
                           nullptr});
    return nullptr;
  }
  auto op = std::make_shared<operation>(operation::kind::send, rank(), ctx, tag);
  op->payload = data;
  op->where = operation::stage::queued_self;
  unexpected_.push_back(
      {rank(), ctx, tag, data.size(), queued_message::form::self_rendezvous, {}, 0, op});
  return op;
}

}  // namespace commx::detail::tcp
