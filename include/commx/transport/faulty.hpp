// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// `transport::faulty<T>`: any transport, with faults injected on purpose, so that an application
/// can test its own failure handling: messages delayed, a rank stalled or killed at a chosen
/// point, ranks partitioned, frames damaged on the wire. What happens, and when, is a
/// `fault_plan` (fault_plan.hpp): one line, from code or from COMMX_FAULTS, that replays a run
/// exactly: the same seed draws the same delays, and counts fire at the same sends.
///
/// ```cpp
/// // CMake: commx_add_variants(app SOURCES app.cpp TRANSPORTS tcp faulty_tcp)
/// // shell: COMMX_FAULTS='kill@2:coll=3' commxrun -n 4 ./app_faulty_tcp
/// ```
///
/// Semantics are T's with time bent, never broken: a delayed message waits at its sender, behind
/// it every later one to the same peer, so per-pair order holds; a partition holds messages
/// across it the same way until it heals (or for good: their receivers meet their deadline). A
/// killed rank dies as a crash would (its process gets SIGKILL; an in-process rank's thread
/// throws `injected_kill`, and its peers see it fail), so the survivors get `errc::peer_lost`
/// from T itself. A stall sleeps inside the rank's next call, as a SIGSTOP would stop it. A
/// damaged frame is refused by T's receiver, which closes the pair's connection. Each fault
/// logs one line to stderr, naming the plan to replay. Windows of a faulty stack travel as
/// messages (shares_node_memory is false), so faults reach them too.

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commx/error.hpp"
#include "commx/transport/concept.hpp"
#include "commx/transport/fault_plan.hpp"

namespace commx::transport {

/// What an in-process rank that its fault plan kills throws (a process gets SIGKILL instead).
class injected_kill : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A transport that can write a damaged frame onto a pair's connection (tcp).
template <class T>
concept damages_frames = requires(T& t, int peer, bool cut) {
  t.damage_frame(peer, cut);
};

}  // namespace commx::transport

namespace commx::detail::faults {

template <class T>
struct stack_name {
  static constexpr std::string_view prefix = "faulty+";
  static constexpr auto text = [] {
    std::array<char, prefix.size() + T::name.size()> out{};
    std::copy(prefix.begin(), prefix.end(), out.begin());
    std::copy(T::name.begin(), T::name.end(), out.begin() + prefix.size());
    return out;
  }();
  static constexpr std::string_view value{text.data(), text.size()};
};

// A send held back at its sender (delay, partition) until it may go to T.
template <class Request>
struct held_send {
  int peer = 0;
  context_id ctx = 0;
  int tag = 0;
  std::span<const std::byte> data;
  clock::time_point release;
  bool posted = false;
  Request inner{};
};

}  // namespace commx::detail::faults

namespace commx::transport {

/// T with the faults of a plan (see the file comment).
template <transport T>
class faulty {
  using held = commx::detail::faults::held_send<typename T::request>;

 public:
  /// "faulty+" and T's name.
  static constexpr std::string_view name = commx::detail::faults::stack_name<T>::value;
  /// Windows travel as messages, where the faults reach them.
  static constexpr bool shares_node_memory = false;
  /// T's (a plan's partition inside one node of shm is one no real node has: tests draw none).
  static constexpr bool node_cannot_split = !splits_within_node<T>;

  /// A send or receive: T's own, or a send still held here.
  struct request {
    /// T's request, when the operation went straight to T.
    typename T::request direct{};
    /// The held send, which carries T's request once released.
    std::shared_ptr<held> waiting;
  };

  /// `inner` with the faults of `plan`.
  /// @throws commx::error errc::invalid_argument if the plan names ranks the job lacks.
  faulty(T inner, fault_plan plan) : inner_(std::move(inner)), plan_(std::move(plan)) { arm(); }

  /// `inner` with the faults COMMX_FAULTS describes (none when it is unset).
  /// @throws commx::error errc::invalid_argument naming a wrong entry.
  explicit faulty(T inner) : inner_(std::move(inner)), plan_(plan_from_env(inner_.size())) {
    arm();
  }

  /// Joins as T joins, with the faults COMMX_FAULTS describes.
  static faulty from_env() requires requires { T::from_env(); }
  { return faulty(T::from_env()); }

