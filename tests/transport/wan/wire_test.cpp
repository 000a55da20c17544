// SPDX-License-Identifier: MIT
// The frames on a wan data stream (detail/wan/wire.hpp): every kind round-trips, and every
// malformed field is refused with its own reason before anything acts on it.

#include <catch2/catch.hpp>

#include <cstdint>
#include <string_view>

#include "commx/transport/detail/wan/wire.hpp"

namespace {

namespace wan = commx::detail::wan;
using wan::stream_header;
using wan::stream_kind;

constexpr int peer = 3;

std::string_view refusal(const wan::stream_header_bytes& bytes) {
  return wan::decode(bytes, peer).error;
}
std::string_view refusal(const stream_header& h) { return refusal(wan::encode(h)); }

const stream_header valid[] = {
    {stream_kind::open, peer, 4, 7, 3, 60},
    {stream_kind::chunk, peer, 1 << 20, 42, 3 << 20, 1 << 20},
    {stream_kind::close, peer, 0, 7, 0, 0},
    {stream_kind::probe, peer, 0, 0, 0, 256 << 10},
    {stream_kind::retune, peer, 6, 7, 0, 60},
};

}  // namespace

TEST_CASE("wan stream frames: every kind decodes to what was encoded", "[wan][wire]") {
  for (const stream_header& h : valid) {
    const auto d = wan::decode(wan::encode(h), peer);
    INFO(static_cast<int>(h.kind));
    REQUIRE(d.ok());
    CHECK(d.header.kind == h.kind);
    CHECK(d.header.source == h.source);
    CHECK(d.header.chunk == h.chunk);
    CHECK(d.header.id == h.id);
    CHECK(d.header.offset == h.offset);
    CHECK(d.header.length == h.length);
  }
}

TEST_CASE("wan stream frames: a bad envelope is refused", "[wan][wire]") {
  const auto good = wan::encode(valid[1]);
  auto bytes = good;
  bytes[0] = std::byte{'X'};
  CHECK(refusal(bytes) == "bad magic on a data stream");
  bytes = good;
  bytes[4] = std::byte{2};
  CHECK(refusal(bytes) == "unsupported data stream version");
  for (const int kind : {0, 6, 255}) {
    bytes = good;
    bytes[5] = static_cast<std::byte>(kind);
    CHECK(refusal(bytes) == "unknown data stream frame kind");
  }
  bytes = good;
  bytes[6] = std::byte{1};
  CHECK(refusal(bytes) == "unknown flags on a data stream");
  CHECK(wan::decode(good, peer + 1).error == "source is not the connected peer");
}

TEST_CASE("wan stream frames: malformed fields of each kind are refused", "[wan][wire]") {
  const auto with = [](stream_header h, auto&& change) {
    change(h);
    return refusal(h);
  };
  const stream_header open = valid[0];
  CHECK(with(open, [](auto& h) { h.chunk = 0; }) == "malformed stream opening");
  CHECK(with(open, [](auto& h) { h.chunk = wan::max_streams + 1; }) == "malformed stream opening");
  CHECK(with(open, [](auto& h) { h.offset = h.chunk; }) == "malformed stream opening");
  CHECK(with(open, [](auto& h) { h.length = wan::max_tuning_text + 1; }) ==
        "malformed stream opening");

  const stream_header chunk = valid[1];
  CHECK(with(chunk, [](auto& h) { h.chunk = 0; }) == "chunk size out of range");
  CHECK(with(chunk, [](auto& h) { h.id = 0; }) == "chunk without a message id");
  CHECK(with(chunk, [](auto& h) { h.length = 0; }) == "chunk length out of range");
  CHECK(with(chunk, [](auto& h) { h.length = h.chunk + 1; }) == "chunk length out of range");
  CHECK(with(chunk, [](auto& h) { h.offset += 1; }) == "chunk offset out of place");

  CHECK(with(valid[2], [](auto& h) { h.length = 1; }) == "malformed stream close");
  CHECK(with(valid[3], [](auto& h) { h.id = 1; }) == "malformed probe");

  const stream_header retune = valid[4];
  CHECK(with(retune, [](auto& h) { h.chunk = 0; }) == "malformed retune request");
  CHECK(with(retune, [](auto& h) { h.chunk = wan::max_streams + 1; }) ==
        "malformed retune request");
  CHECK(with(retune, [](auto& h) { h.offset = 1; }) == "malformed retune request");
  CHECK(with(retune, [](auto& h) { h.length = 0; }) == "malformed retune request");
  CHECK(with(retune, [](auto& h) { h.length = wan::max_tuning_text + 1; }) ==
        "malformed retune request");
}

TEST_CASE("wan stream frames: a chunk must fit its message", "[wan][wire]") {
  const std::uint64_t size = (std::uint64_t{3} << 20) + 5;  // 3 whole chunks and 5 bytes
  stream_header h{stream_kind::chunk, peer, 1 << 20, 42, 3 << 20, 5};
  CHECK(wan::check_chunk(h, size, h.chunk).empty());
  CHECK(wan::check_chunk(h, size, 2 << 20) == "chunk size changed within a message");
  h.offset = 4 << 20;
  CHECK(wan::check_chunk(h, size, h.chunk) == "chunk beyond the message's end");
  h.offset = 1 << 20;
  CHECK(wan::check_chunk(h, size, h.chunk) == "chunk of the wrong length");
}
