// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The shared-memory endpoint's progress (endpoint.hpp): draining the incoming rings and acting
/// on each record (eager messages, offers, answers, pieces), matching a receive against the
/// messages queued, and claiming a large message.
/// Out of line as the tcp engine's parts are, included by endpoint.hpp.

#include "commx/transport/detail/shm/endpoint.hpp"

namespace commx::detail::shm {

// Matches the receive `op` against the messages queued, or posts it.
inline void endpoint::start_recv(const std::shared_ptr<operation>& op) {
  const int from = op->peer;
  const context_id ctx = op->ctx;
  const int tag = op->tag;
  recv_buffer& buffer = op->buffer;
  for (auto at = unexpected_.find(from, ctx, tag); at != unexpected_.end();
       at = unexpected_.find(from, ctx, tag)) {
    queued_message& queued = *at;
    if (queued.large && !still_offered(queued)) {
      unexpected_.pop(at);  // the sender withdrew it
      continue;
    }
    std::error_code ec;
    std::byte* target = buffer.prepare(queued.size, ec);
    if (ec) {  // refused: the message stays queued for a receive that fits
      complete(*op, {queued.source, queued.tag, queued.size, ec});
      return;
    }
    if (!queued.large) {
      if (!queued.eager.empty()) std::memcpy(target, queued.eager.data(), queued.size);
      complete(*op, {queued.source, queued.tag, queued.size});
      took_held(queued.source, queued.size);
      unexpected_.pop(at);
      return;
    }
    const queued_message offer = std::move(queued);
    unexpected_.pop(at);
    if (offer.ticket != no_ticket) {
      if (!claim(offer)) continue;              // withdrawn just now
      claimed_.push_back({op, offer, target});  // taken at the next progress()
      return;
    }
    if (take_offer(op, offer, target)) {
      return;
    }
  }
  if (auto gone = lost_source(from)) {
    complete(*op, *gone);
    return;
  }
  // The sender a receive names is polled at every look again if it had cooled: what a rank
  // waits for must not wait for a chunk's turn (polled_senders.hpp).
  if (from != any_source) senders_.awaited(from);
  post(op);
}

inline void endpoint::progress() {
  // A large message already here when its receive was posted is copied now, not in the post:
  // a sendrecv posts its receive, then its own offer, and copying in the post left the peer
  // waiting for that offer the whole copy (2-rank 4 MiB sendrecvs by cma took twice a
  // ping-ping's time, one in two runs); now both ranks copy at once.
  if (!helpable_.empty()) help_receivers();
  if (parked_) end_parked_copy();
  while (!claimed_.empty()) {
    const claimed_offer taken = std::move(claimed_.front());
    claimed_.pop_front();
    take_offer(taken.receive, taken.offer, taken.target, true);
  }
  check_departures();
  find_senders();
  // A peer that went was drained as it went (depart): nothing it writes later is taken in, so
  // a rank declared lost (exclude) that resumes is never heard again.
  const bool all_cold = senders_.start_poll();
  for (const int peer : senders_.hot()) {
    if (state_[static_cast<std::size_t>(peer)] == presence::present) drain(peer, drain_limit);
  }
  drain_cold(all_cold);
  senders_.cool_if_crowded();
  for (std::size_t i = 0; i < queued_peers_.size();) {
    const int peer = queued_peers_[i];
    const auto p = static_cast<std::size_t>(peer);
    if (backlogged(p)) flush(peer);
    if (!backlogged(p)) {
      queued_[p] = false;
      queued_peers_[i] = queued_peers_.back();
      queued_peers_.pop_back();
    } else {
      ++i;
    }
  }
  settle_wakes();
  if (exchange_cost_ && !sending_large()) {
    paths_.record(exchange_cost_->choice, exchange_cost_->bytes,
                  clock::now() - exchange_cost_->since);
    exchange_cost_.reset();
  }
  // A caller that polls test() instead of waiting still learns of dead peers.
  if (++idle_polls_ >= 1024) {
    idle_polls_ = 0;
    if (clock::now() - last_liveness_ >= opts_.liveness_period) check_liveness();
  }
}

// Takes in the senders that announced themselves since the last look.
inline void endpoint::find_senders() {
  rank_slot& me = segment_.slot(rank_);
  const std::uint32_t now = me.senders_changed.load(std::memory_order_acquire);
  if (now == senders_seen_) return;
  senders_seen_ = now;
  const auto words = segment_.senders_of(rank_);
  for (std::size_t w = 0; w < words.size(); ++w) {
    std::uint64_t bits = words[w].load(std::memory_order_acquire);
    while (bits != 0) {
      const auto s = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      bits &= bits - 1;
      if (!senders_.polls(s)) {
        consumers_[s] = ring_consumer(segment_.ring(static_cast<int>(s), rank_));
        senders_.add(static_cast<int>(s));
      }
    }
  }
}

// The cold senders that wrote, of every one (`all`) or of the next chunk (at every poll while
// an any_source receive is posted, else at every cold_every-th), are drained and hot again
// (polled_senders.hpp).
inline void endpoint::drain_cold(bool all) {
  std::vector<int> wrote;
  const std::span<const int> looked = all                       ? senders_.cold()
                                      : any_source_posted_ != 0 ? senders_.next_cold_chunk()
                                                                : senders_.sparse_cold_chunk();
  for (const int peer : looked) {
    const auto p = static_cast<std::size_t>(peer);
    if (state_[p] == presence::present && consumers_[p].has_data()) wrote.push_back(peer);
  }
  for (const int peer : wrote) {
    drain(peer, drain_limit);
    senders_.warm(peer);
  }
}

inline void endpoint::drain(int peer, std::size_t limit) {
  if (!senders_.polls(static_cast<std::size_t>(peer))) return;  // it never wrote to us
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
    senders_.heard(peer);
    nudge(peer);  // it may be waiting for room
  }
}

