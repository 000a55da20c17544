// SPDX-License-Identifier: MIT
// shm's choice between cma and pieces for large messages (path_choice.hpp), in one process,
// fed costs: it takes the cheaper way, tries the other again after a bounded number of
// messages and less often while it keeps losing, follows a change of the machine within a
// bounded number of messages, leaves a way only when a retry confirms the other is cheaper,
// keeps sizes and shapes apart, and in settling mode makes a retry last several messages and
// counts neither its first ones nor the first after a change of way.

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <functional>

#include "commx/transport/detail/shm/path_choice.hpp"

namespace shm = commx::detail::shm;
using way = shm::path_choice::way;

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

struct tally {
  int pieces = 0;
  int cma = 0;
  int uncounted = 0;
};

// Makes `n` decisions for `bytes`-byte messages, each costing what `cost` says (nanoseconds
// per byte) for the way taken and message number.
tally run(shm::path_choice& choice, int n, std::size_t bytes, bool exchange, bool settling,
          const std::function<double(way, int)>& cost) {
  tally t;
  for (int i = 0; i < n; ++i) {
    const auto d = choice.choose(bytes, exchange, settling);
    (d.chosen == way::cma ? t.cma : t.pieces) += 1;
    if (!d.counted) ++t.uncounted;
    const auto took = std::chrono::nanoseconds(
        static_cast<long long>(cost(d.chosen, i) * static_cast<double>(bytes)));
    choice.record(d, bytes, took);
  }
  return t;
}

double cma_cheaper(way w, int /*i*/) { return w == way::cma ? 0.06 : 0.10; }
double pieces_cheaper(way w, int /*i*/) { return w == way::cma ? 0.10 : 0.06; }

}  // namespace

TEST_CASE("each way is measured first, then the cheaper one is taken") {
  shm::path_choice choice;
  // Each way's first message (cold memory) is not counted: two of each.
  const tally start = run(choice, 4, mib, false, false, cma_cheaper);
  CHECK(start.pieces == 2);
  CHECK(start.uncounted == 2);
  CHECK(choice.preferred(mib, false) == way::cma);
  const tally t = run(choice, 1000, mib, false, false, cma_cheaper);
  CHECK(t.cma > 980);
  CHECK(t.pieces > 0);  // the other way is still tried now and then
  CHECK(t.uncounted == 0);
}

TEST_CASE("a way that keeps losing is tried less and less often, but never never") {
  shm::path_choice choice;
  run(choice, 100, mib, false, false, pieces_cheaper);
  const tally early = run(choice, 1000, mib, false, false, pieces_cheaper);
  const tally late = run(choice, 10'000, mib, false, false, pieces_cheaper);
  CHECK(early.cma >= 3);
  // Settled: one retry in retry_last messages.
  const int settled_most = 10'000 / static_cast<int>(shm::path_choice::retry_last) + 1;
  CHECK(late.cma >= settled_most - 1);
  CHECK(late.cma <= settled_most);
}

TEST_CASE("a machine that changes is followed within a bounded number of messages") {
  shm::path_choice choice;
  run(choice, 20'000, mib, false, false, pieces_cheaper);  // settled: retries far apart
  REQUIRE(choice.preferred(mib, false) == way::pieces);
  // From message 0 on, cma is the cheaper way: found by the next retry at the latest.
  int switched_at = -1;
  run(choice, 3 * static_cast<int>(shm::path_choice::retry_last), mib, false, false,
      [&](way w, int i) {
        if (w == way::cma && switched_at < 0) switched_at = i;
        return cma_cheaper(w, i);
      });
  CHECK(switched_at >= 0);
  CHECK(switched_at <= static_cast<int>(shm::path_choice::retry_last));
  CHECK(choice.preferred(mib, false) == way::cma);
}

TEST_CASE("one slow message is not enough to leave a way; two make the other tried again") {
  shm::path_choice choice;
  run(choice, 200, mib, false, false, pieces_cheaper);
  REQUIRE(choice.preferred(mib, false) == way::pieces);
  const auto slow_pieces = [](int slow) {
    return
        [slow](way w, int i) { return i < slow && w == way::pieces ? 0.6 : pieces_cheaper(w, i); };
  };
  const tally once = run(choice, 5, mib, false, false, slow_pieces(1));
  CHECK(once.cma == 0);
  CHECK(choice.preferred(mib, false) == way::pieces);
  // Twice: pieces' cost (the median of its last three) is now above cma's, which is tried at
  // once and, cheaper than that, taken; pieces is tried again soon and, cheap again, taken back.
  const tally twice = run(choice, 2, mib, false, false, slow_pieces(2));
  CHECK(twice.cma == 0);
  const tally after = run(choice, 2 * static_cast<int>(shm::path_choice::retry_first) + 4, mib,
                          false, false, pieces_cheaper);
  CHECK(after.cma >= 1);
  CHECK(choice.preferred(mib, false) == way::pieces);
}

TEST_CASE("sizes and shapes keep costs of their own") {
  shm::path_choice choice;
  run(choice, 100, mib, false, false, pieces_cheaper);
  run(choice, 100, mib, true, false, cma_cheaper);
  run(choice, 100, 64 * 1024, false, false, cma_cheaper);
  CHECK(choice.preferred(mib, false) == way::pieces);
  CHECK(choice.preferred(mib, true) == way::cma);
  CHECK(choice.preferred(64 * 1024, false) == way::cma);
  CHECK(choice.preferred(4 * mib, false) == way::pieces);  // nothing measured: pieces first
  CHECK(choice.describe().find("exchange") != std::string::npos);
}

TEST_CASE("settling: a retry lasts several messages and counts only its last") {
  shm::path_choice choice;
  // cma's first three messages in a row cost 100x (the peers still take the old way, the
  // reader's cache is cold: as measured), then less than pieces: counted, they would make every
  // retry lose; not counted, the retry sees cma's steady cost.
  int cma_in_a_row = 0;
  run(choice, 200, mib, true, true, [&](way w, int i) {
    cma_in_a_row = w == way::cma ? cma_in_a_row + 1 : 0;
    return w == way::cma && cma_in_a_row <= 3 ? 10.0 : cma_cheaper(w, i);
  });
  CHECK(choice.preferred(mib, true) == way::cma);
  // Settled on cma: every retry of pieces lasts settling_retry messages, only the last counted,
  // and the first back on cma is not counted either.
  const tally settled = run(choice, 2000, mib, true, true, cma_cheaper);
  const int retry = shm::path_choice::settling_retry;
  REQUIRE(settled.pieces >= retry);
  const int retries = settled.pieces / retry;
  // Per retry: its first retry - 1 messages and the first back on cma (give or take one retry
  // that the run's boundaries cut).
  CHECK(settled.uncounted >= (retries - 1) * retry);
  CHECK(settled.uncounted <= (retries + 1) * retry);
}
