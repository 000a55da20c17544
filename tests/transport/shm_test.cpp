// SPDX-License-Identifier: MIT
// transport::shm's own tests, on real processes: floods of unexpected messages (both ways; three
// senders to one, held within the eager window), offers beyond the tickets, a rank SIGKILLed
// mid-exchange (in a forked job and under commxrun; found by the one rank waiting on it), a
// stale segment left by a crashed job, and ranks that never arrive. The large-message path
// comes from COMMX_SHM_LARGE (CTest runs this file once per path).

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/beside_this_program.hpp"
#include "commx/communicator.hpp"
#include "commx/transport/detail/shm/waiting.hpp"
#include "commx/transport/shm.hpp"
#include "transport/shm_cpu_sets.hpp"
#include "transport/shm_ranks.hpp"
#include "transport/shm_threads.hpp"

namespace {

using commx::test::shm_ranks::job_spec;
using commx::test::shm_ranks::rank_process;
using commx::test::shm_ranks::start_rank;
using commx::test::shm_ranks::wait_all;
using comm = commx::communicator<commx::transport::shm>;
using namespace std::chrono_literals;

// The value of word w of message i from rank r: every byte of every message is checked.
std::uint32_t word_of(int rank, int i, int w) {
  return static_cast<std::uint32_t>(rank * 0x9e3779b1U) ^ static_cast<std::uint32_t>(i * 131 + w);
}

// A bounded blocking read of one byte: the writer's exit (a closed pipe) ends it too.
bool await_byte(int fd) {
  char c = 0;
  return ::read(fd, &c, 1) == 1;
}

void post_byte(int fd) {
  const char c = 'x';
  (void)!::write(fd, &c, 1);
}

std::string expect_code(commx::errc expected, const std::function<void()>& body,
                        const std::string& what) {
  try {
    body();
  } catch (const commx::error& e) {
    if (e.code() == expected) return {};
    return fmt::format("{}: expected '{}', got '{}'\n", what, make_error_code(expected).message(),
                       e.what());
  }
  return fmt::format("{}: expected '{}', nothing thrown\n", what,
                     make_error_code(expected).message());
}

}  // namespace

TEST_CASE(
    "two ranks each send 100,000 messages before either receives: nothing deadlocks or "
    "is lost",
    "[shm]") {
  constexpr int count = 100'000;
  job_spec job{commx::test::shm_ranks::fresh_token(), 2, {}};
  // ready[r]: rank r has posted all its sends; the other waits for it before receiving.
  std::array<std::array<int, 2>, 2> ready{};
  for (auto& p : ready) REQUIRE(::pipe(p.data()) == 0);
  std::vector<rank_process> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(start_rank(job, r, [&, r]() -> std::string {
      comm world = comm::from_env();
      const int other = 1 - r;
      // 0 to 12 words, so rings fill with records of every size, and tags 0-2 interleave.
      std::vector<std::array<std::uint32_t, 12>> out(count);
      std::vector<comm::request> sends;
      sends.reserve(count);
      for (int i = 0; i < count; ++i) {
        for (int w = 0; w < 12; ++w) out[static_cast<std::size_t>(i)][w] = word_of(r, i, w);
        sends.push_back(
            world.isend(other, i % 3,
                        std::span<const std::uint32_t>(out[static_cast<std::size_t>(i)].data(),
                                                       static_cast<std::size_t>(i % 13))));
      }
      post_byte(ready[r][1]);
      if (!await_byte(ready[other][0])) return "the other rank ended before sending";
      // Tag 2 first, then 1, then 0: later tags overtake earlier ones, one tag never another.
      for (int tag = 2; tag >= 0; --tag) {
        for (int i = tag; i < count; i += 3) {
          std::vector<std::uint32_t> got;
          const auto st = world.recv(other, tag, got);
          if (st.source != other || st.tag != tag ||
              got.size() != static_cast<std::size_t>(i % 13)) {
            return fmt::format("message {} (tag {}): {} words from {} tag {}", i, tag, got.size(),
                               st.source, st.tag);
          }
          for (int w = 0; w < i % 13; ++w) {
            if (got[static_cast<std::size_t>(w)] != word_of(other, i, w)) {
              return fmt::format("message {} word {}: {:#x}, expected {:#x}", i, w,
                                 got[static_cast<std::size_t>(w)], word_of(other, i, w));
            }
          }
        }
      }
      commx::wait_all(sends);
      world.barrier();
      return {};
    }));
  }
  for (auto& p : ready) {
    ::close(p[0]);
    ::close(p[1]);
  }
  wait_all(ranks, 120s);
  INFO(commx::test::shm_ranks::failures(ranks));
  CHECK(commx::test::shm_ranks::failures(ranks).empty());
  CHECK_FALSE(
      commx::test::shm_ranks::segment_exists(commx::test::shm_ranks::segment_for(job.token)));
}

TEST_CASE(
    "a rank SIGKILLed mid-exchange: every pending operation on it raises peer_lost, and "
    "no segment is left",
    "[shm]") {
  job_spec job{commx::test::shm_ranks::fresh_token(), 3, {}};
  const std::string name = commx::test::shm_ranks::segment_for(job.token);
  std::array<int, 2> ready{};  // each rank: "my operations on the victim are pending"
  std::array<int, 2> hold{};   // nobody writes: the victim blocks on it until it is killed
  REQUIRE(::pipe(ready.data()) == 0);
  REQUIRE(::pipe(hold.data()) == 0);
  std::vector<rank_process> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(start_rank(job, r, [&, r]() -> std::string {
      comm world = comm::from_env();
      std::string report;
      int got = 0;
      if (r == 0) {  // what the victim sent before it died is still delivered
        world.recv(2, 1, got);
        if (got != 42) report += fmt::format("message before the kill: {}\n", got);
      }
      // Pending on the victim: a receive from it, a large send it never takes, and (as it
      // fails rather than finishes) a receive from anyone.
      int from_victim = -1;
      auto recv = world.irecv(2, 5, from_victim);
      std::vector<std::byte> large(std::size_t{1} << 20, std::byte{7});
      auto send = world.isend(2, 6, std::span<const std::byte>(large));
      int from_anyone = -1;
      auto any = world.irecv(commx::any_source, 7, from_anyone);
      world.barrier();  // all three posted on both survivors; the victim is in the barrier too
      post_byte(ready[1]);
      report += expect_code(
          commx::errc::peer_lost, [&] { recv.wait(30s); }, "recv from victim");
      report += expect_code(
          commx::errc::peer_lost, [&] { send.wait(30s); }, "large send");
      report += expect_code(
          commx::errc::peer_lost, [&] { any.wait(30s); }, "any_source recv");
      report += expect_code(
          commx::errc::peer_lost, [&] { world.send(2, 8, 1, 30s); }, "send after the loss");
      // The survivors still talk to each other.
      const int peer = 1 - r;
      int value = -1;
      const int mine = r + 100;
      auto out = world.isend(peer, 9, mine);
      world.recv(peer, 9, value, 30s);
      out.wait(30s);
      if (value != peer + 100) report += fmt::format("survivor exchange: {}\n", value);
      return report;
    }));
  }
  ranks.push_back(start_rank(job, 2, [&]() -> std::string {
    comm world = comm::from_env();
    world.send(0, 1, 42);
    int never = 0;
    auto pending = world.irecv(0, 99, never);
    world.barrier();
    post_byte(ready[1]);
    // Mid-exchange: it has a receive posted and peers waiting on it. Wait to be killed.
    await_byte(hold[0]);
    return "the victim was not killed";
  }));
  ::close(ready[1]);
  for (int i = 0; i < 3; ++i) REQUIRE(await_byte(ready[0]));
  // Every rank has arrived, so the name is already gone; the memory lives until the last unmap.
  CHECK_FALSE(commx::test::shm_ranks::segment_exists(name));
  REQUIRE(::kill(ranks[2].pid, SIGKILL) == 0);
  wait_all(ranks, 120s);
  for (int fd : {ready[0], hold[0], hold[1]}) ::close(fd);
  CHECK(WIFSIGNALED(ranks[2].status));
  ranks.pop_back();
  INFO(commx::test::shm_ranks::failures(ranks));
  CHECK(commx::test::shm_ranks::failures(ranks).empty());
  CHECK_FALSE(commx::test::shm_ranks::segment_exists(name));
}

