// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What a TCP endpoint is told by its environment, read and checked once at start-up:
///
/// | variable | meaning |
/// |---|---|
/// | COMMX_RANK/SIZE (or srun's, mpirun's, PMI's) | this rank and the job's size (bootstrap.hpp) |
/// | COMMX_ROOT | host:port (`[v6]:port` for IPv6) where rank 0 listens for the rendezvous |
/// | COMMX_BOOTSTRAP | `root` (the rendezvous at COMMX_ROOT), `pmix` (endpoints through the launcher's PMIx server, bootstrap/pmix.hpp; built with commx::pmix) or `auto`: pmix where it is built and a PMIx server started the process and COMMX_ROOT is not set, else root (auto) |
/// | COMMX_TOKEN | the job's shared secret; connections prove they hold it (through PMIx: rank 0 draws one when unset) |
/// | COMMX_ADDR | the address this rank listens on (default: the one it reaches the root from; through PMIx: loopback when the whole job is on this node, else the source address of the default route) |
/// | COMMX_IFACE | or: the interface whose address it listens on (`eth1`) |
/// | COMMX_PORT_RANGE | `lo-hi`: listen on the first free port in the range (firewalls) |
/// | COMMX_SITE | the site this rank is at (a name: letters, digits, `.`, `_`, `-`; up to 16) |
/// | COMMX_NODE | the node this rank is on (a name, as a site's): ranks of one site with the same name share a node; unset: ranks listening on one host address share one (`commxrun --nodes` sets it, to make several nodes of one machine) |
/// | COMMX_RELAY | host:port of this site's commx-relay: ranks at other sites are reached through it |
/// | COMMX_ROOT_SITE | the site rank 0 is at (default: this rank's), so the rendezvous is relayed too |
/// | COMMX_TIMEOUT | seconds the rendezvous may take, as for every blocking call (60) |
/// | COMMX_TCP_EAGER | largest message sent without a rendezvous, bytes (64 KiB, <= 1 MiB) |
/// | COMMX_TCP_WINDOW | eager bytes a sender may have unconsumed at each receiver (4 MiB) |
/// | COMMX_TEST_LAYOUT | `swapped`: announce the other byte order, as a rank on a machine of the other endianness would (tests of conversion) |
/// | COMMX_TLS | `off`, `sites` (connections between sites) or `on` (every connection): encrypted with TLS 1.3 (tls.hpp) (off) |
/// | COMMX_TLS_CERT, COMMX_TLS_KEY, COMMX_TLS_CA | PEM files: this rank's certificate chain and key, and the authority a peer's certificate must come from; unset: a key from the job token |
/// | COMMX_TCP_POLL | `auto`: a wait polls the sockets back to back for up to 100 us before it blocks in epoll, or for up to 200 us with a yield between polls where the machine runs more of the job's ranks than it has cores; `n`: n polls, yielding in between, whatever the machine (polling.hpp) (auto) |

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <asio.hpp>

#include "commx/bootstrap.hpp"
#if defined(COMMX_WITH_PMIX)
#include "commx/bootstrap/pmix.hpp"
#endif
#include "commx/error.hpp"
#include "commx/options.hpp"
#include "commx/transport/detail/tcp/tls.hpp"
#include "commx/transport/detail/tcp/wire.hpp"

