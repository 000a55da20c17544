// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// How ranks learn each other's UCX worker addresses (transport/ucx.hpp): through commx's own
/// bootstrap, a tcp endpoint (COMMX_ROOT's rendezvous and its HMAC-checked connections, or
/// PMIx), so nothing of UCX's out-of-band is needed and the job starts under commxrun, srun and
/// mpirun alike. The addresses gather up the start-up tree (detail/start_tree.hpp: each rank
/// sends its parent those of its subtree) and the whole table goes back down it, so every
/// rank, rank 0 too, talks to about log2 N peers. The table is N addresses (a few hundred
/// bytes each over TCP and shared memory) on every rank; endpoints are made from it on first
/// use. Each child tells its parent it has the table, so every rank's bootstrap traffic is
/// delivered when the exchange returns.

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "commx/transport/detail/start_tree.hpp"
#include "commx/transport/tcp.hpp"

namespace commx::detail::ucx {

using address_table = std::vector<std::vector<std::byte>>;

namespace wireup {

inline constexpr context_id bootstrap_context = 0;
inline constexpr int address_tag = 1;
inline constexpr int table_tag = 2;
inline constexpr int received_tag = 3;

inline std::byte* grow_bytes(void* container, std::size_t bytes, std::error_code& /*ec*/) {
  auto* v = static_cast<std::vector<std::byte>*>(container);
  v->resize(bytes);
  return v->data();
}

inline void wait(transport::tcp& t, transport::tcp::request& r, clock::time_point until, int peer,
                 const char* what) {
  for (;;) {
    const std::uint64_t seen = t.event_count();
    if (t.test(r)) break;
    if (clock::now() >= until) {
      t.cancel(r);
      throw error(errc::bootstrap_failed,
                  fmt::format("ucx: {} rank {} timed out (COMMX_TIMEOUT)", what, peer));
    }
    t.wait_for_event(seen, until);
  }
  if (const std::error_code ec = t.result(r).error) {
    throw error(errc::bootstrap_failed,
                fmt::format("ucx: {} rank {}: {}", what, peer, ec.message()));
  }
}

inline void send(transport::tcp& t, int to, int tag, std::span<const std::byte> data,
                 clock::time_point until) {
  transport::tcp::request r = t.isend(to, bootstrap_context, tag, data);
  wait(t, r, until, to, "sending the UCX address table to");
}

inline std::vector<std::byte> receive(transport::tcp& t, int from, int tag,
                                      clock::time_point until) {
  std::vector<std::byte> got;
  transport::tcp::request r =
      t.irecv(from, bootstrap_context, tag, transport::recv_buffer(&got, &grow_bytes));
  wait(t, r, until, from, "receiving UCX addresses from");
  return got;
}

// The table as bytes: N lengths (4 bytes each), then the addresses one after the other.
inline std::vector<std::byte> encode(const address_table& table) {
  std::size_t total = 4 * table.size();
  for (const auto& a : table) total += a.size();
  std::vector<std::byte> out(total);
  std::byte* at = out.data();
  for (const auto& a : table) {
    const auto length = static_cast<std::uint32_t>(a.size());
    std::memcpy(at, &length, 4);
    at += 4;
  }
  for (const auto& a : table) {
    if (!a.empty()) std::memcpy(at, a.data(), a.size());
    at += a.size();
  }
  return out;
}

inline address_table decode(std::span<const std::byte> in, int size) {
  address_table table(static_cast<std::size_t>(size));
  std::size_t at = 4 * table.size();
  if (in.size() < at) throw error(errc::protocol_violation, "ucx: a short address table");
  for (std::size_t r = 0; r < table.size(); ++r) {
    std::uint32_t length = 0;
    std::memcpy(&length, in.data() + 4 * r, 4);
    if (in.size() - at < length)
      throw error(errc::protocol_violation, "ucx: a short address table");
    table[r].assign(in.begin() + static_cast<std::ptrdiff_t>(at),
                    in.begin() + static_cast<std::ptrdiff_t>(at + length));
    at += length;
  }
  return table;
}

}  // namespace wireup

/// Every rank's worker address, `mine` at this rank's index (see the file comment).
/// @throws commx::error errc::bootstrap_failed when a peer does not answer within `timeout`.
inline address_table exchange_addresses(transport::tcp& t, std::span<const std::byte> mine,
                                        clock::duration timeout) {
  const int rank = t.rank();
  const int size = t.size();
  const clock::time_point until = clock::now() + timeout;
  const start_tree tree = start_tree_of(rank, size);
  // This rank's subtree's addresses, [rank, tree.end): each child's subtree in one message.
  address_table subtree(static_cast<std::size_t>(tree.end - rank));
  subtree[0].assign(mine.begin(), mine.end());
  for (const int child : tree.children) {
    const int child_end = std::min(size, child + (child - rank));  // child = rank + its span
    address_table below =
        wireup::decode(wireup::receive(t, child, wireup::address_tag, until), child_end - child);
    std::ranges::move(below, subtree.begin() + (child - rank));
  }
  std::vector<std::byte> table_bytes;
  if (tree.parent >= 0) {
    wireup::send(t, tree.parent, wireup::address_tag, wireup::encode(subtree), until);
    table_bytes = wireup::receive(t, tree.parent, wireup::table_tag, until);
  } else {
    table_bytes = wireup::encode(subtree);
  }
  for (const int child : tree.children) {
    wireup::send(t, child, wireup::table_tag, table_bytes, until);
  }
  // Each child says it has the table: what this rank sent is then delivered, and nothing is
  // left for a bootstrap endpoint that nobody progresses once the job runs on UCX.
  for (const int child : tree.children) {
    (void)wireup::receive(t, child, wireup::received_tag, until);
  }
  if (tree.parent >= 0) wireup::send(t, tree.parent, wireup::received_tag, {}, until);
  return wireup::decode(table_bytes, size);
}

/// A rank's process, as ranks of its node watch it (pid and start time).
struct process_identity {
  pid_t pid = 0;
  std::uint64_t started = 0;
};

/// What every rank told the others at start, by rank: its process and its worker's address.
struct start_entries {
  std::vector<process_identity> processes;
  address_table addresses;
};

/// Every rank's process and worker address, this rank's `me` and `address` among them: each
/// entry travels as the identity (16 bytes: the pid in 4 of 8, the start time) before the
/// address, through exchange_addresses.
/// @throws commx::error errc::bootstrap_failed as exchange_addresses does;
///   errc::protocol_violation when a rank sent no address.
inline start_entries exchange_start_entries(transport::tcp& t, process_identity me,
                                            std::span<const std::byte> address,
                                            clock::duration timeout) {
  constexpr std::size_t identity_bytes = 16;
  std::vector<std::byte> mine(identity_bytes);
  std::memcpy(mine.data(), &me.pid, sizeof me.pid);
  std::memcpy(mine.data() + 8, &me.started, sizeof me.started);
  mine.insert(mine.end(), address.begin(), address.end());
  start_entries got{std::vector<process_identity>(static_cast<std::size_t>(t.size())),
                    exchange_addresses(t, mine, timeout)};
  for (std::size_t r = 0; r < got.addresses.size(); ++r) {
    std::vector<std::byte>& entry = got.addresses[r];
    if (entry.size() <= identity_bytes) {
      throw error(errc::protocol_violation, fmt::format("ucx: rank {} sent no address", r));
    }
    std::memcpy(&got.processes[r].pid, entry.data(), sizeof(pid_t));
    std::memcpy(&got.processes[r].started, entry.data() + 8, sizeof(std::uint64_t));
    entry.erase(entry.begin(), entry.begin() + identity_bytes);
  }
  return got;
}

}  // namespace commx::detail::ucx