TEST_CASE(
    "a rank found gone by the look at the peer a posted receive names: that receive raises "
    "peer_lost and the one posted after it still completes",
    "[shm]") {
  // Only rank 0 waits in commx, on a receive from rank 4, which is not among the next two ranks
  // it watches, and on one from rank 1 posted after it; rank 4's own watchers (ranks 2 and 3)
  // wait outside commx. So the look at the peer a posted receive names is what finds it gone
  // (now and then rank 0's round over every rank finds it first), and settling it erases that
  // receive from the list the look walks, with one after it.
  constexpr int size = 6;
  constexpr int victim = 4;
  constexpr int late_sender = 1;
  job_spec job{commx::test::shm_ranks::fresh_token(), size, {}};
  std::array<int, 2> ready{};    // each rank: "past the barrier"
  std::array<int, 2> release{};  // rank 0 to the bystanders: "the victim is settled"
  std::array<int, 2> hold{};     // nobody writes: the victim blocks on it until it is killed
  for (auto* p : {&ready, &release, &hold}) REQUIRE(::pipe(p->data()) == 0);
  std::vector<rank_process> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.push_back(start_rank(job, r, [&, r]() -> std::string {
      comm world = comm::from_env();
      if (r != 0) {
        world.barrier();
        post_byte(ready[1]);
        if (r == victim) {
          await_byte(hold[0]);
          return "the victim was not killed";
        }
        if (!await_byte(release[0])) return "rank 0 never released the bystanders";
        if (r == late_sender) world.send(0, 3, 77, 30s);
        return {};
      }
      int from_victim = -1;
      int from_late = -1;
      auto lost = world.irecv(victim, 1, from_victim);
      auto late = world.irecv(late_sender, 3, from_late);
      world.barrier();
      post_byte(ready[1]);
      std::string report = expect_code(
          commx::errc::peer_lost, [&] { lost.wait(30s); }, "receive from the victim");
      for (int i = 0; i < size - 2; ++i) post_byte(release[1]);
      late.wait(30s);
      if (from_late != 77) report += fmt::format("receive posted after it: {}\n", from_late);
      return report;
    }));
  }
  for (int fd : {ready[1], release[0], release[1], hold[0], hold[1]}) ::close(fd);
  for (int i = 0; i < size; ++i) REQUIRE(await_byte(ready[0]));
  ::close(ready[0]);
  REQUIRE(::kill(ranks[victim].pid, SIGKILL) == 0);
  wait_all(ranks, 120s);
  CHECK(WIFSIGNALED(ranks[victim].status));
  ranks.erase(ranks.begin() + victim);
  INFO(commx::test::shm_ranks::failures(ranks));
  CHECK(commx::test::shm_ranks::failures(ranks).empty());
}

TEST_CASE("a ring size the records cannot count is refused before anything is made", "[shm]") {
  commx::transport::shm::options opts;
  for (const std::size_t bytes : {std::size_t{32} << 20, std::size_t{3000}, std::size_t{12288}}) {
    opts.ring_bytes = bytes;
    CHECK(expect_code(
              commx::errc::invalid_argument,
              [&] { commx::transport::shm("commx_test_ring_size", 0, 1, opts); },
              fmt::format("a ring of {} bytes", bytes))
              .empty());
  }
}

TEST_CASE("a stale segment of the same name is replaced, never reused", "[shm]") {
  job_spec job{commx::test::shm_ranks::fresh_token(), 2, {}};
  const std::string name = commx::test::shm_ranks::segment_for(job.token);
  // What a job killed during start-up leaves: a complete header whose creator is gone (a pid
  // that ended, or one reused by a process started later: this test process) and one rank in.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);
  for (const pid_t creator : {dead, ::getpid()}) {
    DYNAMIC_SECTION("creator " << (creator == dead ? "ended" : "pid reused")) {
      namespace shm = commx::detail::shm;
      const shm::segment_layout layout(2, shm::default_ring_bytes(2));
      const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      REQUIRE(fd >= 0);
      REQUIRE(::ftruncate(fd, static_cast<off_t>(layout.total)) == 0);
      void* base = ::mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      REQUIRE(base != MAP_FAILED);
      auto* header = new (base) shm::segment_header();
      header->magic = shm::segment_magic;
      header->version = shm::segment_version;
      header->ranks = 2;
      header->ring_bytes = layout.ring_bytes;
      header->total_bytes = layout.total;
      header->creator_pid = creator;
      header->creator_start = 1;  // not this process's start: a different process
      header->arrived.store(1);
      header->ready.store(1);
      auto* slots = reinterpret_cast<shm::rank_slot*>(static_cast<std::byte*>(base) + layout.slots);
      slots[0].pid.store(creator);

      std::vector<rank_process> ranks;
      // Rank 1 first: it finds the stale segment before rank 0 replaces it.
      for (int r : {1, 0}) {
        ranks.push_back(start_rank(job, r, [&, r]() -> std::string {
          comm world = comm::from_env();
          const int mine = r;
          int value = -1;
          auto out = world.isend(1 - r, 3, mine);
          world.recv(1 - r, 3, value);
          out.wait();
          return value == 1 - r ? "" : fmt::format("got {}", value);
        }));
      }
      wait_all(ranks, 120s);
      INFO(commx::test::shm_ranks::failures(ranks));
      CHECK(commx::test::shm_ranks::failures(ranks).empty());
      // Nobody joined the stale segment, and the name is gone (the new one removed it).
      CHECK(header->arrived.load() == 1);
      CHECK(slots[1].pid.load() == 0);
      CHECK_FALSE(commx::test::shm_ranks::segment_exists(name));
      ::munmap(base, layout.total);
      ::close(fd);
      ::shm_unlink(name.c_str());
    }
  }
}

