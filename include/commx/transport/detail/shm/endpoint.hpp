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
/// or sees the claim and waits for the copy to finish), then either answers `cts` and the
/// sender streams `data` pieces through the ring, which the receiver copies into place as they
/// come (pipelined: both copy at once; COMMX_SHM_LARGE=copy, and where the kernel refuses cma),
/// or copies the payload itself with process_vm_readv and answers `fin` (the default), or takes
/// pieces one way and cma in an exchange (COMMX_SHM_LARGE=shape), or does whichever has cost
/// it less lately (COMMX_SHM_LARGE=auto, path_choice.hpp).
///
/// Every rank drains all its incoming rings whenever it makes progress, into posted receives or
/// into its private queue; a send that finds its ring full waits in a private outbox, in order,
/// until the receiver has made room. Nothing ever blocks on another rank's cooperation except a
/// large message, whose sender waits (without blocking anything else) for the receive. What the
/// queue holds of each sender's small messages is bounded by eager credit: beyond it they are
/// offered as large ones are (credit.hpp), and offers beyond the pair's ticket slots go out
/// without one (transfer_table.hpp), so no offer waits behind another.
///
/// Waiting: spin (long while the rank has a core of its own: waiting.hpp; where it shares one,
/// briefly and only if a rank it receives from is not itself yielding), yield a few turns,
/// then sleep on the rank's futex word. A rank that writes to a ring, or frees space in one,
/// wakes the other end if (and only if) it announced that it may sleep (an eager isend or a
/// drain looks without a fence and leaves the fenced look to the end of its next progress:
/// nudge() in endpoint_departures.hpp). Blocking calls make no request: an eager send is
/// written at once, and a receive waits on a recycled operation. Sleeps are capped at
/// the liveness period, after which the processes of the peers the rank waits on (and a few
/// others, in turn) are looked at: a process that is gone without saying goodbye is marked
/// failed in the segment and everyone is woken, so one rank's look serves them all.

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/log.hpp"
#include "commx/transport/detail/operation_pool.hpp"
#include "commx/transport/detail/shm/backlog.hpp"
#include "commx/transport/detail/shm/credit.hpp"
#include "commx/transport/detail/shm/cross_memory.hpp"
#include "commx/transport/detail/shm/futex.hpp"
#include "commx/transport/detail/shm/liveness.hpp"
#include "commx/transport/detail/shm/matching.hpp"
#include "commx/transport/detail/shm/path_choice.hpp"
#include "commx/transport/detail/shm/options.hpp"
#include "commx/transport/detail/shm/ring.hpp"
#include "commx/transport/detail/shm/segment.hpp"
#include "commx/transport/detail/shm/polled_senders.hpp"
#include "commx/transport/detail/shm/transfer_table.hpp"
#include "commx/transport/detail/shm/waiting.hpp"

