// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// The in-process transport's shared state: one mailbox per rank, all behind one mutex.
/// Ranks are threads of one process, so a message is copied once, from the sender's buffer
/// straight into the posted receive; only messages nobody asked for yet are buffered.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "commx/deadline.hpp"
#include "commx/error.hpp"
#include "commx/transport/detail/unexpected_queue.hpp"
#include "commx/transport/message.hpp"

namespace commx::detail::inproc {

using transport::op_result;
using transport::recv_buffer;

/// A send or receive that did not complete when it was posted. Shared between the rank that
/// posted it and the rank that completes it; every field but `done` is guarded by the hub's
/// mutex, and `done` is published with release order after `result` is written.
struct operation {
  enum class kind { send, recv };

  operation(kind k, int owner_rank, int peer_rank, context_id context, int message_tag)
      : what(k), owner(owner_rank), peer(peer_rank), ctx(context), tag(message_tag) {}

  kind what;
  int owner;
  int peer;  // destination of a send; source (or any_source) of a receive
  context_id ctx;
  int tag;
  recv_buffer buffer{std::span<std::byte>{}};  // receives only
  std::span<const std::byte> payload;          // rendezvous sends only
  op_result result;
  std::atomic<bool> done{false};
};

/// A message that arrived before a matching receive: either copied (small, "eager") or left in
/// the sender's buffer (large, "rendezvous": the sender's request completes when it is taken).
struct queued_message {
  int source;
  context_id ctx;
  int tag;
  std::vector<std::byte> eager;
  std::shared_ptr<operation> rendezvous;
  std::uint64_t order = 0;  ///< arrival number (unexpected_queue.hpp): wildcards take the earliest

  [[nodiscard]] std::span<const std::byte> payload() const {
    return rendezvous ? rendezvous->payload : std::span<const std::byte>(eager);
  }

  /// Its slot is vacated: the sender's operation goes now, as it went when the message was
  /// erased.
  void recycle() {
    release_payload(eager);
    rendezvous.reset();
  }
};

struct hub_options {
  std::vector<int> nodes;                               ///< node id per rank; empty: one node
  std::size_t eager_threshold = std::size_t{64} << 10;  ///< larger messages wait for a receive
  std::size_t eager_limit = std::size_t{64} << 20;      ///< buffered bytes per receiver, at most
  std::vector<int> sites;                               ///< site id per rank; empty: one site
};

class hub {
 public:
  hub(int size, hub_options options)
      : options_(checked(size, std::move(options))), boxes_(static_cast<std::size_t>(size)) {}

  [[nodiscard]] int size() const { return static_cast<int>(boxes_.size()); }
  [[nodiscard]] int node_of(int rank) const { return options_.nodes[index(rank)]; }
  [[nodiscard]] int site_of(int rank) const { return options_.sites[index(rank)]; }
  /// Bytes of messages nobody asked for yet that `rank`'s mailbox holds copies of: at most
  /// eager_limit, the bound on an unexpected flood (senders beyond it keep their messages).
  [[nodiscard]] std::size_t buffered_bytes(int rank) const {
    std::lock_guard lock(mutex_);
    return boxes_[index(rank)].eager_bytes;
  }

  /// Returns null when the send completed at once (delivered or buffered).
  std::shared_ptr<operation> send(int from, int to, context_id ctx, int tag,
                                  std::span<const std::byte> data) {
    std::lock_guard lock(mutex_);
    mailbox& box = boxes_[index(to)];
    // An excluded sender is cut off: nothing it sends is taken in.
    if (box.state != presence::present || boxes_[index(from)].state != presence::present) {
      return completed(operation::kind::send, from, to, ctx, tag, lost(to, 0));
    }
    // Posted receives in the order they were posted; one that refuses the message (too small,
    // wrong element size) fails, and the message goes on to the next.
    for (auto posted = box.posted.begin(); posted != box.posted.end();) {
      if (!matches((*posted)->peer, (*posted)->ctx, (*posted)->tag, from, ctx, tag)) {
        ++posted;
        continue;
      }
      std::shared_ptr<operation> receive = std::move(*posted);
      posted = box.posted.erase(posted);
      std::error_code ec;
      std::byte* target = receive->buffer.prepare(data.size(), ec);
      if (!ec) copy(target, data);  // before finish(): the owner may read as soon as it is done
      finish(*receive, {from, tag, data.size(), ec});
      if (!ec) return nullptr;
    }
    box.events.fetch_add(1, std::memory_order_relaxed);
    box.wakeup.notify_all();
    if (data.size() <= options_.eager_threshold &&
        box.eager_bytes + data.size() <= options_.eager_limit) {
      queued_message& m = box.unexpected.push_slot(from, ctx, tag);
      m.eager.assign(data.begin(), data.end());  // a recycled slot holds no rendezvous
      box.eager_bytes += data.size();
      return nullptr;
    }
    auto op = std::make_shared<operation>(operation::kind::send, from, to, ctx, tag);
    op->payload = data;
    box.unexpected.push({from, ctx, tag, {}, op});
    return op;
  }