TEST_CASE("a rank that never arrives: the others raise timeout naming it", "[shm]") {
  job_spec job{commx::test::shm_ranks::fresh_token(), 3, {{"COMMX_SHM_STARTUP_TIMEOUT", "1"}}};
  const std::string name = commx::test::shm_ranks::segment_for(job.token);
  for (const int absent : {2, 0}) {
    DYNAMIC_SECTION("rank " << absent << " absent") {
      std::vector<rank_process> ranks;
      for (int r = 0; r < 3; ++r) {
        if (r == absent) continue;
        ranks.push_back(start_rank(job, r, [&, r]() -> std::string {
          const std::string expected =
              absent == 0 ? "rank 0 did not create" : "rank 2 never arrived";
          try {
            comm world = comm::from_env();
          } catch (const commx::error& e) {
            if (e.code() == commx::errc::timeout &&
                std::string(e.what()).find(expected) != std::string::npos) {
              return {};
            }
            return fmt::format("rank {}: {}", r, e.what());
          }
          return "joined a job with a rank missing";
        }));
      }
      wait_all(ranks, 60s);
      INFO(commx::test::shm_ranks::failures(ranks));
      CHECK(commx::test::shm_ranks::failures(ranks).empty());
      CHECK_FALSE(commx::test::shm_ranks::segment_exists(name));
    }
  }
}

#if defined(COMMX_TEST_COMMXRUN) && defined(COMMX_TEST_SHM_KILL_RANK)
TEST_CASE("under commxrun, a rank killed by SIGKILL fails the job and leaves no segment", "[shm]") {
  for (const char* when : {"at-start", "mid-exchange"}) {
    DYNAMIC_SECTION("killed " << when) {
      const std::string command = fmt::format(
          "{} -n 3 --timeout 60 {} {} 2>&1", commx::test::beside_this_program(COMMX_TEST_COMMXRUN),
          commx::test::beside_this_program(COMMX_TEST_SHM_KILL_RANK), when);
      FILE* pipe = ::popen(command.c_str(), "r");
      REQUIRE(pipe != nullptr);
      std::string output;
      std::array<char, 4096> buf{};
      while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) output += buf.data();
      const int status = ::pclose(pipe);
      INFO(output);
      REQUIRE(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 128 + SIGKILL);
      const auto at = output.find("segment /commx-");
      REQUIRE(at != std::string::npos);
      const std::string name = output.substr(at + 8, output.find('\n', at) - at - 8);
      CHECK(name.size() == 23);
      CHECK_FALSE(commx::test::shm_ranks::segment_exists(name));
    }
  }
}
#endif

TEST_CASE("more large messages in flight both ways than there are offer tickets", "[shm]") {
  // 40 large messages each way against 16 tickets per pair: offers wait for tickets, and the
  // answers that free tickets must get past them.
  constexpr int count = 40;
  constexpr std::size_t words = (std::size_t{64} << 10) / 4;
  // 64 KiB is large only at the threshold of ranks with a core each (a one-core host raises it).
  job_spec job{commx::test::shm_ranks::fresh_token(), 2, {{"COMMX_SHM_LARGE_THRESHOLD", "32768"}}};
  std::vector<rank_process> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(start_rank(job, r, [r]() -> std::string {
      comm world = comm::from_env();
      const int other = 1 - r;
      std::vector<std::vector<std::uint32_t>> out(count);
      std::vector<std::vector<std::uint32_t>> in(count, std::vector<std::uint32_t>(words));
      std::vector<comm::request> requests;
      for (int i = 0; i < count; ++i) {
        auto& message = out[static_cast<std::size_t>(i)];
        message.resize(words);
        for (std::size_t w = 0; w < words; ++w) message[w] = word_of(r, i, static_cast<int>(w));
        requests.push_back(world.isend(other, 4, message));
      }
      for (int i = 0; i < count; ++i) {
        requests.push_back(world.irecv(other, 4, std::span(in[static_cast<std::size_t>(i)])));
      }
      commx::wait_all(requests, 60s);
      for (int i = 0; i < count; ++i) {
        for (std::size_t w = 0; w < words; ++w) {
          if (in[static_cast<std::size_t>(i)][w] != word_of(other, i, static_cast<int>(w))) {
            return fmt::format("message {} word {} differs", i, w);
          }
        }
      }
      return {};
    }));
  }
  wait_all(ranks, 120s);
  INFO(commx::test::shm_ranks::failures(ranks));
  CHECK(commx::test::shm_ranks::failures(ranks).empty());
}

TEST_CASE(
    "three ranks flood a fourth: it holds at most the eager window from each, and receives "
    "every message byte for byte",
    "[shm]") {
  // 2000 messages of 256 bytes from each sender: 640,000 bytes of credit, ten windows of
  // 64 KiB. Beyond the window they wait in the senders' memory as offers.
  constexpr int count = 2000;
  constexpr int words = 64;
  constexpr std::size_t window = std::size_t{64} << 10;
  constexpr int marker = 7;  // sent last: once it is queued, everything before it is too
  // The threshold as where each rank has a core: 4 ranks sharing fewer would raise it, and the
  // window with it (at least one message of the threshold).
  job_spec job{
      commx::test::shm_ranks::fresh_token(),
      4,
      {{"COMMX_SHM_EAGER_WINDOW", std::to_string(window)}, {"COMMX_SHM_LARGE_THRESHOLD", "32768"}}};
  std::vector<rank_process> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(start_rank(job, r, [r, window]() -> std::string {
      comm world = comm::from_env();
      if (world.transport().eager_window() != window) return "COMMX_SHM_EAGER_WINDOW ignored";
      if (r != 0) {
        std::vector<std::array<std::uint32_t, words>> out(count);
        std::vector<comm::request> sends;
        for (int i = 0; i < count; ++i) {
          auto& message = out[static_cast<std::size_t>(i)];
          for (int w = 0; w < words; ++w) message[static_cast<std::size_t>(w)] = word_of(r, i, w);
          sends.push_back(world.isend(0, i % 3, std::span<const std::uint32_t>(message)));
        }
        world.send(0, marker, r);
        commx::wait_all(sends, 60s);
        world.barrier(60s);
        return {};
      }
      for (int s = 1; s < 4; ++s) world.probe(s, marker, 60s);
      const std::size_t held = world.transport().held_bytes();
      if (held == 0 || held > 3 * window) {
        return fmt::format("holds {} bytes of queued messages; the bound is 3 x {}", held, window);
      }
      // Tag 2 first, then 1, then 0, from each sender in turn: a receive for a later tag
      // finds its message past the offers of earlier ones.
      for (int tag = 2; tag >= 0; --tag) {
        for (int s = 1; s < 4; ++s) {
          for (int i = tag; i < count; i += 3) {
            std::array<std::uint32_t, words> got{};
            world.recv(s, tag, std::span(got), 60s);
            for (int w = 0; w < words; ++w) {
              if (got[static_cast<std::size_t>(w)] != word_of(s, i, w)) {
                return fmt::format("rank {} message {} word {} differs", s, i, w);
              }
            }
          }
        }
      }
      for (int s = 1; s < 4; ++s) {
        int from = 0;
        world.recv(s, marker, from, 60s);
        if (from != s) return "a marker differs";
      }
      world.barrier(60s);
      return {};
    }));
  }
  wait_all(ranks, 120s);
  INFO(commx::test::shm_ranks::failures(ranks));
  CHECK(commx::test::shm_ranks::failures(ranks).empty());
}

