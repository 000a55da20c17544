// SPDX-License-Identifier: MIT
// transport::faulty over in-process threads: the plan's text, and each fault doing what it says
// and nothing else. The network faults (damaged frames) and the randomized campaign run as real
// processes (tests/faults/).

#include <catch2/catch.hpp>

#include <cstdlib>
#include <latch>
#include <set>
#include <string>
#include <vector>

#include "commx/launch.hpp"
#include "commx/transport/faulty.hpp"
#include "commx/transport/inproc.hpp"
#include "support/check.hpp"
#include "support/inproc_job.hpp"

using namespace std::chrono_literals;
using commx::transport::fault_plan;
using faulty_inproc = commx::transport::faulty<commx::transport::inproc>;
using comm = commx::communicator<faulty_inproc>;

namespace {

// COMMX_FAULTS for one job: run_inproc makes each rank's endpoint from the environment.
class faults_in_env {
 public:
  explicit faults_in_env(const char* plan) { ::setenv("COMMX_FAULTS", plan, 1); }
  ~faults_in_env() { ::unsetenv("COMMX_FAULTS"); }
  faults_in_env(const faults_in_env&) = delete;
  faults_in_env& operator=(const faults_in_env&) = delete;
};

// Inside a rank (a thread): Catch's assertions are not thread-safe, COMMX_CHECK throws.
template <class Call>
void expect_timeout(Call&& call) {
  bool timed_out = false;
  try {
    call();
  } catch (const commx::error& e) {
    timed_out = e.code() == commx::errc::timeout;
  }
  COMMX_CHECK(timed_out);
}

std::string refusal(const char* text, int size, bool network) {
  try {
    (void)fault_plan::parse(text, size, network);
  } catch (const commx::error& e) {
    CHECK(e.code() == commx::errc::invalid_argument);
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("fault plan: what it writes reads back the same; a wrong entry is named") {
  const char* text =
      "seed=3;delay=10us-200us;delay@2=5us-5us;kill@1:after=5;stall@0:coll=2:for=30ms;"
      "corrupt@2:peer=0:at=1s;stranger@1:peer=2:after=0;partition=0,0,1:at=0us:for=20ms;partition="
      "1,0,0:at=5ms";
  const fault_plan plan = fault_plan::parse(text, 3, true);
  CHECK(plan.seed == 3);
  CHECK(plan.delays.size() == 2);
  CHECK(plan.faults.size() == 4);
  CHECK(plan.partitions.size() == 2);
  CHECK_FALSE(plan.partitions[1].length.has_value());
  CHECK(fault_plan::parse(plan.text(), 3, true).text() == plan.text());

  CHECK_THAT(refusal("kill@5:after=1", 3, false), Catch::Contains("rank 5 is not in a job of 3"));
  CHECK_THAT(refusal("corrupt@0:peer=1:after=1", 3, false),
             Catch::Contains("only tcp has frames to damage"));
  CHECK_THAT(refusal("stall@0:after=1", 3, false), Catch::Contains("for=D"));
  CHECK_THAT(refusal("melt@1", 3, false), Catch::Contains("unknown fault 'melt'"));
  CHECK_THAT(refusal("delay=5", 3, false), Catch::Contains("'5' is not a duration"));
  CHECK_THAT(refusal("partition=0,1", 3, false), Catch::Contains("2 groups for a job of 3"));
  CHECK_THAT(refusal("kill@1:when=3", 3, false), Catch::Contains("unknown key 'when'"));
}

TEST_CASE("fault plan: random plans are drawn from the seed alone, and replay as text") {
  std::set<std::string> seen;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const std::string line = "random;seed=" + std::to_string(seed);
    const fault_plan plan = fault_plan::parse(line, 4, true);
    CHECK(fault_plan::parse(line, 4, true).text() == plan.text());
    CHECK(fault_plan::parse(plan.text(), 4, true).text() == plan.text());
    CHECK((!plan.faults.empty() || !plan.partitions.empty()));
    seen.insert(plan.text());
  }
  CHECK(seen.size() >= 25);
  // Over a network every kind is drawn, strangers included.
  std::set<commx::transport::fault::kind> kinds;
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    for (const auto& f : fault_plan::parse("random;seed=" + std::to_string(seed), 4, true).faults) {
      kinds.insert(f.what);
    }
  }
  CHECK(kinds.size() == 5);
  // Without a network, no frame is damaged.
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    for (const auto& f :
         fault_plan::parse("random;seed=" + std::to_string(seed), 4, false).faults) {
      CHECK((f.what == commx::transport::fault::kind::kill ||
             f.what == commx::transport::fault::kind::stall));
    }
  }
}