  /// Endpoints move, with their plan and what they hold.
  faulty(faulty&&) noexcept = default;
  /// Takes over `other`'s endpoint, plan and held sends.
  faulty& operator=(faulty&&) noexcept = default;

  /// The transport underneath.
  T& inner() { return inner_; }
  /// The plan, as every rank of the job has it.
  [[nodiscard]] const fault_plan& plan() const { return plan_; }
  /// How many sends were held back here (delayed, or across a partition) so far.
  [[nodiscard]] std::uint64_t held_sends() const { return held_total_; }

  /// T's, as the transport concept says (concept.hpp).
  [[nodiscard]] int rank() const { return inner_.rank(); }
  /// T's.
  [[nodiscard]] int size() const { return inner_.size(); }
  /// T's.
  [[nodiscard]] int node_of(int peer) const { return inner_.node_of(peer); }
  /// T's, where T has sites.
  [[nodiscard]] int site_of(int peer) const requires requires(const T& t) { t.site_of(peer); }
  { return inner_.site_of(peer); }
  /// T's count, of sends T was given (held ones once released).
  [[nodiscard]] std::uint64_t bytes_sent_to(int peer) const requires requires(const T& t) {
    t.bytes_sent_to(peer);
  }
  { return inner_.bytes_sent_to(peer); }
  /// How many sends to `peer` this endpoint was given so far, so that a test can count an
  /// algorithm's messages, which bytes alone do not tell (an empty message counts).
  [[nodiscard]] std::uint64_t messages_sent_to(int peer) const {
    return sends_to_[static_cast<std::size_t>(peer)];
  }
  /// T's, where T knows layouts (data_layout.hpp).
  [[nodiscard]] data_layout layout_of(int peer) const requires knows_layouts<T> {
    return inner_.layout_of(peer);
  }
  /// T's: the peers it found failed, killed ones among them.
  [[nodiscard]] std::vector<int> failed_peers() const requires knows_failures<T> {
    return inner_.failed_peers();
  }
  /// T's exclude; sends still held for `peer` (a partition's) go to T, which fails them.
  void exclude(int peer, std::string_view why) requires excludes_peers<T> {
    inner_.exclude(peer, why);
    auto& queue = queues_[static_cast<std::size_t>(peer)];
    for (const std::shared_ptr<held>& h : queue) hand_over(*h);
    queue.clear();
  }
  /// Marks this rank as failed, as T's `fail` does (in-process ranks).
  void fail() requires requires(T& t) { t.fail(); }
  { inner_.fail(); }

  /// T's isend, after the faults due at this send; held here while a delay or a partition says.
  request isend(int peer, context_id ctx, int tag, const std::span<const std::byte>& data) {
    ++sends_;
    ++sends_to_[static_cast<std::size_t>(peer)];
    if (ctx % 2 == 1) ++collective_sends_;  // a communicator's collectives use its odd context
    fire_due();
    auto& queue = queues_[static_cast<std::size_t>(peer)];
    if (!delay_ && plan_.partitions.empty() && queue.empty()) {  // no time read: nothing to hold
      return {inner_.isend(peer, ctx, tag, data), nullptr};
    }
    const clock::time_point now = clock::now();
    const clock::time_point release = now + drawn_delay();
    if (release == now && queue.empty() && !cut_off(peer, now)) {
      return {inner_.isend(peer, ctx, tag, data), nullptr};
    }
    // Released in order per peer: a send behind a later-due one waits for it at the front.
    auto h = std::make_shared<held>(held{peer, ctx, tag, data, release});
    queue.push_back(h);
    ++holding_;
    ++held_total_;
    return {{}, std::move(h)};
  }

  /// T's irecv, after the faults due now: receives are never held.
  request irecv(int peer, context_id ctx, int tag, const recv_buffer& in) {
    fire_due();
    return {inner_.irecv(peer, ctx, tag, in), nullptr};
  }

  /// Releases what is due, then T's test (false while the send is held).
  bool test(request& req) {
    fire_due();
    release_due();
    if (!req.waiting) return inner_.test(req.direct);
    return req.waiting->posted && inner_.test(req.waiting->inner);
  }

  /// T's result.
  const op_result& result(const request& req) const {
    return inner_.result(req.waiting ? req.waiting->inner : req.direct);
  }