namespace commx::detail::tcp {

struct config {
  int rank = 0;
  int size = 1;
  bool through_pmix = false;  ///< endpoints through PMIx (COMMX_BOOTSTRAP), not COMMX_ROOT
  std::string root_host;
  std::uint16_t root_port = 0;
  std::string token;
  std::optional<asio::ip::address> listen_address;  ///< unset: the one that reaches the root
  std::uint16_t port_low = 0;                       ///< 0: any free port
  std::uint16_t port_high = 0;
  clock::duration timeout = std::chrono::seconds(60);
  std::size_t eager_threshold = std::size_t{64} << 10;
  std::size_t window = std::size_t{4} << 20;
  /// COMMX_TCP_POLL=n: n polls before blocking in epoll; unset (auto): decided once the
  /// rendezvous says how many of the job's ranks share this machine (polling.hpp).
  std::optional<std::size_t> poll_turns;
  tls_settings tls;  ///< COMMX_TLS*
  /// Sites joined through commx-relay: ranks at different sites connect through this site's
  /// relay when one is given (COMMX_SITE, COMMX_RELAY, COMMX_ROOT_SITE).
  std::string site;
  std::string relay_host;  ///< empty: connect to every rank directly
  std::uint16_t relay_port = 0;
  std::string root_site;  ///< the site of rank 0's rendezvous; this rank's own by default
  std::string node;       ///< COMMX_NODE; empty: the node is the host (the listen address)
  /// The layout this rank announces (data_layout::code): its machine's, or with
  /// COMMX_TEST_LAYOUT=swapped the other byte order, as a test of conversion between machines.
  std::uint8_t layout = transport::data_layout::native().code();
};

/// "host:port" or "[v6]:port" split in two.
inline std::pair<std::string, std::uint16_t> split_host_port(const std::string& text,
                                                             const char* variable) {
  const auto colon = text.rfind(':');
  std::string host = colon == std::string::npos ? std::string() : text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string port = colon == std::string::npos ? std::string() : text.substr(colon + 1);
  char* end = nullptr;
  const long value = port.empty() ? -1 : std::strtol(port.c_str(), &end, 10);
  if (host.empty() || port.empty() || *end != '\0' || value < 1 || value > 65535) {
    throw error(errc::bootstrap_failed,
                fmt::format("{}='{}' is not host:port (or [ipv6]:port)", variable, text));
  }
  return {host, static_cast<std::uint16_t>(value)};
}

/// The first address of interface `name`, IPv4 preferred.
inline asio::ip::address interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    throw error(errc::bootstrap_failed, "COMMX_IFACE: cannot list the network interfaces");
  }
  std::optional<asio::ip::address> v4;
  std::optional<asio::ip::address> v6;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || name != i->ifa_name) continue;
    if (i->ifa_addr->sa_family == AF_INET && !v4) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      v4 = asio::ip::address_v4(ntohl(in->sin_addr.s_addr));
    } else if (i->ifa_addr->sa_family == AF_INET6 && !v6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      asio::ip::address_v6::bytes_type bytes{};
      std::memcpy(bytes.data(), in->sin6_addr.s6_addr, bytes.size());
      v6 = asio::ip::address_v6(bytes, in->sin6_scope_id);
    }
  }
  ::freeifaddrs(list);
  if (v4) return *v4;
  if (v6) return *v6;
  throw error(errc::bootstrap_failed,
              fmt::format("COMMX_IFACE='{}': no such interface with an address", name));
}

inline std::size_t size_from_env(const bootstrap::lookup& get, const char* variable,
                                 std::size_t fallback, std::size_t low, std::size_t high) {
  const auto text = get(variable);
  if (!text) return fallback;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || value < low || value > high) {
    throw error(errc::bootstrap_failed,
                fmt::format("{}='{}' is not a byte count in [{}, {}]", variable, *text, low, high));
  }
  return static_cast<std::size_t>(value);
}

/// Whether the endpoints go through PMIx (COMMX_BOOTSTRAP, the table above).
inline bool through_pmix(const bootstrap::lookup& get, const bootstrap::environment& env) {
#if defined(COMMX_WITH_PMIX)
  const bool built = true;
  const bool launched = bootstrap::pmix::launched_by_pmix(get);
#else
  const bool built = false;
  const bool launched = false;
#endif
  const std::string chosen = get("COMMX_BOOTSTRAP").value_or("auto");
  if (chosen == "root") return false;
  if (chosen == "auto") return built && launched && !env.root;
  if (chosen != "pmix") {
    throw error(errc::bootstrap_failed,
                fmt::format("COMMX_BOOTSTRAP='{}' is not root, pmix or auto", chosen));
  }
  if (!built) {
    throw error(errc::bootstrap_failed,
                "COMMX_BOOTSTRAP=pmix, but this program was built without PMIx: link "
                "commx::pmix (Debian: libpmix-dev)");
  }
  if (!launched) {
    throw error(errc::bootstrap_failed,
                "COMMX_BOOTSTRAP=pmix, but no PMIx server started this process (PMIX_NAMESPACE "
                "and PMIX_RANK are not set): start it with mpirun or srun --mpi=pmix");
  }
  return true;
}