inline void endpoint::arrive(int from, const record& header, const ring_consumer& ring) {
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
    case record_kind::revoke:
      return arrive_revoke(from, header);
    case record_kind::skip:  // ring_consumer::peek takes these itself
      break;
  }
  throw error(errc::protocol_violation,
              fmt::format("shm: rank {}: record of unknown kind {} from rank {}", rank_,
                          static_cast<std::uint32_t>(header.kind), from));
}

inline void endpoint::arrive_eager(int from, const record& header, const ring_consumer& ring) {
  const std::size_t bytes = header.payload;
  for (auto posted = posted_.begin(); posted != posted_.end();) {
    operation& op = **posted;
    if (!matches(op.peer, op.ctx, op.tag, from, header.ctx, header.tag)) {
      ++posted;
      continue;
    }
    std::error_code ec;
    std::byte* target = op.buffer.prepare(bytes, ec);
    if (!ec) ring.read_payload(header, 0, target, bytes);
    complete(op, {from, header.tag, bytes, ec});
    posted = unpost(posted);
    if (!ec) {
      took(from, bytes);
      return;
    }
  }
  ring.read_payload(header, 0, unexpected_.push_eager(from, header.ctx, header.tag, bytes), bytes);
  held_bytes_ += credit_cost(bytes);
}

inline void endpoint::arrive_offer(int from, const record& header) {
  queued_message offer{0, from, header.ctx, header.tag, header.size, {}};
  offer.large = true;
  offer.ticket = header.ticket;
  offer.generation = header.generation;
  offer.address = header.address;
  if (follows_shape(*opts_.large)) {
    offer.crossed = sending_large() ? sending_since_ : clock::time_point{};
    offer.offers_before = large_offers_;
  }
  if (offer.ticket >= tickets_per_pair && offer.ticket != no_ticket) {
    throw error(errc::protocol_violation,
                fmt::format("shm: rank {}: offer from rank {} names ticket {} (< {})", rank_, from,
                            offer.ticket, tickets_per_pair));
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
      posted = unpost(posted);
      continue;
    }
    std::shared_ptr<operation> taken = *posted;
    posted = unpost(posted);
    if (take_offer(taken, offer, target)) {
      return;
    }
    // Withdrawn just now: the receive is still waiting, first in line again.
    post(taken, /*first=*/true);
    return;
  }
  unexpected_.push(std::move(offer));
}

