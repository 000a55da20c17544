// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// communicator::agree's protocol: uniform agreement among the survivors, on a value and on the
/// set of lost ranks, while ranks keep dying (a rotating coordinator with ballots, the
/// "hierarchical uniform consensus" of Cachin, Guerraoui and Rodrigues, 5.4).
///
/// The coordinator is the lowest rank not known lost; a rank that finds its coordinator lost
/// takes the next. Ballot b + 1 is coordinator b's, so later coordinators hold larger ballots.
///
/// | step | who | what |
/// |---|---|---|
/// | report | each participant, to every coordinator it takes | its value, the ranks it knows lost, the proposal it accepted last (if any) |
/// | propose | the coordinator | if it accepted a proposal, that one; else, from every report (a rank lost meanwhile is added to the lost), the one with the highest ballot if any carries one, otherwise the op of all values and the union of all lost |
/// | acknowledge | each participant | accepts the proposal (it replaces any older one) |
/// | decide | the coordinator, once every rank it proposed to acknowledged or was lost | each participant returns the decision (it carries the proposal); a rank in its lost set that reported (alive, but cut off from others) is sent it too, and learns it is out |
///
/// Why uniform: a decision is sent only after every survivor accepted the proposal, so once
/// any rank has returned (and may then die), every survivor holds that proposal, and a later
/// coordinator, which holds it too, proposes it again without asking. A coordinator that
/// holds nothing knows that nobody has returned, so everyone it waits for is still in the
/// agreement and reports. Ranks that returned still answer, from their waits
/// (recovery_state.hpp): a late proposal with an acknowledgement, and a report (they may be the
/// lowest survivor, so the coordinator the others now take) with the decision.
///
/// The value and the lost set are decided together: a rank that died before its report
/// reached the coordinator is in the set at every rank that returns; one that died later
/// contributed its value and is not (the next agreement finds it). Ops must give the same
/// result when a contribution arrives twice (and, or, min, max), so that a later protocol that
/// folds in partial results (a tree) may use the same ops.
///
/// Up to `disseminated_ranks` (4) ranks, an agreement without failures takes two phases of
/// dissemination instead (Hensgen, Finkel and Manber's barrier, radix k): in each round every
/// rank sends to the ranks m k^j after it and hears from those m k^j before it (m < k), so that
/// after ceil(log_k p) rounds each has heard, through others, from all. In phase one the
/// messages are reports, what a rank has combined so far; a rank that has heard from all, none
/// knowing a loss, holds the outcome (ballot 0, below every coordinator's). Phase two confirms,
/// the same way, that every rank holds it, and a rank returns once it has heard so from all:
/// every survivor then holds the outcome, and a coordinator, if one is needed, proposes it
/// again. A rank that meets a loss, a report that knows one, or a fallback, tells each rank
/// that still waits for a message of its own that it falls back, and all go on with the
/// coordinator, holding the outcome if they computed it. Where memory joins every member
/// (inproc; shm on one node) the radix is p: two all-to-all rounds, since rounds cost more
/// than messages there; where a network joins some, the radix with the fewest messages (2 at
/// 4 ranks: 0.8x the all-to-all's time on tcp, bench/README.md).
///
/// Two ranks that memory joins skip phase two when no suspicion time is set: each returns once
/// it has the other's report. A send that completed is delivered although its sender then
/// dies (transport/concept.hpp), nothing partitions them, and no live rank is declared lost,
/// so the rank that returned (and may then die) had sent its report, and the other gets it or
/// dies itself. A rank declared lost while its report was on its way could return while the
/// other decided it lost: with a suspicion time, or over a network, phase two stays.
///
/// Cost without failures: up to 4 ranks, two phases (one, as above, at 2 ranks) of
/// ceil(log_k p) rounds, each of p o messages (o, the ranks one sends to: p - 1 all to all, 2
/// at radix 2 among 4): a report of the value's size in phase one, an empty confirmation in
/// phase two (agreement_wire.hpp); beyond, 4 (p - 1) messages of 16 + p/8 bytes, all to or
/// from the coordinator (report, propose, acknowledge, decide): four latencies and p - 1
/// messages through one rank at each. A coordinator's loss adds a round of reports to the
/// next one.
///
/// The failure detector is the transport's: a receive from a rank that is gone ends with
/// errc::peer_lost. A rank that stays silent (stalled, or across a partition) holds the
/// agreement until the deadline (errc::timeout), unless a suspicion time is set
/// (options::suspect_after) and the transport can declare a live rank lost
/// (`transport::excludes_peers`): then a receive that waited that long declares its sender
/// lost at this rank, and the agreement goes on as if it had died. Two sides of a partition
/// each declare the other lost; shrink's majority rule leaves at most one of them working.
///
/// COMMX_LOG=debug tells what happened where a run left the common path: a fallback and why,
/// a coordinator taken or lost, a proposal, each decision (one line per rank and agreement,
/// never one per message), and recovery.hpp's late answers; ranks are the job's (world) ranks.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory_resource>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commx/deadline.hpp"
#include "commx/detail/agreement_wire.hpp"
#include "commx/detail/rank_bits.hpp"
#include "commx/detail/rank_state.hpp"
#include "commx/detail/recovery.hpp"
#include "commx/detail/timeout.hpp"
#include "commx/error.hpp"
#include "commx/log.hpp"
#include "commx/ops.hpp"
#include "commx/request.hpp"
#include "commx/transport/concept.hpp"

