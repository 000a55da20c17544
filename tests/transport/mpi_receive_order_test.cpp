// SPDX-License-Identifier: MIT
// transport::mpi's posting order (detail/mpi/receive_order.hpp): the receives left after
// removals from the front, the middle and the back, in order, whatever the front has become.

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "commx/transport/detail/mpi/receive_order.hpp"

namespace {

using commx::detail::mpi::receive_order;

std::vector<std::uint32_t> contents(const receive_order& order) {
  std::vector<std::uint32_t> out(order.begin(), order.end());
  for (std::size_t i = 0; i < order.size(); ++i) REQUIRE(order[i] == out[i]);  // both views agree
  return out;
}

receive_order from(std::uint32_t first, std::uint32_t last) {
  receive_order order;
  for (std::uint32_t s = first; s <= last; ++s) order.push_back(s);
  return order;
}

}  // namespace

TEST_CASE("receive_order keeps posting order through removals at every position") {
  receive_order order = from(0, 5);
  order.erase_at(0);                 // the front
  order.erase_at(2);                 // the middle: slot 3
  order.erase_at(order.size() - 1);  // the back
  CHECK(contents(order) == std::vector<std::uint32_t>{1, 2, 4});
  CHECK(order.back() == 4);
  order.remove(2);
  order.remove(99);  // not there: nothing changes
  CHECK(contents(order) == std::vector<std::uint32_t>{1, 4});
  order.remove(1);  // remove finds the front too
  CHECK(contents(order) == std::vector<std::uint32_t>{4});
  order.erase_at(0);
  CHECK(order.empty());
  CHECK(order.size() == 0);
  CHECK(order.begin() == order.end());
}

TEST_CASE("receive_order drops a taken front on posting without losing or reordering") {
  receive_order order = from(0, 9);
  for (int i = 0; i < 6; ++i) order.erase_at(0);  // more than half taken from the front
  order.push_back(10);                            // compacts here
  order.push_back(11);
  CHECK(contents(order) == std::vector<std::uint32_t>{6, 7, 8, 9, 10, 11});
  order.erase_at(1);
  order.erase_at(0);
  CHECK(contents(order) == std::vector<std::uint32_t>{8, 9, 10, 11});
  CHECK(order.back() == 11);
}

TEST_CASE("receive_order in a window's pattern: post many, take each from the front") {
  receive_order order;
  std::uint32_t next = 0;
  std::uint32_t expected_front = 0;
  for (int window = 0; window < 50; ++window) {
    for (int i = 0; i < 64; ++i) order.push_back(next++);
    for (int i = 0; i < 60; ++i) {  // four stay behind each time: the front never empties
      REQUIRE(order[0] == expected_front++);
      order.erase_at(0);
    }
    REQUIRE(order.size() == static_cast<std::size_t>(4 * (window + 1)));
  }
  std::vector<std::uint32_t> left = contents(order);
  for (std::size_t i = 0; i < left.size(); ++i) CHECK(left[i] == expected_front + i);
}
