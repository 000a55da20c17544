// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP engine's matching (engine.hpp): a posted receive taking a queued message, an
/// arriving envelope finding its posted receive, sends to this rank itself, and withdrawing an
/// operation at any stage (cancel). Out of line as
/// Asio's detail/impl files are, included by engine.hpp.

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>

#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::detail::tcp {

inline void engine::take(const std::shared_ptr<operation>& op, queue_position at) {
  queued_message* queued = &*at;
  const auto size = static_cast<std::size_t>(queued->size);
  op_result result{queued->source, queued->tag, size, {}};
  std::byte* target = op->buffer.prepare(size, result.error);
  if (result.error) {
    finish(*op, result);
    return;
  }
  switch (queued->how) {
    case queued_message::form::eager: {
      if (size > 0) std::memcpy(target, queued->eager.data(), size);
      const int source = queued->source;
      // Popped before the credit goes out: a write that finds the peer gone settles it, and
      // dropping its queued messages rearranges the queue `at` points into.
      unexpected_.pop(at);
      if (source != rank()) consumed(source, size);
      finish(*op, result);
      return;
    }
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
      unexpected_.pop(at);
      push_control(source, frame_kind::cts, cookie);
      return;
    }
    case queued_message::form::remote_streamed:
      return take_streamed(op, at, target);
  }
  unexpected_.pop(at);
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
    queued_message& m = unexpected_.push_slot(rank(), ctx, tag);
    m.size = data.size();
    m.how = queued_message::form::eager;
    m.eager.assign(data.begin(), data.end());
    m.cookie = 0;
    return nullptr;
  }
  auto op = std::make_shared<operation>(operation::kind::send, rank(), ctx, tag);
  op->payload = data;
  op->where = operation::stage::queued_self;
  unexpected_.push(
      {rank(), ctx, tag, data.size(), queued_message::form::self_rendezvous, {}, 0, op});
  return op;
}

// Withdraws `op` if it has not completed; see the transport's cancel.
inline bool engine::cancel(const std::shared_ptr<operation>& op) {
  if (!op || op->done) return false;
  const op_result cancelled{op->peer, op->tag, 0, make_error_code(errc::cancelled)};
  switch (op->where) {
    case operation::stage::posted:
      std::erase(posted_, op);
      break;
    case operation::stage::awaiting_data: {
      // The data is on its way: it will be read and dropped.
      auto& waiting = peers_[index(op->result.source)].awaiting_data;
      if (auto it = waiting.find(op->cookie); it != waiting.end()) it->second.op = nullptr;
      break;
    }
    case operation::stage::receiving: {
      connection& c = *peers_[index(op->result.source)].conn;
      c.receiving = nullptr;
      c.destination = nullptr;  // the rest of the payload is dropped
      c.into_holding = false;
      break;
    }
    case operation::stage::awaiting_cts:
    case operation::stage::writing: {
      peer_link& link = peers_[index(op->peer)];
      link.awaiting_cts.erase(op->cookie);
      connection& c = *link.conn;
      auto frame = std::find_if(c.out.begin(), c.out.end(), [&](const out_frame& f) {
        return f.cookie == op->cookie && f.written < f.total();
      });
      const bool data_started =
          op->where == operation::stage::writing && frame != c.out.end() && frame->written > 0;
      if (data_started) {
        // Half written: the rest must follow or the stream breaks. Keep a copy instead of
        // the caller's buffer, and call the send complete.
        const std::size_t sent = frame->written > header_size ? frame->written - header_size : 0;
        frame->owned.assign(frame->payload.begin() + static_cast<std::ptrdiff_t>(sent),
                            frame->payload.end());
        frame->payload = frame->owned;
        frame->written = std::min(frame->written, header_size);  // the header's own progress
        frame->completes = nullptr;
        finish(*op, {op->peer, op->tag, op->payload.size(), {}});
        return false;
      }
      // An envelope not yet started is simply dropped; once the receiver may have seen it,
      // it hears that the message is withdrawn.
      const bool unstarted = frame != c.out.end() && frame->written == 0;
      const bool envelope_out = op->where == operation::stage::writing || !unstarted;
      if (unstarted) c.out.erase(frame);
      if (envelope_out) push_control(op->peer, frame_kind::revoke, op->cookie);
      break;
    }
    case operation::stage::queued_self:
      unexpected_.remove_if([&](const queued_message& m) { return m.self_send == op; });
      break;
    case operation::stage::done:
      return false;
  }
  finish(*op, cancelled);
  return true;
}

}  // namespace commx::detail::tcp