namespace commx {

/// The ops agree takes: those whose result does not change when a contribution is counted
/// twice.
template <class Op>
concept agreement_op = std::is_same_v<Op, std::bit_and<>> || std::is_same_v<Op, std::bit_or<>> ||
    std::is_same_v<Op, op::min> || std::is_same_v<Op, op::max>;

/// What `agree` returns, the same at every rank that returns: the value, and the ranks lost
/// (in rank order).
template <class V>
struct agreement {
  V value{};              ///< the op of the survivors' values (and of ranks lost later)
  std::vector<int> lost;  ///< ranks that failed before they contributed, in rank order
};

namespace detail {

/// One rank's run of agreement `number` on `members` (see the file comment).
template <transport::transport T, stats::policy S, class V, class Op>
class agreement_run {
 public:
  agreement_run(rank_state<T, S>& state, const group& members, int me, std::uint32_t number,
                V value, Op op, deadline until, clock::duration default_timeout)
      : state_(state),
        members_(members),
        me_(me),
        number_(number),
        op_(op),
        deadline_(until),
        default_timeout_(default_timeout),
        value_(value),
        lost_(members.size()),
        heard_(members.size()),
        inbox_(fresh(message_bytes())) {
    if constexpr (transport::knows_failures<T>) {
      for (const int world : state.endpoint.failed_peers()) {
        const int local = members.local_of(world);
        if (local >= 0) lost_.insert(local);
      }
    }
  }

  agreement_run(const agreement_run&) = delete;
  agreement_run& operator=(const agreement_run&) = delete;
  // A send still in flight when an error ends the run is withdrawn before it is destroyed.
  ~agreement_run() {
    for (sending& s : outgoing_) {
      try {
        if (!state_.endpoint.test(s.handle)) (void)state_.endpoint.cancel(s.handle);
      } catch (...) {  // the transport failed too: nothing left to withdraw
      }
    }
  }

  agreement<V> run() {
    std::optional<proposal> decided;
    // The others declared this rank lost (its transport says so, transport::excludes_peers):
    // it takes no part, and its outcome names it lost (shrink: errc::excluded).
    if (lost_.contains(me_)) decided = mine();
    if (!decided && members_.size() <= disseminated_ranks) decided = disseminate();
    if (!decided) decided = take_part();
    // Declared lost while it took part (a stall that ended inside the agreement): every other
    // rank was lost to it and it decided alone, but it is out all the same.
    if (!decided->lost.none() && !decided->lost.contains(me_) && declared_lost()) {
      decided->lost.insert(me_);
    }
    COMMX_LOG(debug, log_context_of(state_.endpoint), "agreement {} decided (ballot {}): lost [{}]",
              number_, decided->ballot, fmt::join(world_ranks(decided->lost), ", "));
    const std::span<const std::byte> decision = encode(agreement_kind::decision, *decided);
    state_.recovery.decided(members_.channel(), number_, decision);
    agreement<V> out{decided->value, {}};
    for (int r = 0; r < members_.size(); ++r) {
      if (decided->lost.contains(r)) out.lost.push_back(r);
    }
    return out;
  }

 private:
  // Up to this many ranks, agreements start with two phases of dissemination (the file
  // comment). At 8 ranks on 2 cores the coordinator's 4 (p - 1) messages took 0.6x the time of
  // two all-to-all rounds, and 0.7x (shm) and 0.65x (tcp) that of six rounds of radix 2.
  static constexpr int disseminated_ranks = 4;

