// SPDX-License-Identifier: MIT
// The flat collectives over rank counts {1, 2, 3, 4, 7}, sizes {0, 1, 7, 4096, 1 MiB}, several
// roots, user types and user reduction ops. Expected values are computed independently of
// the policy, from each rank's known contribution.

#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

#include "commx/ops.hpp"
#include "support/check.hpp"
#include "support/inproc_job.hpp"

using namespace std::chrono_literals;
using comm = commx::communicator<commx::transport::inproc, commx::coll::flat>;

namespace {

constexpr std::size_t mib_of_doubles = (std::size_t{1} << 20) / sizeof(double);
constexpr std::size_t sizes[] = {0, 1, 7, 4096, mib_of_doubles};

// Integers, so that sums are exact whatever the order.
double contribution(int rank, std::size_t i) {
  return static_cast<double>(rank * 1000 + static_cast<int>(i % 997));
}

std::vector<int> roots_for(int n, std::size_t size) {
  if (size >= mib_of_doubles) return {n - 1};  // the large case once, at a root other than 0
  std::vector<int> roots{0, n - 1, n / 2};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

struct vec3 {  // a user type
  double x, y, z;
};

// A user op that is associative but not commutative, so rank order shows: 2x2 matrix product.
struct mat2 {
  std::int64_t a, b, c, d;
  bool operator==(const mat2&) const = default;
};
struct mat_product {
  mat2 operator()(const mat2& l, const mat2& r) const {
    return {l.a * r.a + l.b * r.c, l.a * r.b + l.b * r.d, l.c * r.a + l.d * r.c,
            l.c * r.b + l.d * r.d};
  }
};
mat2 matrix_of(int rank) { return {1, rank + 1, 0, 1}; }

template <class Fn>
void job(int n, Fn&& fn) {
  commx::test::inproc_job<comm>(n, std::forward<Fn>(fn));
}

}  // namespace

TEST_CASE("flat: barrier", "[coll][flat]") {
  for (int n : commx::test::test_rank_counts()) {
    DYNAMIC_SECTION(n << " ranks") {
      REQUIRE_NOTHROW(job(n, [](comm& world) {
        for (int i = 0; i < 5; ++i) world.barrier();
      }));
    }
  }
}

TEST_CASE("flat: bcast, reduce, allreduce", "[coll][flat]") {
  for (int n : commx::test::test_rank_counts()) {
    for (std::size_t size : sizes) {
      for (int root : roots_for(n, size)) {
        DYNAMIC_SECTION(n << " ranks, " << size << " elements, root " << root) {
          REQUIRE_NOTHROW(job(n, [=](comm& world) {
            std::vector<double> data(size);
            for (std::size_t i = 0; i < size; ++i) data[i] = contribution(world.rank(), i);
            std::vector<double> mine = data;

            world.bcast(data, root);
            for (std::size_t i = 0; i < size; ++i) COMMX_CHECK(data[i] == contribution(root, i));

            data = mine;
            world.reduce(data, std::plus<>{}, root);
            for (std::size_t i = 0; i < size; ++i) {
              double expected = 0;
              for (int r = 0; r < world.size(); ++r) expected += contribution(r, i);
              COMMX_CHECK(data[i] == (world.rank() == root ? expected : mine[i]));
            }

            data = mine;
            world.allreduce(data, commx::op::max{});
            for (std::size_t i = 0; i < size; ++i)
              COMMX_CHECK(data[i] == contribution(world.size() - 1, i));
          }));
        }
      }
    }
  }
}

TEST_CASE("flat: gather, scatter, allgather, alltoall", "[coll][flat]") {
  for (int n : commx::test::test_rank_counts()) {
    for (std::size_t size : sizes) {
      for (int root : roots_for(n, size)) {
        DYNAMIC_SECTION(n << " ranks, " << size << " elements, root " << root) {
          REQUIRE_NOTHROW(job(n, [=](comm& world) {
            const auto p = static_cast<std::size_t>(world.size());
            const auto me = static_cast<std::size_t>(world.rank());
            std::vector<double> in(size);
            for (std::size_t i = 0; i < size; ++i) in[i] = contribution(world.rank(), i);

            std::vector<double> all(world.rank() == root ? size * p : 0);
            world.gather(in, all, root);
            if (world.rank() == root) {
              for (std::size_t r = 0; r < p; ++r)
                for (std::size_t i = 0; i < size; ++i)
                  COMMX_CHECK(all[r * size + i] == contribution(static_cast<int>(r), i));
            }

            std::vector<double> pieces(world.rank() == root ? size * p : 0);
            for (std::size_t i = 0; i < pieces.size(); ++i) pieces[i] = static_cast<double>(i);
            std::vector<double> piece(size, -1);
            world.scatter(pieces, piece, root);
            for (std::size_t i = 0; i < size; ++i)
              COMMX_CHECK(piece[i] == static_cast<double>(me * size + i));

            std::vector<double> everyone(size * p);
            world.allgather(in, everyone);
            for (std::size_t r = 0; r < p; ++r)
              for (std::size_t i = 0; i < size; ++i)
                COMMX_CHECK(everyone[r * size + i] == contribution(static_cast<int>(r), i));

            if (size >= mib_of_doubles && p > 4)
              return;  // alltoall of p MiB blocks: enough at p <= 4
            // Block s of rank r's input is meant for rank s: encode (from, to, i).
            std::vector<double> blocks(size * p);
            for (std::size_t s = 0; s < p; ++s)
              for (std::size_t i = 0; i < size; ++i)
                blocks[s * size + i] = static_cast<double>((me * 16 + s) * 10000 + i % 9973);
            std::vector<double> received(size * p);
            world.alltoall(blocks, received);
            for (std::size_t s = 0; s < p; ++s)
              for (std::size_t i = 0; i < size; ++i)
                COMMX_CHECK(received[s * size + i] ==
                            static_cast<double>((s * 16 + me) * 10000 + i % 9973));
          }));
        }
      }
    }
  }
}

TEST_CASE("flat: user types and user ops; reduction folds in rank order", "[coll][flat]") {
  for (int n : commx::test::test_rank_counts()) {
    DYNAMIC_SECTION(n << " ranks") {
      REQUIRE_NOTHROW(job(n, [](comm& world) {
        // A non-commutative op: the product must be M0 * M1 * ... * M(p-1) on every root.
        mat2 expected = matrix_of(0);
        for (int r = 1; r < world.size(); ++r) expected = mat_product{}(expected, matrix_of(r));
        for (int root = 0; root < world.size(); ++root) {
          mat2 m = matrix_of(world.rank());
          world.reduce(m, mat_product{}, root);
          if (world.rank() == root) COMMX_CHECK(m == expected);
        }
        mat2 all = matrix_of(world.rank());
        world.allreduce(all, mat_product{});
        COMMX_CHECK(all == expected);

        std::vector<vec3> v(3, vec3{1.0 * world.rank(), 2.0, -1.0});
        world.allreduce(v, [](const vec3& a, const vec3& b) {
          return vec3{a.x + b.x, a.y + b.y, a.z + b.z};
        });
        const double ranks = world.size() * (world.size() - 1) / 2.0;
        for (const vec3& e : v) {
          COMMX_CHECK(e.x == ranks);
          COMMX_CHECK(e.y == 2.0 * world.size());
          COMMX_CHECK(e.z == -1.0 * world.size());
        }
        const int total = world.allreduce_value(world.rank() + 1, std::plus<>{});
        COMMX_CHECK_EQ(total, world.size() * (world.size() + 1) / 2);
      }));
    }
  }
}

TEST_CASE("flat: mismatched counts are caught, not hung on", "[fixed]") {
  REQUIRE_NOTHROW(job(3, [](comm& world) {
    std::vector<int> out(3 * 2);
    std::vector<int> in(2);
    // Wrong output size at the root: checked before any message moves.
    if (world.rank() == 0) {
      std::vector<int> wrong(5);
      COMMX_EXPECT_ERROR(commx::errc::invalid_argument, world.gather(in, wrong, 0));
    }
    world.barrier();
    // Ranks disagree on the count: the root sees a message of the wrong size.
    std::vector<int> data(world.rank() == 1 ? 3 : 2);
    if (world.rank() == 0) {
      COMMX_EXPECT_ERROR(commx::errc::collective_mismatch, world.bcast(data, 1, 10s));
    } else if (world.rank() == 2) {
      COMMX_EXPECT_ERROR(commx::errc::collective_mismatch, world.bcast(data, 1, 10s));
    } else {
      world.bcast(data, 1, 10s);
    }
  }));
}
