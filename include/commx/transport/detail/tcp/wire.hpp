// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP transport's frames: a fixed 40-byte header, encoded little-endian field by field
/// (never by copying a struct), and a decoder that checks every field before anything acts on
/// it. A header that fails a check is a protocol violation: the receiver closes that
/// connection. The checks here are those a header can fail on its own; those that need the
/// connection's state (is this rendezvous id one I asked for?) are the engine's.
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | magic "CMXF" |
/// | 4 | 1 | protocol version |
/// | 5 | 1 | kind (`frame_kind`) |
/// | 6 | 2 | flags: `data_follows` on an rts whose payload leaves at once on wan's data streams; else 0 |
/// | 8 | 4 | source world rank |
/// | 12 | 4 | tag |
/// | 16 | 8 | communicator context id |
/// | 24 | 8 | length: payload bytes that follow (eager, data, bootstrap), the message size (rts) |
/// | 32 | 8 | cookie: rendezvous id (rts, cts, data, revoke), bytes returned (credit, grant) |
///
/// Bootstrap payloads: an `address` frame carries one 60-byte endpoint (family 4 or 6, the
/// layout of the rank's machine as transport::data_layout::code, port, 16 address bytes with
/// IPv4 in the first 4 and the rest zero, then the rank's site name in 16 bytes, zero-padded:
/// sites joined through commx-relay; then its node name in 16 bytes, zero-padded: COMMX_NODE,
/// empty when the node is the host; then 8 bytes that name its machine, the kernel's boot id
/// folded (0: unknown), so that ranks know who shares their cores); a `table` frame each place
/// the ranks listen at once and a place and a port per rank, in rank order (`encode_table`);
/// an `abort` frame a short text saying why the rendezvous failed.
/// Version 2 added the node name; version 3 the `data_follows` flag and the `grant` frame;
/// version 4 the layout (a zero byte before); version 5 the machine; version 6 the table by
/// places (a whole endpoint per rank before).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commx/transport/data_layout.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::tcp {

inline constexpr std::uint32_t frame_magic = 0x46584d43;  // "CMXF" as it reads on the wire
inline constexpr std::uint8_t protocol_version = 6;
inline constexpr std::size_t header_size = 40;
/// The largest eager payload any sender may use, whatever its configuration.
inline constexpr std::size_t max_eager_payload = std::size_t{1} << 20;
/// The largest message: 1 TiB, well past any buffer, well short of overflowing anything.
inline constexpr std::uint64_t max_message_size = std::uint64_t{1} << 40;
/// The largest eager window a receiver may grant, so credits are checked against a bound.
inline constexpr std::uint64_t max_window = std::uint64_t{1} << 32;
inline constexpr std::size_t endpoint_size = 60;
inline constexpr std::size_t max_site_name = 16;
inline constexpr std::size_t max_node_name = 16;
inline constexpr std::size_t max_ranks = std::size_t{1} << 20;
inline constexpr std::size_t max_abort_text = 4096;

// The table rank 0 hands every rank: each place the ranks listen at (a record but for its
// port, which holds its first rank's) once, then a place's index and a port per rank:
//
//   | places P (4) | P records (endpoint_size each) | per rank: place (4), port (2) |
//
// The ranks of a host share a place, so a rank costs 6 bytes, not a record's 60: rank 0, which
// writes the table to every rank, writes O(N * (6 N + 60 hosts)) bytes (at 4,096 ranks on 64
// hosts 116 MB, where whole records made 1 GB).
inline constexpr std::size_t table_count_size = 4;
inline constexpr std::size_t table_rank_size = 6;

/// The size of a table of `ranks` ranks at `places` places.
constexpr std::uint64_t table_bytes(std::uint64_t places, std::uint64_t ranks) {
  return table_count_size + places * endpoint_size + ranks * table_rank_size;
}

/// Whether `length` can be the size of a table of `ranks` ranks (1 to `ranks` places).
constexpr bool table_length_fits(std::uint64_t length, std::uint64_t ranks) {
  const std::uint64_t least = table_bytes(1, ranks);
  return ranks > 0 && length >= least && length <= table_bytes(ranks, ranks) &&
         (length - least) % endpoint_size == 0;
}

