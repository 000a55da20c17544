// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How a wan path to a peer is tuned, and where that comes from. Everything tcp reads
/// (tcp/config.hpp) holds too; on top of it, per path:
///
/// | variable | meaning |
/// |---|---|
/// | COMMX_WAN_STREAMS | parallel TCP data streams per path, 1-256 (4), each beside the control connection (which carries the envelopes and small messages) |
/// | COMMX_WAN_CHUNK | bytes per chunk of a large message (1 MiB, 4 KiB - 1 GiB) |
/// | COMMX_WAN_SNDBUF / COMMX_WAN_RCVBUF | SO_SNDBUF / SO_RCVBUF of each stream, bytes (0: the kernel autotunes) |
/// | COMMX_WAN_PACING | SO_MAX_PACING_RATE of each stream, bytes per second (0: none) |
/// | COMMX_WAN_UNSENT | TCP_NOTSENT_LOWAT of each stream, bytes (0: 4 MiB shared by the streams, 64 KiB - 1 MiB each, up to 4 MiB while a stream loses packets; see unsent_limit) |
/// | COMMX_WAN_CC | TCP_CONGESTION of each stream (`bbr`, `cubic`; empty: the system's default) |
/// | COMMX_WAN_PATHS | a file of per-path overrides, one path a line: `A B key=value...` |
/// | COMMX_WAN_EAGER | bytes of large messages a rank may send to one peer over the streams without waiting for the receiver's clear-to-send, the receiver holding them until its user posts the receive: each rank offers its own to its peers (16 MiB; 0: every large message to this rank waits; at most 4 GiB) |
/// | COMMX_WAN_AUTOTUNE | `1`: at start-up, measure each path (RTT, throughput as streams double) and pick its streams and chunk; one line per path on stderr at COMMX_LOG level `warn` (paths_autotune.hpp) |
///
/// A path file line names two ranks (`*` for any) and overrides keys `streams`, `chunk`,
/// `sndbuf`, `rcvbuf`, `pacing`, `unsent`, `cc` for the path between them; sizes take K, M, G
/// suffixes; `#` starts a comment; later lines win. The rank that opens the path's streams (the
/// higher one) decides its tuning, so both need not agree.

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commx/bootstrap.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/tcp/config.hpp"
#include "commx/transport/detail/wan/wire.hpp"

namespace commx::detail::wan {

/// One path's tuning.
struct path_config {
  int streams = 4;
  std::size_t chunk = std::size_t{1} << 20;
  std::size_t sndbuf = 0;  ///< 0: the kernel's autotuning
  std::size_t rcvbuf = 0;
  std::uint64_t pacing = 0;  ///< bytes per second per stream; 0: unpaced
  std::string cc;            ///< congestion control; empty: the system's default
  std::size_t unsent = 0;    ///< TCP_NOTSENT_LOWAT per stream; 0: unsent_limit's choice

  friend bool operator==(const path_config&, const path_config&) = default;
};

inline constexpr std::size_t min_chunk = std::size_t{4} << 10;

/// How many bytes a stream's socket may hold that it has not sent yet (TCP_NOTSENT_LOWAT).
/// Bytes in a socket are committed to that stream. Without a bound, the kernel takes up to its
/// whole send buffer (4 MiB each when autotuned): with 64 streams that is most of a 256 MiB
/// message, dealt out before the streams show their speeds, and the message ends with the
/// slowest stream's share. Unsent bytes also take room from the bytes in flight in a
/// buffer-limited stream. So 4 MiB in all, 64 KiB to 1 MiB a stream.
///
/// A stream that is `losing` packets needs more: its queue frees only as each hole is repaired,
/// about once a round trip, and its writer wakes only then, so between two repairs it can send
/// only what it holds unsent. Then the bound is 4 MiB in all, up to 4 MiB a stream (with one
/// stream and 0.1% loss: 0.92x iperf3 against 0.86x at 1 MiB; bench/HISTORY.md, wan).
[[nodiscard]] inline std::size_t unsent_limit(const path_config& p, bool losing = false) {
  if (p.unsent > 0) return p.unsent;
  const std::size_t all = std::size_t{4} << 20;
  const std::size_t most = losing ? all : std::size_t{1} << 20;
  return std::clamp(all / static_cast<std::size_t>(std::max(p.streams, 1)), std::size_t{64} << 10,
                    most);
}

/// A path file line: the ranks it names (-1: any) and the keys it overrides.
struct path_override {
  int a = -1;
  int b = -1;
  std::vector<std::pair<std::string, std::string>> keys;
};

struct config {
  tcp::config base;
  path_config path;  ///< the default for every path
  std::vector<path_override> overrides;
  bool autotune = false;
  /// false: a path between two ranks of one site has no data streams, and its large messages
  /// go on the control connection as tcp's do (the node/site stack, shm_tcp_wan.hpp, where the
  /// streams are for the wide-area link only).
  bool streams_within_site = true;
  /// COMMX_WAN_EAGER: the streamed window (tcp::extension::streamed_window).
  std::uint64_t eager = std::uint64_t{16} << 20;

  /// The tuning of the path between `me` and `peer`.
  [[nodiscard]] path_config path_to(int me, int peer) const;
};

/// "64K", "1M", "3G" or plain bytes; nullopt when malformed.
inline std::optional<std::uint64_t> parse_size(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text.front()))) return std::nullopt;
  char* end = nullptr;
  std::uint64_t value = std::strtoull(text.c_str(), &end, 10);
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") {
    value <<= 10;
  } else if (suffix == "M" || suffix == "m") {
    value <<= 20;
  } else if (suffix == "G" || suffix == "g") {
    value <<= 30;
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  return value;
}

