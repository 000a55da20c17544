// SPDX-License-Identifier: MIT
// The fault campaign's workload (run_campaign.sh): point-to-point rings of checksummed messages,
// small and large, allreduces and broadcasts, under whatever COMMX_FAULTS does to the job. Each
// rank prints one outcome line: finished, a typed error, killed (in-process ranks; a process is
// SIGKILLed and says nothing), or CORRUPT/DUPLICATE when a payload is not what was sent (a
// checksum, the sender and the iteration are in every message). Exit status: 0 finished,
// 2 a typed error, 3 corrupt or duplicate data.

#include <atomic>
#include <cstdint>
#include <functional>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

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

int work(comm& world) {
  const int n = world.size();
  const int me = world.rank();
  if (me == 0) fmt::print("plan {}\n", world.transport().plan().text());
  try {
    for (int it = 0; it < iterations; ++it) {
      const int right = (me + 1) % n;
      const int left = (me + n - 1) % n;
      const std::vector<std::uint64_t> out = message(me, it);
      std::vector<std::uint64_t> in(words_at(it));
      world.sendrecv(right, it % 8, out, left, it % 8, in);
      std::string wrong = verdict(in, left, it);

      long total = (me + 1L) * (it + 1L);
      world.allreduce(total, std::plus<>{});
      if (wrong.empty() && total != n * (n + 1L) / 2 * (it + 1L)) {
        wrong = fmt::format("CORRUPT: allreduce gave {}", total);
      }
      const int root = it % n;
      std::vector<std::uint64_t> b =
          me == root ? message(root, it) : std::vector<std::uint64_t>(words_at(it));
      world.bcast(b, root);
      if (wrong.empty()) wrong = verdict(b, root, it);
      if (!wrong.empty()) {
        fmt::print("outcome rank={} {} (iteration {})\n", me, wrong, it);
        return 3;
      }
    }
    world.barrier();
  } catch (const commx::error& e) {
    fmt::print("outcome rank={} error ({})\n", me, e.what());
    return 2;
  } catch (const commx::transport::injected_kill&) {
    fmt::print("outcome rank={} killed\n", me);
    throw;
  }
  fmt::print("outcome rank={} finished\n", me);
  return 0;
}

}  // namespace

int main() {
  std::atomic<int> worst{0};
  std::atomic<int> reported{0};  // ranks that printed their outcome
  try {
    commx::run<comm>([&](comm& world) {
      const int status = work(world);
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
