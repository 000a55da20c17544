// SPDX-License-Identifier: MIT
// Nonblocking collectives on every policy over the transport under test (support/job.hpp):
// each of the fifteen i-collectives, all started at once and completed out of order, gives
// what its blocking form gives; `test` alone completes them; a rank blocked in a receive, a
// probe or a blocking collective moves them on (MPI's progress rule); a deadline ends one
// that a rank never joins; a request dropped unfinished writes nothing afterwards.

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <numeric>
#include <thread>
#include <vector>

#include "commx/ops.hpp"
#include "coll/policies.hpp"
#include "support/check.hpp"
#include "support/job.hpp"

using namespace std::chrono_literals;

namespace {

// Integers, so that sums are exact whatever the order.
double value_of(int rank, std::size_t i) {
  return static_cast<double>(rank * 1000 + static_cast<int>(i % 997));
}

std::vector<double> values_of(int rank, std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value_of(rank, i);
  return v;
}

// Rank r's block in the v-collectives: r + 1 elements (+ `extra`, so sizes vary with it).
std::vector<std::size_t> uneven_counts(int p, std::size_t extra) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r)
    counts[static_cast<std::size_t>(r)] = static_cast<std::size_t>(r) + 1 + extra;
  return counts;
}

std::vector<std::size_t> back_to_back(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> displs(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), std::size_t{0});
  return displs;
}

// The last two tests leave a message unreceived on a communicator they then free. On MPICH
// such a message can reach a later communicator that reuses the freed one's context (the
// known bug of transport::mpi over MPICH, issue 18), so they do not run there.
#if defined(MPICH_NUMVERSION)
constexpr bool may_leave_messages_behind = false;
#else
constexpr bool may_leave_messages_behind = true;
#endif

}  // namespace

