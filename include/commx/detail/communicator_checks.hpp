// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// communicator's argument checks (communicator.hpp), out of line: every call checks its ranks,
/// tags and buffer sizes here before it touches the transport, and raises
/// errc::invalid_argument with the call's context for what does not fit. The tests are a few
/// compares inlined into each call; composing the message is left to cold functions, so a call
/// does not pay a function call, and its register saves, for arguments that are fine.

#include <cstddef>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "commx/communicator.hpp"

namespace commx {

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::check_valid(const char* operation) const {
  if (state_ == nullptr) [[unlikely]]
    reject_peer(unknown, unknown, peer_role::rank, operation);  // says: a null communicator
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::check_rank(int peer, const char* operation) const {
  if (state_ == nullptr || peer < 0 || peer >= size()) [[unlikely]]
    reject_peer(peer, unknown, peer_role::rank, operation);
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::check_root(int root, const char* operation) const {
  if (state_ == nullptr || root < 0 || root >= size()) [[unlikely]]
    reject_peer(root, unknown, peer_role::root, operation);
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::check_dest(int dest, int tag, const char* operation) const {
  if (state_ == nullptr || dest < 0 || dest >= size() || tag < 0 || tag > max_tag ||
      group_->revoked()) [[unlikely]]
    reject_peer(dest, tag, peer_role::dest, operation);
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::check_source(int source, int tag, const char* operation) const {
  if (state_ == nullptr || (source != any_source && (source < 0 || source >= size())) ||
      (tag != any_tag && (tag < 0 || tag > max_tag)) || group_->revoked()) [[unlikely]]
    reject_peer(source, tag, peer_role::source, operation);
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::check_count(std::size_t given, std::size_t needed,
                                               const char* operation, const char* what) const {
  if (given != needed) [[unlikely]]
    reject_count(given, needed, operation, what);
}

// Says what a check refused, and why: the communicator, then the peer (a destination's or
// source's rank, a root), then the tag of a destination or source.
template <transport::transport T, coll::collectives<T> C, stats::policy S>
void communicator<T, C, S>::reject_peer(int peer, int tag, peer_role role,
                                        const char* operation) const {
  if (state_ == nullptr) {
    throw error(errc::invalid_argument, fmt::format("{} on a null communicator", operation));
  }
  if (group_->revoked()) {
    throw_error(errc::revoked, where(operation, peer, tag, 0),
                "the communicator was revoked (communicator::revoke); agree and shrink still work");
  }
  const bool wildcard = role == peer_role::source && peer == any_source;
  if (!wildcard && (peer < 0 || peer >= size())) {
    throw_error(errc::invalid_argument, where(operation, peer, unknown, 0),
                fmt::format("{} {} is not in [0, {})", role == peer_role::root ? "root" : "rank",
                            peer, size()));
  }
  if (role == peer_role::source) {
    throw_error(errc::invalid_argument, where(operation, peer, tag, 0),
                fmt::format("tag {} is neither any_tag nor in [0, {}]", tag, max_tag));
  }
  throw_error(errc::invalid_argument, where(operation, peer, tag, 0),
              fmt::format("tag {} is not in [0, {}]", tag, max_tag));
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
void communicator<T, C, S>::reject_count(std::size_t given, std::size_t needed,
                                         const char* operation, const char* what) const {
  throw_error(
      errc::invalid_argument, where(operation, unknown, unknown, given),
      fmt::format("'{}' holds {} elements; {} ranks need exactly {}", what, given, size(), needed));
}

// Blocks given by counts and displacements (one each per rank) must lie inside the buffer.
template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline void communicator<T, C, S>::check_layout(std::span<const std::size_t> counts,
                                                std::span<const std::size_t> displs,
                                                std::size_t buffer, const char* operation,
                                                const char* what) const {
  if (counts.size() != as_size(size()) || displs.size() != as_size(size())) {
    throw_error(errc::invalid_argument, where(operation, unknown, unknown, buffer),
                fmt::format("{} counts and {} displacements given for {} ranks", counts.size(),
                            displs.size(), size()));
  }
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (displs[r] > buffer || counts[r] > buffer - displs[r]) {
      throw_error(errc::invalid_argument, where(operation, static_cast<int>(r), unknown, buffer),
                  fmt::format("block {} ([{}, +{})) does not fit '{}' of {} elements", r, displs[r],
                              counts[r], what, buffer));
    }
  }
}

template <transport::transport T, coll::collectives<T> C, stats::policy S>
inline std::size_t communicator<T, C, S>::total(std::span<const std::size_t> counts) {
  std::size_t sum = 0;
  for (std::size_t c : counts) sum += c;
  return sum;
}

}  // namespace commx
