// SPDX-License-Identifier: MIT
// A wan path's tuning: its keys, the text an opening frame carries, and what a stream socket
// gets from it.

#include <catch2/catch.hpp>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "commx/error.hpp"
#include "commx/transport/detail/wan/paths.hpp"

namespace wan = commx::detail::wan;

namespace {

wan::path_config with(const std::string& key, const std::string& value) {
  wan::path_config p;
  wan::apply(p, key, value, "test");
  return p;
}

int notsent_lowat(int fd) {
  int v = -1;
  socklen_t length = sizeof v;
  REQUIRE(::getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &length) == 0);
  return v;
}

}  // namespace

TEST_CASE("wan tuning: unsent is a key, and 0 leaves the bound to the stream count",
          "[wan][config]") {
  CHECK(with("unsent", "256K").unsent == std::size_t{256} << 10);
  CHECK(wan::unsent_limit(with("unsent", "96K")) == std::size_t{96} << 10);
  wan::path_config p;
  p.streams = 1;
  CHECK(wan::unsent_limit(p) == std::size_t{1} << 20);
  p.streams = 16;
  CHECK(wan::unsent_limit(p) == std::size_t{256} << 10);
  p.streams = 256;
  CHECK(wan::unsent_limit(p) == std::size_t{64} << 10);
  // A stream losing packets may hold more, up to 4 MiB; with many streams the share decides.
  p.streams = 1;
  CHECK(wan::unsent_limit(p, true) == std::size_t{4} << 20);
  p.streams = 2;
  CHECK(wan::unsent_limit(p, true) == std::size_t{2} << 20);
  p.streams = 16;
  CHECK(wan::unsent_limit(p, true) == wan::unsent_limit(p));
  p.unsent = std::size_t{96} << 10;
  CHECK(wan::unsent_limit(p, true) == p.unsent);
  CHECK_THROWS_WITH(with("unsent", "2G"), Catch::Contains("unsent='2G'"));
  CHECK_THROWS_WITH(with("unsent", "lots"), Catch::Contains("unsent='lots'"));
}

TEST_CASE("wan tuning: an opening frame's text carries every key", "[wan][config]") {
  wan::path_config p;
  p.streams = 7;
  p.chunk = std::size_t{256} << 10;
  p.sndbuf = std::size_t{1} << 20;
  p.rcvbuf = std::size_t{2} << 20;
  p.pacing = 12345678;
  p.cc = "cubic";
  p.unsent = std::size_t{96} << 10;
  const auto back = wan::parse_tuning(wan::tuning_text(p));
  REQUIRE(back.has_value());
  CHECK(*back == p);
  CHECK_FALSE(wan::parse_tuning("streams=4 unsent=").has_value());
}

TEST_CASE("wan tuning: a stream socket holds no more unsent bytes than its path allows",
          "[wan][config]") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  wan::path_config p;
  p.streams = 8;
  CHECK(wan::tune_socket(fd, p).empty());
  CHECK(notsent_lowat(fd) == 512 << 10);
  p.unsent = std::size_t{80} << 10;
  CHECK(wan::tune_socket(fd, p).empty());
  CHECK(notsent_lowat(fd) == 80 << 10);
  ::close(fd);
}

TEST_CASE("wan chunks: about 16 a stream, within 64 KiB and the path's chunk", "[wan][config]") {
  constexpr std::uint64_t KiB = 1024;
  constexpr std::uint64_t MiB = KiB * KiB;
  wan::path_config p;
  p.chunk = MiB;
  p.streams = 64;
  CHECK(wan::chunk_for(256 * MiB, p, false) == 256 * KiB);
  CHECK(wan::chunk_for(64 * MiB, p, false) == 64 * KiB);
  CHECK(wan::chunk_for(8 * MiB, p, false) == 64 * KiB);  // no finer than 64 KiB
  p.streams = 4;
  CHECK(wan::chunk_for(100 * KiB, p, false) == 28 * KiB);  // still on every stream
  CHECK(wan::chunk_for(1, p, false) == 4 * KiB);
  p.streams = 2;
  CHECK(wan::chunk_for(256 * MiB, p, false) == MiB);  // never past the path's chunk
  // Pinned to one stream: the path's chunks, or the whole message in whole pages.
  CHECK(wan::chunk_for(256 * MiB, p, true) == MiB);
  CHECK(wan::chunk_for(5000, p, true) == 8 * KiB);
}
