// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// Sends from a node of a tree to its children, largest subtree first: large messages that
/// leave the machine one after another, the rest all at once.
///
/// Sends posted together to other machines share this machine's link. A tree's largest
/// subtree has the most left to do, so its child should have the data first; sharing makes
/// every child wait for all of it, and a tree's L levels cost L (a + k n b) for k children
/// rather than the postal model's L (a + n b). On a simulated 256-host crossbar
/// (transport::simgrid, bench/README.md) a 1 MiB binomial bcast took 3,027 us with its sends
/// posted together against the model's 678, and the scatter before ring's allgather 2,193 us
/// where SMPI's same algorithm, which sends to one child after another as MPICH's trees do,
/// took 386. Within a machine there is no one link: each receiver copies for itself (shm's
/// cma, the kernel's loopback), so receivers served together may copy together, and the tables
/// coll::tuned holds were measured so; PMB at 4 ranks on shm and tcp could not tell the two
/// orders apart in binomial's bcast, and flat's, whose root has three children there, took
/// 1.2-1.4x as long from 256 KiB one after another (bench/HISTORY.md). Hence the split by
/// `node_of`. Below `one_at_a_time_bytes` a send ends at once on every stack (eager): waiting
/// for it would cost nothing and save nothing.

#include <cstddef>
#include <span>

#include "commx/coll/detail/inline_list.hpp"

namespace commx::coll::detail {

/// The smallest message a tree sends only once the previous one has ended.
inline constexpr std::size_t one_at_a_time_bytes = std::size_t{16} << 10;

/// A tree node's sends to its children (see the file comment). `send` each child in the order
/// the children should be served, then `finish` before the buffers change.
template <class Port>
class tree_sends {
 public:
  explicit tree_sends(Port& port) : port_(port), node_(port.node_of(port.rank())) {}

  template <class E>
  void send(int child, std::span<const E> data) {
    if (data.size_bytes() >= one_at_a_time_bytes && port_.node_of(child) != node_) {
      port_.send(child, data);
    } else {
      pending_.push_back(port_.isend(child, data));
    }
  }

  void finish() { port_.wait_all(pending_.view()); }

 private:
  Port& port_;
  int node_;
  pending_list<Port> pending_;
};

}  // namespace commx::coll::detail