enum class frame_kind : std::uint8_t {
  eager = 1,  ///< a message with its payload
  rts,        ///< ready to send: a large message's envelope; the payload waits for a cts
  cts,        ///< clear to send: the receiver has a buffer for rendezvous `cookie`
  data,       ///< the payload of rendezvous `cookie`, straight into the receiver's buffer
  credit,     ///< the receiver took `cookie` bytes of eager messages: the sender may send more
  revoke,     ///< the sender withdrew rendezvous `cookie`
  bye,        ///< the sender is leaving the job (finished, not failed): nothing more follows
  address,    ///< bootstrap: a rank's listen endpoint, to rank 0
  table,      ///< bootstrap: every rank's listen endpoint, from rank 0
  abort,      ///< bootstrap: rank 0 gives up; the payload says why
  grant,      ///< the receiver is done with `cookie` bytes of messages sent with data_follows
  signal,     ///< for the extension (engine::signal): `cookie` says what; plain tcp refuses it
};
inline constexpr std::uint8_t last_frame_kind = static_cast<std::uint8_t>(frame_kind::signal);

/// On an rts: its payload is already on its way on the path's data streams (wan's eager path,
/// wan/paths.hpp), so no cts is asked for.
inline constexpr std::uint16_t data_follows = 1;

struct frame_header {
  frame_kind kind = frame_kind::eager;
  std::uint16_t flags = 0;
  int source = 0;
  int tag = 0;
  context_id context = 0;
  std::uint64_t length = 0;
  std::uint64_t cookie = 0;
};

using header_bytes = std::array<std::byte, header_size>;

namespace wire {

inline void put(std::byte* at, std::uint64_t value, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) at[i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}

inline std::uint64_t get(const std::byte* at, std::size_t bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i)
    value |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(at[i])) << (8 * i);
  return value;
}

}  // namespace wire

inline header_bytes encode(const frame_header& h) {
  header_bytes out{};
  wire::put(&out[0], frame_magic, 4);
  wire::put(&out[4], protocol_version, 1);
  wire::put(&out[5], static_cast<std::uint8_t>(h.kind), 1);
  wire::put(&out[6], h.flags, 2);
  wire::put(&out[8], static_cast<std::uint32_t>(h.source), 4);
  wire::put(&out[12], static_cast<std::uint32_t>(h.tag), 4);
  wire::put(&out[16], h.context, 8);
  wire::put(&out[24], h.length, 8);
  wire::put(&out[32], h.cookie, 8);
  return out;
}

/// A decoded header, or why it was refused.
struct decoded {
  frame_header header;
  std::string_view error;  ///< empty when the header is valid
  [[nodiscard]] bool ok() const { return error.empty(); }
};

