// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The frames on a wan data stream: a fixed 40-byte header, little-endian field by field like
/// tcp's frames (tcp/wire.hpp), and a decoder that checks every field before anything acts on
/// it. The path's control connection is a tcp connection and speaks tcp's frames; the data
/// streams speak only these.
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | magic "CMXW" |
/// | 4 | 1 | protocol version |
/// | 5 | 1 | kind (`stream_kind`) |
/// | 6 | 2 | flags, 0 |
/// | 8 | 4 | source world rank |
/// | 12 | 4 | chunk size of the message (chunk); streams in the path (open, retune) |
/// | 16 | 8 | message id: the tcp rendezvous id (chunk); path epoch (open, close, retune) |
/// | 24 | 8 | offset of the chunk in the message (chunk); stream index (open) |
/// | 32 | 8 | length of the payload that follows: the chunk's bytes (chunk), the path's tuning as `key=value` text (open, retune), filler (probe); 0 (close) |
///
/// A message of `size` bytes sent with chunk size `c` is chunks at offsets 0, c, 2c, ..., each
/// `c` long but the last: so the receiver can tell a duplicate, an overlap or a gap from the
/// offset and length alone.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "commx/transport/detail/tcp/wire.hpp"

namespace commx::detail::wan {

inline constexpr std::uint32_t stream_magic = 0x57584d43;  // "CMXW" as it reads on the wire
inline constexpr std::uint8_t stream_version = 1;
inline constexpr std::size_t stream_header_size = 40;
inline constexpr std::uint64_t max_chunk = std::uint64_t{1} << 30;
inline constexpr std::uint64_t max_streams = 256;
/// The longest tuning text an opening frame carries.
inline constexpr std::uint64_t max_tuning_text = 512;

enum class stream_kind : std::uint8_t {
  open = 1,  ///< first frame of a stream: its index, the path's stream count, epoch and tuning
  chunk,     ///< a piece of a large message's payload
  close,     ///< the sender puts nothing more on this stream (path closing or retuned, leaving)
  probe,     ///< filler bytes an autotuning sender measures the path with; dropped on arrival
  retune,    ///< to the rank that opens the path: close it and reopen it with this tuning
};

struct stream_header {
  stream_kind kind = stream_kind::chunk;
  int source = 0;
  std::uint32_t chunk = 0;
  std::uint64_t id = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

using stream_header_bytes = std::array<std::byte, stream_header_size>;

inline stream_header_bytes encode(const stream_header& h) {
  namespace w = tcp::wire;
  stream_header_bytes out{};
  w::put(&out[0], stream_magic, 4);
  w::put(&out[4], stream_version, 1);
  w::put(&out[5], static_cast<std::uint8_t>(h.kind), 1);
  w::put(&out[8], static_cast<std::uint32_t>(h.source), 4);
  w::put(&out[12], h.chunk, 4);
  w::put(&out[16], h.id, 8);
  w::put(&out[24], h.offset, 8);
  w::put(&out[32], h.length, 8);
  return out;
}

struct decoded_stream_header {
  stream_header header;
  std::string_view error;  ///< empty when the header is valid
  [[nodiscard]] bool ok() const { return error.empty(); }
};

/// Decodes and validates a header that arrived from `expected_source`. The checks that need a
/// message's size (does this chunk fit?) are `check_chunk`'s.
inline decoded_stream_header decode(std::span<const std::byte, stream_header_size> in,
                                    int expected_source) {
  namespace w = tcp::wire;
  decoded_stream_header d;
  stream_header& h = d.header;
  if (w::get(&in[0], 4) != stream_magic) return {h, "bad magic on a data stream"};
  if (w::get(&in[4], 1) != stream_version) return {h, "unsupported data stream version"};
  const auto kind = static_cast<std::uint8_t>(w::get(&in[5], 1));
  if (kind < 1 || kind > static_cast<std::uint8_t>(stream_kind::retune))
    return {h, "unknown data stream frame kind"};
  h.kind = static_cast<stream_kind>(kind);
  if (w::get(&in[6], 2) != 0) return {h, "unknown flags on a data stream"};
  h.source = static_cast<int>(static_cast<std::int32_t>(w::get(&in[8], 4)));
  h.chunk = static_cast<std::uint32_t>(w::get(&in[12], 4));
  h.id = w::get(&in[16], 8);
  h.offset = w::get(&in[24], 8);
  h.length = w::get(&in[32], 8);
  if (h.source != expected_source) return {h, "source is not the connected peer"};
  switch (h.kind) {
    case stream_kind::open:
      if (h.chunk == 0 || h.chunk > max_streams || h.offset >= h.chunk ||
          h.length > max_tuning_text)
        return {h, "malformed stream opening"};
      break;
    case stream_kind::chunk:
      if (h.chunk == 0 || h.chunk > max_chunk) return {h, "chunk size out of range"};
      if (h.id == 0) return {h, "chunk without a message id"};
      if (h.length == 0 || h.length > h.chunk) return {h, "chunk length out of range"};
      if (h.offset % h.chunk != 0 || h.offset > tcp::max_message_size)
        return {h, "chunk offset out of place"};
      break;
    case stream_kind::close:
      if (h.chunk != 0 || h.offset != 0 || h.length != 0) return {h, "malformed stream close"};
      break;
    case stream_kind::probe:
      if (h.chunk != 0 || h.id != 0 || h.offset != 0 || h.length > max_chunk)
        return {h, "malformed probe"};
      break;
    case stream_kind::retune:
      if (h.chunk == 0 || h.chunk > max_streams || h.offset != 0 || h.length == 0 ||
          h.length > max_tuning_text)
        return {h, "malformed retune request"};
      break;
  }
  return d;
}

/// Does chunk `h` fit a message of `size` bytes sent with chunks of `chunk` bytes?
inline std::string_view check_chunk(const stream_header& h, std::uint64_t size,
                                    std::uint64_t chunk) {
  if (h.chunk != chunk) return "chunk size changed within a message";
  if (h.offset >= size) return "chunk beyond the message's end";
  if (h.length != std::min<std::uint64_t>(chunk, size - h.offset))
    return "chunk of the wrong length";
  return {};
}

}  // namespace commx::detail::wan
