// SPDX-License-Identifier: MIT
// transport::wan over the emulated wide-area link (tools/wanemu): a two-rank job of
// wan_scenario with rank 0 in one network namespace and rank 1 in the other, so every byte
// crosses the emulator's delay line, bottleneck and seeded loss. Checked: a transfer with loss
// arrives byte for byte; a path retuned and reopened under traffic loses and repeats nothing; a
// data stream shut down mid-transfer fails both ranks with errc::peer_lost, never a hang.
// Needs root and /dev/net/tun (else exits 77: reported skipped).

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/beside_this_program.hpp"
#include "support/catch_runner.hpp"
#include "wan/emulator.hpp"

namespace {

using commx::test::wan::emulator;
using commx::test::wan::link_config;

/// Starts one rank of `scenario` inside namespace `ns`, bounded by coreutils' timeout.
pid_t start_rank(const std::string& ns, int rank, const std::string& root,
                 const std::string& address, const std::string& token,
                 const std::vector<std::string>& env, const std::vector<std::string>& scenario) {
  std::vector<std::string> args{"timeout",
                                "-s",
                                "KILL",
                                "150",
                                "ip",
                                "netns",
                                "exec",
                                ns,
                                "env",
                                fmt::format("COMMX_RANK={}", rank),
                                "COMMX_SIZE=2",
                                "COMMX_ROOT=" + root,
                                "COMMX_ADDR=" + address,
                                "COMMX_TOKEN=" + token,
                                "COMMX_TIMEOUT=60"};
  args.insert(args.end(), env.begin(), env.end());
  args.emplace_back(commx::test::beside_this_program(WAN_SCENARIO_PATH));
  args.insert(args.end(), scenario.begin(), scenario.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Runs a two-rank job of `scenario` across the emulated link; both ranks' exit statuses.
std::pair<int, int> run_job(const link_config& link, const std::vector<std::string>& env,
                            const std::vector<std::string>& scenario) {
  emulator emu(link);
  const std::string token(64, 'c');
  const std::string root = fmt::format("{}:{}", emulator::addr_a, 17000);
  const pid_t r0 =
      start_rank(emu.ns_a(), 0, root, std::string(emulator::addr_a), token, env, scenario);
  const pid_t r1 =
      start_rank(emu.ns_b(), 1, root, std::string(emulator::addr_b), token, env, scenario);
  REQUIRE(r0 > 0);
  REQUIRE(r1 > 0);
  const int s0 = wait_exit(r0);
  const int s1 = wait_exit(r1);
  return {s0, s1};
}

// 10 ms RTT, 200 Mbit/s: long enough that windows and loss recovery are real, short enough for CI.
link_config lossy(double loss) {
  link_config l;
  l.delay_ms = 5;
  l.rate_mbit = 200;
  l.loss = loss;
  l.seed = 42;
  return l;
}

}  // namespace

TEST_CASE("wan over the emulator: 8 MiB each way with 0.5% loss, byte for byte", "[wan][emu]") {
  const auto [s0, s1] = run_job(lossy(0.005), {"COMMX_WAN_STREAMS=4", "COMMX_WAN_CHUNK=256K"},
                                {"transfer", "8", "2"});
  CHECK(s0 == 0);
  CHECK(s1 == 0);
}

TEST_CASE("wan over the emulator: a path retuned and reopened under traffic loses nothing",
          "[wan][emu]") {
  const auto [s0, s1] =
      run_job(lossy(0.001), {"COMMX_WAN_STREAMS=3", "COMMX_WAN_CHUNK=64K"}, {"retune", "1024"});
  CHECK(s0 == 0);
  CHECK(s1 == 0);
}

TEST_CASE("wan over the emulator: a data stream shut down mid-transfer fails both ranks",
          "[wan][emu]") {
  const auto [s0, s1] =
      run_job(lossy(0), {"COMMX_WAN_STREAMS=4", "COMMX_WAN_CHUNK=256K"}, {"break_stream"});
  CHECK(s0 == 0);
  CHECK(s1 == 0);
}

TEST_CASE("wan over the emulator: autotune measures the path, picks, and the path works",
          "[wan][emu]") {
  link_config l = lossy(0);
  l.delay_ms = 25;  // a 50 ms round trip
  const auto [s0, s1] = run_job(
      l, {"COMMX_WAN_STREAMS=1", "COMMX_WAN_RCVBUF=64K", "COMMX_WAN_AUTOTUNE=1"}, {"autotune"});
  CHECK(s0 == 0);
  CHECK(s1 == 0);
}

int main(int argc, char** argv) {
  if (const auto why = commx::test::wan::emulator_unavailable()) {
    std::printf("SKIP: the wan transport's emulator tests need root and /dev/net/tun: %s\n",
                why->c_str());
    return commx::test::wan::kSkipReturnCode;
  }
  return commx::test::run_catch(argc, argv);
}
