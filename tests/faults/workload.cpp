// SPDX-License-Identifier: MIT
// The fault campaign's workload (run_campaign.sh): point-to-point rings of checksummed messages,
// small and large, allreduces and broadcasts, under whatever COMMX_FAULTS does to the job. Each
// rank prints one outcome line: finished, a typed error, killed (in-process ranks; a process is
// SIGKILLed and says nothing), or CORRUPT/DUPLICATE when a payload is not what was sent (a
// checksum, the sender and the iteration are in every message). With --recover, the survivors
// of a loss go on (work's comment). Exit status: 0 finished, 2 a typed error, 3 corrupt or
// duplicate data.

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commx/recovery.hpp"
#include "commx/transport/faulty.hpp"
#include "commx/variant.hpp"

namespace {

using comm = commx::variant::communicator;
constexpr int iterations = 60;

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Words: sender, iteration, filler..., checksum. Large every 13th iteration (tcp's rendezvous).
std::size_t words_at(int it) {
  return it % 13 == 0 ? 20000 : 3 + static_cast<std::size_t>(it * 37 % 500);
}

std::vector<std::uint64_t> message(int sender, int it) {
  std::vector<std::uint64_t> m(words_at(it));
  m[0] = static_cast<std::uint64_t>(sender);
  m[1] = static_cast<std::uint64_t>(it);
  std::uint64_t sum = 0;
  for (std::size_t i = 2; i + 1 < m.size(); ++i) {
    m[i] = mix(m[0] * 1000003 + m[1] * 131 + i);
    sum = mix(sum ^ m[i]);
  }
  m.back() = sum ^ m[0] ^ (m[1] << 32);
  return m;
}

// Empty when `m` is what `sender` sent in iteration `it`; else what is wrong.
std::string verdict(const std::vector<std::uint64_t>& m, int sender, int it) {
  std::uint64_t sum = 0;
  for (std::size_t i = 2; i + 1 < m.size(); ++i) sum = mix(sum ^ m[i]);
  if (m.back() != (sum ^ m[0] ^ (m[1] << 32))) return "CORRUPT: checksum";
  if (m[0] != static_cast<std::uint64_t>(sender)) return fmt::format("CORRUPT: from {}", m[0]);
  if (m[1] != static_cast<std::uint64_t>(it)) {
    return fmt::format("DUPLICATE: iteration {} in {}", m[1], it);
  }
  return {};
}

// One iteration on `team`: a ring exchange, an allreduce and a broadcast, each checked. Empty
// when all was right, else what was wrong. Senders are named by world rank (what they wrote).
std::string step(comm& team, int it) {
  const int n = team.size();
  const int me = team.rank();
  const int right = (me + 1) % n;
  const int left = (me + n - 1) % n;
  const std::vector<std::uint64_t> out = message(team.world_rank_of(me), it);
  std::vector<std::uint64_t> in(words_at(it));
  team.sendrecv(right, it % 8, out, left, it % 8, in);
  std::string wrong = verdict(in, team.world_rank_of(left), it);

  long total = (team.world_rank_of(me) + 1L) * (it + 1L);
  team.allreduce(total, std::plus<>{});
  long expected = 0;
  for (int r = 0; r < n; ++r) expected += (team.world_rank_of(r) + 1L) * (it + 1L);
  if (wrong.empty() && total != expected) wrong = fmt::format("CORRUPT: allreduce gave {}", total);
  const int root = it % n;
  std::vector<std::uint64_t> b =
      me == root ? message(team.world_rank_of(root), it) : std::vector<std::uint64_t>(words_at(it));
  team.bcast(b, root);
  if (wrong.empty()) wrong = verdict(b, team.world_rank_of(root), it);
  return wrong;
}

// With `recover`, a loss, a revocation or a timeout (a stall, a partition) is answered by
// revoke, shrink (a majority, where a network joins the ranks) and an agreement on the last
// iteration every survivor completed, from which all go on; the finishing ranks print their
// members and how many recoveries they made (run_campaign.sh compares them: disagreements).
int work(comm& world, bool recover) {
  const int me = world.rank();
  if (me == 0) fmt::print("plan {}\n", world.transport().plan().text());
  comm team = world;
  int recoveries = 0;
  try {
    int completed = -1;
    while (completed + 1 < iterations) {
      const int it = completed + 1;
      try {
        const std::string wrong = step(team, it);
        if (!wrong.empty()) {
          fmt::print("outcome rank={} {} (iteration {})\n", me, wrong, it);
          return 3;
        }
        completed = it;
        continue;
      } catch (const commx::error& e) {
        if (!recover || recoveries == 8 ||
            (!commx::calls_for_recovery(e) && e.code() != commx::errc::timeout)) {
          throw;
        }
      }
      team.revoke();
      team = team.shrink();
      completed = team.agree(completed, commx::op::min{}).value;
      ++recoveries;
    }
    team.barrier();
  } catch (const commx::error& e) {
    fmt::print("outcome rank={} error ({})\n", me, e.what());
    return 2;
  } catch (const commx::transport::injected_kill&) {
    fmt::print("outcome rank={} killed\n", me);
    throw;
  }
  std::vector<int> members;
  for (int r = 0; r < team.size(); ++r) members.push_back(team.world_rank_of(r));
  fmt::print("outcome rank={} finished members={} recoveries={}\n", me, members, recoveries);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool recover = argc > 1 && std::string_view(argv[1]) == "--recover";
  std::atomic<int> worst{0};
  std::atomic<int> reported{0};  // ranks that printed their outcome
  try {
    commx::run<comm>([&](comm& world) {
      const int status = work(world, recover);
      ++reported;
      int seen = worst.load();
      while (status > seen && !worst.compare_exchange_weak(seen, status)) {
      }
      std::fflush(stdout);
    });
  } catch (const commx::transport::injected_kill&) {  // in-process: the job saw its rank die
  } catch (const commx::error& e) {
    // In-process, a rank's typed error comes back here after it reported it; anything else
    // (a plan refused, a job that could not start) is a failure of the run.
    if (reported == 0) {
      fmt::print(stderr, "fault_workload: {}\n", e.what());
      return 1;
    }
  }
  return worst.load();
}