namespace commx::detail::shm {

// The segment keeps rank 0's way for exchanges per size class (path_choice.hpp).
static_assert(std::tuple_size_v<decltype(segment_header::exchange_way)> ==
              path_choice::size_classes);

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
      : segment_(std::move(seg)),
        rank_(rank),
        size_(size),
        opts_(opts),
        sharing_(segment_.cpu_sharing_of(rank)),
        waiting_(opts.spin_rounds, opts.spin_budget, opts.yield_period, sharing_.ranks,
                 sharing_.cpus, resting_count()),
        log_{"shm", rank} {
    const auto n = static_cast<std::size_t>(size);
    const std::size_t ring = segment_.ring(0, 0).capacity();
    // A whole eager message must fit in a ring with room to spare; pieces are a quarter ring.
    const std::size_t threshold =
        opts_.large_threshold.value_or(options::threshold_by_load(sharing_.ranks, sharing_.cpus));
    eager_limit_ = std::min(threshold, ring / 2 - record_bytes(record_kind::rts, 0));
    chunk_ = std::min<std::size_t>(ring / 4, std::size_t{64} << 10);
    window_ = std::max<std::uint64_t>(opts_.eager_window, credit_cost(eager_limit_));
    producers_.resize(n);
    consumers_.resize(n);
    backlog_.resize(n);
    for (std::size_t p = 0; p < n; ++p) in_flight_.emplace_back(&offering_to_);
    transfers_.resize(n);
    pieces_done_.resize(n);
    credit_out_.resize(n);
    credit_in_.resize(n);
    generations_.assign(n, 0);
    owed_wakes_.reserve(n);
    announced_.assign(n, false);
    queued_.assign(n, false);
    peers_.resize(n);
    state_.assign(n, presence::present);
    for (int peer = 0; peer < size; ++peer) {
      const auto p = static_cast<std::size_t>(peer);
      if (peer != rank) {
        const rank_slot& slot = segment_.slot(peer);
        peers_[p] = process_watch(slot.pid.load(std::memory_order_acquire), slot.start_time);
      }
    }
    departures_seen_ = segment_.header().departures.load(std::memory_order_acquire);
    // Before this rank first sleeps: a rank that wakes it reads where it is counted at rest.
    segment_.slot(rank).rests_at.store(resting_count() != nullptr ? sharing_.group + 1 : 0,
                                       std::memory_order_relaxed);
    last_liveness_ = clock::now();
    opts_.liveness_period = liveness_period_for(opts_.liveness_period, sharing_);
    cma_required_ = opts_.large == large_path::cma;  // said, not the default
    if (!opts_.large) opts_.large = large_path::cma;
    probe_cross_memory();
    COMMX_LOG(debug, log_, "joined segment {}: {} ranks, {}-byte rings, messages above {} bytes {}",
              segment_.name(), size_, ring, eager_limit_,
              cross_memory_                     ? "copied once by cma (process_vm_readv)"
              : opts_.large == large_path::copy ? "copied through the ring (COMMX_SHM_LARGE=copy)"
                                                : "copied through the ring");
    COMMX_LOG(info, log_, "waiting {}", waiting_.describe());
  }

  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  /// Says goodbye: peers stop waiting for this rank (what it sent is still delivered).
  ~endpoint() {
    say_large_ways();
    leave(presence::finished);
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool cross_memory_enabled() const { return cross_memory_; }
  [[nodiscard]] std::array<std::uint64_t, 2> shared_copies() const { return shared_copies_; }
  /// What this rank holds of small messages nobody has asked for yet, each counted as its
  /// payload plus 64 bytes: at most the eager window per sender (credit.hpp).
  [[nodiscard]] std::size_t held_bytes() const { return held_bytes_; }
  [[nodiscard]] std::uint64_t eager_window() const { return window_; }
  [[nodiscard]] std::size_t eager_limit() const { return eager_limit_; }
  [[nodiscard]] bool waits_share_core() const { return waiting_.shares_core(); }
  [[nodiscard]] const std::string& segment_name() const { return segment_.name(); }
  /// Who speaks in this endpoint's log lines: `commx[rank 3 shm]`.
  [[nodiscard]] const log::context& log_context() const { return log_; }

  std::shared_ptr<operation> send(int to, context_id ctx, int tag,
                                  const std::span<const std::byte>& data) {
    const auto t = static_cast<std::size_t>(to);
    if (state_[t] != presence::present) {
      return completed(operation::kind::send, to, ctx, tag, lost(to, data.size()));
    }
    if (data.size() <= eager_limit_) {
      if (write_eager_now(to, ctx, tag, data)) {
        nudge(to);
        return nullptr;
      }
      auto op = new_operation(operation::kind::send, to, ctx, tag);
      op->payload = data;
      queue_for(to);  // progress() flushes what flush() cannot write now
      backlog_[t]->outbox.push_back(
          {outgoing::kind::eager, eager_record(ctx, tag, data.size()), op});
      flush(to);
      return op;
    }
    auto op = new_operation(operation::kind::send, to, ctx, tag);
    op->payload = data;
    queue_for(to);
    backlog_[t]->outbox.push_back({outgoing::kind::offer, offer_record(*op), op});
    flush(to);
    return op;
  }

  std::shared_ptr<operation> recv(int from, context_id ctx, int tag, const recv_buffer& buffer) {
    auto op = new_operation(operation::kind::recv, from, ctx, tag);
    op->buffer = buffer;
    start_recv(op);
    return op;
  }

  /// A blocking eager send that needs no request: written into the ring at once, or nullopt
  /// when it cannot be (a large message, a full ring, sends queued ahead of it).
  std::optional<op_result> send_blocking(int to, context_id ctx, int tag,
                                         std::span<const std::byte> data) {
    const auto t = static_cast<std::size_t>(to);
    if (state_[t] != presence::present) return lost(to, data.size());
    if (data.size() > eager_limit_ || !write_eager_now(to, ctx, tag, data)) return std::nullopt;
    wake(to);
    return op_result{to, tag, data.size()};
  }

  /// A blocking receive: as recv and waiting, on a recycled operation, reading no clock
  /// unless the first polls find nothing. errc::timeout once `until` passes (withdrawn). Out
  /// of line with the waits (endpoint_departures.hpp).
  op_result recv_blocking(int from, context_id ctx, int tag, const recv_buffer& buffer,
                          const deadline& until, clock::duration timeout);

  std::optional<op_result> probe(int from, context_id ctx, int tag) {
    senders_.cold_due();  // every ring: what arrived before the probe is found by it
    progress();
    for (auto at = unexpected_.find(from, ctx, tag); at != unexpected_.end();
         at = unexpected_.find(from, ctx, tag)) {
      const queued_message& queued = *at;
      if (!queued.large || still_offered(queued)) {
        return op_result{queued.source, queued.tag, queued.size};
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
        unpost(posted);
        complete(op, {op.peer, op.tag, 0, make_error_code(errc::cancelled)});
        return true;
      }
    } else {
      if (auto* held = backlog_[static_cast<std::size_t>(op.peer)].get()) {
        auto& queue = held->outbox;
        auto waiting = std::find_if(queue.begin(), queue.end(),
                                    [&](const outgoing& o) { return o.op.get() == &op; });
        if (waiting != queue.end()) {  // not in the ring yet
          queue.erase(waiting);
          complete(op, {op.peer, op.tag, 0, make_error_code(errc::cancelled)});
          return true;
        }
      }
      if (op.offered && withdraw(op)) return true;
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
  /// The peers found failed, in the order they were found (transport concept).
  [[nodiscard]] const std::vector<int>& failed_peers() const { return failed_; }

  /// Waits for an event past `seen` or until `when`: spins, yields, then sleeps on the futex
  /// (endpoint_departures.hpp).
  void wait_for_event(std::uint64_t seen, clock::time_point when);
  /// Whether a wait may spin before it yields: not where its core is shared (`shared_core`,
  /// waiting::shares_core) and every rank its receives name is itself yielding or asleep
  /// (endpoint_departures.hpp).
  [[nodiscard]] bool may_spin(bool shared_core) const;
  /// The count of the ranks at rest among those that may run on this rank's CPUs, where it is
  /// kept (cpu_sharing.hpp): bumped for a sleep (at_rest) and for good when the rank leaves.
  [[nodiscard]] std::atomic<std::uint32_t>* resting_count() const {
    const bool crowded = sharing_.group >= 0 && sharing_.ranks > sharing_.cpus;
    return crowded ? &segment_.rest_count(sharing_.group) : nullptr;
  }

  /// Progress without waiting: the rings drained, and the peers' liveness checked when due.
  void poll() {
    senders_.cold_due();  // every ring: a layered stack's look at the level it does not wait on
    progress();
    if (clock::now() - last_liveness_ >= opts_.liveness_period) check_liveness();
  }

  /// Marks this rank failed (rather than finished): its peers count it in failed_peers().
  void fail() { leave(presence::failed); }
  /// Declares a live `peer` failed (transport concept): marked so in the segment, every rank
  /// departs it, and it, resumed, finds itself marked (endpoint_departures.hpp).
  void exclude(int peer, std::string_view why);

 private:
  static record eager_record(context_id ctx, int tag, std::size_t bytes) {
    record header{};
    header.kind = record_kind::eager;
    header.payload = static_cast<std::uint32_t>(bytes);
    header.tag = tag;
    header.ctx = ctx;
    return header;
  }

  static record offer_record(const operation& op) {
    record header{};
    header.kind = record_kind::rts;
    header.tag = op.tag;
    header.ctx = op.ctx;
    header.size = op.payload.size();
    header.address = reinterpret_cast<std::uint64_t>(op.payload.data());
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
    auto op = new_operation(k, peer, ctx, tag);
    complete(*op, result);
    return op;
  }

  // The eager fast path, isend's and send_blocking's: nothing queued ahead of the message,
  // room in the ring and credit at the receiver, so it is written now; false (nothing done)
  // otherwise.
  bool write_eager_now(int to, context_id ctx, int tag, std::span<const std::byte> data) {
    const auto t = static_cast<std::size_t>(to);
    if (!announced_[t]) announce(to);
    if ((backlog_[t] && !backlog_[t]->outbox.empty()) ||
        !producers_[t].fits(record_kind::eager, data.size()) ||
        !credit_out_[t].take(credit_cost(data.size()), producers_[t], window_)) {
      return false;
    }
    producers_[t].write(eager_record(ctx, tag, data.size()), data);
    return true;
  }

  // The rings a rank uses are set up on first use, and a receiver polls only its senders'
  // (endpoint_outgoing.hpp, endpoint_arrivals.hpp).
  void announce(int to);
  void find_senders();
  void queue_for(int to);

  // The user took a small message from `from`, as it arrived or (took_held) out of the queue:
  // its credit goes back to the sender.
  void took(int from, std::size_t bytes) {
    const auto f = static_cast<std::size_t>(from);
    credit_in_[f].give_back(credit_cost(bytes), consumers_[f], window_);
  }
  void took_held(int from, std::size_t bytes) {
    held_bytes_ -= credit_cost(bytes);
    took(from, bytes);
  }

  // Matches the receive `op` against the messages queued, or posts it (endpoint_arrivals.hpp).
  void start_recv(const std::shared_ptr<operation>& op);

  // Posted receives, and how many take any source: while one does, every poll looks at a
  // chunk of the cold senders (polled_senders.hpp).
  void post(const std::shared_ptr<operation>& op, bool first = false) {
    if (op->peer == any_source) ++any_source_posted_;
    first ? posted_.push_front(op) : posted_.push_back(op);
  }
  using posted_receives = std::deque<std::shared_ptr<operation>>;
  posted_receives::iterator unpost(posted_receives::iterator at) {
    if ((*at)->peer == any_source) --any_source_posted_;
    if (at != posted_.begin()) return posted_.erase(at);
    posted_.pop_front();  // the usual case, and cheaper than erase
    return posted_.begin();
  }

  // Operations are recycled (detail/operation_pool.hpp).
  std::shared_ptr<operation> new_operation(operation::kind k, int peer, context_id ctx, int tag) {
    return pool_.take(k, peer, ctx, tag);
  }

  // Records to `peer` waiting for room in its ring (its backlog is made on first use).
  [[nodiscard]] bool backlogged(std::size_t peer) const {
    return backlog_[peer] && !backlog_[peer]->empty();
  }

  // Waking, liveness and peers that go (endpoint_departures.hpp).
  /// Takes the sleeping rank of `slot` off its CPUs' rest count, if it is on it: once woken,
  /// it crowds its core (at_rest, endpoint_departures.hpp).
  void take_off_rest(rank_slot& slot);
  void wake(int peer);
  void nudge(int peer);
  void settle_wakes();
  void wake_everyone();
  bool incoming(bool every_sender = false);
  void drain_cold(bool all);
  void leave(presence how);
  void check_liveness();
  void look_at(int peer, bool exact = false);
  void check_departures(bool force = false);
  void depart(int peer, presence how, std::string_view found);
  std::optional<op_result> lost_source(int from) const;

  // Progress: draining the rings and acting on each record (endpoint_arrivals.hpp).
  struct large_way {
    bool by_cma = false;
    std::optional<path_choice::decision> choice;  // none: nothing to measure
    clock::time_point since{};
  };
  void progress();
  void drain(int peer, std::size_t limit);
  void arrive(int from, const record& header, const ring_consumer& ring);
  void arrive_eager(int from, const record& header, const ring_consumer& ring);
  void arrive_offer(int from, const record& header);
  bool still_offered(const queued_message& offer) const;
  bool claim(const queued_message& offer);
  bool take_offer(const std::shared_ptr<operation>& receive, const queued_message& offer,
                  std::byte* target, bool claimed = false);
  void arrive_clear_to_send(int from, const record& header);
  void arrive_piece(int from, const record& header, const ring_consumer& ring);
  void arrive_fin(int from, const record& header);
  bool end_by_cma(operation& op, const queued_message& offer, const large_way& way,
                  cross_copy copied);
  void ask_for_pieces(const std::shared_ptr<operation>& receive, const queued_message& offer,
                      std::byte* target, const large_way& way);
  // Large messages copied by both ends (shared_copy.hpp, endpoint_arrivals.hpp).
  [[nodiscard]] bool shares_copy(std::size_t bytes) const;
  void end_parked_copy();
  void help_receivers();
  void arrive_revoke(int from, const record& header);
  [[nodiscard]] bool sending_large() const { return offering_to_ > 0; }  // offers in flight
  void note_cost(path_choice::decision choice, std::size_t bytes, clock::time_point since);
  large_way choose_large_way(const queued_message& offer, bool slotted);
  void say_large_ways() const;
  static constexpr std::size_t drain_limit = 1024;

  // Writing to the rings, withdrawing, and the large-message path at start-up
  // (endpoint_outgoing.hpp).
  bool withdraw(operation& op);
  void forget(const operation& op);
  void send_control(int to, const record& header);
  void flush(int to);
  void write_queue(int to, std::deque<outgoing>& queue, bool& wrote);
  bool write_pieces(int to, operation& op);
  void probe_cross_memory();

  // Declared first: every container below holds operations the pool made.
  commx::detail::operation_pool<operation> pool_;
  segment segment_;
  int rank_;
  int size_;
  options opts_;
  cpu_sharing sharing_;  // how many of the segment's ranks may run on this rank's CPUs
  waiting waiting_;
  std::size_t eager_limit_ = 0;
  std::size_t chunk_ = 0;  // the largest piece of a large message through the ring
  static constexpr std::size_t min_chunk = std::size_t{8} << 10;
  std::uint64_t window_ = 0;    // eager credit per pair (credit.hpp)
  std::size_t held_bytes_ = 0;  // small messages queued, as credit counts them
  bool cross_memory_ = false;
  bool cma_required_ = false;  // COMMX_SHM_LARGE=cma: start-up fails without it
  bool left_ = false;

  std::vector<ring_producer> producers_;           // to each peer
  std::vector<ring_consumer> consumers_;           // from each peer
  std::vector<std::unique_ptr<backlog>> backlog_;  // to each peer, made on first use
  std::vector<transfer_table> in_flight_;          // our offers to each peer
  std::size_t offering_to_ = 0;                    // peers whose in_flight_ table holds one
  std::vector<transfer_table> transfers_;          // pieces coming from each peer
  path_choice paths_;                              // cma or pieces, when both are open (auto)
  std::array<std::uint64_t, 2> ways_taken_{};      // large messages received: in pieces, by cma
  std::vector<clock::time_point> pieces_done_;     // from each peer, the last transfer's end
  // Under auto and shape, to tell an exchange: offers we made, when the last was, and when the
  // large sends we have in flight began (since the last time we had none).
  std::uint64_t large_offers_ = 0;
  clock::time_point last_large_offer_{};
  clock::time_point sending_since_{};
  struct exchange_cost {
    path_choice::decision choice;
    std::size_t bytes;
    clock::time_point since;
  };
  std::optional<exchange_cost> exchange_cost_;  // waiting for our own sends (note_cost)
  std::vector<credit_to_send> credit_out_;
  std::vector<credit_to_return> credit_in_;
  std::vector<std::uint64_t> generations_;
  std::vector<int> owed_wakes_;  // peers nudge() could not be sure were awake
  // Whom this rank polls: the senders whose bits it has seen in its senders words (one look
  // at its slot's senders_changed tells if there is anyone new; polled_senders.hpp), and
  // whether it has set its own bit at each peer.
  polled_senders senders_{static_cast<std::size_t>(size_)};
  std::vector<bool> announced_;
  std::uint32_t senders_seen_ = 0;
  // The peers whose outbox or urgent queue may hold something, each once (queued_).
  std::vector<int> queued_peers_;
  std::vector<bool> queued_;
  std::vector<process_watch> peers_;
  std::vector<presence> state_;
  posted_receives posted_;  // post() and unpost() keep the count below
  int any_source_posted_ = 0;
  // Large messages that receives matched when posted, claimed, copied at the next progress()
  // (endpoint_arrivals.hpp).
  struct claimed_offer {
    std::shared_ptr<operation> receive;
    queued_message offer;
    std::byte* target;
  };
  std::deque<claimed_offer> claimed_;
  // A copy shared with its sender that waits for the sender's blocks (at most one: the board is
  // the rank's), and our offers whose receivers may be sharing theirs.
  struct parked_copy {
    std::shared_ptr<operation> receive;
    queued_message offer;
    std::byte* target;
    large_way way;
    cross_copy copied;  // how this rank's own blocks went
    std::uint64_t sender_units;
  };
  std::optional<parked_copy> parked_;
  std::array<std::uint64_t, 2> shared_copies_{};  // received with the sender's help, sent helping
  bool board_retired_ = false;  // a parked copy was given up on: its sender may still write
  std::vector<std::shared_ptr<operation>> helpable_;
  unexpected_queue unexpected_;
  std::vector<int> failed_;  // in the order they were found failed
  bool cut_off_ = false;     // the others declared this rank lost (exclude)
  std::uint64_t events_ = 0;
  std::uint32_t departures_seen_ = 0;
  clock::time_point last_liveness_;
  std::optional<std::uint64_t> slept_idle_at_;  // events_ when a sleep ended finding nothing
  int next_watched_ = 0;                        ///< the peer check_liveness looks at in turn
  unsigned idle_polls_ = 0;
  log::context log_;
};

}  // namespace commx::detail::shm

// The endpoint's larger parts, out of line (each includes this header first).
#include "commx/transport/detail/shm/endpoint_arrivals.hpp"    // IWYU pragma: export
#include "commx/transport/detail/shm/endpoint_departures.hpp"  // IWYU pragma: export
#include "commx/transport/detail/shm/endpoint_outgoing.hpp"    // IWYU pragma: export
