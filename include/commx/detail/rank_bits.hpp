// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// A set of a communicator's ranks as bits: agreement's lost sets (detail/agreement.hpp). An
/// agreement copies, merges and sends its sets several times a call; held in place up to 128
/// ranks they cost no allocation (one per copy cost about as much as the messages themselves at
/// 2 ranks, bench/README.md), beyond that a word per 64 ranks on the heap.
///
/// On the wire a set is (size + 7) / 8 bytes: rank i is bit i % 8 of byte i / 8.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace commx::detail {

class rank_bits {
 public:
  rank_bits() = default;
  /// The empty set of a communicator of `size` ranks.
  explicit rank_bits(int size) : size_(size) {
    if (words() > inline_words) heap_.assign(words(), 0);
  }

  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool contains(int r) const { return ((data()[word(r)] >> bit(r)) & 1U) != 0; }
  void insert(int r) { data()[word(r)] |= std::uint64_t{1} << bit(r); }
  [[nodiscard]] bool none() const {
    return std::ranges::all_of(std::span(data(), words()), [](std::uint64_t w) { return w == 0; });
  }
  /// The lowest rank not in the set; size() if every rank is.
  [[nodiscard]] int lowest_absent() const {
    for (std::size_t w = 0; w < words(); ++w) {
      if (data()[w] != ~std::uint64_t{0}) {
        return std::min(size_, static_cast<int>(64 * w) + std::countr_one(data()[w]));
      }
    }
    return size_;
  }
  /// Adds every rank of `other` (a set of the same communicator).
  void merge(const rank_bits& other) {
    for (std::size_t w = 0; w < words(); ++w) data()[w] |= other.data()[w];
  }

  /// The bytes a set of a communicator of `size` ranks takes on the wire.
  [[nodiscard]] static std::size_t wire_bytes(int size) {
    return (static_cast<std::size_t>(size) + 7) / 8;
  }
  /// The bytes this set takes on the wire.
  [[nodiscard]] std::size_t wire_bytes() const { return wire_bytes(size_); }
  /// Writes the set into `to`, wire_bytes() long.
  void write(std::span<std::byte> to) const {
    for (std::size_t b = 0; b < to.size(); ++b) {
      to[b] = static_cast<std::byte>(data()[b / 8] >> (8 * (b % 8)));
    }
  }
  /// The set of `size` ranks `from` (wire_bytes() long) holds.
  static rank_bits read(std::span<const std::byte> from, int size) {
    rank_bits set(size);
    for (std::size_t b = 0; b < from.size(); ++b) {
      set.data()[b / 8] |= std::to_integer<std::uint64_t>(from[b]) << (8 * (b % 8));
    }
    return set;
  }

 private:
  static constexpr std::size_t inline_words = 2;
  static std::size_t word(int r) { return static_cast<std::size_t>(r) / 64; }
  static unsigned bit(int r) { return static_cast<unsigned>(r) % 64; }
  [[nodiscard]] std::size_t words() const { return (static_cast<std::size_t>(size_) + 63) / 64; }
  [[nodiscard]] std::uint64_t* data() { return heap_.empty() ? in_place_.data() : heap_.data(); }
  [[nodiscard]] const std::uint64_t* data() const {
    return heap_.empty() ? in_place_.data() : heap_.data();
  }

  int size_ = 0;
  std::array<std::uint64_t, inline_words> in_place_{};
  std::vector<std::uint64_t> heap_;  // used beyond inline_words words
};

}  // namespace commx::detail
