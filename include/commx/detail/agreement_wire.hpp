// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// An agreement's messages as bytes (agreement.hpp). A whole message, what the coordinator's
/// steps and a fallback carry, is 16 + p/8 bytes:
///
/// | bytes | what |
/// |---|---|
/// | 0 | its kind (recovery.hpp's agreement_kind) |
/// | 1 | 1 if it carries an accepted proposal (then the ballot counts), else 0 |
/// | 2, 3 | 0 |
/// | 4 to 7 | the ballot, little-endian |
/// | 8 to 15 | the value, little-endian, sign-extended |
/// | 16 on | the lost set, (p + 7) / 8 bytes (rank_bits.hpp) |
///
/// The dissemination's messages are told apart by their size instead: a report is the value
/// alone, sizeof(V) bytes (its lost set is empty, or the rank would have fallen back), a
/// confirmation is empty, and a fallback is whole, longer than any value. A report of up to 8
/// bytes takes one cell of shm's ring (transport/detail/shm/ring.hpp), one cache line to cross
/// as a small allreduce's does, where a whole one of 17 bytes and more takes two.

#include <cstddef>
#include <cstdint>
#include <span>

#include "commx/detail/rank_bits.hpp"
#include "commx/detail/recovery.hpp"

namespace commx::detail {

/// What a rank proposes or accepted in an agreement, and what it decides.
template <class V>
struct agreement_proposal {
  int ballot = -1;  ///< -1: none accepted; 0: the dissemination's outcome; c + 1: coordinator c's
  V value{};
  rank_bits lost;
};

/// Writes and reads agreement messages of values of type V (see the file comment).
template <class V>
struct agreement_wire {
  static_assert(sizeof(V) <= 8, "agree: values of up to 64 bits");

  /// The size of a whole message among `ranks`.
  static std::size_t whole_bytes(int ranks) { return 16 + rank_bits::wire_bytes(ranks); }

  /// A whole message's kind; none for an empty one.
  static agreement_kind kind_of(std::span<const std::byte> m) {
    return m.empty() ? agreement_kind{} : static_cast<agreement_kind>(m[0]);
  }
  /// A dissemination message's kind, by its size.
  static agreement_kind disseminated_kind(std::span<const std::byte> m) {
    if (m.empty()) return agreement_kind::confirmation;
    if (m.size() == sizeof(V)) return agreement_kind::report;
    return kind_of(m);
  }

  /// Writes a whole message into `m`, whole_bytes() long.
  static void write_whole(std::span<std::byte> m, agreement_kind kind,
                          const agreement_proposal<V>& p) {
    m[0] = static_cast<std::byte>(kind);
    m[1] = std::byte{p.ballot >= 0};
    m[2] = m[3] = std::byte{0};
    put(m.subspan(4, 4), static_cast<std::uint32_t>(p.ballot));
    put(m.subspan(8, 8), static_cast<std::uint64_t>(p.value));
    p.lost.write(m.subspan(16));
  }
  /// Reads a whole message among `ranks` (its size checked by the caller).
  static agreement_proposal<V> read_whole(std::span<const std::byte> m, int ranks) {
    agreement_proposal<V> p;
    p.ballot = m[1] == std::byte{0} ? -1 : static_cast<int>(get(m.subspan(4, 4)));
    p.value = static_cast<V>(get(m.subspan(8, 8)));
    p.lost = rank_bits::read(m.subspan(16), ranks);
    return p;
  }

  /// A report: the value alone, sizeof(V) bytes.
  static void write_value(std::span<std::byte> m, V value) {
    put(m, static_cast<std::uint64_t>(value));
  }
  static V read_value(std::span<const std::byte> m) { return static_cast<V>(get(m)); }

 private:
  static void put(std::span<std::byte> at, std::uint64_t v) {
    for (std::size_t i = 0; i < at.size(); ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
  }
  static std::uint64_t get(std::span<const std::byte> at) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < at.size(); ++i) {
      v |= std::to_integer<std::uint64_t>(at[i]) << (8 * i);
    }
    return v;
  }
};

}  // namespace commx::detail