TEST_CASE(
    "a receive for a later tag finds its message behind more unclaimed offers than there "
    "are tickets, and an offer without a ticket can be withdrawn",
    "[shm]") {
  constexpr int count = 40;  // large messages on tag 0, against 16 tickets per pair
  constexpr std::size_t words = (std::size_t{64} << 10) / 4;
  // 64 KiB is large only at the threshold of ranks with a core each (a one-core host raises it).
  job_spec job{commx::test::shm_ranks::fresh_token(), 2, {{"COMMX_SHM_LARGE_THRESHOLD", "32768"}}};
  std::array<int, 2> sent{};  // rank 1 -> 0: all its sends are posted, one of them withdrawn
  REQUIRE(::pipe(sent.data()) == 0);
  std::vector<rank_process> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(start_rank(job, r, [r, &sent]() -> std::string {
      comm world = comm::from_env();
      if (r == 1) {
        std::vector<std::vector<std::uint32_t>> out(count + 1);
        std::vector<comm::request> sends;
        for (int i = 0; i <= count; ++i) {
          auto& message = out[static_cast<std::size_t>(i)];
          message.resize(words);
          for (std::size_t w = 0; w < words; ++w) message[w] = word_of(1, i, static_cast<int>(w));
          sends.push_back(world.isend(0, 0, message));
        }
        // The last offer has no ticket: withdrawn, it must never arrive.
        if (!sends.back().cancel()) return "the offer without a ticket was not withdrawn";
        sends.pop_back();
        sends.push_back(world.isend(0, 2, out[0]));  // large, behind 24 offers without a ticket
        const int small = 11;
        sends.push_back(world.isend(0, 1, small));
        post_byte(sent[1]);
        commx::wait_all(sends, 60s);
        world.barrier(60s);
        return {};
      }
      if (!await_byte(sent[0])) return "rank 1 ended before sending";
      std::vector<std::uint32_t> got(words);
      world.recv(1, 2, std::span(got), 20s);
      if (got[5] != word_of(1, 0, 5)) return "the tag 2 message differs";
      int small = 0;
      world.recv(1, 1, small, 20s);
      if (small != 11) return "the tag 1 message differs";
      for (int i = 0; i < count; ++i) {
        world.recv(1, 0, std::span(got), 20s);
        for (std::size_t w = 0; w < words; w += 97) {
          if (got[w] != word_of(1, i, static_cast<int>(w))) {
            return fmt::format("tag 0 message {} word {} differs", i, w);
          }
        }
      }
      if (world.iprobe(1, 0)) return "the withdrawn message arrived";
      world.barrier(60s);
      return {};
    }));
  }
  ::close(sent[0]);
  ::close(sent[1]);
  wait_all(ranks, 120s);
  INFO(commx::test::shm_ranks::failures(ranks));
  CHECK(commx::test::shm_ranks::failures(ranks).empty());
}

