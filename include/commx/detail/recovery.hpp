// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Revocation, and what a rank does for recovery while it waits (recovery_state.hpp has the
/// channel and its tags).
///
/// `revoke()` is not collective: the revoking rank marks the communicator and sends a notice to
/// every other member. A member that takes one in marks it too and sends the notice on to its
/// neighbours in a binomial graph (ranks r +- 2^k, ULFM's choice for its reliable broadcast),
/// so the notice reaches every survivor although the revoking rank may die halfway through its
/// sends. Messages: p - 1 from the revoking rank, at most 2 log2(p) from each other member.
///
/// Nothing runs in the background: a rank takes notices in (and answers late questions about
/// the agreements it decided, recovery_state.hpp) in its waits, when something arrived since
/// it last looked (or it last looked for another communicator, or before its latest decision:
/// recovery_state::due) and `poll_gap` has passed, so a ping-pong's waits almost never look. A wait
/// on a revoked communicator then ends with errc::revoked; a rank that never waits on the
/// communicator again learns nothing, and needs nothing. Transports without recovery
/// (`recovers`: mpi and mpi+wan) never look.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include "commx/deadline.hpp"
#include "commx/detail/failures.hpp"
#include "commx/detail/rank_state.hpp"
#include "commx/detail/recovery_state.hpp"
#include "commx/detail/timeout.hpp"
#include "commx/log.hpp"
#include "commx/transport/concept.hpp"

