// SPDX-License-Identifier: MIT
// One job on the layered stack shm+tcp+wan across two sites, as CosmoGrid ran: two sites of two
// nodes of two ranks (8 ranks), the sites joined by wanemu (10 ms each way) and a commx-relay on
// each site's gateway; the compute namespace of one site has no route to the other's.
//
//   compute A (10.79.1.2: ranks 0-3, nodes a0, a1) - gateway A (wanemu's namespace a, relay)
//     = emulated link = gateway B (wanemu's namespace b, relay) - compute B (10.79.2.2: 4-7)
//
// On that layout: the conformance, p2p and collectives suites pass; every message went over
// the innermost level its two ranks share (layered_scenario levels); and a rank killed at the
// far site makes every other rank, whatever level it waits on, raise peer_lost
// (layered_scenario kill). Needs root and /dev/net/tun (else exits 77: reported skipped).

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
#include "support/netns.hpp"
#include "transport/tcp/processes.hpp"
#include "wan/emulator.hpp"

namespace {

using commx::test::child;
using commx::test::connect_errno;
using commx::test::netns_scope;
using commx::test::run_quietly;
using commx::test::wan::emulator;
using clock_type = child::clock;
using namespace std::chrono_literals;

const std::string token(64, 's');
constexpr int ranks = 8;

/// wanemu's two namespaces as the gateways, and a compute namespace behind each.
class two_sites {
 public:
  two_sites() : link_(link()) {
    const std::string tag = std::to_string(::getpid());
    compute_ = {fmt::format("cxs{}ca", tag), fmt::format("cxs{}cb", tag)};
    const std::array<const std::string*, 2> gateways{&link_.ns_a(), &link_.ns_b()};
    bool ok = true;
    for (int s = 0; s < 2; ++s) {
      const std::string& ns = compute_[static_cast<std::size_t>(s)];
      const std::string inside = fmt::format("cxs{}v{}c", tag, s);
      const std::string outside = fmt::format("cxs{}v{}g", tag, s);
      ok = ok && run_quietly({"ip", "netns", "add", ns}) == 0 &&
           run_quietly({"ip", "-n", ns, "link", "set", "lo", "up"}) == 0 &&
           run_quietly({"ip", "link", "add", inside, "type", "veth", "peer", "name", outside}) ==
               0 &&
           run_quietly({"ip", "link", "set", inside, "netns", ns}) == 0 &&
           run_quietly({"ip", "link", "set", outside, "netns",
                        *gateways[static_cast<std::size_t>(s)]}) == 0 &&
           run_quietly(
               {"ip", "-n", ns, "addr", "add", compute_address(s) + "/24", "dev", inside}) == 0 &&
           run_quietly({"ip", "-n", *gateways[static_cast<std::size_t>(s)], "addr", "add",
                        gateway_address(s) + "/24", "dev", outside}) == 0 &&
           run_quietly({"ip", "-n", ns, "link", "set", inside, "up"}) == 0 &&
           run_quietly({"ip", "-n", *gateways[static_cast<std::size_t>(s)], "link", "set", outside,
                        "up"}) == 0;
    }
    REQUIRE(ok);
  }
  two_sites(const two_sites&) = delete;
  two_sites& operator=(const two_sites&) = delete;
  ~two_sites() {
    for (const auto& ns : compute_) run_quietly({"ip", "netns", "del", ns});
    link_.stop();
  }

  [[nodiscard]] const std::string& compute(int s) const {
    return compute_[static_cast<std::size_t>(s)];
  }
  [[nodiscard]] const std::string& gateway(int s) const {
    return s == 0 ? link_.ns_a() : link_.ns_b();
  }
  static std::string compute_address(int s) { return fmt::format("10.79.{}.2", s + 1); }
  static std::string gateway_address(int s) { return fmt::format("10.79.{}.1", s + 1); }

 private:
  static commx::test::wan::link_config link() {
    commx::test::wan::link_config l;
    l.delay_ms = 10;
    l.rate_mbit = 1000;
    return l;
  }