// How a waiting rank spends the time before it yields (detail/shm/waiting.hpp): spinning
// long only while its core is its own, judged at run time.
TEST_CASE("a waiting rank spins on while its core is its own, briefly once it is shared",
          "[shm][waiting]") {
  using commx::detail::shm::waiting;
  const auto far = commx::clock::now() + 10s;
  int polls = 0;
  const auto arrives_at = [&](int n) {
    polls = 0;
    return [&polls, n] { return ++polls >= n; };
  };
  // COMMX_SHM_SPIN=n: n polls, whatever the host.
  const waiting fixed(5, 1s, std::nullopt, 1);
  CHECK_FALSE(fixed.spin(arrives_at(1000), far));
  CHECK(polls == 5);
  // More ranks than the cores this process may use: the few polls that suit a shared core.
  const waiting oversubscribed(std::nullopt, 1s, std::nullopt, waiting::usable_cores() + 1);
  CHECK_FALSE(oversubscribed.spin(arrives_at(1000), far));
  CHECK(polls == waiting::shared_spins);
  // A core per rank: it spins on, far beyond those few polls, until the message comes...
  waiting own(std::nullopt, 1s, std::nullopt, 1);
  CHECK(own.spin(arrives_at(20000), far));
  CHECK(polls == 20000);
  // ... and no longer than its budget or the deadline.
  const waiting short_budget(std::nullopt, 1ms, std::nullopt, 1);
  const auto start = commx::clock::now();
  CHECK_FALSE(short_budget.spin([] { return false; }, far));
  CHECK_FALSE(own.spin([] { return false; }, commx::clock::now() + 1ms));
  CHECK(commx::clock::now() - start < 1s);

  // Yielding before a sleep: 200 us up to 5 ranks a core, by the ranks of the core beyond; a
  // fixed period (COMMX_SHM_YIELD_US) wins.
  using commx::detail::yield_before_sleep;
  CHECK(yield_before_sleep(8, 2) == commx::detail::base_yield);
  CHECK(yield_before_sleep(32, 2) == 16 * commx::detail::yield_per_rank);
  CHECK(yield_before_sleep(33, 2) == 17 * commx::detail::yield_per_rank);
  CHECK(yield_before_sleep(256, 2) == 128 * commx::detail::yield_per_rank);
  CHECK(yield_before_sleep(256, 256) == commx::detail::base_yield);
  CHECK(waiting(std::nullopt, 1s, 7us, 256).yield_period() == 7us);
  CHECK(waiting(std::nullopt, 1s, 7us, 1).yield_period() == 7us);
  // While the core is a rank's own, it yields for own_core_wait: a large message's copy at
  // its peer takes about that long, and a sleeper's wake-up would land on its path.
  CHECK(own.yield_period() == commx::detail::own_core_wait);
  CHECK(waiting(std::nullopt, 1s, std::nullopt, 4, 2).yield_period() == commx::detail::base_yield);
  CHECK(waiting(std::nullopt, 1s, std::nullopt, 2, 2).yield_period() ==
        commx::detail::own_core_wait);

  // A yield that another task takes the core for: pin this thread and a busy one to one core.
  cpu_set_t one;
  CPU_ZERO(&one);
  cpu_set_t mine;
  REQUIRE(::sched_getaffinity(0, sizeof(mine), &mine) == 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  CPU_SET(cpu, &one);
  REQUIRE(::sched_setaffinity(0, sizeof(one), &one) == 0);
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    (void)::sched_setaffinity(0, sizeof(one), &one);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  // The busy thread runs whenever we yield; a few yields are enough for one to take long.
  for (int i = 0; i < 50; ++i) own.yield();
  stop = true;
  busy.join();
  REQUIRE(::sched_setaffinity(0, sizeof(mine), &mine) == 0);
  CHECK_FALSE(own.spin(arrives_at(1000), far));
  CHECK(polls == waiting::shared_spins);
  // ... and yields no longer than a shared core's period before it sleeps.
  CHECK(own.yield_period() == commx::detail::base_yield);
}

// Where ranks share cores, a wait spins only while a rank it receives from may run meanwhile
// (detail/shm/endpoint_departures.hpp): one that yields or sleeps itself sends nothing until
// the kernel runs it again, which a spin on the shared core only puts off.
TEST_CASE("on a shared core a wait spins only for a sender that may be running", "[shm][waiting]") {
  using commx::detail::shm::a_sender_may_run;
  using commx::detail::shm::operation;
  using posted = std::deque<std::shared_ptr<operation>>;
  const auto from = [](int peer) {
    return std::make_shared<operation>(operation::kind::recv, peer, 0, 0);
  };
  const auto idle = [](int rank) { return rank == 1 || rank == 2; };
  CHECK_FALSE(a_sender_may_run(posted{from(1)}, idle));
  CHECK_FALSE(a_sender_may_run(posted{from(1), from(2)}, idle));
  CHECK(a_sender_may_run(posted{from(1), from(3)}, idle));
  CHECK(a_sender_may_run(posted{from(commx::any_source)}, idle));
  // A wait for something else than a message (room in a ring, an acknowledgement) spins.
  CHECK(a_sender_may_run(posted{}, idle));
  CHECK(
      a_sender_may_run(posted{std::make_shared<operation>(operation::kind::send, 1, 0, 0)}, idle));

  // A rank says it is idle for the rest of a wait that yields, only where its core is shared.
  std::atomic<std::uint32_t> word{0};
  {
    const commx::detail::shm::idle_mark yielding(word, true);
    CHECK(word.load() == 1);
  }
  CHECK(word.load() == 0);
  {
    const commx::detail::shm::idle_mark own_core(word, false);
    CHECK(word.load() == 0);
  }
  // COMMX_SHM_SPIN=n fixes the spin: the core then counts as never shared.
  using commx::detail::shm::waiting;
  CHECK(waiting(std::nullopt, 1s, std::nullopt, waiting::usable_cores() + 1).shares_core());
  CHECK_FALSE(waiting(8, 1s, std::nullopt, waiting::usable_cores() + 1).shares_core());
  CHECK_FALSE(waiting(std::nullopt, 1s, std::nullopt, 1).shares_core());
}

namespace {
// A job's ranks as threads of this process, each making its endpoint with the options `adjust`
// sets: what `read` finds in each.
template <class Adjust, class Read>
auto from_each_endpoint(const std::string& prefix, int ranks, Adjust adjust, Read read) {
  using value = decltype(read(std::declval<const commx::transport::shm&>()));
  const std::string name = prefix + std::to_string(::getpid()) + "_" + std::to_string(ranks);
  std::vector<value> found(static_cast<std::size_t>(ranks));
  commx::test::shm_ranks_as_threads(name, ranks, adjust, [&](commx::transport::shm& t, int r) {
    found[static_cast<std::size_t>(r)] = read(std::as_const(t));
  });
  return found;
}
}  // namespace

TEST_CASE("large messages are read by cma unless COMMX_SHM_LARGE=copy, with a core each or not",
          "[shm][large]") {
  using commx::detail::shm::large_path;
  using commx::detail::shm::options;
  const auto cma_chosen = [](int ranks, std::optional<large_path> large) {
    return from_each_endpoint(
        "commx_test_large_", ranks, [&](options& opts) { opts.large = large; },
        [](const commx::transport::shm& t) { return t.cross_memory_enabled() ? 1 : 0; });
  };
  const int crowded = commx::detail::queued_core * commx::detail::shm::waiting::usable_cores();
  CHECK(cma_chosen(2, std::nullopt) == std::vector<int>(2, 1));
  CHECK(cma_chosen(2, large_path::copy) == std::vector<int>(2, 0));
  CHECK(cma_chosen(crowded, std::nullopt) == std::vector<int>(std::size_t(crowded), 1));
  CHECK(cma_chosen(crowded, large_path::copy) == std::vector<int>(std::size_t(crowded), 0));
  CHECK(cma_chosen(2, large_path::cma) == std::vector<int>(2, 1));
}

TEST_CASE("a rank has a core of its own when no other rank may run on its CPUs", "[shm][waiting]") {
  using commx::detail::shm::cpu_words;
  const auto set_of = commx::test::cpu_set_of;
  const auto sharing = [](const std::vector<cpu_words>& sets, int rank) {
    const auto s = commx::test::sharing_among(sets, rank);
    return std::pair{s.ranks, s.cpus};
  };
  // Unbound: every rank meets every other, the job against the CPUs it may use.
  CHECK(sharing({set_of({0, 1}), set_of({0, 1})}, 0) == std::pair{2, 2});
  CHECK(sharing({set_of({0, 1}), set_of({0, 1}), set_of({0, 1})}, 2) == std::pair{3, 2});
  // Bound a core each (commxrun --bind-to core, mpirun at 2 ranks): each on its own.
  CHECK(sharing({set_of({0}), set_of({1})}, 1) == std::pair{1, 1});
  // Bound round two cores: two to a core.
  CHECK(sharing({set_of({0}), set_of({1}), set_of({0}), set_of({1})}, 2) == std::pair{2, 1});
  CHECK(set_of({3, 700, 1023}).count() == 3);

  // A job whose ranks are bound: threads of this process, pinned before they join. Bound a CPU
  // each, a rank is not crowded (messages go whole up to 32 KiB, not the crowded 128 KiB); two
  // on one CPU are.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  REQUIRE(::sched_getaffinity(0, sizeof(mine), &mine) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  }
  const auto eager_limits_bound_to = [&](std::vector<int> each) {
    std::atomic<std::size_t> next{0};
    return from_each_endpoint(
        "commx_test_bound_" + std::to_string(each.front()) + std::to_string(each.back()), 2,
        [&](commx::detail::shm::options&) {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(each[next++], &one);
          (void)::sched_setaffinity(0, sizeof(one), &one);
        },
        [](const commx::transport::shm& t) { return t.eager_limit(); });
  };
  for (const std::size_t limit : eager_limits_bound_to({cpus.front(), cpus.front()})) {
    CHECK(limit > std::size_t{32} << 10);
  }
  if (cpus.size() >= 2) {
    CHECK(eager_limits_bound_to({cpus[0], cpus[1]}) ==
          std::vector<std::size_t>(2, std::size_t{32} << 10));
  }
}

namespace {
// Makes `call` (process_vm_readv unless said) fail with EPERM in this process from now on, as
// a seccomp profile that forbids it (some containers' and clusters') does.
bool refuse_cross_memory(long call = SYS_process_vm_readv) {
  std::array<sock_filter, 4> filter{{
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(call), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  }};
  const sock_fprog program{static_cast<unsigned short>(filter.size()), filter.data()};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}
}  // namespace

// cma is the default: where the kernel refuses it, large messages must still arrive, in
// pieces, and only a job that asked for cma by name fails (with the reason).
TEST_CASE("where the kernel refuses cma, large messages travel in pieces unless cma was asked for",
          "[shm][large]") {
  constexpr std::size_t words = std::size_t{1} << 18;  // 1 MiB
  for (const std::string asked : {"", "cma"}) {
    DYNAMIC_SECTION("COMMX_SHM_LARGE=" << asked) {
      job_spec job{commx::test::shm_ranks::fresh_token(), 2, {}};
      std::vector<rank_process> ranks;
      for (int r = 0; r < 2; ++r) {
        ranks.push_back(start_rank(job, r, [r, asked]() -> std::string {
          if (asked.empty()) {
            ::unsetenv("COMMX_SHM_LARGE");
          } else {
            ::setenv("COMMX_SHM_LARGE", asked.c_str(), 1);
          }
          if (!refuse_cross_memory()) return "could not install the seccomp filter";
          try {
            comm world = comm::from_env();
            if (!asked.empty()) return "COMMX_SHM_LARGE=cma started though cma is refused";
            if (world.transport().cross_memory_enabled()) return "cma enabled though refused";
            const auto word = [](int from, std::size_t i) {
              return static_cast<std::uint32_t>(from) * 2654435761u ^ static_cast<std::uint32_t>(i);
            };
            std::vector<std::uint32_t> out(words), in(words);
            for (std::size_t i = 0; i < words; ++i) out[i] = word(r, i);
            world.sendrecv(1 - r, 1, std::span<const std::uint32_t>(out), 1 - r, 1,
                           std::span<std::uint32_t>(in), 60s);
            for (std::size_t i = 0; i < words; ++i) {
              if (in[i] != word(1 - r, i)) return fmt::format("word {} differs", i);
            }
            world.barrier(60s);
            return {};
          } catch (const commx::error& e) {
            const bool told =
                e.code() == commx::errc::bootstrap_failed &&
                std::string_view(e.what()).find("COMMX_SHM_LARGE=cma") != std::string_view::npos;
            return !asked.empty() && told ? std::string() : std::string(e.what());
          }
        }));
      }
      wait_all(ranks, 120s);
      INFO(commx::test::shm_ranks::failures(ranks));
      CHECK(commx::test::shm_ranks::failures(ranks).empty());
    }
  }
}

TEST_CASE("COMMX_SHM_SHARED_COPY is on or off; anything else is refused", "[shm][large]") {
  using commx::detail::shm::options;
  const auto parsed = [](const std::optional<std::string>& value) {
    return options::from_env([&](const char* name) -> std::optional<std::string> {
             if (std::string_view(name) == "COMMX_SHM_SHARED_COPY") return value;
             return std::nullopt;
           })
        .shared_copy;
  };
  CHECK(parsed(std::nullopt));
  CHECK(parsed("on"));
  CHECK_FALSE(parsed("off"));
  CHECK(
      expect_code(
          commx::errc::invalid_argument, [&] { (void)parsed("yes"); }, "COMMX_SHM_SHARED_COPY=yes")
          .empty());
}

TEST_CASE("COMMX_SHM_LARGE names one of the four ways; anything else is refused", "[shm][large]") {
  using commx::detail::shm::large_path;
  using commx::detail::shm::options;
  const auto parsed = [](const std::string& value) {
    return options::from_env([&](const char* name) -> std::optional<std::string> {
             if (std::string_view(name) == "COMMX_SHM_LARGE") return value;
             return std::nullopt;
           })
        .large;
  };
  CHECK(parsed("copy") == large_path::copy);
  CHECK(parsed("shape") == large_path::by_shape);
  CHECK(parsed("auto") == large_path::automatic);
  CHECK(parsed("cma") == large_path::cma);
  CHECK(
      expect_code(
          commx::errc::invalid_argument, [&] { (void)parsed("pieces"); }, "COMMX_SHM_LARGE=pieces")
          .empty());
}

TEST_CASE("messages up to 128 KiB travel whole while 2 to 7 ranks share a core", "[shm][large]") {
  using commx::detail::shm::options;
  constexpr std::size_t small = options::threshold;
  constexpr std::size_t shared = options::shared_core_threshold;
  CHECK(options::threshold_by_load(2, 2) == small);   // a core each
  CHECK(options::threshold_by_load(3, 2) == shared);  // one core runs two
  CHECK(options::threshold_by_load(14, 2) == shared);
  CHECK(options::threshold_by_load(15, 2) == small);  // 8 to a core: eager costs more
  CHECK(options::threshold_by_load(64, 64) == small);

  // What the endpoints take: by load, or as set.
  const auto limits = [](int ranks, std::optional<std::size_t> threshold) {
    return from_each_endpoint(
        "commx_test_eager_", ranks, [&](options& opts) { opts.large_threshold = threshold; },
        [](const commx::transport::shm& t) { return t.eager_limit(); });
  };
  // At most half a ring less a header: 256 KiB rings take 128 KiB less 64 bytes.
  const auto raised = [&](std::size_t limit) { return limit > small && limit <= shared; };
  const int cores = commx::detail::shm::waiting::usable_cores();
  const auto one_more = static_cast<std::size_t>(cores + 1);
  CHECK(std::ranges::all_of(limits(cores + 1, std::nullopt), raised));
  CHECK(limits(cores + 1, small) == std::vector<std::size_t>(one_more, small));
  CHECK(limits(1, std::nullopt) == std::vector<std::size_t>(1, small));
}

namespace {
// Byte i of a large message from rank `from`, repetition `rep`: every byte is checked.
std::byte large_byte(int from, int rep, std::size_t i) {
  return static_cast<std::byte>((i * 131 + i / 4093 + static_cast<std::size_t>(from * 7 + rep)) &
                                0xff);
}

// Sizes around the shared copy's units (64 KiB): the smallest shared, one past it, a ragged
// megabyte, and messages of many blocks.
constexpr std::array<std::size_t, 5> shared_sizes{
    std::size_t{128} << 10, (std::size_t{128} << 10) + 1, (std::size_t{1} << 20) + 12345,
    (std::size_t{4} << 20) - 3, std::size_t{8} << 20};

// A 2-rank job under COMMX_SHM_LARGE=cma whose ranks spin while they wait (a sender helps only
// while it polls): `reps` times, rank 0 sends each of shared_sizes to rank 1 and rank 1 sends it
// back, each byte checked. `before(r)` runs first in each rank; its shared_copies() are handed
// to `check(r, mine, theirs)`, whose text (empty: fine) the rank reports.
std::vector<rank_process> shared_copy_job(
    const std::string& shared, int reps, const std::function<bool(int)>& before,
    const std::function<std::string(int, std::array<std::uint64_t, 2>,
                                    std::array<std::uint64_t, 2>)>& check) {
  job_spec job{commx::test::shm_ranks::fresh_token(),
               2,
               {{"COMMX_SHM_LARGE", "cma"},
                {"COMMX_SHM_SHARED_COPY", shared},
                {"COMMX_SHM_SPIN", "100000"}}};
  std::vector<rank_process> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(start_rank(job, r, [r, reps, &before, &check]() -> std::string {
      if (!before(r)) return "could not install the seccomp filter";
      comm world = comm::from_env();
      std::vector<std::byte> buffer(shared_sizes.back());
      for (int rep = 0; rep < reps; ++rep) {
        for (const std::size_t bytes : shared_sizes) {
          const std::span<std::byte> message(buffer.data(), bytes);
          for (int turn = 0; turn < 2; ++turn) {
            const int from = turn;
            if (r == from) {
              for (std::size_t i = 0; i < bytes; ++i) message[i] = large_byte(from, rep, i);
              world.send(1 - r, 5, std::span<const std::byte>(message), 60s);
              continue;
            }
            std::fill(message.begin(), message.end(), std::byte{0});
            const commx::status got = world.recv(from, 5, message, 60s);
            if (got.bytes != bytes) return fmt::format("{} bytes, not {}", got.bytes, bytes);
            for (std::size_t i = 0; i < bytes; ++i) {
              if (message[i] != large_byte(from, rep, i)) {
                return fmt::format("message of {} bytes, repetition {}: byte {} differs", bytes,
                                   rep, i);
              }
            }
          }
        }
      }
      const std::array<std::uint64_t, 2> mine = world.transport().shared_copies();
      std::array<std::uint64_t, 2> theirs{};
      world.sendrecv(1 - r, 6, std::span<const std::uint64_t>(mine), 1 - r, 6,
                     std::span<std::uint64_t>(theirs), 60s);
      return check(r, mine, theirs);
    }));
  }
  wait_all(ranks, 180s);
  return ranks;
}
}  // namespace

