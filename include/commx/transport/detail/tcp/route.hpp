// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What a rank (or a relay) asks of a commx-relay once the handshake (handshake.hpp, purpose
/// relay) has shown that both hold the job token: "connect me to this endpoint at this site".
/// The relay answers with one reply; after a `connected` reply the connection carries the
/// caller's bytes to the endpoint and back, uninterpreted, and the two ranks run their own
/// handshake end to end through it.
///
/// | message | from | bytes | content |
/// |---|---|---|---|
/// | request | caller | 44 | magic "CMXR", version, 3 zero bytes, the target's endpoint record (wire.hpp: address, port, site) |
/// | reply | relay | 8 | magic "CMXR", a `route_code` |
///
/// A relay sends the request on to the relay of the target's site when it has a route to it,
/// and connects to the endpoint itself otherwise (the target is at its own site, or reachable).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "commx/transport/detail/tcp/wire.hpp"

namespace commx::detail::tcp::route {

inline constexpr std::uint32_t magic = 0x52584d43;  // "CMXR"
inline constexpr std::size_t request_size = 8 + endpoint_size;
inline constexpr std::size_t reply_size = 8;

enum class route_code : std::uint32_t {
  connected = 0,    ///< what follows is the target's bytes
  malformed = 1,    ///< the request did not decode
  unreachable = 2,  ///< the relay (or the next one) could not connect to the target
  refused = 3,      ///< the next relay refused this relay (a different job token?)
};

using request_bytes = std::array<std::byte, request_size>;
using reply_bytes = std::array<std::byte, reply_size>;

inline request_bytes encode_request(const endpoint_record& target) {
  request_bytes out{};
  wire::put(&out[0], magic, 4);
  wire::put(&out[4], protocol_version, 1);
  const auto record = encode(target);
  std::copy(record.begin(), record.end(), out.begin() + 8);
  return out;
}

/// The target a request names; nullopt when any field is malformed.
inline std::optional<endpoint_record> decode_request(std::span<const std::byte, request_size> in) {
  if (wire::get(&in[0], 4) != magic || wire::get(&in[4], 1) != protocol_version ||
      wire::get(&in[5], 3) != 0)
    return std::nullopt;
  return decode_endpoint(in.subspan(8));
}

inline reply_bytes encode_reply(route_code code) {
  reply_bytes out{};
  wire::put(&out[0], magic, 4);
  wire::put(&out[4], static_cast<std::uint32_t>(code), 4);
  return out;
}

inline std::optional<route_code> decode_reply(std::span<const std::byte, reply_size> in) {
  if (wire::get(&in[0], 4) != magic) return std::nullopt;
  const auto code = wire::get(&in[4], 4);
  if (code > static_cast<std::uint32_t>(route_code::refused)) return std::nullopt;
  return static_cast<route_code>(code);
}

inline std::string_view describe(route_code code) {
  switch (code) {
    case route_code::connected:
      return "connected";
    case route_code::malformed:
      return "the relay could not read the request";
    case route_code::unreachable:
      return "the relay could not reach the target";
    case route_code::refused:
      return "the next relay refused the handshake (a different job token?)";
  }
  return "unknown";
}

}  // namespace commx::detail::tcp::route
