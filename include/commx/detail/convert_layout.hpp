// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Received raw data made this rank's own when its sender's machine lays values out
/// differently (transport/data_layout.hpp): arithmetic elements (and enums, and std::arrays
/// of them) are byte-swapped in place where the byte order differs; a type whose size differs
/// between the two machines (`long double`, `wchar_t`), or a struct sent as raw bytes, cannot
/// be converted and is refused with errc::type_mismatch, never misread.

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include "commx/error.hpp"
#include "commx/serialize.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/data_layout.hpp"

namespace commx::detail {

template <class E>
struct layout_element {
  using type = E;
};
template <class E, std::size_t N>
struct layout_element<std::array<E, N>> : layout_element<E> {};
template <class E>
requires std::is_enum_v<E>
struct layout_element<E> {
  using type = std::underlying_type_t<E>;
};

// The arithmetic type whose values make up E (E itself, an enum's underlying type, an
// array's element), or void for a struct, whose fields cannot be told apart.
template <class E>
using layout_scalar_t =
    std::conditional_t<std::is_arithmetic_v<typename layout_element<std::remove_cv_t<E>>::type>,
                       typename layout_element<std::remove_cv_t<E>>::type, void>;

// The size a scalar type has on a machine of layout `on`. Not `long`'s: std::int64_t is `long`
// on LP64 and `long long` elsewhere, so a receiver cannot tell a `long` it must refuse from an
// int64_t that is the same on both machines; a `long` between machines whose longs differ is
// the one case left to the user (data_layout.hpp).
template <class A>
constexpr std::size_t size_on(const transport::data_layout& on) {
  using U = std::remove_cv_t<A>;
  if constexpr (std::is_same_v<U, long double>) return on.long_double_size;
  if constexpr (std::is_same_v<U, wchar_t>) return on.wchar_size;
  return sizeof(U);
}

/// Converts `data`, elements of E that a rank of layout `from` sent, to this rank's layout
/// `here` (its machine's, unless a test makes it play another: COMMX_TEST_LAYOUT).
/// @throws commx::error errc::type_mismatch where they cannot be converted.
template <class E>
void convert_received(std::span<std::byte> data, const transport::data_layout& from,
                      const transport::data_layout& here, const error_context& where) {
  if (from == here) return;
  using A = layout_scalar_t<E>;
  if constexpr (std::is_void_v<A>) {
    throw_error(errc::type_mismatch, where,
                "the sender's machine lays out values differently, and a struct sent as raw "
                "bytes cannot be converted: give it a serialize function (serialize.hpp)");
  } else {
    if (size_on<A>(from) != size_on<A>(here)) {
      throw_error(errc::type_mismatch, where,
                  fmt::format("the sender's machine has {}-byte values of this type, this one "
                              "{}-byte: send a fixed-width type (std::int64_t, double)",
                              size_on<A>(from), size_on<A>(here)));
    }
    if constexpr (sizeof(A) > 1) {
      if (from.big_endian != here.big_endian) {
        for (std::size_t at = 0; at + sizeof(A) <= data.size(); at += sizeof(A)) {
          std::reverse(data.begin() + static_cast<std::ptrdiff_t>(at),
                       data.begin() + static_cast<std::ptrdiff_t>(at + sizeof(A)));
        }
      }
    }
  }
}

/// Converts the first `bytes` of a raw `message` (a value or a contiguous range) that a rank
/// of layout `from` sent.
template <class M>
void convert_message(M& message, std::size_t bytes, const transport::data_layout& from,
                     const transport::data_layout& here, const error_context& where) {
  auto elements = elements_of(message);
  using E = std::remove_cv_t<typename decltype(elements)::element_type>;
  convert_received<E>(std::as_writable_bytes(elements).first(bytes), from, here, where);
}

/// Whether some rank of `t`'s job lays out values otherwise than this one.
template <class T>
bool layouts_differ(const T& t) {
  if constexpr (transport::knows_layouts<T>) {
    for (int p = 0; p < t.size(); ++p) {
      if (!(t.layout_of(p) == t.layout_of(t.rank()))) return true;
    }
  }
  return false;
}

}  // namespace commx::detail