// The sender of a large message copied by cma writes blocks from the back while its receiver
// reads from the front (shared_copy.hpp): every byte arrives, at every size around the blocks,
// and each copy a receiver counts as shared is one its sender counts as helped.
TEST_CASE("a large message is copied by both its ends at once, every byte in its place",
          "[shm][large]") {
  for (const std::string shared : {"on", "off"}) {
    DYNAMIC_SECTION("COMMX_SHM_SHARED_COPY=" << shared) {
      const auto ranks = shared_copy_job(
          shared, 6, [](int) { return true; },
          [shared](int r, std::array<std::uint64_t, 2> mine,
                   std::array<std::uint64_t, 2> theirs) -> std::string {
            if (mine[0] != theirs[1]) {
              return fmt::format("rank {} received {} copies with help, its sender helped {}", r,
                                 mine[0], theirs[1]);
            }
            // Whether a sender runs while its receiver copies is the scheduler's: that copies
            // are shared at all is tested without it (the test case after next).
            if (shared == "off" && mine[0] + mine[1] != 0) return "copies shared though off";
            return {};
          });
      INFO(commx::test::shm_ranks::failures(ranks));
      CHECK(commx::test::shm_ranks::failures(ranks).empty());
    }
  }
}

// A sender the kernel does not let write into its receiver (a seccomp profile that forbids
// process_vm_writev) gives its first block back: the receiver reads it, the message arrives
// whole, and the sender helps no more.
TEST_CASE("a sender refused process_vm_writev gives its block back and the message arrives whole",
          "[shm][large]") {
  const auto ranks = shared_copy_job(
      "on", 6, [](int r) { return r != 0 || refuse_cross_memory(SYS_process_vm_writev); },
      [](int r, std::array<std::uint64_t, 2> mine, std::array<std::uint64_t, 2>) -> std::string {
        // Rank 0 never writes; it gives back at most one block (if it ran while rank 1 copied),
        // then helps no more.
        if (r == 0 && mine[1] != 0) return "rank 0 counted blocks it could not write";
        if (r == 1 && mine[0] > 1) {
          return fmt::format("rank 1 received {} copies with help after its sender was refused",
                             mine[0]);
        }
        return {};
      });
  INFO(commx::test::shm_ranks::failures(ranks));
  CHECK(commx::test::shm_ranks::failures(ranks).empty());
}