inline bool endpoint::still_offered(const queued_message& offer) const {
  if (offer.ticket == no_ticket) return true;  // a withdrawal takes it out of the queue
  const auto& word = segment_.tickets(offer.source, rank_)[offer.ticket];
  return word.load(std::memory_order_acquire) == ticket::word(offer.generation, ticket::offered);
}

// Takes a slotted offer from its sender, who can no longer withdraw it. False if it was.
inline bool endpoint::claim(const queued_message& offer) {
  auto& word = segment_.tickets(offer.source, rank_)[offer.ticket];
  std::uint32_t expected = ticket::word(offer.generation, ticket::offered);
  return word.compare_exchange_strong(expected, ticket::word(offer.generation, ticket::claimed),
                                      std::memory_order_acq_rel);
}

// Claims a large message for `op` and copies it, or asks for it in pieces. False if the
// sender withdrew it first (nothing happened to `op`); `claimed`: claim() took it already. An
// offer without a ticket slot is claimed by asking for its pieces (transfer_table.hpp).
inline bool endpoint::take_offer(const std::shared_ptr<operation>& receive,
                                 const queued_message& offer, std::byte* target, bool claimed) {
  const bool slotted = offer.ticket != no_ticket;
  if (slotted && !claimed && !claim(offer)) return false;
  const large_way way = choose_large_way(offer, slotted);
  if (way.by_cma) {
    const int from = offer.source;
    const std::size_t bytes = offer.size;
    cross_copy copied = cross_copy::done;
    if (from == rank_) {
      std::memcpy(target, reinterpret_cast<const void*>(offer.address), bytes);
    } else if (shares_copy(bytes)) {
      // The sender may copy part (shared_copy.hpp): the receive ends once its blocks are in.
      const shared_read read = share_and_read(
          segment_.board(rank_), copy_owner(from, offer.generation),
          peers_[static_cast<std::size_t>(from)].pid(), offer.address, target, bytes);
      if (read.sender_units > 0) {
        ++shared_copies_[0];
        parked_ = parked_copy{receive, offer, target, way, read.copied, read.sender_units};
        return true;
      }
      copied = read.copied;
    } else {
      copied = read_from_process(peers_[static_cast<std::size_t>(from)].pid(), offer.address,
                                 target, bytes);
    }
    if (end_by_cma(*receive, offer, way, copied)) return true;
  }
  ask_for_pieces(receive, offer, target, way);
  return true;
}

// A receiver's answer (fin, cts) to a large message's offer.
inline record answer_to(const queued_message& offer, record_kind kind) {
  record answer{};
  answer.kind = kind;
  answer.ticket = offer.ticket;
  answer.generation = offer.generation;
  answer.tag = offer.tag;
  return answer;
}

