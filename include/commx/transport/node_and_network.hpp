// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::node_and_network<Node, Net, Inner>`: one job whose ranks on one node talk through
/// `Node` (shared memory) and whose ranks on different nodes talk through `Net` (tcp; wan, which
/// is tcp within a site and parallel streams between sites); with `Inner` = level::site, the
/// ranks of one site talk through `Node` (MPI: mpi_wan.hpp) and only other sites through `Net`.
/// Each message takes the innermost level its two ranks share, and the job sees one transport
/// with one transport's semantics.
///
/// Matching. Every peer is reached through exactly one level, so each level's own matching
/// engine sees all of that peer's messages and nothing else: per-pair order, tags, truncation
/// (the message stays queued) and peer loss are that engine's, and no message is matched by two
/// engines. What no single engine can do is a receive that several levels could satisfy
/// (`any_source`, once the node has peers and so has the network). Such a receive is held here,
/// not posted below: it looks at the levels' queues (`iprobe`) and, when a message waits, posts
/// a receive naming that message's source and tag on its level, which takes exactly that
/// message (it is the earliest from that source with that tag), the payload going straight from
/// the level into the user's buffer, large messages included. Receives are matched in the order
/// they were posted: while a held receive waits, a later receive that could take the same
/// messages is held behind it rather than posted below, and a message found for a held receive
/// goes to the earliest held receive that matches it. So a message is received once, by the
/// receive MPI's rules give it to, whichever level it came by.
///
/// Waiting. The levels wait differently (a futex in the segment, epoll on the sockets), and no
/// one call waits on both. A wait blocks in the level that the requests just tested are on, in
/// slices, and makes the other level progress (without blocking) between slices, and at most
/// every 20 us in a run of short waits; with requests on both levels (or a held receive) it
/// alternates slices of 100 us, doubling up to 2 ms while nothing comes. A message on a level
/// no tested request waits for is taken in within one slice (1 ms; 2 ms on both).
///
/// Peer loss reaches every level's waiters: a lost peer fails the receives its level holds;
/// a held `any_source` receive, like any level's, is left to its communicator to end (its
/// wait sees the level's event count move). Sizes and traffic: `bytes_sent_over(level)` says how many payload bytes each
/// level (node, site, wide area) carried from this rank.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/error.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/data_layout.hpp"
#include "commx/transport/detail/layered/on_network.hpp"
#include "commx/transport/detail/start_tree.hpp"

namespace commx::transport {

/// Which level of the machine a pair of ranks shares innermost.
enum class level : std::uint8_t {
  node,  ///< the same node: shared memory
  site,  ///< the same site, different nodes: the site's network
  wide   ///< different sites: the wide-area link
};

/// One endpoint over two transports: `Node` among the ranks that share this rank's `Inner` level
/// (its node, for shared memory; its site, for MPI inside a site), numbered 0..k-1 in world-rank
/// order, and `Net` among all the job's ranks (see the file comment).
template <transport Node, transport Net, level Inner = level::node>
requires requires(Node& node, Net& net) {
  node.progress();
  net.progress();
}
class node_and_network {
 public:
  class request;

  /// The outermost level the inner transport `Node` serves: peers that share it with this rank
  /// are reached through `Node`, all others through `Net`.
  static constexpr level inner_level = Inner;
  /// Whether ranks of one node may map each other's shared memory: when the inner level is the
  /// node and its transport does.
  static constexpr bool shares_node_memory = Inner == level::node && requires {
    requires Node::shares_node_memory;
  };
  /// Whether nothing can cut a node's ranks apart: when the inner level is the node and its
  /// transport says so (concept.hpp).
  static constexpr bool node_cannot_split = Inner == level::node && !splits_within_node<Node>;

  /// Joins: `net` is this rank's endpoint in the whole job; `node` its endpoint among
  /// `node_members` (world ranks, ascending, this rank among them), which are the ranks
  /// that share this rank's inner level (`inner_members`).
  node_and_network(Net net, Node node, std::vector<int> node_members)
      : net_(std::move(net)),
        node_(std::move(node)),
        local_(static_cast<std::size_t>(net_.size()), -1),
        members_(std::move(node_members)),
        sent_(static_cast<std::size_t>(net_.size()), 0) {
    if (members_.size() > 1) {
      for (std::size_t i = 0; i < members_.size(); ++i) {
        local_.at(static_cast<std::size_t>(members_[i])) = static_cast<int>(i);
      }
    }
    for (int p = 0; p < net_.size(); ++p) {
      if (local_[static_cast<std::size_t>(p)] < 0 && p != net_.rank()) ++remote_peers_;
    }
  }

