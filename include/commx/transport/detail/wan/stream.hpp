// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What a wan path (paths.hpp) keeps: its data streams, the large messages going out as chunks
/// and coming in as chunks, and the state its owner may query.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <asio.hpp>

#include "commx/deadline.hpp"
#include "commx/transport/detail/tcp/connection.hpp"
#include "commx/transport/detail/tcp/operation.hpp"
#include "commx/transport/detail/wan/config.hpp"
#include "commx/transport/detail/wan/wire.hpp"

namespace commx::detail::wan {

using tcp::operation;

/// One data stream of a path.
struct stream {
  stream(asio::ip::tcp::socket s, int peer_rank, std::unique_ptr<tcp::tls_channel> secure = nullptr)
      : conn(std::move(s), std::move(secure)), peer(peer_rank) {
    conn.staging = {};  // reads are ours, straight into users' buffers
  }

  tcp::connection conn;  ///< its socket and write queue
  int peer;
  int index = -1;  ///< in the path; -1 until the opening frame (accepting side)
  std::uint64_t epoch = 0;
  bool active = false;        ///< carries new chunks
  bool close_queued = false;  ///< our close frame is queued (or out)
  bool shut = false;          ///< our sending half is shut down
  bool close_received = false;
  std::uint64_t carried = 0;  ///< chunk payload bytes handed to this stream
  // the unsent bound (unsent_limit): the larger one while the stream keeps losing packets
  std::uint32_t retransmitted = 0;  ///< the kernel's count when last looked at
  clock::time_point last_loss{};    ///< when that count last grew
  bool losing = false;              ///< the bound in force is the losing one
  // reading
  stream_header_bytes head{};
  std::size_t head_have = 0;
  bool in_payload = false;
  stream_header current{};
  std::uint64_t remaining = 0;
  std::string tuning;  ///< an opening frame's text, as it arrives
  /// `current` is a chunk that overtook its message's envelope: the stream is not read until
  /// the envelope is in (the engine's `announced`).
  bool parked = false;
};

/// A large message whose data this rank is sending as chunks.
struct outgoing {
  std::shared_ptr<operation> op;  ///< null once completed early (cancelled half-way)
  std::uint64_t id;
  std::span<const std::byte> payload;  ///< the user's buffer, or `owned`
  std::vector<std::byte> owned;
  std::uint64_t chunk;
  std::uint64_t next = 0;     ///< offset of the next chunk to hand to a stream
  std::size_t in_flight = 0;  ///< chunks queued on streams, not yet written
  int stream = -1;            ///< the only stream (mod the path's) that carries it; -1 any
};

/// A large message whose chunks this rank is receiving.
struct assembly {
  std::uint64_t chunk;
  std::vector<bool> got;
  std::uint64_t received = 0;
};

/// What a path is running on now, for its owner to query.
struct path_state {
  path_config tuning;
  std::uint64_t epoch = 0;
  int open_streams = 0;
  std::vector<std::uint64_t> carried;  ///< chunk bytes handed to each stream of this epoch
  bool reopening = false;
  std::string autotuned;  ///< what autotune measured and picked, as it printed it; empty: not run
};

}  // namespace commx::detail::wan