// The shared copy's steps in a fixed order, in one process (cma to itself): a sender that
// claims before its receiver reads takes every block; a block it cannot write (a read-only
// page) is given back and read by the receiver; a sender of another message writes nothing.
TEST_CASE("a shared copy's blocks: claimed from the back, given back when refused, whole",
          "[shm][large]") {
  namespace shm = commx::detail::shm;
  constexpr std::size_t bytes = (std::size_t{1} << 20) + 12345;  // 17 units, the last short
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t mapped = (bytes + page - 1) / page * page;
  void* memory =
      ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(memory != MAP_FAILED);
  auto* target = static_cast<std::byte*>(memory);
  std::vector<std::byte> payload(bytes);
  for (std::size_t i = 0; i < bytes; ++i) payload[i] = large_byte(3, 1, i);
  const pid_t self = ::getpid();
  const auto address = reinterpret_cast<std::uintptr_t>(payload.data());
  const std::uint64_t owner = shm::copy_owner(3, 42);
  shm::copy_board board;
  const std::uint64_t units = shm::copy_units(bytes);
  REQUIRE(units == 17);

  // Another message's sender: nothing claimed, nothing written.
  shm::publish_copy(board, owner, target, bytes);
  CHECK(shm::help_copy(board, shm::copy_owner(3, 41), self, payload).units == 0);
  CHECK(shm::help_copy(board, shm::copy_owner(2, 42), self, payload).units == 0);

  // The sender first: it takes every block, the receiver none, and waits for nothing more.
  const shm::help_given all = shm::help_copy(board, owner, self, payload);
  CHECK(all.wrote == shm::cross_copy::done);
  CHECK(all.units == units);
  const shm::shared_read none = shm::read_front(board, self, address, target, bytes);
  CHECK(none.sender_units == units);
  CHECK(shm::sender_finished(board, none.sender_units));
  CHECK(std::equal(payload.begin(), payload.end(), target));

  // Refused: the sender's first block (the back half) covers a read-only page.
  std::fill_n(target, bytes, std::byte{0});
  shm::publish_copy(board, owner, target, bytes);
  REQUIRE(::mprotect(target + mapped - page, page, PROT_READ) == 0);
  const shm::help_given refused = shm::help_copy(board, owner, self, payload);
  CHECK(refused.wrote == shm::cross_copy::bad_address);
  CHECK(refused.units == 0);
  REQUIRE(::mprotect(target + mapped - page, page, PROT_READ | PROT_WRITE) == 0);
  const shm::shared_read front = shm::read_front(board, self, address, target, bytes);
  CHECK(front.copied == shm::cross_copy::done);
  CHECK(front.sender_units == units / 2);  // the block it claimed, given back
  CHECK(shm::sender_finished(board, front.sender_units));
  CHECK(shm::read_given_back(board, self, address, target, bytes) == shm::cross_copy::done);
  CHECK(std::equal(payload.begin(), payload.end(), target));
  ::munmap(memory, mapped);
}

