// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The shared-memory endpoint's waiting, waking and liveness (endpoint.hpp): a blocking
/// receive, a wait's spin, yields and futex sleep, futex wake-ups, leaving the job, polling
/// peers' processes, and settling everything that involves a peer that went.
/// Out of line as the tcp engine's parts are, included by endpoint.hpp.

#include "commx/detail/sanitizers.hpp"
#include "commx/transport/detail/shm/endpoint.hpp"

namespace commx::detail::shm {

// Whether `slot`'s rank may be asleep, looked at after publishing to its ring or freeing space
// in its ring to us. A rank about to sleep exchanges 1 into its `sleeping` word, then looks at
// its rings once more; we publish, then look at the word, with a seq_cst fence after each
// side's write (after_announcing_sleep), so one of the two looks sees the other's write: it
// sees our record, or we see 1 and wake it. A fence and a plain load leave the word's line
// shared in every sender's cache until its rank writes it: a read-modify-write of it (adding
// 0), which this once was, took the line from whichever core had it, and every rank that sends
// to one rank, or drains a ring another fills, did that per message. With 4 ranks on 2 cores
// of two dies (a line crosses in ~200 ns), 8-byte allreduce and allgather took 0.82x the time
// they took that way, the dissemination barrier 0.91x (bench/HISTORY.md, 2026-12-04, ninth
// entry); two ranks, whose words each have one writer, the same within the noise.
// ThreadSanitizer does not model fences (GCC warns of them, and warnings fail the build), so
// its builds keep the read-modify-writes on both sides, which order the two looks as well.
inline bool may_be_asleep(rank_slot& slot) {
#if defined(COMMX_TSAN)
  return slot.sleeping.fetch_add(0, std::memory_order_seq_cst) != 0;
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return slot.sleeping.load(std::memory_order_relaxed) != 0;
#endif
}

// Whether a wait whose core is shared may catch a message by spinning before it yields: only one
// from a rank that may run meanwhile. `posted` are the endpoint's posted receives; `idle(rank)`
// tells whether that rank said its own wait yields or sleeps (rank_slot::idle), so that it
// sends nothing until the kernel runs it again, which our spin only delays on a shared core. A
// wait with no receive posted (for room in a ring, or a large message's acknowledgement)
// spins as before. Measured at 4 ranks on 2 cores (bench/HISTORY.md, 2026-12-04, tenth
// entry): the 8 pauses caught their message in 2-4% of the waits of binomial's exchanges and
// in none of flat's ranks but the root, and cost a root-linear barrier 1.2x its time; yet a
// pairwise exchange whose partner runs on the other CPU gains by them, so they are skipped
// only where they cannot catch anything. Paired with the spin before, the best policy's
// barrier and its 8-byte and 1 KiB collectives took 0.82-1.00x the time across two dies.
template <class Posted, class Idle>
bool a_sender_may_run(const Posted& posted, Idle&& idle) {
  bool receiving = false;
  for (const auto& op : posted) {
    if (op->what != operation::kind::recv) continue;
    receiving = true;
    if (op->peer == any_source || !idle(op->peer)) return true;
  }
  return !receiving;
}

// Marks a rank's slot idle for the rest of a wait that yields or sleeps (rank_slot::idle),
// where ranks share cores.
class idle_mark {
 public:
  idle_mark(std::atomic<std::uint32_t>& word, bool shared_core)
      : word_(shared_core ? &word : nullptr) {
    if (word_ != nullptr) word_->store(1, std::memory_order_relaxed);
  }
  ~idle_mark() {
    if (word_ != nullptr) word_->store(0, std::memory_order_relaxed);
  }
  idle_mark(const idle_mark&) = delete;
  idle_mark& operator=(const idle_mark&) = delete;

