// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP engine's eager path over an extension's streams (engine.hpp; transport::wan's data
/// streams): a large message whose size fits the receiver's streamed window leaves without
/// waiting for a cts, which on a wide-area path saves a round trip per message. Its envelope
/// (rts with `data_follows`) goes on the control connection and its chunks on the streams at
/// once. The receiver puts the chunks straight into a matching posted receive, or else into a
/// buffer held for the message (a stand-in receive owns it) until a receive takes it; a
/// receive too small for it fails and leaves it queued, as for every message.
///
/// The window bounds what a receiver holds: the receiver offers it (a `grant` of the whole
/// window, once the paths are up), the sender spends it per message, and the receiver gives
/// each message's share back (`grant`) once its user has the data, so unexpected data from one
/// sender never exceeds it. A message that does not fit what is left goes by rendezvous (rts, cts), which
/// keeps the order of messages: both kinds of envelope match in the order they were sent.
/// Chunks may overtake their envelope (they travel on other connections): the extension holds
/// such a stream unread until the envelope is in (`announced`).
///
/// Out of line as Asio's detail/impl files are, included by engine.hpp.

#include <cstring>
#include <memory>
#include <span>

#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::detail::tcp {

inline std::shared_ptr<operation> engine::send_streamed(int dest, context_id ctx, int tag,
                                                        std::span<const std::byte> data,
                                                        int stream) {
  peer_link& link = peers_[index(dest)];
  link.stream_credit -= data.size();
  auto op = std::make_shared<operation>(operation::kind::send, dest, ctx, tag);
  op->payload = data;
  op->stream = stream;
  op->cookie = link.next_cookie++;
  op->where = operation::stage::writing;
  // No cookie on the frame: once the chunks leave, the envelope must follow (cancel completes
  // such a send from a copy of its data, wan.hpp).
  out_frame& f = link.conn->out.emplace_back();
  f.header = encode(
      frame_header{frame_kind::rts, data_follows, rank(), tag, ctx, data.size(), op->cookie});
  flush(dest);
  if (link.state != presence::present) {
    finish(*op, lost(dest, data.size()));
    return op;
  }
  ext_.carry_data(dest, op);
  return op;
}

inline void engine::on_streamed_envelope(int peer, const frame_header& h) {
  peer_link& link = peers_[index(peer)];
  if (!ext_.streams_to || !ext_.streams_to(peer) || h.length == 0)
    return violation(peer, "data announced on a path without streams");
  link.stream_held += h.length;
  if (link.stream_held > ext_.streamed_window)
    return violation(peer, "streamed messages beyond the window");
  ++events_;
  const auto size = static_cast<std::size_t>(h.length);
  if (auto op = match_posted(peer, h.context, h.tag, size)) {
    op->cookie = h.cookie;
    op->where = operation::stage::awaiting_data;
    link.awaiting_data[h.cookie] = {op, h.length, true};
  } else {
    queued_message m{peer, h.context, h.tag,  h.length, queued_message::form::remote_streamed,
                     {},   h.cookie,  nullptr};
    m.staged = std::make_unique_for_overwrite<std::byte[]>(size);
    m.stand_in = std::make_shared<operation>(operation::kind::recv, peer, h.context, h.tag);
    m.stand_in->target = m.staged.get();
    m.stand_in->result = {peer, h.tag, size};
    m.stand_in->where = operation::stage::awaiting_data;
    link.awaiting_data[h.cookie] = {m.stand_in, h.length, false};
    unexpected_.push(std::move(m));
  }
  if (ext_.announced) ext_.announced(peer, h.cookie);
}

inline void engine::take_streamed(const std::shared_ptr<operation>& op, queue_position at,
                                  std::byte* target) {
  const queued_message* queued = &*at;
  const int source = queued->source;
  const std::uint64_t size = queued->size;
  const std::uint64_t cookie = queued->cookie;
  // What is in so far; the chunks still to come go straight to the receive's buffer (the
  // extension looks the destination up afresh for every read).
  std::memcpy(target, queued->staged.get(), static_cast<std::size_t>(size));
  const bool complete = queued->stand_in->done;
  op->result = {source, queued->tag, static_cast<std::size_t>(size), {}};
  unexpected_.pop(at);
  if (complete) {
    grant(source, size);
    finish(*op, op->result);
    return;
  }
  op->target = target;
  op->cookie = cookie;
  op->where = operation::stage::awaiting_data;
  peers_[index(source)].awaiting_data[cookie] = {op, size, true};
}

inline void engine::grant(int peer, std::uint64_t bytes) {
  peer_link& link = peers_[index(peer)];
  link.stream_held -= std::min(link.stream_held, bytes);
  push_control(peer, frame_kind::grant, bytes);
}

inline void engine::finish_awaited(int peer, std::uint64_t cookie) {
  auto& waiting = peers_[index(peer)].awaiting_data;
  const auto it = waiting.find(cookie);
  if (it == waiting.end()) return;
  std::shared_ptr<operation> op = std::move(it->second.op);
  const bool granted_back = it->second.granted_back;
  const std::uint64_t size = it->second.size;
  waiting.erase(it);
  if (granted_back) grant(peer, size);
  if (op) finish(*op, op->result);
}

}  // namespace commx::detail::tcp
