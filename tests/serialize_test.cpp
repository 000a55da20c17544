// SPDX-License-Identifier: MIT
// Which path a type takes (a compile-time trait) and that each path delivers the value.

#include <catch2/catch.hpp>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "commx/launch.hpp"
#include "commx/detail/convert_layout.hpp"
#include "commx/serialize.hpp"
#include "support/check.hpp"

namespace {

struct particle {  // trivially copyable: goes as its bytes
  double x, y, z;
  int id;
  bool operator==(const particle&) const = default;
};

struct tagged_particles {  // not trivially copyable: goes through cereal
  std::string label;
  std::vector<particle> members;
  std::map<int, std::string> notes;
  template <class Archive>
  void serialize(Archive& archive) {
    archive(label, members, notes);
  }
  bool operator==(const tagged_particles&) const = default;
};

template <class Archive>
void serialize(Archive& archive, particle& p) {
  archive(p.x, p.y, p.z, p.id);
}

struct pointer_holder {  // trivially copyable, but its bytes mean nothing elsewhere
  const char* text;
  template <class Archive>
  void save(Archive& archive) const {
    archive(std::string(text));
  }
  template <class Archive>
  void load(Archive&) {}
};

}  // namespace

template <>
inline constexpr bool commx::enable_raw_transfer<pointer_holder> = false;

using commx::recv_mode;
using commx::recv_mode_of;
using commx::transfer_mode;
using commx::transfer_mode_of;

// The path is a compile-time property; these would fail to compile if it changed.
static_assert(transfer_mode_of<int> == transfer_mode::raw);
static_assert(transfer_mode_of<particle> == transfer_mode::raw);
static_assert(transfer_mode_of<std::array<double, 3>> == transfer_mode::raw);
static_assert(transfer_mode_of<std::vector<double>> == transfer_mode::raw);
static_assert(transfer_mode_of<std::span<const particle>> == transfer_mode::raw);
static_assert(transfer_mode_of<std::string> == transfer_mode::raw);
static_assert(transfer_mode_of<std::vector<std::string>> == transfer_mode::serialized);
static_assert(transfer_mode_of<tagged_particles> == transfer_mode::serialized);
static_assert(transfer_mode_of<pointer_holder> == transfer_mode::serialized);
static_assert(!commx::transferable<int*>);
static_assert(!commx::transferable<std::vector<int*>>);
static_assert(recv_mode_of<std::vector<double>> == recv_mode::resize);
static_assert(recv_mode_of<std::span<double>> == recv_mode::fixed);
static_assert(recv_mode_of<double> == recv_mode::fixed);
static_assert(recv_mode_of<std::array<int, 4>> == recv_mode::fixed);
static_assert(recv_mode_of<std::vector<std::string>> == recv_mode::serialized);

using comm =
    commx::communicator<commx::transport::inproc, commx::coll::flat, commx::stats::counting>;

TEST_CASE("raw values travel as exactly their bytes", "[serialize]") {
  particle p{1, 2, 3, 4};
  const auto bytes = commx::detail::bytes_of(p);
  CHECK(bytes.size() == sizeof(particle));
  CHECK(bytes.data() == reinterpret_cast<const std::byte*>(&p));  // no copy
  std::vector<double> v(5);
  CHECK(commx::detail::bytes_of(v).data() == reinterpret_cast<const std::byte*>(v.data()));
}

TEST_CASE("non-trivial types round-trip through cereal between ranks", "[serialize]") {
  REQUIRE_NOTHROW(commx::run_inproc<comm>(2, [](comm& world) {
    const tagged_particles sent{"cluster", {{1, 2, 3, 7}, {4, 5, 6, 8}}, {{1, "one"}, {2, "two"}}};
    const std::vector<std::string> words{"alpha", "", "gamma with spaces"};
    if (world.rank() == 0) {
      world.send(1, 0, sent);
      auto req = world.isend(1, 1, words);  // encoded at once: `words` could change now
      req.wait();
      // The counted bytes are the encoded size, not sizeof.
      COMMX_CHECK(world.stats().of(commx::stats::op::send).bytes_sent >
                  sizeof(tagged_particles) / 2);
      return;
    }
    tagged_particles got;
    world.recv(0, 0, got);
    COMMX_CHECK(got == sent);
    std::vector<std::string> got_words{"stale"};
    auto req = world.irecv(0, 1, got_words);
    const auto st = req.wait();
    COMMX_CHECK(got_words == words);
    COMMX_CHECK(st.bytes > 0);
  }));
}

