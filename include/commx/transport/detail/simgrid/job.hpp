// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// What every rank of one simulated job shares: a SimGrid mailbox per rank that the network
/// delivers into, commx's matching (the in-process hub's: posted receives, queued messages,
/// ranks gone), and the envelopes still travelling.
///
/// A message is an envelope: source, context, tag, its place in the order of its sender's
/// messages to this receiver, and a copy of the payload, carried by a SimGrid communication of
/// the payload's size, so the network model times it and the receiver computes on real data.
/// Arrival is not delivery: a receiver takes what its mailbox holds whenever it calls into the
/// transport, restores each sender's order (a small message may overtake a large one on the
/// wire) and hands the messages to the matching, which completes a posted receive or queues
/// them.

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/Mailbox.hpp>
#include <xbt/config.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/transport/detail/inproc/hub.hpp"
#include "commx/transport/detail/simgrid/simulation.hpp"

namespace commx::detail::simgrid {

/// What travels: a message, or a poke that only wakes its receiver (a peer left).
struct envelope {
  enum class kind : unsigned char { message, poke };
  kind what = kind::message;
  int source = 0;
  context_id ctx = 0;
  int tag = 0;
  std::uint64_t order = 0;  ///< the sender's count of its earlier messages to this receiver
  std::vector<std::byte> payload;
};

/// A send whose transfer the sender waits for (larger than the eager size).
struct send_state {
  s4u::CommPtr comm;
  transport::op_result result;
  bool done = false;
};

// When a send completes. A transfer starts at the send (each rank's mailbox is a permanent
// receiver, so nothing waits for the receive to be posted) and, by default, the send completes
// when the transfer ends. SMPI starts a transfer only once its receive is posted and lets a
// small sender go on at once; in collectives whose rounds go in lock-step both come to the same
// time (at 256 simulated ranks on the fat-tree, a 64 KiB allreduce by Rabenseifner's algorithm:
// 28.47 us here, 28.59 under SMPI). Sends up to COMMX_SIMGRID_EAGER_BYTES (settings) complete
// at the sender at once instead, as a NIC's eager sends do: a fast rank's next message then
// loads a slower partner's links while it still takes in the previous round, and SimGrid's
// fluid model with its cross traffic made that 64 KiB allreduce 46.4 us (bench/HISTORY.md).

/// What a message costs on the platform between two hosts, C(n) = latency + n / bandwidth: the
/// sum of the route's link latencies, and the least of its links' bandwidths or of what TCP's
/// window lets through on a path that long (SimGrid's CM02 caps a flow at
/// network/TCP-gamma / (2 latency); a 50 ms wide link carries 4 MiB windows at 42 MB/s).
struct route_cost {
  double latency_us = 0;
  double us_per_byte = 0;
};

/// The shared state of one simulated job.
class job {
 public:
  job(simulation& sim, int ranks, const std::vector<int>& nodes)
      : sim_(sim),
        host_of_(sim.place(ranks, nodes)),
        matching_(ranks, matching_options(sim, host_of_)),
        id_(next_id()) {
    mailboxes_.reserve(host_of_.size());
    for (std::size_t r = 0; r < host_of_.size(); ++r) {
      mailboxes_.push_back(s4u::Mailbox::by_name(fmt::format("commx.{}.{}", id_, r)));
    }
  }
  job(const job&) = delete;
  job& operator=(const job&) = delete;
  ~job() {
    for (envelope* e : travelling_) delete e;  // sent to ranks that ended before taking them
  }

  [[nodiscard]] int size() const { return static_cast<int>(host_of_.size()); }
  [[nodiscard]] s4u::Host* host(int rank) const { return sim_.hosts()[host_of_[index(rank)]]; }
  [[nodiscard]] int node_of(int rank) const { return static_cast<int>(host_of_[index(rank)]); }
  [[nodiscard]] int site_of(int rank) const { return sim_.site_of_host(host_of_[index(rank)]); }
  [[nodiscard]] s4u::Mailbox* mailbox(int rank) const { return mailboxes_[index(rank)]; }
  [[nodiscard]] inproc::hub& matching() { return matching_; }
  [[nodiscard]] bool measures_compute() const { return sim_.config().measure_compute; }
  /// The largest send that completes at the sender at once (see eager sends above).
  [[nodiscard]] std::size_t eager_bytes() const { return sim_.config().eager_bytes; }
  /// The cost of a message between the first and the last rank, whose route is the job's
  /// longest where hosts are numbered by their place in the platform (across the top of a
  /// fat-tree, between the sites of two): what coll::tuned's cost model weighs a round with.
  [[nodiscard]] route_cost farthest_route() {
    if (!farthest_) farthest_ = route_between(host(0), host(size() - 1));
    return *farthest_;
  }
  /// Where the receive a rank keeps posted on its mailbox puts what it takes: the job's, so a
  /// receive that completes after its endpoint is gone writes into memory that still exists.
  [[nodiscard]] envelope*& arrival_slot(int rank) { return arrival_slots_[index(rank)]; }

  /// A new envelope, owned by the job until its receiver takes it (`taken`).
  envelope* make_envelope() {
    auto* e = new envelope();
    travelling_.insert(e);
    return e;
  }
  /// The receiver has it: it is freed.
  void taken(envelope* e) {
    travelling_.erase(e);
    delete e;
  }

  /// Whether `rank` is blocked in the simulation, waiting for its mailbox or its sends: set
  /// with no simulation call between its last look at its events and the wait, so that a peer
  /// that ends meanwhile knows to poke it.
  void set_waiting(int rank, bool blocked) { waiting_[index(rank)] = blocked ? 1 : 0; }
  /// The source `rank`'s last fruitless probe named (any_source included), or `no_probe`: a
  /// rank that waits after it learns from a poke that the source ended.
  void set_probing(int rank, int source) { probing_[index(rank)] = source; }
  static constexpr int no_probe = -3;

