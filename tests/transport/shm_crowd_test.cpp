// SPDX-License-Identifier: MIT
// Where a shm job's ranks outnumber its cores, a rank's waits spin only while no more of the
// ranks that may run on its CPUs are awake than they are: those asleep in a wait or gone do not
// crowd it (detail/shm/cpu_sharing.hpp, waiting.hpp).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "commx/transport/shm.hpp"
#include "transport/eventually.hpp"
#include "transport/shm_threads.hpp"
#include "transport/shm_cpu_sets.hpp"

using namespace std::chrono_literals;

TEST_CASE("the ranks that share CPUs are counted at rest in the slot of the lowest of them",
          "[shm][waiting]") {
  using commx::detail::shm::cpu_words;
  const auto set_of = commx::test::cpu_set_of;
  const auto group = [](const std::vector<cpu_words>& sets, int rank) {
    return commx::test::sharing_among(sets, rank).group;
  };
  // Unbound: one set, counted at rank 0.
  const std::vector unbound{set_of({0, 1}), set_of({0, 1}), set_of({0, 1})};
  CHECK(group(unbound, 2) == 0);
  // Bound a core each: each rank its own.
  CHECK(group({set_of({0}), set_of({1})}, 1) == 1);
  // Bound round two cores: the lowest rank of each core.
  const std::vector round{set_of({0}), set_of({1}), set_of({0}), set_of({1})};
  CHECK(group(round, 2) == 0);
  CHECK(group(round, 3) == 1);
  // Sets that only partly overlap are not counted: who crowds whom is not one number.
  CHECK(group({set_of({0, 1}), set_of({1})}, 0) == -1);
  CHECK(group({set_of({0, 1}), set_of({1})}, 1) == -1);

  // A wait finds its core its own once enough of the others rest.
  using commx::detail::shm::waiting;
  std::atomic<std::uint32_t> resting{0};
  const waiting counted(std::nullopt, 1s, std::nullopt, 4, 2, &resting);
  CHECK(counted.shares_core());
  resting = 1;
  CHECK(counted.shares_core());
  resting = 2;
  CHECK_FALSE(counted.shares_core());
  resting = 3;  // all the others: this rank itself is awake
  CHECK_FALSE(counted.shares_core());
  // COMMX_SHM_SPIN=n still fixes the spin; without a count, the crowd is the ranks that may run.
  CHECK_FALSE(waiting(8, 1s, std::nullopt, 4, 2, &resting).shares_core());
  CHECK(waiting(std::nullopt, 1s, std::nullopt, 4, 2).shares_core());
}

using commx::test::eventually;

// A job of four ranks a core, as threads of this process: while the others sleep in a receive,
// rank 0's waits find the core its own; once it woke them (they then stay awake), shared again;
// once all but one of them have left, its own again. Before, the count of ranks that may run
// on its CPUs kept them yielding for the rest of the job.
TEST_CASE("a rank's waits spin once the ranks crowding its core sleep or leave", "[shm][waiting]") {
  const int cores = commx::detail::shm::waiting::usable_cores();
  if (cores < 2) {
    WARN("needs two CPUs: two ranks stay awake");
    return;
  }
  const int ranks = 4 * cores;
  const std::string name = "commx_test_crowd_" + std::to_string(::getpid());
  std::atomic<bool> own_while_others_sleep{false};
  std::atomic<bool> shared_once_woken{false};
  std::atomic<bool> own_once_others_left{false};
  std::atomic<int> phase{0};  // 1: ranks 2.. may leave; 2: rank 1 may
  std::atomic<int> received{0};
  commx::test::shm_ranks_as_threads(name, ranks, [&](commx::transport::shm& t, int r) {
    std::array<std::byte, 1> byte{};
    const auto send = [&](int to, int tag) { (void)t.send_blocking(to, 0, tag, byte, 30s, 30s); };
    const auto recv = [&](int from, int tag) {
      const auto got = t.recv_blocking(from, 0, tag, commx::transport::recv_buffer(byte), 30s, 30s);
      return got && !got->error;
    };
    if (r == 0) {
      own_while_others_sleep = eventually([&] { return !t.waits_share_core(); });
      for (int peer = 1; peer < ranks; ++peer) send(peer, 1);
      // Every rank the sends woke counts as awake by now: its waker took it off the count as
      // it woke it (or it ran and did). A count left too high fails here; a hand-off that
      // waits for the woken rank to run is not told apart, as woken ranks run at once.
      shared_once_woken = t.waits_share_core();
      const bool heard = recv(1, 2);
      phase = 1;
      own_once_others_left = heard && eventually([&] { return !t.waits_share_core(); });
      phase = 2;
      return;
    }
    if (!recv(0, 1)) {
      phase = 2;
      return;
    }
    ++received;
    if (r == 1) send(0, 2);
    // Awake, and out of commx, until rank 0 has looked.
    (void)eventually([&] { return phase.load() >= (r == 1 ? 2 : 1); });
  });
  CHECK(received == ranks - 1);
  CHECK(own_while_others_sleep);
  CHECK(shared_once_woken);
  CHECK(own_once_others_left);
}
