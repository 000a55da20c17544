// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// transport::mpi's announced messages (announcement.hpp) as the endpoint state handles them:
/// sending an announcement ahead of a large message's bytes, and receiving one and taking the
/// message it stands for. Out of line from endpoint_state.hpp, which includes it.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "commx/transport/detail/mpi/endpoint_state.hpp"

namespace commx::detail::mpi {

inline void endpoint_state::receive_announcement(message_in_hand& m) {
  const error_context here{rank, m.source, m.tag, m.bytes, "recv"};
  std::vector<std::byte> frame(m.bytes);
  const detail::mpi::byte_layout layout(m.bytes);
  detail::mpi::check(
      MPI_Mrecv(frame.data(), layout.count(), layout.type(), &m.message, MPI_STATUS_IGNORE),
      "MPI_Mrecv", here);
  announced(m, frame);
}

inline void endpoint_state::announced(message_in_hand& m, std::span<const std::byte> frame) const {
  const std::optional<detail::mpi::announcement> a = detail::mpi::read(frame);
  if (!a) {
    throw_error(errc::protocol_violation, {rank, m.source, m.tag, frame.size(), "recv"},
                fmt::format("a message of {} bytes, longer than {} and no announcement, on "
                            "a communicator only commx sends on",
                            frame.size(), detail::mpi::inline_limit));
  }
  m.how = carrier::announced;
  m.bytes = a->bytes;
  m.bulk_tag = bulk_tag(a->sequence);
  m.message = MPI_MESSAGE_NULL;
}

inline int endpoint_state::announce(MPI_Comm comm, int dest, int mpi_tag, std::size_t bytes,
                                    const error_context& here) {
  retry_orphans();  // announcements complete as soon as they are sent: keep the list short
  const std::uint32_t sequence = next_sequence++;
  auto frame = kept_copies.emplace(kept_copies.end(), detail::mpi::announcement_bytes);
  detail::mpi::write({bytes, sequence}, std::span<std::byte, detail::mpi::announcement_bytes>(
                                            frame->data(), frame->size()));
  MPI_Request sent = MPI_REQUEST_NULL;
  const int code = MPI_Isend(frame->data(), static_cast<int>(frame->size()), MPI_BYTE, dest,
                             mpi_tag, comm, &sent);
  if (code != MPI_SUCCESS) [[unlikely]] {
    kept_copies.erase(frame);
    detail::mpi::fail(code, "MPI_Isend", here);
  }
  orphans.push_back({sent, frame});
  return bulk_tag(sequence);
}

}  // namespace commx::detail::mpi