  /// Drops a held send (true), or asks T.
  bool cancel(request& req) {
    if (!req.waiting) return inner_.cancel(req.direct);
    if (req.waiting->posted) return inner_.cancel(req.waiting->inner);
    auto& queue = queues_[static_cast<std::size_t>(req.waiting->peer)];
    queue.erase(std::find(queue.begin(), queue.end(), req.waiting));
    --holding_;
    req.waiting.reset();
    return true;
  }

  /// Releases what is due, then T's iprobe.
  std::optional<op_result> iprobe(int peer, context_id ctx, int tag) {
    fire_due();
    release_due();
    return inner_.iprobe(peer, ctx, tag);
  }

  /// T's count, plus one per held send released.
  [[nodiscard]] std::uint64_t event_count() const { return inner_.event_count() + released_; }

  /// T's wait, cut short when a held send becomes due or a timed fault fires.
  void wait_for_event(std::uint64_t seen, clock::time_point when) {
    fire_due();
    release_due();
    if (event_count() != seen) return;
    inner_.wait_for_event(seen - released_, std::min(when, next_change()));
    fire_due();
    release_due();
  }

  /// Releases what is due, then T's progress.
  void progress() requires requires(T& t) { t.progress(); }
  {
    fire_due();
    release_due();
    inner_.progress();
  }

  /// T's completed (false while the send is held).
  [[nodiscard]] bool completed(const request& req) const requires progresses_apart<T> {
    if (!req.waiting) return inner_.completed(req.direct);
    return req.waiting->posted && inner_.completed(req.waiting->inner);
  }

 private:
  static constexpr bool network = damages_frames<T>;
  // Ranks that are threads of one process die by throwing, not by SIGKILL: their peers learn
  // of it from inproc's hub (run_inproc marks a rank that threw as failed).
  static constexpr bool in_process = T::name == std::string_view("inproc");

  static fault_plan plan_from_env(int size) {
    const char* text = std::getenv("COMMX_FAULTS");
    return text == nullptr ? fault_plan{} : fault_plan::parse(text, size, network);
  }

  void arm() {
    draw_.seed(plan_.seed * 0x2545f4914f6cdd1dULL + static_cast<std::uint64_t>(rank()));
    queues_.resize(static_cast<std::size_t>(size()));
    sends_to_.resize(static_cast<std::size_t>(size()));
    for (const fault_partition& p : plan_.partitions) {
      if (p.group.size() != queues_.size()) {
        throw error(errc::invalid_argument,
                    fmt::format("a fault partition of {} ranks in a job of {}", p.group.size(),
                                queues_.size()));
      }
    }
    for (const fault_delay& d : plan_.delays) {
      if (d.rank < 0 || d.rank == rank()) delay_ = d;
    }
    for (const fault& f : plan_.faults) {
      if (f.rank >= size() || f.peer >= size()) {
        throw error(errc::invalid_argument,
                    fmt::format("a fault for rank {} in a job of {}", f.rank, size()));
      }
      if (f.rank == rank()) pending_.push_back(f);
    }
  }

  clock::duration drawn_delay() {
    if (!delay_ || delay_->high == clock::duration::zero()) return {};
    std::uniform_int_distribution<clock::rep> span(delay_->low.count(), delay_->high.count());
    return clock::duration(span(draw_));
  }

  // Whether a partition stands between this rank and `peer` at `now`.
  [[nodiscard]] bool cut_off(int peer, clock::time_point now) const {
    for (const fault_partition& p : plan_.partitions) {
      const auto me = static_cast<std::size_t>(rank());
      if (p.group[me] == p.group[static_cast<std::size_t>(peer)]) continue;
      if (now >= start_ + p.from && (!p.length || now < start_ + p.from + *p.length)) return true;
    }
    return false;
  }

  // Hands T the held sends whose time has come, in order per peer, and those to a peer T
  // found failed (T fails them: a partition does not hide a loss seen another way).
  void release_due() {
    if (holding_ == 0) return;
    const clock::time_point now = clock::now();
    std::vector<int> failed;
    if constexpr (knows_failures<T>) failed = inner_.failed_peers();
    for (auto& queue : queues_) {
      const bool gone = !queue.empty() && std::find(failed.begin(), failed.end(),
                                                    queue.front()->peer) != failed.end();
      while (!queue.empty() &&
             (gone || (queue.front()->release <= now && !cut_off(queue.front()->peer, now)))) {
        hand_over(*queue.front());
        queue.pop_front();
      }
    }
  }