/// Decodes and validates a header that arrived from `expected_source` (the rank at the other
/// end of the connection). Checks every field a header can get wrong on its own.
inline decoded decode(std::span<const std::byte, header_size> in, int expected_source) {
  decoded d;
  frame_header& h = d.header;
  if (wire::get(&in[0], 4) != frame_magic) return {h, "bad magic"};
  if (wire::get(&in[4], 1) != protocol_version) return {h, "unsupported protocol version"};
  const auto kind = static_cast<std::uint8_t>(wire::get(&in[5], 1));
  if (kind < 1 || kind > last_frame_kind) return {h, "unknown frame kind"};
  h.kind = static_cast<frame_kind>(kind);
  h.flags = static_cast<std::uint16_t>(wire::get(&in[6], 2));
  h.source = static_cast<int>(static_cast<std::int32_t>(wire::get(&in[8], 4)));
  h.tag = static_cast<int>(static_cast<std::int32_t>(wire::get(&in[12], 4)));
  h.context = wire::get(&in[16], 8);
  h.length = wire::get(&in[24], 8);
  h.cookie = wire::get(&in[32], 8);
  if (h.flags != 0 && !(h.kind == frame_kind::rts && h.flags == data_follows))
    return {h, "unknown flags"};
  if (h.source != expected_source) return {h, "source is not the connected peer"};
  const bool message = h.kind == frame_kind::eager || h.kind == frame_kind::rts;
  if (message && h.tag < 0) return {h, "negative tag"};
  if (!message && (h.tag != 0 || h.context != 0)) return {h, "tag or context on a control frame"};
  switch (h.kind) {
    case frame_kind::eager:
      if (h.length > max_eager_payload) return {h, "eager payload too large"};
      if (h.cookie != 0) return {h, "cookie on an eager frame"};
      break;
    case frame_kind::rts:
      if (h.length > max_message_size) return {h, "message too large"};
      if (h.cookie == 0) return {h, "rendezvous without an id"};
      break;
    case frame_kind::data:
      if (h.length > max_message_size) return {h, "message too large"};
      if (h.cookie == 0) return {h, "rendezvous without an id"};
      break;
    case frame_kind::cts:
    case frame_kind::revoke:
      if (h.length != 0) return {h, "payload on a control frame"};
      if (h.cookie == 0) return {h, "rendezvous without an id"};
      break;
    case frame_kind::credit:
    case frame_kind::grant:
      if (h.length != 0) return {h, "payload on a control frame"};
      if (h.cookie == 0 || h.cookie > max_window) return {h, "credit out of range"};
      break;
    case frame_kind::bye:
      if (h.length != 0 || h.cookie != 0) return {h, "payload on a control frame"};
      break;
    case frame_kind::signal:
      if (h.length != 0) return {h, "payload on a control frame"};
      break;
    case frame_kind::address:
      if (h.length != endpoint_size || h.cookie != 0) return {h, "malformed address frame"};
      break;
    case frame_kind::table:
      if (h.length < table_bytes(1, 1) || h.length > table_bytes(max_ranks, max_ranks) ||
          h.cookie != 0)
        return {h, "malformed table frame"};
      break;
    case frame_kind::abort:
      if (h.length > max_abort_text || h.cookie != 0) return {h, "malformed abort frame"};
      break;
  }
  return d;
}