// Ends a receive whose message was copied by cma (`copied`: how that went), answering `fin`;
// false if the kernel refused (cma is then off, and the message is to come in pieces).
inline bool endpoint::end_by_cma(operation& op, const queued_message& offer, const large_way& way,
                                 cross_copy copied) {
  const int from = offer.source;
  const std::size_t bytes = offer.size;
  if (way.choice && copied == cross_copy::done) note_cost(*way.choice, bytes, way.since);
  if (copied == cross_copy::done || copied == cross_copy::bad_address) {
    const bool good = copied == cross_copy::done;
    ++ways_taken_[1];
    complete(op, {from, offer.tag, bytes,
                  good ? std::error_code{} : make_error_code(errc::protocol_violation)});
    record answer = answer_to(offer, record_kind::fin);
    answer.size = good ? 0 : static_cast<std::uint64_t>(errc::protocol_violation);
    send_control(from, answer);
    return true;
  }
  if (copied == cross_copy::process_gone) {
    // Once the segment marks it failed, depart() has said so (or will): one line per loss.
    if (segment_.slot(from).state.load(std::memory_order_acquire) == presence::present) {
      COMMX_LOG(warn, log_,
                "lost rank {}: its process was gone when copying a {}-byte message "
                "from it (process_vm_readv)",
                from, bytes);
    }
    complete(op, lost(from, bytes));
    return true;
  }
  cross_memory_ = false;  // refused after all: the ring from now on
  COMMX_LOG(info, log_,
            "the kernel refused reading rank {}'s memory (process_vm_readv): "
            "messages above {} bytes are copied through the ring from now on",
            from, eager_limit_);
  return false;
}

// Asks for a claimed large message in pieces through the ring (an empty one with a slot ends
// at once).
inline void endpoint::ask_for_pieces(const std::shared_ptr<operation>& receive,
                                     const queued_message& offer, std::byte* target,
                                     const large_way& way) {
  const int from = offer.source;
  operation& op = *receive;
  if (offer.ticket != no_ticket && offer.size == 0) {
    complete(op, {from, offer.tag, 0});
    send_control(from, answer_to(offer, record_kind::fin));
    return;
  }
  // Pieces follow the answer (an offer without a slot sends one empty piece for an empty
  // message: its sender alone knows whether it withdrew it first).
  op.target = target;
  op.progress = 0;
  op.generation = offer.generation;
  op.result = {from, offer.tag, offer.size};
  op.path_cell = way.choice && way.choice->counted ? way.choice->cell : -1;
  ++ways_taken_[0];
  op.since = way.since;
  transfers_[static_cast<std::size_t>(from)].put(offer.ticket, receive);
  send_control(from, answer_to(offer, record_kind::cts));
}

// Whether a large message of `bytes` from another rank is copied with its sender's help: it
// is worth it, the board is free (no copy waits for a sender's blocks, none was given up on),
// this rank has a core (where ranks share cores senders do not help: help_receivers), and the
// message goes one way. In an exchange both ends copy already, and the blocks a sender writes
// sit in its cache where the receiver reads them next: at 2 ranks, shared copies made
// allreduces of 1 MiB 1.6x and allgathers of 256 KiB 1.7x slower (bench/HISTORY.md).
inline bool endpoint::shares_copy(std::size_t bytes) const {
  return opts_.shared_copy && bytes >= shared_copy_from && !parked_ && !board_retired_ &&
         !waiting_.shares_core() && !sending_large();
}

// The parked copy, once its sender wrote the blocks it claimed or went: the receive ends (a
// block the sender gave back is read first), or, if the kernel refused cma, asks for pieces.
inline void endpoint::end_parked_copy() {
  parked_copy& p = *parked_;
  const int from = p.offer.source;
  copy_board& board = segment_.board(rank_);
  // A sender that wrote its blocks and then went still delivered them.
  const bool finished = sender_finished(board, p.sender_units);
  if (!finished && state_[static_cast<std::size_t>(from)] == presence::present) return;
  const parked_copy ended = std::move(*parked_);
  parked_.reset();
  cross_copy copied = finished ? ended.copied : cross_copy::process_gone;
  if (copied == cross_copy::done) {
    copied = read_given_back(board, peers_[static_cast<std::size_t>(from)].pid(),
                             ended.offer.address, ended.target, ended.offer.size);
  }
  if (ended.receive->done) return;  // cancelled meanwhile (endpoint::cancel)
  if (!end_by_cma(*ended.receive, ended.offer, ended.way, copied)) {
    ask_for_pieces(ended.receive, ended.offer, ended.target, ended.way);
  }
}

