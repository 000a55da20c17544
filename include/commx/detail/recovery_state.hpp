// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What a rank keeps for recovery after a failure (communicator::revoke, agree, shrink): the
/// channel each communicator's notices and agreements travel on, the sends it has in flight
/// for them, and the agreements it has decided but may still have to answer for.
///
/// Each communicator has one recovery channel: its point-to-point context with the top bit
/// set, a context no communicator is ever given (ids count up from 0 in pairs), so recovery's
/// messages never meet a user's, and need nothing of the transport but messages. On it:
///
/// | tag | message |
/// |---|---|
/// | 0 | a revocation notice (no payload) |
/// | 1 + 3 (n mod 2^28) | agreement n, coordinator to participant (agreement.hpp) |
/// | 2 + 3 (n mod 2^28) | agreement n, participant to coordinator |
/// | 3 + 3 (n mod 2^28) | agreement n, rank to rank (its all-to-all rounds) |
///
/// Why a rank answers for agreements it has left: when a coordinator dies while it sends its
/// decision (agreement.hpp), the ranks it told have returned, and the others go on: a new
/// coordinator needs every survivor's acknowledgement, also theirs, and the new coordinator
/// may itself be one of them. Those ranks answer from their waits (recovery.hpp): a proposal
/// with an acknowledgement, a report with the decision. They do so for the last agreements
/// they decided: `kept_decisions` of them, across communicators, each
/// kept until that many more were decided. A rank that has decided agreement n of a
/// communicator is asked about n only while n is still open somewhere; once agreement n + 1
/// of the same communicator has decided, every survivor took part in it, so nobody still
/// waits in n.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "commx/deadline.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail {

/// Whether a transport can carry recovery: it tells failures, and takes any context id (a
/// transport that makes its communicators itself, as mpi and mpi+wan do with MPI_Comm_split,
/// knows only the contexts it made, and a job on it ends as a whole when its MPI's does).
template <class T>
concept recovers = transport::knows_failures<T> && !requires(T & t) {
  t.split(context_id{}, 0, 0, context_id{});
};

/// The context of the recovery channel of the communicator on contexts `ctx`, `ctx` + 1.
constexpr context_id recovery_channel(context_id ctx) { return ctx | (context_id{1} << 63); }
/// No communicator's recovery channel (each has the top bit set): a wait on none.
inline constexpr context_id no_channel = 0;

/// Tags on a recovery channel (the file comment's table).
struct recovery_tag {
  static constexpr int revocation = 0;
  static constexpr std::uint32_t agreement_numbers = std::uint32_t{1} << 28;
  static int down(std::uint32_t agreement) {
    return 1 + 3 * static_cast<int>(agreement % agreement_numbers);
  }
  static int up(std::uint32_t agreement) { return down(agreement) + 1; }
  static int among(std::uint32_t agreement) { return down(agreement) + 2; }
};

/// An agreement this rank decided: enough to acknowledge a late coordinator's proposal, and to
/// give the decision to a participant that takes this rank for its coordinator.
struct decided_agreement {
  context_id channel = 0;
  std::uint32_t number = 0;
  std::vector<std::byte> decision;  // the decision message
};

/// One rank's recovery bookkeeping, shared by all its communicators (rank_state).
template <transport::transport T>
class recovery_state {
 public:
  /// How many decided agreements a rank still answers for (the file comment).
  static constexpr std::size_t kept_decisions = 16;
  /// How often, at most, a wait looks for notices and late questions: often enough that a
  /// revocation reaches a waiting rank within a millisecond, rarely enough that a stream of
  /// small messages pays nothing measurable (it looks only when something arrived since; a
  /// look probes the transport, which on tcp may read its sockets).
  static constexpr clock::duration poll_gap = std::chrono::milliseconds(1);
  /// How long a transport's own blocking send or receive (which cannot look) may wait before
  /// the communicator goes on with a request (detail/communicator_p2p.hpp).
  static constexpr clock::duration blocking_slice = std::chrono::milliseconds(1);

