// SPDX-License-Identifier: MIT
// commx-relay between two sites that cannot route to each other: four network namespaces in a
// line, compute A - gateway A - gateway B - compute B, joined by veth pairs, with forwarding
// off (a namespace's default), so compute A has no route to compute B. A relay runs on each
// gateway; a two-rank wan job (rank 0 at A, rank 1 at B) runs MPWide's patterns and a transfer
// checked byte for byte through them. Needs root (else exits 77: reported skipped).

#include <catch2/catch.hpp>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "support/beside_this_program.hpp"
#include "support/catch_runner.hpp"
#include "transport/tcp/processes.hpp"
#include "support/netns.hpp"

namespace {

using commx::test::child;
using commx::test::connect_errno;
using commx::test::netns_scope;
using commx::test::run_quietly;
using clock_type = child::clock;
using namespace std::chrono_literals;

const std::string token(64, 'g');

/// compute A (10.78.1.2) - (10.78.1.1) gateway A (10.78.2.1) - (10.78.2.2) gateway B
/// (10.78.3.1) - (10.78.3.2) compute B. Removed with everything in it when destroyed.
class two_sites {
 public:
  two_sites() {
    const std::string tag = std::to_string(::getpid());
    for (const char* n : {"ca", "ga", "gb", "cb"}) names_.push_back(fmt::format("cxr{}{}", tag, n));
    bool ok = true;
    for (const auto& ns : names_) {
      ok = ok && run_quietly({"ip", "netns", "add", ns}) == 0;
      ok = ok && run_quietly({"ip", "-n", ns, "link", "set", "lo", "up"}) == 0;
    }
    // Each link: (namespace, address) at both ends.
    const std::array<std::array<const char*, 4>, 3> links{
        {{"0", "10.78.1.2/24", "1", "10.78.1.1/24"},
         {"1", "10.78.2.1/24", "2", "10.78.2.2/24"},
         {"2", "10.78.3.1/24", "3", "10.78.3.2/24"}}};
    int k = 0;
    for (const auto& l : links) {
      const std::string left = fmt::format("cxr{}v{}a", tag, k);
      const std::string right = fmt::format("cxr{}v{}b", tag, k);
      const std::string& ns_left = names_[static_cast<std::size_t>(std::stoi(l[0]))];
      const std::string& ns_right = names_[static_cast<std::size_t>(std::stoi(l[2]))];
      ok = ok &&
           run_quietly({"ip", "link", "add", left, "type", "veth", "peer", "name", right}) == 0 &&
           run_quietly({"ip", "link", "set", left, "netns", ns_left}) == 0 &&
           run_quietly({"ip", "link", "set", right, "netns", ns_right}) == 0 &&
           run_quietly({"ip", "-n", ns_left, "addr", "add", l[1], "dev", left}) == 0 &&
           run_quietly({"ip", "-n", ns_right, "addr", "add", l[3], "dev", right}) == 0 &&
           run_quietly({"ip", "-n", ns_left, "link", "set", left, "up"}) == 0 &&
           run_quietly({"ip", "-n", ns_right, "link", "set", right, "up"}) == 0;
      ++k;
    }
    REQUIRE(ok);
  }
  two_sites(const two_sites&) = delete;
  two_sites& operator=(const two_sites&) = delete;
  ~two_sites() {
    // Deleting a namespace deletes the veth ends inside it, and so the pairs.
    for (const auto& ns : names_) run_quietly({"ip", "netns", "del", ns});
  }

  [[nodiscard]] const std::string& compute_a() const { return names_[0]; }
  [[nodiscard]] const std::string& gateway_a() const { return names_[1]; }
  [[nodiscard]] const std::string& gateway_b() const { return names_[2]; }
  [[nodiscard]] const std::string& compute_b() const { return names_[3]; }