 private:
  std::atomic<std::uint32_t>* word_;
};

// Counts this rank among the ranks at rest of its CPUs for a sleep (cpu_sharing.hpp). A rank
// that wakes it takes it off the count at once (endpoint::take_off_rest): woken, it may run and
// crowds the core before it does; left on the count until then, the ranks a broadcast woke
// read as asleep to the waits of their core's others, which spun meanwhile. Whoever clears
// `counted` takes the rank off, so it is taken off once.
class at_rest {
 public:
  at_rest(std::atomic<std::uint32_t>* count, std::atomic<std::uint32_t>& counted)
      : count_(count), counted_(counted) {
    if (count_ == nullptr) return;
    count_->fetch_add(1, std::memory_order_relaxed);
    counted_.store(1, std::memory_order_release);  // a waker's decrement follows the increment
  }
  ~at_rest() {
    if (count_ != nullptr && counted_.exchange(0, std::memory_order_acq_rel) != 0) {
      count_->fetch_sub(1, std::memory_order_relaxed);
    }
  }
  at_rest(const at_rest&) = delete;
  at_rest& operator=(const at_rest&) = delete;

 private:
  std::atomic<std::uint32_t>* count_;
  std::atomic<std::uint32_t>& counted_;
};

inline bool endpoint::may_spin(bool shared_core) const {
  return !shared_core || a_sender_may_run(posted_, [this](int peer) {
    return segment_.slot(peer).idle.load(std::memory_order_relaxed) != 0;
  });
}

inline void after_announcing_sleep() {
#if !defined(COMMX_TSAN)
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// A blocking receive's wait: a glance first, then wait_for_event until the deadline.
inline op_result endpoint::recv_blocking(int from, context_id ctx, int tag,
                                         const recv_buffer& buffer, const deadline& until,
                                         clock::duration timeout) {
  auto op = new_operation(operation::kind::recv, from, ctx, tag);
  op->buffer = buffer;
  start_recv(op);
  if (op->done) return op->result;
  progress();
  if (!op->done && !(may_spin(waiting_.shares_core()) && waiting_.glance([&] {
        if (!incoming()) return false;
        progress();
        return op->done;
      }))) {
    clock::time_point when = until.resolve(timeout);
    bool extended = false;
    for (;;) {
      const std::uint64_t seen = events_;
      if (op->done) break;
      if (clock::now() >= when) {
        if (cancel(*op)) return {from, tag, 0, make_error_code(errc::timeout)};
        // It matched: its data is on the way, and it has one more `timeout` to arrive (a
        // timeout is for a receive nothing matched: the communicator, whose short waits on
        // stacks with recovery end here, posts the receive again after one).
        if (extended) return {from, tag, 0, make_error_code(errc::timeout)};
        extended = true;
        when = clock::now() + std::min(timeout, clock::duration(std::chrono::hours(1)));
        continue;
      }
      wait_for_event(seen, when);
    }
  }
  return op->result;
}

inline void endpoint::wait_for_event(std::uint64_t seen, clock::time_point when) {
  progress();
  if (events_ != seen) return;
  // Spin as long as the core is ours (waiting.hpp). Then give the core away, turn after
  // turn, for a while: a yield that finds nobody else runnable costs less than a futex sleep
  // and wake-up. Only then sleep. A wait whose last sleep lasted to the liveness check with
  // nothing new (not one cut short by its caller's deadline, a slice) sleeps again at once:
  // yielding anew each liveness period, ranks that wait for long (bystanders while two ranks
  // talk) took the cores from the ranks that work, each for 40 us per rank of its core. Not
  // while a large copy is shared: its blocks wake nobody.
  const bool slept_idle = slept_idle_at_ == seen && !parked_ && helpable_.empty();
  // A sender waiting for its large message's receiver shares the copy meanwhile; a receiver
  // whose copy waits for its sender's blocks looks at them (progress) at every poll.
  const auto arrived = [&] {
    if (!incoming() && !parked_) {
      if (!helpable_.empty()) help_receivers();
      return false;
    }
    progress();
    return events_ != seen;
  };
  // Whether the core is shared, asked once: after a yield that found it so, the answer reads
  // the clock.
  const bool shared_core = waiting_.shares_core();
  if (!slept_idle && may_spin(shared_core) && waiting_.spin(arrived, when)) return;
  // A last look at every sender before the core goes: the spin looked at the cold ones only at
  // times (polled_senders.hpp), and where ranks crowd a core a yield's turn comes back
  // milliseconds later (a flat root's 8-byte allreduce at 256 ranks took 1.9x as long).
  if (!slept_idle && incoming(/*every_sender=*/true)) {
    progress();
    if (events_ != seen) return;
  }
  const idle_mark idle(segment_.slot(rank_).idle, shared_core);
  // The period is asked at each turn: it shortens once a yield finds the core shared.
  const auto yield_start = clock::now();
  if (!slept_idle) waiting_.start_yielding();
  while (!slept_idle && clock::now() < std::min(when, yield_start + waiting_.yield_period())) {
    waiting_.yield();
    if (!incoming(/*every_sender=*/true) && !parked_) {
      if (!helpable_.empty()) help_receivers();
      continue;
    }
    progress();
    if (events_ != seen) return;
  }
  if (clock::now() >= when) return;
  rank_slot& me = segment_.slot(rank_);
  me.sleeping.exchange(1, std::memory_order_seq_cst);  // see may_be_asleep()
  after_announcing_sleep();
  const std::uint32_t word = me.wake.load(std::memory_order_seq_cst);
  senders_.cold_due();
  progress();                 // anything published before our announcement is seen here
  bool whole_period = false;  // the sleep may last a liveness period, not only to `when`
  if (events_ == seen) {
    const auto now = clock::now();
    const auto cap = last_liveness_ + opts_.liveness_period;
    const auto until = std::min(when, std::max(cap, now + std::chrono::milliseconds(1)));
    whole_period = until < when;
    if (until > now) {
      const at_rest resting(resting_count(), me.counted_at_rest);
      futex_wait(me.wake, word, until - now);
    }
  }
  me.sleeping.store(0, std::memory_order_relaxed);
  senders_.cold_due();
  progress();
  slept_idle_at_ = events_ == seen && whole_period ? std::optional(seen) : std::nullopt;
  if (clock::now() - last_liveness_ >= opts_.liveness_period) check_liveness();
}

// Called after publishing to `peer`'s ring or freeing space in its ring to us (may_be_asleep).
inline void endpoint::wake(int peer) {
  if (peer == rank_) return;
  rank_slot& slot = segment_.slot(peer);
  if (may_be_asleep(slot)) {
    slot.wake.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(slot.wake);
    take_off_rest(slot);  // after the wake-up, which it would only delay
  }
}

inline void endpoint::take_off_rest(rank_slot& slot) {
  if (slot.counted_at_rest.load(std::memory_order_relaxed) == 0 ||
      slot.counted_at_rest.exchange(0, std::memory_order_acq_rel) == 0) {
    return;
  }
  const int counted_at = slot.rests_at.load(std::memory_order_relaxed) - 1;
  if (counted_at >= 0) segment_.rest_count(counted_at).fetch_sub(1, std::memory_order_relaxed);
}

// wake() without the locked instruction where it can: a plain look at `peer`'s word wakes a
// peer that has been asleep a while; one that may be falling asleep just now is owed the
// full check, which the end of this rank's next progress pays (a window of isends pays it
// once). So an eager isend costs no fence. A rank that never calls commx again after such an
// isend leaves a receiver that fell asleep in that instant to find the message when its sleep
// ends (the liveness period at the latest).
inline void endpoint::nudge(int peer) {
  if (peer == rank_) return;
  if (segment_.slot(peer).sleeping.load(std::memory_order_relaxed) != 0) return wake(peer);
  // A window to one peer owes it one check; peers in turn (a flat alltoall's sends) may be
  // listed twice, which costs a second look, not the search of the list per send that this was.
  if (owed_wakes_.empty() || owed_wakes_.back() != peer) owed_wakes_.push_back(peer);
}

inline void endpoint::settle_wakes() {
  for (const int peer : owed_wakes_) wake(peer);
  owed_wakes_.clear();
}

inline void endpoint::wake_everyone() {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    rank_slot& slot = segment_.slot(peer);
    slot.wake.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(slot.wake);
    // A rank found dead stays at rest: taken off the count, its core's others would count it
    // awake for the rest of the job.
    if (slot.state.load(std::memory_order_acquire) == presence::present) take_off_rest(slot);
  }
}

// Anything new in our rings, room in a ring we wait to write to, or a rank gone? (Loads
// only: the spin loop's test.) Of the cold senders' rings, the next chunk at every 16th look,
// or every one (`every_sender`) a chunk at a time with the hot ones between
// (polled_senders.hpp).
inline bool endpoint::incoming(bool every_sender) {
  const auto wrote = [&](std::span<const int> peers) {
    return std::ranges::any_of(
        peers, [&](int peer) { return consumers_[static_cast<std::size_t>(peer)].has_data(); });
  };
  if (wrote(senders_.hot())) return true;
  const std::span<const int> cold = senders_.cold();
  constexpr std::size_t chunk = polled_senders::cold_chunk;
  for (std::size_t at = 0; every_sender && at < cold.size(); at += chunk) {
    if (wrote(cold.subspan(at, std::min(chunk, cold.size() - at)))) {
      senders_.cold_due();
      return true;
    }
    if (wrote(senders_.hot())) return true;
  }
  if (!every_sender && wrote(senders_.sparse_cold_chunk())) {
    senders_.cold_due();
    return true;
  }
  for (const int peer : queued_peers_) {
    const auto p = static_cast<std::size_t>(peer);
    if (backlogged(p) && producers_[p].room_freed()) return true;
  }
  if (segment_.slot(rank_).senders_changed.load(std::memory_order_relaxed) != senders_seen_) {
    return true;
  }
  return segment_.header().departures.load(std::memory_order_relaxed) != departures_seen_;
}

inline void endpoint::leave(presence how) {
  if (left_) return;
  left_ = true;
  rank_slot& me = segment_.slot(rank_);
  presence present = presence::present;
  me.state.compare_exchange_strong(present, how, std::memory_order_acq_rel);
  if (auto* resting = resting_count()) resting->fetch_add(1, std::memory_order_relaxed);
  segment_.header().departures.fetch_add(1, std::memory_order_acq_rel);
  wake_everyone();
}

// Looks at the processes of the peers this rank waits on (a receive naming them, messages
// for them not yet written or not yet taken, pieces coming from them; every rank that has
// written to it while an any_source receive is posted), of the next `watched_successors`
// present ranks after it, and of one more in turn, exactly (its /proc record: a zombie
// too). Every rank is watched by its predecessors while they wait in commx, and one found
// gone is marked failed in the segment, where every rank reads of it at once; a rank whose
// watchers all compute is found by the turns of the ranks that wait, within ranks x the
// liveness period at worst (256 ranks with a core each: 5 s).
inline void endpoint::check_liveness() {
  last_liveness_ = clock::now();
  constexpr int watched_successors = 2;
  const auto present = [&](int peer) {
    return peer != rank_ && state_[static_cast<std::size_t>(peer)] == presence::present;
  };
  for (int step = 1, seen = 0; step < size_ && seen < watched_successors; ++step) {
    const int peer = (rank_ + step) % size_;
    if (!present(peer)) continue;
    ++seen;
    look_at(peer);
  }
  if (size_ > 1) {
    next_watched_ = (next_watched_ + 1) % size_;
    if (present(next_watched_)) look_at(next_watched_, /*exact=*/true);
  }
  // Gathered first: a peer found gone is settled at once, which completes and erases posted
  // receives and may change senders_, the lists walked here.
  std::vector<int> awaited;
  bool any_source_posted = false;
  for (const auto& op : posted_) {
    if (op->peer >= 0) awaited.push_back(op->peer);
    any_source_posted = any_source_posted || op->peer == any_source;
  }
  if (any_source_posted) {
    for (const auto kind : {senders_.hot(), senders_.cold()}) {
      awaited.insert(awaited.end(), kind.begin(), kind.end());
    }
  }
  for (const int peer : awaited) {
    if (present(peer)) look_at(peer);
  }
  for (int peer = 0; peer < size_; ++peer) {
    const auto p = static_cast<std::size_t>(peer);
    if (!present(peer)) continue;
    if (backlogged(p) || !in_flight_[p].empty() || !transfers_[p].empty()) {
      look_at(peer);
    }
  }
  check_departures(/*force=*/true);
}

// One look at `peer`'s process; gone without leaving, it is marked failed.
inline void endpoint::look_at(int peer, bool exact) {
  const auto p = static_cast<std::size_t>(peer);
  if (state_[p] != presence::present || !peers_[p].gone(exact)) return;
  {
    presence present = presence::present;
    if (segment_.slot(peer).state.compare_exchange_strong(present, presence::failed,
                                                          std::memory_order_acq_rel)) {
      segment_.header().departures.fetch_add(1, std::memory_order_acq_rel);
      wake_everyone();
      // Settled here rather than by check_departures below, which cannot tell who found it.
      depart(peer, presence::failed,
             "its process ended without leaving the job (kill(pid, 0), /proc)");
    }
  }
}

// Silent past a suspicion time, `peer` is marked failed in the segment like a process found
// gone, though it lives: a stalled process resumes to find its own slot marked.
inline void endpoint::exclude(int peer, std::string_view why) {
  if (peer == rank_ || state_[static_cast<std::size_t>(peer)] != presence::present) return;
  presence there = presence::present;
  if (segment_.slot(peer).state.compare_exchange_strong(there, presence::failed,
                                                        std::memory_order_acq_rel)) {
    there = presence::failed;
    segment_.header().departures.fetch_add(1, std::memory_order_acq_rel);
    wake_everyone();
  }
  depart(peer, there, fmt::format("declared lost here: {}", why));
}

// A rank left or was found dead: settle everything that involves it.
inline void endpoint::check_departures(bool force) {
  const std::uint32_t now = segment_.header().departures.load(std::memory_order_acquire);
  if (now == departures_seen_ && !force) return;
  departures_seen_ = now;
  if (!left_ && !cut_off_ &&
      segment_.slot(rank_).state.load(std::memory_order_acquire) == presence::failed) {
    // The others declared this rank lost (exclude) while it was stopped: it is out, and must
    // not go on as a job of its own. Every peer is lost to it, and it is among the failed
    // itself (failed_peers), which is how an agreement learns it is out (errc::excluded).
    cut_off_ = true;
    COMMX_LOG(warn, log_,
              "the other ranks declared this rank lost (it was silent past their "
              "suspicion time): it is out of the job");
    failed_.push_back(rank_);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_ && state_[static_cast<std::size_t>(peer)] == presence::present) {
        depart(peer, presence::failed, "this rank was declared lost by the others");
      }
    }
    return;
  }
  for (int peer = 0; peer < size_; ++peer) {
    const auto p = static_cast<std::size_t>(peer);
    if (peer == rank_ || state_[p] != presence::present) continue;
    const presence there = segment_.slot(peer).state.load(std::memory_order_acquire);
    if (there != presence::present) {
      depart(peer, there,
             "the segment marks it failed (another rank found its process gone, "
             "or it failed itself)");
    }
  }
}