  using proposal = agreement_proposal<V>;
  using wire = agreement_wire<V>;

  [[nodiscard]] std::size_t message_bytes() const { return wire::whole_bytes(members_.size()); }
  // Whether the transport holds this rank itself failed: the others declared it lost.
  [[nodiscard]] bool declared_lost() const {
    if constexpr (transport::knows_failures<T>) {
      const std::vector<int> failed = state_.endpoint.failed_peers();
      return std::ranges::find(failed, members_.world_of(me_)) != failed.end();
    }
    return false;
  }

  // Two phases of k-ary dissemination (the file comment): in each round every rank sends to
  // the ranks m k^j after it and hears from those m k^j before it (m = 1 .. k - 1), so after
  // ceil(log_k p) rounds each has heard, through others, from all. Phase one carries reports
  // (what a rank has combined so far); a rank that has them all, none knowing a loss, holds
  // the outcome (ballot 0) and phase two confirms that every rank does, so that a rank returns
  // only once every survivor holds it. Anything else (a loss, a report that knows one, a
  // fallback) ends the rounds: the rank tells each rank that still waits for a message of its
  // own, and goes on with a coordinator, holding the outcome if it computed one. Op results do
  // not change when a contribution arrives twice (agreement_op), so overlapping reach is fine.
  std::optional<proposal> disseminate() {
    const int p = members_.size();
    const bool networked = network_joins(state_.endpoint, members_);
    const int k = radix(networked);
    const int tag = recovery_tag::among(number_);
    rank_bits confirmed_to(p);  // sent its phase-two message: waits for nothing more of ours
    // `r` (none: -1) is the rank whose message, or silence, ended the rounds.
    const auto fall_back = [&](int r, std::string_view why) -> std::optional<proposal> {
      if (r >= 0) {
        COMMX_LOG(debug, log_context_of(state_.endpoint),
                  "agreement {}: falls back to a coordinator: rank {} {}", number_,
                  members_.world_of(r), why);
      } else {
        COMMX_LOG(debug, log_context_of(state_.endpoint),
                  "agreement {}: falls back to a coordinator: ranks [{}] {}", number_,
                  fmt::join(world_ranks(lost_), ", "), why);
      }
      const std::span<const std::byte> message = encode(agreement_kind::fallback, mine());
      for (int step = 1; step < p; step *= k) {
        for_each_offset(step, k, p, [&](int o) {
          const int r = (me_ + o) % p;
          if (!confirmed_to.contains(r) && !lost_.contains(r)) send(r, tag, message);
          confirmed_to.insert(r);  // told once is enough
        });
      }
      return std::nullopt;
    };
    if (!lost_.none()) return fall_back(-1, "known lost before it began");
    proposal outcome = mine();
    // Round i's senders are suspected (i + 1) S after the rounds began: a sender may have
    // waited up to S in each of its own i rounds before (on a silent rank, which it then
    // suspects and falls back), and must not look silent itself.
    const std::optional<clock::duration>& suspect = state_.recovery.suspect_after;
    const clock::time_point began = suspect ? clock::now() : clock::time_point{};
    int round = 0;
    for (const agreement_kind kind : {agreement_kind::report, agreement_kind::confirmation}) {
      if (kind == agreement_kind::confirmation) {
        outcome.ballot = 0;
        accepted_ = outcome;
        if (one_exchange_decides(networked)) break;
      }
      std::span<const std::byte> message;  // a confirmation is empty
      for (int step = 1; step < p; step *= k) {
        if (kind == agreement_kind::report) message = encode_value(outcome.value);
        for_each_offset(step, k, p, [&](int o) {
          const int r = (me_ + o) % p;
          send(r, tag, message);
          if (kind == agreement_kind::confirmation) confirmed_to.insert(r);
        });
        ++round;
        if (suspect) suspect_by_ = began + round * *suspect;
        for (int o = step; o < round_end(step, k, p); o += step) {
          const int r = (me_ - o + p) % p;
          const std::optional<std::span<const std::byte>> m = receive(r, tag);
          if (!m) {
            lost_.insert(r);
            return fall_back(r, "lost");
          }
          const agreement_kind got = wire::disseminated_kind(*m);
          if (got != kind) {
            return fall_back(r, got == agreement_kind::fallback ? "fell back" : "out of step");
          }
          if (kind == agreement_kind::report)
            outcome.value = op_(outcome.value, wire::read_value(*m));
        }
      }
    }
    finish_sends();
    return outcome;
  }