  /// The world ranks `net` puts on this rank's node (or site, for an inner level of sites),
  /// ascending.
  static std::vector<int> inner_members(const Net& net) {
    const auto group = [&net](int p) {
      if constexpr (Inner == level::node) {
        return net.node_of(p);
      } else {
        return net.site_of(p);
      }
    };
    std::vector<int> members;
    for (int p = 0; p < net.size(); ++p) {
      if (group(p) == group(net.rank())) members.push_back(p);
    }
    return members;
  }

  /// Waits until every rank of `net` has joined it, before the inner level is made: a rank
  /// that waits for its peers in the inner level's start-up does not serve the network, and a
  /// rank that had already finished would wait for it to answer its goodbye. The ranks meet
  /// along the start-up tree (detail/start_tree.hpp): word comes up from the leaves to rank 0
  /// and back down, each rank talking to its parent and children only.
  /// @throws commx::error errc::timeout naming a missing rank after the network transport's
  ///   timeout (COMMX_TIMEOUT; 2 minutes for one that has none); errc::peer_lost.
  static void meet(Net& net) {
    using detail::layered::meeting_context;
    const clock::duration limit = detail::layered::network_timeout(net);
    const clock::time_point until = clock::now() + limit;
    const auto finish = [&](typename Net::request r, int peer) {
      detail::layered::finish_on(net, std::move(r), peer, until, limit, "joining the job");
    };
    const std::span<const std::byte> nothing;
    const recv_buffer no_room{std::span<std::byte>{}};
    const detail::start_tree tree = detail::start_tree_of(net.rank(), net.size());
    for (const int child : tree.children)
      finish(net.irecv(child, meeting_context, 0, no_room), child);
    if (tree.parent >= 0) {
      finish(net.isend(tree.parent, meeting_context, 0, nothing), tree.parent);
      finish(net.irecv(tree.parent, meeting_context, 0, no_room), tree.parent);
    }
    for (const int child : tree.children)
      finish(net.isend(child, meeting_context, 0, nothing), child);
  }

  /// This endpoint's world rank, in [0, size()).
  [[nodiscard]] int rank() const { return net_.rank(); }
  /// The number of world ranks (>= 1).
  [[nodiscard]] int size() const { return net_.size(); }
  /// The node `peer` is on, as the network transport says (COMMX_NODE, or the host address).
  [[nodiscard]] int node_of(int peer) const { return net_.node_of(peer); }
  /// The site `peer` is at (COMMX_SITE); 0 for all over a network transport without sites.
  [[nodiscard]] int site_of(int peer) const {
    if constexpr (requires { net_.site_of(peer); }) {
      return net_.site_of(peer);
    } else {
      return 0;
    }
  }
  /// How `peer`'s machine lays out values, as the network transport learned it.
  [[nodiscard]] data_layout layout_of(int peer) const requires requires(const Net& n) {
    n.layout_of(peer);
  }
  { return net_.layout_of(peer); }

  /// The level that carries messages between this rank and `peer`.
  [[nodiscard]] level level_of(int peer) const {
    if (node_of(peer) == node_of(rank())) return level::node;
    return site_of(peer) == site_of(rank()) ? level::site : level::wide;
  }
  /// Payload bytes this endpoint has handed to sends to `peer` so far.
  [[nodiscard]] std::uint64_t bytes_sent_to(int peer) const {
    return sent_.at(static_cast<std::size_t>(peer));
  }
  /// Payload bytes this endpoint has handed to `l`'s transport so far.
  [[nodiscard]] std::uint64_t bytes_sent_over(level l) const {
    std::uint64_t total = 0;
    for (int p = 0; p < size(); ++p) {
      if (level_of(p) == l) total += sent_[static_cast<std::size_t>(p)];
    }
    return total;
  }
  /// The peers either level found failed: the node level's in the order it found them, then
  /// the network level's others in theirs (the two orders are not interleaved).
  [[nodiscard]] std::vector<int> failed_peers() const {
    std::vector<int> failed;
    if constexpr (knows_failures<Node>) {
      for (const int local : node_.failed_peers()) {
        failed.push_back(members_[static_cast<std::size_t>(local)]);
      }
    }
    if constexpr (knows_failures<Net>) {
      for (const int world : net_.failed_peers()) {
        if (std::ranges::find(failed, world) == failed.end()) failed.push_back(world);
      }
    }
    return failed;
  }

