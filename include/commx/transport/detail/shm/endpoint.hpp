// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// One rank's end of the shared-memory transport: the protocol over the rings.
///
/// Small messages (<= the threshold) travel whole in an `eager` record, copied once into the
/// ring and once out of it: straight into a posted receive, or into the private queue.
/// Large messages are offered: the sender publishes a ticket word in the segment and an `rts`
/// record with the message's address, and keeps the payload. The receive that matches claims
/// the ticket (compare-and-swap, so a sender cancelling at the same moment either wins cleanly
/// or sees the claim and waits for the copy to finish), then either copies the payload itself
/// with process_vm_readv and answers `fin`, or answers `cts` and the sender streams `data`
/// pieces through the ring, which the receiver copies into place as they come (pipelined: both
/// copy at once).
///
/// Every rank drains all its incoming rings whenever it makes progress, into posted receives or
/// into its private queue; a send that finds its ring full waits in a private outbox, in order,
/// until the receiver has made room. Nothing ever blocks on another rank's cooperation except a
/// large message, whose sender waits (without blocking anything else) for the receive.
///
/// Waiting: spin a little, yield a few turns, then sleep on the rank's futex word. A rank that
/// writes to a ring, or frees space in one, wakes the other end if (and only if) it announced
/// that it may sleep. Sleeps are capped at the liveness period, after which the peers' pidfds
/// are polled: a process that is gone without saying goodbye is marked failed in the segment
/// and everyone is woken.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/shm/cross_memory.hpp"
#include "commx/transport/detail/shm/futex.hpp"
#include "commx/transport/detail/shm/liveness.hpp"
#include "commx/transport/detail/shm/matching.hpp"
#include "commx/transport/detail/shm/options.hpp"
#include "commx/transport/detail/shm/ring.hpp"
#include "commx/transport/detail/shm/segment.hpp"

namespace commx::detail::shm {

/// Ticket words: the use (generation, 30 bits) and the state (2 bits) of one offer slot.
namespace ticket {
inline constexpr std::uint32_t free = 0;
inline constexpr std::uint32_t offered = 1;
inline constexpr std::uint32_t claimed = 2;
constexpr std::uint32_t word(std::uint64_t generation, std::uint32_t state) {
  return static_cast<std::uint32_t>((generation & 0x3fffffffU) << 2U) | state;
}
}  // namespace ticket

class endpoint {
 public:
  endpoint(segment seg, int rank, int size, const options& opts)
      : segment_(std::move(seg)), rank_(rank), size_(size), opts_(opts) {
    const auto n = static_cast<std::size_t>(size);
    const std::size_t ring = segment_.ring(0, 0).capacity();
    // A whole eager message must fit in a ring with room to spare; pieces are a quarter ring.
    eager_limit_ = std::min(opts_.large_threshold, ring / 2 - sizeof(record));
    chunk_ = std::min<std::size_t>(ring / 4, std::size_t{64} << 10);
    producers_.resize(n);
    consumers_.resize(n);
    outbox_.resize(n);
    urgent_.resize(n);
    in_flight_.resize(n);
    transfers_.resize(n);
    generations_.assign(n, 0);
    peers_.resize(n);
    state_.assign(n, presence::present);
    for (int peer = 0; peer < size; ++peer) {
      const auto p = static_cast<std::size_t>(peer);
      producers_[p] = ring_producer(segment_.ring(rank, peer));
      consumers_[p] = ring_consumer(segment_.ring(peer, rank));
      in_flight_[p].resize(tickets_per_pair);
      transfers_[p].resize(tickets_per_pair);
      if (peer != rank) {
        peers_[p] = process_watch(segment_.slot(peer).pid.load(std::memory_order_acquire));
      }
    }
    departures_seen_ = segment_.header().departures.load(std::memory_order_acquire);
    last_liveness_ = clock::now();
    probe_cross_memory();
  }

  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  /// Says goodbye: peers stop waiting for this rank (what it sent is still delivered).
  ~endpoint() { leave(presence::finished); }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool cross_memory_enabled() const { return cross_memory_; }
  [[nodiscard]] const std::string& segment_name() const { return segment_.name(); }