// The sender's side of shared copies: for each large offer a receiver is copying by cma now,
// claims blocks from the back and writes them (shared_copy.hpp). Not where ranks share cores:
// there the receiver would wait for a sender that is not running.
inline void endpoint::help_receivers() {
  std::erase_if(helpable_, [](const std::shared_ptr<operation>& op) { return op->done; });
  if (waiting_.shares_core()) return;
  for (const std::shared_ptr<operation>& op : helpable_) {
    const auto to = static_cast<std::size_t>(op->peer);
    if (state_[to] != presence::present) continue;
    const help_given helped = help_copy(segment_.board(op->peer), copy_owner(rank_, op->generation),
                                        peers_[to].pid(), op->payload);
    const cross_copy wrote = helped.wrote;
    if (helped.units > 0) {
      wake(op->peer);  // a receiver asleep while its copy waited for these blocks
      if (!op->shared) ++shared_copies_[1];
      op->shared = true;
    }
    if (wrote == cross_copy::refused || wrote == cross_copy::bad_address) {
      COMMX_LOG(info, log_,
                "the kernel refused writing into rank {}'s memory (process_vm_writev): "
                "receivers copy large messages alone from now on",
                op->peer);
      opts_.shared_copy = false;
      helpable_.clear();
      return;
    }
  }
}

// cma or pieces for a large message, and since when its cost counts. Without a ticket slot,
// without cma or under COMMX_SHM_LARGE=copy: pieces; our own messages and COMMX_SHM_LARGE=cma:
// cma. Under shape: cma in an exchange, pieces one way. Under auto (path_choice.hpp): one way,
// what this rank measured; in an exchange, what rank 0 measured and published, its cost counted
// from our offer (so that what each way lets overlap, a peer reading what we offered while we
// copy, counts). An exchange: the offer came while we had large sends in flight, or we made
// one while it waited. Neither moment alone tells: a peer a step ahead offers before we do,
// and one that reads by cma may have finished with ours by the time we take its offer.
inline endpoint::large_way endpoint::choose_large_way(const queued_message& offer, bool slotted) {
  const std::size_t bytes = offer.size;
  const bool cma_open = slotted && cross_memory_ && bytes != 0;
  if (!cma_open || offer.source == rank_ || !follows_shape(*opts_.large)) {
    return {cma_open, std::nullopt, {}};
  }
  const std::optional<clock::time_point> exchange_since =
      offer.crossed != clock::time_point{}   ? std::optional(offer.crossed)
      : large_offers_ != offer.offers_before ? std::optional(last_large_offer_)
                                             : std::nullopt;
  if (opts_.large == large_path::by_shape) return {exchange_since.has_value(), std::nullopt, {}};
  auto& published = segment_.header().exchange_way[path_choice::size_class(bytes)];
  if (exchange_since && rank_ != 0) {
    return {published.load(std::memory_order_relaxed) ==
                static_cast<std::uint8_t>(path_choice::way::cma),
            std::nullopt,
            {}};
  }
  const path_choice::decision choice =
      paths_.choose(bytes, exchange_since.has_value(), exchange_since.has_value());
  if (exchange_since) {
    published.store(static_cast<std::uint8_t>(choice.chosen), std::memory_order_relaxed);
  }
  return {choice.chosen == path_choice::way::cma, choice, exchange_since.value_or(clock::now())};
}

// At debug, when the endpoint closes: how its large messages came, and under auto what each
// way cost.
inline void endpoint::say_large_ways() const {
  if (opts_.large == large_path::automatic && cross_memory_) {
    COMMX_LOG(debug, log_, "large messages, what each way cost per byte: {}", paths_.describe());
  }
  if (ways_taken_[0] + ways_taken_[1] > 0) {
    COMMX_LOG(debug, log_, "large messages received: {} in pieces, {} by cma", ways_taken_[0],
              ways_taken_[1]);
  }
  if (shared_copies_[0] + shared_copies_[1] > 0) {
    COMMX_LOG(debug, log_,
              "copies shared: {} received with their sender's help, {} sent with this rank's",
              shared_copies_[0], shared_copies_[1]);
  }
}

