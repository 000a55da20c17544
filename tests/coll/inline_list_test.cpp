// SPDX-License-Identifier: MIT
// The room a collective takes for one call (coll/detail/inline_list.hpp): in place while
// small, on the heap beyond, the same elements in the same order either way.

#include <catch2/catch.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "commx/coll/detail/inline_list.hpp"

using commx::coll::detail::inline_list;
using commx::coll::detail::scratch;

namespace {

// Counts its live copies, as coll_port's pending counts messages to withdraw.
struct tracked {
  explicit tracked(int v, int& live) : value(v), alive(&live) { ++*alive; }
  tracked(tracked&& other) noexcept
      : value(other.value), alive(std::exchange(other.alive, nullptr)) {}
  tracked& operator=(tracked&&) = delete;
  tracked(const tracked&) = delete;
  ~tracked() {
    if (alive != nullptr) --*alive;
  }
  int value;
  int* alive;
};

bool in(std::span<const std::byte> bytes, const void* p) {
  const auto* b = static_cast<const std::byte*>(p);
  return b >= bytes.data() && b < bytes.data() + bytes.size();
}

}  // namespace

TEST_CASE("inline_list keeps order and every element through its spill to the heap", "[coll]") {
  for (int count : {0, 1, 3, 4, 5, 9, 40}) {
    CAPTURE(count);
    int live = 0;
    {
      inline_list<tracked, 4> list;
      const auto* self = reinterpret_cast<const std::byte*>(&list);
      for (int i = 0; i < count; ++i) list.push_back(tracked(i, live));
      CHECK(live == count);  // moved-from temporaries hold nothing
      const std::span<tracked> all = list.view();
      REQUIRE(all.size() == static_cast<std::size_t>(count));
      for (int i = 0; i < count; ++i) CHECK(all[static_cast<std::size_t>(i)].value == i);
      if (count > 0) {
        // In place up to 4, on the heap beyond.
        CHECK(in(std::span(self, sizeof list), all.data()) == (count <= 4));
      }
    }
    CHECK(live == 0);  // every element destroyed once, wherever it lived
  }
}

TEST_CASE("inline_list reserves on the heap at once when asked for more than fits", "[coll]") {
  int live = 0;
  {
    inline_list<tracked, 2> list;
    const std::span<const std::byte> self(reinterpret_cast<const std::byte*>(&list), sizeof list);
    list.push_back(tracked(7, live));
    list.reserve(10);
    // On the heap straight away, with room for all ten: no further move as they come.
    const tracked* first = list.view().data();
    CHECK_FALSE(in(self, first));
    CHECK(list.view().size() == 1);
    for (int i = 0; i < 9; ++i) list.push_back(tracked(i, live));
    const std::span<tracked> all = list.view();
    CHECK(all.data() == first);
    REQUIRE(all.size() == 10);
    CHECK(all[0].value == 7);
    CHECK(all[9].value == 8);
    CHECK(live == 10);
  }
  CHECK(live == 0);
}

TEST_CASE("scratch is in place while small, on the heap beyond", "[coll]") {
  // Its numbers are left as they are (a caller receives into them first): nothing to read here.
  const scratch<double, 64> small(8);
  const auto* self = reinterpret_cast<const std::byte*>(&small);
  REQUIRE(small.view().size() == 8);
  CHECK(in(std::span(self, sizeof small), small.view().data()));

  const scratch<double, 64> large(9);
  REQUIRE(large.view().size() == 9);
  CHECK_FALSE(
      in(std::span(reinterpret_cast<const std::byte*>(&large), sizeof large), large.view().data()));

  const scratch<std::string, 1024> constructed(3);  // needs construction: always the heap
  REQUIRE(constructed.view().size() == 3);
  CHECK(constructed.view()[2].empty());
  CHECK(scratch<int>(0).view().empty());
}