  std::shared_ptr<operation> send(int to, context_id ctx, int tag,
                                  std::span<const std::byte> data) {
    const auto t = static_cast<std::size_t>(to);
    if (state_[t] != presence::present) {
      return completed(operation::kind::send, to, ctx, tag, lost(to, data.size()));
    }
    if (data.size() <= eager_limit_) {
      const record header = eager_record(ctx, tag, data.size());
      // The fast path: nothing queued ahead of it and room in the ring.
      if (outbox_[t].empty() && producers_[t].fits(data.size())) {
        producers_[t].write(header, data);
        producers_[t].publish();
        wake(to);
        return nullptr;
      }
      auto op = std::make_shared<operation>(operation::kind::send, to, ctx, tag);
      op->payload = data;
      outbox_[t].push_back({outgoing::kind::eager, header, op});
      flush(to);
      return op;
    }
    auto op = std::make_shared<operation>(operation::kind::send, to, ctx, tag);
    op->payload = data;
    record header{};
    header.kind = record_kind::rts;
    header.tag = tag;
    header.ctx = ctx;
    header.size = data.size();
    header.address = reinterpret_cast<std::uint64_t>(data.data());
    outbox_[t].push_back({outgoing::kind::offer, header, op});
    flush(to);
    return op;
  }

  std::shared_ptr<operation> recv(int from, context_id ctx, int tag, recv_buffer buffer) {
    auto op = std::make_shared<operation>(operation::kind::recv, from, ctx, tag);
    op->buffer = buffer;
    for (auto at = unexpected_.find(from, ctx, tag); at != unexpected_.end();
         at = unexpected_.find(from, ctx, tag)) {
      queued_message& queued = at->second.front();
      if (queued.large && !still_offered(queued)) {
        unexpected_.pop(at);  // the sender withdrew it
        continue;
      }
      std::error_code ec;
      std::byte* target = buffer.prepare(queued.size, ec);
      if (ec) {  // refused: the message stays queued for a receive that fits
        complete(*op, {queued.source, queued.tag, queued.size, ec});
        return op;
      }
      if (!queued.large) {
        if (!queued.eager.empty()) std::memcpy(target, queued.eager.data(), queued.size);
        complete(*op, {queued.source, queued.tag, queued.size, {}});
        unexpected_.pop(at);
        return op;
      }
      const queued_message offer = std::move(queued);
      unexpected_.pop(at);
      if (take_offer(op, offer.source, offer.tag, offer.size, offer.ticket, offer.generation,
                     offer.address, target)) {
        return op;
      }
    }
    if (auto gone = lost_source(from)) {
      complete(*op, *gone);
      return op;
    }
    posted_.push_back(op);
    return op;
  }

  std::optional<op_result> probe(int from, context_id ctx, int tag) {
    progress();
    for (auto at = unexpected_.find(from, ctx, tag); at != unexpected_.end();
         at = unexpected_.find(from, ctx, tag)) {
      const queued_message& queued = at->second.front();
      if (!queued.large || still_offered(queued)) {
        return op_result{queued.source, queued.tag, queued.size, {}};
      }
      unexpected_.pop(at);
    }
    return lost_source(from);
  }

  bool test(const std::shared_ptr<operation>& op) {
    if (!op || op->done) return true;
    progress();
    return op->done;
  }

  /// Withdraws `op` if it has not matched. One that matched (a large message being copied)
  /// completes during the call instead, and the answer is false.
  bool cancel(operation& op) {
    if (op.done) return false;
    if (op.what == operation::kind::recv) {
      auto posted = std::find_if(posted_.begin(), posted_.end(),
                                 [&](const auto& p) { return p.get() == &op; });
      if (posted != posted_.end()) {
        posted_.erase(posted);
        complete(op, {op.peer, op.tag, 0, make_error_code(errc::cancelled)});
        return true;
      }
    } else {
      auto& queue = outbox_[static_cast<std::size_t>(op.peer)];
      auto waiting = std::find_if(queue.begin(), queue.end(),
                                  [&](const outgoing& o) { return o.op.get() == &op; });
      if (waiting != queue.end()) {  // not in the ring yet
        queue.erase(waiting);
        complete(op, {op.peer, op.tag, 0, make_error_code(errc::cancelled)});
        return true;
      }
      if (op.ticket >= 0 && withdraw(op)) return true;
    }
    // Matched and being copied: that takes as long as the peer keeps making progress, which a
    // peer that is gone stops (the operation then fails with peer_lost).
    const auto until = clock::now() + std::chrono::seconds(30);
    while (!op.done && clock::now() < until) wait_for_event(events_, until);
    if (!op.done) {
      complete(op, {op.peer, op.tag, 0, make_error_code(errc::cancelled)});
      forget(op);
      return true;
    }
    return false;
  }

