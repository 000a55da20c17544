// SPDX-License-Identifier: MIT
// libFuzzer target: random bytes into everything the TCP transport decodes from a peer it
// does not trust yet or at all: frame headers (as a stream, as the reader cuts it), bootstrap
// endpoints and tables, every handshake message, and the wan transport's data stream headers. None may crash, read out of bounds or
// trip UBSan; what decodes must re-encode to the same bytes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "commx/transport/detail/tcp/handshake.hpp"
#include "commx/transport/detail/tcp/route.hpp"
#include "commx/transport/detail/tcp/wire.hpp"
#include "commx/transport/detail/wan/wire.hpp"

namespace tcp = commx::detail::tcp;
namespace hs = commx::detail::tcp::handshake;
namespace wan = commx::detail::wan;

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

// A table of as many ranks as its bytes could hold at one place; what decodes must come back
// whole from its re-encoding (which may order the places differently).
void table(std::span<const std::byte> in) {
  if (in.size() < tcp::table_bytes(1, 1)) return;
  const std::size_t ranks = (in.size() - tcp::table_bytes(1, 0)) / tcp::table_rank_size;
  for (const std::size_t n : {std::size_t{1}, ranks}) {
    if (auto t = tcp::decode_table(in, n)) {
      const auto again = tcp::decode_table(tcp::encode_table(*t), n);
      require(again && *again == *t);
    }
  }
}

void frames(std::span<const std::byte> in) {
  // As a stream: header after header, skipping the payload a valid header announces.
  while (in.size() >= tcp::header_size) {
    const auto d = tcp::decode(in.first<tcp::header_size>(), 1);
    if (!d.ok()) return;  // the connection would be closed here
    const auto again = tcp::encode(d.header);
    require(std::equal(again.begin(), again.end(), in.begin()));
    in = in.subspan(tcp::header_size);
    const std::size_t skip =
        d.header.kind == tcp::frame_kind::rts ? 0 : static_cast<std::size_t>(d.header.length);
    if (d.header.kind == tcp::frame_kind::table) table(in.first(std::min(skip, in.size())));
    if (skip > in.size()) return;
    in = in.subspan(skip);
  }
}

void endpoints(std::span<const std::byte> in) {
  if (in.size() >= tcp::endpoint_size) {
    if (auto e = tcp::decode_endpoint(in.first(tcp::endpoint_size))) {
      const auto again = tcp::encode(*e);
      require(std::equal(again.begin(), again.end(), in.begin()));
    }
  }
  table(in);
  // What commx-relay reads from a caller, and a caller from the relay.
  if (in.size() >= tcp::route::request_size) {
    if (auto target = tcp::route::decode_request(in.first<tcp::route::request_size>())) {
      require(tcp::valid_site_name(target->site));
      const auto again = tcp::route::encode_request(*target);
      require(std::equal(again.begin(), again.end(), in.begin()));
    }
  }
  if (in.size() >= tcp::route::reply_size) {
    (void)tcp::route::decode_reply(in.first<tcp::route::reply_size>());
  }
}

// A wan data stream: header after header, each payload skipped; a chunk is checked against a
// message size taken from the input too.
void wan_frames(std::span<const std::byte> in) {
  while (in.size() >= wan::stream_header_size) {
    const auto d = wan::decode(in.first<wan::stream_header_size>(), 1);
    if (!d.ok()) return;
    const auto again = wan::encode(d.header);
    require(std::equal(again.begin(), again.end(), in.begin()));
    in = in.subspan(wan::stream_header_size);
    if (d.header.kind == wan::stream_kind::chunk && in.size() >= 8) {
      const std::uint64_t size = tcp::wire::get(in.data(), 8);
      if (wan::check_chunk(d.header, size, d.header.chunk).empty())
        require(d.header.offset + d.header.length <= size);
    }
    if (d.header.length > in.size()) return;
    in = in.subspan(static_cast<std::size_t>(d.header.length));
  }
}

void handshake(std::span<const std::byte> in) {
  constexpr std::string_view token = "0123456789abcdef0123456789abcdef";
  if (in.size() >= hs::hello_size) {
    if (auto h = hs::decode_hello(in.first<hs::hello_size>())) {
      require(h->rank >= 0 && h->rank < h->size);
    }
  }
  const hs::hello_bytes sent = hs::encode(hs::hello{hs::purpose::peer, 1, 2, {}});
  if (in.size() >= hs::challenge_size) {
    // Random bytes never carry a valid proof.
    require(!hs::check_challenge(token, sent, in.first<hs::challenge_size>()));
  }
  if (in.size() >= hs::response_size) {
    const hs::challenge_bytes challenge = hs::make_challenge(token, sent, {0, 2, {}});
    require(!hs::check_response(token, sent, challenge, in.first<hs::response_size>()));
  }
  if (in.size() >= hs::verdict_size) (void)hs::decode_verdict(in.first<hs::verdict_size>());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto in = std::as_bytes(std::span(data + 1, size - 1));
  switch (data[0] % 4) {
    case 0:
      frames(in);
      break;
    case 1:
      endpoints(in);
      break;
    case 2:
      wan_frames(in);
      break;
    default:
      handshake(in);
      break;
  }
  return 0;
}