TEST_CASE("a message that is not of the receiver's type raises serialization_failed",
          "[serialize]") {
  REQUIRE_NOTHROW(commx::run_inproc<comm>(2, [](comm& world) {
    if (world.rank() == 0) {
      world.send(1, 0, std::vector<std::string>{"a", "b"});
      world.send(1, 1, std::vector<char>{1, 2, 3});
      world.send(1, 2, std::vector<char>(64, 'z'));
      return;
    }
    tagged_particles wrong;
    COMMX_EXPECT_ERROR(commx::errc::serialization_failed, world.recv(0, 0, wrong));
    std::vector<std::string> garbage;
    COMMX_EXPECT_ERROR(commx::errc::serialization_failed, world.recv(0, 1, garbage));
    const auto e = COMMX_EXPECT_ERROR(commx::errc::serialization_failed, world.recv(0, 2, garbage));
    COMMX_CHECK(std::string_view(e.what()).find("another type") != std::string_view::npos);
  }));
}

TEST_CASE("data layouts: every layout's code reads back; received data converts or is refused") {
  using commx::transport::data_layout;
  for (bool big : {false, true}) {
    for (std::uint8_t l : {4, 8}) {
      for (std::uint8_t ld : {8, 12, 16}) {
        for (std::uint8_t w : {2, 4}) {
          const data_layout layout{big, l, ld, w};
          CHECK(data_layout::from_code(layout.code()) == layout);
        }
      }
    }
  }
  CHECK_FALSE(data_layout::from_code(0x40));
  const data_layout here = data_layout::native();
  data_layout other_order = here;
  other_order.big_endian = !here.big_endian;
  const commx::error_context where{0, 1, 0, 0, "recv"};

  std::vector<std::uint32_t> ints{0x01020304U, 0xa0b0c0d0U};
  commx::detail::convert_message(ints, 8, here, here, where);  // same layout: untouched
  CHECK(ints == std::vector<std::uint32_t>{0x01020304U, 0xa0b0c0d0U});
  commx::detail::convert_message(ints, 4, other_order, here, where);  // only what arrived
  CHECK(ints == std::vector<std::uint32_t>{0x04030201U, 0xa0b0c0d0U});
  std::array<std::int16_t, 2> pair{0x0102, 0x0304};
  commx::detail::convert_message(pair, 4, other_order, here, where);
  CHECK(pair == std::array<std::int16_t, 2>{0x0201, 0x0403});
  std::string text = "bytes stay";
  commx::detail::convert_message(text, text.size(), other_order, here, where);
  CHECK(text == "bytes stay");

  data_layout narrow_wchar = here;
  narrow_wchar.wchar_size = here.wchar_size == 4 ? 2 : 4;
  std::wstring wide = L"ab";
  CHECK_THROWS_WITH(commx::detail::convert_message(wide, wide.size() * sizeof(wchar_t),
                                                   narrow_wchar, here, where),
                    Catch::Contains("fixed-width type"));
  std::int32_t fixed = 5;  // a fixed-width type is the same on both
  commx::detail::convert_message(fixed, 4, narrow_wchar, here, where);
  CHECK(fixed == 5);
  struct pod {
    int a;
    float b;
  } raw{1, 2.0F};
  CHECK_THROWS_WITH(commx::detail::convert_message(raw, sizeof(pod), other_order, here, where),
                    Catch::Contains("serialize function"));
}