/// A site or node name: 1 to 16 letters, digits, '.', '_' or '-' (or empty: none given).
inline bool valid_site_name(std::string_view name) {
  static_assert(max_node_name == max_site_name, "node names follow the rules of site names");
  if (name.size() > max_site_name) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

/// A listen endpoint as the bootstrap frames carry it, with the site and node its rank is at.
struct endpoint_record {
  bool v6 = false;
  std::uint16_t port = 0;
  std::array<std::uint8_t, 16> address{};
  std::string site;  ///< valid_site_name; empty: no site given
  std::string node;  ///< valid_site_name; empty: the node is the host (its listen address)
  /// How its machine lays out values (transport::data_layout::code).
  std::uint8_t layout = transport::data_layout::native().code();
  /// Its machine: ranks with the same nonzero value share one kernel, and so its cores.
  std::uint64_t machine = 0;

  friend bool operator==(const endpoint_record&, const endpoint_record&) = default;
};

inline std::array<std::byte, endpoint_size> encode(const endpoint_record& e) {
  std::array<std::byte, endpoint_size> out{};
  wire::put(&out[0], e.v6 ? 6 : 4, 1);
  wire::put(&out[1], e.layout, 1);
  wire::put(&out[2], e.port, 2);
  for (std::size_t i = 0; i < 16; ++i) out[4 + i] = static_cast<std::byte>(e.address[i]);
  for (std::size_t i = 0; i < e.site.size() && i < max_site_name; ++i) {
    out[20 + i] = static_cast<std::byte>(e.site[i]);
  }
  for (std::size_t i = 0; i < e.node.size() && i < max_node_name; ++i) {
    out[36 + i] = static_cast<std::byte>(e.node[i]);
  }
  wire::put(&out[52], e.machine, 8);
  return out;
}

namespace wire {

/// The name in the zero-padded bytes of `in`; nullopt if a byte after its end is not
/// zero or a character is not a name's.
inline std::optional<std::string> get_name(std::span<const std::byte> in) {
  std::size_t length = 0;
  while (length < in.size() && in[length] != std::byte{0}) ++length;
  for (std::size_t i = length; i < in.size(); ++i) {
    if (in[i] != std::byte{0}) return std::nullopt;  // padding is zero, to the end
  }
  std::string name(reinterpret_cast<const char*>(in.data()), length);
  if (!valid_site_name(name)) return std::nullopt;
  return name;
}

}  // namespace wire

/// Decodes one endpoint record; nullopt if any field is out of range.
inline std::optional<endpoint_record> decode_endpoint(std::span<const std::byte> in) {
  if (in.size() != endpoint_size) return std::nullopt;
  const auto family = wire::get(&in[0], 1);
  if (family != 4 && family != 6) return std::nullopt;
  endpoint_record e;
  e.v6 = family == 6;
  e.layout = static_cast<std::uint8_t>(wire::get(&in[1], 1));
  if (!transport::data_layout::from_code(e.layout)) return std::nullopt;
  e.port = static_cast<std::uint16_t>(wire::get(&in[2], 2));
  if (e.port == 0) return std::nullopt;
  for (std::size_t i = 0; i < 16; ++i) {
    e.address[i] = std::to_integer<std::uint8_t>(in[4 + i]);
    if (!e.v6 && i >= 4 && e.address[i] != 0) return std::nullopt;
  }
  auto site = wire::get_name(in.subspan(20, max_site_name));
  auto node = wire::get_name(in.subspan(36, max_node_name));
  if (!site || !node) return std::nullopt;
  e.site = std::move(*site);
  e.node = std::move(*node);
  e.machine = wire::get(&in[52], 8);
  return e;
}

/// Encodes `table` (every rank's record, none with port 0) as above.
inline std::vector<std::byte> encode_table(std::span<const endpoint_record> table) {
  using record_bytes = std::array<std::byte, endpoint_size>;
  std::map<record_bytes, std::uint32_t> place_of;  // a record's bytes with port 0: its place
  std::vector<record_bytes> places;
  std::vector<std::byte> ranks(table.size() * table_rank_size);
  for (std::size_t r = 0; r < table.size(); ++r) {
    endpoint_record place = table[r];
    place.port = 0;
    const auto [at, fresh] =
        place_of.try_emplace(encode(place), static_cast<std::uint32_t>(places.size()));
    if (fresh) places.push_back(encode(table[r]));
    wire::put(&ranks[r * table_rank_size], at->second, 4);
    wire::put(&ranks[r * table_rank_size + 4], table[r].port, 2);
  }
  std::vector<std::byte> out(table_count_size);
  wire::put(out.data(), places.size(), 4);
  out.reserve(table_bytes(places.size(), table.size()));
  for (const record_bytes& place : places) out.insert(out.end(), place.begin(), place.end());
  out.insert(out.end(), ranks.begin(), ranks.end());
  return out;
}

/// Decodes a table of `ranks` ranks; nullopt if its size, a record, a place index or a port is
/// wrong, or a place no rank is at is listed.
inline std::optional<std::vector<endpoint_record>> decode_table(std::span<const std::byte> in,
                                                                std::size_t ranks) {
  if (!table_length_fits(in.size(), ranks)) return std::nullopt;
  const std::uint64_t count = wire::get(in.data(), 4);
  if (count == 0 || count > ranks || in.size() != table_bytes(count, ranks)) return std::nullopt;
  std::vector<endpoint_record> places;
  places.reserve(count);
  for (std::size_t p = 0; p < count; ++p) {
    auto e = decode_endpoint(in.subspan(table_count_size + p * endpoint_size, endpoint_size));
    if (!e) return std::nullopt;
    places.push_back(std::move(*e));
  }
  std::vector<bool> used(count);
  std::vector<endpoint_record> table;
  table.reserve(ranks);
  const std::span<const std::byte> per_rank = in.subspan(table_count_size + count * endpoint_size);
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::uint64_t place = wire::get(&per_rank[r * table_rank_size], 4);
    const auto port = static_cast<std::uint16_t>(wire::get(&per_rank[r * table_rank_size + 4], 2));
    if (place >= count || port == 0) return std::nullopt;
    used[place] = true;
    table.push_back(places[place]);
    table.back().port = port;
  }
  if (std::find(used.begin(), used.end(), false) != used.end()) return std::nullopt;
  return table;
}

}  // namespace commx::detail::tcp
