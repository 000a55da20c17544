// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What the TCP engine (engine.hpp) keeps per message: a send or receive in flight, a message
/// that came before its receive, and the hooks through which transport::wan carries the data
/// of large messages on streams of its own (wan/paths.hpp uses these too).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <system_error>
#include <vector>

#include <asio.hpp>

#include "commx/transport/detail/unexpected_queue.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::tcp {

using transport::op_result;
using transport::recv_buffer;

/// A send or receive that did not complete when it was posted.
struct operation {
  enum class kind : std::uint8_t { send, recv };
  enum class stage : std::uint8_t {
    done,
    posted,         ///< a receive waiting for a matching message
    awaiting_cts,   ///< a rendezvous send whose envelope is out
    writing,        ///< a rendezvous send whose data frame is queued or being written
    awaiting_data,  ///< a receive that matched an envelope and asked for its data
    receiving,      ///< a receive whose payload is arriving now
    queued_self,    ///< a large send to this rank itself, waiting for a receive
  };

  operation(kind k, int peer_rank, context_id context, int message_tag)
      : what(k), peer(peer_rank), ctx(context), tag(message_tag) {}

  kind what;
  int peer;  ///< destination of a send; source (or any_source) of a receive
  context_id ctx;
  int tag;
  recv_buffer buffer{std::span<std::byte>{}};  ///< receives
  std::span<const std::byte> payload;          ///< rendezvous sends
  std::byte* target = nullptr;                 ///< a matched receive's destination
  std::uint64_t cookie = 0;                    ///< rendezvous id
  int stream = -1;  ///< for an extension with several streams: the one to carry it; -1 any
  op_result result;
  stage where = stage::done;
  bool done = false;
};

/// A message that arrived before a matching receive.
struct queued_message {
  enum class form : std::uint8_t {
    eager,              ///< its payload is in `eager`
    remote_rendezvous,  ///< its envelope: a receive asks for the data (cts)
    self_rendezvous,    ///< a large send to this rank itself
    remote_streamed,    ///< its data is arriving unasked, on streams, into `staged`
  };
  int source;
  context_id ctx;
  int tag;
  std::uint64_t size;
  form how;
  std::vector<std::byte> eager;
  std::uint64_t cookie = 0;              // remote rendezvous, remote streamed
  std::shared_ptr<operation> self_send;  // self rendezvous
  // remote streamed: the buffer its chunks land in until a receive takes it, and the stand-in
  // receive that owns it meanwhile (done once every chunk is in)
  std::unique_ptr<std::byte[]> staged{};
  std::shared_ptr<operation> stand_in{};
  std::uint64_t order = 0;  ///< arrival number (unexpected_queue.hpp): wildcards take the earliest

  /// Its slot is vacated: what it held for a receive (a self send, a stand-in and its staged
  /// data) goes now, as it went when the message was erased.
  void recycle() {
    release_payload(eager);
    self_send.reset();
    staged.reset();
    stand_in.reset();
  }
};

/// What a transport built on this engine (transport::wan) plugs in to carry the data of large
/// messages over connections of its own. Every hook is optional: unset, the engine is plain tcp.
class tls_channel;

struct extension {
  /// A clear-to-send came for rendezvous send `op` to `peer`: true when the extension carries
  /// its data itself (and completes `op` through engine::complete), false to leave it to tcp.
  std::function<bool(int peer, const std::shared_ptr<operation>& op)> carry_data;
  /// A connection from `peer` that authenticated with purpose::stream (the engine does not
  /// keep it).
  std::function<void(int peer, asio::ip::tcp::socket socket, std::unique_ptr<tls_channel> secure)>
      adopt_stream;
  /// `peer` is gone (finished, or failed with `why`): the extension drops what it holds for it.
  std::function<void(int peer, std::error_code why)> peer_gone;
  /// The stack the engine's log lines name (log.hpp); empty: "tcp".
  std::string_view stack;
  /// Eager over the streams: bytes of large messages that one sender may have sent this rank
  /// with `data_follows` (their chunks leaving at once, no cts) and this rank has not yet
  /// handed to its user; 0: every large message to this rank waits for its cts. Each rank
  /// offers its own to its peers (engine::offer_streamed_window).
  std::uint64_t streamed_window = 0;
  /// Whether the extension has streams to `peer` (only those messages go with data_follows).
  std::function<bool(int peer)> streams_to;
  /// The envelope of `peer`'s message `cookie`, sent with data_follows, has arrived: chunks of
  /// it that overtook it may now be read.
  std::function<void(int peer, std::uint64_t cookie)> announced;
  /// `peer`'s extension sent this rank a signal (engine::signal) with `what` in it: wan's
  /// request that the rank opening a path open its streams. Unset: such a frame is a violation.
  std::function<void(int peer, std::uint64_t what)> signalled;
};

/// A rendezvous receive waiting for its data, as an extension sees it.
struct awaited_receive {
  operation* op;  ///< null: the receive was cancelled, the data is dropped
  std::uint64_t size;
};

}  // namespace commx::detail::tcp
