// SPDX-License-Identifier: MIT
// Ranks on machines of different byte order (tcp's layouts, data_layout.hpp), faked on one
// machine: rank 1 announces the other byte order (COMMX_TEST_LAYOUT=swapped) and keeps its
// values byte-swapped in memory, as such a machine would. Rank 0 must read what rank 1 meant,
// point to point and in collectives, and rank 1 must get rank 0's values in its own order; a
// struct sent as raw bytes is refused, not misread. Exits 0 when every check holds.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"
#include "commx/coll/flat.hpp"
#include "commx/transport/tcp.hpp"

namespace {

using comm = commx::communicator<commx::transport::tcp, commx::coll::flat>;

// A value as a machine of the other byte order holds it.
template <class V>
V swapped(V v) {
  std::byte bytes[sizeof(V)];
  std::memcpy(bytes, &v, sizeof(V));
  std::reverse(bytes, bytes + sizeof(V));
  std::memcpy(&v, bytes, sizeof(V));
  return v;
}

int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    fmt::print(stderr, "layouts: rank check failed: {}\n", what);
    ++failures;
  }
}

enum class colour : std::uint16_t { red = 0x0102, blue = 0x0a0b };
struct raw_pair {
  std::int32_t a;
  double b;
};

}  // namespace

int main() {
  const char* rank_text = std::getenv("COMMX_RANK");
  const bool other_machine = rank_text != nullptr && std::string(rank_text) == "1";
  if (other_machine) ::setenv("COMMX_TEST_LAYOUT", "swapped", 1);
  try {
    comm world = comm::from_env();
    check(world.size() == 2, "two ranks");
    if (other_machine) {
      std::vector<std::uint32_t> ints{swapped(1U), swapped(2U), swapped(0xdeadbeefU)};
      std::vector<double> reals{swapped(1.5), swapped(-2.25)};
      const std::int64_t big = swapped<std::int64_t>(-42);
      const colour c = swapped(colour::blue);
      world.send(0, 1, ints);
      world.send(0, 2, reals);
      world.send(0, 3, big);
      world.send(0, 4, c);
      world.send(0, 5, raw_pair{swapped(7), swapped(0.5)});
      std::vector<float> later{swapped(3.0F), swapped(4.0F)};
      world.send(0, 6, later);
      // Collectives (coll::flat: rank 0 combines, so no sum is taken in swapped order here).
      int mine = swapped(5);
      world.allreduce(mine, std::plus<>{});
      check(mine == swapped(12), fmt::format("allreduce gave {:#x}", mine));
      std::vector<std::int16_t> shared{swapped<std::int16_t>(300), swapped<std::int16_t>(-7)};
      world.bcast(shared, 1);
      // What rank 0 sends arrives in this rank's (swapped) order.
      std::vector<std::uint64_t> back;
      world.recv(0, 7, back);
      check(back == std::vector<std::uint64_t>{swapped<std::uint64_t>(1),
                                               swapped<std::uint64_t>(1ULL << 40)},
            "rank 0's values, in this rank's order");
    } else {
      std::vector<std::uint32_t> ints;
      world.recv(1, 1, ints);
      check(ints == std::vector<std::uint32_t>{1U, 2U, 0xdeadbeefU}, "uint32 vector");
      std::vector<double> reals(2);
      world.recv(1, 2, reals);
      check(reals == std::vector<double>{1.5, -2.25}, "double vector");
      std::int64_t big = 0;
      world.recv(1, 3, big);
      check(big == -42, fmt::format("int64 value {}", big));
      colour c = colour::red;
      world.recv(1, 4, c);
      check(c == colour::blue, "enum");
      raw_pair p{};
      try {
        world.recv(1, 5, p);
        check(false, "a raw struct from another byte order was accepted");
      } catch (const commx::error& e) {
        check(e.code() == commx::errc::type_mismatch &&
                  std::string(e.what()).find("serialize function") != std::string::npos,
              fmt::format("raw struct refused as type_mismatch: {}", e.what()));
      }
      std::vector<float> later(2);
      auto pending = world.irecv(1, 6, later);
      pending.wait();
      check(later == std::vector<float>{3.0F, 4.0F}, "irecv of floats");
      int mine = 7;
      world.allreduce(mine, std::plus<>{});
      check(mine == 12, fmt::format("allreduce gave {}", mine));
      std::vector<std::int16_t> shared(2);
      world.bcast(shared, 1);
      check(shared == std::vector<std::int16_t>{300, -7}, "bcast from the other machine");
      world.send(1, 7, std::vector<std::uint64_t>{1, 1ULL << 40});
    }
    world.barrier();
  } catch (const std::exception& e) {
    fmt::print(stderr, "layouts: {}\n", e.what());
    return 2;
  }
  if (failures == 0)
    fmt::print("layouts: rank {} read every value as meant\n", other_machine ? 1 : 0);
  return failures == 0 ? 0 : 1;
}