  /// Declares `peer` failed at the level that reaches it, where that level can (transport
  /// concept); a peer on a level that cannot is waited for until the deadline.
  void exclude(int peer,
               std::string_view why) requires excludes_peers<Node> || excludes_peers<Net> {
    if (on_node(peer)) {
      if constexpr (excludes_peers<Node>) node_.exclude(local_of(peer), why);
    } else if constexpr (excludes_peers<Net>) {
      net_.exclude(peer, why);
    }
  }

  /// The node level's own endpoint (tests ask it what it carried).
  [[nodiscard]] const Node& node_transport() const { return node_; }
  /// The network level's own endpoint (tests ask it what it carried).
  [[nodiscard]] const Net& network_transport() const { return net_; }

  /// Starts sending `data` to `dest` on (`ctx`, `tag`), through the level the two ranks share;
  /// `data` must stay valid and unchanged until the request completes (transport concept).
  request isend(int dest, context_id ctx, int tag, const std::span<const std::byte>& data) {
    sent_[static_cast<std::size_t>(dest)] += data.size();
    request r;
    if (const int local = local_[static_cast<std::size_t>(dest)]; local >= 0) {
      r.via_ = route::node;
      r.node_ = node_.isend(local, ctx, tag, data);
    } else {
      r.via_ = route::net;
      r.net_ = net_.isend(dest, ctx, tag, data);
    }
    return r;
  }

  /// Starts receiving a message from `source` (or any_source) with `tag` (or any_tag) on `ctx`
  /// into `buffer`: on the source's level, or held here while several levels could satisfy it.
  request irecv(int source, context_id ctx, int tag, const recv_buffer& buffer) {
    request r;
    const bool one_level = source != any_source || remote_peers_ == 0 || members_.size() <= 1;
    if (one_level && !held_could_take(source, ctx, tag)) {
      if (source == any_source ? members_.size() > 1 : on_node(source)) {
        r.via_ = route::node;
        r.node_ =
            node_.irecv(source == any_source ? any_source : local_of(source), ctx, tag, buffer);
      } else {
        r.via_ = route::net;
        r.net_ = net_.irecv(source, ctx, tag, buffer);
      }
      return r;
    }
    r.via_ = route::held;
    r.held_ = std::make_shared<held_receive>(source, ctx, tag, buffer);
    held_.push_back(r.held_);
    match_held();
    return r;
  }

  /// Makes progress; true once `r` has completed, successfully or not.
  bool test(request& r) {
    bool done = true;
    switch (r.via_) {
      case route::node:
        done = node_.test(r.node_);
        if (!done) awaited_ |= node_bit;
        break;
      case route::net:
        done = net_.test(r.net_);
        if (!done) awaited_ |= net_bit;
        break;
      case route::held:
        done = test_held(*r.held_);
        break;
      case route::none:
        break;
    }
    return done;
  }

  /// How a completed request ended: the matched source (a world rank), tag and byte count, or
  /// the error.
  const op_result& result(const request& r) const {
    switch (r.via_) {
      case route::node:
        r.outcome_ = from_node(node_.result(r.node_));
        return r.outcome_;
      case route::net:
        return net_.result(r.net_);
      case route::held: {
        held_receive& h = *r.held_;
        if (h.via == route::node) h.outcome = from_node(node_.result(h.node));
        if (h.via == route::net) h.outcome = net_.result(h.net);
        return h.outcome;
      }
      case route::none:
        break;
    }
    return r.outcome_;
  }

  /// Withdraws `r` if it has not matched yet (true); false if it has completed.
  bool cancel(request& r) {
    switch (r.via_) {
      case route::node:
        return node_.cancel(r.node_);
      case route::net:
        return net_.cancel(r.net_);
      case route::held: {
        held_receive& h = *r.held_;
        if (h.done) return false;
        if (h.via == route::node) return node_.cancel(h.node);
        if (h.via == route::net) return net_.cancel(h.net);
        std::erase(held_, r.held_);
        finish(h, {h.source, h.tag, 0, make_error_code(errc::cancelled)});
        return true;
      }
      case route::none:
        break;
    }
    return false;
  }

  /// The first queued message a receive with these arguments would match, on any level it
  /// could come by, without receiving it; an error result when `source` is gone and nothing
  /// is queued.
  std::optional<op_result> iprobe(int source, context_id ctx, int tag) {
    if (!held_.empty()) match_held();  // what a held receive takes is not there to probe
    if (source != any_source) {
      if (on_node(source)) return from_node(node_.iprobe(local_of(source), ctx, tag));
      return net_.iprobe(source, ctx, tag);
    }
    std::optional<op_result> failure;
    for (const route via : levels_in_turn()) {
      std::optional<op_result> found = via == route::node
                                           ? from_node(node_.iprobe(any_source, ctx, tag))
                                           : net_.iprobe(any_source, ctx, tag);
      if (found && !found->error) return found;
      if (found && !failure) failure = found;
    }
    return failure;
  }

