// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How transport::mpi keeps "a too-small buffer loses nothing" while its receives are posted
/// to MPI before their message arrives, at MPI_Recv's cost.
///
/// A receive posted to MPI that is shorter than its message loses the message (MPI truncates
/// and consumes it), and the sender cannot know the receiver's buffer. So no message travels
/// longer than every posted receive: a message of up to `inline_limit` bytes travels as it is,
/// one MPI message on the context's communicator; a longer one is first *announced* there by a
/// message of exactly `announcement_bytes` (its size and a sequence number), and its bytes
/// follow straight from the sender's buffer on the context's bulk communicator, tagged with
/// that sequence number. A receive posts at least `announcement_bytes` (a buffer smaller than
/// that receives into the endpoint's scratch and copies), so nothing is ever truncated by MPI,
/// and the count alone says which kind arrived. A receive then learns the size before it takes
/// the bytes: too large for its buffer, the message (its copy, or its announcement, whose bytes
/// stay in MPI's queue) is kept for the next receive that matches.
///
/// The price: a message longer than `inline_limit` costs one more small MPI message (not a
/// round trip: the bytes follow at once); a message up to `inline_limit` into a buffer smaller
/// than `announcement_bytes` costs a copy of its own length. Sequence numbers wrap at the MPI
/// tag bound (at least 32767): that many announced messages from one rank may be in flight to
/// another at once.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace commx::detail::mpi {

/// The longest message that travels as it is.
inline constexpr std::size_t inline_limit = 1024;
/// An announcement's length: longer than any inline message, so its count alone tells it.
inline constexpr std::size_t announcement_bytes = inline_limit + 1;

/// What an announcement says of the message that follows it.
struct announcement {
  std::uint64_t bytes = 0;
  std::uint32_t sequence = 0;
};

/// The wire form: a magic word, the sequence number and the size, little or big endian as the
/// host (MPI_BYTE between ranks of one job, as every commx message on MPI); the rest is zero.
using announcement_frame = std::array<std::byte, announcement_bytes>;

inline constexpr std::uint32_t announcement_magic = 0x41584D43;  // "CMXA"

inline void write(const announcement& a, std::span<std::byte, announcement_bytes> frame) {
  std::memset(frame.data(), 0, frame.size());
  std::memcpy(frame.data(), &announcement_magic, sizeof announcement_magic);
  std::memcpy(frame.data() + 4, &a.sequence, sizeof a.sequence);
  std::memcpy(frame.data() + 8, &a.bytes, sizeof a.bytes);
}

/// The announcement in `frame`, or nullopt when it is none (not commx's, or damaged).
inline std::optional<announcement> read(std::span<const std::byte> frame) {
  if (frame.size() != announcement_bytes) return std::nullopt;
  std::uint32_t magic = 0;
  std::memcpy(&magic, frame.data(), sizeof magic);
  if (magic != announcement_magic) return std::nullopt;
  announcement a;
  std::memcpy(&a.sequence, frame.data() + 4, sizeof a.sequence);
  std::memcpy(&a.bytes, frame.data() + 8, sizeof a.bytes);
  if (a.bytes <= inline_limit) return std::nullopt;  // it would have travelled inline
  return a;
}

}  // namespace commx::detail::mpi
