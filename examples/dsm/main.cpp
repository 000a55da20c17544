// SPDX-License-Identifier: MIT
// Distributed shared memory with commx windows: a histogram and a hash table spread over the
// ranks, updated by every rank with one-sided operations (window.hpp), the owners never
// taking part.
//
// 1. Histogram: every rank draws keys and adds 1 to each key's bin with `accumulate`; the bins
//    are spread round-robin over the ranks. After a fence every rank reads all bins with `get`
//    and checks them against the counts it recomputes from every rank's seed.
// 2. Hash table: every rank inserts its keys into the owners' slots with `compare_and_swap`
//    (open addressing, linear probing), then looks up another rank's keys with `get`.
//
//   COMMX_INPROC_RANKS=4 ./dsm_inproc [keys per rank]
//   commxrun -n 4 ./dsm_<stack> [keys per rank]

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/variant.hpp"
#include "commx/window.hpp"

namespace {

constexpr std::size_t bins_per_rank = 64;

std::vector<std::uint64_t> draw_keys(int rank, std::size_t count, std::uint64_t range) {
  std::mt19937_64 generator(static_cast<std::uint64_t>(rank) * 7919 + 1);
  std::uniform_int_distribution<std::uint64_t> pick(0, range - 1);
  std::vector<std::uint64_t> keys(count);
  for (auto& k : keys) k = pick(generator);
  return keys;
}

template <class Comm>
double histogram(Comm& world, std::size_t keys_per_rank, bool& mapped) {
  const auto n = static_cast<std::size_t>(world.size());
  const std::size_t bins = bins_per_rank * n;
  commx::window<std::int64_t, Comm> counts(world, bins_per_rank);
  mapped = counts.mapped();
  const auto start = std::chrono::steady_clock::now();
  counts.fence();
  for (std::uint64_t key : draw_keys(world.rank(), keys_per_rank, bins)) {
    counts.accumulate(std::int64_t{1}, static_cast<int>(key % n), key / n, std::plus<>{});
  }
  counts.fence();
  std::vector<std::int64_t> all(bins);
  for (std::size_t owner = 0; owner < n; ++owner) {
    counts.get(std::span(all).subspan(owner * bins_per_rank, bins_per_rank),
               static_cast<int>(owner), 0);
  }
  counts.fence();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<std::int64_t> expected(bins);
  for (int r = 0; r < world.size(); ++r) {
    for (std::uint64_t key : draw_keys(r, keys_per_rank, bins)) {
      ++expected[(key % n) * bins_per_rank + key / n];
    }
  }
  if (all != expected) throw std::runtime_error("histogram: a bin differs from the recount");
  counts.free();
  return seconds;
}

template <class Comm>
double hash_table(Comm& world, std::size_t keys_per_rank) {
  const int n = world.size();
  // Twice the room the keys need, so probes stay short; 0 marks an empty slot.
  const std::size_t slots = 2 * keys_per_rank + 1;
  commx::window<std::uint64_t, Comm> table(world, slots);
  const auto key_of = [](int rank, std::size_t i) {
    return (static_cast<std::uint64_t>(rank) << 32) + i + 1;
  };
  const auto home_of = [&](std::uint64_t key) {
    const std::uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    return std::pair<int, std::size_t>(static_cast<int>(h % static_cast<std::uint64_t>(n)),
                                       (h >> 20) % slots);
  };
  const auto start = std::chrono::steady_clock::now();
  table.lock_all();
  for (std::size_t i = 0; i < keys_per_rank; ++i) {
    const std::uint64_t key = key_of(world.rank(), i);
    auto [owner, slot] = home_of(key);
    for (std::size_t probe = 0;; ++probe) {
      if (probe == slots) throw std::runtime_error("hash table: full");
      const std::uint64_t old = table.compare_and_swap(0, key, owner, slot);
      if (old == 0 || old == key) break;
      slot = (slot + 1) % slots;
    }
  }
  table.unlock_all();
  table.fence();
  // Look up the next rank's keys.
  const int other = (world.rank() + 1) % n;
  table.lock_all();
  for (std::size_t i = 0; i < keys_per_rank; ++i) {
    const std::uint64_t key = key_of(other, i);
    auto [owner, slot] = home_of(key);
    for (std::size_t probe = 0;; ++probe) {
      std::uint64_t seen = 0;
      table.get(std::span(&seen, 1), owner, slot);
      table.flush(owner);
      if (seen == key) break;
      if (seen == 0 || probe == slots) {
        throw std::runtime_error(fmt::format("hash table: key {:#x} not found", key));
      }
      slot = (slot + 1) % slots;
    }
  }
  table.unlock_all();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  table.free();
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  long long keys = 20000;
  if (argc > 1) {
    char* end = nullptr;
    keys = std::strtoll(argv[1], &end, 10);
    if (*end != '\0' || keys < 1) {
      std::fprintf(stderr, "usage: %s [keys per rank > 0]\n", argv[0]);
      return 2;
    }
  }
  try {
    commx::run<commx::variant::communicator>([&](auto& world) {
      const auto per_rank = static_cast<std::size_t>(keys);
      bool mapped = false;
      const double histogram_seconds = histogram(world, per_rank, mapped);
      const double table_seconds = hash_table(world, per_rank / 4 + 1);
      world.barrier();
      if (world.rank() != 0) return;
      fmt::print("{}: {} ranks, windows {}\n", commx::variant::target_name, world.size(),
                 mapped ? "mapped by every rank (one-sided copies)" : "carried as messages");
      fmt::print("  histogram: {} accumulates per rank, {:.1f} ms, every bin checked\n", per_rank,
                 histogram_seconds * 1e3);
      fmt::print("  hash table: {} compare-and-swap inserts and lookups per rank, {:.1f} ms\n",
                 per_rank / 4 + 1, table_seconds * 1e3);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsm: %s\n", e.what());
    return 1;
  }
  return 0;
}