  /// A counter that changes whenever something happens on either level.
  [[nodiscard]] std::uint64_t event_count() const {
    return node_.event_count() + net_.event_count() + events_;
  }

  /// Blocks, without burning a core, until event_count() != `seen` or `when` passes (in
  /// slices, see the file comment).
  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    if (!held_.empty()) match_held();
    if (event_count() != seen) return;
    const unsigned awaited = awaited_ != 0 ? awaited_ : node_bit | net_bit;
    awaited_ = 0;
    const clock::time_point now = clock::now();
    // The other level is looked at between slices, and at most every other_level_period
    // within them: a short wait (a ping-pong's) then costs no system call for the network.
    const bool look_at_other = now - other_looked_at_ >= other_level_period;
    if (look_at_other) other_looked_at_ = now;
    if (awaited == node_bit) {
      if (look_at_other) net_.progress();
      if (event_count() == seen) {
        node_.wait_for_event(node_.event_count(), std::min(when, now + single_slice));
      }
    } else if (awaited == net_bit) {
      if (look_at_other) node_.progress();
      if (event_count() == seen) {
        net_.wait_for_event(net_.event_count(), std::min(when, now + single_slice));
      }
    } else {
      node_.wait_for_event(node_.event_count(), std::min(when, now + shared_slice_));
      if (event_count() == seen) {
        net_.wait_for_event(net_.event_count(), std::min(when, clock::now() + shared_slice_));
      }
      // A long wait on both levels (a wildcard receive nobody sends to yet) lets each level
      // sleep longer turn by turn, rather than spin and yield its way through short slices.
      shared_slice_ = event_count() == seen ? std::min(2 * shared_slice_, longest_shared_slice)
                                            : shortest_shared_slice;
    }
    if (!held_.empty()) match_held();
  }

  /// Makes both levels progress without waiting.
  void progress() {
    node_.progress();
    net_.progress();
    if (!held_.empty()) match_held();
  }

 protected:
  /// The inner level's endpoint, for a stack that makes communicators through it (mpi_wan).
  Node& inner() { return node_; }
  /// The network level's endpoint, for a stack that makes communicators through it.
  Net& network() { return net_; }

 private:
  enum class route : std::uint8_t { none, node, net, held };

  /// A receive waiting here until a level has a message for it; then `via` and the level's
  /// request say where it went.
  struct held_receive {
    held_receive(int from, context_id context, int message_tag, recv_buffer into)
        : source(from), ctx(context), tag(message_tag), buffer(into) {}
    int source;
    context_id ctx;
    int tag;
    recv_buffer buffer;
    route via = route::none;
    typename Node::request node{};
    typename Net::request net{};
    op_result outcome{};
    bool done = false;
  };

 public:
  /// A request on one level, or a receive held here until a level has its message.
  class request {
   public:
    /// A request that refers to nothing (as a completed one).
    request() = default;

   private:
    friend class node_and_network;
    route via_ = route::none;
    typename Node::request node_{};
    typename Net::request net_{};
    std::shared_ptr<held_receive> held_;
    mutable op_result outcome_{};  // a node-level result, its source a world rank
  };

 private:
  static constexpr unsigned node_bit = 1;
  static constexpr unsigned net_bit = 2;
  static constexpr auto single_slice = std::chrono::milliseconds(1);
  static constexpr clock::duration shortest_shared_slice = std::chrono::microseconds(100);
  static constexpr clock::duration longest_shared_slice = std::chrono::milliseconds(2);
  static constexpr auto other_level_period = std::chrono::microseconds(20);

  [[nodiscard]] bool on_node(int peer) const { return local_[static_cast<std::size_t>(peer)] >= 0; }
  [[nodiscard]] int local_of(int peer) const { return local_[static_cast<std::size_t>(peer)]; }

  /// A node-level result with its source made a world rank.
  [[nodiscard]] op_result from_node(op_result r) const {
    if (r.source >= 0 && static_cast<std::size_t>(r.source) < members_.size()) {
      r.source = members_[static_cast<std::size_t>(r.source)];
    }
    return r;
  }
  [[nodiscard]] std::optional<op_result> from_node(std::optional<op_result> r) const {
    if (r) r = from_node(*r);
    return r;
  }