inline void endpoint::arrive_clear_to_send(int from, const record& header) {
  auto* op = in_flight_[static_cast<std::size_t>(from)].find(header.ticket, header.generation);
  if (op == nullptr) return;  // withdrawn meanwhile
  queue_for(from);
  backlog_[static_cast<std::size_t>(from)]->urgent.push_back({outgoing::kind::pieces, {}, *op});
}

inline void endpoint::arrive_piece(int from, const record& header, const ring_consumer& ring) {
  transfer_table& table = transfers_[static_cast<std::size_t>(from)];
  auto* found = table.find(header.ticket, header.generation);
  if (found == nullptr) return;  // abandoned receive: drop it
  operation& op = **found;
  const std::size_t bytes = op.result.bytes;
  if (header.size > bytes || header.payload > bytes - header.size) {
    throw error(errc::protocol_violation,
                fmt::format("shm: rank {}: piece [{}, +{}) from rank {} is outside its {}-byte "
                            "message",
                            rank_, header.size, header.payload, from, bytes));
  }
  ring.read_payload(header, 0, op.target + header.size, header.payload);
  op.progress += header.payload;
  if (op.progress == bytes) {
    if (opts_.large == large_path::automatic) {
      // A sender streams one transfer after another: a transfer's time starts when its
      // receiver asked or when the one before it ended, whichever came later.
      clock::time_point& before = pieces_done_[static_cast<std::size_t>(from)];
      if (op.path_cell >= 0) {
        note_cost({path_choice::way::pieces, static_cast<std::uint16_t>(op.path_cell)}, bytes,
                  std::max(op.since, before));
      }
      before = clock::now();
    }
    complete(op, op.result);
    table.erase(header.ticket, header.generation);
  }
}

inline void endpoint::arrive_fin(int from, const record& header) {
  if (header.ticket == no_ticket) return;  // fin answers only an offer with a slot (cma)
  transfer_table& table = in_flight_[static_cast<std::size_t>(from)];
  auto* found = table.find(header.ticket, header.generation);
  if (found == nullptr) return;
  operation& op = **found;
  segment_.tickets(rank_, from)[op.ticket].store(ticket::free, std::memory_order_release);
  const auto failure = static_cast<errc>(header.size);
  complete(op, {from, op.tag, op.payload.size(),
                header.size == 0 ? std::error_code{} : make_error_code(failure)});
  table.erase(header.ticket, header.generation);
}

// The sender withdrew an offer without a slot: out of the queue if it is still there; a
// receive that matched it already fails as tcp's does when its message is revoked.
inline void endpoint::arrive_revoke(int from, const record& header) {
  transfer_table& table = transfers_[static_cast<std::size_t>(from)];
  if (auto* found = table.find(no_ticket, header.generation)) {
    operation& op = **found;
    complete(op, {from, op.result.tag, 0, make_error_code(errc::cancelled)});
    table.erase(no_ticket, header.generation);
    return;
  }
  unexpected_.remove_if([&](const queued_message& m) {
    return m.large && m.source == from && m.ticket == no_ticket &&
           m.generation == header.generation;
  });
}

// What a large message cost since `since`: one way, until now; in an exchange, until our own
// large sends are done too (progress() records it then), since the way chosen shifts work
// between our receive and our sends: a peer reading by cma spares us writing pieces. A later
// exchange's cost replaces one still waiting.
inline void endpoint::note_cost(path_choice::decision choice, std::size_t bytes,
                                clock::time_point since) {
  if (choice.exchange() && sending_large()) {
    exchange_cost_ = {choice, bytes, since};
  } else {
    paths_.record(choice, bytes, clock::now() - since);
  }
}

}  // namespace commx::detail::shm
