// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Ring neighbours, dissemination distances and pairwise-exchange partners.

namespace commx::coll::detail::pattern {

constexpr int ring_right(int rank, int size) { return (rank + 1) % size; }
constexpr int ring_left(int rank, int size) { return (rank + size - 1) % size; }

/// Dissemination barrier, round k: signal rank + 2^k, hear from rank - 2^k (mod p).
constexpr int dissemination_to(int rank, int round, int size) {
  return (rank + (1 << round)) % size;
}
constexpr int dissemination_from(int rank, int round, int size) {
  return ((rank - (1 << round)) % size + size) % size;
}
/// Rounds of a dissemination barrier: ceil(log2 p).
constexpr int dissemination_rounds(int size) {
  int rounds = 0;
  while ((1 << rounds) < size) ++rounds;
  return rounds;
}

/// Pairwise exchange, step s in [1, p): send to rank + s, receive from rank - s (mod p).
constexpr int exchange_to(int rank, int step, int size) { return (rank + step) % size; }
constexpr int exchange_from(int rank, int step, int size) { return (rank - step + size) % size; }

/// Ring segment i of n elements split into `size` near-equal parts: [begin, end).
constexpr long segment_begin(long n, int size, int i) {
  const long base = n / size;
  const long rest = n % size;
  return i * base + (i < rest ? i : rest);
}
constexpr long segment_end(long n, int size, int i) { return segment_begin(n, size, i + 1); }

}  // namespace commx::coll::detail::pattern
