// SPDX-License-Identifier: MIT
// commx-relay on loopback, with real processes: a three-rank wan job split over two sites, A
// (ranks 0 and 2) and B (rank 1), each site with its relay. Rank 1 reaches rank 0 through
// relay B and then relay A (B has a route to A); rank 2 reaches rank 1 through relay A alone,
// which has no route to B and so connects to the endpoint itself. The relays log every link,
// so the test sees that the traffic went through them. Strangers at a relay (garbage, a wrong
// token, a hello for a rank's port) are refused and logged while the job goes on, and a rank
// whose relay holds another token fails with errc::authentication_failed, never a hang. With
// COMMX_TLS=sites, a tap on the wire between rank 1 and its relay finds none of the text the
// ranks exchanged (and finds it without TLS).
// (tests/wan/relay_netns_test.cpp runs the same across namespaces that cannot route.)

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio.hpp>
#include <fmt/format.h>

#include "support/beside_this_program.hpp"
#include "commx/transport/detail/tcp/dial.hpp"
#include "transport/tcp/processes.hpp"

namespace {

using commx::test::child;
using commx::test::free_port;
using clock_type = child::clock;
using namespace std::chrono_literals;
namespace tcp = commx::detail::tcp;

const std::string token(64, 'd');

/// A relay on loopback; its port from the line it prints once it listens.
struct relay_process {
  std::unique_ptr<child> process;
  std::uint16_t port = 0;

  relay_process(const std::string& site, const std::vector<std::string>& extra,
                const std::string& with_token = token) {
    const std::string program = commx::test::beside_this_program(COMMX_RELAY_PATH);
    std::vector<std::string> argv{program,       "--site",    site,        "--listen",
                                  "127.0.0.1:0", "--verbose", "--timeout", "5"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process = std::make_unique<child>(argv, std::vector<std::string>{"COMMX_TOKEN=" + with_token});
    const auto line = process->read_line(clock_type::now() + 30s);
    REQUIRE(line);
    const auto colon = line->rfind(':');
    REQUIRE(line->find("listening on") != std::string::npos);
    port = static_cast<std::uint16_t>(std::stoi(line->substr(colon + 1)));
  }

  [[nodiscard]] std::string address() const { return fmt::format("127.0.0.1:{}", port); }

  /// Stops the relay and returns everything it logged.
  std::string stop() {
    process->signal(SIGTERM);
    const auto status = process->finish(clock_type::now() + 30s);
    CHECK(status == 0);
    return process->transcript();
  }
};

std::unique_ptr<child> rank(int r, int size, const std::string& site, const std::string& relay,
                            std::uint16_t root_port, int timeout_s = 30,
                            const std::string& scenario = "patterns",
                            const std::vector<std::string>& extra = {}) {
  std::vector<std::string> env{fmt::format("COMMX_RANK={}", r),
                               fmt::format("COMMX_SIZE={}", size),
                               fmt::format("COMMX_ROOT=127.0.0.1:{}", root_port),
                               "COMMX_TOKEN=" + token,
                               fmt::format("COMMX_TIMEOUT={}", timeout_s),
                               "COMMX_SITE=" + site,
                               "COMMX_RELAY=" + relay,
                               "COMMX_ROOT_SITE=A",
                               "COMMX_WAN_STREAMS=3",
                               "COMMX_WAN_CHUNK=64K"};
  env.insert(env.end(), extra.begin(), extra.end());
  return std::make_unique<child>(
      std::vector<std::string>{"timeout", "-s", "KILL", "120",
                               commx::test::beside_this_program(WAN_SCENARIO_PATH), scenario},
      env);
}

/// A forwarder on loopback in front of the relay at `to`, on a thread of its own, that keeps
/// every byte it carries either way: what anyone on the wire between a rank and its relay sees.
class wire_tap {
 public:
  explicit wire_tap(std::uint16_t to)
      : to_(to), acceptor_(io_, {asio::ip::address_v4::loopback(), 0}) {
    port = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { io_.run_for(150s); });
  }
  wire_tap(const wire_tap&) = delete;
  wire_tap& operator=(const wire_tap&) = delete;
  ~wire_tap() { stop(); }

  /// Stops forwarding; returns everything carried.
  std::string stop() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
    return carried_;
  }

  std::uint16_t port = 0;

