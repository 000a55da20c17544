// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The TCP engine's join through PMIx (engine.hpp, bootstrap/pmix.hpp): each rank opens its
/// port, puts its endpoint record, and one fence hands every rank the table the COMMX_ROOT
/// rendezvous would have. No rank serves the others; connections are made on first use as
/// after the rendezvous. Out of line as Asio's detail/impl files are, included by engine.hpp.

#include <atomic>
#include <string>

#include "commx/transport/detail/tcp/engine.hpp"

namespace commx::detail::tcp {

#if defined(COMMX_WITH_PMIX)

// Where a rank of a job spread over nodes listens when told nothing (COMMX_ADDR, COMMX_IFACE):
// the address the kernel would send from towards the outside, found by connecting a UDP
// socket (nothing is sent) to a documentation-only address (RFC 5737).
inline asio::ip::address default_route_address(asio::io_context& io, int rank) {
  asio::ip::udp::socket probe(io);
  std::error_code ec;
  probe.open(asio::ip::udp::v4(), ec);
  if (!ec) probe.connect({asio::ip::make_address_v4("192.0.2.1"), 9}, ec);
  asio::ip::address found;
  if (!ec) found = probe.local_endpoint(ec).address();
  if (ec) {
    throw error(errc::bootstrap_failed,
                fmt::format("tcp: rank {}: the job spans nodes and this one has no default route "
                            "({}): set COMMX_ADDR or COMMX_IFACE to the address the others reach",
                            rank, ec.message()));
  }
  return found;
}

inline void engine::join_through_pmix(clock::time_point until) {
  auto& pmix = bootstrap::pmix::client::get();
  if (pmix.rank() != rank() || pmix.size() != size()) {
    throw error(errc::bootstrap_failed,
                fmt::format("tcp: PMIx says rank {} of {} (job {}), the environment rank {} of "
                            "{}: a job of several launches meets at COMMX_ROOT",
                            pmix.rank(), pmix.size(), pmix.job(), rank(), size()));
  }
  const bool one_node = pmix.local_size() == size();
  const asio::ip::address address = cfg_.listen_address ? *cfg_.listen_address
                                    : one_node ? asio::ip::address(asio::ip::address_v4::loopback())
                                               : default_route_address(io_, rank());
  open_acceptor({address, 0}, false);
  // Its accept handler runs when the engine next waits, once the token below is known.
  const auto record = encode(record_of(acceptor_->local_endpoint()));
  std::string drawn;
  if (cfg_.token.empty() && rank() == 0) {
    const handshake::nonce secret = handshake::fresh_nonce();
    drawn = fmt::format("{:02x}", fmt::join(std::as_bytes(std::span(secret)), ""));
  }
  // Every endpoint of the process gets keys of its own: a program that makes a second one
  // (SPMD: every rank in the same order) must not read the first one's records.
  static std::atomic<int> generation{0};
  const std::string key = fmt::format("commx.tcp.{}", generation.fetch_add(1));
  const auto seconds = std::chrono::ceil<std::chrono::seconds>(until - clock::now()).count();
  const auto got = pmix.allgather(key, record, std::as_bytes(std::span(drawn)),
                                  static_cast<int>(std::max<decltype(seconds)>(seconds, 1)));
  if (cfg_.token.empty()) {
    if (got.extra.empty()) {
      throw error(errc::bootstrap_failed,
                  fmt::format("tcp: rank {}: COMMX_TOKEN is not set here, and rank 0 put no "
                              "token through PMIx (set it for every rank or for none)",
                              rank()));
    }
    cfg_.token.assign(reinterpret_cast<const char*>(got.extra.data()), got.extra.size());
  }
  table_.assign(index(size()), endpoint_record{});
  for (int r = 0; r < size(); ++r) {
    auto e = decode_endpoint(got.values[index(r)]);
    if (!e) {
      throw error(errc::bootstrap_failed,
                  fmt::format("tcp: rank {}: rank {}'s endpoint through PMIx is malformed ({} "
                              "bytes)",
                              rank(), r, got.values[index(r)].size()));
    }
    table_[index(r)] = *e;
  }
  have_table_ = true;
}

#else

inline void engine::join_through_pmix(clock::time_point) {
  throw error(errc::bootstrap_failed, "tcp: built without PMIx: link commx::pmix");
}

#endif

}  // namespace commx::detail::tcp