  emulator link_;
  std::array<std::string, 2> compute_;
};

std::unique_ptr<child> in_ns(const std::string& ns, std::vector<std::string> argv,
                             std::vector<std::string> env) {
  argv.insert(argv.begin(), {"ip", "netns", "exec", ns});
  return std::make_unique<child>(argv, env);
}

/// The ranks' exit statuses and everyone's output, after the relays are stopped.
struct job_result {
  std::vector<std::optional<int>> status;
  std::string transcript;
};

job_result run_job(const two_sites& net, const std::vector<std::string>& program) {
  std::vector<std::unique_ptr<child>> relays;
  for (int s = 0; s < 2; ++s) {
    const std::string other =
        s == 0 ? std::string(emulator::addr_b) : std::string(emulator::addr_a);
    relays.push_back(in_ns(net.gateway(s),
                           {commx::test::beside_this_program(COMMX_RELAY_PATH), "--site",
                            s == 0 ? "A" : "B", "--listen", "0.0.0.0:7100", "--route",
                            fmt::format("{}={}:7100", s == 0 ? "B" : "A", other)},
                           {"COMMX_TOKEN=" + token}));
    REQUIRE(relays.back()->expect("listening on", clock_type::now() + 30s));
  }
  std::vector<std::unique_ptr<child>> job;
  for (int r = 0; r < ranks; ++r) {
    const int site = r / 4;
    // Bounded by timeout(1) besides the test's own deadline.
    std::vector<std::string> argv{"timeout", "-s", "KILL", "200"};
    argv.insert(argv.end(), program.begin(), program.end());
    job.push_back(in_ns(
        net.compute(site), argv,
        {fmt::format("COMMX_RANK={}", r), fmt::format("COMMX_SIZE={}", ranks),
         "COMMX_ROOT=" + two_sites::compute_address(0) + ":17100", "COMMX_ROOT_SITE=A",
         fmt::format("COMMX_SITE={}", site == 0 ? "A" : "B"), fmt::format("COMMX_NODE=n{}", r / 2),
         "COMMX_ADDR=" + two_sites::compute_address(site),
         fmt::format("COMMX_RELAY={}:7100", two_sites::gateway_address(site)),
         "COMMX_TOKEN=" + token, "COMMX_TIMEOUT=60", "COMMX_WAN_STREAMS=4",
         "COMMX_WAN_CHUNK=64K"}));
  }
  job_result out;
  const auto until = clock_type::now() + 220s;
  for (auto& rank : job) out.status.push_back(rank->finish(until));
  for (auto& relay : relays) relay->signal(SIGTERM);
  for (auto& relay : relays) CHECK(relay->finish(until).value_or(-1) == 0);
  for (int r = 0; r < ranks; ++r) {
    out.transcript +=
        fmt::format("--- rank {} ---\n{}", r, job[static_cast<std::size_t>(r)]->transcript());
  }
  for (int s = 0; s < 2; ++s) {
    out.transcript +=
        fmt::format("--- relay {} ---\n{}", s, relays[static_cast<std::size_t>(s)]->transcript());
  }
  return out;
}

void all_pass(const two_sites& net, const std::vector<std::string>& program) {
  const job_result result = run_job(net, program);
  INFO(result.transcript);
  for (int r = 0; r < ranks; ++r) CHECK(result.status[static_cast<std::size_t>(r)] == 0);
}

const std::vector<std::string> suite_filter{"--warn", "NoTests", "~[.]~[inproc]~[ending]"};

}  // namespace

TEST_CASE("shm+tcp+wan: two sites of two nodes of two ranks, behind relays", "[netns][sites]") {
  if (auto why = commx::test::wan::emulator_unavailable()) {
    WARN("skipped: " << *why);
    return;
  }
  two_sites net;
  // The premise: one site's compute namespace cannot reach the other's, nor its gateway.
  CHECK(connect_errno(net.compute(0), two_sites::compute_address(1)) == ENETUNREACH);
  CHECK(connect_errno(net.compute(0), std::string(emulator::addr_b)) == ENETUNREACH);

  SECTION("each message goes over the innermost level its ranks share") {
    const job_result result = run_job(
        net, {commx::test::beside_this_program(LAYERED_SCENARIO_SHM_TCP_WAN_PATH), "levels"});
    INFO(result.transcript);
    for (int r = 0; r < ranks; ++r) CHECK(result.status[static_cast<std::size_t>(r)] == 0);
    CHECK(result.transcript.find("rank 0 node 0 site 0: bytes node 1001 site 2005 wide 4022") !=
          std::string::npos);
  }
  SECTION("the conformance suite") {
    all_pass(net, {commx::test::beside_this_program(CONFORMANCE_SHM_TCP_WAN_PATH), suite_filter[0],
                   suite_filter[1], suite_filter[2]});
  }
  SECTION("the point-to-point suite") {
    all_pass(net, {commx::test::beside_this_program(P2P_SHM_TCP_WAN_PATH), suite_filter[0],
                   suite_filter[1], suite_filter[2]});
  }
  SECTION("the collectives suite") {
    all_pass(net, {commx::test::beside_this_program(COLL_COLLECTIVES_SHM_TCP_WAN_PATH),
                   suite_filter[0], suite_filter[1], suite_filter[2]});
  }
  SECTION("a rank killed at the far site: every other rank gets peer_lost") {
    const job_result result =
        run_job(net, {commx::test::beside_this_program(LAYERED_SCENARIO_SHM_TCP_WAN_PATH), "kill"});
    INFO(result.transcript);
    CHECK(result.status[ranks - 1] == 128 + SIGKILL);
    // The ranks' own lines, for the log: which level each waited on, and how long.
    for (std::size_t at = result.transcript.find("peer_lost after"); at != std::string::npos;
         at = result.transcript.find("peer_lost after", at + 1)) {
      const std::size_t begin = result.transcript.rfind('\n', at) + 1;
      std::printf(
          "%s\n",
          result.transcript.substr(begin, result.transcript.find('\n', at) - begin).c_str());
    }
    for (int r = 0; r + 1 < ranks; ++r) {
      CHECK(result.status[static_cast<std::size_t>(r)] == 0);
      CHECK(result.transcript.find(fmt::format("rank {} (", r)) != std::string::npos);
    }
  }
}

int main(int argc, char** argv) {
  if (commx::test::wan::emulator_unavailable()) {
    std::printf("SKIP: the two-site namespace test needs root and /dev/net/tun\n");
    return commx::test::kSkipReturnCode;
  }
  return commx::test::run_catch(argc, argv);
}
