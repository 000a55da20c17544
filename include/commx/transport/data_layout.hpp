// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::data_layout`: how a machine lays out arithmetic values, so that ranks on
/// machines of different architectures (sites of a wide-area job) convert what they receive
/// instead of misreading it. Network transports learn every rank's layout when the job starts
/// (`t.layout_of(p)`, concept.hpp); the communicator converts received arithmetic data where
/// a sender's layout differs from its own (detail/convert_layout.hpp), and serialized data
/// travels in cereal's portable binary archive, which carries its own byte order.
///
/// What differs between the platforms commx knows: byte order, and the sizes of `long` (4 on
/// ILP32 and LLP64, 8 on LP64), `long double` (8, 12 or 16) and `wchar_t` (2 or 4). `short`,
/// `int`, `long long`, `float` and `double` are 2, 4, 8, 4 and 8 bytes everywhere it runs.
/// A layout travels as one byte (`code`). A `long` cannot be checked on receipt: std::int64_t
/// is `long` on LP64 and `long long` elsewhere, so a receiver cannot tell the two apart. Between
/// machines whose `long` differs, send fixed-width types (std::int32_t, std::int64_t).

#include <bit>
#include <cstdint>
#include <optional>

namespace commx::transport {

/// How one machine lays out arithmetic values (see the file comment).
struct data_layout {
  /// Most significant byte first.
  bool big_endian = false;
  /// sizeof(long): 4 or 8.
  std::uint8_t long_size = 8;
  /// sizeof(long double): 8, 12 or 16.
  std::uint8_t long_double_size = 16;
  /// sizeof(wchar_t): 2 or 4.
  std::uint8_t wchar_size = 4;

  /// This machine's layout.
  static constexpr data_layout native() {
    return {std::endian::native == std::endian::big, sizeof(long), sizeof(long double),
            sizeof(wchar_t)};
  }

  /// The layout as one byte: bit 0 big-endian, bit 1 an 8-byte long, bits 2-3 long double's
  /// size (0: 8, 1: 12, 2: 16), bit 4 a 4-byte wchar_t; the other bits are zero.
  [[nodiscard]] constexpr std::uint8_t code() const {
    const unsigned ld = long_double_size == 8 ? 0U : long_double_size == 12 ? 1U : 2U;
    return static_cast<std::uint8_t>((big_endian ? 1U : 0U) | (long_size == 8 ? 2U : 0U) |
                                     (ld << 2) | (wchar_size == 4 ? 16U : 0U));
  }

  /// The layout a byte names; nullopt for a byte no layout has.
  static constexpr std::optional<data_layout> from_code(std::uint8_t code) {
    const unsigned ld = (code >> 2) & 3U;
    if ((code & 0xe0U) != 0 || ld == 3) return std::nullopt;
    return data_layout{(code & 1U) != 0, static_cast<std::uint8_t>((code & 2U) != 0 ? 8 : 4),
                       static_cast<std::uint8_t>(ld == 0   ? 8
                                                 : ld == 1 ? 12
                                                           : 16),
                       static_cast<std::uint8_t>((code & 16U) != 0 ? 4 : 2)};
  }

  /// Equal when every field is.
  friend constexpr bool operator==(const data_layout&, const data_layout&) = default;
};

static_assert(data_layout::from_code(data_layout::native().code()) == data_layout::native(),
              "commx: this platform's layout does not survive its own code (data_layout.hpp)");

}  // namespace commx::transport