  // Two ranks that memory joins (not `networked`: network_joins), neither of which can be
  // declared lost while it lives (no suspicion time), decide in one exchange (the file comment).
  [[nodiscard]] bool one_exchange_decides(bool networked) const {
    if (members_.size() != 2 || networked) return false;
    if constexpr (transport::excludes_peers<T>) return !state_.recovery.suspect_after;
    return true;
  }

  // The dissemination's radix (the file comment): where memory joins every member, p (one
  // round a phase: with messages that cheap, rounds are what costs); where a network joins
  // some, the radix that sends the fewest messages (each costs system calls at both ends),
  // the larger on a tie (fewer rounds).
  [[nodiscard]] int radix(bool networked) const {
    const int p = members_.size();
    if (!networked) return p;
    int best = p;
    for (int k = p - 1; k >= 2; --k) {
      if (offsets(k, p) < offsets(best, p)) best = k;
    }
    return best;
  }
  // The ranks one rank sends to in a phase of radix-k dissemination among p.
  static int offsets(int k, int p) {
    int n = 0;
    for (int step = 1; step < p; step *= k) n += (round_end(step, k, p) - 1) / step;
    return n;
  }
  // Round `step` of radix-k dissemination among p reaches the offsets step, 2 step, .. below
  // round_end: k - 1 of them, fewer in a last round that would reach past p.
  static int round_end(int step, int k, int p) { return std::min(p, step * k); }
  template <class F>
  static void for_each_offset(int step, int k, int p, F&& f) {
    for (int o = step; o < round_end(step, k, p); o += step) f(o);
  }

  // Participant: reports to each coordinator it takes, until one decides, or it coordinates.
  proposal take_part() {
    for (;;) {
      const int coordinator = lost_.lowest_absent();
      if (coordinator == me_) return coordinate();
      send(coordinator, recovery_tag::up(number_), encode(agreement_kind::report, mine()));
      for (;;) {
        const std::optional<std::span<const std::byte>> m =
            receive(coordinator, recovery_tag::down(number_));
        if (!m) {
          lost_.insert(coordinator);
          COMMX_LOG(debug, log_context_of(state_.endpoint),
                    "agreement {}: coordinator rank {} lost, takes the next", number_,
                    members_.world_of(coordinator));
          break;
        }
        const agreement_kind kind = wire::kind_of(*m);
        if (kind == agreement_kind::proposal) {
          accepted_ = decode(*m);
          send(coordinator, recovery_tag::up(number_), acknowledgement_message);
        } else if (kind == agreement_kind::decision) {  // it carries what was decided
          finish_sends();
          return decode(*m);
        }
      }
    }
  }

  // Coordinator: proposes what it accepted, or what the reports give; decides once all
  // survivors accepted.
  proposal coordinate() {
    proposal chosen = accepted_ ? *accepted_ : gather_reports();
    if (chosen.ballot >= 0) {
      COMMX_LOG(debug, log_context_of(state_.endpoint),
                "agreement {}: coordinates, proposes ballot {}'s outcome again: lost [{}]", number_,
                chosen.ballot, fmt::join(world_ranks(chosen.lost), ", "));
    } else {
      COMMX_LOG(debug, log_context_of(state_.endpoint),
                "agreement {}: coordinates, proposes the reports' outcome: lost [{}]", number_,
                fmt::join(world_ranks(chosen.lost), ", "));
    }
    chosen.ballot = me_ + 1;  // above the all-to-all rounds' 0
    accepted_ = chosen;
    const std::span<const std::byte> offer = encode(agreement_kind::proposal, chosen);
    rank_bits told(members_.size());
    for (int r = 0; r < members_.size(); ++r) {
      if (r == me_ || chosen.lost.contains(r) || lost_.contains(r)) continue;
      send(r, recovery_tag::down(number_), offer);
      told.insert(r);
    }
    rank_bits accepting(members_.size());
    start_phase();
    for (int r = 0; r < members_.size(); ++r) {
      if (told.contains(r) && await(r, agreement_kind::acknowledgement)) accepting.insert(r);
    }
    const std::span<const std::byte> decision = encode(agreement_kind::decision, chosen);
    for (int r = 0; r < members_.size(); ++r) {
      if (accepting.contains(r)) send(r, recovery_tag::down(number_), decision);
    }
    // A rank in the lost set that reported to this one is alive, only cut off from others:
    // it is told, so that it leaves rather than going on by itself.
    for (int r = 0; r < members_.size(); ++r) {
      if (r != me_ && chosen.lost.contains(r) && heard_.contains(r)) {
        send(r, recovery_tag::down(number_), decision, /*to_lost=*/true);
      }
    }
    finish_sends();
    return chosen;
  }