TEMPLATE_LIST_TEST_CASE("nonblocking collectives, all in flight at once, end as blocking ones",
                        "[coll]", policies) {
  using comm = comm_for<TestType>;
  for (int n : commx::test::job_rank_counts()) {
    for (std::size_t size : {std::size_t{0}, std::size_t{5}, std::size_t{1} << 15}) {
      DYNAMIC_SECTION(n << " ranks, " << size << " elements") {
        REQUIRE_NOTHROW(job<comm>(n, [=](comm& world) {
          const int me = world.rank();
          const int root = world.size() - 1;
          const auto p = static_cast<std::size_t>(world.size());
          const std::vector<double> mine = values_of(me, size);

          std::vector<double> bcast_data =
              me == root ? values_of(root, size) : std::vector<double>(size, -1);
          std::vector<double> reduce_data = mine;
          std::vector<double> allreduce_data = mine;
          std::vector<double> gathered(me == 0 ? p * size : 0);
          std::vector<double> pieces(me == root ? p * size : 0);
          std::iota(pieces.begin(), pieces.end(), 0.0);
          std::vector<double> piece(size, -1);
          std::vector<double> everyone(p * size);
          std::vector<double> blocks(p * size);
          for (std::size_t s = 0; s < p; ++s)
            for (std::size_t i = 0; i < size; ++i)
              blocks[s * size + i] =
                  static_cast<double>((static_cast<std::size_t>(me) * 16 + s) * 10000 + i);
          std::vector<double> exchanged(p * size);
          const auto counts = uneven_counts(world.size(), size);
          const auto displs = back_to_back(counts);
          const std::size_t total = displs.back() + counts.back();
          const std::vector<double> my_block = values_of(me, counts[static_cast<std::size_t>(me)]);
          std::vector<double> gathered_v(me == 0 ? total : 0);
          std::vector<double> everyone_v(total);
          std::vector<double> scatter_source(me == root ? total : 0);
          std::iota(scatter_source.begin(), scatter_source.end(), 0.0);
          std::vector<double> scattered_v(counts[static_cast<std::size_t>(me)], -1);
          // alltoallv: rank r sends (s + 1) elements to rank s, and so receives r + 1 from each.
          std::vector<std::size_t> send_counts(p), recv_counts(p);
          for (std::size_t s = 0; s < p; ++s) {
            send_counts[s] = s + 1;
            recv_counts[s] = static_cast<std::size_t>(me) + 1;
          }
          const auto send_displs = back_to_back(send_counts);
          const auto recv_displs = back_to_back(recv_counts);
          std::vector<double> to_each(send_displs.back() + send_counts.back());
          for (std::size_t s = 0; s < p; ++s)
            for (std::size_t i = 0; i < send_counts[s]; ++i)
              to_each[send_displs[s] + i] = static_cast<double>(me * 100 + static_cast<int>(s));
          std::vector<double> from_each(recv_displs.back() + recv_counts.back(), -1);
          std::vector<double> prefix = mine;
          std::vector<double> before_me = mine;
          const std::vector<double> to_scatter = values_of(me, total);
          std::vector<double> my_sum(counts[static_cast<std::size_t>(me)], -1);

          std::vector<typename comm::request> started;
          started.push_back(world.ibarrier());
          started.push_back(world.ibcast(bcast_data, root));
          started.push_back(world.ireduce(reduce_data, std::plus<>{}, 0));
          started.push_back(world.iallreduce(allreduce_data, commx::op::max{}));
          started.push_back(world.igather(mine, gathered, 0));
          started.push_back(world.iscatter(pieces, piece, root));
          started.push_back(world.iallgather(mine, everyone));
          started.push_back(world.ialltoall(blocks, exchanged));
          started.push_back(world.igatherv(my_block, gathered_v, counts, displs, 0));
          started.push_back(world.iscatterv(scatter_source, counts, displs, scattered_v, root));
          started.push_back(world.iallgatherv(my_block, everyone_v, counts, displs));
          started.push_back(world.ialltoallv(to_each, send_counts, send_displs, from_each,
                                             recv_counts, recv_displs));
          started.push_back(world.iscan(prefix, std::plus<>{}));
          started.push_back(world.iexscan(before_me, std::plus<>{}));
          started.push_back(world.ireduce_scatter(to_scatter, my_sum, counts, std::plus<>{}));
          // Last started, first waited: each wait must move the others on.
          for (auto it = started.rbegin(); it != started.rend(); ++it) it->wait();
          for (const auto& r : started) COMMX_CHECK(!r.active());

          for (std::size_t i = 0; i < size; ++i) {
            COMMX_CHECK(bcast_data[i] == value_of(root, i));
            double sum = 0;
            for (int r = 0; r < world.size(); ++r) sum += value_of(r, i);
            COMMX_CHECK(reduce_data[i] == (me == 0 ? sum : mine[i]));
            COMMX_CHECK(allreduce_data[i] == value_of(world.size() - 1, i));
            COMMX_CHECK(piece[i] == static_cast<double>(static_cast<std::size_t>(me) * size + i));
            double upto = 0;
            for (int r = 0; r < me; ++r) upto += value_of(r, i);
            COMMX_CHECK(before_me[i] == (me == 0 ? mine[i] : upto));
            COMMX_CHECK(prefix[i] == upto + mine[i]);
          }
          for (std::size_t i = 0; i < my_sum.size(); ++i) {
            double sum = 0;
            for (int r = 0; r < world.size(); ++r)
              sum += value_of(r, displs[static_cast<std::size_t>(me)] + i);
            COMMX_CHECK(my_sum[i] == sum);
          }
          for (std::size_t r = 0; r < p; ++r) {
            for (std::size_t i = 0; i < size; ++i) {
              const double expected = value_of(static_cast<int>(r), i);
              if (me == 0) COMMX_CHECK(gathered[r * size + i] == expected);
              COMMX_CHECK(everyone[r * size + i] == expected);
              COMMX_CHECK(exchanged[r * size + i] ==
                          static_cast<double>((r * 16 + static_cast<std::size_t>(me)) * 10000 + i));
            }
            for (std::size_t i = 0; i < counts[r]; ++i) {
              const double expected = value_of(static_cast<int>(r), i);
              if (me == 0) COMMX_CHECK(gathered_v[displs[r] + i] == expected);
              COMMX_CHECK(everyone_v[displs[r] + i] == expected);
            }
            for (std::size_t i = 0; i < recv_counts[r]; ++i)
              COMMX_CHECK(from_each[recv_displs[r] + i] ==
                          static_cast<double>(static_cast<int>(r) * 100 + me));
          }
          for (std::size_t i = 0; i < scattered_v.size(); ++i)
            COMMX_CHECK(scattered_v[i] ==
                        static_cast<double>(displs[static_cast<std::size_t>(me)] + i));
        }));
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("nonblocking collectives end by test alone, and mix with blocking ones",
                        "[coll]", policies) {
  using comm = comm_for<TestType>;
  for (int n : commx::test::job_rank_counts()) {
    DYNAMIC_SECTION(n << " ranks") {
      REQUIRE_NOTHROW(job<comm>(n, [](comm& world) {
        std::vector<double> sum(1000, 1.0);
        auto reduction = world.iallreduce(sum, std::plus<>{});
        // A blocking collective while one is in flight: each is numbered when it starts.
        int token = world.rank() == 0 ? 42 : 0;
        world.bcast(token, 0);
        COMMX_CHECK(token == 42);
        const auto give_up = std::chrono::steady_clock::now() + 60s;
        while (!reduction.test()) {
          COMMX_CHECK(std::chrono::steady_clock::now() < give_up);
          std::this_thread::yield();
        }
        COMMX_CHECK(!reduction.active());
        for (double x : sum) COMMX_CHECK(x == static_cast<double>(world.size()));
        // Waiting again on an ended request returns at once, as a point-to-point one does.
        (void)reduction.wait();
        // A request that cannot be withdrawn says so.
        auto barrier = world.ibarrier();
        COMMX_CHECK(!barrier.cancel());
        barrier.wait();
      }));
    }
  }
}

// The root's binomial and ring schedules forward data in several steps: the root must send
// on while it sits in a blocking receive, or no other rank ever sends it what it waits for.
TEMPLATE_LIST_TEST_CASE("a rank blocked in point-to-point calls moves its collectives on", "[coll]",
                        policies) {
  using comm = comm_for<TestType>;
  for (int n : commx::test::job_rank_counts()) {
    if (n < 2) continue;
    DYNAMIC_SECTION(n << " ranks") {
      REQUIRE_NOTHROW(job<comm>(n, [](comm& world) {
        constexpr std::size_t elements = std::size_t{1} << 17;  // 1 MiB: no eager shortcut
        constexpr int token_tag = 7;
        std::vector<double> data(elements, world.rank() == 0 ? 3.0 : 0.0);
        auto spread = world.ibcast(data, 0);
        if (world.rank() == 0) {
          for (int i = 1; i < world.size(); ++i) {
            (void)world.probe(commx::any_source, token_tag, 60s);
            int token = 0;
            const commx::status got = world.recv(commx::any_source, token_tag, token, 60s);
            COMMX_CHECK(token == got.source);
          }
        } else {
          spread.wait(60s);
          world.send(0, token_tag, world.rank());
        }
        spread.wait(60s);
        for (double x : data) COMMX_CHECK(x == 3.0);
      }));
    }
  }
}

TEMPLATE_LIST_TEST_CASE("a nonblocking collective a rank never joins ends at the wait's deadline",
                        "[coll]", p2p_policies) {
  using comm = comm_for<TestType>;
  if (!may_leave_messages_behind) return;
  for (int n : commx::test::job_rank_counts()) {
    if (n < 2) continue;
    DYNAMIC_SECTION(n << " ranks") {
      REQUIRE_NOTHROW(job<comm>(n, [](comm& world) {
        comm lonely = world.dup();
        if (world.rank() == 0) {
          auto barrier = lonely.ibarrier();
          const auto started = commx::clock::now();  // simulated time on a simulated stack
          (void)COMMX_EXPECT_ERROR(commx::errc::timeout, barrier.wait(200ms));
          COMMX_CHECK(commx::clock::now() - started >= 200ms);
          COMMX_CHECK(!barrier.active());
        }
        world.barrier();
      }));
    }
  }
}

TEMPLATE_LIST_TEST_CASE("a nonblocking collective dropped unfinished writes nothing later",
                        "[coll]", p2p_policies) {
  using comm = comm_for<TestType>;
  if (!may_leave_messages_behind) return;
  for (int n : commx::test::job_rank_counts()) {
    if (n < 2) continue;
    DYNAMIC_SECTION(n << " ranks") {
      REQUIRE_NOTHROW(job<comm>(n, [](comm& world) {
        comm side = world.dup();
        std::vector<double> data(8, -1.0);
        if (world.rank() == 0) {
          // Started before rank 1 sends, dropped before rank 1 sends.
          (void)side.ibcast(data, 1);
        }
        world.barrier();
        if (world.rank() == 1) {
          std::vector<double> sent(8, 5.0);
          try {  // to rank 0, whose part is gone; an eager send may still complete
            side.bcast(sent, 1, 300ms);
          } catch (const commx::error& e) {
            COMMX_CHECK(e.code() == commx::errc::timeout);
          }
        }
        world.barrier();
        for (double x : data) COMMX_CHECK(x == -1.0);
      }));
    }
  }
}