// `found`: how the loss was noticed, for the log (a rank that finished is no news).
inline void endpoint::depart(int peer, presence how, std::string_view found) {
  const auto p = static_cast<std::size_t>(peer);
  if (how == presence::failed) {
    COMMX_LOG(warn, log_, "lost rank {}: {}", peer, found);
  } else {
    COMMX_LOG(debug, log_, "rank {} left the job", peer);
  }
  find_senders();  // it may have written to us for the first time just before it went
  drain(peer, /*limit=*/static_cast<std::size_t>(-1));  // what it sent before going counts
  state_[p] = how;
  ++events_;
  if (how == presence::failed) failed_.push_back(peer);
  // An any_source receive stays posted: its communicator decides (events_ wakes its wait).
  std::erase_if(posted_, [&](const std::shared_ptr<operation>& op) {
    if (op->peer != peer) return false;
    complete(*op, lost(peer, 0));
    return true;
  });
  if (auto* held = backlog_[p].get()) {
    for (auto* queue : {&held->outbox, &held->urgent}) {
      for (outgoing& o : *queue) {
        if (o.op && !o.op->done) complete(*o.op, lost(peer, o.op->payload.size()));
      }
      queue->clear();
    }
  }
  in_flight_[p].release_all([&](operation& op) {
    if (!op.done) complete(op, lost(peer, op.payload.size()));
  });
  transfers_[p].release_all([&](operation& op) {
    if (!op.done) complete(op, lost(peer, 0));
  });
  // Its large messages are in memory that is gone.
  unexpected_.remove_if([&](const queued_message& m) { return m.large && m.source == peer; });
}

// A receive from `from` that nothing queued satisfies: can anyone still answer it?
inline std::optional<op_result> endpoint::lost_source(int from) const {
  if (from == any_source) return std::nullopt;  // not refused for a failure: see depart
  if (state_[static_cast<std::size_t>(from)] != presence::present) return lost(from, 0);
  return std::nullopt;
}

}  // namespace commx::detail::shm