  [[nodiscard]] std::uint64_t event_count() const { return events_; }

  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    progress();
    if (events_ != seen) return;
    // Poll a few times only: measured on this loaded 2-core machine, 64 pauses (~4 us) doubled
    // the 8-byte latency, since the peer usually needs our core to answer. Then give the core
    // away, turn after turn, for a while: a yield that finds nobody else runnable costs less
    // than a futex sleep and wake-up. Only then sleep.
    for (int spin = 0; spin < opts_.spin_rounds; ++spin) {
      if (incoming()) {
        progress();
        if (events_ != seen) return;
      }
      pause();
    }
    const auto yield_until = std::min(when, clock::now() + opts_.yield_period);
    while (clock::now() < yield_until) {
      ::sched_yield();
      if (incoming()) {
        progress();
        if (events_ != seen) return;
      }
    }
    if (clock::now() >= when) return;
    rank_slot& me = segment_.slot(rank_);
    me.sleeping.exchange(1, std::memory_order_seq_cst);  // see wake()
    const std::uint32_t word = me.wake.load(std::memory_order_seq_cst);
    progress();  // anything published before our announcement is seen here
    if (events_ == seen) {
      const auto now = clock::now();
      const auto cap = last_liveness_ + opts_.liveness_period;
      const auto until = std::min(when, std::max(cap, now + std::chrono::milliseconds(1)));
      if (until > now) futex_wait(me.wake, word, until - now);
    }
    me.sleeping.store(0, std::memory_order_relaxed);
    progress();
    if (clock::now() - last_liveness_ >= opts_.liveness_period) check_liveness();
  }

  /// Marks this rank failed (rather than finished): peers' any_source receives stop waiting.
  void fail() { leave(presence::failed); }