namespace commx::detail {

/// The kinds of an agreement's messages (agreement.hpp), in their first byte.
enum class agreement_kind : std::uint8_t {
  report = 1,
  proposal,
  acknowledgement,
  decision,
  confirmation,  // all-to-all round 2: this rank computed the same outcome
  fallback,      // all-to-all round 2: this rank goes on with a coordinator
};

/// An acknowledgement carries nothing but its kind; it lives as long as any send of it.
inline constexpr std::array<std::byte, 1> acknowledgement_message{
    std::byte{static_cast<std::uint8_t>(agreement_kind::acknowledgement)}};

/// Grows a byte vector to a message's size (recovery's messages are a few bytes).
inline std::byte* grow_bytes(void* container, std::size_t bytes, std::error_code& /*ec*/) {
  auto& into = *static_cast<std::vector<std::byte>*>(container);
  into.resize(bytes);
  return into.data();
}

/// Takes in the message `found` said is queued on `channel`, into `into`; false if it could
/// not be taken at once (then nothing was taken).
template <transport::transport T>
bool take_queued(T& endpoint, const transport::op_result& found, context_id channel,
                 std::vector<std::byte>& into) {
  const transport::recv_buffer anything(static_cast<void*>(&into), &grow_bytes);
  typename T::request handle = endpoint.irecv(found.source, channel, found.tag, anything);
  if (endpoint.test(handle)) return !endpoint.result(handle).error;
  if (endpoint.cancel(handle)) return false;
  return !endpoint.result(handle).error;
}

/// Sends a revocation notice of `members` to each of `to` (ranks of `members`; this rank and
/// ranks known lost are skipped).
template <transport::transport T, stats::policy S>
void send_revocations(rank_state<T, S>& state, const group& members, std::span<const int> to) {
  const int me = state.endpoint.rank();
  std::vector<int> lost;
  if constexpr (transport::knows_failures<T>) lost = state.endpoint.failed_peers();
  for (const int local : to) {
    const int world = members.world_of(local);
    if (world == me || std::ranges::find(lost, world) != lost.end()) continue;
    state.recovery.keep(state.endpoint.isend(world, members.channel(), recovery_tag::revocation,
                                             std::span<const std::byte>()));
  }
}

/// The neighbours of local rank `me` in the binomial graph of `size` ranks: me +- 2^k.
inline std::vector<int> binomial_graph_neighbours(int me, int size) {
  std::vector<int> out;
  for (int step = 1; step < size; step *= 2) {
    for (const int r : {(me + step) % size, (me - step % size + size) % size}) {
      if (r != me && std::ranges::find(out, r) == out.end()) out.push_back(r);
    }
  }
  return out;
}

/// The recovery channel of `members`, if any: what a wait on it watches.
inline context_id channel_of(const group* members) {
  return members != nullptr ? members->channel() : no_channel;
}

/// One look (the file comment): reaps finished sends, answers late proposals of decided
/// agreements, and takes in `watched`'s revocation notices, passing the first on.
template <transport::transport T, stats::policy S>
void look_for_recovery(rank_state<T, S>& state, const group* watched, clock::time_point now) {
  T& endpoint = state.endpoint;
  // Counted before looking: what arrives while this looks is for the next look (counted after,
  // an arrival between a probe and the count would never be looked at).
  const std::uint64_t events = endpoint.event_count();
  if (state.recovery.sending()) state.recovery.reap(endpoint);
  std::vector<std::byte> message;
  for (const decided_agreement& d : state.recovery.decisions()) {
    // A late coordinator's proposal: acknowledged. A report to this rank as coordinator: the
    // decision goes back. Anything else of the agreement is stale.
    for (const int tag : {recovery_tag::down(d.number), recovery_tag::up(d.number)}) {
      for (std::optional<transport::op_result> found = endpoint.iprobe(any_source, d.channel, tag);
           found && !found->error; found = endpoint.iprobe(any_source, d.channel, tag)) {
        if (!take_queued(endpoint, *found, d.channel, message)) break;
        const auto kind =
            message.empty() ? agreement_kind{} : static_cast<agreement_kind>(message[0]);
        if (kind == agreement_kind::proposal) {
          COMMX_LOG(debug, log_context_of(endpoint),
                    "agreement {}, decided: acknowledges rank {}'s late proposal", d.number,
                    found->source);
          state.recovery.keep(endpoint.isend(found->source, d.channel, recovery_tag::up(d.number),
                                             std::span<const std::byte>(acknowledgement_message)));
        } else if (kind == agreement_kind::report) {
          COMMX_LOG(debug, log_context_of(endpoint),
                    "agreement {}, decided: answers rank {}'s late report with the decision",
                    d.number, found->source);
          // A copy of its own: the record may be reused while the send is in flight.
          auto decision = std::make_shared<const std::vector<std::byte>>(d.decision);
          auto sending = endpoint.isend(found->source, d.channel, recovery_tag::down(d.number),
                                        std::span<const std::byte>(*decision));
          state.recovery.keep(std::move(sending), std::move(decision));
        }
      }
    }
  }
  // The watched communicator's notices, and those of the one it is revoked along with.
  for (const group* g = watched; g != nullptr; g = g->revoked_along()) {
    for (std::optional<transport::op_result> found =
             endpoint.iprobe(any_source, g->channel(), recovery_tag::revocation);
         found && !found->error;
         found = endpoint.iprobe(any_source, g->channel(), recovery_tag::revocation)) {
      if (!take_queued(endpoint, *found, g->channel(), message)) break;
      if (g->mark_revoked()) {
        COMMX_LOG(debug, log_context_of(endpoint),
                  "communicator of context {} revoked: a notice from rank {}", g->channel(),
                  found->source);
        send_revocations(state, *g,
                         binomial_graph_neighbours(g->local_of(endpoint.rank()), g->size()));
      }
    }
  }
  state.recovery.looked(events, now, channel_of(watched));
}

/// What a wait does for recovery (the file comment), for request.hpp's wait_for and the
/// communicator's other waits: looks when it is due, says whether `members` (if given) is
/// revoked, and how long the wait may sleep before it must look. On a transport without
/// recovery, nothing and no cost.
template <transport::transport T, stats::policy S>
class recovery_watch {
 public:
  /// `wildcard`: the wait is an `any_source` receive on `members`, which a failure of one
  /// of them ends until acknowledged (failures.hpp).
  explicit recovery_watch(rank_state<T, S>& state, const group* members = nullptr,
                          bool revocable = true, bool wildcard = false)
      : state_(state), members_(members), revocable_(revocable), wildcard_(wildcard) {}

  /// Looks if due; true when the watched communicator is revoked and that ends the wait.
  bool revoked(std::uint64_t seen, clock::time_point now) {
    if constexpr (recovers<T>) {
      if (state_.recovery.due(seen, now, channel_of(members_))) {
        look_for_recovery(state_, members_, now);
      }
      return revocable_ && members_ != nullptr && members_->revoked();
    }
    return false;
  }
  /// True when the wait is a wildcard receive that an unacknowledged failure ends.
  [[nodiscard]] bool failure_pending() const {
    if constexpr (transport::knows_failures<T>) {
      return wildcard_ && members_ != nullptr && pending_failure(state_.endpoint, *members_);
    }
    return false;
  }
  /// Until when a wait that saw event count `seen` may sleep, at most `until`.
  [[nodiscard]] clock::time_point sleep_until(std::uint64_t seen, clock::time_point until) const {
    if constexpr (recovers<T>) return state_.recovery.wake_by(seen, until, channel_of(members_));
    return until;
  }

 private:
  rank_state<T, S>& state_;
  const group* members_;
  bool revocable_;
  bool wildcard_;
};

}  // namespace commx::detail
