// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Whom a shm rank polls for records, and how often.
///
/// A rank polls the rings of the ranks that wrote to it (their bits in its senders words), not
/// every ring of its node, so its polling costs what its senders cost, not the job's size. A
/// rank that once heard from everyone (an alltoall, a flat gather's root, any_source traffic)
/// would still read every ring at every poll for the rest of the job: at 128 ranks on 2 cores,
/// the others waiting after one alltoall, an 8-byte ping-pong between two of them took 3.1 us a
/// half round trip across two dies and 1.8 us on one (0.35 and 0.11 us in a 2-rank job), and
/// 40 and 23-57 us where waits spin as a rank with a core of its own does (COMMX_SHM_SPIN=2000);
/// 0.47 and 0.17 us now (bench/README.md). So a rank's senders are of two kinds:
///
/// | kind | polled | a sender becomes one |
/// |---|---|---|
/// | hot | at every poll and look | when first found, when a look at it finds a record, and when a receive naming it is posted |
/// | cold | `cold_chunk` of them in turn at every `cold_every`-th poll or look of a spinning wait (at every poll while an any_source receive is posted); all at a wait's yields (`cold_chunk` at a time, the hot between), before and after a sleep, at the transport's poll() (a layered stack's look at the level it does not wait on) and probe, and at the next poll once a look found a record in one | when it wrote nothing for `cool_after` polls; and when more than twice `keep_hot` are hot, all but the `keep_hot` heard from last |
///
/// A halo exchange's neighbours and a tree's partners, heard from every few polls, stay hot,
/// and a sender a receive is posted for is hot as the wait starts (it cools again as any sender
/// does: a receive left posted for 1,024 polls, or one of more than 64 posted at once, is then
/// found by the chunks, at most 16x later than when every poll took one; bounded, never
/// stuck). A cold sender's unasked-for record waits at most cold_every x (cold senders /
/// cold_chunk) polls or looks (at 128 ranks some 500: 25 us of a spin, within its 50 us; a
/// test() loop's polls), the record of an any_source receive's sender a 16th of that in polls,
/// and none waits for a yield; a hot sender's, no more than one chunk's loads. A chunk at every
/// look of a spin, then at every poll, had cost a ping-pong between two of 128 ranks that had
/// all talked 8% and then 6-11% of its time across two dies (1.22-1.26x a 2-rank job's,
/// 1.13-1.14x without; perf: 44%, then 8% of the spinning rank's samples were these loads).
/// Memory: some 16 bytes and a bit per rank of the node (when it was last heard from, its place
/// among the cold, its entry in one of the lists).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace commx::detail::shm {

class polled_senders {
 public:
  /// Senders kept hot when some cool (the rest cool only beyond twice as many).
  static constexpr std::size_t keep_hot = 32;
  /// Cold senders looked at per poll or look that looks at some.
  static constexpr std::size_t cold_chunk = 4;
  /// Of the polls and a spinning wait's looks, the ones that look at a chunk of cold senders.
  static constexpr std::uint64_t cold_every = 16;
  /// Polls without a record after which a hot sender cools (looked for at every such count).
  static constexpr std::uint64_t cool_after = 1024;

  explicit polled_senders(std::size_t ranks)
      : polled_(ranks, false), last_heard_(ranks, 0), cold_at_(ranks, not_cold) {}

  /// Whether `peer` wrote to this rank once (its ring is polled, hot or cold).
  [[nodiscard]] bool polls(std::size_t peer) const { return polled_[peer]; }

  /// A sender found in the senders words: hot, as if just heard from.
  void add(int peer) {
    polled_[index(peer)] = true;
    last_heard_[index(peer)] = polls_;
    hot_.push_back(peer);
  }

  [[nodiscard]] std::span<const int> hot() const { return hot_; }
  [[nodiscard]] std::span<const int> cold() const { return cold_; }

  /// Starts a poll: whether it looks at every cold sender (due; it then does, and they are
  /// no longer due) or the next chunk.
  [[nodiscard]] bool start_poll() {
    if (++polls_ % cool_after == 0) cool_quiet();
    return std::exchange(cold_due_, false);
  }
  /// The next cold_chunk cold senders, in turn (fewer at the end of the list).
  [[nodiscard]] std::span<const int> next_cold_chunk() {
    if (cold_.empty()) return {};
    if (cursor_ >= cold_.size()) cursor_ = 0;
    const std::size_t first = cursor_;
    cursor_ += std::min(cold_chunk, cold_.size() - first);
    return std::span<const int>(cold_).subspan(first, cursor_ - first);
  }
  /// A poll's or a spinning wait's look: the next chunk at every cold_every-th, none at the
  /// others.
  [[nodiscard]] std::span<const int> sparse_cold_chunk() {
    return ++sparse_looks_ % cold_every == 0 ? next_cold_chunk() : std::span<const int>{};
  }
  /// The next poll looks at every cold sender (a look found a record, or the rank may sleep).
  void cold_due() { cold_due_ = true; }

  /// `peer` has written since the last poll.
  void heard(int peer) { last_heard_[index(peer)] = polls_; }
  /// The cold sender `peer` has written: it is hot again (the last cold sender takes its place
  /// in the cold list).
  void warm(int peer) {
    const std::uint32_t at = cold_at_[index(peer)];
    if (at == not_cold) return;
    cold_at_[index(cold_.back())] = at;
    cold_[at] = cold_.back();
    cold_.pop_back();
    cold_at_[index(peer)] = not_cold;
    hot_.push_back(peer);
    heard(peer);
  }

  /// A receive naming `peer` is posted: cold, it is hot again, as if just heard from.
  void awaited(int peer) {
    if (!cold_.empty() && polls(index(peer))) warm(peer);
  }

  /// Cools the hot senders that wrote nothing in the last cool_after polls.
  void cool_quiet() {
    const auto quiet = [&](int peer) { return last_heard_[index(peer)] + cool_after <= polls_; };
    cool(std::stable_partition(hot_.begin(), hot_.end(), std::not_fn(quiet)));
  }

  /// Cools all but the keep_hot senders heard from last, once more than twice as many are
  /// hot: a linear pass per keep_hot senders warmed.
  void cool_if_crowded() {
    if (hot_.size() <= 2 * keep_hot) return;
    const auto kept = hot_.begin() + static_cast<std::ptrdiff_t>(keep_hot);
    std::nth_element(hot_.begin(), kept, hot_.end(),
                     [&](int a, int b) { return last_heard_[index(a)] > last_heard_[index(b)]; });
    cool(kept);
  }

 private:
  static constexpr std::uint32_t not_cold = 0xffffffffU;
  static std::size_t index(int peer) { return static_cast<std::size_t>(peer); }

  // The hot senders from `first` on become cold.
  void cool(std::vector<int>::iterator first) {
    for (auto it = first; it != hot_.end(); ++it) {
      cold_at_[index(*it)] = static_cast<std::uint32_t>(cold_.size());
      cold_.push_back(*it);
    }
    hot_.erase(first, hot_.end());
  }

  std::vector<int> hot_;
  std::vector<int> cold_;
  std::vector<bool> polled_;
  std::vector<std::uint64_t> last_heard_;  // the poll at which each sender last wrote
  std::vector<std::uint32_t> cold_at_;     // each cold sender's place in cold_
  std::size_t cursor_ = 0;                 // the next chunk's first place in cold_
  std::uint64_t polls_ = 0;
  std::uint64_t sparse_looks_ = 0;  // sparse_cold_chunk's calls
  bool cold_due_ = false;
};

}  // namespace commx::detail::shm