 private:
  struct link {
    explicit link(asio::io_context& io)
        : ends{asio::ip::tcp::socket(io), asio::ip::tcp::socket(io)} {}
    std::array<asio::ip::tcp::socket, 2> ends;
    std::array<std::array<char, 64 << 10>, 2> buffers{};
  };

  void accept() {
    acceptor_.async_accept([this](std::error_code ec, asio::ip::tcp::socket s) {
      if (ec) return;
      auto l = std::make_shared<link>(io_);
      l->ends[0] = std::move(s);
      l->ends[1].async_connect({asio::ip::address_v4::loopback(), to_},
                               [this, l](std::error_code cec) {
                                 if (cec) return;
                                 pump(l, 0);
                                 pump(l, 1);
                               });
      accept();
    });
  }

  void pump(const std::shared_ptr<link>& l, int from) {
    l->ends[from].async_read_some(
        asio::buffer(l->buffers[from]), [this, l, from](std::error_code ec, std::size_t n) {
          auto& to = l->ends[1 - from];
          if (ec) {
            std::error_code ignored;
            to.shutdown(asio::socket_base::shutdown_send, ignored);
            return;
          }
          carried_.append(l->buffers[from].data(), n);
          asio::async_write(to, asio::buffer(l->buffers[from].data(), n),
                            [this, l, from](std::error_code wec, std::size_t) {
                              if (!wec) pump(l, from);
                            });
        });
  }

  asio::io_context io_;
  std::uint16_t to_;
  asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  std::string carried_;  ///< only the tap's thread touches it until stop() joins it
};

/// The links a relay logged as opened for rank `r`.
std::size_t links_opened(const std::string& log, int r) {
  std::size_t n = 0;
  std::size_t from = 0;
  const std::string prefix = fmt::format("commx[relay] info: link rank {} at ", r);
  while (from < log.size()) {
    auto end = log.find('\n', from);
    if (end == std::string::npos) end = log.size();
    const std::string_view line(log.data() + from, end - from);
    if (line.starts_with(prefix) && line.ends_with(" open")) ++n;
    from = end + 1;
  }
  return n;
}

/// Dials `target` through the relay at `port` as rank 1 of 2 holding `with_token`: the
/// dialer's failure text (empty on success) and whether the relay refused the token.
std::pair<std::string, bool> dial_through(std::uint16_t port, const tcp::endpoint_record& target,
                                          const std::string& with_token) {
  asio::io_context io;
  tcp::dial_identity who{with_token, 1, 2,
                         asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port)};
  std::optional<std::pair<std::string, bool>> outcome;
  tcp::dialer::start(io, who, target, clock_type::now() + 20s,
                     [&](const std::string& failure, asio::ip::tcp::socket, bool refused) {
                       outcome.emplace(failure, refused);
                     });
  io.run_for(30s);
  REQUIRE(outcome);
  return *outcome;
}

}  // namespace