  proposal gather_reports() {
    proposal combined = mine();
    std::optional<proposal> held;
    start_phase();
    for (int r = 0; r < members_.size(); ++r) {
      if (r == me_ || lost_.contains(r)) continue;
      const std::optional<std::span<const std::byte>> m = await(r, agreement_kind::report);
      if (!m) {
        combined.lost.insert(r);
        continue;
      }
      const proposal theirs = decode(*m);
      if (theirs.ballot >= 0) {
        if (!held || theirs.ballot > held->ballot) held = theirs;
        continue;
      }
      combined.value = op_(combined.value, theirs.value);
      combined.lost.merge(theirs.lost);
    }
    if (held) return *held;
    lost_.merge(combined.lost);
    return combined;
  }

  // The job's ranks of the members in `set`, for the log.
  [[nodiscard]] std::vector<int> world_ranks(const rank_bits& set) const {
    std::vector<int> out;
    for (int r = 0; r < members_.size(); ++r) {
      if (set.contains(r)) out.push_back(members_.world_of(r));
    }
    return out;
  }

  [[nodiscard]] proposal mine() const {
    return accepted_ ? *accepted_ : proposal{-1, value_, lost_};
  }

  // The next message of `kind` from `r` to this coordinator; nothing if `r` is lost.
  std::optional<std::span<const std::byte>> await(int r, agreement_kind kind) {
    for (;;) {
      const std::optional<std::span<const std::byte>> m = receive(r, recovery_tag::up(number_));
      if (!m) {
        lost_.insert(r);
        return std::nullopt;
      }
      heard_.insert(r);
      if (wire::kind_of(*m) == kind) return m;
    }
  }

  // In the run's arena, where they stay until the run ends: a send to every rank shares one.
  [[nodiscard]] std::span<const std::byte> encode(agreement_kind kind, const proposal& p) {
    const std::span<std::byte> m = fresh(message_bytes());
    wire::write_whole(m, kind, p);
    return m;
  }
  [[nodiscard]] std::span<const std::byte> encode_value(V value) {
    const std::span<std::byte> m = fresh(sizeof(V));
    wire::write_value(m, value);
    return m;
  }

  [[nodiscard]] proposal decode(std::span<const std::byte> m) const {
    if (m.size() != message_bytes()) {
      throw error(errc::protocol_violation,
                  fmt::format("agreement {}: a message of {} bytes where {} were expected", number_,
                              m.size(), message_bytes()));
    }
    return wire::read_whole(m, members_.size());
  }

  // Sends are kept until finish_sends (their payload stays in the arena); a send to a lost
  // rank just fails.
  void send(int r, int tag, std::span<const std::byte> payload, bool to_lost = false) {
    outgoing_.push_back(
        {state_.endpoint.isend(members_.world_of(r), members_.channel(), tag, payload), r,
         to_lost});
  }
  void send_to_all(int tag, std::span<const std::byte> payload) {
    for (int r = 0; r < members_.size(); ++r) {
      if (r != me_ && !lost_.contains(r)) send(r, tag, payload);
    }
  }
  // `bytes` of the arena, zeroed.
  std::span<std::byte> fresh(std::size_t bytes) {
    auto* at = static_cast<std::byte*>(arena_.allocate(bytes, 1));
    std::fill_n(at, bytes, std::byte{0});
    return {at, bytes};
  }

  void finish_sends() {
    for (sending& s : outgoing_) {
      // A rank the agreement holds lost needs nothing more; a send to it may never leave (a
      // partition holds it) and is withdrawn.
      if (lost_.contains(s.to) && !s.to_lost && !state_.endpoint.test(s.handle) &&
          state_.endpoint.cancel(s.handle)) {
        continue;
      }
      if (wait_watched(
              state_, members_, s.handle, [this] { return until(); }, false) ==
              wait_end::deadline &&
          state_.endpoint.cancel(s.handle)) {
        outgoing_.clear();
        time_out("sending its part");
      }
    }
    outgoing_.clear();
  }