TEST_CASE("faulty: delayed messages keep per-pair order, also for any_source receives") {
  const faults_in_env env("seed=5;delay=0us-300us");
  constexpr int per_sender = 60;
  commx::test::inproc_job<comm>(4, [&](comm& world) {
    if (world.rank() != 0) {
      std::vector<comm::request> sent;
      std::vector<int> values(per_sender);
      for (int i = 0; i < per_sender; ++i) {
        values[static_cast<std::size_t>(i)] = i;
        sent.push_back(world.isend(0, 7, values[static_cast<std::size_t>(i)]));
      }
      commx::wait_all(sent);
      COMMX_CHECK(world.transport().held_sends() > 0);
      return;
    }
    std::vector<int> next(4, 0);
    for (int m = 0; m < 3 * per_sender; ++m) {
      int value = -1;
      const commx::status got = world.recv(commx::any_source, 7, value);
      COMMX_CHECK_EQ(value, next[static_cast<std::size_t>(got.source)]++);
    }
  });
}

TEST_CASE("faulty: a killed rank is lost to the ranks that wait on it, after what it sent") {
  const faults_in_env env("kill@2:after=3");
  std::vector<int> got_from_2;
  std::vector<int> known;
  commx::errc why{};
  // Only rank 2 sends, so its kill is the job's one failure (no rank meets another that left).
  const auto job = [&](comm& world) {
    if (world.rank() == 2) {
      for (int i = 0; i < 10; ++i) world.send(3, 0, i);
    } else if (world.rank() == 3) {
      try {
        for (int i = 0; i < 10; ++i) {
          int v = -1;
          world.recv(2, 0, v);
          got_from_2.push_back(v);
        }
      } catch (const commx::error& e) {
        why = static_cast<commx::errc>(e.code().value());
        known = world.known_lost();
      }
    }
  };
  CHECK_THROWS_AS(commx::run_inproc<comm>(4, job, commx::test::job_options()),
                  commx::transport::injected_kill);
  CHECK(why == commx::errc::peer_lost);
  CHECK(got_from_2 == std::vector<int>{0, 1, 2});
  CHECK(known == std::vector<int>{2});
}

TEST_CASE("faulty: a partition that never heals holds messages across it; within, they go") {
  const faults_in_env env("partition=0,0,1:at=0us");
  std::latch rank_2_done(1);  // rank 0 stays until then: a rank that left is lost, not late
  commx::test::inproc_job<comm>(3, [&](comm& world) {
    const int value = 40 + world.rank();
    if (world.rank() == 0) {
      comm::request across = world.isend(2, 1, value);
      world.send(1, 1, value);
      expect_timeout([&] { across.wait(100ms); });
      COMMX_CHECK_EQ(world.transport().held_sends(), 1U);  // the timeout withdrew it
      rank_2_done.wait();
    } else if (world.rank() == 1) {
      int v = 0;
      world.recv(0, 1, v);
      COMMX_CHECK_EQ(v, 40);
    } else {
      int v = 0;
      expect_timeout([&] { world.recv(0, 1, v, 100ms); });
      rank_2_done.count_down();
    }
  });
}

TEST_CASE("faulty: a partition that heals delivers what it held, in order") {
  const faults_in_env env("partition=0,1:at=0us:for=150ms");
  commx::test::inproc_job<comm>(2, [&](comm& world) {
    const int other = 1 - world.rank();
    std::vector<int> out{1, 2, 3, 4, 5};
    std::vector<comm::request> sent;
    for (int& v : out) sent.push_back(world.isend(other, 2, v));
    for (int expected : out) {
      int v = 0;
      world.recv(other, 2, v);
      COMMX_CHECK_EQ(v, expected);
    }
    commx::wait_all(sent);
    world.barrier();
  });
}

TEST_CASE("faulty: a stalled rank makes its peers wait (a short deadline passes), loses nothing") {
  const faults_in_env env("stall@1:after=0:for=2s");
  commx::test::inproc_job<comm>(2, [&](comm& world) {
    if (world.rank() == 1) {
      world.send(0, 3, 99);  // stalls first
      return;
    }
    int v = 0;
    expect_timeout([&] { world.recv(1, 3, v, 100ms); });
    world.recv(1, 3, v);
    COMMX_CHECK_EQ(v, 99);
  });
}
