// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The shared-memory endpoint's outgoing side (endpoint.hpp): writing queued messages, answers
/// and pieces into the rings, withdrawing offers, and choosing the large-message path at
/// start-up. Out of line as the tcp engine's parts are, included by endpoint.hpp.

#include "commx/transport/detail/shm/endpoint.hpp"

namespace commx::detail::shm {

// Withdraws an offer nobody claimed yet; false if a receive claimed it first. One without a
// slot is withdrawn until its first piece is written: the receiver hears of it by `revoke`.
inline bool endpoint::withdraw(operation& op) {
  const auto to = static_cast<std::size_t>(op.peer);
  if (op.ticket < 0) {
    if (op.progress != 0) return false;
    if (auto* held = backlog_[to].get()) {
      std::erase_if(held->urgent, [&](const outgoing& o) { return o.op.get() == &op; });
    }
    in_flight_[to].erase(no_ticket, op.generation);
    record revoke{};
    revoke.kind = record_kind::revoke;
    revoke.ticket = no_ticket;
    revoke.generation = op.generation;
    send_control(op.peer, revoke);
  } else {
    auto& word = segment_.tickets(rank_, op.peer)[op.ticket];
    std::uint32_t expected = ticket::word(op.generation, ticket::offered);
    if (!word.compare_exchange_strong(expected, ticket::free, std::memory_order_acq_rel)) {
      return false;
    }
    in_flight_[to].erase(static_cast<std::uint32_t>(op.ticket), op.generation);
  }
  complete(op, {op.peer, op.tag, 0, make_error_code(errc::cancelled)});
  return true;
}

// Drops every reference to an abandoned operation.
inline void endpoint::forget(const operation& op) {
  std::erase_if(helpable_,
                [&](const std::shared_ptr<operation>& held) { return held.get() == &op; });
  if (parked_ && parked_->receive.get() == &op) {
    // Given up on (cancel's bound) while its sender held a block: a sender stalled that long
    // (stopped, traced) would write the block into memory the caller has back, whenever it
    // resumed. It is fenced: declared lost, and killed before this returns. The board is not
    // used again (the kill may fail: another user's process, one the kernel holds).
    const int from = parked_->offer.source;
    const bool stalled = !sender_finished(segment_.board(rank_), parked_->sender_units);
    parked_.reset();
    board_retired_ = true;
    if (stalled) {
      exclude(from, "stalled holding a block of a shared copy into this rank's memory");
      const bool fenced =
          kill_and_wait(peers_[static_cast<std::size_t>(from)], std::chrono::seconds(5));
      COMMX_LOG(warn, log_, "rank {}, stalled while it could write into a receive given up on, {}",
                from, fenced ? "was killed" : "could not be killed: shared copies end here");
    }
  }
  for (auto* tables : {&transfers_, &in_flight_}) {
    for (transfer_table& table : *tables) table.forget(op);
  }
  for (auto& held : backlog_) {
    if (!held) continue;
    for (auto* queue : {&held->outbox, &held->urgent}) {
      std::erase_if(*queue, [&](const outgoing& o) { return o.op.get() == &op; });
    }
  }
}

// Sets this rank's bit in `to`'s senders words before its first record to `to`, so that
// `to` polls the ring from now on (it may see the bit before the record: it finds nothing
// yet, and the record's wake-up follows). The ring's ends are set up only then, on both
// sides: a pair that never talks touches none of its ring's memory.
inline void endpoint::announce(int to) {
  const auto t = static_cast<std::size_t>(to);
  announced_[t] = true;
  producers_[t] = ring_producer(segment_.ring(rank_, to));
  const auto words = segment_.senders_of(to);
  const auto me = static_cast<std::size_t>(rank_);
  words[me / 64].fetch_or(std::uint64_t{1} << (me % 64), std::memory_order_release);
  segment_.slot(to).senders_changed.fetch_add(1, std::memory_order_release);
}

// `to` may have something queued now: progress() flushes it until both queues are empty.
// Makes the peer's backlog on first use; it stays while the endpoint lives.
inline void endpoint::queue_for(int to) {
  const auto t = static_cast<std::size_t>(to);
  if (!announced_[t]) announce(to);
  if (!backlog_[t]) backlog_[t] = std::make_unique<backlog>();
  if (queued_[t]) return;
  queued_[t] = true;
  queued_peers_.push_back(to);
}

inline void endpoint::send_control(int to, const record& header) {
  const auto t = static_cast<std::size_t>(to);
  if (state_[t] != presence::present) return;
  queue_for(to);
  backlog_[t]->urgent.push_back({outgoing::kind::control, header, nullptr});
  flush(to);
}

// Writes what waits for `to` into its ring as far as room allows: answers and pieces first,
// then messages in order. Answers must not wait behind an offer that waits for a ticket: the
// ticket comes free only when the peer's answer or our pieces get through.
inline void endpoint::flush(int to) {
  const auto t = static_cast<std::size_t>(to);
  backlog* waiting = backlog_[t].get();
  if (waiting == nullptr) return;
  bool wrote = false;
  write_queue(to, waiting->urgent, wrote);
  write_queue(to, waiting->outbox, wrote);
  if (wrote) wake(to);
}

inline void endpoint::write_queue(int to, std::deque<outgoing>& queue, bool& wrote) {
  const auto t = static_cast<std::size_t>(to);
  ring_producer& ring = producers_[t];
  if (!queue.empty() && !announced_[t]) announce(to);
  while (!queue.empty()) {
    outgoing& next = queue.front();
    if (next.what == outgoing::kind::eager) {
      const std::size_t bytes = next.op->payload.size();
      if (!ring.fits(record_kind::eager, bytes)) break;
      if (credit_out_[t].take(credit_cost(bytes), ring, window_)) {
        ring.write(next.header, next.op->payload);
        complete(*next.op, {to, next.op->tag, bytes});
        wrote = true;
        queue.pop_front();
        continue;
      }
      next = {outgoing::kind::offer, offer_record(*next.op), next.op};  // beyond the window
    }
    if (next.what == outgoing::kind::control) {
      if (!ring.fits(next.header.kind, 0)) break;
      ring.write(next.header, {});
    } else if (next.what == outgoing::kind::offer) {
      if (!ring.fits(record_kind::rts, 0)) break;
      operation& op = *next.op;
      const int slot = in_flight_[t].free_slot();
      const auto ticket_field = slot < 0 ? no_ticket : static_cast<std::uint32_t>(slot);
      op.offered = true;
      if (follows_shape(*opts_.large)) {
        last_large_offer_ = clock::now();
        if (!sending_large()) sending_since_ = last_large_offer_;
        ++large_offers_;
      }
      op.ticket = slot;
      op.generation = ++generations_[t];
      next.header.ticket = ticket_field;
      next.header.generation = op.generation;
      if (slot >= 0) {
        segment_.tickets(rank_, to)[slot].store(ticket::word(op.generation, ticket::offered),
                                                std::memory_order_release);
      }
      in_flight_[t].put(ticket_field, next.op);
      if (slot >= 0 && to != rank_ && cross_memory_ && opts_.shared_copy &&
          op.payload.size() >= shared_copy_from && !waiting_.shares_core()) {
        helpable_.push_back(next.op);  // its receiver may share the copy (help_receivers)
      }
      ring.write(next.header, {});
    } else if (!write_pieces(to, *next.op)) {  // of a large message the receiver asked for
      break;
    }
    wrote = true;
    queue.pop_front();
  }
}

// Writes the pieces of `op` the ring has room for; true once the last is written (the send
// is then complete). An empty message without a slot still sends one, empty.
inline bool endpoint::write_pieces(int to, operation& op) {
  ring_producer& ring = producers_[static_cast<std::size_t>(to)];
  const std::size_t total = op.payload.size();
  const auto ticket_field = op.ticket < 0 ? no_ticket : static_cast<std::uint32_t>(op.ticket);
  bool unwritten = total == 0;
  // At least four pieces, so that the receiver copies one out while the next goes in: a
  // message of a few chunks would otherwise cross as two copies one after the other.
  const std::size_t most = std::clamp(total / 4, std::min(min_chunk, chunk_), chunk_);
  while (op.progress < total || unwritten) {
    const std::size_t piece = std::min(most, total - op.progress);
    if (!ring.fits(record_kind::data, piece)) return false;
    record header{};
    header.kind = record_kind::data;
    header.payload = static_cast<std::uint32_t>(piece);
    header.ticket = ticket_field;
    header.generation = op.generation;
    header.size = op.progress;
    ring.write(header, op.payload.subspan(op.progress, piece));
    op.progress += piece;
    unwritten = false;
    // Each piece is visible at once: the receiver copies it out while we write the next.
    wake(to);
  }
  if (op.ticket >= 0) {
    segment_.tickets(rank_, to)[op.ticket].store(ticket::free, std::memory_order_release);
  }
  in_flight_[static_cast<std::size_t>(to)].erase(ticket_field, op.generation);
  complete(op, {to, op.tag, total});
  return true;
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
  if (!cross_memory_ && !cma_required_) {
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
    if (opts_.large == large_path::cma) opts_.large = large_path::copy;  // the default's fallback
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