  // Gives a held send to T (the caller takes it out of its queue).
  void hand_over(held& h) {
    h.inner = inner_.isend(h.peer, h.ctx, h.tag, h.data);
    h.posted = true;
    --holding_;
    ++released_;
  }

  // The next time something here changes: a held send comes due, a partition starts or heals,
  // a timed fault fires.
  [[nodiscard]] clock::time_point next_change() const {
    clock::time_point next = clock::time_point::max();
    const clock::time_point now = clock::now();
    for (const auto& queue : queues_) {
      if (!queue.empty()) next = std::min(next, queue.front()->release);
    }
    for (const fault_partition& p : plan_.partitions) {
      for (clock::time_point edge :
           {start_ + p.from, p.length ? start_ + p.from + *p.length : clock::time_point::max()}) {
        if (edge > now) next = std::min(next, edge);
      }
    }
    for (const fault& f : pending_) {
      if (f.when.what == fault_trigger::measure::time) next = std::min(next, start_ + f.when.after);
    }
    return std::max(next, now);
  }

  [[nodiscard]] bool due(const fault_trigger& when) const {
    switch (when.what) {
      case fault_trigger::measure::sends:
        return sends_ > when.count;
      case fault_trigger::measure::collective_sends:
        return collective_sends_ >= when.count;
      case fault_trigger::measure::time:
        return clock::now() - start_ >= when.after;
    }
    return false;
  }

  void fire_due() {
    if (pending_.empty()) return;
    for (std::size_t i = 0; i < pending_.size();) {
      if (!due(pending_[i].when)) {
        ++i;
        continue;
      }
      const fault f = pending_[i];
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      fire(f);
    }
  }

  void fire(const fault& f) {
    const std::string replay = plan_.text();
    switch (f.what) {
      case fault::kind::kill: {
        const std::string line = fmt::format(
            "commx: rank {} killed by its fault plan (replay: COMMX_FAULTS='{}')", rank(), replay);
        if constexpr (in_process) {
          throw injected_kill(line);
        } else {
          std::fprintf(stderr, "%s\n", line.c_str());
          std::fflush(stderr);
          std::raise(SIGKILL);
          std::_Exit(137);  // not reached
        }
      }
      case fault::kind::stall:
        fmt::print(stderr,
                   "commx: rank {} stalls for {} by its fault plan (replay: COMMX_FAULTS='{}')\n",
                   rank(), commx::detail::faults::duration_text(f.length), replay);
        std::this_thread::sleep_for(f.length);
        return;
      case fault::kind::stranger:
        if constexpr (network) {
          fmt::print(stderr,
                     "commx: rank {} calls rank {} as a stranger by its fault plan (replay: "
                     "COMMX_FAULTS='{}')\n",
                     rank(), f.peer, replay);
          inner_.send_stranger(f.peer);
        }
        return;
      case fault::kind::corrupt:
      case fault::kind::truncate:
        if constexpr (network) {
          fmt::print(stderr,
                     "commx: rank {} {} a frame to rank {} by its fault plan (replay: "
                     "COMMX_FAULTS='{}')\n",
                     rank(), f.what == fault::kind::corrupt ? "corrupts" : "truncates", f.peer,
                     replay);
          inner_.damage_frame(f.peer, f.what == fault::kind::truncate);
        }
        return;
    }
  }

  T inner_;
  fault_plan plan_;
  std::mt19937_64 draw_;
  std::optional<fault_delay> delay_;
  std::vector<fault> pending_;                             // this rank's faults, not fired yet
  std::vector<std::deque<std::shared_ptr<held>>> queues_;  // held sends, per peer
  std::size_t holding_ = 0;
  std::uint64_t held_total_ = 0;
  std::uint64_t released_ = 0;
  std::uint64_t sends_ = 0;
  std::uint64_t collective_sends_ = 0;
  std::vector<std::uint64_t> sends_to_;  // messages_sent_to, a count per rank of the job
  clock::time_point start_ = clock::now();
};

}  // namespace commx::transport