/// Sets `key` of `p` to `value`; throws errc::bootstrap_failed naming `where` when it is wrong.
inline void apply(path_config& p, const std::string& key, const std::string& value,
                  const std::string& where) {
  const auto bad = [&](const char* expected) {
    return error(errc::bootstrap_failed,
                 fmt::format("wan: {}: {}='{}' is not {}", where, key, value, expected));
  };
  if (key == "cc") {
    for (const char ch : value) {
      if (std::isalnum(static_cast<unsigned char>(ch)) == 0 && ch != '_' && ch != '-')
        throw bad("a congestion control name");
    }
    p.cc = value;
    return;
  }
  const auto n = parse_size(value);
  if (!n) throw bad("a number (K, M, G suffixes allowed)");
  if (key == "streams") {
    if (*n < 1 || *n > max_streams) throw bad("a stream count in [1, 256]");
    p.streams = static_cast<int>(*n);
  } else if (key == "chunk") {
    if (*n < min_chunk || *n > max_chunk) throw bad("a chunk size in [4K, 1G]");
    p.chunk = static_cast<std::size_t>(*n);
  } else if (key == "sndbuf" || key == "rcvbuf") {
    if (*n > (std::uint64_t{1} << 30)) throw bad("a buffer size up to 1G");
    (key == "sndbuf" ? p.sndbuf : p.rcvbuf) = static_cast<std::size_t>(*n);
  } else if (key == "pacing") {
    p.pacing = *n;
  } else if (key == "unsent") {
    if (*n > (std::uint64_t{1} << 30)) throw bad("a byte count up to 1G");
    p.unsent = static_cast<std::size_t>(*n);
  } else {
    throw error(
        errc::bootstrap_failed,
        fmt::format(
            "wan: {}: unknown key '{}' (streams, chunk, sndbuf, rcvbuf, pacing, unsent, cc)", where,
            key));
  }
}

inline path_config config::path_to(int me, int peer) const {
  path_config p = path;
  for (const path_override& o : overrides) {
    const bool forward = (o.a < 0 || o.a == me) && (o.b < 0 || o.b == peer);
    const bool backward = (o.a < 0 || o.a == peer) && (o.b < 0 || o.b == me);
    if (!forward && !backward) continue;
    for (const auto& [key, value] : o.keys) apply(p, key, value, "COMMX_WAN_PATHS");
  }
  return p;
}

/// Reads a path file's lines.
/// @throws commx::error errc::bootstrap_failed naming the file and line that is wrong.
inline std::vector<path_override> read_path_file(const std::string& file) {
  std::ifstream in(file);
  if (!in) {
    throw error(errc::bootstrap_failed,
                fmt::format("wan: COMMX_WAN_PATHS='{}' cannot be read", file));
  }
  std::vector<path_override> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string a;
    std::string b;
    if (!(words >> a)) continue;
    const std::string where = fmt::format("{} line {}", file, number);
    const auto rank_of = [&](const std::string& w) {
      if (w == "*") return -1;
      const auto n = parse_size(w);
      if (!n || *n > tcp::max_ranks) {
        throw error(errc::bootstrap_failed,
                    fmt::format("wan: {}: '{}' is not a rank or *", where, w));
      }
      return static_cast<int>(*n);
    };
    path_override o;
    o.a = rank_of(a);
    if (!(words >> b)) {
      throw error(errc::bootstrap_failed, fmt::format("wan: {}: a path names two ranks", where));
    }
    o.b = rank_of(b);
    std::string kv;
    path_config check;
    while (words >> kv) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) {
        throw error(errc::bootstrap_failed,
                    fmt::format("wan: {}: '{}' is not key=value", where, kv));
      }
      o.keys.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
      apply(check, o.keys.back().first, o.keys.back().second, where);  // refuse it now
    }
    out.push_back(std::move(o));
  }
  return out;
}

/// Reads and checks the environment.
/// @throws commx::error errc::bootstrap_failed naming the variable that is missing or wrong.
inline config config_from_env(const bootstrap::lookup& get = bootstrap::process_env) {
  config c;
  c.base = tcp::config_from_env(get);
  const std::pair<const char*, const char*> keys[] = {{"COMMX_WAN_STREAMS", "streams"},
                                                      {"COMMX_WAN_CHUNK", "chunk"},
                                                      {"COMMX_WAN_SNDBUF", "sndbuf"},
                                                      {"COMMX_WAN_RCVBUF", "rcvbuf"},
                                                      {"COMMX_WAN_PACING", "pacing"},
                                                      {"COMMX_WAN_UNSENT", "unsent"},
                                                      {"COMMX_WAN_CC", "cc"}};
  for (const auto& [variable, key] : keys) {
    if (const auto value = get(variable)) apply(c.path, key, *value, variable);
  }
  if (const auto file = get("COMMX_WAN_PATHS"); file && !file->empty()) {
    c.overrides = read_path_file(*file);
  }
  if (const auto a = get("COMMX_WAN_AUTOTUNE")) c.autotune = *a == "1";
  if (const auto e = get("COMMX_WAN_EAGER")) {
    const auto n = parse_size(*e);
    if (!n || *n > tcp::max_window) {
      throw error(errc::bootstrap_failed,
                  fmt::format("wan: COMMX_WAN_EAGER='{}' is not a byte count up to 4G (K, M, G "
                              "suffixes allowed)",
                              *e));
    }
    c.eager = *n;
  }
  return c;
}

}  // namespace commx::detail::wan