 private:
  std::vector<std::string> names_;
};

std::unique_ptr<child> in_ns(const std::string& ns, std::vector<std::string> argv,
                             std::vector<std::string> env) {
  argv.insert(argv.begin(), {"ip", "netns", "exec", ns});
  return std::make_unique<child>(argv, env);
}

std::unique_ptr<child> relay(const std::string& ns, const char* site, const char* route) {
  auto r = in_ns(ns,
                 {commx::test::beside_this_program(COMMX_RELAY_PATH), "--site", site, "--listen",
                  "0.0.0.0:7100", "--route", route, "--verbose"},
                 {"COMMX_TOKEN=" + token});
  REQUIRE(r->expect("listening on", clock_type::now() + 30s));
  return r;
}

std::unique_ptr<child> rank(const std::string& ns, int r, const char* site, const char* address,
                            const char* relay_at, const std::vector<std::string>& scenario) {
  // Bounded by timeout(1) besides the test's own deadline. (Not the relays: they are signalled
  // to stop, and timeout -s KILL would pass the signal on as KILL.)
  std::vector<std::string> argv{"timeout", "-s", "KILL", "150",
                                commx::test::beside_this_program(WAN_SCENARIO_PATH)};
  argv.insert(argv.end(), scenario.begin(), scenario.end());
  return in_ns(
      ns, argv,
      {fmt::format("COMMX_RANK={}", r), "COMMX_SIZE=2", "COMMX_ROOT=10.78.1.2:17100",
       "COMMX_ROOT_SITE=A", fmt::format("COMMX_SITE={}", site),
       fmt::format("COMMX_ADDR={}", address), fmt::format("COMMX_RELAY={}", relay_at),
       "COMMX_TOKEN=" + token, "COMMX_TIMEOUT=60", "COMMX_WAN_STREAMS=4", "COMMX_WAN_CHUNK=256K"});
}

void run_job(const two_sites& net, const std::vector<std::string>& scenario) {
  auto relay_a = relay(net.gateway_a(), "A", "B=10.78.2.2:7100");
  auto relay_b = relay(net.gateway_b(), "B", "A=10.78.2.1:7100");
  auto r0 = rank(net.compute_a(), 0, "A", "10.78.1.2", "10.78.1.1:7100", scenario);
  auto r1 = rank(net.compute_b(), 1, "B", "10.78.3.2", "10.78.3.1:7100", scenario);
  const auto until = clock_type::now() + 150s;
  const auto s0 = r0->finish(until);
  const auto s1 = r1->finish(until);
  relay_a->signal(SIGTERM);
  relay_b->signal(SIGTERM);
  const auto a = relay_a->finish(until);
  const auto b = relay_b->finish(until);
  INFO("rank 0:\n"
       << r0->transcript() << "rank 1:\n"
       << r1->transcript() << "relay A:\n"
       << relay_a->transcript() << "relay B:\n"
       << relay_b->transcript());
  CHECK(s0.value_or(-1) == 0);
  CHECK(s1.value_or(-1) == 0);
  CHECK(a.value_or(-1) == 0);
  CHECK(b.value_or(-1) == 0);
  // The control connection and 4 data streams, through both relays.
  CHECK(relay_a->transcript().find("link rank 1 at 10.78.2.2:") != std::string::npos);
  CHECK(relay_b->transcript().find("link rank 1 at 10.78.3.2:") != std::string::npos);
}

}  // namespace

TEST_CASE("commx-relay joins two sites that cannot route to each other", "[relay][netns]") {
  two_sites net;
  // The premise: compute A cannot reach compute B, nor gateway B.
  CHECK(connect_errno(net.compute_a(), "10.78.3.2") == ENETUNREACH);
  CHECK(connect_errno(net.compute_a(), "10.78.2.2") == ENETUNREACH);
  SECTION("MPWide's patterns") { run_job(net, {"patterns"}); }
  SECTION("8 MiB each way, byte for byte") { run_job(net, {"transfer", "8", "2"}); }
}

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::printf("SKIP: the relay's namespace test needs root (ip netns)\n");
    return commx::test::kSkipReturnCode;
  }
  return commx::test::run_catch(argc, argv);
}