  /// How long an agreement waits for a silent rank before declaring it lost, where the
  /// transport can (options::suspect_after); none: until the deadline.
  std::optional<clock::duration> suspect_after;

  /// Whether a wait on the communicator with recovery channel `channel` (`no_channel`: none)
  /// that saw event count `seen` at `now` should look now. A look is owed when something
  /// arrived since the last one, and also when the last looked on behalf of another
  /// communicator (it took in only that one's notices: one for this communicator may be
  /// queued since) or came before the latest decision (a question about that agreement may
  /// have arrived before it was decided, and been left unanswered). Without the last two, a
  /// wait in which nothing more arrives would never look at what is queued.
  [[nodiscard]] bool due(std::uint64_t seen, clock::time_point now, context_id channel) const {
    return owed(seen, channel) && now - polled_at_ >= poll_gap;
  }
  /// Until when such a wait may sleep before it must look, at most `until`.
  [[nodiscard]] clock::time_point wake_by(std::uint64_t seen, clock::time_point until,
                                          context_id channel) const {
    if (!owed(seen, channel)) return until;
    return std::min(until, polled_at_ + poll_gap);
  }
  /// A look has been taken at `now` for the communicator on `channel`; the endpoint's event
  /// count was then `events`.
  void looked(std::uint64_t events, clock::time_point now, context_id channel) {
    polled_events_ = events;
    polled_at_ = now;
    polled_channel_ = channel;
  }

  /// Remembers agreement `number` on `channel`, decided (the oldest beyond `kept_decisions` is
  /// forgotten, its record reused: an agreement allocates nothing here); the next wait looks,
  /// whatever arrived since (`due`).
  void decided(context_id channel, std::uint32_t number, std::span<const std::byte> decision) {
    if (decisions_.size() < kept_decisions) decisions_.emplace_back();
    decided_agreement& record = decisions_[oldest_];
    oldest_ = (oldest_ + 1) % kept_decisions;
    record.channel = channel;
    record.number = number;
    record.decision.assign(decision.begin(), decision.end());
    polled_events_ = never_polled;
  }
  /// The decided agreements remembered, in no particular order.
  [[nodiscard]] std::span<const decided_agreement> decisions() const { return decisions_; }

  /// Keeps a send (a notice, an acknowledgement, a decision) until it completes, with what
  /// holds its payload if anything must; `test` them in a look.
  void keep(typename T::request&& sending, std::shared_ptr<const void> payload = {}) {
    sending_.push_back({std::move(sending), std::move(payload)});
  }
  /// Drops the sends that completed, successfully or not (a dead peer needs no notice).
  void reap(T& endpoint) {
    std::erase_if(sending_, [&](kept& k) { return endpoint.test(k.request); });
  }
  [[nodiscard]] bool sending() const { return !sending_.empty(); }
  /// Withdraws the sends still in flight, as the rank leaves (a request is cancelled before it
  /// is destroyed).
  void abandon(T& endpoint) noexcept {
    for (kept& k : sending_) {
      try {
        if (!endpoint.test(k.request)) (void)endpoint.cancel(k.request);
      } catch (...) {  // a transport that failed as the rank leaves: nothing left to withdraw
      }
    }
    sending_.clear();
  }

 private:
  struct kept {
    typename T::request request;
    std::shared_ptr<const void> payload;
  };

  static constexpr std::uint64_t never_polled = ~std::uint64_t{0};

  [[nodiscard]] bool owed(std::uint64_t seen, context_id channel) const {
    return seen != polled_events_ || channel != polled_channel_;
  }

  std::uint64_t polled_events_ = never_polled;
  clock::time_point polled_at_{};
  context_id polled_channel_ = no_channel;
  std::vector<decided_agreement> decisions_;
  std::size_t oldest_ = 0;  // the record the next decision replaces, once all are in use
  std::vector<kept> sending_;
};

}  // namespace commx::detail
