// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::simgrid`: a simulated cluster as a stack. Each rank is a SimGrid actor on a host
/// of a platform file (a fat tree of 4,096 hosts, nodes of several ranks, two sites joined by a
/// wide link: platforms/simgrid/), in one process; its messages are SimGrid communications of
/// their real size, carrying their real payloads, so a program computes what it computes on any
/// other stack while the network model says how long its communication took. The same source
/// compiled against this stack (commx_add_variants' `simgrid`) asks what it would cost at 4,096
/// ranks on a machine nobody has lent you yet.
///
/// Start: `commx::run<Comm>(fn)` runs fn on COMMX_SIMGRID_RANKS actors and returns when the
/// simulated job ends (detail/simgrid/simulation.hpp lists the settings); `Comm::from_env()` is
/// not offered, since a rank is not a process. Time: commx::clock is the simulation's clock in a
/// process that simulates, so deadlines, timeouts and a program's timings taken with
/// commx::clock are simulated seconds; compute between calls into commx becomes simulated time
/// on the rank's host (COMMX_SIMGRID_COMPUTE=measured, the default) or none (`skip`, for
/// communication studies, and the only way two runs give the same times).
///
/// Semantics are the transport concept's, by the in-process transport's matching: order per
/// sender (restored at the receiver, since a small message may overtake a large one on the
/// wire), any_source, probe, cancel, truncation that keeps the message queued. A send completes
/// when its last byte reaches the receiver's host (the payload was copied at the send; no
/// rendezvous waits for the matching receive), or at once up to COMMX_SIMGRID_EAGER_BYTES
/// (default none; detail/simgrid/job.hpp says why). A rank
/// whose function throws fails: its peers' receives naming it end with errc::peer_lost, and
/// their any_source receives are woken for their communicator to judge, as on every stack. Polling (test, iprobe) that finds nothing 16
/// times in a row costs a simulated microsecond, so a loop of polls lets simulated time pass.
///
/// Footprint: per rank, its matching state and a map entry per peer it sends to or hears from;
/// the process holds every rank's, and the payloads in flight.

#include <simgrid/Exception.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Mailbox.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/options.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/detail/simgrid/job.hpp"

namespace commx::transport {

/// One rank's endpoint in a simulated job (see the file comment).
class simgrid {
  using job = detail::simgrid::job;
  using envelope = detail::simgrid::envelope;
  using send_state = detail::simgrid::send_state;
  using matching_op = detail::inproc::operation;
  using compute_clock = detail::simgrid::compute_clock;

 public:
  /// The stack's name, as benches and examples print it.
  static constexpr std::string_view name = "simgrid";
  /// Its ranks run on simulated hosts, not on this machine's cores (coll::tuned asks).
  static constexpr bool simulated = true;

  /// A receive (or a send that ended at once with an error): the matching's operation; a send
  /// that waits for its transfer: its state; neither: a send that completed at once.
  struct request {
    std::shared_ptr<matching_op> op;   ///< a receive, or a send that failed at once
    std::shared_ptr<send_state> send;  ///< a send that waits for its transfer
  };

  /// Rank `rank`'s endpoint of `shared`; made inside that rank's actor.
  simgrid(std::shared_ptr<job> shared, int rank)
      : job_(std::move(shared)), rank_(rank), compute_(job_->measures_compute()) {
    // Messages flow to this rank's host as soon as they are sent, not when it asks (SimGrid's
    // permanent receiver; MPI and TCP behave so).
    job_->mailbox(rank_)->set_receiver(::simgrid::s4u::Actor::self());
    compute_.bind();
  }
  /// Takes over `other`'s endpoint; `other` then owns nothing.
  simgrid(simgrid&& other) noexcept
      : job_(std::move(other.job_)),
        rank_(other.rank_),
        compute_(std::move(other.compute_)),
        sent_to_(std::move(other.sent_to_)),
        next_order_from_(std::move(other.next_order_from_)),
        early_(std::move(other.early_)),
        waiting_sends_(std::move(other.waiting_sends_)),
        arrival_(std::move(other.arrival_)),
        eager_in_flight_(std::move(other.eager_in_flight_)),
        local_events_(other.local_events_),
        polls_(other.polls_),
        closed_(std::exchange(other.closed_, true)) {}
  simgrid& operator=(simgrid&&) = delete;
  simgrid(const simgrid&) = delete;
  simgrid& operator=(const simgrid&) = delete;
  ~simgrid() { close(/*failed=*/false); }