  /// A send to `to` completed with errc::peer_lost if `to` has left, else null: for a
  /// transport that delivers into this hub later, when the message arrives (simgrid).
  std::shared_ptr<operation> send_to_gone(int from, int to, context_id ctx, int tag) {
    std::lock_guard lock(mutex_);
    if (boxes_[index(to)].state == presence::present) return nullptr;
    return completed(operation::kind::send, from, to, ctx, tag, lost(to, 0));
  }

  std::shared_ptr<operation> recv(int owner, int from, context_id ctx, int tag,
                                  const recv_buffer& buffer) {
    std::lock_guard lock(mutex_);
    mailbox& box = boxes_[index(owner)];
    auto queued = box.unexpected.find(from, ctx, tag);
    if (queued != box.unexpected.end()) {
      const queued_message& m = *queued;
      const std::span<const std::byte> data = m.payload();
      op_result result{m.source, m.tag, data.size(), {}};
      std::byte* target = buffer.prepare(data.size(), result.error);
      if (!result.error) {
        copy(target, data);
        take(box, queued);
      }
      return completed(operation::kind::recv, owner, from, ctx, tag, result);
    }
    if (auto gone = lost_source(owner, from)) {
      return completed(operation::kind::recv, owner, from, ctx, tag, *gone);
    }
    auto op = std::make_shared<operation>(operation::kind::recv, owner, from, ctx, tag);
    op->buffer = buffer;
    box.posted.push_back(op);
    return op;
  }

  std::optional<op_result> probe(int owner, int from, context_id ctx, int tag) {
    std::lock_guard lock(mutex_);
    mailbox& box = boxes_[index(owner)];
    auto queued = box.unexpected.find(from, ctx, tag);
    if (queued != box.unexpected.end()) {
      const queued_message& m = *queued;
      return op_result{m.source, m.tag, m.payload().size(), {}};
    }
    return lost_source(owner, from);
  }

  /// Withdraws an operation that has not completed; false if it already had.
  bool cancel(operation& op) {
    std::lock_guard lock(mutex_);
    if (op.done.load(std::memory_order_relaxed)) return false;
    if (op.what == operation::kind::recv) {
      std::erase_if(boxes_[index(op.owner)].posted, [&](const auto& p) { return p.get() == &op; });
    } else {
      boxes_[index(op.peer)].unexpected.remove_if(
          [&](const queued_message& m) { return m.rendezvous.get() == &op; });
    }
    finish(op, {op.peer, op.tag, 0, make_error_code(errc::cancelled)});
    return true;
  }

  [[nodiscard]] std::uint64_t event_count(int rank) const {
    return boxes_[index(rank)].events.load(std::memory_order_acquire);
  }

  void wait_for_event(int rank, std::uint64_t seen, clock::time_point when) {
    mailbox& box = boxes_[index(rank)];
    // A peer that answers at once answers within a few scheduler turns: yielding that long
    // saves the sleep and wake-up of a condition variable, and gives the core away meanwhile,
    // so ranks on an oversubscribed machine still make progress.
    for (int turn = 0; turn < yield_turns; ++turn) {
      if (box.events.load(std::memory_order_acquire) != seen || clock::now() >= when) return;
      std::this_thread::yield();
    }
    std::unique_lock lock(mutex_);
    box.wakeup.wait_until(lock, when,
                          [&] { return box.events.load(std::memory_order_relaxed) != seen; });
  }

  /// The ranks that failed (threw), in the order they did.
  std::vector<int> failed_ranks() const {
    std::lock_guard lock(mutex_);
    return failed_;
  }

  /// The rank's endpoint is going away: it finished (`failed == false`) or threw. Its peers stop
  /// waiting for it; what it sent eagerly is still delivered. Idempotent. `woken`, if given,
  /// gets the ranks whose posted receives this ended.
  void leave(int rank, bool failed, std::vector<int>* woken = nullptr) {
    depart(rank, failed ? presence::failed : presence::finished, errc::cancelled, woken);
  }

  /// The others declared `rank` failed although its thread may still run (inproc::exclude):
  /// it goes as a rank that threw does, and from then on its own operations end with
  /// errc::peer_lost, every peer being lost to it, and its rank is among the failed ones.
  void exclude(int rank) { depart(rank, presence::failed, errc::peer_lost, nullptr); }

 private:
  enum class presence { present, finished, failed };

