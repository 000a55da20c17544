// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// One PMB/IMB pattern (pmb.hpp) on a commx communicator, as bench_collectives (ranks as
/// threads) and bench_pmb_<stack> (ranks as processes) both run it.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "pmb.hpp"

namespace pmb {

// One PMB pattern with its buffers, allocated once per job so the timed loop only communicates.
class commx_pattern {
 public:
  commx_pattern(std::string_view bench, std::size_t bytes, int ranks)
      : bench_(bench),
        n_(bytes / sizeof(double)),
        p_(static_cast<std::size_t>(ranks)),
        a_(std::max<std::size_t>(n_ * p_, 1), 1.0),
        b_(std::max<std::size_t>(n_ * p_, 1), 0.0),
        counts_(p_, n_) {}

  /// Writes every byte the next call sends (pmb::fresh_input).
  void write_input() { std::fill(a_.begin(), a_.end(), a_.front() + 1.0); }

  template <class Comm>
  void run(Comm& world) {
    const int me = world.rank();
    const int right = (me + 1) % world.size();
    const int left = (me + world.size() - 1) % world.size();
    const std::span<double> out(a_.data(), n_);
    const std::span<double> in(b_.data(), n_);
    if (bench_ == "PingPong") {
      if (me == 0) {
        world.send(1, 0, out);
        world.recv(1, 0, in);
      } else if (me == 1) {
        world.recv(0, 0, in);
        world.send(0, 0, out);
      }
    } else if (bench_ == "PingPing") {
      if (me < 2) {
        auto sent = world.isend(1 - me, 0, out);
        world.recv(1 - me, 0, in);
        sent.wait();
      }
    } else if (bench_ == "Sendrecv") {
      world.sendrecv(right, 0, out, left, 0, in);
    } else if (bench_ == "Exchange") {
      const std::span<double> in2(b_.data() + n_, n_);
      auto to_left = world.isend(left, 0, out);
      auto to_right = world.isend(right, 1, out);
      world.recv(right, 0, in);
      world.recv(left, 1, in2);
      to_left.wait();
      to_right.wait();
    } else if (bench_ == "Allreduce") {
      world.allreduce(out, std::plus<>{});
    } else if (bench_ == "Reduce") {
      world.reduce(out, std::plus<>{}, next_root());
    } else if (bench_ == "Reduce_scatter") {
      world.reduce_scatter_block(std::span<const double>(a_.data(), (n_ / p_) * p_),
                                 std::span<double>(b_.data(), n_ / p_), std::plus<>{});
    } else if (bench_ == "Allgather") {
      world.allgather(std::span<const double>(out), std::span<double>(b_.data(), n_ * p_));
    } else if (bench_ == "Allgatherv") {
      world.allgatherv(std::span<const double>(out), std::span<double>(b_.data(), n_ * p_),
                       counts_);
    } else if (bench_ == "Alltoall") {
      world.alltoall(std::span<const double>(a_.data(), n_ * p_),
                     std::span<double>(b_.data(), n_ * p_));
    } else if (bench_ == "Bcast") {
      world.bcast(out, next_root());
    } else if (bench_ == "Barrier") {
      world.barrier();
    }
  }

 private:
  // Every rank runs the pattern as often as the others, so all agree on the root.
  int next_root() { return pmb::next_root(calls_, static_cast<int>(p_)); }

  std::string_view bench_;
  std::size_t n_;
  std::size_t p_;
  int calls_ = 0;
  std::vector<double> a_;
  std::vector<double> b_;
  std::vector<std::size_t> counts_;
};

}  // namespace pmb