  /// This endpoint's world rank, in [0, size()).
  [[nodiscard]] int rank() const { return rank_; }
  /// The job's rank count.
  [[nodiscard]] int size() const { return job_->size(); }
  /// The host `peer` runs on (its index in the platform's hosts, in natural order of names).
  [[nodiscard]] int node_of(int peer) const { return job_->node_of(peer); }
  /// The zone under the platform's root that holds `peer`'s host.
  [[nodiscard]] int site_of(int peer) const { return job_->site_of(peer); }
  /// What a message costs on the simulated platform between the job's farthest ranks
  /// (job.hpp's route_cost): coll::tuned chooses by its cost model with it at every rank count,
  /// as no table measured on a real machine holds for a modelled one.
  [[nodiscard]] detail::simgrid::route_cost modelled_link() const { return job_->farthest_route(); }
  /// The payload bytes this endpoint has sent to `peer` so far.
  [[nodiscard]] std::uint64_t bytes_sent_to(int peer) const {
    const auto it = sent_to_.find(peer);
    return it == sent_to_.end() ? 0 : it->second.bytes;
  }
  /// The simulated seconds this rank's measured compute has taken so far (0 when skipped).
  [[nodiscard]] double compute_seconds() const { return compute_.charged(); }
  /// The ranks that failed (their function threw), in the order they did.
  [[nodiscard]] std::vector<int> failed_peers() const { return job_->matching().failed_ranks(); }

  /// Starts sending `data` to `dest` on (`ctx`, `tag`) (transport concept).
  request isend(int dest, context_id ctx, int tag, const std::span<const std::byte>& data) {
    const compute_clock::call call(compute_);
    sent_to& to = sent_to_[dest];
    to.bytes += data.size();
    if (dest == rank_) {  // no network: straight into the matching, in order with the rest
      return {job_->matching().send(rank_, rank_, ctx, tag, data), nullptr};
    }
    if (auto gone = job_->matching().send_to_gone(rank_, dest, ctx, tag)) return {gone, nullptr};
    envelope* e = job_->make_envelope();
    e->source = rank_;
    e->ctx = ctx;
    e->tag = tag;
    e->order = to.messages++;
    e->payload.assign(data.begin(), data.end());
    job_->sent(rank_, dest);
    if (data.size() <= job_->eager_bytes()) {
      // Not detached: SimGrid 3.32 keeps detached communications in one list that each one
      // searches as it ends, quadratic in the messages in flight (bench/HISTORY.md).
      eager_in_flight_.push_back(job_->mailbox(dest)->put_async(e, wire_bytes(data.size())));
      if (eager_in_flight_.size() > eager_reap_above) reap_eager();
      return {};
    }
    auto state = std::make_shared<send_state>();
    state->comm = job_->mailbox(dest)->put_async(e, wire_bytes(data.size()));
    state->result = {dest, tag, data.size(), {}};
    waiting_sends_.push_back(state);
    return {nullptr, std::move(state)};
  }

  /// Starts receiving from `source` (or any_source) with `tag` (or any_tag) on `ctx`.
  request irecv(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    const compute_clock::call call(compute_);
    job_->set_probing(rank_, job::no_probe);
    take_arrivals();
    return {job_->matching().recv(rank_, source, ctx, tag, buffer), nullptr};
  }

  /// Makes progress; true once `req` has completed.
  bool test(request& req) {
    if (finished(req)) return true;
    const compute_clock::call call(compute_);
    take_arrivals();
    if (finished(req)) return true;
    poll_found_nothing();
    return false;
  }

  /// How a completed request ended.
  const op_result& result(const request& req) const {
    static const op_result delivered{};
    if (req.send) return req.send->result;
    return req.op ? req.op->result : delivered;
  }

  /// Withdraws an unmatched receive (true). A send is on the wire from isend on: cancelling
  /// one waits for it to complete and returns false.
  bool cancel(request& req) {
    const compute_clock::call call(compute_);
    if (req.op) return job_->matching().cancel(*req.op);
    if (req.send && !req.send->done) {
      wait_out(req.send->comm);  // if its receiver left, take_arrivals says so
      take_arrivals();
    }
    return false;
  }

  /// The first queued message a receive with these arguments would match.
  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    const compute_clock::call call(compute_);
    take_arrivals();
    auto found = job_->matching().probe(rank_, source, ctx, tag);
    job_->set_probing(rank_, found ? job::no_probe : source);
    if (!found) poll_found_nothing();
    return found;
  }

  /// Changes whenever something happens to this endpoint.
  [[nodiscard]] std::uint64_t event_count() const {
    return job_->matching().event_count(rank_) + local_events_;
  }

