// SPDX-License-Identifier: MIT
// detail::rank_bits, agreement's lost sets: the same answers in place (up to 128 ranks) and on
// the heap beyond, and the wire format agreements have always used (rank i is bit i % 8 of
// byte i / 8), so that ranks of either kind read each other's sets.

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <vector>

#include "commx/detail/rank_bits.hpp"

using commx::detail::rank_bits;

TEST_CASE("rank_bits holds, merges and sends sets of any size", "[rank_bits]") {
  for (const int size : {1, 5, 63, 64, 65, 128, 129, 300, 1000}) {
    CAPTURE(size);
    rank_bits set(size);
    CHECK(set.none());
    CHECK(set.lowest_absent() == 0);
    // Every third rank, and the last.
    std::vector<bool> expected(static_cast<std::size_t>(size), false);
    for (int r = 0; r < size; r += 3) {
      set.insert(r);
      expected[static_cast<std::size_t>(r)] = true;
    }
    set.insert(size - 1);
    expected.back() = true;
    CHECK_FALSE(set.none());
    for (int r = 0; r < size; ++r) CHECK(set.contains(r) == expected[static_cast<std::size_t>(r)]);
    CHECK(set.lowest_absent() == 1);  // rank 1 is not a multiple of 3 (size 1: none absent)

    std::vector<std::byte> wire(set.wire_bytes());
    REQUIRE(wire.size() == (static_cast<std::size_t>(size) + 7) / 8);
    set.write(wire);
    for (int r = 0; r < size; ++r) {
      const bool bit = (std::to_integer<unsigned>(wire[static_cast<std::size_t>(r) / 8]) >>
                            (static_cast<unsigned>(r) % 8) &
                        1U) != 0;
      CHECK(bit == expected[static_cast<std::size_t>(r)]);
    }
    const rank_bits back = rank_bits::read(wire, size);
    for (int r = 0; r < size; ++r) CHECK(back.contains(r) == set.contains(r));

    // The complement merged in: every rank, so none is absent.
    rank_bits rest(size);
    for (int r = 0; r < size; ++r) {
      if (!expected[static_cast<std::size_t>(r)]) rest.insert(r);
    }
    rank_bits copy = set;  // a copy is independent of its original
    copy.merge(rest);
    CHECK(copy.lowest_absent() == size);
    CHECK(set.lowest_absent() == 1);  // rank 1 is not a multiple of 3 (size 1: none absent)
  }
}

TEST_CASE("rank_bits finds the lowest absent rank past full words", "[rank_bits]") {
  rank_bits set(200);
  for (int r = 0; r < 150; ++r) set.insert(r);
  CHECK(set.lowest_absent() == 150);
  set.insert(151);
  CHECK(set.lowest_absent() == 150);
  set.insert(150);
  CHECK(set.lowest_absent() == 152);
}
