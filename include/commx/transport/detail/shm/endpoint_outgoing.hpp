// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The shared-memory endpoint's outgoing side (endpoint.hpp): writing queued messages, answers
/// and pieces into the rings, withdrawing offers, and choosing the large-message path at
/// start-up. Out of line as the tcp engine's parts are, included by endpoint.hpp.

#include "commx/transport/detail/shm/endpoint.hpp"

namespace commx::detail::shm {

// Withdraws an offer nobody claimed yet; false if a receive claimed it first.
inline bool endpoint::withdraw(operation& op) {
  const auto to = static_cast<std::size_t>(op.peer);
  auto& word = segment_.tickets(rank_, op.peer)[op.ticket];
  std::uint32_t expected = ticket::word(op.generation, ticket::offered);
  if (!word.compare_exchange_strong(expected, ticket::free, std::memory_order_acq_rel)) {
    return false;
  }
  in_flight_[to][static_cast<std::size_t>(op.ticket)].reset();
  complete(op, {op.peer, op.tag, 0, make_error_code(errc::cancelled)});
  return true;
}

// Drops every reference to an abandoned operation.
inline void endpoint::forget(const operation& op) {
  for (auto& per_peer : transfers_) {
    for (auto& t : per_peer) {
      if (t.get() == &op) t.reset();
    }
  }
  for (auto& per_peer : in_flight_) {
    for (auto& t : per_peer) {
      if (t.get() == &op) t.reset();
    }
  }
  for (auto* queues : {&outbox_, &urgent_}) {
    for (auto& queue : *queues) {
      std::erase_if(queue, [&](const outgoing& o) { return o.op.get() == &op; });
    }
  }
}

inline void endpoint::send_control(int to, const record& header) {
  const auto t = static_cast<std::size_t>(to);
  if (state_[t] != presence::present) return;
  urgent_[t].push_back({outgoing::kind::control, header, nullptr});
  flush(to);
}

// Writes what waits for `to` into its ring as far as room allows: answers and pieces first,
// then messages in order. Answers must not wait behind an offer that waits for a ticket: the
// ticket comes free only when the peer's answer or our pieces get through.
inline void endpoint::flush(int to) {
  const auto t = static_cast<std::size_t>(to);
  bool wrote = false;
  write_queue(to, urgent_[t], wrote);
  write_queue(to, outbox_[t], wrote);
  if (wrote) wake(to);
}

inline void endpoint::write_queue(int to, std::deque<outgoing>& queue, bool& wrote) {
  const auto t = static_cast<std::size_t>(to);
  ring_producer& ring = producers_[t];
  while (!queue.empty()) {
    outgoing& next = queue.front();
    if (next.what == outgoing::kind::eager) {
      if (!ring.fits(record_kind::eager, next.op->payload.size())) break;
      ring.write(next.header, next.op->payload);
      complete(*next.op, {to, next.op->tag, next.op->payload.size(), {}});
    } else if (next.what == outgoing::kind::control) {
      if (!ring.fits(next.header.kind, 0)) break;
      ring.write(next.header, {});
    } else if (next.what == outgoing::kind::offer) {
      const int slot = free_ticket(to);
      if (slot < 0 || !ring.fits(record_kind::rts, 0)) break;
      operation& op = *next.op;
      op.ticket = slot;
      op.generation = ++generations_[t];
      next.header.ticket = static_cast<std::uint32_t>(slot);
      next.header.generation = op.generation;
      segment_.tickets(rank_, to)[slot].store(ticket::word(op.generation, ticket::offered),
                                              std::memory_order_release);
      in_flight_[t][static_cast<std::size_t>(slot)] = next.op;
      ring.write(next.header, {});
    } else {  // pieces of a large message the receiver asked for
      operation& op = *next.op;
      const std::size_t total = op.payload.size();
      while (op.progress < total) {
        const std::size_t piece = std::min(chunk_, total - op.progress);
        if (!ring.fits(record_kind::data, piece)) break;
        record header{};
        header.kind = record_kind::data;
        header.payload = static_cast<std::uint32_t>(piece);
        header.ticket = static_cast<std::uint32_t>(op.ticket);
        header.generation = op.generation;
        header.size = op.progress;
        ring.write(header, op.payload.subspan(op.progress, piece));
        op.progress += piece;
        wrote = true;
        // Each piece is visible at once: the receiver copies it out while we write the next.
        wake(to);
      }
      if (op.progress < total) break;
      segment_.tickets(rank_, to)[op.ticket].store(ticket::free, std::memory_order_release);
      in_flight_[t][static_cast<std::size_t>(op.ticket)].reset();
      complete(op, {to, op.tag, total, {}});
    }
    wrote = true;
    queue.pop_front();
  }
}

inline int endpoint::free_ticket(int to) const {
  const auto& slots = in_flight_[static_cast<std::size_t>(to)];
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i]) return static_cast<int>(i);
  }
  return -1;
}

// Reads the word a peer published in its slot out of the peer's memory: if the kernel lets
// us, large messages take one copy. A peer that already ended says nothing either way: ask
// the next one (with none left, reading our own memory is the best test there is).
inline void endpoint::probe_cross_memory() {
  if (opts_.large == large_path::copy) return;
  cross_copy answer = cross_copy::process_gone;
  int asked = rank_;
  for (int step = 1; step <= size_ && answer == cross_copy::process_gone; ++step) {
    asked = (rank_ + step) % size_;
    const rank_slot& theirs = segment_.slot(asked);
    std::uint64_t seen = 0;
    const pid_t pid = asked == rank_ ? ::getpid() : peers_[static_cast<std::size_t>(asked)].pid();
    answer = read_from_process(pid, theirs.probe_address, reinterpret_cast<std::byte*>(&seen),
                               sizeof seen);
    if (answer == cross_copy::done && seen != theirs.probe_value) {
      answer = cross_copy::bad_address;
    }
  }
  cross_memory_ = answer == cross_copy::done;
  if (!cross_memory_ && opts_.large == large_path::automatic) {
    // Users want to know: large messages then cost two copies instead of one.
    COMMX_LOG(info, log_, "messages above {} bytes are copied through the ring, not by cma: {}",
              eager_limit_,
              answer == cross_copy::refused
                  ? fmt::format("the kernel does not let this process read rank {}'s memory "
                                "(process_vm_readv: ptrace permission, Yama or seccomp)",
                                asked)
              : answer == cross_copy::bad_address
                  ? fmt::format("process_vm_readv read a wrong value from rank {}'s memory", asked)
                  : std::string("no other rank's process was left to ask"));
  }
  if (!cross_memory_ && opts_.large == large_path::cma) {
    throw error(errc::bootstrap_failed,
                fmt::format("shm: rank {}: COMMX_SHM_LARGE=cma, but the kernel does not let "
                            "this process read rank {}'s memory (process_vm_readv: ptrace "
                            "permission, Yama or seccomp)",
                            rank_, asked));
  }
}

}  // namespace commx::detail::shm