  /// Both levels, the one looked at first alternating, so neither starves the other.
  std::array<route, 2> levels_in_turn() {
    turn_ = !turn_;
    return turn_ ? std::array{route::node, route::net} : std::array{route::net, route::node};
  }

  static bool overlap(int a, int b, int wildcard) {
    return a == wildcard || b == wildcard || a == b;
  }

  /// Whether a held receive waits that could take a message a receive (source, ctx, tag) could:
  /// then that receive must wait behind it.
  [[nodiscard]] bool held_could_take(int source, context_id ctx, int tag) const {
    return std::any_of(held_.begin(), held_.end(), [&](const auto& h) {
      return h->ctx == ctx && overlap(h->source, source, any_source) &&
             overlap(h->tag, tag, any_tag);
    });
  }

  static bool takes(const held_receive& h, context_id ctx, int source, int tag) {
    return h.ctx == ctx && (h.source == any_source || h.source == source) &&
           (h.tag == any_tag || h.tag == tag);
  }

  /// A message one level has for `h` (its source a world rank), or that level's error when
  /// no level has one; nullopt when nothing is known yet.
  struct finding {
    route via;
    op_result found;
  };
  std::optional<finding> look_for(const held_receive& h) {
    if (h.source != any_source) {
      if (on_node(h.source)) {
        if (auto r = node_.iprobe(local_of(h.source), h.ctx, h.tag)) {
          return finding{route::node, from_node(*r)};
        }
      } else if (auto r = net_.iprobe(h.source, h.ctx, h.tag)) {
        return finding{route::net, *r};
      }
      return std::nullopt;
    }
    std::optional<finding> failure;
    for (const route via : levels_in_turn()) {
      std::optional<op_result> r = via == route::node
                                       ? from_node(node_.iprobe(any_source, h.ctx, h.tag))
                                       : net_.iprobe(any_source, h.ctx, h.tag);
      if (r && !r->error) return finding{via, *r};
      if (r && !failure) failure = finding{via, *r};
    }
    return failure;
  }

  /// Gives waiting messages to the held receives, in the order the receives were posted.
  void match_held() {
    std::size_t i = 0;
    while (i < held_.size()) {
      held_receive& h = *held_[i];
      const std::optional<finding> f = look_for(h);
      if (!f) {
        ++i;
        continue;
      }
      if (f->found.error) {
        finish(h, {f->found.source, h.tag, 0, f->found.error});
        held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      // Looking made progress, so the message may have come after an earlier held receive
      // looked: that one takes it (or an earlier message of its own) first.
      const auto earlier = std::find_if(
          held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(i),
          [&](const auto& e) { return takes(*e, h.ctx, f->found.source, f->found.tag); });
      if (earlier != held_.begin() + static_cast<std::ptrdiff_t>(i)) {
        i = static_cast<std::size_t>(earlier - held_.begin());
        continue;
      }
      h.via = f->via;
      if (f->via == route::node) {
        h.node = node_.irecv(local_of(f->found.source), h.ctx, f->found.tag, h.buffer);
      } else {
        h.net = net_.irecv(f->found.source, h.ctx, f->found.tag, h.buffer);
      }
      held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
      ++events_;
    }
  }

  bool test_held(held_receive& h) {
    if (h.done) return true;
    if (h.via == route::none) {
      match_held();
      if (h.done) return true;
      if (h.via == route::none) {
        awaited_ |= node_bit | net_bit;
        return false;
      }
    }
    const bool done = h.via == route::node ? node_.test(h.node) : net_.test(h.net);
    if (!done) awaited_ |= h.via == route::node ? node_bit : net_bit;
    return done;
  }

  void finish(held_receive& h, op_result outcome) {
    h.outcome = outcome;
    h.done = true;
    ++events_;
  }

  Net net_;
  Node node_;
  std::vector<int> local_;    // world rank -> node-level rank, -1: another node
  std::vector<int> members_;  // node-level rank -> world rank
  std::vector<std::uint64_t> sent_;
  int remote_peers_ = 0;
  std::deque<std::shared_ptr<held_receive>> held_;  // unmatched, in the order posted
  std::uint64_t events_ = 0;
  unsigned awaited_ = 0;                 // the levels of the requests tested since the last wait
  clock::time_point other_looked_at_{};  // the level not waited in, last made to progress
  clock::duration shared_slice_ = shortest_shared_slice;  // each level's turn, waiting on both
  bool turn_ = false;
};

}  // namespace commx::transport