TEST_CASE("commx-relay carries a wan job between two sites, and refuses strangers",
          "[relay][wan]") {
  relay_process a("A", {});
  relay_process b("B", {"--route", "A=" + a.address()});

  // Strangers first: the relays must refuse them and still carry the job afterwards.
  {
    asio::io_context io;
    asio::ip::tcp::socket s(io);
    s.connect({asio::ip::address_v4::loopback(), a.port});
    const std::string garbage(48, 'x');
    asio::write(s, asio::buffer(garbage));
    std::array<char, 8> reply{};
    std::error_code ec;
    asio::read(s, asio::buffer(reply), ec);
    CHECK(ec);  // closed on us, nothing granted
  }
  tcp::endpoint_record somewhere;
  somewhere.port = 9;
  somewhere.address = {127, 0, 0, 1};
  somewhere.site = "A";
  const auto [wrong_failure, wrong_refused] = dial_through(a.port, somewhere, std::string(64, 'e'));
  CHECK(!wrong_failure.empty());
  CHECK(wrong_refused);
  // An authenticated caller whose target is closed gets a clear answer, not a hang.
  const auto [closed_failure, closed_refused] = dial_through(b.port, somewhere, token);
  CHECK(closed_failure.find("could not reach the target") != std::string::npos);
  CHECK(!closed_refused);

  const std::uint16_t root_port = free_port();
  auto r0 = rank(0, 3, "A", a.address(), root_port);
  auto r1 = rank(1, 3, "B", b.address(), root_port);
  auto r2 = rank(2, 3, "A", a.address(), root_port);
  const auto until = clock_type::now() + 150s;
  const auto s0 = r0->finish(until);
  const auto s1 = r1->finish(until);
  const auto s2 = r2->finish(until);
  INFO("rank 0:\n"
       << r0->transcript() << "rank 1:\n"
       << r1->transcript() << "rank 2:\n"
       << r2->transcript());
  CHECK(s0 == 0);
  CHECK(s1 == 0);
  CHECK(s2 == 0);

  const std::string log_a = a.stop();
  const std::string log_b = b.stop();
  INFO("relay A:\n" << log_a << "relay B:\n" << log_b);
  CHECK(log_a.find("refused: malformed hello") != std::string::npos);
  // The caller with the wrong token saw that the relay's proof was not its own, and left.
  CHECK(log_a.find("refused: closed before a whole response") != std::string::npos);
  CHECK(log_b.find("cannot reach 127.0.0.1:9 at site A") != std::string::npos);
  // Rank 1 joins rank 0's rendezvous and opens 3 data streams to it (the higher rank opens a
  // path, on its first large message): 4 links through relay B, and on through relay A; and,
  // if its first message to rank 2 went before rank 2's to it, a connection to rank 2 (two
  // when both dialed at once), through both relays too.
  CHECK(links_opened(log_b, 1) >= 4);
  CHECK(links_opened(log_b, 1) <= 6);
  CHECK(links_opened(log_a, 1) == links_opened(log_b, 1));
  // Rank 2 opens 3 streams to rank 1 (and perhaps its connection) through relay A, which
  // connects to rank 1 itself (it has no route to B); to rank 0, at its own site, it connects
  // directly.
  CHECK(links_opened(log_a, 2) >= 3);
  CHECK(links_opened(log_a, 2) <= 5);
  CHECK(links_opened(log_a, 2) + links_opened(log_b, 1) >= 8);  // one connection at least
  CHECK(links_opened(log_b, 2) == 0);
}

TEST_CASE("a rank whose relay holds another token fails with authentication_failed",
          "[relay][wan]") {
  relay_process a("A", {});
  relay_process b("B", {"--route", "A=" + a.address()}, std::string(64, 'f'));
  const std::uint16_t root_port = free_port();
  auto r0 = rank(0, 2, "A", a.address(), root_port, 5);
  auto r1 = rank(1, 2, "B", b.address(), root_port, 5);
  const auto until = clock_type::now() + 150s;
  const auto s1 = r1->finish(until);
  const auto s0 = r0->finish(until);
  INFO("rank 0:\n" << r0->transcript() << "rank 1:\n" << r1->transcript());
  CHECK(s1 == 1);
  CHECK(r1->transcript().find("could not prove it holds the job token") != std::string::npos);
  CHECK(s0 == 1);  // rank 0 waits for rank 1 until the timeout and names it
  CHECK(r0->transcript().find("rank 1") != std::string::npos);
  a.stop();
  b.stop();
}

TEST_CASE("TLS between sites: the job works and a relay's wire carries only ciphertext",
          "[relay][wan][tls]") {
  relay_process a("A", {});
  for (const bool encrypted : {false, true}) {
    relay_process b("B", {"--route", "A=" + a.address()});
    wire_tap wire(b.port);
    const std::uint16_t root_port = free_port();
    const std::vector<std::string> tls{encrypted ? "COMMX_TLS=sites" : "COMMX_TLS=off",
                                       "COMMX_LOG=info"};
    auto r0 = rank(0, 2, "A", a.address(), root_port, 30, "marker", tls);
    auto r1 = rank(1, 2, "B", fmt::format("127.0.0.1:{}", wire.port), root_port, 30, "marker", tls);
    const auto until = clock_type::now() + 100s;
    const auto s0 = r0->finish(until);
    const auto s1 = r1->finish(until);
    const std::string carried = wire.stop();
    INFO("encrypted: " << encrypted << "\nrank 0:\n"
                       << r0->transcript() << "rank 1:\n"
                       << r1->transcript());
    CHECK(s0 == 0);
    CHECK(s1 == 0);
    CHECK(r1->transcript().find("marker exchanged") != std::string::npos);
    CHECK((r1->transcript().find(", TLS)") != std::string::npos) == encrypted);
    // Everything rank 1 sent and received went through the tap: 2 x 1 MiB and more.
    CHECK(carried.size() > (std::size_t{2} << 20));
    CHECK((carried.find("commx plaintext marker") != std::string::npos) == !encrypted);
    b.stop();
  }
  a.stop();
}