 private:
  struct outgoing {
    enum class kind { eager, offer, control, pieces };
    kind what;
    record header;
    std::shared_ptr<operation> op;  // eager, offer and pieces
  };

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
  }

  static record eager_record(context_id ctx, int tag, std::size_t bytes) {
    record header{};
    header.kind = record_kind::eager;
    header.payload = static_cast<std::uint32_t>(bytes);
    header.tag = tag;
    header.ctx = ctx;
    return header;
  }

  static op_result lost(int peer, std::size_t bytes) {
    return {peer, any_tag, bytes, make_error_code(errc::peer_lost)};
  }

  void complete(operation& op, op_result result) {
    op.result = result;
    op.done = true;
    ++events_;
  }

  std::shared_ptr<operation> completed(operation::kind k, int peer, context_id ctx, int tag,
                                       op_result result) {
    auto op = std::make_shared<operation>(k, peer, ctx, tag);
    complete(*op, result);
    return op;
  }

  // ---- waking and liveness -----------------------------------------------------------------

  // Called after publishing to `peer`'s ring or freeing space in its ring to us. Both sides
  // read-modify-write the peer's `sleeping` word (we add 0, it exchanges in 1), so the two
  // operations are ordered: if ours came first, its exchange acquires our ring update and its
  // last look at the rings sees it; if its came first, we see 1 and wake it. (RMWs rather than
  // fences: ThreadSanitizer does not model fences, and a locked instruction is what x86 makes
  // of either.)
  void wake(int peer) {
    if (peer == rank_) return;
    rank_slot& slot = segment_.slot(peer);
    if (slot.sleeping.fetch_add(0, std::memory_order_seq_cst) != 0) {
      slot.wake.fetch_add(1, std::memory_order_seq_cst);
      futex_wake_all(slot.wake);
    }
  }

  void wake_everyone() {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      segment_.slot(peer).wake.fetch_add(1, std::memory_order_seq_cst);
      futex_wake_all(segment_.slot(peer).wake);
    }
  }

  // Anything new in our rings, room in a ring we wait to write to, or a rank gone? (Loads
  // only: the spin loop's test.)
  bool incoming() const {
    for (const ring_consumer& c : consumers_) {
      if (c.has_data()) return true;
    }
    for (std::size_t p = 0; p < producers_.size(); ++p) {
      if ((!outbox_[p].empty() || !urgent_[p].empty()) && producers_[p].room_freed()) return true;
    }
    return segment_.header().departures.load(std::memory_order_relaxed) != departures_seen_;
  }

  void leave(presence how) {
    if (left_) return;
    left_ = true;
    rank_slot& me = segment_.slot(rank_);
    presence present = presence::present;
    me.state.compare_exchange_strong(present, how, std::memory_order_acq_rel);
    segment_.header().departures.fetch_add(1, std::memory_order_acq_rel);
    wake_everyone();
  }

  // Polls every live peer's process; one that is gone without leaving is marked failed.
  void check_liveness() {
    last_liveness_ = clock::now();
    for (int peer = 0; peer < size_; ++peer) {
      const auto p = static_cast<std::size_t>(peer);
      if (peer == rank_ || state_[p] != presence::present || !peers_[p].gone()) continue;
      presence present = presence::present;
      if (segment_.slot(peer).state.compare_exchange_strong(present, presence::failed,
                                                            std::memory_order_acq_rel)) {
        segment_.header().departures.fetch_add(1, std::memory_order_acq_rel);
        wake_everyone();
      }
    }
    check_departures(/*force=*/true);
  }

  // A rank left or was found dead: settle everything that involves it.
  void check_departures(bool force = false) {
    const std::uint32_t now = segment_.header().departures.load(std::memory_order_acquire);
    if (now == departures_seen_ && !force) return;
    departures_seen_ = now;
    for (int peer = 0; peer < size_; ++peer) {
      const auto p = static_cast<std::size_t>(peer);
      if (peer == rank_ || state_[p] != presence::present) continue;
      const presence there = segment_.slot(peer).state.load(std::memory_order_acquire);
      if (there != presence::present) depart(peer, there);
    }
  }

  void depart(int peer, presence how) {
    const auto p = static_cast<std::size_t>(peer);
    drain(peer, /*limit=*/static_cast<std::size_t>(-1));  // what it sent before going counts
    state_[p] = how;
    ++events_;
    if (how == presence::failed) any_failed_ = peer;
    std::erase_if(posted_, [&](const std::shared_ptr<operation>& op) {
      if (op->peer != peer && !(how == presence::failed && op->peer == any_source)) return false;
      complete(*op, lost(peer, 0));
      return true;
    });
    for (auto* queue : {&outbox_[p], &urgent_[p]}) {
      for (outgoing& o : *queue) {
        if (o.op && !o.op->done) complete(*o.op, lost(peer, o.op->payload.size()));
      }
      queue->clear();
    }
    for (auto& op : in_flight_[p]) {
      if (op && !op->done) complete(*op, lost(peer, op->payload.size()));
      op.reset();
    }
    for (auto& transfer : transfers_[p]) {
      if (transfer && !transfer->done) complete(*transfer, lost(peer, 0));
      transfer.reset();
    }
    // Its large messages are in memory that is gone.
    unexpected_.remove_if([&](const queued_message& m) { return m.large && m.source == peer; });
  }

  // A receive from `from` that nothing queued satisfies: can anyone still answer it?
  std::optional<op_result> lost_source(int from) const {
    if (from == any_source) {
      if (any_failed_ != unknown) return lost(any_failed_, 0);
      return std::nullopt;
    }
    if (state_[static_cast<std::size_t>(from)] != presence::present) return lost(from, 0);
    return std::nullopt;
  }

  // ---- progress ----------------------------------------------------------------------------

  void progress() {
    check_departures();
    for (int peer = 0; peer < size_; ++peer) drain(peer, drain_limit);
    for (int peer = 0; peer < size_; ++peer) {
      const auto p = static_cast<std::size_t>(peer);
      if (!outbox_[p].empty() || !urgent_[p].empty()) flush(peer);
    }
    // A caller that polls test() instead of waiting still learns of dead peers.
    if (++idle_polls_ >= 1024) {
      idle_polls_ = 0;
      if (clock::now() - last_liveness_ >= opts_.liveness_period) check_liveness();
    }
  }

  static constexpr std::size_t drain_limit = 1024;

  void drain(int peer, std::size_t limit) {
    ring_consumer& ring = consumers_[static_cast<std::size_t>(peer)];
    record header{};
    std::size_t taken = 0;
    while (taken < limit && ring.peek(header)) {
      arrive(peer, header, ring);
      ring.pop(header);
      ++taken;
    }
    if (taken != 0) {
      ++events_;
      wake(peer);  // it may be waiting for room
    }
  }

  void arrive(int from, const record& header, const ring_consumer& ring) {
    switch (header.kind) {
      case record_kind::eager:
        return arrive_eager(from, header, ring);
      case record_kind::rts:
        return arrive_offer(from, header);
      case record_kind::cts:
        return arrive_clear_to_send(from, header);
      case record_kind::data:
        return arrive_piece(from, header, ring);
      case record_kind::fin:
        return arrive_fin(from, header);
    }
    throw error(errc::protocol_violation,
                fmt::format("shm: rank {}: record of unknown kind {} from rank {}", rank_,
                            static_cast<std::uint32_t>(header.kind), from));
  }

  void arrive_eager(int from, const record& header, const ring_consumer& ring) {
    const std::size_t bytes = header.payload;
    for (auto posted = posted_.begin(); posted != posted_.end();) {
      operation& op = **posted;
      if (!matches(op.peer, op.ctx, op.tag, from, header.ctx, header.tag)) {
        ++posted;
        continue;
      }
      std::error_code ec;
      std::byte* target = op.buffer.prepare(bytes, ec);
      if (!ec) ring.read_payload(0, target, bytes);
      complete(op, {from, header.tag, bytes, ec});
      posted = posted_.erase(posted);
      if (!ec) return;
    }
    queued_message message{0, from, header.ctx, header.tag, bytes, {}};
    message.eager.resize(bytes);
    ring.read_payload(0, message.eager.data(), bytes);
    unexpected_.push(std::move(message));
  }

  void arrive_offer(int from, const record& header) {
    queued_message offer{0, from, header.ctx, header.tag, header.size, {}};
    offer.large = true;
    offer.ticket = header.ticket;
    offer.generation = header.generation;
    offer.address = header.address;
    if (offer.ticket >= tickets_per_pair) {
      throw error(errc::protocol_violation,
                  fmt::format("shm: rank {}: offer from rank {} names ticket {} (< {})", rank_,
                              from, offer.ticket, tickets_per_pair));
    }
    for (auto posted = posted_.begin(); posted != posted_.end();) {
      operation& op = **posted;
      if (!matches(op.peer, op.ctx, op.tag, from, header.ctx, header.tag)) {
        ++posted;
        continue;
      }
      if (!still_offered(offer)) return;  // withdrawn: as if never sent
      std::error_code ec;
      std::byte* target = op.buffer.prepare(offer.size, ec);
      if (ec) {
        complete(op, {from, header.tag, offer.size, ec});
        posted = posted_.erase(posted);
        continue;
      }
      std::shared_ptr<operation> taken = *posted;
      posted = posted_.erase(posted);
      if (take_offer(taken, from, header.tag, offer.size, offer.ticket, offer.generation,
                     offer.address, target)) {
        return;
      }
      // Withdrawn just now: the receive is still waiting, first in line again.
      posted_.insert(posted_.begin(), taken);
      return;
    }
    unexpected_.push(std::move(offer));
  }

  bool still_offered(const queued_message& offer) const {
    const auto& word = segment_.tickets(offer.source, rank_)[offer.ticket];
    return word.load(std::memory_order_acquire) == ticket::word(offer.generation, ticket::offered);
  }

  // Claims a large message for `op` and copies it, or asks for it in pieces. False if the
  // sender withdrew it first (nothing happened to `op`).
  bool take_offer(const std::shared_ptr<operation>& receive, int from, int tag, std::size_t bytes,
                  std::uint32_t slot, std::uint64_t generation, std::uint64_t address,
                  std::byte* target) {
    operation& op = *receive;
    auto& word = segment_.tickets(from, rank_)[slot];
    std::uint32_t expected = ticket::word(generation, ticket::offered);
    if (!word.compare_exchange_strong(expected, ticket::word(generation, ticket::claimed),
                                      std::memory_order_acq_rel)) {
      return false;
    }
    record answer{};
    answer.ticket = slot;
    answer.generation = generation;
    answer.tag = tag;
    if (cross_memory_ && bytes != 0) {
      const pid_t pid = peers_[static_cast<std::size_t>(from)].pid();
      const cross_copy copied =
          from == rank_ ? (std::memcpy(target, reinterpret_cast<const void*>(address), bytes),
                           cross_copy::done)
                        : read_from_process(pid, address, target, bytes);
      if (copied == cross_copy::done || copied == cross_copy::bad_address) {
        const bool good = copied == cross_copy::done;
        complete(op, {from, tag, bytes,
                      good ? std::error_code{} : make_error_code(errc::protocol_violation)});
        answer.kind = record_kind::fin;
        answer.size = good ? 0 : static_cast<std::uint64_t>(errc::protocol_violation);
        send_control(from, answer);
        return true;
      }
      if (copied == cross_copy::process_gone) {
        complete(op, lost(from, bytes));
        return true;
      }
      cross_memory_ = false;  // refused after all: the ring from now on
    }
    if (bytes == 0) {
      complete(op, {from, tag, 0, {}});
      answer.kind = record_kind::fin;
      send_control(from, answer);
      return true;
    }
    op.target = target;
    op.progress = 0;
    op.generation = generation;
    op.result = {from, tag, bytes, {}};
    transfers_[static_cast<std::size_t>(from)][slot] = receive;
    answer.kind = record_kind::cts;
    send_control(from, answer);
    return true;
  }

  void arrive_clear_to_send(int from, const record& header) {
    auto& op = in_flight_[static_cast<std::size_t>(from)][header.ticket % tickets_per_pair];
    if (!op || op->generation != header.generation) return;  // cancelled meanwhile
    urgent_[static_cast<std::size_t>(from)].push_back({outgoing::kind::pieces, {}, op});
  }

  void arrive_piece(int from, const record& header, const ring_consumer& ring) {
    auto& op = transfers_[static_cast<std::size_t>(from)][header.ticket % tickets_per_pair];
    if (!op || op->generation != header.generation) return;  // abandoned receive: drop it
    const std::size_t bytes = op->result.bytes;
    if (header.size > bytes || header.payload > bytes - header.size) {
      throw error(errc::protocol_violation,
                  fmt::format("shm: rank {}: piece [{}, +{}) from rank {} is outside its {}-byte "
                              "message",
                              rank_, header.size, header.payload, from, bytes));
    }
    ring.read_payload(0, op->target + header.size, header.payload);
    op->progress += header.payload;
    if (op->progress == bytes) {
      complete(*op, op->result);
      op.reset();
    }
  }

  void arrive_fin(int from, const record& header) {
    auto& op = in_flight_[static_cast<std::size_t>(from)][header.ticket % tickets_per_pair];
    if (!op || op->generation != header.generation) return;
    segment_.tickets(rank_, from)[op->ticket].store(ticket::free, std::memory_order_release);
    const auto failure = static_cast<errc>(header.size);
    complete(*op, {from, op->tag, op->payload.size(),
                   header.size == 0 ? std::error_code{} : make_error_code(failure)});
    op.reset();
  }

  // Withdraws an offer nobody claimed yet; false if a receive claimed it first.
  bool withdraw(operation& op) {
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
  void forget(const operation& op) {
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

  void send_control(int to, const record& header) {
    const auto t = static_cast<std::size_t>(to);
    if (state_[t] != presence::present) return;
    urgent_[t].push_back({outgoing::kind::control, header, nullptr});
    flush(to);
  }

  // Writes what waits for `to` into its ring as far as room allows: answers and pieces first,
  // then messages in order. Answers must not wait behind an offer that waits for a ticket: the
  // ticket comes free only when the peer's answer or our pieces get through.
  void flush(int to) {
    const auto t = static_cast<std::size_t>(to);
    bool wrote = false;
    write_queue(to, urgent_[t], wrote);
    write_queue(to, outbox_[t], wrote);
    if (wrote) {
      producers_[t].publish();
      wake(to);
    }
  }

  void write_queue(int to, std::deque<outgoing>& queue, bool& wrote) {
    const auto t = static_cast<std::size_t>(to);
    ring_producer& ring = producers_[t];
    while (!queue.empty()) {
      outgoing& next = queue.front();
      if (next.what == outgoing::kind::eager) {
        if (!ring.fits(next.op->payload.size())) break;
        ring.write(next.header, next.op->payload);
        complete(*next.op, {to, next.op->tag, next.op->payload.size(), {}});
      } else if (next.what == outgoing::kind::control) {
        if (!ring.fits(0)) break;
        ring.write(next.header, {});
      } else if (next.what == outgoing::kind::offer) {
        const int slot = free_ticket(to);
        if (slot < 0 || !ring.fits(0)) break;
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
          if (!ring.fits(piece)) break;
          record header{};
          header.kind = record_kind::data;
          header.payload = static_cast<std::uint32_t>(piece);
          header.ticket = static_cast<std::uint32_t>(op.ticket);
          header.generation = op.generation;
          header.size = op.progress;
          ring.write(header, op.payload.subspan(op.progress, piece));
          op.progress += piece;
          wrote = true;
          // Publish each piece at once: the receiver copies it out while we write the next.
          ring.publish();
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

  int free_ticket(int to) const {
    const auto& slots = in_flight_[static_cast<std::size_t>(to)];
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (!slots[i]) return static_cast<int>(i);
    }
    return -1;
  }

  // ---- start-up ----------------------------------------------------------------------------

  // Reads the word a peer published in its slot out of the peer's memory: if the kernel lets
  // us, large messages take one copy. A peer that already ended says nothing either way: ask
  // the next one (with none left, reading our own memory is the best test there is).
  void probe_cross_memory() {
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
    if (!cross_memory_ && opts_.large == large_path::cma) {
      throw error(errc::bootstrap_failed,
                  fmt::format("shm: rank {}: COMMX_SHM_LARGE=cma, but the kernel does not let "
                              "this process read rank {}'s memory (process_vm_readv: ptrace "
                              "permission, Yama or seccomp)",
                              rank_, asked));
    }
  }

  segment segment_;
  int rank_;
  int size_;
  options opts_;
  std::size_t eager_limit_ = 0;
  std::size_t chunk_ = 0;
  bool cross_memory_ = false;
  bool left_ = false;

  std::vector<ring_producer> producers_;      // to each peer
  std::vector<ring_consumer> consumers_;      // from each peer
  std::vector<std::deque<outgoing>> outbox_;  // messages (eager, offers), in order
  std::vector<std::deque<outgoing>> urgent_;  // answers (cts, fin) and pieces
  std::vector<std::vector<std::shared_ptr<operation>>> in_flight_;  // offers, by ticket
  std::vector<std::vector<std::shared_ptr<operation>>> transfers_;  // pieces coming, by ticket
  std::vector<std::uint64_t> generations_;
  std::vector<process_watch> peers_;
  std::vector<presence> state_;
  std::deque<std::shared_ptr<operation>> posted_;
  unexpected_queue unexpected_;
  int any_failed_ = unknown;
  std::uint64_t events_ = 0;
  std::uint32_t departures_seen_ = 0;
  clock::time_point last_liveness_;
  unsigned idle_polls_ = 0;
};

}  // namespace commx::detail::shm