  // `rank` goes (`how`); what it still has under way itself ends with `own`.
  void depart(int rank, presence how, errc own, std::vector<int>* woken) {
    std::lock_guard lock(mutex_);
    mailbox& leaving = boxes_[index(rank)];
    if (leaving.state != presence::present) return;
    leaving.state = how;
    const bool failed = how == presence::failed;
    if (failed) failed_.push_back(rank);

    for (auto& op : leaving.posted) finish(*op, {op->peer, op->tag, 0, make_error_code(own)});
    leaving.posted.clear();
    // Sends still waiting for this rank to receive them will never be taken.
    leaving.unexpected.remove_if([&](const queued_message& message) {
      if (message.rendezvous) finish(*message.rendezvous, lost(rank, message.payload().size()));
      return true;
    });
    leaving.eager_bytes = 0;

    for (int other = 0; other < size(); ++other) {
      if (other == rank) continue;
      mailbox& box = boxes_[index(other)];
      // This rank's rendezvous sends point into memory that is about to go away.
      box.unexpected.remove_if([&](const queued_message& m) {
        if (!m.rendezvous || m.source != rank) return false;
        finish(*m.rendezvous, {other, m.tag, 0, make_error_code(own)});
        return true;
      });
      // An any_source receive stays posted: whether the failure ends it is its communicator's
      // to say (its members, what it acknowledged); its owner is woken to look.
      std::erase_if(box.posted, [&](const std::shared_ptr<operation>& op) {
        const bool wake = op->peer == rank || (failed && op->peer == any_source);
        if (wake && woken != nullptr && (woken->empty() || woken->back() != other)) {
          woken->push_back(other);
        }
        if (op->peer != rank) return false;
        finish(*op, lost(rank, 0));
        return true;
      });
      box.events.fetch_add(1, std::memory_order_relaxed);
      box.wakeup.notify_all();
    }
    leaving.events.fetch_add(1, std::memory_order_relaxed);  // an excluded rank may be waiting
    leaving.wakeup.notify_all();
  }

  struct mailbox {
    std::deque<std::shared_ptr<operation>> posted;
    unexpected_queue<queued_message> unexpected;
    std::size_t eager_bytes = 0;
    presence state = presence::present;
    std::atomic<std::uint64_t> events{0};
    std::condition_variable wakeup;
  };

  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }
  static constexpr int yield_turns = 16;

  // Runs before any mailbox is allocated, so a bad size is an error, not a length_error.
  static hub_options checked(int size, hub_options options) {
    if (size < 1) throw error(errc::invalid_argument, fmt::format("inproc: {} ranks (< 1)", size));
    for (auto [ids, what] :
         {std::pair{&options.nodes, "node"}, std::pair{&options.sites, "site"}}) {
      if (ids->empty()) ids->assign(static_cast<std::size_t>(size), 0);
      if (ids->size() != static_cast<std::size_t>(size)) {
        throw error(errc::invalid_argument,
                    fmt::format("inproc: {} {} ids given for {} ranks", ids->size(), what, size));
      }
      for (int id : *ids) {
        if (id < 0)
          throw error(errc::invalid_argument, fmt::format("inproc: {} id {} < 0", what, id));
      }
    }
    // A node is inside one site: ranks of one node at two sites would be two levels at once.
    for (std::size_t a = 0; a < options.nodes.size(); ++a) {
      for (std::size_t b = 0; b < a; ++b) {
        if (options.nodes[a] == options.nodes[b] && options.sites[a] != options.sites[b]) {
          throw error(errc::invalid_argument,
                      fmt::format("inproc: ranks {} and {} share node {} but not a site", b, a,
                                  options.nodes[a]));
        }
      }
    }
    return options;
  }

  static void copy(std::byte* target, std::span<const std::byte> data) {
    if (!data.empty()) std::memcpy(target, data.data(), data.size());
  }

  static op_result lost(int peer, std::size_t bytes) {
    return {peer, any_tag, bytes, make_error_code(errc::peer_lost)};
  }

  // A receive at `owner` from `from` that nothing queued satisfies: can anyone still answer
  // it? Not a rank that went, nor anyone at an excluded owner. An any_source receive is not
  // refused for a failure (its communicator decides).
  std::optional<op_result> lost_source(int owner, int from) const {
    if (from == any_source) return std::nullopt;
    if (boxes_[index(from)].state != presence::present ||
        boxes_[index(owner)].state != presence::present) {
      return lost(from, 0);
    }
    return std::nullopt;
  }

  void take(mailbox& box, unexpected_queue<queued_message>::position queued) {
    const queued_message& m = *queued;
    if (m.rendezvous) {
      finish(*m.rendezvous, {m.rendezvous->peer, m.tag, m.payload().size(), {}});
    } else {
      box.eager_bytes -= m.eager.size();
    }
    box.unexpected.pop(queued);
  }

  // Completes `op` and wakes its owner. Caller holds the mutex.
  void finish(operation& op, op_result result) {
    op.result = result;
    op.done.store(true, std::memory_order_release);
    mailbox& owner = boxes_[index(op.owner)];
    owner.events.fetch_add(1, std::memory_order_relaxed);
    owner.wakeup.notify_all();
  }

  static std::shared_ptr<operation> completed(operation::kind k, int owner, int peer,
                                              context_id ctx, int tag, op_result result) {
    auto op = std::make_shared<operation>(k, owner, peer, ctx, tag);
    op->result = result;
    op->done.store(true, std::memory_order_relaxed);
    return op;
  }

  hub_options options_;
  mutable std::mutex mutex_;
  std::vector<mailbox> boxes_;
  std::vector<int> failed_;  // in the order they failed
};

}  // namespace commx::detail::inproc