  /// Waits in simulated time until event_count() != seen or `when` (simulated) passes.
  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    const compute_clock::call call(compute_);
    polls_ = 0;
    take_arrivals();
    if (event_count() != seen) return;
    const double left = std::chrono::duration<double>(when - clock::now()).count();
    if (left <= 0) return;
    job_->set_waiting(rank_, true);
    // One receive stays posted on the mailbox from one wait to the next: cancelling it would
    // cancel the message it is already matched with, still on the wire.
    if (!arrival_) arrival_ = job_->mailbox(rank_)->get_async<envelope>(&job_->arrival_slot(rank_));
    wait_list_.assign(1, arrival_);
    for (const auto& s : waiting_sends_) wait_list_.push_back(s->comm);
    const bool forever = when == clock::time_point::max() || left > 1e9;
    try {
      (void)::simgrid::s4u::Comm::wait_any_for(wait_list_, forever ? -1.0 : left);
    } catch (const ::simgrid::Exception&) {  // a send whose receiver left: take_arrivals says so
    }
    wait_list_.clear();
    job_->set_waiting(rank_, false);
    take_arrivals();
  }

  /// One blocking call of the program's (transport/concept.hpp): the transport's calls inside
  /// it charge no compute (compute_clock.hpp). Every call of its own charges the compute before
  /// it, as one such call.
  [[nodiscard]] compute_clock::call library_call() { return compute_clock::call(compute_); }

  /// Marks this rank failed: peers stop waiting for it.
  void fail() { close(/*failed=*/true); }

 private:
  static constexpr double fruitless_poll_seconds = 1e-6;
  static constexpr int polls_per_microsecond = 16;
  static constexpr std::size_t eager_reap_above = 32;

  // The size SimGrid is told a message has. A message with no payload (a barrier's) still
  // crosses the route: SimGrid ends a communication of 0 bytes at once, without its latency.
  static std::uint64_t wire_bytes(std::size_t payload) {
    return std::max<std::uint64_t>(payload, 1);
  }

  [[nodiscard]] static bool finished(const request& req) {
    if (req.send) return req.send->done;
    return !req.op || req.op->done.load(std::memory_order_acquire);
  }

  // Every polls_per_microsecond-th fruitless poll in a row lets a simulated microsecond pass:
  // a program that only polls must let the simulation go on, and one that polls many requests
  // in turn (an active-message engine, a request per peer) should not pay a microsecond each.
  void poll_found_nothing() {
    if (++polls_ % polls_per_microsecond == 0) {
      ::simgrid::s4u::this_actor::sleep_for(fruitless_poll_seconds);
    }
  }

  // Takes what the network delivered into this rank's mailbox, and notes finished sends.
  void take_arrivals() {
    if (arrival_ && arrival_->test()) {
      arrival_ = nullptr;
      arrive(std::exchange(job_->arrival_slot(rank_), nullptr));
    }
    ::simgrid::s4u::Mailbox* box = job_->mailbox(rank_);
    while (box->ready()) arrive(box->get<envelope>());
    for (auto it = waiting_sends_.begin(); it != waiting_sends_.end();) {
      if (!transferred(**it)) {
        ++it;
        continue;
      }
      (*it)->done = true;
      ++local_events_;
      it = waiting_sends_.erase(it);
    }
  }

  // Forgets the eager sends whose transfer ended, oldest first (one whose receiver left has
  // nobody to tell).
  void reap_eager() {
    bool lost = false;
    while (!eager_in_flight_.empty() && ended(eager_in_flight_.front(), lost)) {
      eager_in_flight_.pop_front();
    }
  }

  // Whether a send's transfer ended: delivered, or cancelled because its receiver left.
  static bool transferred(send_state& s) {
    bool lost = false;
    if (!ended(s.comm, lost)) return false;
    if (lost) s.result.error = make_error_code(errc::peer_lost);
    return true;
  }

  // Whether `comm` ended; `lost` when it ended because its receiver left (SimGrid throws then).
  static bool ended(const ::simgrid::s4u::CommPtr& comm, bool& lost) {
    try {
      return comm->test();
    } catch (const ::simgrid::Exception&) {
      lost = true;
      return true;
    }
  }

  // Waits for `comm` to end, however it ends.
  static void wait_out(const ::simgrid::s4u::CommPtr& comm) {
    try {
      comm->wait();
    } catch (const ::simgrid::Exception&) {
    }
  }

  // One envelope off the wire: delivered if it is its sender's next, else kept until it is.
  void arrive(envelope* e) {
    polls_ = 0;  // something happened: the polls before it were not in vain
    if (e->what == envelope::kind::poke) {
      job_->taken(e);
      ++local_events_;
      return;
    }
    std::uint64_t& next = next_order_from_[e->source];
    if (e->order != next) {
      early_.emplace(std::pair{e->source, e->order}, e);
      return;
    }
    for (;;) {
      job_->matching().send(e->source, rank_, e->ctx, e->tag, e->payload);
      const int source = e->source;
      job_->taken(e);
      job_->delivered(source, rank_);
      ++next;
      const auto later = early_.find(std::pair{source, next});
      if (later == early_.end()) return;
      e = later->second;
      early_.erase(later);
    }
  }

  void close(bool failed) {
    if (!job_ || closed_) return;
    closed_ = true;
    const bool unwinding = std::uncaught_exceptions() != 0;
    if (!unwinding) {
      // A rank that ends lingers until what it sent has reached its receivers' hosts.
      for (const auto& comm : eager_in_flight_) wait_out(comm);
    }
    eager_in_flight_.clear();
    if (arrival_ && !unwinding) {
      // What it was matched with will never be taken: the sender learns its receiver left.
      if (!arrival_->test()) arrival_->cancel();
      arrival_ = nullptr;
    }
    // While unwinding (a rank killed by the simulation) nothing more is sent.
    job_->leave(rank_, failed, !unwinding);
  }

  std::shared_ptr<job> job_;
  int rank_ = 0;
  compute_clock compute_;
  struct sent_to {
    std::uint64_t messages = 0;  // over the network: the next one's place in the order
    std::uint64_t bytes = 0;     // payload, self-sends included
  };
  std::unordered_map<int, sent_to> sent_to_;  // per peer sent to
  std::unordered_map<int, std::uint64_t> next_order_from_;
  std::map<std::pair<int, std::uint64_t>, envelope*> early_;  // arrived ahead of their turn
  std::vector<std::shared_ptr<send_state>> waiting_sends_;
  ::simgrid::s4u::CommPtr arrival_;  // the receive posted on the mailbox, if any
  std::deque<::simgrid::s4u::CommPtr> eager_in_flight_;  // eager sends, oldest first
  std::vector<::simgrid::s4u::CommPtr> wait_list_;       // reused by wait_for_event
  std::uint64_t local_events_ = 0;                       // pokes taken and sends finished
  int polls_ = 0;                                        // fruitless polls in a row
  bool closed_ = false;

 public:
  /// How commx::run and the tests start a simulated job (launch.hpp's `runs_own_jobs`).
  struct job_runner {
    /// COMMX_SIMGRID_RANKS, 1 when unset.
    static int ranks_from_env() {
      const char* text = std::getenv("COMMX_SIMGRID_RANKS");  // NOLINT(concurrency-mt-unsafe)
      if (text == nullptr || *text == '\0') return 1;
      return detail::simgrid::settings::count_in("COMMX_SIMGRID_RANKS", text, 1 << 20);
    }

    /// Runs `fn(world)` on `n` actors (on the hosts `nodes` names, else ranks_per_host to a
    /// host) and returns when all have returned; rethrows the first rank's exception. With
    /// `report`, prints the simulated and wall times and how compute was counted.
    template <class Comm, class Fn>
    static void run(int n, Fn&& fn, const std::vector<int>& nodes, options opts,
                    bool report = false) {
      auto& sim = detail::simgrid::simulation::get(detail::simgrid::settings::from_env());
      auto shared = std::make_shared<job>(sim, n, nodes);
      std::exception_ptr first_failure;
      std::vector<char> ended(static_cast<std::size_t>(n), 0);
      const double started = ::simgrid::s4u::Engine::get_clock();
      const auto wall = std::chrono::steady_clock::now();
      for (int r = 0; r < n; ++r) {
        ::simgrid::s4u::Actor::create(fmt::format("rank-{}", r), shared->host(r), [&, r, shared] {
          Comm world(typename Comm::transport_type(simgrid(shared, r)), opts);
          try {
            fn(world);
          } catch (const ::simgrid::ForcefulKillException&) {
            throw;  // the simulation ends this actor: let it
          } catch (...) {
            if (!first_failure) first_failure = std::current_exception();
            world.transport().fail();
          }
          ended[static_cast<std::size_t>(r)] = 1;
        });
      }
      sim.engine().run();
      const double simulated = ::simgrid::s4u::Engine::get_clock() - started;
      if (report) {
        std::fprintf(
            stderr,
            "simgrid: %d ranks on %s: %.6f s simulated (compute %s, eager sends up to %zu B) "
            "in %.2f s\n",
            n, sim.platform_path().c_str(), simulated,
            sim.config().measure_compute ? "measured" : "skipped", sim.config().eager_bytes,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count());
      }
      if (first_failure) std::rethrow_exception(first_failure);
      for (int r = 0; r < n; ++r) {
        if (ended[static_cast<std::size_t>(r)] == 0) {
          throw error(errc::timeout,
                      fmt::format("simgrid: rank {} never finished: the simulated job "
                                  "deadlocked (every rank waiting with no deadline)",
                                  r));
        }
      }
    }
  };
};

static_assert(transport<simgrid>);

}  // namespace commx::transport