  // The next message from `r` with `tag`, read into the inbox (valid until the next receive);
  // nothing if `r` is gone.
  std::optional<std::span<const std::byte>> receive(int r, int tag) {
    typename T::request handle = state_.endpoint.irecv(members_.world_of(r), members_.channel(),
                                                       tag, transport::recv_buffer(inbox_));
    wait_end end = wait_watched(
        state_, members_, handle, [this, tag] { return suspicion(tag); }, false);
    if constexpr (transport::excludes_peers<T>) {
      if (end == wait_end::deadline && clock::now() < until()) {
        // Silent past the suspicion time: declared lost here, which ends the receive (or it
        // matched meanwhile), and, the connection closed, the rank finds this one lost too.
        state_.endpoint.exclude(members_.world_of(r),
                                fmt::format("silent for at least {} ms in agreement {}",
                                            as_ms(*state_.recovery.suspect_after), number_));
        end = wait_watched(state_, members_, handle, until(), false);
      }
    }
    if (end == wait_end::deadline && state_.endpoint.cancel(handle)) {
      time_out(fmt::format("waiting for rank {}", r));
    }
    const transport::op_result& result = state_.endpoint.result(handle);
    if (result.error == errc::peer_lost) return std::nullopt;
    if (result.error == errc::truncated) {
      throw error(errc::protocol_violation,
                  fmt::format("agreement {}: a message from rank {} longer than its {} bytes",
                              number_, r, message_bytes()));
    }
    if (result.error) throw error(result.error, fmt::format("agreement {}", number_));
    return inbox_.first(result.bytes);
  }

  // Until when a receive with `tag` waits before it suspects its sender: the deadline, or,
  // where the transport can declare a rank lost and a suspicion time S is set, the end of the
  // phase (start_phase): the ranks a phase waits for are suspected together, not one S after
  // another. A coordinator may spend S in each of its two phases, so its participants suspect
  // it after 3 S: a rank waiting on a silent one must not look silent itself.
  [[nodiscard]] clock::time_point suspicion(int tag) {
    if constexpr (transport::excludes_peers<T>) {
      if (const auto& s = state_.recovery.suspect_after) {
        if (tag == recovery_tag::down(number_)) return std::min(until(), clock::now() + 3 * *s);
        return std::min(until(), suspect_by_);
      }
    }
    return until();
  }
  // The deadline, resolved when a wait first needs it: an agreement whose messages are there
  // when it looks reads no clock (one read was a third of a 1-rank agreement's time).
  clock::time_point until() {
    if (!until_) until_ = deadline_.resolve(default_timeout_);
    return *until_;
  }
  // A phase that waits for several ranks at once starts: they are suspected `silences` S
  // from now.
  void start_phase(int silences = 1) {
    if (const auto& s = state_.recovery.suspect_after) suspect_by_ = clock::now() + silences * *s;
  }
  static long long as_ms(clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  }

  [[noreturn]] void time_out(std::string_view doing) {
    throw_timeout(state_.endpoint, {me_, unknown, unknown, 0, "agree"},
                  fmt::format("agreement {} {}", number_, doing));
  }

  struct sending {
    typename T::request handle;
    int to = 0;
    bool to_lost = false;  // a decision for a rank in the lost set, which must arrive
  };

  rank_state<T, S>& state_;
  const group& members_;
  int me_;
  std::uint32_t number_;
  Op op_;
  deadline deadline_;
  clock::duration default_timeout_;
  std::optional<clock::time_point> until_;  // deadline_, once resolved (until())
  V value_;
  // The run's messages and its list of sends come from here, freed together as it ends (after
  // the destructor withdrew any send still in flight): a few hundred bytes, no allocation, up
  // to about 8 ranks.
  std::array<std::byte, 2048> arena_bytes_;
  std::pmr::monotonic_buffer_resource arena_{arena_bytes_.data(), arena_bytes_.size()};
  rank_bits lost_;              // ranks this rank knows lost
  rank_bits heard_;             // ranks that sent this coordinator something: alive
  std::span<std::byte> inbox_;  // where each message received is read, one at a time
  std::optional<proposal> accepted_;
  std::pmr::vector<sending> outgoing_{&arena_};
  clock::time_point suspect_by_{};  // the current phase's suspicion time (start_phase)
};

}  // namespace detail
}  // namespace commx