namespace {
// A seccomp filter on the calling thread that hands each `call` to a supervisor: the call waits
// until the supervisor answers through the descriptor returned (-1: not installed). Threads
// started before are not filtered, so one of them can supervise.
int supervise_calls(long call) {
  std::array<sock_filter, 4> filter{{
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(call), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  }};
  const sock_fprog program{static_cast<unsigned short>(filter.size()), filter.data()};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return static_cast<int>(
      ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &program));
}

// The next supervised call, waited for up to `limit`: its id, or nothing.
std::optional<std::uint64_t> next_call(int listener, std::chrono::milliseconds limit) {
  pollfd ready{listener, POLLIN, 0};
  if (::poll(&ready, 1, static_cast<int>(limit.count())) <= 0) return std::nullopt;
  seccomp_notif call{};
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &call) != 0) return std::nullopt;
  return call.id;
}

// Lets supervised call `id` go on as if no filter were there.
void let_through(int listener, std::uint64_t id) {
  seccomp_notif_resp answer{};
  answer.id = id;
  answer.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  (void)::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &answer);
}

// Whether process `pid` has ended (gone, or a zombie its parent has not reaped).
bool process_ended(pid_t pid) {
  const auto record = commx::detail::shm::read_process_record(pid);
  return !record || record->ended;
}
}  // namespace

// A sender that stalls (here: held inside process_vm_writev by a seccomp supervisor that never
// answers) after it claimed a block of its receiver's shared copy would write that block
// whenever it resumed, into memory its receiver has handed back. The receiver, giving the receive
// up, fences it: declares it lost and kills it before the receive returns. Deterministic: the
// receiver's first process_vm_readv is held until the sender has stalled, so the sender claims
// a block whatever the scheduler does.
TEST_CASE(
    "a sender stalled while it holds a block of a shared copy is killed before the receive "
    "gives the buffer back",
    "[shm][large][fence]") {
  constexpr std::size_t bytes = std::size_t{8} << 20;
  std::array<int, 2> stalled{};  // the sender's supervisor tells the receiver's
  REQUIRE(::pipe2(stalled.data(), O_CLOEXEC) == 0);
  job_spec job{commx::test::shm_ranks::fresh_token(),
               2,
               {{"COMMX_SHM_LARGE", "cma"},
                {"COMMX_SHM_SHARED_COPY", "on"},
                {"COMMX_SHM_SPIN", "1000"}}};  // a fixed choice: the ranks help
  std::vector<rank_process> ranks;
  ranks.push_back(start_rank(job, 0, [&stalled]() -> std::string {
    ::setenv("COMMX_SHM_YIELD_US", "60000000", 1);  // the sender polls (helps), never sleeps
    comm world = comm::from_env();
    std::promise<int> listener;
    std::thread([&stalled, calls = listener.get_future()]() mutable {
      const int fd = calls.get();
      if (fd < 0 || !next_call(fd, 60s)) return;
      const char held = 1;
      (void)::write(stalled[1], &held, 1);  // and never answers: the call waits for good
    }).detach();
    listener.set_value(supervise_calls(SYS_process_vm_writev));
    std::vector<std::byte> message(bytes, std::byte{7});
    world.barrier(60s);
    world.send(1, 5, std::span<const std::byte>(message), 120s);
    return "the send returned: its receiver did not fence this rank";
  }));
  const pid_t sender = ranks[0].pid;
  ranks.push_back(start_rank(job, 1, [&stalled, sender]() -> std::string {
    comm world = comm::from_env();
    std::promise<int> listener;
    std::atomic<bool> sender_stalled{false};
    std::thread([&stalled, &sender_stalled, calls = listener.get_future()]() mutable {
      const int fd = calls.get();
      const std::optional<std::uint64_t> first = fd < 0 ? std::nullopt : next_call(fd, 60s);
      if (!first) return;
      pollfd told{stalled[0], POLLIN, 0};
      sender_stalled = ::poll(&told, 1, 60000) == 1;
      let_through(fd, *first);
      while (const std::optional<std::uint64_t> id = next_call(fd, 120s)) let_through(fd, *id);
    }).detach();
    listener.set_value(supervise_calls(SYS_process_vm_readv));
    std::vector<std::byte> message(bytes);
    world.barrier(60s);
    try {
      world.recv(0, 5, std::span<std::byte>(message), 2s);
      return "the receive completed though its sender never wrote its block";
    } catch (const commx::error&) {
    }
    if (!sender_stalled) return "the sender never stalled in its block (no shared copy?)";
    if (!process_ended(sender)) return "the receive returned while its stalled sender lived";
    const std::vector<int> lost = world.known_lost();
    if (std::ranges::find(lost, 0) == lost.end()) return "the fenced sender is not known lost";
    return {};
  }));
  wait_all(ranks, 90s);  // the receive ends after its deadline and cancel's 30 s bound
  ::close(stalled[0]);
  ::close(stalled[1]);
  INFO(commx::test::shm_ranks::failures(ranks));
  CHECK(ranks[1].text.empty());
  CHECK(WIFEXITED(ranks[1].status));
  CHECK(ranks[0].text.empty());  // killed by its receiver: no report, nor the test's limit
  CHECK((WIFSIGNALED(ranks[0].status) && WTERMSIG(ranks[0].status) == SIGKILL));
}