  /// A message from `from` to `to` is on its way.
  void sent(int from, int to) {
    ++undelivered_[index(from)];
    ++undelivered_between_[pair(from, to)];
  }
  /// `to` handed it to its matching (or will never: it left).
  void delivered(int from, int to) { forget(from, to, 1); }

  /// `rank` ends, having finished or (`failed`) not. What it sent still arrives: its peers learn
  /// that it is gone once the last of its messages is delivered (or its receiver left too).
  /// `can_send`: false while the rank's actor unwinds, when it must not call into SimGrid.
  void leave(int rank, bool failed, bool can_send) {
    can_send_ = can_send;
    leaving_.emplace(rank, failed);
    // What was still on its way to this rank will never be taken: its senders stop waiting for
    // it to be (a sender that ended too is then gone).
    std::vector<std::pair<int, std::uint64_t>> stranded;
    for (const auto& [between, messages] : undelivered_between_) {
      if (static_cast<int>(between & 0xffffffffU) == rank) {
        stranded.emplace_back(static_cast<int>(between >> 32), messages);
      }
    }
    for (const auto& [sender, messages] : stranded) forget(sender, rank, messages);
    if (leaving_.contains(rank) && undelivered_[index(rank)] == 0) gone(rank);
  }

 private:
  static std::uint64_t pair(int from, int to) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(from)) << 32) |
           static_cast<std::uint32_t>(to);
  }

  void forget(int from, int to, std::uint64_t messages) {
    const auto between = undelivered_between_.find(pair(from, to));
    if (between == undelivered_between_.end()) return;
    between->second -= messages;
    if (between->second == 0) undelivered_between_.erase(between);
    undelivered_[index(from)] -= messages;
    if (undelivered_[index(from)] == 0 && leaving_.contains(from)) gone(from);
  }

  // The matching completes the receives that waited for `rank`; each rank blocked in a wait
  // that this ends (a receive of its ended, or it waits to probe for `rank`, or for anyone and
  // `rank` failed) is poked, so it wakes. The others see the change at their next call: poking
  // every waiting rank at every end made a 1,024-rank job's end quadratic in pokes.
  void gone(int rank) {
    const auto it = leaving_.find(rank);
    const bool failed = it->second;
    leaving_.erase(it);
    std::vector<int> woken;
    matching_.leave(rank, failed, &woken);
    if (!can_send_) return;
    for (int r = 0; r < size(); ++r) {
      const int probing = probing_[index(r)];
      if (waiting_[index(r)] != 0 && (probing == rank || (failed && probing == any_source))) {
        woken.push_back(r);
      }
    }
    std::sort(woken.begin(), woken.end());
    woken.erase(std::unique(woken.begin(), woken.end()), woken.end());
    for (int r : woken) {
      if (r == rank || waiting_[index(r)] == 0) continue;
      envelope* poke = make_envelope();
      poke->what = envelope::kind::poke;
      poke->source = rank;
      mailbox(r)->put_init(poke, 0)->detach();
    }
  }

  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }

  static route_cost route_between(s4u::Host* from, s4u::Host* to) {
    std::vector<s4u::Link*> links;
    double latency = 0;
    from->route_to(to, links, &latency);
    double bandwidth = std::numeric_limits<double>::infinity();
    for (const s4u::Link* link : links) bandwidth = std::min(bandwidth, link->get_bandwidth());
    if (latency > 0) {
      const double gamma = ::simgrid::config::get_value<double>("network/TCP-gamma");
      if (gamma > 0) bandwidth = std::min(bandwidth, gamma / (2 * latency));
    }
    if (!(bandwidth < std::numeric_limits<double>::infinity())) bandwidth = 1e12;
    return {latency * 1e6, 1e6 / bandwidth};
  }

  static inproc::hub_options matching_options(const simulation& sim,
                                              const std::vector<std::size_t>& host_of) {
    inproc::hub_options o;
    // The matching copies every message it queues: the envelope it came in is freed at once.
    o.eager_threshold = SIZE_MAX;
    o.eager_limit = SIZE_MAX;
    for (std::size_t h : host_of) {
      o.nodes.push_back(static_cast<int>(h));
      o.sites.push_back(sim.site_of_host(h));
    }
    return o;
  }

  static std::uint64_t next_id() {
    static std::atomic<std::uint64_t> jobs{0};
    return jobs.fetch_add(1, std::memory_order_relaxed);
  }

  simulation& sim_;
  std::vector<std::size_t> host_of_;  // host index per rank
  inproc::hub matching_;
  std::uint64_t id_;
  std::vector<s4u::Mailbox*> mailboxes_;
  std::unordered_set<envelope*> travelling_;
  std::vector<envelope*> arrival_slots_ = std::vector<envelope*>(host_of_.size());
  std::vector<char> waiting_ = std::vector<char>(host_of_.size());
  std::vector<int> probing_ = std::vector<int>(host_of_.size(), no_probe);
  std::vector<std::uint64_t> undelivered_ = std::vector<std::uint64_t>(host_of_.size());
  std::unordered_map<std::uint64_t, std::uint64_t> undelivered_between_;  // by (from, to)
  std::map<int, bool> leaving_;  // ranks that ended, their messages still travelling: failed?
  bool can_send_ = true;
  std::optional<route_cost> farthest_;
};

}  // namespace commx::detail::simgrid