/// Reads and checks the environment.
/// @throws commx::error errc::bootstrap_failed naming the variable that is missing or wrong.
inline config config_from_env(const bootstrap::lookup& get = bootstrap::process_env) {
  const bootstrap::environment env = bootstrap::from_env(get);
  config c;
  c.rank = env.rank;
  c.size = env.size;
  const auto timeout_text = get("COMMX_TIMEOUT");
  c.timeout = commx::detail::timeout_from_env(timeout_text ? timeout_text->c_str() : nullptr,
                                              std::chrono::seconds(60));
  c.eager_threshold =
      size_from_env(get, "COMMX_TCP_EAGER", c.eager_threshold, 0, max_eager_payload);
  c.window = size_from_env(get, "COMMX_TCP_WINDOW", c.window, std::size_t{64} << 10, max_window);
  if (const auto poll = get("COMMX_TCP_POLL"); poll && *poll != "auto") {
    c.poll_turns = size_from_env(get, "COMMX_TCP_POLL", 0, 0, 1 << 20);
  }
  if (const auto mode = get("COMMX_TLS")) {
    const auto parsed = tls_mode_from(*mode);
    if (!parsed) {
      throw error(errc::bootstrap_failed,
                  fmt::format("COMMX_TLS='{}' is not off, sites or on", *mode));
    }
    c.tls.mode = *parsed;
  }
  c.tls.certificate = get("COMMX_TLS_CERT").value_or("");
  c.tls.private_key = get("COMMX_TLS_KEY").value_or("");
  c.tls.authority = get("COMMX_TLS_CA").value_or("");
  const bool some =
      !c.tls.certificate.empty() || !c.tls.private_key.empty() || !c.tls.authority.empty();
  if (some && (c.tls.certificate.empty() || c.tls.private_key.empty() || c.tls.authority.empty())) {
    throw error(errc::bootstrap_failed,
                "COMMX_TLS_CERT, COMMX_TLS_KEY and COMMX_TLS_CA go together: a certificate, its "
                "key and the authority that checks the peers'");
  }
  if (c.size == 1) return c;  // a job of one needs no network
  c.through_pmix = through_pmix(get, env);
  if (!c.through_pmix && !env.root) {
    throw error(errc::bootstrap_failed,
                fmt::format("tcp: rank {} of {}: COMMX_ROOT (host:port of the rendezvous) is not "
                            "set; commxrun sets it; under srun or mpirun set it yourself, or "
                            "link commx::pmix to take the endpoints from the launcher's PMIx",
                            c.rank, c.size));
  }
  if (!c.through_pmix && (!env.token || env.token->empty())) {
    throw error(errc::bootstrap_failed,
                fmt::format("tcp: rank {} of {}: COMMX_TOKEN (the job's shared secret) is not set",
                            c.rank, c.size));
  }
  if (!c.through_pmix)
    std::tie(c.root_host, c.root_port) = split_host_port(*env.root, "COMMX_ROOT");
  c.token = env.token.value_or("");
  if (const auto addr = get("COMMX_ADDR")) {
    std::error_code ec;
    c.listen_address = asio::ip::make_address(*addr, ec);
    if (ec) {
      throw error(errc::bootstrap_failed,
                  fmt::format("COMMX_ADDR='{}' is not an IPv4 or IPv6 address", *addr));
    }
  } else if (const auto iface = get("COMMX_IFACE")) {
    c.listen_address = interface_address(*iface);
  }
  const auto name_from_env = [&](const char* variable, const char* what) {
    const std::string name = get(variable).value_or("");
    if (!valid_site_name(name)) {
      throw error(errc::bootstrap_failed,
                  fmt::format("{}='{}' is not a {} name (1 to {} letters, digits, '.', '_' or "
                              "'-')",
                              variable, name, what, max_site_name));
    }
    return name;
  };
  c.site = name_from_env("COMMX_SITE", "site");
  c.root_site = get("COMMX_ROOT_SITE") ? name_from_env("COMMX_ROOT_SITE", "site") : c.site;
  c.node = name_from_env("COMMX_NODE", "node");
  if (const auto as = get("COMMX_TEST_LAYOUT")) {
    if (*as != "swapped") {
      throw error(
          errc::bootstrap_failed,
          fmt::format("tcp: COMMX_TEST_LAYOUT='{}': the one test layout is 'swapped'", *as));
    }
    c.layout = static_cast<std::uint8_t>(c.layout ^ 1U);  // bit 0: the byte order
  }
  if (const auto relay = get("COMMX_RELAY")) {
    if (c.site.empty()) {
      throw error(errc::bootstrap_failed,
                  fmt::format("tcp: rank {}: COMMX_RELAY is set but COMMX_SITE is not: the relay "
                              "carries connections to ranks at other sites",
                              c.rank));
    }
    std::tie(c.relay_host, c.relay_port) = split_host_port(*relay, "COMMX_RELAY");
  }
  if (const auto range = get("COMMX_PORT_RANGE")) {
    const auto dash = range->find('-');
    char* end1 = nullptr;
    char* end2 = nullptr;
    const std::string lo = range->substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : range->substr(dash + 1);
    const long low = std::strtol(lo.c_str(), &end1, 10);
    const long high = std::strtol(hi.c_str(), &end2, 10);
    if (lo.empty() || hi.empty() || *end1 != '\0' || *end2 != '\0' || low < 1 || high > 65535 ||
        low > high) {
      throw error(
          errc::bootstrap_failed,
          fmt::format("COMMX_PORT_RANGE='{}' is not lo-hi with 1 <= lo <= hi <= 65535", *range));
    }
    c.port_low = static_cast<std::uint16_t>(low);
    c.port_high = static_cast<std::uint16_t>(high);
  }
  return c;
}

}  // namespace commx::detail::tcp
